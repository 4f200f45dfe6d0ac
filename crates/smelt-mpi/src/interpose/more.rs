//! The collectives smelt builds from its gathers, scatters, broadcasts and
//! allreduces: `MPI_Allgather`, `MPI_Scan`, `MPI_Exscan`, `MPI_Reduce_scatter_block`,
//! `MPI_Reduce_scatter` and `MPI_Alltoall` (small messages), and the entry points of the non-blocking
//! `MPI_Ibarrier`, `MPI_Ibcast` and `MPI_Iallreduce` ([`super::nonblocking`]).
//!
//! Every choice between smelt and MPI depends only on what MPI requires to match on
//! every rank (type signatures' sizes, the datatype and operation of reductions) and
//! on the communicator's agreed cut-offs, so every rank takes the same path. Data
//! whose datatype is not dense goes through `MPI_Pack`/`MPI_Unpack`, as for the
//! gathers and scatters: the path never depends on a rank's own datatype.

use super::ffi::{self, MPI_Comm, MPI_Datatype, MPI_Op};
use super::stats::{self, Call, Why};
use super::{
    bytes_at, bytes_at_mut, finish, held, hier, hier_counting, reduction, routed, take_over, Fail,
    Held, Side,
};
use std::os::raw::{c_int, c_void};

/// Counts a fall-back of `call` for `why`; MPI runs it.
fn fell(call: Call, why: Why, pmpi: impl FnOnce() -> c_int) -> c_int {
    stats::fell_back(call, why);
    pmpi()
}

/// The bytes of one block of `side` (`count` elements of its datatype) and where a
/// dense block's data starts in it (`None`: packed); `Err(why)` for a null datatype or
/// a negative count.
fn block_of(side: &Side) -> Result<(usize, Option<isize>), Result<Why, c_int>> {
    match side.blocks() {
        Ok(Some((size, off))) if side.count >= 0 => Ok((size * side.count as usize, off)),
        Ok(_) => Err(Ok(Why::BadArgs)),
        Err(e) => Err(Err(e.0)),
    }
}

/// The `n` blocks of `side` (each `k` bytes of data) back to back: read in place
/// where the datatype is dense, else packed block by block.
///
/// # Safety
/// `side` holds `n` blocks (MPI's contract).
unsafe fn read_blocks(
    side: &Side,
    off: Option<isize>,
    n: usize,
    k: usize,
    comm: MPI_Comm,
) -> Result<Vec<u8>, Fail> {
    match off {
        // SAFETY: the caller's contract: `n` dense blocks of `k` bytes from `o`.
        Some(o) => Ok(unsafe { bytes_at(side.buf, o, n * k) }.to_vec()),
        None => {
            let mut v = Vec::with_capacity(n * k);
            for i in 0..n {
                let at = side.block(i)?;
                // SAFETY: the caller's contract: block `i` holds a block.
                v.extend(unsafe { side.read(at, None, k, comm) }?);
            }
            Ok(v)
        }
    }
}

/// Writes `data` (`n` blocks of `k` bytes, back to back) into the `n` blocks of
/// `side` (where the datatype is not dense: unpacked block by block).
///
/// # Safety
/// `side` (its `buf` the caller's receive buffer) has room for `n` blocks.
unsafe fn write_blocks(
    side: &Side,
    off: Option<isize>,
    data: &[u8],
    n: usize,
    k: usize,
    comm: MPI_Comm,
) -> Result<(), Fail> {
    match off {
        Some(o) => {
            // SAFETY: the caller's contract: room for `n` dense blocks from `o`.
            unsafe { bytes_at_mut(side.buf.cast_mut(), o, n * k) }.copy_from_slice(data);
        }
        None => {
            for i in 0..n {
                let at = side.block(i)?.cast_mut();
                // SAFETY: the caller's contract: room for block `i`.
                unsafe { side.write(at, &data[i * k..(i + 1) * k], comm) }?;
            }
        }
    }
    Ok(())
}

