//! The wake-up handshake between a waiter that parks and a peer that makes progress,
//! and the two ways of parking (a thread of this process, or a futex word in memory
//! shared with other processes).
//!
//! # The handshake
//!
//! The waiter stores "I am waiting" and then re-checks the ring; the peer stores its
//! progress (a slot header, a read position) and then loads "is anyone waiting". That
//! is the store-buffer (Dekker) pattern: with nothing between each side's store and
//! its load, both loads may see old values (each store still sits in its core's store
//! buffer), the waiter parks although data arrived and the peer wakes nobody: a lost
//! wake-up, bounded only by the park timeout. Both sides need a full fence between
//! their store and their load ([`waiter_fence`], [`waker_fence`]).
//!
//! A full fence on the sending fast path would stall every send until the slot's
//! cache line is owned (a line transfer, the very latency the channel exists to
//! hide). So where the kernel offers it, the fence is *asymmetric*: the rare side (the
//! waiter, about to park) runs `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`, which
//! executes a full memory barrier on every CPU running a thread of a registered
//! process, and the frequent side (the waker) needs only a compiler fence. If the
//! waker's load ran before that barrier, its earlier store was drained by the barrier
//! and the waiter's re-check sees it; if after, the load sees "waiting". This is the
//! documented use of membarrier (and of Linux's own `sys_membarrier` users such as
//! liburcu). Every process that uses channels registers at its first channel, so the
//! pattern holds across processes sharing memory too. Where membarrier is missing
//! (old kernels, sandboxes, Miri) both sides use `fence(SeqCst)`; under loom both
//! sides always use `fence(SeqCst)`, the model of the barrier.

