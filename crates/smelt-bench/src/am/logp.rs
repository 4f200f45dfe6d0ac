//! The LogP parameters of active messages between two endpoints, measured the way
//! Culler et al. ("Assessing Fast Network Interfaces", 1996) and the multi-protocol
//! Active Messages paper do:
//!
//! * **RTT**: a request and its reply, one at a time.
//! * **o_s** (send overhead): the time one request call takes in a burst short enough
//!   never to find the queue full.
//! * **g** (gap): the time per request in a long stream (the steady state: the rate
//!   the pair sustains, replies included).
//! * **o_r** (receive overhead): the time per message of polls that run the handlers
//!   of replies already queued: the measurer sends a burst, waits without polling
//!   until every reply must have arrived, then times the polls that take them in. A
//!   burst whose polls found the queue empty before its last reply (one still on its
//!   way: the wait would be in the figure), or whose polls took longer per message
//!   than half a round trip (replies still arriving one by one), is not counted, and
//!   the next burst waits longer.
//!   Receiving pre-queued messages is the receive side of o_s's bursts of sends.
//! * **L** (latency) = RTT/2 − o_s − o_r. A negative L (overheads larger than half a
//!   round trip) is not a latency but a measurement that went wrong (a descheduled
//!   peer, a wait counted as overhead): [`LogP::check`] says so, and `smelt bench
//!   am` reports such a row as a failed figure instead of printing it.
//! * **G** (gap per byte): the time per byte of a stream of bulk requests of 1 MiB,
//!   pipelined in chunks; bandwidth = 1/G; the half-power point n½ = g/G, the message
//!   size at which the per-message and the per-byte costs are equal.
//!
//! One endpoint runs [`measure`], its peer [`respond`]; both [`register`] first.

use smelt_am::{AmError, Endpoint};
use smelt_ids::stats::median;
use smelt_transport::Link;
use std::time::{Duration, Instant};

/// Handler: a request answered at once.
pub const PING: u8 = 1;
/// Handler: the reply.
pub const PONG: u8 = 2;
/// Handler: the end of the measurement.
pub const STOP: u8 = 3;

/// The state the measurement's handlers work on.
#[derive(Debug, Default, Clone)]
pub struct State {
    /// Replies received.
    pub pongs: u64,
    /// Bytes received in bulk requests.
    pub bytes: u64,
    /// The measurer said stop.
    pub stop: bool,
}

/// How long to measure.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Round trips per sample.
    pub rounds: usize,
    /// Requests per burst for o_s (at most what the queue holds).
    pub burst: usize,
    /// Requests in the stream for g.
    pub stream: usize,
    /// Bytes of each bulk request for G.
    pub bulk: usize,
    /// Bulk requests in the stream for G.
    pub bulk_count: usize,
    /// Samples (the median is reported).
    pub samples: usize,
    /// Longest wait for the peer.
    pub timeout: Duration,
}

impl Opts {
    /// Short runs (seconds).
    pub fn quick() -> Opts {
        Opts {
            rounds: 2_000,
            burst: 32,
            stream: 20_000,
            bulk: 1 << 20,
            bulk_count: 8,
            samples: 5,
            timeout: Duration::from_secs(30),
        }
    }
}

/// LogP parameters, in nanoseconds (G in nanoseconds per byte).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LogP {
    /// Latency: RTT/2 − o_s − o_r.
    pub l: f64,
    /// Send overhead.
    pub o_s: f64,
    /// Receive overhead.
    pub o_r: f64,
    /// Gap between short messages.
    pub g: f64,
    /// Gap per byte of bulk data.
    pub big_g: f64,
    /// Round trip.
    pub rtt: f64,
}

impl LogP {
    /// The estimate is physical: every figure a positive, finite time and L ≥ 0 (the
    /// overheads fit in half a round trip). The error says which figure is not and
    /// why, with the figures it came from ([`BenchError::Invalid`](crate::BenchError)).
    pub fn check(&self) -> Result<(), crate::BenchError> {
        let named = [
            ("RTT", self.rtt),
            ("o_s", self.o_s),
            ("o_r", self.o_r),
            ("g", self.g),
            ("G", self.big_g),
        ];
        for (name, v) in named {
            if !(v.is_finite() && v > 0.0) {
                return Err(crate::BenchError::Invalid(format!(
                    "inconsistent LogP estimate: {name} = {v} ns"
                )));
            }
        }
        if !(self.l.is_finite() && self.l >= 0.0) {
            return Err(crate::BenchError::Invalid(format!(
                "inconsistent LogP estimate: L = RTT/2 - o_s - o_r = {:.1} ns < 0 (RTT {:.1}, o_s {:.1}, o_r {:.1} ns)",
                self.l, self.rtt, self.o_s, self.o_r
            )));
        }
        Ok(())
    }

