//! Task groups: spawn `'static` tasks now, wait for all of them later (Cilk's spawn and
//! sync as objects; what the C API's `smelt_task_spawn`/`smelt_task_sync` use).

use crate::error::{panic_message, TaskError};
use crate::job::HeapJob;
use crate::pool::with_current;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Tasks spawned now and waited for later, from any worker.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Arc;
/// let pool = smelt_tasks::Pool::new(smelt_tasks::PoolConfig::new(2))?;
/// let sum = Arc::new(AtomicU64::new(0));
/// pool.install(|| {
///     let g = smelt_tasks::TaskGroup::new();
///     for i in 1..=10 {
///         let sum = sum.clone();
///         g.spawn(move || { sum.fetch_add(i, Ordering::Relaxed); });
///     }
///     g.wait()
/// })??;
/// assert_eq!(sum.load(Ordering::Relaxed), 55);
/// # Ok::<(), smelt_tasks::TaskError>(())
/// ```
#[derive(Clone, Default)]
pub struct TaskGroup {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    pending: AtomicUsize,
    /// The worker waiting in `wait` (its index + 1; 0: none).
    waiter: AtomicUsize,
    panic: Mutex<Option<String>>,
}

impl std::fmt::Debug for TaskGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskGroup")
            .field("pending", &self.inner.pending.load(Ordering::Relaxed))
            .finish()
    }
}

impl TaskGroup {
    /// An empty group.
    pub fn new() -> TaskGroup {
        TaskGroup::default()
    }

    /// Tasks spawned and not finished yet.
    pub fn pending(&self) -> usize {
        self.inner.pending.load(Ordering::Acquire)
    }

    /// Spawns `f`: on a worker it goes on the worker's deque (any worker may steal it);
    /// anywhere else it runs now. After a task of the computation panicked, new tasks
    /// are not run.
    pub fn spawn(&self, f: impl FnOnce() + Send + 'static) {
        with_current(|w| {
            let Some(w) = w else {
                if let Err(p) = panic::catch_unwind(AssertUnwindSafe(f)) {
                    keep(&self.inner, panic_message(&*p));
                }
                return;
            };
            if w.registry.is_poisoned() {
                return;
            }
            self.inner.pending.fetch_add(1, Ordering::Relaxed);
            let inner = Arc::clone(&self.inner);
            w.push(HeapJob::into_job_ref(move || {
                if let Err(p) = panic::catch_unwind(AssertUnwindSafe(f)) {
                    with_current(|w| {
                        if let Some(w) = w {
                            w.registry.record_panic(&*p);
                        }
                    });
                    keep(&inner, panic_message(&*p));
                }
                if inner.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
                    let waiter = inner.waiter.load(Ordering::Acquire);
                    if waiter > 0 {
                        with_current(|w| {
                            if let Some(w) = w {
                                w.registry.unpark(waiter - 1);
                            }
                        });
                    }
                }
            }));
        });
    }

    /// Waits until every task spawned so far finished, running other work meanwhile;
    /// the first panic among them as [`TaskError::Panicked`].
    pub fn wait(&self) -> Result<(), TaskError> {
        with_current(|w| {
            if let Some(w) = w {
                self.inner.waiter.store(w.index + 1, Ordering::Release);
                w.wait_while(|| self.inner.pending.load(Ordering::Acquire) != 0);
                self.inner.waiter.store(0, Ordering::Release);
            }
        });
        match self
            .inner
            .panic
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            Some(m) => Err(TaskError::Panicked(m)),
            None => Ok(()),
        }
    }
}

fn keep(inner: &Inner, m: String) {
    let mut g = inner.panic.lock().unwrap_or_else(|e| e.into_inner());
    if g.is_none() {
        *g = Some(m);
    }
}