/// The smallest of the cut-offs at `at` (indices into `Hier::max_bytes`).
fn cut_off(h: &Held, at: &[usize]) -> usize {
    at.iter().map(|&i| h.max_bytes[i]).min().unwrap_or(0)
}

/// Whether `bytes` (per rank) fit the cut-offs at `at` and MPI's C-int byte counts
/// for `n` ranks.
fn fits(h: &Held, bytes: usize, n: usize, at: &[usize]) -> bool {
    bytes <= cut_off(h, at)
        && bytes
            .checked_mul(n)
            .is_some_and(|t| t <= c_int::MAX as usize)
}

/// `MPI_Allgather` through smelt where it can ([`Hier::allgather`]: one allreduce).
///
/// # Safety
/// MPI's contract for `MPI_Allgather`.
unsafe fn allgather(send: Side, recv: Side, comm: MPI_Comm, pmpi: impl Fn() -> c_int) -> c_int {
    let call = Call::Allgather;
    let mut h = match hier(comm, call, &pmpi) {
        Ok(h) => h,
        Err(rc) => return rc,
    };
    let (n, rank) = (h.size, h.rank);
    let in_place = send.buf == ffi::in_place().cast_const();
    let (k, roff) = match block_of(&recv) {
        Ok(x) => x,
        Err(Ok(why)) => return fell(call, why, pmpi),
        Err(Err(rc)) => return rc,
    };
    let soff = if in_place {
        None
    } else {
        match block_of(&send) {
            Ok((sk, off)) if sk == k => off,
            Ok(_) | Err(Ok(_)) => return fell(call, Why::BadArgs, pmpi),
            Err(Err(rc)) => return rc,
        }
    };
    // One allreduce of the whole result (`Hier::allgather`).
    if !fits(&h, k * n, 1, &[5]) {
        return fell(call, Why::TooLarge, pmpi);
    }
    if k == 0 {
        stats::taken(call);
        return ffi::success();
    }
    // Dense predefined datatypes on both sides (or in place), the route decided for
    // smelt: the hot lane may run this call again ([`allgather_hot`]).
    if let Some(o) = roff {
        let predefined = |dt| {
            let c = ffi::type_class(dt).0;
            c != ffi::T_DERIVED && c != ffi::T_OTHER
        };
        let dense_send = in_place || (soff.is_some() && predefined(send.dt));
        if dense_send && predefined(recv.dt) && h.routes.decided(call, k * n) == Some(true) {
            let key = gather_key(send.dt, send.count, recv.dt, recv.count);
            h.remember_allgather(key, k, o, soff);
        }
    }
    routed(&mut h, held, call, k * n, &pmpi, |h| {
        let r = (|| {
            if let Some(o) = roff {
                // Room for `n` dense blocks of `k` bytes from `o`. Straight in the receive
                // buffer, this rank's part put in place first (in place: it is there).
                // SAFETY: MPI's contract.
                let out = unsafe { bytes_at_mut(recv.buf.cast_mut(), o, n * k) };
                if !in_place {
                    let mine = &mut out[rank * k..(rank + 1) * k];
                    match soff {
                        // SAFETY: MPI's contract: the send buffer holds one block, apart from the receive buffer.
                        Some(so) => mine.copy_from_slice(unsafe { bytes_at(send.buf, so, k) }),
                        None => {
                            // SAFETY: MPI's contract: the send buffer holds one block, apart from the receive buffer.
                            let v = unsafe { send.read(send.buf, None, k, comm) }?;
                            mine.copy_from_slice(&v)
                        }
                    }
                }
                return h.allgather_placed(out, k);
            }
            let mine = if in_place {
                let at = recv.block(rank)?;
                // SAFETY: MPI's contract: in place, this rank's block of the receive buffer holds its part.
                unsafe { recv.read(at, roff, k, comm) }?
            } else {
                // SAFETY: MPI's contract: the send buffer holds one block.
                unsafe { read_blocks(&send, soff, 1, k, comm) }?
            };
            let mut all = vec![0u8; n * k];
            h.allgather(&mine, &mut all)?;
            // SAFETY: MPI's contract: room for `n` blocks.
            unsafe { write_blocks(&recv, None, &all, n, k, comm) }
        })();
        finish(r, call, comm, h)
    })
}

