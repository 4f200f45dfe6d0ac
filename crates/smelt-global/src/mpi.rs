//! Arrays over MPI ranks grouped into nodes (feature `mpi`): what
//! [`GlobalArray::from_world`] makes over a world of MPI ranks
//! (`smelt_mesh::World::from_mpi`).
//!
//! The ranks are grouped into nodes as the world says (the ranks that share memory,
//! or emulated nodes of `SMELT_RANKS_PER_NODE` consecutive ranks). Rank `r` owns
//! block `r` of every array. The blocks of a node's ranks lie in one region of the
//! node's world segment (the one segment every service of the world shares): a rank
//! reads and writes its node's elements directly. Every rank also exposes its block
//! in an MPI window (`MPI_Win_create` over its part of the region, one
//! passive-target epoch for the array's life, `MPI_Win_lock_all`): elements on other
//! nodes are read with `MPI_Get` + `MPI_Win_flush`, written with `MPI_Put` (completed
//! at the next write-back fence or barrier: `MPI_Win_flush_all`), combined with
//! `MPI_Accumulate` and `MPI_Fetch_and_op` (`AccumulateOp::Replace` with an
//! `MPI_Compare_and_swap` loop).
//!
//! **Atomicity.** MPI's accumulates are atomic only with each other, so when the
//! array spans more than one node every accumulate goes through MPI, to this node's
//! elements too; on a single node they are CPU atomics.
//!
//! **Memory model.** MPI's unified model: a barrier is `MPI_Win_flush_all`,
//! `MPI_Win_sync`, `MPI_Ibarrier`, `MPI_Win_sync` (with memory fences), so loads and
//! stores on the segment and RMA from other nodes are ordered by it.
//!
//! **Collective calls.** [`GlobalArray::from_world`] and dropping an array
//! (`MPI_Win_free`) are collective: every rank creates and drops its arrays in the
//! same order, and drops them before MPI is finalised. An MPI call that fails ends the job (MPI's
//! default error handler); every wait for other ranks in set-up and barriers is
//! bounded by the world's timeout.

use crate::array::{Layout, Memory, Net, CTRL_WORDS};
use crate::cache::LineCache;
use crate::{AccumulateOp, ElemType, Element, GlobalArray, GlobalConfig, GlobalError};
use smelt_mesh::mpi::{self as mesh_mpi, ffi, MpiCalls, MpiError};
use std::marker::PhantomData;
use std::os::raw::{c_int, c_void};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The MPI call's result in this crate's errors.
fn check(what: &'static str, rc: c_int) -> Result<(), GlobalError> {
    Ok(mesh_mpi::check(what, rc)?)
}

impl From<MpiError> for GlobalError {
    fn from(e: MpiError) -> GlobalError {
        match e {
            MpiError::Timeout { call, after } => GlobalError::Timeout {
                what: format!("in {call} (waiting for the other MPI ranks)"),
                after,
            },
            e => GlobalError::Mpi(e.to_string()),
        }
    }
}

fn ibarrier(comm: ffi::MPI_Comm, timeout: Duration) -> Result<(), MpiError> {
    mesh_mpi::barrier::<MpiCalls>(comm, Some(timeout))
}