    /// Bulk bandwidth, MB/s (10^6 bytes per second).
    pub fn bandwidth_mb_s(&self) -> f64 {
        1e3 / self.big_g
    }

    /// Half-power point, bytes: g / G.
    pub fn half_power_bytes(&self) -> f64 {
        self.g / self.big_g
    }
}

/// Registers the measurement's handlers (both endpoints).
pub fn register<L: Link + 'static>(ep: &mut Endpoint<State, L>) -> Result<(), AmError> {
    ep.register(PING, |s: &mut State, ctx, m| {
        s.bytes += m.data.len() as u64;
        let _ = ctx.reply(PONG, &[]);
    })?;
    ep.register(PONG, |s: &mut State, _, _| s.pongs += 1)?;
    ep.register(STOP, |s: &mut State, ctx, _| {
        s.stop = true;
        let _ = ctx.reply(PONG, &[]);
    })
}

/// Serves the measurer until it says stop.
pub fn respond<L: Link + 'static>(
    ep: &mut Endpoint<State, L>,
    timeout: Duration,
) -> Result<(), AmError> {
    ep.run_until(timeout, |s| s.stop)
}

/// o_r: the time per message of the polls that run the handlers of `o.burst` replies
/// already queued (see the module's documentation); NaN if no burst could be timed
/// whole.
fn receive_overhead<L: Link + 'static>(
    ep: &mut Endpoint<State, L>,
    peer: usize,
    o: &Opts,
    rtt: f64,
    g: f64,
) -> Result<f64, AmError> {
    let t = o.timeout;
    let remote = ep.is_remote(peer);
    let burst = o.burst.max(1);
    let reps = (o.rounds / burst).clamp(1, 64);
    // Long enough for the peer to answer the whole burst; doubled after a burst whose
    // replies were not all there yet.
    let mut wait_ns = 2.0 * rtt + 2.0 * g * burst as f64 + 2_000.0;
    let mut o_r = Vec::new();
    for _ in 0..o.samples.max(1) {
        let (mut total, mut n, mut tries) = (0.0, 0usize, 0usize);
        while n < reps && tries < 4 * reps {
            tries += 1;
            for i in 0..burst {
                ep.request(peer, PING, &[i as u64])?;
            }
            let until = Instant::now() + Duration::from_nanos(wait_ns as u64);
            while Instant::now() < until {
                std::hint::spin_loop();
            }
            let before = ep.state().pongs;
            let start = Instant::now();
            let mut whole = true;
            let mut empty = 0;
            while ep.state().pongs - before < burst as u64 {
                if ep.poll_some(burst)? > 0 {
                    empty = 0;
                    continue;
                }
                empty += 1;
                // A reply still on its way: this burst would count waiting. (Over a
                // network polled on some polls only, up to 64 polls may pass before
                // the one that polls it: those count, as they would in a program.)
                if !remote || empty > 64 {
                    whole = false;
                    break;
                }
            }
            let took = start.elapsed().as_nanos() as f64;
            ep.quiesce(t)?;
            // Polls that each found the next reply just arrived (the peer still
            // answering, descheduled maybe) never find the queue empty, but take
            // longer per message than half a round trip, which no receive of a
            // queued message does: that burst was not queued either.
            if took / burst as f64 > rtt / 2.0 {
                whole = false;
            }
            if whole {
                total += took / burst as f64;
                n += 1;
            } else {
                wait_ns = (wait_ns * 2.0).min(1e7);
            }
        }
        if n > 0 {
            o_r.push(total / n as f64);
        }
    }
    Ok(if o_r.is_empty() {
        f64::NAN
    } else {
        median(&o_r)
    })
}