/// The hot lane's key of an `MPI_Allgather` ([`super::comm::HotGather`]).
#[inline(always)]
fn gather_key(
    stype: MPI_Datatype,
    scount: c_int,
    rtype: MPI_Datatype,
    rcount: c_int,
) -> [usize; 3] {
    [
        stype.0 as usize,
        rtype.0 as usize,
        ((scount as u32 as usize) << 32) | rcount as u32 as usize,
    ]
}

/// The hot lane ([`super::MPI_Bcast`]'s) for `MPI_Allgather`: a call with the
/// datatypes and counts of the one [`allgather`] remembered (dense predefined types,
/// smelt's route decided) runs as that one did, straight in the receive buffer.
/// (See [`super::comm::HotGather`].)
///
/// # Safety
/// MPI's contract for `MPI_Allgather`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn allgather_hot(
    h: &mut super::comm::Hier,
    send: *const c_void,
    scount: c_int,
    stype: MPI_Datatype,
    recv: *mut c_void,
    rcount: c_int,
    rtype: MPI_Datatype,
    comm: MPI_Comm,
) -> Option<c_int> {
    let g = h.hot_allgather(gather_key(stype, scount, rtype, rcount))?;
    let in_place = send == ffi::in_place().cast_const();
    let soff = if in_place { None } else { Some(g.soff?) };
    let (n, rank, k) = (h.size, h.rank, g.k);
    // The remembered call's datatypes and counts: `n` dense blocks of `k` bytes from
    // `roff` in the receive buffer, one from `soff` in the send buffer (MPI's contract).
    // SAFETY: as argued in the lines above.
    let out = unsafe { bytes_at_mut(recv, g.roff, n * k) };
    if let Some(so) = soff {
        // SAFETY: as above; the send buffer is apart from the receive buffer.
        out[rank * k..(rank + 1) * k].copy_from_slice(unsafe { bytes_at(send, so, k) });
    }
    let r = h.allgather_placed(out, k);
    stats::express(Call::Allgather);
    Some(finish(r, Call::Allgather, comm, h))
}

