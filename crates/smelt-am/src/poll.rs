//! How often an endpoint polls its slow channel (the network).
//!
//! Polling the network costs far more than polling shared memory (an `MPI_Iprobe`
//! against a few cache-line reads), so an endpoint with both polls the network on
//! only some of its polls. The adaptive policy is the one of the multi-protocol
//! Active Messages paper: a history of the last 32 network polls (found a message or
//! not) predicts traffic; the more of them found one, the more often the network is
//! polled, between once every `max_every` polls (busy) and once every `min_every`
//! polls (quiet). A network poll that is due takes in up to as many messages as polls
//! it skipped, to balance the two protocols.

use crate::AmError;

/// When an endpoint polls its slow channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollPolicy {
    /// On every poll.
    Always,
    /// Once every `n` polls (`n` ≥ 1).
    Every(u32),
    /// Between once every `max_every` polls (when the last 32 network polls all found
    /// messages) and once every `min_every` polls (when none did), linearly in the
    /// number that did.
    Adaptive {
        /// The most frequent rate: once every this many polls.
        max_every: u32,
        /// The least frequent rate: once every this many polls.
        min_every: u32,
    },
}

impl PollPolicy {
    /// The paper's policy: between 1/8 and 1/32.
    pub const ADAPTIVE: PollPolicy = PollPolicy::Adaptive {
        max_every: 8,
        min_every: 32,
    };

    /// Checks the parameters ([`AmError::Invalid`] says what is wrong).
    pub fn validate(&self) -> Result<(), AmError> {
        match *self {
            PollPolicy::Always => Ok(()),
            PollPolicy::Every(0) => Err(AmError::Invalid(
                "a poll policy of once every 0 polls".into(),
            )),
            PollPolicy::Every(_) => Ok(()),
            PollPolicy::Adaptive {
                max_every,
                min_every,
            } => {
                if max_every == 0 || min_every < max_every {
                    Err(AmError::Invalid(format!(
                        "adaptive polling between once every {max_every} and once every {min_every} polls (need 1 ≤ max_every ≤ min_every)"
                    )))
                } else {
                    Ok(())
                }
            }
        }
    }
}

impl Default for PollPolicy {
    fn default() -> Self {
        PollPolicy::ADAPTIVE
    }
}

impl std::str::FromStr for PollPolicy {
    type Err = AmError;
    /// `always`, `every:N`, `adaptive` or `adaptive:MAX:MIN` (e.g. `adaptive:8:32`).
    fn from_str(s: &str) -> Result<Self, AmError> {
        let num = |v: &str| {
            v.parse::<u32>()
                .map_err(|_| AmError::Invalid(format!("poll policy {s:?}: {v:?} is not a count")))
        };
        let parts: Vec<&str> = s.split(':').collect();
        let p = match parts.as_slice() {
            ["always"] => PollPolicy::Always,
            ["every", n] => PollPolicy::Every(num(n)?),
            ["adaptive"] => PollPolicy::ADAPTIVE,
            ["adaptive", a, b] => PollPolicy::Adaptive {
                max_every: num(a)?,
                min_every: num(b)?,
            },
            _ => {
                return Err(AmError::Invalid(format!(
                    "poll policy {s:?}: expected always, every:N, adaptive or adaptive:MAX:MIN"
                )))
            }
        };
        p.validate()?;
        Ok(p)
    }
}

impl std::fmt::Display for PollPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PollPolicy::Always => write!(f, "always"),
            PollPolicy::Every(n) => write!(f, "every:{n}"),
            PollPolicy::Adaptive {
                max_every,
                min_every,
            } => write!(f, "adaptive:{max_every}:{min_every}"),
        }
    }
}

/// The state of a policy: when the next slow poll is due.
#[derive(Debug, Clone)]
pub(crate) struct Poller {
    policy: PollPolicy,
    /// Polls left until the next slow poll.
    countdown: u32,
    /// One bit per recent slow poll, newest lowest: 1 if it found a message.
    history: u32,
    /// The interval in force.
    interval: u32,
}

impl Poller {
    pub(crate) fn new(policy: PollPolicy) -> Poller {
        let mut p = Poller {
            policy,
            countdown: 1,
            history: 0,
            interval: 1,
        };
        p.interval = p.current_interval();
        p
    }

    fn current_interval(&self) -> u32 {
        match self.policy {
            PollPolicy::Always => 1,
            PollPolicy::Every(n) => n.max(1),
            PollPolicy::Adaptive {
                max_every,
                min_every,
            } => {
                let hits = self.history.count_ones();
                min_every - (min_every - max_every) * hits / 32
            }
        }
    }

    /// Counts one poll: true if the slow channel is due now.
    #[inline]
    pub(crate) fn due(&mut self) -> bool {
        self.countdown -= 1;
        if self.countdown == 0 {
            self.countdown = self.interval;
            true
        } else {
            false
        }
    }

    /// How many messages a due slow poll may take in.
    #[inline]
    pub(crate) fn batch(&self) -> u32 {
        self.interval
    }

    /// Records what a slow poll found.
    #[inline]
    pub(crate) fn record(&mut self, found: bool) {
        self.history = (self.history << 1) | found as u32;
        self.interval = self.current_interval();
        self.countdown = self.countdown.min(self.interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(p: &mut Poller, polls: u32) -> u32 {
        (0..polls).filter(|_| p.due()).count() as u32
    }

    #[test]
    fn adaptive_stays_between_its_bounds() {
        let mut p = Poller::new(PollPolicy::ADAPTIVE);
        // Quiet network: once every 32 polls.
        for _ in 0..64 {
            if p.due() {
                p.record(false);
            }
        }
        assert_eq!(rate(&mut p, 3200), 100);
        // Busy network: every slow poll finds something, rate climbs to 1/8.
        let mut due = 0;
        for _ in 0..3200 {
            if p.due() {
                p.record(true);
                due += 1;
            }
        }
        assert!(due > 100 && due <= 400, "{due}");
        assert_eq!(p.interval, 8);
        assert_eq!(p.batch(), 8);
        // And back down when it goes quiet again.
        for _ in 0..3200 {
            if p.due() {
                p.record(false);
            }
        }
        assert_eq!(p.interval, 32);
    }

    #[test]
    fn fixed_policies() {
        assert_eq!(rate(&mut Poller::new(PollPolicy::Always), 100), 100);
        assert_eq!(rate(&mut Poller::new(PollPolicy::Every(4)), 100), 25);
    }

    #[test]
    fn parse_and_print() {
        for s in ["always", "every:4", "adaptive:8:32", "adaptive:2:64"] {
            assert_eq!(s.parse::<PollPolicy>().unwrap().to_string(), s);
        }
        assert_eq!(
            "adaptive".parse::<PollPolicy>().unwrap(),
            PollPolicy::ADAPTIVE
        );
        for bad in [
            "",
            "every:0",
            "adaptive:32:8",
            "adaptive:0:4",
            "sometimes",
            "every:x",
        ] {
            assert!(bad.parse::<PollPolicy>().is_err(), "{bad}");
        }
    }
}
