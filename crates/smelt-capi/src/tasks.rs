//! Fork-join tasks (`smelt-tasks`) from C: `smelt_task_run`, `smelt_task_spawn`,
//! `smelt_task_sync` in `smelt.h`, Cilk's spawn and sync over the work-stealing pool.
//!
//! Each running task has a frame (a `TaskGroup`) on its worker's stack of frames:
//! `smelt_task_spawn` adds a child to the current frame, `smelt_task_sync` waits for the
//! frame's children (running other tasks meanwhile), and a task's frame is synced when
//! its function returns (implicit sync). Frames nest as the calls do, since a worker
//! runs other tasks only inside a sync, on top of its own frame.

use crate::{err, guard, smelt_status, Error, Res, SMELT_ERR_INVALID_ARGUMENT, SMELT_ERR_RUNTIME};
use smelt_tasks::{Pool, PoolConfig, TaskError, TaskGroup};
use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// A task function (see `smelt.h`).
pub type smelt_task_fn = Option<unsafe extern "C" fn(arg: *mut c_void)>;

/// The pool of the last `smelt_task_run` and its number of workers.
static POOL: Mutex<Option<(usize, Arc<Pool>)>> = Mutex::new(None);

thread_local! {
    static FRAMES: RefCell<Vec<TaskGroup>> = const { RefCell::new(Vec::new()) };
}

fn task_error(e: TaskError) -> Error {
    let code = match &e {
        TaskError::Invalid(_) | TaskError::Pin { .. } => SMELT_ERR_INVALID_ARGUMENT,
        _ => SMELT_ERR_RUNTIME,
    };
    Error(code, e.to_string())
}

/// Runs `f(arg)` as a task with a frame of its own, then syncs the frame.
fn run_frame(f: unsafe extern "C" fn(*mut c_void), arg_addr: usize) -> Result<(), TaskError> {
    FRAMES.with(|fr| fr.borrow_mut().push(TaskGroup::new()));
    let arg: *mut c_void = std::ptr::with_exposed_provenance_mut(arg_addr);
    // `f` is the caller's smelt_task_fn; smelt.h requires `arg` to stay valid
    // (and usable from any thread) until the task finished, and forbids `f` to unwind.
    // SAFETY: as argued in the lines above.
    unsafe { f(arg) };
    let g = FRAMES.with(|fr| fr.borrow_mut().pop());
    match g {
        Some(g) => g.wait(),
        None => Err(TaskError::Invalid("a task's frame vanished".into())),
    }
}

fn current_frame(what: &str) -> Res<TaskGroup> {
    FRAMES.with(|fr| fr.borrow().last().cloned()).ok_or_else(|| {
        Error(
            SMELT_ERR_INVALID_ARGUMENT,
            format!("{what} outside a task (call it from a function run by smelt_task_run or smelt_task_spawn)"),
        )
    })
}

fn pool(workers: usize) -> Res<Arc<Pool>> {
    let workers = if workers == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        workers
    };
    let mut g = POOL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((n, p)) = g.as_ref() {
        if *n == workers {
            return Ok(p.clone());
        }
    }
    let p = Arc::new(Pool::new(PoolConfig::new(workers)).map_err(task_error)?);
    *g = Some((workers, p.clone()));
    Ok(p)
}

/// Runs `f(arg)` as the root task on a pool of `workers` threads (0: one per allowed
/// CPU) and returns once it and every task it spawned finished.
#[no_mangle]
pub extern "C" fn smelt_task_run(
    workers: usize,
    f: smelt_task_fn,
    arg: *mut c_void,
) -> smelt_status {
    guard(|| {
        let Some(f) = f else {
            return err(SMELT_ERR_INVALID_ARGUMENT, "fn is NULL");
        };
        if workers > 4096 {
            return err(
                SMELT_ERR_INVALID_ARGUMENT,
                format!("{workers} workers (at most 4096)"),
            );
        }
        if FRAMES.with(|fr| !fr.borrow().is_empty()) {
            return err(
                SMELT_ERR_INVALID_ARGUMENT,
                "smelt_task_run inside a task (use smelt_task_spawn)",
            );
        }
        let p = pool(workers)?;
        let addr = arg.expose_provenance();
        p.install(move || run_frame(f, addr))
            .and_then(|r| r)
            .map_err(task_error)
    })
}

/// Spawns `f(arg)` as a child of the calling task.
#[no_mangle]
pub extern "C" fn smelt_task_spawn(f: smelt_task_fn, arg: *mut c_void) -> smelt_status {
    guard(|| {
        let Some(f) = f else {
            return err(SMELT_ERR_INVALID_ARGUMENT, "fn is NULL");
        };
        let g = current_frame("smelt_task_spawn")?;
        let addr = arg.expose_provenance();
        g.spawn(move || {
            if let Err(e) = run_frame(f, addr) {
                // Reported by the parent's sync (the group keeps the first message).
                panic!("{e}");
            }
        });
        Ok(())
    })
}

/// Waits until every child the calling task spawned so far finished.
#[no_mangle]
pub extern "C" fn smelt_task_sync() -> smelt_status {
    guard(|| current_frame("smelt_task_sync")?.wait().map_err(task_error))
}