/// Measures the LogP parameters of the link from `ep` to `peer` (which runs
/// [`respond`]), then tells the peer to stop.
pub fn measure<L: Link + 'static>(
    ep: &mut Endpoint<State, L>,
    peer: usize,
    o: &Opts,
) -> Result<LogP, AmError> {
    let t = o.timeout;
    let samples = o.samples.max(1);
    // Warm-up.
    for _ in 0..o.rounds.min(1000) {
        ep.request(peer, PING, &[0])?;
        ep.quiesce(t)?;
    }
    let mut rtt = Vec::new();
    for _ in 0..samples {
        let start = Instant::now();
        for i in 0..o.rounds {
            ep.request(peer, PING, &[i as u64])?;
            // Spin on polls (no backoff) for the reply.
            while ep.outstanding(peer) > 0 {
                ep.poll()?;
            }
        }
        rtt.push(start.elapsed().as_nanos() as f64 / o.rounds as f64);
    }
    let rtt = median(&rtt);
    let mut o_s = Vec::new();
    for _ in 0..samples {
        let mut total = 0.0;
        let reps = (o.rounds / o.burst.max(1)).max(1);
        for _ in 0..reps {
            let start = Instant::now();
            for i in 0..o.burst {
                ep.request(peer, PING, &[i as u64])?;
            }
            total += start.elapsed().as_nanos() as f64;
            ep.quiesce(t)?;
        }
        o_s.push(total / (reps * o.burst.max(1)) as f64);
    }
    let o_s = median(&o_s);
    let mut g = Vec::new();
    for _ in 0..samples {
        let start = Instant::now();
        for i in 0..o.stream {
            ep.request(peer, PING, &[i as u64])?;
        }
        ep.quiesce(t)?;
        g.push(start.elapsed().as_nanos() as f64 / o.stream.max(1) as f64);
    }
    let g = median(&g);
    let o_r = receive_overhead(ep, peer, o, rtt, g)?;
    let data = vec![0x5au8; o.bulk.max(1)];
    let mut big_g = Vec::new();
    for _ in 0..samples {
        let start = Instant::now();
        for i in 0..o.bulk_count.max(1) {
            ep.request_bulk(peer, PING, &[i as u64], &data)?;
        }
        ep.quiesce(t)?;
        big_g.push(start.elapsed().as_nanos() as f64 / (o.bulk_count.max(1) * data.len()) as f64);
    }
    let big_g = median(&big_g);
    ep.request(peer, STOP, &[])?;
    ep.quiesce(t)?;
    Ok(LogP {
        l: rtt / 2.0 - o_s - o_r,
        o_s,
        o_r,
        g,
        big_g,
        rtt,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use smelt_am::{threads, AmConfig};

    #[test]
    fn measures_every_parameter_between_threads() {
        let mut eps = threads(2, AmConfig::default(), |_| State::default()).unwrap();
        for ep in &mut eps {
            register(ep).unwrap();
        }
        let mut b = eps.pop().unwrap();
        let mut a = eps.pop().unwrap();
        let o = Opts {
            rounds: 50,
            burst: 8,
            stream: 200,
            bulk: 20_000,
            bulk_count: 2,
            samples: 1,
            timeout: Duration::from_secs(20),
        };
        let t = o.timeout;
        let p = std::thread::scope(|s| {
            s.spawn(move || respond(&mut b, t).unwrap());
            measure(&mut a, 1, &o).unwrap()
        });
        for v in [p.o_s, p.o_r, p.g, p.big_g, p.rtt] {
            assert!(v.is_finite() && v > 0.0, "{p:?}");
        }
        assert!(p.bandwidth_mb_s() > 0.0 && p.half_power_bytes() > 0.0);
    }

    #[test]
    fn a_negative_or_non_finite_estimate_is_inconsistent() {
        let good = LogP {
            l: 10.0,
            o_s: 40.0,
            o_r: 50.0,
            g: 60.0,
            big_g: 0.1,
            rtt: 200.0,
        };
        good.check().unwrap();
        let zero_l = LogP { l: 0.0, ..good };
        zero_l.check().unwrap();
        let neg = LogP { l: -263.0, ..good };
        let e = neg.check().unwrap_err().to_string();
        assert!(e.contains("L = RTT/2 - o_s - o_r = -263.0 ns < 0"), "{e}");
        for bad in [
            LogP {
                o_r: f64::NAN,
                ..good
            },
            LogP { o_s: 0.0, ..good },
            LogP { g: -1.0, ..good },
            LogP {
                big_g: f64::INFINITY,
                ..good
            },
            LogP {
                l: f64::NAN,
                ..good
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }
}
