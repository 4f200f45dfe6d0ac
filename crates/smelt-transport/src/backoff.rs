//! Waiting that stays fast with more threads than cores: spin briefly, then yield the
//! CPU, then (the caller) parks.

/// Tunables for how a blocked send or receive waits.
///
/// A waiter first polls `spin_polls` times with a `spin_loop` hint between polls
/// (constant, not exponential: a message is seen within one poll of its arrival),
/// then polls `yield_polls` times with `thread::yield_now` between, then parks with a
/// timeout that starts at `park_initial` and doubles up to `park_max`. The other end
/// unparks a parked waiter when it sends or frees space, so the park timeout only
/// bounds the cost of a (rare) missed wakeup and of noticing a deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Polls separated by a `spin_loop` hint.
    pub spin_polls: u32,
    /// Polls separated by `yield_now`.
    pub yield_polls: u32,
    /// First park timeout.
    pub park_initial: std::time::Duration,
    /// Largest park timeout.
    pub park_max: std::time::Duration,
}

impl WaitPolicy {
    /// For threads that own a core: spin some microseconds before yielding.
    pub const DEDICATED: WaitPolicy = WaitPolicy {
        spin_polls: 2048,
        yield_polls: 64,
        park_initial: std::time::Duration::from_micros(50),
        park_max: std::time::Duration::from_millis(1),
    };
    /// For more threads than cores: spin very little (the peer is likely not running),
    /// yield for a while (cheaper than a futex wake when a few threads share a core),
    /// then park.
    pub const OVERSUBSCRIBED: WaitPolicy = WaitPolicy {
        spin_polls: 4,
        yield_polls: 128,
        park_initial: std::time::Duration::from_micros(50),
        park_max: std::time::Duration::from_millis(1),
    };
}

impl Default for WaitPolicy {
    fn default() -> Self {
        WaitPolicy::DEDICATED
    }
}

/// Backoff for wait loops: [`snooze`](Backoff::snooze) spins, then yields;
/// [`is_completed`](Backoff::is_completed) says when to stop and block instead.
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
    spin_polls: u32,
    yield_polls: u32,
}

impl Backoff {
    /// With the [`WaitPolicy::DEDICATED`] limits.
    pub fn new() -> Backoff {
        Backoff::with_policy(&WaitPolicy::DEDICATED)
    }

    /// With the spin and yield limits of `p`.
    pub fn with_policy(p: &WaitPolicy) -> Backoff {
        Backoff {
            step: 0,
            spin_polls: p.spin_polls,
            yield_polls: p.yield_polls,
        }
    }

    /// Starts over (after progress was made).
    pub fn reset(&mut self) {
        self.step = 0;
    }

    /// One waiting step: a `spin_loop` hint while in the spin phase, otherwise yields
    /// the CPU.
    #[inline]
    pub fn snooze(&mut self) {
        #[cfg(loom)]
        loom::thread::yield_now();
        #[cfg(not(loom))]
        if self.step < self.spin_polls {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
        if self.step <= self.spin_polls + self.yield_polls {
            self.step += 1;
        }
    }

    /// True once spinning and yielding are exhausted: the caller should block (park).
    #[inline]
    pub fn is_completed(&self) -> bool {
        !cfg!(loom) && self.step > self.spin_polls + self.yield_polls
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new()
    }
}

/// The scale factor of stress and soak tests: `$SMELT_STRESS` (a whole number, at
/// least 1; default 1, which keeps every suite within minutes on 2 cores).
pub fn stress_scale() -> u64 {
    match smelt_settings::count(smelt_settings::STRESS) {
        Ok(n) => n.unwrap_or(1),
        // A test run with a mistyped scale must say so, not run at scale 1 silently.
        Err(e) => panic!("{e}"),
    }
}
