//! MPI below every service (the `mpi` feature): the one home of smelt's MPI helpers.
//!
//! * The checked calls every MPI user in smelt makes for its own traffic (rank and size,
//!   duplicating, splitting and freeing communicators, a broadcast of bytes, an
//!   allgather of words, an agreement, a barrier), each generic over the symbol set it
//!   calls ([`Calls`]): [`MpiCalls`] (`MPI_*`, for programs: active messages,
//!   aggregation, global arrays, tasks, [`World`](crate::world::World)s) or
//!   [`PmpiCalls`] (`PMPI_*`, for the interposer `libsmelt_mpi`, whose own `MPI_Bcast`
//!   and friends would otherwise call themselves).
//! * Waits for other ranks are bounded where the caller gives a bound
//!   (`Some(timeout)`: a non-blocking call tested until then; on a timeout the request
//!   stays active and its buffers are leaked, never freed under MPI), or blocking
//!   (`None`: the plain collective, as the interposer's calls need).
//! * [`nodes`]: grouping a communicator's ranks into nodes (the ranks that share memory,
//!   `MPI_COMM_TYPE_SHARED`, or emulated nodes of `SMELT_RANKS_PER_NODE` consecutive
//!   ranks of a host, or every rank its own node);
//! * [`share`]: handing a shared-memory segment out over a node's communicator (its
//!   leader creates it, every rank joins, the node agrees).
//!
//! MPI's handles and calls come from rsmpi's `mpi-sys`, re-exported as [`ffi`] so that
//! every crate above uses the same one; rsmpi's safe `mpi` crate is re-exported as
//! [`rsmpi`] (a program holding one of its communicators gets a
//! [`World`](crate::world::World) from it).

use std::os::raw::c_int;
use std::time::{Duration, Instant};

pub use mpi as rsmpi;
pub use mpi_sys as ffi;

#[path = "mpi_nodes.rs"]
pub mod nodes;
#[path = "mpi_share.rs"]
pub mod share;

pub use nodes::{cpu_mask, Layout, NodeComm, Nodes, Placed};
pub use share::{hand_out, HandOut};

use ffi::{MPI_Comm, MPI_Datatype, MPI_Op, MPI_Request};

/// An MPI call that failed, or a wait for other ranks that ran out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MpiError {
    /// `call` returned the error code `code` (MPI's own description follows).
    #[error("{call} failed: {}", error_string(*.code))]
    Call {
        /// The MPI call.
        call: &'static str,
        /// Its return code (the code the interposer hands back to the application).
        code: c_int,
    },
    /// The other ranks did not get to `call` within `after`.
    #[error("timed out after {after:?} in {call} (waiting for the other MPI ranks)")]
    Timeout {
        /// The MPI call waited on.
        call: &'static str,
        /// The bound.
        after: Duration,
    },
    /// MPI is not in a state for the call (not initialised, already finalised), or an
    /// argument is out of range.
    #[error("{0}")]
    Invalid(String),
    /// A node's shared-memory segment could not be made or joined at some rank
    /// ([`mpi_share::HandOut::agreed`](crate::mpi_share::HandOut::agreed); the message
    /// says which rank's reason, or that another rank failed).
    #[error("{0}")]
    Shared(String),
}

impl MpiError {
    /// The MPI error code of a failed call (`None` for a timeout or a bad state).
    pub fn code(&self) -> Option<c_int> {
        match self {
            MpiError::Call { code, .. } => Some(*code),
            _ => None,
        }
    }
}

macro_rules! calls {
    ($($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) = $mpi:ident / $pmpi:ident;)*) => {
        /// The MPI calls smelt's own traffic makes, from one of two symbol sets: `MPI_*`
        /// ([`MpiCalls`]) or the profiling interface's `PMPI_*` ([`PmpiCalls`]).
        ///
        /// # Safety
        /// Each call is the C function of that name: its arguments must satisfy MPI's
        /// rules for it (valid handles, pointers valid for what MPI reads or writes).
        #[allow(clippy::too_many_arguments)]
        pub trait Calls: Copy + Send + Sync + std::fmt::Debug + 'static {
            /// `"MPI"` or `"PMPI"`.
            const PREFIX: &'static str;
            $(
                $(#[$doc])*
                ///
                /// # Safety
                /// As for the C function.
                unsafe fn $name($($arg: $ty),*) -> c_int;
            )*
        }

        #[allow(clippy::too_many_arguments)]
        impl Calls for MpiCalls {
            const PREFIX: &'static str = "MPI";
            $(
                #[inline]
                unsafe fn $name($($arg: $ty),*) -> c_int {
                    // SAFETY: the caller upholds the C function's contract.
                    unsafe { ffi::$mpi($($arg),*) }
                }
            )*
        }

        #[allow(clippy::too_many_arguments)]
        impl Calls for PmpiCalls {
            const PREFIX: &'static str = "PMPI";
            $(
                #[inline]
                unsafe fn $name($($arg: $ty),*) -> c_int {
                    // SAFETY: the caller upholds the C function's contract.
                    unsafe { ffi::$pmpi($($arg),*) }
                }
            )*
        }
    };
}

