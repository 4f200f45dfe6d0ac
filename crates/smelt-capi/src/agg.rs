//! Message aggregation (`smelt-agg`) from C: `smelt_agg_*` in `smelt.h`.
//!
//! `smelt_agg_threads` makes the workers of a job of `processes × workers` threads
//! (each group of `workers` sharing one active-message endpoint), each a handle used
//! by one thread at a time (`SMELT_ERR_BUSY` otherwise). Items delivered to a worker
//! are handed to the C handler, with the worker's user pointer, on the thread that
//! calls that worker's insert, poll, flush or terminate.

use crate::handle::{self, Kind, Object, Wait};
use crate::{
    err, guard, id, out, slice, smelt_status, Error, Res, SMELT_ERR_INVALID_ARGUMENT,
    SMELT_ERR_RUNTIME, SMELT_ERR_TIMEOUT,
};
use smelt_agg::{AggConfig, AggError, FlushPolicy, Scheme, Worker};
use std::ffi::{c_int, c_void};
use std::time::Duration;

/// A worker of an aggregator (opaque to C: a handle, never an address).
#[repr(C)]
pub struct smelt_agg_worker {
    _opaque: [u8; 0],
}

/// The handler of delivered items (see `smelt.h`).
pub type smelt_agg_handler =
    Option<extern "C" fn(user: *mut c_void, me: usize, item: *const c_void, size: usize)>;

/// Scheme WW: a buffer per destination worker.
pub const SMELT_AGG_WW: c_int = 0;
/// Scheme WPs: a buffer per destination process, sorted at the destination.
pub const SMELT_AGG_WPS: c_int = 1;
/// Scheme WsP: a buffer per destination process, grouped at the source.
pub const SMELT_AGG_WSP: c_int = 2;
/// Scheme PP: a buffer per (source process, destination process), shared.
pub const SMELT_AGG_PP: c_int = 3;
/// No aggregation: every item its own active message.
pub const SMELT_AGG_NONE: c_int = 4;

/// A worker's user pointer (smelt never dereferences it).
#[derive(Clone, Copy)]
pub(crate) struct User(usize);

/// A worker as the handle table keeps it.
pub(crate) type AggWorker = Worker<User>;

fn agg_error(e: AggError) -> Error {
    let code = match &e {
        AggError::Timeout { .. } => SMELT_ERR_TIMEOUT,
        AggError::Invalid(_) | AggError::NoSuchWorker { .. } | AggError::ItemSize { .. } => {
            SMELT_ERR_INVALID_ARGUMENT
        }
        AggError::Am(e) => crate::am::am_error(e.clone()).0,
        // A job's items were lost, duplicated or altered: the run failed.
        AggError::Check(_) => SMELT_ERR_RUNTIME,
    };
    Error(code, e.to_string())
}

fn worker(w: *const smelt_agg_worker, what: &str) -> Res<handle::AggGuard> {
    handle::agg_worker(id(w), what)
}

/// Makes the workers of a job of `processes × workers` threads and stores their
/// handles in `out_workers[0..processes·workers]` (see `smelt.h`).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn smelt_agg_threads(
    processes: usize,
    workers: usize,
    scheme: c_int,
    item_size: usize,
    buffer_items: usize,
    idle_flush: c_int,
    timeout_us: u64,
    h: smelt_agg_handler,
    users: *const *mut c_void,
    out_workers: *mut *mut smelt_agg_worker,
) -> smelt_status {
    guard(|| {
        let f = handler(out_workers, h)?;
        if processes == 0 || workers == 0 || processes.saturating_mul(workers) > 4096 {
            return err(
                SMELT_ERR_INVALID_ARGUMENT,
                format!("{processes} processes of {workers} workers (1 to 4096 workers in all)"),
            );
        }
        let total = processes * workers;
        let us = users_of(users, total)?;
        let cfg = config(scheme, item_size, buffer_items, idle_flush, timeout_us)?;
        let all = smelt_agg::threads(processes, workers, cfg, |w| User(us[w]), c_handler(f))
            .map_err(agg_error)?;
        insert_workers(all, out_workers)
    })
}

/// The handler of a job's making, with its output array checked (neither NULL).
fn handler(
    out_workers: *mut *mut smelt_agg_worker,
    h: smelt_agg_handler,
) -> Res<extern "C" fn(*mut c_void, usize, *const c_void, usize)> {
    if out_workers.is_null() {
        return err(SMELT_ERR_INVALID_ARGUMENT, "workers is NULL");
    }
    match h {
        Some(f) => Ok(f),
        None => err(SMELT_ERR_INVALID_ARGUMENT, "the handler is NULL"),
    }
}

/// Stores the handles of the workers made, in `out_workers[0..]`.
fn insert_workers(all: Vec<AggWorker>, out_workers: *mut *mut smelt_agg_worker) -> Res<()> {
    let objs = all
        .into_iter()
        .map(|w| Object::AggWorker(Box::new(w)))
        .collect();
    crate::world::insert_all(objs, Kind::AggWorker, out_workers, "workers")
}

/// The user pointers of `total` workers (all NULL when `users` is NULL).
fn users_of(users: *const *mut c_void, total: usize) -> Res<Vec<usize>> {
    Ok(if users.is_null() {
        vec![0; total]
    } else {
        slice(users, total, "users")?
            .iter()
            .map(|p| p.addr())
            .collect()
    })
}

