//! Offload threads (`smelt-offload`) from C: `smelt_offload_*` in `smelt.h`.
//!
//! `smelt_offload_start` takes active-message endpoints (their handles become invalid:
//! the pool owns them) and starts a communication thread per endpoint (none in direct
//! mode). Any number of C threads may then use the pool's handle at once: requests and
//! flushes go through lock-free queues to the communication threads, which also run
//! the endpoints' handlers. `smelt_offload_stop` stops the pool within a deadline and
//! gives the endpoints back as new handles.

use crate::am::smelt_am_endpoint;
use crate::handle::{self, Kind, Object, Wait};
use crate::{
    err, guard, id, out, slice, smelt_status, Error, Res, SMELT_ERR_INVALID_ARGUMENT,
    SMELT_ERR_RUNTIME, SMELT_ERR_TIMEOUT,
};
use ::smelt_offload::{Offload, OffloadConfig, OffloadError, OffloadMode};
use smelt_am::AmError;
use std::ffi::c_int;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// An offload pool (opaque to C: a handle, never an address).
#[repr(C)]
pub struct smelt_offload {
    _opaque: [u8; 0],
}

/// No communication thread: the calling thread runs each command itself.
pub const SMELT_OFFLOAD_DIRECT: c_int = 0;
/// A communication thread per endpoint, always running.
pub const SMELT_OFFLOAD_STATIC: c_int = 1;
/// A communication thread per endpoint, asleep while idle, woken by the next command.
pub const SMELT_OFFLOAD_DYNAMIC: c_int = 2;

/// What one lane did so far (see `smelt.h`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct smelt_offload_counters {
    /// Commands executed.
    pub commands: u64,
    /// Requests posted.
    pub requests: u64,
    /// Messages handled (replies and requests that arrived).
    pub handled: u64,
    /// Commands that failed.
    pub errors: u64,
    /// Times the communication thread slept (dynamic mode).
    pub sleeps: u64,
    /// Times a producer woke it.
    pub wakes: u64,
    /// Commands queued now.
    pub queued: u64,
}

/// The pool behind a handle: shared by the C threads that use it; stopping takes it.
pub(crate) struct OffloadObj {
    pool: RwLock<Option<Offload<()>>>,
}

fn offload_error(e: OffloadError) -> Error {
    let code = match &e {
        OffloadError::Invalid(_) | OffloadError::NoSuchLane { .. } => SMELT_ERR_INVALID_ARGUMENT,
        OffloadError::Timeout { .. } | OffloadError::Am(AmError::Timeout { .. }) => {
            SMELT_ERR_TIMEOUT
        }
        OffloadError::Am(
            AmError::Invalid(_)
            | AmError::NoSuchDestination { .. }
            | AmError::ReservedHandler
            | AmError::TooManyArgs { .. },
        ) => SMELT_ERR_INVALID_ARGUMENT,
        _ => SMELT_ERR_RUNTIME,
    };
    Error(code, e.to_string())
}

/// Runs `f` on the pool of a live handle (shared with other threads).
fn with_pool<T>(
    pool: *const smelt_offload,
    f: impl FnOnce(&Offload<()>) -> Result<T, OffloadError>,
) -> Res<T> {
    let obj = handle::shared(id(pool), Kind::Offload, "pool", |o| match o {
        Object::Offload(p) => p.clone(),
        _ => unreachable!("checked to be a pool"),
    })?;
    let g = obj.pool.read().unwrap_or_else(|p| p.into_inner());
    match g.as_ref() {
        Some(p) => f(p).map_err(offload_error),
        None => err(crate::SMELT_ERR_INVALID_HANDLE, "pool is being stopped"),
    }
}