/// The `MPI_*` symbols: what a program's own MPI traffic calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct MpiCalls;

/// The `PMPI_*` symbols (MPI's profiling interface): what an interposer that defines
/// `MPI_*` itself calls, so that its own traffic does not come back to it.
#[derive(Debug, Clone, Copy, Default)]
pub struct PmpiCalls;

calls! {
    /// `MPI_Comm_rank`.
    fn comm_rank(comm: MPI_Comm, rank: *mut c_int) = MPI_Comm_rank / PMPI_Comm_rank;
    /// `MPI_Comm_size`.
    fn comm_size(comm: MPI_Comm, size: *mut c_int) = MPI_Comm_size / PMPI_Comm_size;
    /// `MPI_Comm_test_inter`.
    fn comm_test_inter(comm: MPI_Comm, flag: *mut c_int) = MPI_Comm_test_inter / PMPI_Comm_test_inter;
    /// `MPI_Comm_dup`.
    fn comm_dup(comm: MPI_Comm, out: *mut MPI_Comm) = MPI_Comm_dup / PMPI_Comm_dup;
    /// `MPI_Comm_split`.
    fn comm_split(comm: MPI_Comm, color: c_int, key: c_int, out: *mut MPI_Comm) = MPI_Comm_split / PMPI_Comm_split;
    /// `MPI_Comm_split_type`.
    fn comm_split_type(comm: MPI_Comm, kind: c_int, key: c_int, info: ffi::MPI_Info, out: *mut MPI_Comm) = MPI_Comm_split_type / PMPI_Comm_split_type;
    /// `MPI_Comm_free`.
    fn comm_free(comm: *mut MPI_Comm) = MPI_Comm_free / PMPI_Comm_free;
    /// `MPI_Bcast`.
    fn bcast(buf: *mut std::os::raw::c_void, count: c_int, dt: MPI_Datatype, root: c_int, comm: MPI_Comm) = MPI_Bcast / PMPI_Bcast;
    /// `MPI_Ibcast`.
    fn ibcast(buf: *mut std::os::raw::c_void, count: c_int, dt: MPI_Datatype, root: c_int, comm: MPI_Comm, req: *mut MPI_Request) = MPI_Ibcast / PMPI_Ibcast;
    /// `MPI_Allgather`.
    fn allgather(send: *const std::os::raw::c_void, scount: c_int, sdt: MPI_Datatype, recv: *mut std::os::raw::c_void, rcount: c_int, rdt: MPI_Datatype, comm: MPI_Comm) = MPI_Allgather / PMPI_Allgather;
    /// `MPI_Iallgather`.
    fn iallgather(send: *const std::os::raw::c_void, scount: c_int, sdt: MPI_Datatype, recv: *mut std::os::raw::c_void, rcount: c_int, rdt: MPI_Datatype, comm: MPI_Comm, req: *mut MPI_Request) = MPI_Iallgather / PMPI_Iallgather;
    /// `MPI_Allreduce`.
    fn allreduce(send: *const std::os::raw::c_void, recv: *mut std::os::raw::c_void, count: c_int, dt: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) = MPI_Allreduce / PMPI_Allreduce;
    /// `MPI_Iallreduce`.
    fn iallreduce(send: *const std::os::raw::c_void, recv: *mut std::os::raw::c_void, count: c_int, dt: MPI_Datatype, op: MPI_Op, comm: MPI_Comm, req: *mut MPI_Request) = MPI_Iallreduce / PMPI_Iallreduce;
    /// `MPI_Barrier`.
    fn barrier(comm: MPI_Comm) = MPI_Barrier / PMPI_Barrier;
    /// `MPI_Ibarrier`.
    fn ibarrier(comm: MPI_Comm, req: *mut MPI_Request) = MPI_Ibarrier / PMPI_Ibarrier;
    /// `MPI_Test`.
    fn test(req: *mut MPI_Request, flag: *mut c_int, status: *mut ffi::MPI_Status) = MPI_Test / PMPI_Test;
}