/// `MPI_Allgatherv` through smelt where it can: the parts (`counts[i]` elements of
/// `recv.dt` from rank `i`) back to back in a vector of all of them, gathered by one
/// allreduce ([`Hier::allgather_at`]), then each put at its displacement (what lies
/// between the parts in the receive buffer is left alone).
///
/// # Safety
/// MPI's contract for `MPI_Allgatherv`: `counts` and `displs` hold one entry per rank.
unsafe fn allgatherv(
    send: Side,
    recv: Side,
    counts: *const c_int,
    displs: *const c_int,
    comm: MPI_Comm,
    pmpi: impl Fn() -> c_int,
) -> c_int {
    let call = Call::Allgatherv;
    let mut h = match hier(comm, call, &pmpi) {
        Ok(h) => h,
        Err(rc) => return rc,
    };
    let (n, rank) = (h.size, h.rank);
    if counts.is_null() || displs.is_null() {
        return fell(call, Why::BadArgs, pmpi);
    }
    // SAFETY: MPI's contract: one count and one displacement per rank.
    let (counts, displs) = unsafe {
        (
            std::slice::from_raw_parts(counts, n),
            std::slice::from_raw_parts(displs, n),
        )
    };
    if counts.iter().any(|&c| c < 0) {
        return fell(call, Why::BadArgs, pmpi);
    }
    // One element of the receive type, and where a dense one's data starts.
    let (size, roff) = match recv.blocks() {
        Ok(Some(x)) => x,
        Ok(None) => return fell(call, Why::BadArgs, pmpi),
        Err(e) => return e.0,
    };
    let at: Vec<usize> = counts
        .iter()
        .scan(0usize, |sum, &c| {
            let o = *sum;
            *sum += c as usize * size;
            Some(o)
        })
        .collect();
    let total = at[n - 1] + counts[n - 1] as usize * size;
    let k = counts[rank] as usize * size;
    let in_place = send.buf == ffi::in_place().cast_const();
    let soff = if in_place {
        None
    } else {
        match block_of(&send) {
            Ok((sk, off)) if sk == k => off,
            Ok(_) | Err(Ok(_)) => return fell(call, Why::BadArgs, pmpi),
            Err(Err(rc)) => return rc,
        }
    };
    if !fits(&h, total, 1, &[5]) {
        return fell(call, Why::TooLarge, pmpi);
    }
    if total == 0 {
        stats::taken(call);
        return ffi::success();
    }
    // MPI_Aint is isize with Open MPI on x86-64, another integer elsewhere.
    #[allow(clippy::unnecessary_cast)]
    let extent = match ffi::extents(recv.dt) {
        Ok(e) => e.extent as isize,
        Err(e) => return e.0,
    };
    // Rank i's part in the receive buffer, as a side of `counts[i]` elements.
    let part = |i: usize| Side {
        buf: recv
            .buf
            .cast::<u8>()
            .wrapping_offset((displs[i] as isize).wrapping_mul(extent))
            .cast(),
        count: counts[i],
        dt: recv.dt,
    };
    routed(&mut h, held, call, total, &pmpi, |h| {
        let r = (|| {
            let mut all = vec![0u8; total];
            let mine = at[rank]..at[rank] + k;
            if k > 0 {
                let data = if in_place {
                    let p = part(rank);
                    // MPI's contract: in place, this rank's part lies in the
                    // receive buffer at its displacement.
                    // SAFETY: as argued in the lines above.
                    unsafe { p.read(p.buf, roff, k, comm) }?
                } else {
                    // SAFETY: MPI's contract: the send buffer holds `scount` elements.
                    unsafe { read_blocks(&send, soff, 1, k, comm) }?
                };
                all[mine.clone()].copy_from_slice(&data);
            }
            h.allgather_at(&mut all, mine)?;
            for i in (0..n).filter(|&i| counts[i] > 0) {
                let p = part(i);
                let ki = counts[i] as usize * size;
                let data = &all[at[i]..at[i] + ki];
                match roff {
                    Some(o) => {
                        // SAFETY: MPI's contract: room for `counts[i]` dense elements at the part's displacement.
                        let out = unsafe { bytes_at_mut(p.buf.cast_mut(), o, ki) };
                        out.copy_from_slice(data)
                    }
                    // SAFETY: as above (unpacked where not dense).
                    None => unsafe { p.write(p.buf.cast_mut(), data, comm) }?,
                }
            }
            Ok(())
        })();
        finish(r, call, comm, h)
    })
}

