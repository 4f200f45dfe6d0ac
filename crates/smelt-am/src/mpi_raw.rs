//! The raw MPI calls smelt's MPI modules share (smelt-am's nodes, smelt-global's
//! windows): error strings, checked calls, communicator helpers and bounded waits for
//! non-blocking collectives (every wait for other ranks is bounded; on a timeout a
//! request stays active and its buffers are leaked, never freed under MPI).

use crate::AmError;
use mpi_sys as ffi;
use std::os::raw::c_int;
use std::time::{Duration, Instant};

/// A failed MPI call as an error naming it.
pub fn mpi_error(what: &str, rc: c_int) -> AmError {
    AmError::Invalid(format!("{what} failed: {}", error_string(rc)))
}

/// MPI's description of error code `rc`.
pub fn error_string(rc: c_int) -> String {
    let mut buf = vec![0u8; 1024];
    let mut len: c_int = 0;
    // SAFETY: `buf` has room for MPI_MAX_ERROR_STRING (256 in Open MPI and MPICH,
    // 1024 is ample) bytes; `len` is a valid out-pointer. MPI_Error_string may be
    // called before MPI_Init and after MPI_Finalize.
    let rc2 = unsafe { ffi::MPI_Error_string(rc, buf.as_mut_ptr().cast(), &mut len) };
    if rc2 != 0 {
        return format!("MPI error {rc}");
    }
    buf.truncate(len.clamp(0, 1024) as usize);
    format!("{} (MPI error {rc})", String::from_utf8_lossy(&buf))
}

/// `Ok` for `MPI_SUCCESS`, else the error of the call `what`.
pub fn check(what: &str, rc: c_int) -> Result<(), AmError> {
    if rc == ffi::MPI_SUCCESS as c_int {
        Ok(())
    } else {
        Err(mpi_error(what, rc))
    }
}

/// Whether MPI was initialised and not yet finalised.
pub fn mpi_active() -> bool {
    let (mut init, mut fin): (c_int, c_int) = (0, 0);
    // SAFETY: valid out-pointers; both calls are allowed at any time.
    unsafe {
        ffi::MPI_Initialized(&mut init);
        ffi::MPI_Finalized(&mut fin);
    }
    init != 0 && fin == 0
}

/// This process's rank in `comm` and `comm`'s size.
pub fn comm_rank_size(comm: ffi::MPI_Comm) -> Result<(usize, usize), AmError> {
    let (mut r, mut s): (c_int, c_int) = (0, 0);
    // SAFETY: `comm` is a valid communicator of this process; valid out-pointers.
    check("MPI_Comm_rank", unsafe { ffi::MPI_Comm_rank(comm, &mut r) })?;
    // SAFETY: as above.
    check("MPI_Comm_size", unsafe { ffi::MPI_Comm_size(comm, &mut s) })?;
    Ok((r as usize, s as usize))
}

/// `MPI_Comm_dup` of `comm`.
pub fn comm_dup(comm: ffi::MPI_Comm) -> Result<ffi::MPI_Comm, AmError> {
    // SAFETY: a null handle is only a placeholder written over by MPI_Comm_dup.
    let mut out: ffi::MPI_Comm = unsafe { ffi::RSMPI_COMM_NULL };
    // SAFETY: `comm` is a valid communicator; `out` a valid out-pointer.
    check("MPI_Comm_dup", unsafe { ffi::MPI_Comm_dup(comm, &mut out) })?;
    Ok(out)
}

/// `MPI_Comm_split` of `comm`.
pub fn comm_split(comm: ffi::MPI_Comm, color: c_int, key: c_int) -> Result<ffi::MPI_Comm, AmError> {
    // SAFETY: a placeholder written over by MPI_Comm_split.
    let mut out: ffi::MPI_Comm = unsafe { ffi::RSMPI_COMM_NULL };
    // SAFETY: `comm` is a valid communicator; `out` a valid out-pointer.
    check("MPI_Comm_split", unsafe {
        ffi::MPI_Comm_split(comm, color, key, &mut out)
    })?;
    Ok(out)
}

/// Frees a communicator the caller created (nothing once MPI is finalised).
pub fn comm_free(comm: &mut ffi::MPI_Comm) {
    if mpi_active() {
        // SAFETY: `comm` is a communicator this module created and frees once (the
        // caller owns it); MPI is active.
        unsafe { ffi::MPI_Comm_free(comm) };
    }
}