/// Measures a plain `MPI_Get` of 8 bytes from rank `target`: a window of one word
/// per rank (`MPI_Win_allocate` if `allocate`, else `MPI_Win_create` over a word
/// of this process's heap, as the arrays' windows are), `MPI_Win_lock_all`, then
/// `MPI_Get` + `MPI_Win_flush` per operation. Returns rank `measurer`'s mean
/// nanoseconds per get, the median of `samples` samples of `rounds` (0 at the
/// other ranks). A collective call over a world of MPI ranks
/// (`smelt_mesh::World::from_mpi`; the others expose their window and wait): what
/// `smelt-bench-mpi global bench` compares the arrays' gets with.
pub fn plain_get_ns(
    world: &smelt_mesh::World,
    measurer: usize,
    target: usize,
    rounds: usize,
    samples: usize,
    allocate: bool,
) -> Result<f64, GlobalError> {
    let m = world
        .mpi()
        .ok_or_else(|| GlobalError::Invalid("not a world of MPI ranks".into()))?;
    let (comm, timeout) = (m.comm(), m.timeout());
    let mut base: *mut c_void = std::ptr::null_mut();
    let heap = Box::new(0u64);
    // SAFETY: a placeholder written over by MPI_Win_allocate / MPI_Win_create.
    let mut win: ffi::MPI_Win = unsafe { ffi::RSMPI_WIN_NULL };
    if allocate {
        // 8 bytes with a displacement unit of 8 over this world's
        // communicator; `base` and `win` are valid out-pointers.
        // SAFETY: as argued in the lines above.
        check("MPI_Win_allocate", unsafe {
            ffi::MPI_Win_allocate(
                8,
                8,
                ffi::RSMPI_INFO_NULL,
                comm,
                (&mut base as *mut *mut c_void).cast(),
                &mut win,
            )
        })?;
    } else {
        base = (&*heap as *const u64) as *mut c_void;
        // `heap` is 8 bytes that outlive the window (freed below, before
        // `heap` drops); collective over this world's communicator.
        // SAFETY: as argued in the lines above.
        check("MPI_Win_create", unsafe {
            ffi::MPI_Win_create(base, 8, 8, ffi::RSMPI_INFO_NULL, comm, &mut win)
        })?;
    }
    // `base` points at the window's 8 bytes (MPI's or `heap`), written
    // before any rank reads them (the barrier below).
    // SAFETY: as argued in the lines above.
    unsafe { (base as *mut u64).write(0x5EED) };
    // SAFETY: `win` is the window just made.
    check("MPI_Win_lock_all", unsafe { ffi::MPI_Win_lock_all(0, win) })?;
    ibarrier(comm, timeout)?;
    let mut times = Vec::new();
    let mut result = Ok(());
    if world.rank().index() == measurer {
        let mut v = 0u64;
        for _ in 0..samples.max(1) {
            let t = Instant::now();
            for _ in 0..rounds.max(1) {
                // `v` is 8 writable bytes that stay alive until the flush
                // below completes the get; the target's window has one word.
                // SAFETY: as argued in the lines above.
                let rc = unsafe {
                    ffi::MPI_Get(
                        (&mut v as *mut u64).cast(),
                        1,
                        ffi::RSMPI_UINT64_T,
                        target as c_int,
                        0,
                        1,
                        ffi::RSMPI_UINT64_T,
                        win,
                    )
                };
                // SAFETY: `win` is in a passive epoch (lock_all above).
                let rc2 = unsafe { ffi::MPI_Win_flush(target as c_int, win) };
                if let Err(e) = check("MPI_Get", rc).and(check("MPI_Win_flush", rc2)) {
                    result = Err(e);
                    break;
                }
            }
            times.push(t.elapsed().as_nanos() as f64 / rounds.max(1) as f64);
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() && v != 0x5EED {
            result = Err(GlobalError::Mpi(format!("MPI_Get read {v:#x}, not 0x5eed")));
        }
    }
    let done = ibarrier(comm, timeout).map_err(GlobalError::from);
    // SAFETY: the epoch opened above; every rank's gets are flushed.
    unsafe { ffi::MPI_Win_unlock_all(win) };
    // SAFETY: collective over the communicator, every rank reaches it.
    unsafe { ffi::MPI_Win_free(&mut win) };
    drop(heap);
    result?;
    done?;
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(times.get(times.len() / 2).copied().unwrap_or(0.0))
}

/// What every rank says about the array it makes: its type and length.
fn array_word<T: Element>(len: u64) -> u64 {
    (T::TYPE as u64) | (len << 8)
}

/// Ok when every rank's word of [`array_word`] (`all`) is this rank's.
fn same_array<T: Element>(all: &[u64], len: u64) -> Result<(), GlobalError> {
    let mine = array_word::<T>(len);
    match all.iter().find(|v| **v != mine) {
        None => Ok(()),
        Some(other) => Err(match ElemType::from_id((*other & 0xFF) as u32) {
            Some(t) if t != T::TYPE => GlobalError::WrongType {
                array: t,
                requested: T::TYPE,
            },
            _ => GlobalError::Invalid(format!(
                "ranks made arrays of different lengths ({len} here, {} elsewhere)",
                other >> 8
            )),
        }),
    }
}

/// Where each block of this rank's node lies in the node's memory (after the control
/// words; `None` for blocks of other nodes), the node's words, its members, and this
/// rank's place among them.
fn node_blocks(
    layout: &Layout,
    node_of: &[usize],
    me: usize,
) -> (Vec<Option<usize>>, usize, u32, u32) {
    let mut base = vec![None; node_of.len()];
    let mut words = CTRL_WORDS;
    let mut node_members = 0u32;
    let mut node_rank = 0u32;
    for (r, slot) in base.iter_mut().enumerate() {
        if node_of[r] == node_of[me] {
            if r == me {
                node_rank = node_members;
            }
            node_members += 1;
            *slot = Some(words);
            let b = layout.block(r);
            words += (b.end - b.start) as usize;
        }
    }
    (base, words, node_members, node_rank)
}

/// The blocks' lengths, by owner.
fn block_lens(layout: &Layout, size: usize) -> Vec<u64> {
    (0..size)
        .map(|r| {
            let b = layout.block(r);
            b.end - b.start
        })
        .collect()
}

/// [`GlobalArray::from_world`] for a world of MPI ranks (`World::from_mpi`): a
/// collective call over the world's communicator. The blocks of a node's ranks lie in
/// a region of the node's world segment (the one segment every service of the world
/// shares); every rank exposes its block in an MPI window over the world's
/// communicator, for the ranks of other nodes (see the [module
/// documentation](self)).
pub(crate) fn array_from_world<T: Element>(
    world: &smelt_mesh::World,
    len: u64,
    cfg: GlobalConfig,
) -> Result<GlobalArray<T>, GlobalError> {
    let m = world
        .mpi()
        .ok_or_else(|| GlobalError::Invalid("not a world of MPI ranks".into()))?;
    let (comm, t) = (m.comm(), m.timeout());
    let (me, size) = (world.rank().index(), world.size());
    let layout = Layout::new(len, size)?;
    same_array::<T>(
        &mesh_mpi::allgather_words::<MpiCalls>(comm, &[array_word::<T>(len)], Some(t))?,
        len,
    )?;
    let node_of: Vec<usize> = (0..size)
        .map(|r| world.node_of(smelt_mesh::Rank(r)).unwrap_or(r))
        .collect();
    let (base, words, node_members, _) = node_blocks(&layout, &node_of, me);
    let region = words
        .checked_mul(8)
        .ok_or_else(|| GlobalError::Invalid(format!("an array of {len} elements is too large")))
        .and_then(|bytes| world.region(bytes).map_err(GlobalError::from));
    // Every rank has its node's memory (or every rank fails).
    let ok = mesh_mpi::all::<MpiCalls>(comm, region.is_ok(), Some(t))?;
    let region = region?;
    if !ok {
        return Err(GlobalError::Shm(
            "a rank on another node could not make its node's part of the array".into(),
        ));
    }
    let block = layout.block(me);
    let mine = &region.words()[base[me].unwrap_or(CTRL_WORDS)..];
    // The array's own communicator: it may outlive the world.
    let mut comm = mesh_mpi::dup::<MpiCalls>(comm)?;
    let mut net = match MpiNet::create(
        comm,
        mine.as_ptr() as *mut c_void,
        (block.end - block.start) as usize,
        world.nodes() > 1,
        block_lens(&layout, size),
        cfg.cache_lines,
    ) {
        Ok(net) => net,
        Err(e) => {
            mesh_mpi::free::<MpiCalls>(&mut comm);
            return Err(e);
        }
    };
    net.owns_comm = true;
    Ok(GlobalArray {
        mem: Memory::World {
            region,
            job: world.shm_member().cloned(),
        },
        layout,
        rank: me,
        node_members: node_members as u64,
        base,
        net: Some(Box::new(net)),
        cfg,
        _t: PhantomData,
    })
}

/// An MPI datatype and operation for accumulating elements of `ty` that sit one per
/// 64-bit word (32-bit elements in the word's low half).
fn word_type(ty: ElemType, resized32: &[ffi::MPI_Datatype; 2]) -> ffi::MPI_Datatype {
    // SAFETY: reading MPI's predefined datatype handles.
    unsafe {
        match ty {
            ElemType::U64 => ffi::RSMPI_UINT64_T,
            ElemType::I64 => ffi::RSMPI_INT64_T,
            ElemType::F64 => ffi::RSMPI_DOUBLE,
            ElemType::U32 => resized32[0],
            ElemType::I32 => resized32[1],
        }
    }
}

fn mpi_op(op: AccumulateOp) -> Option<ffi::MPI_Op> {
    // SAFETY: reading MPI's predefined operation handles.
    unsafe {
        match op {
            AccumulateOp::Sum => Some(ffi::RSMPI_SUM),
            AccumulateOp::Min => Some(ffi::RSMPI_MIN),
            AccumulateOp::Max => Some(ffi::RSMPI_MAX),
            AccumulateOp::Replace => None,
        }
    }
}

struct NetState {
    /// Origin buffers of puts and accumulates not yet completed, by target.
    pending: Vec<(usize, Box<[u64]>)>,
    pending_words: usize,
    /// Targets with operations not yet completed.
    dirty: Vec<bool>,
    /// Lines of other ranks' blocks read since the last invalidate fence.
    cache: LineCache,
}

/// Writes buffered past this many words are completed at once.
const MAX_PENDING_WORDS: usize = 1 << 16;

/// An array's window: this rank's block, exposed to every rank.
struct MpiNet {
    win: ffi::MPI_Win,
    /// `MPI_UINT32_T` and `MPI_INT32_T` resized to an extent of 8 bytes.
    resized32: [ffi::MPI_Datatype; 2],
    atomics_over_net: bool,
    comm: ffi::MPI_Comm,
    /// Whether `comm` is the array's own (a duplicate freed with the window): arrays of
    /// a world may outlive it.
    owns_comm: bool,
    /// Elements of each rank's block.
    block_len: Vec<u64>,
    state: Mutex<NetState>,
}

// SAFETY: the window and datatypes are process-wide MPI handles; every call on them
// holds `state`'s lock (one thread at a time, as MPI_THREAD_SERIALIZED requires).
unsafe impl Send for MpiNet {}
// SAFETY: as above.
unsafe impl Sync for MpiNet {}

impl MpiNet {
    fn create(
        comm: ffi::MPI_Comm,
        base: *mut c_void,
        elements: usize,
        atomics_over_net: bool,
        block_len: Vec<u64>,
        cache_lines: usize,
    ) -> Result<MpiNet, GlobalError> {
        let size = block_len.len();
        // SAFETY: placeholders written over below.
        let mut resized32 = unsafe { [ffi::RSMPI_DATATYPE_NULL, ffi::RSMPI_DATATYPE_NULL] };
        // SAFETY: reading MPI's predefined datatype handles.
        let olds = unsafe { [ffi::RSMPI_UINT32_T, ffi::RSMPI_INT32_T] };
        for (t, old) in resized32.iter_mut().zip(olds) {
            // A predefined type resized to lower bound 0 and extent 8 (one
            // element per word); `t` is a valid out-pointer, committed before use.
            // SAFETY: as argued in the lines above.
            check("MPI_Type_create_resized", unsafe {
                ffi::MPI_Type_create_resized(old, 0, 8, t)
            })?;
            // SAFETY: `t` was just created.
            check("MPI_Type_commit", unsafe { ffi::MPI_Type_commit(t) })?;
        }
        // SAFETY: a placeholder written over by MPI_Win_create.
        let mut win: ffi::MPI_Win = unsafe { ffi::RSMPI_WIN_NULL };
        // `base` points at `elements` words of this rank's block, mapped for the window's
        // life; displacement unit 8 (a word); collective over `comm`. The array holds the
        // segment and frees the window before it.
        // SAFETY: as argued in the lines above.
        check("MPI_Win_create", unsafe {
            ffi::MPI_Win_create(
                base,
                (elements * 8) as ffi::MPI_Aint,
                8,
                ffi::RSMPI_INFO_NULL,
                comm,
                &mut win,
            )
        })?;
        // SAFETY: `win` was just created; one shared epoch to every rank.
        check("MPI_Win_lock_all", unsafe { ffi::MPI_Win_lock_all(0, win) })?;
        Ok(MpiNet {
            win,
            resized32,
            atomics_over_net,
            comm,
            owns_comm: false,
            block_len,
            state: Mutex::new(NetState {
                pending: Vec::new(),
                pending_words: 0,
                dirty: vec![false; size],
                cache: LineCache::new(cache_lines),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, NetState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn flush(&self, st: &mut NetState, target: usize) -> Result<(), GlobalError> {
        if !st.dirty[target] {
            return Ok(());
        }
        // SAFETY: `win` is in its passive epoch; `target` is a rank of its group.
        check("MPI_Win_flush", unsafe {
            ffi::MPI_Win_flush(target as c_int, self.win)
        })?;
        st.dirty[target] = false;
        let mut freed = 0;
        st.pending.retain(|(t, b)| {
            let keep = *t != target;
            if !keep {
                freed += b.len();
            }
            keep
        });
        st.pending_words -= freed;
        Ok(())
    }

    fn flush_all(&self, st: &mut NetState) -> Result<(), GlobalError> {
        // SAFETY: `win` is in its passive epoch.
        check("MPI_Win_flush_all", unsafe {
            ffi::MPI_Win_flush_all(self.win)
        })?;
        st.pending.clear();
        st.pending_words = 0;
        st.dirty.iter_mut().for_each(|d| *d = false);
        Ok(())
    }

    /// Keeps `words` until the operation reading them completes; `f` starts it.
    fn buffered(
        &self,
        owner: usize,
        words: &[u64],
        f: impl FnOnce(*const c_void) -> c_int,
        what: &'static str,
    ) -> Result<(), GlobalError> {
        let mut st = self.lock();
        let buf: Box<[u64]> = words.into();
        check(what, f(buf.as_ptr().cast()))?;
        st.pending_words += buf.len();
        st.pending.push((owner, buf));
        st.dirty[owner] = true;
        if st.pending_words > MAX_PENDING_WORDS {
            self.flush_all(&mut st)?;
        }
        Ok(())
    }

    fn cas_replace(&self, owner: usize, offset: u64, word: u64) -> Result<u64, GlobalError> {
        let mut st = self.lock();
        st.cache.drop_range(owner, offset, 1);
        self.flush(&mut st, owner)?;
        let mut cur = 0u64;
        loop {
            let mut seen = 0u64;
            // One word each for origin, compare and result, alive until the
            // flush below completes the operation; `offset` lies in the owner's block.
            // SAFETY: as argued in the lines above.
            let rc = unsafe {
                ffi::MPI_Compare_and_swap(
                    (&word as *const u64).cast(),
                    (&cur as *const u64).cast(),
                    (&mut seen as *mut u64).cast(),
                    ffi::RSMPI_UINT64_T,
                    owner as c_int,
                    offset as ffi::MPI_Aint,
                    self.win,
                )
            };
            check("MPI_Compare_and_swap", rc)?;
            // SAFETY: `win` is in its passive epoch.
            check("MPI_Win_flush", unsafe {
                ffi::MPI_Win_flush(owner as c_int, self.win)
            })?;
            if seen == cur {
                return Ok(seen);
            }
            cur = seen;
        }
    }
}

impl MpiNet {
    /// Reads from the owner (after this member's own writes to it: program order).
    fn fetch(
        &self,
        st: &mut NetState,
        owner: usize,
        offset: u64,
        out: &mut [u64],
    ) -> Result<(), GlobalError> {
        self.flush(st, owner)?;
        // `out` holds `out.len()` writable words, alive until the flush below completes the
        // get; the range lies in the owner's block (checked by the caller's layout).
        // SAFETY: as argued in the lines above.
        let rc = unsafe {
            ffi::MPI_Get(
                out.as_mut_ptr().cast(),
                out.len() as c_int,
                ffi::RSMPI_UINT64_T,
                owner as c_int,
                offset as ffi::MPI_Aint,
                out.len() as c_int,
                ffi::RSMPI_UINT64_T,
                self.win,
            )
        };
        check("MPI_Get", rc)?;
        // SAFETY: `win` is in its passive epoch.
        check("MPI_Win_flush", unsafe {
            ffi::MPI_Win_flush(owner as c_int, self.win)
        })
    }
}

impl Net for MpiNet {
    fn get(&self, owner: usize, offset: u64, out: &mut [u64]) -> Result<(), GlobalError> {
        let mut guard = self.lock();
        let st = &mut *guard;
        if !st.cache.enabled() {
            return self.fetch(st, owner, offset, out);
        }
        let mut cache = std::mem::replace(&mut st.cache, LineCache::new(0));
        let r = cache.read(owner, offset, out, self.block_len[owner], |start, buf| {
            self.fetch(st, owner, start, buf)
        });
        st.cache = cache;
        r
    }

    fn put(&self, owner: usize, offset: u64, words: &[u64]) -> Result<(), GlobalError> {
        self.lock().cache.write(owner, offset, words);
        let n = words.len() as c_int;
        let win = self.win;
        self.buffered(
            owner,
            words,
            // The origin buffer is kept (pending) until a flush completes the
            // put; the range lies in the owner's block.
            // SAFETY: as argued in the lines above.
            |buf| unsafe {
                ffi::MPI_Put(
                    buf,
                    n,
                    ffi::RSMPI_UINT64_T,
                    owner as c_int,
                    offset as ffi::MPI_Aint,
                    n,
                    ffi::RSMPI_UINT64_T,
                    win,
                )
            },
            "MPI_Put",
        )
    }

    fn accumulate(
        &self,
        owner: usize,
        offset: u64,
        words: &[u64],
        ty: ElemType,
        op: AccumulateOp,
    ) -> Result<(), GlobalError> {
        self.lock()
            .cache
            .drop_range(owner, offset, words.len() as u64);
        let Some(mop) = mpi_op(op) else {
            for (i, w) in words.iter().enumerate() {
                self.cas_replace(owner, offset + i as u64, *w)?;
            }
            return Ok(());
        };
        let n = words.len() as c_int;
        let dt = word_type(ty, &self.resized32);
        let win = self.win;
        self.buffered(
            owner,
            words,
            // The origin buffer is kept until a flush completes the
            // accumulate; `dt` has an extent of one word on both sides.
            // SAFETY: as argued in the lines above.
            |buf| unsafe {
                ffi::MPI_Accumulate(
                    buf,
                    n,
                    dt,
                    owner as c_int,
                    offset as ffi::MPI_Aint,
                    n,
                    dt,
                    mop,
                    win,
                )
            },
            "MPI_Accumulate",
        )
    }

    fn fetch_op(
        &self,
        owner: usize,
        offset: u64,
        word: u64,
        ty: ElemType,
        op: AccumulateOp,
    ) -> Result<u64, GlobalError> {
        let Some(mop) = mpi_op(op) else {
            return self.cas_replace(owner, offset, word);
        };
        let mut st = self.lock();
        st.cache.drop_range(owner, offset, 1);
        self.flush(&mut st, owner)?;
        let dt = word_type(ty, &self.resized32);
        let mut old = 0u64;
        // One element each way, alive until the flush completes the operation;
        // `offset` lies in the owner's block.
        // SAFETY: as argued in the lines above.
        let rc = unsafe {
            ffi::MPI_Fetch_and_op(
                (&word as *const u64).cast(),
                (&mut old as *mut u64).cast(),
                dt,
                owner as c_int,
                offset as ffi::MPI_Aint,
                mop,
                self.win,
            )
        };
        check("MPI_Fetch_and_op", rc)?;
        // SAFETY: `win` is in its passive epoch.
        check("MPI_Win_flush", unsafe {
            ffi::MPI_Win_flush(owner as c_int, self.win)
        })?;
        Ok(match ty {
            // The upper half of `old` was not written by a 32-bit fetch.
            ElemType::U32 | ElemType::I32 => old & 0xFFFF_FFFF,
            _ => old,
        })
    }

    fn atomics_over_net(&self) -> bool {
        self.atomics_over_net
    }

    fn cache_stats(&self) -> crate::CacheStats {
        self.lock().cache.stats
    }

    fn fence_writeback(&self) -> Result<(), GlobalError> {
        let mut st = self.lock();
        self.flush_all(&mut st)?;
        // SAFETY: `win` is in its passive epoch.
        check("MPI_Win_sync", unsafe { ffi::MPI_Win_sync(self.win) })
    }

    fn fence_invalidate(&self) -> Result<(), GlobalError> {
        let mut st = self.lock();
        st.cache.clear();
        // SAFETY: `win` is in its passive epoch.
        check("MPI_Win_sync", unsafe { ffi::MPI_Win_sync(self.win) })
    }

    fn barrier(&self, timeout: Duration) -> Result<(), GlobalError> {
        let _st = self.lock();
        Ok(ibarrier(self.comm, timeout)?)
    }
}

impl Drop for MpiNet {
    fn drop(&mut self) {
        if !mesh_mpi::is_active() {
            return;
        }
        // The window's epoch opened at creation; completing it also completes
        // every pending operation, after which their buffers may go.
        // SAFETY: as argued in the lines above.
        unsafe { ffi::MPI_Win_unlock_all(self.win) };
        // Collective over the array's communicator (every rank drops its
        // arrays in the same order, see the module's documentation).
        // SAFETY: as argued in the lines above.
        unsafe { ffi::MPI_Win_free(&mut self.win) };
        for t in self.resized32.iter_mut() {
            // SAFETY: datatypes this window's creation committed, freed once.
            unsafe { ffi::MPI_Type_free(t) };
        }
        if self.owns_comm {
            mesh_mpi::free::<MpiCalls>(&mut self.comm);
        }
    }
}