/// `MPI_Scan` (`exclusive` false) or `MPI_Exscan` through smelt where it can: every
/// rank's input gathered to every rank ([`Hier::allgather`]), each folding the prefix
/// it needs in rank order (small messages).
///
/// # Safety
/// MPI's contract for `MPI_Scan`/`MPI_Exscan`.
#[allow(clippy::too_many_arguments)]
unsafe fn scan(
    exclusive: bool,
    send: *const c_void,
    recv: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    pmpi: impl Fn() -> c_int,
) -> c_int {
    let call = if exclusive { Call::Exscan } else { Call::Scan };
    if super::never_taken(6) {
        return fell(call, Why::MpiFaster, pmpi);
    }
    let mut h = match hier_counting(comm, call, false, &pmpi) {
        Ok(h) => h,
        Err(rc) => return rc,
    };
    if count < 0 {
        return fell(call, Why::BadArgs, pmpi);
    }
    let (n, rank) = (h.size, h.rank);
    // Every rank's input is gathered to every rank (one allreduce of ranks × `len`
    // bytes), each folding the inputs it needs.
    if h.max_bytes[6] == 0 {
        return fell(call, Why::MpiFaster, pmpi);
    }
    let max = cut_off(&h, &[6]) / n;
    let (red, len) = match reduction(&mut h.kinds, call, count, dt, op, max, &pmpi) {
        Ok(x) => x,
        Err(rc) => return rc,
    };
    let input = if send == ffi::in_place().cast_const() {
        recv.cast_const()
    } else {
        send
    };
    routed(&mut h, held, call, n * len, &pmpi, |h| {
        // SAFETY: MPI's contract: the input holds `count` elements of `dt` (`len` bytes).
        let mine = unsafe { bytes_at(input, 0, len) }.to_vec();
        let r = (|| {
            let mut all = vec![0u8; n * len];
            h.allgather(&mine, &mut all)?;
            // The fold of ranks 0..=rank (0..rank), in rank order.
            let upto = if exclusive { rank } else { rank + 1 };
            if upto > 0 {
                let mut acc = all[..len].to_vec();
                for i in 1..upto {
                    (red.combine)(&mut acc, &all[i * len..(i + 1) * len]);
                }
                // SAFETY: MPI's contract: `recv` has room for `count` elements of `dt`; `acc` is this crate's buffer.
                unsafe { bytes_at_mut(recv, 0, len) }.copy_from_slice(&acc);
            }
            Ok(())
        })();
        finish(r, call, comm, h)
    })
}

/// How many elements each rank keeps of a reduce-scatter.
#[derive(Clone, Copy)]
enum Counts {
    /// `MPI_Reduce_scatter_block`: this many, every rank.
    Block(c_int),
    /// `MPI_Reduce_scatter`: rank `i` keeps element count `i` of this array (one per
    /// rank of the communicator, the same on every rank: MPI's rule).
    Each(*const c_int),
}

/// `MPI_Reduce_scatter_block` and `MPI_Reduce_scatter` through smelt where they can:
/// smelt's allreduce of the whole vector (the ranks' parts back to back), each rank
/// keeping its part. Every rank sees the same counts, hence the same total, path and
/// cut-off (`MPI_Reduce_scatter_block`'s).
///
/// # Safety
/// MPI's contract for `MPI_Reduce_scatter_block` / `MPI_Reduce_scatter` (for
/// [`Counts::Each`], an array of one count per rank).
#[allow(clippy::too_many_arguments)]
unsafe fn reduce_scatter(
    call: Call,
    send: *const c_void,
    recv: *mut c_void,
    counts: Counts,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    pmpi: impl Fn() -> c_int,
) -> c_int {
    let mut h = match hier(comm, call, &pmpi) {
        Ok(h) => h,
        Err(rc) => return rc,
    };
    let (n, rank) = (h.size, h.rank);
    // Elements before this rank's part, its own, and the total (within an int, as
    // MPI's counts are); `None` for a negative count or a null array.
    let parts = (|| -> Option<(i64, i64, i64)> {
        match counts {
            Counts::Block(c) => {
                let c = i64::from(c);
                (c >= 0).then_some((c * rank as i64, c, c * n as i64))
            }
            Counts::Each(p) => {
                if p.is_null() {
                    return None;
                }
                // SAFETY: MPI's contract: one count per rank of the communicator.
                let each = unsafe { std::slice::from_raw_parts(p, n) };
                let mut before = 0i64;
                let mut total = 0i64;
                for (i, &c) in each.iter().enumerate() {
                    if c < 0 {
                        return None;
                    }
                    if i < rank {
                        before += i64::from(c);
                    }
                    total += i64::from(c);
                }
                Some((before, i64::from(each[rank]), total))
            }
        }
    })()
    .filter(|&(_, _, t)| t <= c_int::MAX as i64);
    let Some((before, mine, total)) = parts else {
        return fell(call, Why::BadArgs, pmpi);
    };
    let max = h.max_bytes[7];
    let (red, len) = match reduction(&mut h.kinds, call, total as c_int, dt, op, max, &pmpi) {
        Ok(x) => x,
        Err(rc) => return rc,
    };
    // Bytes per element (none when the whole vector is empty: nothing to keep).
    let elt = if total > 0 { len / total as usize } else { 0 };
    let (from, keep) = (before as usize * elt, mine as usize * elt);
    let input = if send == ffi::in_place().cast_const() {
        recv.cast_const()
    } else {
        send
    };
    routed(&mut h, held, call, len, &pmpi, |h| {
        // An empty vector may come with null buffers: nothing is read or written then.
        let mut acc = if len == 0 {
            Vec::new()
        } else {
            // SAFETY: MPI's contract: the input holds the whole vector (`total` elements of `dt`).
            unsafe { bytes_at(input, 0, len) }.to_vec()
        };
        let r = h.allreduce(&mut acc, red);
        if r.is_ok() && keep > 0 {
            // SAFETY: MPI's contract: `recv` has room for this rank's part; `acc` is this crate's buffer.
            unsafe { bytes_at_mut(recv, 0, keep) }.copy_from_slice(&acc[from..from + keep]);
        }
        finish(r, call, comm, h)
    })
}

