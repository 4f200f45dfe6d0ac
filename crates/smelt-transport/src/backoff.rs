//! Waiting that stays fast with more threads than cores: spin briefly, then yield the
//! CPU, then (the caller) parks.

/// Tunables for how a blocked send or receive waits.
///
/// A waiter first spins (`spin_steps` rounds of exponentially growing `spin_loop`
/// bursts), then calls `thread::yield_now` `yield_steps` times, then parks with a
/// timeout that starts at `park_initial` and doubles up to `park_max`. The other end
/// unparks a parked waiter when it sends or frees space, so the park timeout only
/// bounds the cost of a (rare) missed wakeup and of noticing a deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Spin rounds; round `i` spins `2^i` times (capped at 2^6).
    pub spin_steps: u32,
    /// `yield_now` calls after spinning.
    pub yield_steps: u32,
    /// First park timeout.
    pub park_initial: std::time::Duration,
    /// Largest park timeout.
    pub park_max: std::time::Duration,
}

impl WaitPolicy {
    /// For threads that own a core: spin a few microseconds before yielding.
    pub const DEDICATED: WaitPolicy = WaitPolicy {
        spin_steps: 10,
        yield_steps: 20,
        park_initial: std::time::Duration::from_micros(50),
        park_max: std::time::Duration::from_millis(1),
    };
    /// For more threads than cores: spin very little (the peer is likely not running),
    /// yield a few times, then park.
    pub const OVERSUBSCRIBED: WaitPolicy = WaitPolicy {
        spin_steps: 2,
        yield_steps: 4,
        park_initial: std::time::Duration::from_micros(50),
        park_max: std::time::Duration::from_millis(1),
    };
}

impl Default for WaitPolicy {
    fn default() -> Self {
        WaitPolicy::DEDICATED
    }
}

/// Exponential backoff for spin-wait loops: [`snooze`](Backoff::snooze) spins, then
/// yields; [`is_completed`](Backoff::is_completed) says when to stop and block instead.
///
/// ```
/// use smelt_transport::Backoff;
/// use std::sync::atomic::{AtomicBool, Ordering};
/// let ready = AtomicBool::new(true);
/// let mut b = Backoff::new();
/// while !ready.load(Ordering::Acquire) {
///     if b.is_completed() { std::thread::park_timeout(std::time::Duration::from_micros(100)); }
///     else { b.snooze(); }
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Backoff {
    step: u32,
    spin_steps: u32,
    yield_steps: u32,
}

const MAX_SPIN_SHIFT: u32 = 6;

impl Backoff {
    /// With the [`WaitPolicy::DEDICATED`] limits.
    pub fn new() -> Backoff {
        Backoff::with_policy(&WaitPolicy::DEDICATED)
    }

    /// With the spin and yield limits of `p`.
    pub fn with_policy(p: &WaitPolicy) -> Backoff {
        Backoff {
            step: 0,
            spin_steps: p.spin_steps,
            yield_steps: p.yield_steps,
        }
    }

    /// Starts over (after progress was made).
    pub fn reset(&mut self) {
        self.step = 0;
    }

    /// Spins `2^step` times (bounded); for lock-free retry loops that expect the
    /// other thread to finish very soon.
    #[inline]
    pub fn spin(&mut self) {
        for _ in 0..1u32 << self.step.min(MAX_SPIN_SHIFT) {
            std::hint::spin_loop();
        }
        if self.step < self.spin_steps {
            self.step += 1;
        }
    }

    /// One waiting step: spins while in the spin phase, otherwise yields the CPU.
    #[inline]
    pub fn snooze(&mut self) {
        #[cfg(loom)]
        loom::thread::yield_now();
        #[cfg(not(loom))]
        if self.step < self.spin_steps {
            for _ in 0..1u32 << self.step.min(MAX_SPIN_SHIFT) {
                std::hint::spin_loop();
            }
        } else {
            std::thread::yield_now();
        }
        if self.step <= self.spin_steps + self.yield_steps {
            self.step += 1;
        }
    }

    /// True once spinning and yielding are exhausted: the caller should block (park).
    #[inline]
    pub fn is_completed(&self) -> bool {
        !cfg!(loom) && self.step > self.spin_steps + self.yield_steps
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new()
    }
}