/// MPI's description of error code `code` (callable before `MPI_Init` and after
/// `MPI_Finalize`).
pub fn error_string(code: c_int) -> String {
    let mut buf = vec![0u8; 1024];
    let mut len: c_int = 0;
    // `buf` has room for MPI_MAX_ERROR_STRING (256 in Open MPI and MPICH; 1024 is ample)
    // bytes; `len` is a valid out-pointer. MPI_Error_string may be called at any time.
    // SAFETY: as argued in the lines above.
    let rc = unsafe { ffi::MPI_Error_string(code, buf.as_mut_ptr().cast(), &mut len) };
    if rc != ffi::MPI_SUCCESS as c_int {
        return format!("MPI error {code}");
    }
    buf.truncate(len.clamp(0, 1024) as usize);
    format!("{} (MPI error {code})", String::from_utf8_lossy(&buf))
}

/// `Ok` for `MPI_SUCCESS`, else the error of `call`.
#[inline]
pub fn check(call: &'static str, rc: c_int) -> Result<(), MpiError> {
    if rc == ffi::MPI_SUCCESS as c_int {
        Ok(())
    } else {
        Err(MpiError::Call { call, code: rc })
    }
}

/// Whether MPI was initialised and not yet finalised.
pub fn is_active() -> bool {
    let (mut init, mut fin): (c_int, c_int) = (0, 0);
    // SAFETY: valid out-pointers; both calls are allowed at any time.
    unsafe {
        ffi::MPI_Initialized(&mut init);
        ffi::MPI_Finalized(&mut fin);
    }
    init != 0 && fin == 0
}

/// `Ok` while MPI is initialised and not finalised, else an error saying which.
pub fn require_active() -> Result<(), MpiError> {
    let (mut init, mut fin): (c_int, c_int) = (0, 0);
    // SAFETY: valid out-pointers; both calls are allowed at any time.
    unsafe {
        ffi::MPI_Initialized(&mut init);
        ffi::MPI_Finalized(&mut fin);
    }
    if fin != 0 {
        Err(MpiError::Invalid("MPI was already finalized".into()))
    } else if init == 0 {
        Err(MpiError::Invalid("MPI is not initialised".into()))
    } else {
        Ok(())
    }
}

/// `MPI_COMM_WORLD` (a handle; valid once MPI is initialised).
pub fn comm_world() -> MPI_Comm {
    // SAFETY: reading MPI's predefined handle (a constant of mpi-sys's C shim).
    unsafe { ffi::RSMPI_COMM_WORLD }
}

/// `MPI_COMM_NULL`.
pub fn comm_null() -> MPI_Comm {
    // SAFETY: reading MPI's predefined handle.
    unsafe { ffi::RSMPI_COMM_NULL }
}

/// `MPI_UNDEFINED` (the color of a rank that joins no communicator of a split).
pub fn undefined() -> c_int {
    // SAFETY: reading MPI's constant.
    unsafe { ffi::RSMPI_UNDEFINED }
}

/// This process's rank in `comm` and `comm`'s size.
pub fn rank_size<S: Calls>(comm: MPI_Comm) -> Result<(usize, usize), MpiError> {
    let (mut r, mut s): (c_int, c_int) = (0, 0);
    // SAFETY: valid out-pointers; MPI validates the handle.
    check("MPI_Comm_rank", unsafe { S::comm_rank(comm, &mut r) })?;
    // SAFETY: as above.
    check("MPI_Comm_size", unsafe { S::comm_size(comm, &mut s) })?;
    Ok((r.max(0) as usize, s.max(0) as usize))
}

/// True for an intercommunicator.
pub fn is_inter<S: Calls>(comm: MPI_Comm) -> Result<bool, MpiError> {
    let mut flag = 0;
    // SAFETY: valid out-pointer; MPI validates the handle.
    check("MPI_Comm_test_inter", unsafe {
        S::comm_test_inter(comm, &mut flag)
    })?;
    Ok(flag != 0)
}

/// `MPI_Comm_dup` of `comm` (collective over `comm`); free it with [`free`].
pub fn dup<S: Calls>(comm: MPI_Comm) -> Result<MPI_Comm, MpiError> {
    let mut out = comm_null();
    // SAFETY: `comm` is a communicator of this process; `out` a valid out-pointer.
    check("MPI_Comm_dup", unsafe { S::comm_dup(comm, &mut out) })?;
    Ok(out)
}