/// `MPI_Alltoall` of small blocks through smelt where it can: every rank's blocks
/// gathered to every rank ([`Hier::allgather`]), each keeping its own.
///
/// # Safety
/// MPI's contract for `MPI_Alltoall`.
unsafe fn alltoall(send: Side, recv: Side, comm: MPI_Comm, pmpi: impl Fn() -> c_int) -> c_int {
    let call = Call::Alltoall;
    if super::never_taken(8) {
        return fell(call, Why::MpiFaster, pmpi);
    }
    let mut h = match hier_counting(comm, call, false, &pmpi) {
        Ok(h) => h,
        Err(rc) => return rc,
    };
    if h.max_bytes[8] == 0 {
        return fell(call, Why::MpiFaster, pmpi);
    }
    let (n, rank) = (h.size, h.rank);
    let in_place = send.buf == ffi::in_place().cast_const();
    let (k, roff) = match block_of(&recv) {
        Ok(x) => x,
        Err(Ok(why)) => return fell(call, why, pmpi),
        Err(Err(rc)) => return rc,
    };
    let soff = if in_place {
        roff
    } else {
        match block_of(&send) {
            Ok((sk, off)) if sk == k => off,
            Ok(_) | Err(Ok(_)) => return fell(call, Why::BadArgs, pmpi),
            Err(Err(rc)) => return rc,
        }
    };
    // Every rank's `n` blocks go to every rank (one allreduce of ranks × ranks × `k`
    // bytes), each keeping the blocks meant for it.
    if !fits(&h, k * n * n, 1, &[8]) {
        return fell(call, Why::TooLarge, pmpi);
    }
    if k == 0 {
        stats::taken(call);
        return ffi::success();
    }
    let from = if in_place { recv } else { send };
    routed(&mut h, held, call, k * n * n, &pmpi, |h| {
        let r = (|| {
            let row = n * k;
            let mut all = vec![0u8; n * row];
            let mine = &mut all[rank * row..(rank + 1) * row];
            match soff {
                // SAFETY: MPI's contract: `from` holds `n` dense blocks from `o`.
                Some(o) => mine.copy_from_slice(unsafe { bytes_at(from.buf, o, row) }),
                // SAFETY: MPI's contract: `from` holds `n` blocks.
                None => mine.copy_from_slice(&unsafe { read_blocks(&from, None, n, k, comm) }?),
            }
            h.allgather_placed(&mut all, row)?;
            // Block `rank` of every rank j, in order of j.
            if let Some(o) = roff {
                // MPI's contract: room for `n` dense blocks from `o` (in place,
                // its data was copied into `all` above).
                // SAFETY: as argued in the lines above.
                let out = unsafe { bytes_at_mut(recv.buf.cast_mut(), o, row) };
                for j in 0..n {
                    let at = j * row + rank * k;
                    out[j * k..(j + 1) * k].copy_from_slice(&all[at..at + k]);
                }
                return Ok(());
            }
            let mut out = vec![0u8; row];
            for j in 0..n {
                let at = j * row + rank * k;
                out[j * k..(j + 1) * k].copy_from_slice(&all[at..at + k]);
            }
            // SAFETY: MPI's contract: room for `n` blocks in the receive buffer.
            unsafe { write_blocks(&recv, None, &out, n, k, comm) }
        })();
        finish(r, call, comm, h)
    })
}

