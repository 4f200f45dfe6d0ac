//! Fork-join tasks with work stealing, inside a process and across the processes of a
//! job.
//!
//! **Inside a process** ([`Pool`]): each worker thread owns a Chase–Lev deque
//! (`crossbeam-deque`). [`join(a, b)`](join) pushes `b` on the worker's deque, runs `a`,
//! then pops `b` back and runs it, unless a thief took it meanwhile: then the worker runs
//! other work (its own deque first, then stealing) until `b` is done. This is *child
//! stealing* (help-first, as rayon and TBB do, unlike Cilk's continuation stealing):
//! what a thief takes is a closure that has not started, and it runs on the thief's own
//! stack; a running stack never moves between OS threads (which would be undefined
//! behaviour with thread-locals). [`scope`] spawns any number of borrowing tasks,
//! [`parallel_for`] and [`reduce`] split an index range down to a grain size with `join`.
//! Idle workers spin, then yield, then sleep (`smelt_transport`'s `Backoff` and
//! `WaitPolicy`), so a pool with no work burns no CPU. A task that panics fails the whole
//! computation with its message ([`TaskError::Panicked`]): the tasks not yet started are
//! cancelled, the ones running finish, nothing hangs.
//!
//! Outside a pool, `join`, `scope`, `parallel_for` and `reduce` run sequentially on the
//! calling thread (the same results, no parallelism).
//!
//! **Across processes** ([`dist`]): a task that may leave its process is a registered
//! function id and a byte payload (no pointers, no closures); idle processes steal such
//! tasks through active messages (`smelt-am`), run them in their own pool and send the
//! result back to the spawner. See `docs/tasks.md`.
//!
//! ```
//! use smelt_tasks::{join, reduce, PoolConfig, Pool};
//! let pool = Pool::new(PoolConfig::new(4))?;
//! let (a, b) = pool.install(|| join(|| 1 + 1, || "two"))?;
//! assert_eq!((a, b), (2, "two"));
//! let sum = pool.install(|| reduce(0..1000, 16, || 0u64, |i| i as u64, |x, y| x + y))?;
//! assert_eq!(sum, 499_500);
//! // A panicking task fails the computation with its message.
//! let e = pool.install(|| join(|| 1, || -> i32 { panic!("boom") })).unwrap_err();
//! assert_eq!(e, smelt_tasks::TaskError::Panicked("boom".into()));
//! # Ok::<(), smelt_tasks::TaskError>(())
//! ```

#![warn(missing_docs)]
#![deny(unsafe_code)]

pub mod apps;
pub mod checkout;
pub mod dist;
mod error;
mod group;
// The only unsafe: a job's lifetime erased for the deques, restored by its latch.
#[allow(unsafe_code)]
mod job;
#[allow(unsafe_code)]
mod latch;
mod pool;
mod scope;

pub use error::TaskError;
pub use group::TaskGroup;
pub use pool::{Pool, PoolConfig, Stats};
pub use scope::{scope, Scope};
pub use smelt_mesh::LinkConfig;

use std::ops::Range;

/// Runs `a` and `b`, potentially in parallel (`b` may be stolen by another worker), and
/// returns both results. A panic in either is re-raised once both finished.
#[inline]
pub fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    pool::with_current(|w| match w {
        Some(w) => w.join(a, b),
        None => (a(), b()),
    })
}

/// The number of workers of the pool this thread works for (1 outside a pool).
pub fn current_workers() -> usize {
    pool::with_current(|w| w.map_or(1, |w| w.workers()))
}

fn grain_for(len: usize, grain: usize) -> usize {
    if grain > 0 {
        grain
    } else {
        // Auto: about 8 pieces per worker.
        (len / (8 * current_workers())).max(1)
    }
}

/// Calls `f(i)` for every `i` in `range`, splitting it in halves with [`join`] down to
/// pieces of at most `grain` indices (0: about 8 pieces per worker).
pub fn parallel_for<F>(range: Range<usize>, grain: usize, f: F)
where
    F: Fn(usize) + Sync,
{
    fn go<F: Fn(usize) + Sync>(r: Range<usize>, grain: usize, f: &F) {
        if r.len() <= grain {
            r.for_each(f);
        } else {
            let mid = r.start + r.len() / 2;
            join(|| go(r.start..mid, grain, f), || go(mid..r.end, grain, f));
        }
    }
    let grain = grain_for(range.len(), grain);
    go(range, grain, &f);
}

/// Maps every index of `range` with `map` and combines the values with `combine`
/// (associative; `identity()` is its neutral value), splitting the range as
/// [`parallel_for`] does. The grouping is fixed by the range and grain, so the result is
/// the same on any number of workers.
pub fn reduce<T, ID, M, C>(range: Range<usize>, grain: usize, identity: ID, map: M, combine: C) -> T
where
    T: Send,
    ID: Fn() -> T + Sync,
    M: Fn(usize) -> T + Sync,
    C: Fn(T, T) -> T + Sync,
{
    fn go<T: Send, ID, M, C>(r: Range<usize>, grain: usize, id: &ID, m: &M, c: &C) -> T
    where
        ID: Fn() -> T + Sync,
        M: Fn(usize) -> T + Sync,
        C: Fn(T, T) -> T + Sync,
    {
        if r.len() <= grain {
            r.fold(id(), |acc, i| c(acc, m(i)))
        } else {
            let mid = r.start + r.len() / 2;
            let (a, b) = join(
                || go(r.start..mid, grain, id, m, c),
                || go(mid..r.end, grain, id, m, c),
            );
            c(a, b)
        }
    }
    let grain = if grain == 0 {
        range.len().div_ceil(64).max(1)
    } else {
        grain
    };
    go(range, grain, &identity, &map, &combine)
}