/// Waits for a non-blocking MPI operation, at most `timeout`. On a timeout the
/// request stays active: the caller must leak the buffers it uses.
pub fn wait_request(
    req: &mut ffi::MPI_Request,
    timeout: Duration,
    what: &str,
) -> Result<(), AmError> {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        let mut flag: c_int = 0;
        // SAFETY: `req` is an active request of this process (or null, which MPI_Test
        // completes at once); STATUS_IGNORE is allowed.
        check(what, unsafe {
            ffi::MPI_Test(req, &mut flag, ffi::RSMPI_STATUS_IGNORE)
        })?;
        if flag != 0 {
            return Ok(());
        }
        if start.elapsed() >= timeout {
            return Err(AmError::Timeout {
                what: format!("{what} (waiting for the other MPI ranks)"),
                after: timeout,
            });
        }
        spins += 1;
        if spins < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// `MPI_Iallgather` of `mine` (words) from every rank of `comm`, bounded.
pub fn allgather_u64(
    comm: ffi::MPI_Comm,
    size: usize,
    mine: &[u64],
    timeout: Duration,
) -> Result<Vec<u64>, AmError> {
    let send = mine.to_vec();
    let mut recv = vec![0u64; size * mine.len()];
    // SAFETY: a placeholder written over by MPI_Iallgather.
    let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: `send` holds `mine.len()` words and `recv` `size` times as many, both
    // alive until the request completes (or leaked below if it does not); the
    // datatype is 64-bit unsigned.
    check("MPI_Iallgather", unsafe {
        ffi::MPI_Iallgather(
            send.as_ptr().cast(),
            mine.len() as c_int,
            ffi::RSMPI_UINT64_T,
            recv.as_mut_ptr().cast(),
            mine.len() as c_int,
            ffi::RSMPI_UINT64_T,
            comm,
            &mut req,
        )
    })?;
    match wait_request(&mut req, timeout, "MPI_Iallgather") {
        Ok(()) => Ok(recv),
        Err(e) => {
            // MPI may still write into `recv` and read `send`: never free them.
            std::mem::forget(send);
            std::mem::forget(recv);
            Err(e)
        }
    }
}

/// `MPI_Ibcast` of `buf` from `root` on `comm`, bounded.
pub fn bcast_bytes(
    comm: ffi::MPI_Comm,
    buf: Vec<u8>,
    root: usize,
    timeout: Duration,
) -> Result<Vec<u8>, AmError> {
    let mut buf = buf;
    // SAFETY: a placeholder written over by MPI_Ibcast.
    let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: `buf` holds `buf.len()` bytes (the same length at every rank) and lives
    // until the request completes (or is leaked below).
    check("MPI_Ibcast", unsafe {
        ffi::MPI_Ibcast(
            buf.as_mut_ptr().cast(),
            buf.len() as c_int,
            ffi::RSMPI_UINT8_T,
            root as c_int,
            comm,
            &mut req,
        )
    })?;
    match wait_request(&mut req, timeout, "MPI_Ibcast") {
        Ok(()) => Ok(buf),
        Err(e) => {
            std::mem::forget(buf);
            Err(e)
        }
    }
}

/// `MPI_Iallreduce` with `MPI_MIN` of one word, bounded.
pub fn allreduce_min(comm: ffi::MPI_Comm, v: u64, timeout: Duration) -> Result<u64, AmError> {
    let send = Box::new(v);
    let mut recv = Box::new(0u64);
    // SAFETY: a placeholder written over by MPI_Iallreduce.
    let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: one 64-bit word each way, boxed so they stay put until the request
    // completes (or are leaked below).
    check("MPI_Iallreduce", unsafe {
        ffi::MPI_Iallreduce(
            (&*send as *const u64).cast(),
            (&mut *recv as *mut u64).cast(),
            1,
            ffi::RSMPI_UINT64_T,
            ffi::RSMPI_MIN,
            comm,
            &mut req,
        )
    })?;
    match wait_request(&mut req, timeout, "MPI_Iallreduce") {
        Ok(()) => Ok(*recv),
        Err(e) => {
            std::mem::forget(send);
            std::mem::forget(recv);
            Err(e)
        }
    }
}

/// `MPI_Ibarrier` on `comm`, bounded.
pub fn ibarrier(comm: ffi::MPI_Comm, timeout: Duration) -> Result<(), AmError> {
    // SAFETY: a placeholder written over by MPI_Ibarrier.
    let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: `comm` is a valid communicator; `req` a valid out-pointer.
    check("MPI_Ibarrier", unsafe { ffi::MPI_Ibarrier(comm, &mut req) })?;
    wait_request(&mut req, timeout, "MPI_Ibarrier")
}