/// `MPI_Allgather`, taken over (see the crate documentation).
///
/// # Safety
/// MPI's contract for `MPI_Allgather`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Allgather(
    send: *const c_void,
    scount: c_int,
    stype: MPI_Datatype,
    recv: *mut c_void,
    rcount: c_int,
    rtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    // SAFETY: used for this call only; the caller upholds MPI's contract.
    if let Some(h) = unsafe { super::last_hier(comm) } {
        // SAFETY: as above.
        if let Some(rc) =
            unsafe { allgather_hot(h, send, scount, stype, recv, rcount, rtype, comm) }
        {
            return rc;
        }
    }
    let pmpi = || {
        // SAFETY: the caller's arguments, passed on unchanged.
        unsafe { mpi_sys::PMPI_Allgather(send, scount, stype, recv, rcount, rtype, comm) }
    };
    let s = Side {
        buf: send,
        count: scount,
        dt: stype,
    };
    let r = Side {
        buf: recv.cast_const(),
        count: rcount,
        dt: rtype,
    };
    // SAFETY: the caller upholds MPI's contract.
    take_over("MPI_Allgather", pmpi, || unsafe {
        allgather(s, r, comm, pmpi)
    })
}

/// `MPI_Allgatherv`, taken over (see the crate documentation).
///
/// # Safety
/// MPI's contract for `MPI_Allgatherv`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn MPI_Allgatherv(
    send: *const c_void,
    scount: c_int,
    stype: MPI_Datatype,
    recv: *mut c_void,
    rcounts: *const c_int,
    displs: *const c_int,
    rtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe {
        mpi_sys::PMPI_Allgatherv(send, scount, stype, recv, rcounts, displs, rtype, comm)
    };
    let s = Side {
        buf: send,
        count: scount,
        dt: stype,
    };
    let r = Side {
        buf: recv.cast_const(),
        count: 0,
        dt: rtype,
    };
    // SAFETY: the caller upholds MPI's contract.
    take_over("MPI_Allgatherv", pmpi, || unsafe {
        allgatherv(s, r, rcounts, displs, comm, pmpi)
    })
}

/// `MPI_Alltoall`, taken over at small sizes (see the crate documentation).
///
/// # Safety
/// MPI's contract for `MPI_Alltoall`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Alltoall(
    send: *const c_void,
    scount: c_int,
    stype: MPI_Datatype,
    recv: *mut c_void,
    rcount: c_int,
    rtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Alltoall(send, scount, stype, recv, rcount, rtype, comm) };
    let s = Side {
        buf: send,
        count: scount,
        dt: stype,
    };
    let r = Side {
        buf: recv.cast_const(),
        count: rcount,
        dt: rtype,
    };
    // SAFETY: the caller upholds MPI's contract.
    take_over("MPI_Alltoall", pmpi, || unsafe {
        alltoall(s, r, comm, pmpi)
    })
}