/// Starts a pool over the `n` endpoints `eps` (whose handles it takes), in `mode`,
/// the communication thread of endpoint `i` pinned to `cpus[i]` (`cpus` NULL and
/// `ncpus` 0: not pinned); lane `i` is endpoint `eps[i]`.
#[no_mangle]
pub extern "C" fn smelt_offload_start(
    eps: *const *mut smelt_am_endpoint,
    n: usize,
    mode: c_int,
    cpus: *const u32,
    ncpus: usize,
    pool: *mut *mut smelt_offload,
) -> smelt_status {
    guard(|| {
        if pool.is_null() {
            return err(SMELT_ERR_INVALID_ARGUMENT, "pool is NULL");
        }
        let mode = match mode {
            SMELT_OFFLOAD_DIRECT => OffloadMode::Direct,
            SMELT_OFFLOAD_STATIC => OffloadMode::Static,
            SMELT_OFFLOAD_DYNAMIC => OffloadMode::Dynamic,
            m => {
                return err(
                    SMELT_ERR_INVALID_ARGUMENT,
                    format!("offload mode {m} (0 direct, 1 static, 2 dynamic)"),
                )
            }
        };
        let hs: Vec<usize> = slice(eps, n, "eps")?.iter().map(|&e| id(e)).collect();
        let mut cfg = OffloadConfig::new(mode);
        cfg.cpus = slice(cpus, ncpus, "cpus")?.to_vec();
        // Everything is checked before the endpoints are taken from their handles.
        cfg.validate(n).map_err(offload_error)?;
        for (i, h) in hs.iter().enumerate() {
            if hs[..i].contains(h) {
                return err(
                    SMELT_ERR_INVALID_ARGUMENT,
                    format!("eps[{i}] is given twice"),
                );
            }
            drop(handle::am_endpoint(*h, "eps[i]")?);
        }
        let mut taken = Vec::with_capacity(n);
        for (i, h) in hs.iter().enumerate() {
            match handle::remove(*h, Kind::AmEndpoint, "eps[i]", Wait::Busy, |_| Ok(()))? {
                Object::AmEndpoint(ep) => taken.push(*ep),
                _ => unreachable!("eps[{i}] was checked to be an endpoint"),
            }
        }
        let p = Offload::start(taken, cfg).map_err(offload_error)?;
        crate::new_handle(
            pool,
            Object::Offload(Arc::new(OffloadObj {
                pool: RwLock::new(Some(p)),
            })),
            "pool",
        )
    })
}

/// Queues a short request (`nargs` ≤ 8 words) to `dest` through lane `lane`.
#[no_mangle]
pub extern "C" fn smelt_offload_request(
    pool: *mut smelt_offload,
    lane: usize,
    dest: usize,
    handler: u8,
    args: *const u64,
    nargs: usize,
) -> smelt_status {
    guard(|| {
        let args = slice(args, nargs, "args")?;
        with_pool(pool, |p| p.request(lane, dest, handler, args))
    })
}

/// Waits (at most `timeout_ms`) until every command queued on `lane` so far was
/// executed and every request answered; the first error among them, if any.
#[no_mangle]
pub extern "C" fn smelt_offload_flush(
    pool: *mut smelt_offload,
    lane: usize,
    timeout_ms: u64,
) -> smelt_status {
    guard(|| {
        with_pool(pool, |p| {
            p.flush(lane)?.wait_for(Duration::from_millis(timeout_ms))
        })
    })
}

/// The counters of `lane`.
#[no_mangle]
pub extern "C" fn smelt_offload_stats(
    pool: *const smelt_offload,
    lane: usize,
    stats: *mut smelt_offload_counters,
) -> smelt_status {
    guard(|| {
        let s = with_pool(pool, |p| p.stats(lane))?;
        out(
            stats,
            smelt_offload_counters {
                commands: s.commands,
                requests: s.requests,
                handled: s.handled,
                errors: s.errors,
                sleeps: s.sleeps,
                wakes: s.wakes,
                queued: s.queued,
            },
            "stats",
        )
    })
}

/// Stops the pool: executes what is queued and waits for answers at most
/// `timeout_ms`, drops what is left (its count through `left`, if not NULL: commands
/// dropped plus requests unanswered), and stores the endpoints as new handles in
/// `eps[0..n]` (`n` must be the number of lanes), or frees them if `eps` is NULL.
#[no_mangle]
pub extern "C" fn smelt_offload_stop(
    pool: *mut smelt_offload,
    timeout_ms: u64,
    eps: *mut *mut smelt_am_endpoint,
    n: usize,
    left: *mut u64,
) -> smelt_status {
    guard(|| {
        let lanes = with_pool(pool, |p| Ok(p.lanes()))?;
        if !eps.is_null() && n != lanes {
            return err(
                SMELT_ERR_INVALID_ARGUMENT,
                format!("room for {n} endpoints, the pool has {lanes}"),
            );
        }
        let obj = match handle::remove(id(pool), Kind::Offload, "pool", Wait::Block, |_| Ok(()))? {
            Object::Offload(o) => o,
            _ => unreachable!("checked to be a pool"),
        };
        let p = obj.pool.write().unwrap_or_else(|p| p.into_inner()).take();
        let Some(p) = p else {
            return err(crate::SMELT_ERR_INVALID_HANDLE, "pool is already stopped");
        };
        let ends = p
            .shutdown(Duration::from_millis(timeout_ms))
            .map_err(offload_error)?;
        let l: u64 = ends.iter().map(|e| e.dropped_commands + e.unanswered).sum();
        if !left.is_null() {
            out(left, l, "left")?;
        }
        if !eps.is_null() {
            for (i, e) in ends.into_iter().enumerate() {
                crate::new_handle(
                    eps.wrapping_add(i),
                    Object::AmEndpoint(Box::new(e.endpoint)),
                    "eps",
                )?;
            }
        }
        Ok(())
    })
}
