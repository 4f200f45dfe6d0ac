//! The link configuration every service's config embeds.

use std::time::Duration;

use smelt_transport::WaitPolicy;

/// How a service's links are built and waited on: slots per ring, how a blocked
/// member waits, and the longest it waits. Every service config embeds one as its
/// `link` field (`AmConfig::link`, `GlobalConfig::link`, `OffloadConfig::link`, …),
/// so the three settings have one name and one default everywhere; a service that
/// needs another default sets it from [`LinkConfig::default`] in its own `Default`
/// or constructor, with the reason beside it.
///
/// ```
/// use std::time::Duration;
/// use smelt_mesh::{LinkConfig, WaitPolicy};
/// let l = LinkConfig::default()
///     .capacity(128)
///     .wait(WaitPolicy::OVERSUBSCRIBED)
///     .timeout(Duration::from_secs(5));
/// assert_eq!(l.capacity, 128);
/// assert_eq!(LinkConfig::default().capacity, smelt_mesh::LinkConfig::CAPACITY);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// Slots (cache lines of 48 payload bytes) per ring, each way, per link. Small
    /// values make senders wait for room; at least 2. Default [`LinkConfig::CAPACITY`]
    /// (64).
    pub capacity: usize,
    /// How a blocked member waits (spin, then yield, then sleep). Default `None`: as
    /// the service chooses from the number of members and the CPUs this process may
    /// use ([`WaitPolicy::DEDICATED`] when every member has a CPU of its own,
    /// [`WaitPolicy::OVERSUBSCRIBED`] otherwise; services without a member count use
    /// the oversubscribed policy).
    pub wait: Option<WaitPolicy>,
    /// The longest any send or wait on a link may take before it fails with the
    /// service's timeout error: never a hang. Default [`LinkConfig::TIMEOUT`] (30 s);
    /// real waits on an oversubscribed machine never come close.
    pub timeout: Duration,
}

impl LinkConfig {
    /// Default slots per ring: a world mesh's default,
    /// [`DEFAULT_CAPACITY`](crate::world::DEFAULT_CAPACITY).
    pub const CAPACITY: usize = crate::world::DEFAULT_CAPACITY;
    /// Default longest wait.
    pub const TIMEOUT: Duration = Duration::from_secs(30);

    /// With `slots` slots per ring.
    pub fn capacity(mut self, slots: usize) -> LinkConfig {
        self.capacity = slots;
        self
    }

    /// With wait policy `w` (instead of the service's choice).
    pub fn wait(mut self, w: WaitPolicy) -> LinkConfig {
        self.wait = Some(w);
        self
    }

    /// With longest wait `t`.
    pub fn timeout(mut self, t: Duration) -> LinkConfig {
        self.timeout = t;
        self
    }

    /// The wait policy: the one set, else `auto` (the service's choice).
    pub fn wait_or(&self, auto: WaitPolicy) -> WaitPolicy {
        self.wait.unwrap_or(auto)
    }
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            capacity: LinkConfig::CAPACITY,
            wait: None,
            timeout: LinkConfig::TIMEOUT,
        }
    }
}