/// `MPI_Comm_split` of `comm` (collective over `comm`; `color` may be [`undefined`],
/// which gives `MPI_COMM_NULL`); free it with [`free`].
pub fn split<S: Calls>(comm: MPI_Comm, color: c_int, key: c_int) -> Result<MPI_Comm, MpiError> {
    let mut out = comm_null();
    // SAFETY: `comm` is a communicator of this process; `out` a valid out-pointer.
    check("MPI_Comm_split", unsafe {
        S::comm_split(comm, color, key, &mut out)
    })?;
    Ok(out)
}

/// The ranks of `comm` that share memory with this one (`MPI_Comm_split_type` with
/// `MPI_COMM_TYPE_SHARED`, ordered by `key`); free it with [`free`].
pub fn split_shared<S: Calls>(comm: MPI_Comm, key: c_int) -> Result<MPI_Comm, MpiError> {
    let mut out = comm_null();
    // `comm` is a communicator of this process; the split type and info handle
    // are MPI's constants; `out` a valid out-pointer.
    // SAFETY: as argued in the lines above.
    check("MPI_Comm_split_type", unsafe {
        S::comm_split_type(
            comm,
            ffi::RSMPI_COMM_TYPE_SHARED,
            key,
            ffi::RSMPI_INFO_NULL,
            &mut out,
        )
    })?;
    Ok(out)
}

/// Frees a communicator the caller made and owns, and sets it to `MPI_COMM_NULL`
/// (nothing for `MPI_COMM_NULL`, nor once MPI is finalised).
pub fn free<S: Calls>(comm: &mut MPI_Comm) {
    if *comm == comm_null() {
        return;
    }
    if is_active() {
        // SAFETY: a communicator the caller created and frees once (set to null below); MPI is active.
        unsafe { S::comm_free(comm) };
    }
    *comm = comm_null();
}