/// The aggregator's configuration from the C arguments.
fn config(
    scheme: c_int,
    item_size: usize,
    buffer_items: usize,
    idle_flush: c_int,
    timeout_us: u64,
) -> Res<AggConfig> {
    let scheme = match scheme {
        SMELT_AGG_WW => Scheme::WW,
        SMELT_AGG_WPS => Scheme::WPs,
        SMELT_AGG_WSP => Scheme::WsP,
        SMELT_AGG_PP => Scheme::PP,
        SMELT_AGG_NONE => Scheme::Direct,
        s => return err(SMELT_ERR_INVALID_ARGUMENT, format!("unknown scheme {s}")),
    };
    let mut cfg = AggConfig::new(scheme, item_size).flush(FlushPolicy {
        idle: idle_flush != 0,
        timeout: (timeout_us > 0).then(|| Duration::from_micros(timeout_us)),
    });
    if buffer_items != 0 {
        cfg = cfg.buffer_items(buffer_items);
    }
    Ok(cfg)
}

/// The C handler as the aggregator's item handler.
fn c_handler(
    f: extern "C" fn(user: *mut c_void, me: usize, item: *const c_void, size: usize),
) -> impl Fn(&mut User, &[u8], &mut smelt_agg::Out<'_>) + Send + Sync + 'static {
    move |u: &mut User, item: &[u8], o| {
        // The C handler registered through smelt.h, on the worker's thread; the item
        // is valid for the call.
        f(
            std::ptr::without_provenance_mut(u.0),
            o.me(),
            item.as_ptr().cast(),
            item.len(),
        )
    }
}

/// A collective call: this member's `workers` workers of an aggregator over every
/// member of `world` (worker `w` of the job is worker `w % workers` of member
/// `w / workers`), in `out_workers[0..workers]`; the other arguments as
/// `smelt_agg_threads`'s (`users[i]`: this member's worker `i`'s pointer).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn smelt_world_agg(
    world: *mut crate::smelt_world,
    workers: usize,
    scheme: c_int,
    item_size: usize,
    buffer_items: usize,
    idle_flush: c_int,
    timeout_us: u64,
    h: smelt_agg_handler,
    users: *const *mut c_void,
    out_workers: *mut *mut smelt_agg_worker,
) -> smelt_status {
    guard(|| {
        let w = crate::world::world_of(world)?;
        let f = handler(out_workers, h)?;
        if workers == 0 || w.size().saturating_mul(workers) > 4096 {
            return err(
                SMELT_ERR_INVALID_ARGUMENT,
                format!(
                    "{} members of {workers} workers (1 to 4096 workers in all)",
                    w.size()
                ),
            );
        }
        let us = users_of(users, workers)?;
        let cfg = config(scheme, item_size, buffer_items, idle_flush, timeout_us)?;
        let first = w.rank().index() * workers;
        let all = smelt_agg::from_world(
            &w,
            workers,
            cfg,
            |i| User(us.get(i.wrapping_sub(first)).copied().unwrap_or(0)),
            c_handler(f),
        )
        .map_err(agg_error)?;
        insert_workers(all, out_workers)
    })
}

/// Inserts an item of `size` bytes (the aggregator's item size) for worker `dest`.
#[no_mangle]
pub extern "C" fn smelt_agg_insert(
    w: *mut smelt_agg_worker,
    item: *const c_void,
    size: usize,
    dest: usize,
) -> smelt_status {
    guard(|| {
        let bytes = slice(item.cast::<u8>(), size, "item")?;
        worker(w, "worker")?.insert(bytes, dest).map_err(agg_error)
    })
}

/// Makes progress without waiting; `handled` (if not NULL) gets the items handed to
/// the handler.
#[no_mangle]
pub extern "C" fn smelt_agg_poll(w: *mut smelt_agg_worker, handled: *mut usize) -> smelt_status {
    guard(|| {
        let n = worker(w, "worker")?.poll().map_err(agg_error)?;
        if !handled.is_null() {
            out(handled, n, "handled")?;
        }
        Ok(())
    })
}

/// Ships the worker's partial buffers.
#[no_mangle]
pub extern "C" fn smelt_agg_flush(w: *mut smelt_agg_worker) -> smelt_status {
    guard(|| worker(w, "worker")?.flush().map_err(agg_error))
}

/// Collective: waits until every item inserted anywhere was handled, for at most
/// `timeout_ms`.
#[no_mangle]
pub extern "C" fn smelt_agg_terminate(w: *mut smelt_agg_worker, timeout_ms: u64) -> smelt_status {
    guard(|| {
        worker(w, "worker")?
            .terminate(Duration::from_millis(timeout_ms))
            .map_err(agg_error)
    })
}

/// The worker's index and the number of workers.
#[no_mangle]
pub extern "C" fn smelt_agg_rank(
    w: *const smelt_agg_worker,
    me: *mut usize,
    n: *mut usize,
) -> smelt_status {
    guard(|| {
        let g = worker(w, "worker")?;
        out(me, g.id(), "me")?;
        out(n, g.size(), "n")
    })
}

/// The worker's counters (each output may be NULL).
#[no_mangle]
pub extern "C" fn smelt_agg_stats(
    w: *const smelt_agg_worker,
    inserted: *mut u64,
    handled: *mut u64,
    messages: *mut u64,
) -> smelt_status {
    guard(|| {
        let s = worker(w, "worker")?.stats();
        for (p, v, what) in [
            (inserted, s.inserted, "inserted"),
            (handled, s.handled, "handled"),
            (messages, s.messages, "messages"),
        ] {
            if !p.is_null() {
                out(p, v, what)?;
            }
        }
        Ok(())
    })
}

/// Releases a worker (NULL is ignored).
#[no_mangle]
pub extern "C" fn smelt_agg_worker_free(w: *mut smelt_agg_worker) -> smelt_status {
    guard(|| {
        if !w.is_null() {
            drop(handle::remove(
                id(w),
                Kind::AggWorker,
                "worker",
                Wait::Busy,
                |_| Ok(()),
            )?);
        }
        Ok(())
    })
}
