//! Latches: what the owner of a job waits on, set once by whoever ran the job.
//!
//! With `job.rs`, the crate's only `unsafe`: setting a latch may let its owner free it,
//! so [`Latch::set`] takes a raw pointer and touches nothing behind it after the store
//! that publishes "set".

use crate::pool::Registry;
#[cfg(smelt_tasks_loom)]
use loom::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(smelt_tasks_loom))]
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

/// Something a job sets once when it finished.
pub(crate) trait Latch {
    /// Sets the latch.
    ///
    /// # Safety
    /// `this` points to a live latch; after the call it may be gone.
    unsafe fn set(this: *const Self);
}

const UNSET: usize = 0;
const SLEEPY: usize = 1;
const SET: usize = 2;

/// The state word of a latch a worker waits on while it steals: unset, sleepy (the owner
/// is about to park or parked: the setter must unpark it), set.
#[derive(Debug)]
pub(crate) struct CoreLatch {
    state: AtomicUsize,
}

impl CoreLatch {
    pub(crate) fn new() -> Self {
        CoreLatch {
            state: AtomicUsize::new(UNSET),
        }
    }
    /// Set? (`Acquire`: the job's result is visible after `true`.)
    #[inline]
    pub(crate) fn probe(&self) -> bool {
        self.state.load(Ordering::Acquire) == SET
    }
    /// Announces that the owner will park: false if the latch was set meanwhile.
    pub(crate) fn get_sleepy(&self) -> bool {
        self.state
            .compare_exchange(UNSET, SLEEPY, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
    /// Back from parking (the latch may have been set meanwhile).
    pub(crate) fn wake_up(&self) {
        let _ = self
            .state
            .compare_exchange(SLEEPY, UNSET, Ordering::AcqRel, Ordering::Acquire);
    }
    /// Sets the state; true if the owner had announced a park.
    ///
    /// # Safety
    /// `this` points to a live latch; it may be gone once this returns.
    unsafe fn set(this: *const Self) -> bool {
        // SAFETY: the caller guarantees `this` is live for this one access.
        unsafe { (*this).state.swap(SET, Ordering::AcqRel) == SLEEPY }
    }
}

/// The latch of a `join`'s second job or of a scope: its owner is worker `owner` of
/// `registry`.
pub(crate) struct SpinLatch {
    pub(crate) core: CoreLatch,
    registry: *const Registry,
    owner: usize,
}

// SAFETY: the registry pointer is only dereferenced by `set`, which runs on a worker of
// that registry (every job does), and a registry lives as long as any of its workers.
unsafe impl Send for SpinLatch {}
// SAFETY: as for Send; the state word is atomic.
unsafe impl Sync for SpinLatch {}

impl SpinLatch {
    pub(crate) fn new(registry: &Registry, owner: usize) -> Self {
        SpinLatch {
            core: CoreLatch::new(),
            registry,
            owner,
        }
    }
}

impl Latch for SpinLatch {
    unsafe fn set(this: *const Self) {
        // The registry it points to outlives every job (each job runs on one of the
        // registry's workers, which hold it), so reading it before and using it after is
        // sound.
        // SAFETY: `this` is live until the store in `CoreLatch::set`.
        let (registry, owner) = unsafe { ((*this).registry, (*this).owner) };
        // SAFETY: `this` is live for this call (the caller's guarantee).
        if unsafe { CoreLatch::set(&(*this).core) } {
            // SAFETY: the registry outlives its workers' jobs (above).
            unsafe { (*registry).unpark(owner) };
        }
    }
}

/// A latch a thread outside the pool blocks on.
#[derive(Debug, Default)]
pub(crate) struct LockLatch {
    done: Mutex<bool>,
    cv: Condvar,
}

impl LockLatch {
    pub(crate) fn new() -> Self {
        LockLatch::default()
    }
    /// Blocks until set.
    pub(crate) fn wait(&self) {
        let mut g = self.done.lock().unwrap_or_else(|e| e.into_inner());
        while !*g {
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Latch for LockLatch {
    unsafe fn set(this: *const Self) {
        // The waiter cannot return from `wait` (and free the latch) before it retakes the
        // mutex, which it can only do after this guard is dropped; nothing is touched after
        // that.
        // SAFETY: as argued in the lines above.
        let this = unsafe { &*this };
        let mut g = this.done.lock().unwrap_or_else(|e| e.into_inner());
        *g = true;
        this.cv.notify_all();
    }
}

/// Counts a scope's unfinished jobs; set when the count reaches zero.
pub(crate) struct CountLatch {
    count: AtomicUsize,
    inner: SpinLatch,
}

impl CountLatch {
    /// Starts at one (the scope's own body).
    pub(crate) fn new(registry: &Registry, owner: usize) -> Self {
        CountLatch {
            count: AtomicUsize::new(1),
            inner: SpinLatch::new(registry, owner),
        }
    }
    pub(crate) fn increment(&self) {
        self.count.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn core(&self) -> &CoreLatch {
        &self.inner.core
    }
}

impl Latch for CountLatch {
    unsafe fn set(this: *const Self) {
        // `this` is live until the count reaches zero: its owner waits for the
        // inner latch, which only the last decrement sets.
        // SAFETY: as argued in the lines above.
        if unsafe { (*this).count.fetch_sub(1, Ordering::AcqRel) } == 1 {
            // SAFETY: as above; `SpinLatch::set` touches nothing after its store.
            unsafe { Latch::set(&(*this).inner as *const SpinLatch) }
        }
    }
}

/// Sets a latch from safe code.
///
/// The caller is a job that holds the only remaining claim on the latch (see `job.rs`)
/// and passes a pointer made from a live reference; it does not use it again.
pub(crate) fn set_raw<L: Latch>(latch: *const L) {
    // The caller made `latch` from a live reference just before; the callee
    // touches nothing after its publishing store.
    // SAFETY: as argued in the lines above.
    unsafe { L::set(latch) }
}

/// A loom model of the latch a worker parks on (`RUSTFLAGS="--cfg smelt_tasks_loom" cargo test -p
/// smelt-tasks --lib --release latch`): whatever the interleaving, the owner that
/// announced "sleepy" and parked is unparked by the setter, or sees the latch set before
/// it parks; no wake-up is lost (the real owner also parks with a timeout, which loom's
/// park has not: a lost wake-up would show here as a deadlock).
#[cfg(all(test, smelt_tasks_loom))]
mod loom_model {
    use super::CoreLatch;
    use loom::sync::Arc;

    #[test]
    fn a_set_latch_always_wakes_its_owner() {
        loom::model(|| {
            let latch = Arc::new(CoreLatch::new());
            let owner = loom::thread::current();
            let l2 = latch.clone();
            let setter = loom::thread::spawn(move || {
                // SAFETY: `l2` keeps the latch alive for the call.
                if unsafe { CoreLatch::set(&*l2) } {
                    owner.unpark();
                }
            });
            // The owner's side of `WorkerThread::wait_until` (without the stealing).
            while !latch.probe() {
                if latch.get_sleepy() {
                    loom::thread::park();
                    latch.wake_up();
                }
            }
            setter.join().unwrap();
        });
    }
}