/// Waits for a non-blocking call's request, at most `bound`. On a timeout the request
/// stays active: the caller must leak the buffers it uses.
pub fn wait<S: Calls>(
    req: &mut MPI_Request,
    bound: Duration,
    call: &'static str,
) -> Result<(), MpiError> {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        let mut flag: c_int = 0;
        // `req` is an active request of this process (or null, which MPI_Test
        // completes at once); STATUS_IGNORE is allowed.
        // SAFETY: as argued in the lines above.
        check(call, unsafe {
            S::test(req, &mut flag, ffi::RSMPI_STATUS_IGNORE)
        })?;
        if flag != 0 {
            return Ok(());
        }
        if start.elapsed() >= bound {
            return Err(MpiError::Timeout { call, after: bound });
        }
        spins += 1;
        if spins < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// Broadcasts `buf` (the same length at every rank) from `root` over `comm`: blocking
/// with `bound` `None`, else non-blocking and waited on at most that long (through a
/// copy, leaked on a timeout).
pub fn bcast_bytes<S: Calls>(
    comm: MPI_Comm,
    buf: &mut [u8],
    root: usize,
    bound: Option<Duration>,
) -> Result<(), MpiError> {
    let n = count(buf.len())?;
    let dt = byte();
    let Some(bound) = bound else {
        // SAFETY: `buf` is valid for its `n` bytes; every rank passes the same length.
        return check("MPI_Bcast", unsafe {
            S::bcast(buf.as_mut_ptr().cast(), n, dt, root as c_int, comm)
        });
    };
    let mut own = buf.to_vec();
    let mut req = request_null();
    // `own` holds `n` bytes and lives until the request completes (or is leaked
    // below); `req` is a valid out-pointer.
    // SAFETY: as argued in the lines above.
    check("MPI_Ibcast", unsafe {
        S::ibcast(
            own.as_mut_ptr().cast(),
            n,
            dt,
            root as c_int,
            comm,
            &mut req,
        )
    })?;
    match wait::<S>(&mut req, bound, "MPI_Ibcast") {
        Ok(()) => {
            buf.copy_from_slice(&own);
            Ok(())
        }
        Err(e) => {
            // MPI may still write into `own`: never free it.
            std::mem::forget(own);
            Err(e)
        }
    }
}

/// Every rank's `mine` (the same number of words at every rank), back to back by rank
/// of `comm`; blocking or bounded as [`bcast_bytes`].
pub fn allgather_words<S: Calls>(
    comm: MPI_Comm,
    mine: &[u64],
    bound: Option<Duration>,
) -> Result<Vec<u64>, MpiError> {
    let (_, size) = rank_size::<S>(comm)?;
    let k = count(mine.len())?;
    count(size * mine.len())?;
    let dt = word();
    let send = mine.to_vec();
    let mut recv = vec![0u64; size * mine.len()];
    let Some(bound) = bound else {
        // `send` holds `k` words, `recv` `size` times as many (`size` being the
        // communicator's); the datatype is a 64-bit unsigned integer.
        // SAFETY: as argued in the lines above.
        check("MPI_Allgather", unsafe {
            S::allgather(
                send.as_ptr().cast(),
                k,
                dt,
                recv.as_mut_ptr().cast(),
                k,
                dt,
                comm,
            )
        })?;
        return Ok(recv);
    };
    let mut req = request_null();
    // SAFETY: as above; both buffers live until the request completes (or are leaked below).
    check("MPI_Iallgather", unsafe {
        S::iallgather(
            send.as_ptr().cast(),
            k,
            dt,
            recv.as_mut_ptr().cast(),
            k,
            dt,
            comm,
            &mut req,
        )
    })?;
    match wait::<S>(&mut req, bound, "MPI_Iallgather") {
        Ok(()) => Ok(recv),
        Err(e) => {
            // MPI may still read `send` and write `recv`: never free them.
            std::mem::forget(send);
            std::mem::forget(recv);
            Err(e)
        }
    }
}

/// The smallest of every rank's `v` (`MPI_MIN` over one word); blocking or bounded as
/// [`bcast_bytes`].
pub fn allreduce_min<S: Calls>(
    comm: MPI_Comm,
    v: u64,
    bound: Option<Duration>,
) -> Result<u64, MpiError> {
    let send = Box::new(v);
    let mut recv = Box::new(0u64);
    // SAFETY: reading MPI's predefined operation handle.
    let min = unsafe { ffi::RSMPI_MIN };
    let Some(bound) = bound else {
        // SAFETY: one 64-bit word each way.
        check("MPI_Allreduce", unsafe {
            S::allreduce(
                (&*send as *const u64).cast(),
                (&mut *recv as *mut u64).cast(),
                1,
                word(),
                min,
                comm,
            )
        })?;
        return Ok(*recv);
    };
    let mut req = request_null();
    // SAFETY: one 64-bit word each way, boxed so they stay put until the request completes (or are leaked below).
    check("MPI_Iallreduce", unsafe {
        S::iallreduce(
            (&*send as *const u64).cast(),
            (&mut *recv as *mut u64).cast(),
            1,
            word(),
            min,
            comm,
            &mut req,
        )
    })?;
    match wait::<S>(&mut req, bound, "MPI_Iallreduce") {
        Ok(()) => Ok(*recv),
        Err(e) => {
            std::mem::forget(send);
            std::mem::forget(recv);
            Err(e)
        }
    }
}

/// True at every rank of `comm` if `ok` is true at every rank (an agreement); blocking
/// or bounded as [`bcast_bytes`].
pub fn all<S: Calls>(comm: MPI_Comm, ok: bool, bound: Option<Duration>) -> Result<bool, MpiError> {
    Ok(allreduce_min::<S>(comm, ok as u64, bound)? == 1)
}

/// Waits until every rank of `comm` got here; blocking or bounded as [`bcast_bytes`].
pub fn barrier<S: Calls>(comm: MPI_Comm, bound: Option<Duration>) -> Result<(), MpiError> {
    let Some(bound) = bound else {
        // SAFETY: `comm` is a communicator of this process.
        return check("MPI_Barrier", unsafe { S::barrier(comm) });
    };
    let mut req = request_null();
    // SAFETY: `comm` is a communicator of this process; `req` a valid out-pointer.
    check("MPI_Ibarrier", unsafe { S::ibarrier(comm, &mut req) })?;
    wait::<S>(&mut req, bound, "MPI_Ibarrier")
}

fn request_null() -> MPI_Request {
    // SAFETY: reading MPI's predefined null request (a placeholder written over by the non-blocking call).
    unsafe { ffi::RSMPI_REQUEST_NULL }
}

fn byte() -> MPI_Datatype {
    // SAFETY: reading MPI's predefined datatype handle.
    unsafe { ffi::RSMPI_UINT8_T }
}

fn word() -> MPI_Datatype {
    // SAFETY: reading MPI's predefined datatype handle.
    unsafe { ffi::RSMPI_UINT64_T }
}

/// `n` as an MPI count, or an error past `c_int`.
fn count(n: usize) -> Result<c_int, MpiError> {
    c_int::try_from(n).map_err(|_| MpiError::Invalid(format!("{n} elements in one MPI call")))
}
