//! Scopes: spawn any number of tasks that may borrow from the enclosing stack frame; the
//! scope returns once all of them finished.

use crate::job::HeapJob;
use crate::latch::{self, CountLatch};
use crate::pool::{with_current, Registry, WorkerThread};
use std::any::Any;
use std::marker::PhantomData;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

/// Tasks spawned in a [`scope`]; each may borrow anything that outlives `'scope`.
pub struct Scope<'scope> {
    /// None: not on a worker, spawned tasks run at once, in order.
    inner: Option<Inner>,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    marker: PhantomData<fn(&'scope ()) -> &'scope ()>,
}

struct Inner {
    registry: Arc<Registry>,
    latch: CountLatch,
}

impl std::fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope")
            .field("parallel", &self.inner.is_some())
            .finish()
    }
}

impl<'scope> Scope<'scope> {
    /// Spawns `body` as a task of this scope; it may be stolen by any worker. Outside a
    /// pool it runs at once.
    pub fn spawn<BODY>(&self, body: BODY)
    where
        BODY: FnOnce(&Scope<'scope>) + Send + 'scope,
    {
        let Some(inner) = &self.inner else {
            if let Err(p) = panic::catch_unwind(AssertUnwindSafe(|| body(self))) {
                self.keep_panic(p);
            }
            return;
        };
        if inner.registry.is_poisoned() {
            return;
        }
        inner.latch.increment();
        let this: &Scope<'scope> = self;
        let job = HeapJob::into_job_ref(move || {
            if let Err(p) = panic::catch_unwind(AssertUnwindSafe(|| body(this))) {
                if let Some(i) = &this.inner {
                    i.registry.record_panic(&*p);
                }
                this.keep_panic(p);
            }
            if let Some(i) = &this.inner {
                // The last use of `this`: the scope may end once the count is zero.
                latch::set_raw(&i.latch as *const CountLatch);
            }
        });
        with_current(|w| WorkerThread::push_or_inject(w, &inner.registry, job));
    }

    fn keep_panic(&self, p: Box<dyn Any + Send>) {
        let mut g = self.panic.lock().unwrap_or_else(|e| e.into_inner());
        let cancelled = g.as_ref().is_some_and(|q| q.is::<crate::pool::Cancelled>());
        if g.is_none() || cancelled {
            *g = Some(p);
        }
    }
}

/// Runs `op` with a [`Scope`] and returns its value once every task spawned in the scope
/// (and in their nested scopes' parents) finished. A panic in `op` or in any spawned task
/// is re-raised here after all of them finished.
///
/// ```
/// let pool = smelt_tasks::Pool::new(smelt_tasks::PoolConfig::new(2))?;
/// let mut parts = vec![0u64; 4];
/// pool.install(|| {
///     smelt_tasks::scope(|s| {
///         for (i, p) in parts.iter_mut().enumerate() {
///             s.spawn(move |_| *p = (i as u64 + 1) * 10);
///         }
///     })
/// })?;
/// assert_eq!(parts, [10, 20, 30, 40]);
/// # Ok::<(), smelt_tasks::TaskError>(())
/// ```
pub fn scope<'scope, OP, R>(op: OP) -> R
where
    OP: FnOnce(&Scope<'scope>) -> R + Send,
    R: Send,
{
    with_current(|w| {
        let s = Scope {
            inner: w.map(|w| Inner {
                registry: Arc::clone(&w.registry),
                latch: CountLatch::new(&w.registry, w.index),
            }),
            panic: Mutex::new(None),
            marker: PhantomData,
        };
        let r = panic::catch_unwind(AssertUnwindSafe(|| op(&s)));
        if let (Some(w), Some(inner)) = (w, &s.inner) {
            // The body's own count, then wait for the spawned tasks.
            latch::set_raw(&inner.latch as *const CountLatch);
            w.wait_until(inner.latch.core());
        }
        let r = r.unwrap_or_else(|p| panic::resume_unwind(p));
        if let Some(p) = s.panic.lock().unwrap_or_else(|e| e.into_inner()).take() {
            panic::resume_unwind(p);
        }
        r
    })
}