use crate::sync::{fence, AtomicU32, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::AtomicU8;
use std::time::Duration;

/// 0 = not decided yet, 1 = asymmetric (membarrier), 2 = symmetric fences.
#[cfg(not(loom))]
static MODE: AtomicU8 = AtomicU8::new(0);

#[cfg(all(not(loom), target_os = "linux", not(miri)))]
fn decide() -> u8 {
    const QUERY: libc::c_long = 0;
    const GLOBAL_EXPEDITED: libc::c_long = 1 << 1;
    const REGISTER_GLOBAL_EXPEDITED: libc::c_long = 1 << 2;
    // Membarrier takes two integer arguments and touches no memory of ours;
    // an unsupported command only returns an error.
    // SAFETY: as argued in the lines above.
    let supported = unsafe { libc::syscall(libc::SYS_membarrier, QUERY, 0) };
    if supported < 0
        || supported & GLOBAL_EXPEDITED == 0
        || supported & REGISTER_GLOBAL_EXPEDITED == 0
    {
        return 2;
    }
    // SAFETY: as above.
    let r = unsafe { libc::syscall(libc::SYS_membarrier, REGISTER_GLOBAL_EXPEDITED, 0) };
    if r == 0 {
        1
    } else {
        2
    }
}

#[cfg(all(not(loom), not(all(target_os = "linux", not(miri)))))]
fn decide() -> u8 {
    2
}

/// Decides (once per process) whether the asymmetric barrier is available, and
/// registers this process for it. Called when a channel is created or attached, so
/// that the registration precedes every use of the channel.
pub(crate) fn init() {
    #[cfg(not(loom))]
    if MODE.load(Ordering::Acquire) == 0 {
        MODE.store(decide(), Ordering::Release);
    }
}

/// True if the waker side needs a real fence (no asymmetric barrier here).
#[cfg(not(loom))]
#[inline(always)]
fn symmetric() -> bool {
    MODE.load(Ordering::Relaxed) != 1
}

/// True if [`waker_fence`] is a full fence in this process (no asymmetric barrier):
/// what a channel end caches at creation (after [`init`]) for its fast path.
#[inline]
pub(crate) fn waker_fence_is_full() -> bool {
    #[cfg(loom)]
    return true;
    #[cfg(not(loom))]
    symmetric()
}

/// The waker's side of the handshake: between storing progress and loading the
/// waiter's flag. A compiler fence where the waiter runs membarrier, a full fence
/// otherwise.
#[inline(always)]
pub(crate) fn waker_fence() {
    #[cfg(loom)]
    fence(Ordering::SeqCst);
    #[cfg(not(loom))]
    if symmetric() {
        fence(Ordering::SeqCst);
    } else {
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
    }
}

/// The waiter's side of the handshake: between storing its waiting flag and
/// re-checking the ring.
#[inline]
pub(crate) fn waiter_fence() {
    #[cfg(loom)]
    fence(Ordering::SeqCst);
    #[cfg(not(loom))]
    {
        if !symmetric() {
            #[cfg(all(target_os = "linux", not(miri)))]
            {
                const GLOBAL_EXPEDITED: libc::c_long = 1 << 1;
                // SAFETY: integer arguments only; registered in `init`.
                let r = unsafe { libc::syscall(libc::SYS_membarrier, GLOBAL_EXPEDITED, 0) };
                if r == 0 {
                    return;
                }
            }
        }
        fence(Ordering::SeqCst);
    }
}

/// Blocks while `*word == expected`, at most `timeout` (a futex wait on memory that
/// may be shared with other processes). Spurious returns are allowed.
#[cfg(all(not(loom), target_os = "linux", not(miri)))]
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // `word` is a live, aligned 32-bit atomic for the call (the caller holds its mapping or
    // allocation); FUTEX_WAIT only reads it; `ts` outlives the call. Errors (EAGAIN, EINTR,
    // ETIMEDOUT) are fine: the caller re-checks.
    // SAFETY: as argued in the lines above.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes every waiter blocked in [`futex_wait`] on `word`.
#[cfg(all(not(loom), target_os = "linux", not(miri)))]
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned 32-bit atomic; FUTEX_WAKE does not access it.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

/// Without futexes (loom, Miri): sleep instead; the caller's loop re-checks.
#[cfg(not(all(not(loom), target_os = "linux", not(miri))))]
pub(crate) fn futex_wait(_word: &AtomicU32, _expected: u32, timeout: Duration) {
    #[cfg(loom)]
    {
        let _ = timeout;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    std::thread::sleep(timeout.min(Duration::from_micros(100)));
}

/// Without futexes nothing is blocked in the kernel.
#[cfg(not(all(not(loom), target_os = "linux", not(miri))))]
pub(crate) fn futex_wake(_word: &AtomicU32) {}

/// The handshake itself, model-checked: every interleaving and every reordering the
/// memory model allows. `RUSTFLAGS="--cfg loom" cargo test -p smelt-transport --release --lib`
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::AtomicU64;
    use loom::sync::Arc;

    /// Runs the waiter (announce, fence, re-check) against the waker (publish, fence,
    /// look for a waiter) and fails if both miss each other: the waiter would park
    /// although the data is there, and nobody would wake it.
    fn handshake(
        waiter: fn(&AtomicU32, &AtomicU64) -> u64,
        waker: fn(&AtomicU32, &AtomicU64) -> u32,
    ) {
        loom::model(move || {
            let waiting = Arc::new(AtomicU32::new(0));
            let data = Arc::new(AtomicU64::new(0));
            let (w2, d2) = (waiting.clone(), data.clone());
            let t = loom::thread::spawn(move || waker(&w2, &d2));
            let seen = waiter(&waiting, &data);
            let woke = t.join().unwrap();
            assert!(seen != 0 || woke != 0, "lost wake-up");
        });
    }

    #[test]
    fn fenced_handshake_never_loses_a_wakeup() {
        handshake(
            |waiting, data| {
                waiting.store(1, Ordering::SeqCst);
                waiter_fence();
                data.load(Ordering::Acquire)
            },
            |waiting, data| {
                data.store(1, Ordering::Release);
                waker_fence();
                waiting.load(Ordering::Relaxed)
            },
        );
    }

    /// The ordering before the fix (a SeqCst store and re-check on the waiter's side, a
    /// Release store and a Relaxed load on the waker's): loom finds the lost wake-up.
    #[test]
    #[should_panic(expected = "lost wake-up")]
    fn unfenced_handshake_loses_a_wakeup() {
        handshake(
            |waiting, data| {
                waiting.store(1, Ordering::SeqCst);
                data.load(Ordering::SeqCst)
            },
            |waiting, data| {
                data.store(1, Ordering::Release);
                waiting.load(Ordering::Relaxed)
            },
        );
    }
}
