//! Jobs as the deques hold them: a pointer to the job and the function that runs it.
//!
//! This is the crate's only module with `unsafe`. A [`join`](crate::join) keeps its second
//! closure in a [`StackJob`] on the joining worker's stack and pushes a [`JobRef`] to it
//! on the worker's deque; a [`Scope`](crate::Scope) boxes each spawned closure in a
//! [`HeapJob`]. The deques are `'static` (`crossbeam_deque::Worker<JobRef>`), so the
//! closure's lifetime is erased here and restored by the rule that makes it sound: the
//! owner of a stack job never returns (nor unwinds) before the job's latch is set, and a
//! scope never returns before its count of spawned jobs is back to zero. Stacks never
//! move: a stolen job runs on the thief's own stack, to completion.

use crate::latch::Latch;
use std::any::Any;
use std::cell::UnsafeCell;
use std::panic::{self, AssertUnwindSafe};

/// A type-erased pointer to a job and its runner.
#[derive(Clone, Copy, Debug)]
pub(crate) struct JobRef {
    data: *const (),
    run: unsafe fn(*const ()),
}

// SAFETY: a JobRef is only created from jobs whose closures and results are `Send`
// (`StackJob` and `HeapJob` require it), and the job it points to outlives every copy of
// it (the module doc's rule), so handing it to another thread is sound.
unsafe impl Send for JobRef {}

impl PartialEq for JobRef {
    /// The same job (a job lives at one address while it is queued).
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.data, other.data)
    }
}

impl JobRef {
    /// Runs the job (once: each JobRef is popped or stolen by exactly one worker).
    pub(crate) fn execute(self) {
        // `data` points to a live job of the type `run` expects (set together by
        // `as_job_ref`/`into_job_ref`), and the deque hands each JobRef out once.
        // SAFETY: as argued in the lines above.
        unsafe { (self.run)(self.data) }
    }
}

/// What a job left behind.
pub(crate) enum JobResult<R> {
    None,
    Ok(R),
    Panic(Box<dyn Any + Send>),
}

/// A job on its owner's stack: the closure, its result and the latch its owner waits on.
pub(crate) struct StackJob<L: Latch, F, R> {
    pub(crate) latch: L,
    func: UnsafeCell<Option<F>>,
    result: UnsafeCell<JobResult<R>>,
}

impl<L: Latch, F: FnOnce(bool) -> R + Send, R: Send> StackJob<L, F, R> {
    pub(crate) fn new(func: F, latch: L) -> Self {
        StackJob {
            latch,
            func: UnsafeCell::new(Some(func)),
            result: UnsafeCell::new(JobResult::None),
        }
    }

    /// The reference to push. The caller must not let `self` go (return or unwind past
    /// it) before the latch is set or the reference was popped back unexecuted.
    pub(crate) fn as_job_ref(&self) -> JobRef {
        JobRef {
            data: self as *const Self as *const (),
            run: Self::run_stolen,
        }
    }

    /// Runs a job another worker took: the closure gets `true` (stolen).
    unsafe fn run_stolen(this: *const ()) {
        // `this` came from `as_job_ref` on a live StackJob of this type (its owner
        // waits on the latch before letting it go).
        // SAFETY: as argued in the lines above.
        let this = unsafe { &*(this as *const Self) };
        // Only the one worker that took the JobRef touches `func` and `result`
        // until it sets the latch; the owner reads `result` only after the latch is set.
        // SAFETY: as argued in the lines above.
        let func = unsafe { (*this.func.get()).take() }.expect("a job runs once");
        let r = match panic::catch_unwind(AssertUnwindSafe(|| func(true))) {
            Ok(v) => JobResult::Ok(v),
            Err(p) => JobResult::Panic(p),
        };
        // SAFETY: as above, the owner does not read `result` before the latch is set.
        unsafe { *this.result.get() = r };
        // `this.latch` is live until this store publishes "set".
        // `set` must be the last access: the owner may free the job right after it.
        // SAFETY: as argued in the lines above.
        unsafe { L::set(&this.latch as *const L) };
    }

    /// Runs the job on its owner's thread (it was popped back, not stolen).
    pub(crate) fn run_inline(self) -> R {
        let func = self.func.into_inner().expect("a job runs once");
        func(false)
    }

    /// The result after the latch was set, with a panic as a value.
    pub(crate) fn into_job_result(self) -> JobResult<R> {
        self.result.into_inner()
    }
}

/// A boxed job of a scope: runs once, then is freed.
pub(crate) struct HeapJob<F: FnOnce() + Send> {
    func: F,
}

impl<F: FnOnce() + Send> HeapJob<F> {
    /// Boxes `func` as a job. `func` may borrow for less than `'static`: the caller (a
    /// scope) must make sure the job runs before those borrows end.
    pub(crate) fn into_job_ref(func: F) -> JobRef {
        let b = Box::new(HeapJob { func });
        JobRef {
            data: Box::into_raw(b) as *const (),
            run: Self::run,
        }
    }

    unsafe fn run(this: *const ()) {
        // SAFETY: `this` came from `Box::into_raw` in `into_job_ref` and runs once.
        let b = unsafe { Box::from_raw(this as *mut Self) };
        (b.func)();
    }
}