/// `MPI_Scan`, taken over (see the crate documentation).
///
/// # Safety
/// MPI's contract for `MPI_Scan`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Scan(
    send: *const c_void,
    recv: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Scan(send, recv, count, dt, op, comm) };
    // SAFETY: the caller upholds MPI's contract.
    take_over("MPI_Scan", pmpi, || unsafe {
        scan(false, send, recv, count, dt, op, comm, pmpi)
    })
}

/// `MPI_Exscan`, taken over (see the crate documentation).
///
/// # Safety
/// MPI's contract for `MPI_Exscan`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Exscan(
    send: *const c_void,
    recv: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Exscan(send, recv, count, dt, op, comm) };
    // SAFETY: the caller upholds MPI's contract.
    take_over("MPI_Exscan", pmpi, || unsafe {
        scan(true, send, recv, count, dt, op, comm, pmpi)
    })
}

/// `MPI_Reduce_scatter_block`, taken over (see the crate documentation).
///
/// # Safety
/// MPI's contract for `MPI_Reduce_scatter_block`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce_scatter_block(
    send: *const c_void,
    recv: *mut c_void,
    rcount: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Reduce_scatter_block(send, recv, rcount, dt, op, comm) };
    // SAFETY: the caller upholds MPI's contract.
    take_over("MPI_Reduce_scatter_block", pmpi, || unsafe {
        let counts = Counts::Block(rcount);
        reduce_scatter(
            Call::ReduceScatterBlock,
            send,
            recv,
            counts,
            dt,
            op,
            comm,
            pmpi,
        )
    })
}

/// `MPI_Reduce_scatter`, taken over (see the crate documentation).
///
/// # Safety
/// MPI's contract for `MPI_Reduce_scatter`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce_scatter(
    send: *const c_void,
    recv: *mut c_void,
    rcounts: *const c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Reduce_scatter(send, recv, rcounts, dt, op, comm) };
    // SAFETY: the caller upholds MPI's contract.
    take_over("MPI_Reduce_scatter", pmpi, || unsafe {
        let counts = Counts::Each(rcounts);
        reduce_scatter(Call::ReduceScatter, send, recv, counts, dt, op, comm, pmpi)
    })
}

/// `MPI_Ibarrier`: smelt's where it would take `MPI_Barrier` ([`super::nonblocking`]).
///
/// # Safety
/// MPI's contract for `MPI_Ibarrier`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Ibarrier(comm: MPI_Comm, req: *mut mpi_sys::MPI_Request) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Ibarrier(comm, req) };
    take_over("MPI_Ibarrier", pmpi, || {
        super::nonblocking::ibarrier(comm, req, pmpi)
    })
}

/// `MPI_Ibcast`: smelt's where it would take `MPI_Bcast` ([`super::nonblocking`]).
///
/// # Safety
/// MPI's contract for `MPI_Ibcast`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Ibcast(
    buf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    req: *mut mpi_sys::MPI_Request,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Ibcast(buf, count, dt, root, comm, req) };
    // SAFETY: the caller upholds MPI's contract.
    take_over("MPI_Ibcast", pmpi, || unsafe {
        super::nonblocking::ibcast(buf, count, dt, root, comm, req, pmpi)
    })
}

/// `MPI_Iallreduce`: smelt's where it would take `MPI_Allreduce`
/// ([`super::nonblocking`]).
///
/// # Safety
/// MPI's contract for `MPI_Iallreduce`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Iallreduce(
    send: *const c_void,
    recv: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    req: *mut mpi_sys::MPI_Request,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Iallreduce(send, recv, count, dt, op, comm, req) };
    // SAFETY: the caller upholds MPI's contract.
    take_over("MPI_Iallreduce", pmpi, || unsafe {
        super::nonblocking::iallreduce(send, recv, count, dt, op, comm, req, pmpi)
    })
}
