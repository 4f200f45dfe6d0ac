//! Offload threads: application threads hand their communication (active-message
//! requests, network progress, aggregation flushes, any closure over an endpoint) to
//! dedicated communication threads through lock-free queues, after Vaidyanathan et al.
//! (SC'15) and Endo and Taura (HPC Asia 2018).
//!
//! An [`Offload`] pool owns a set of **lanes**; a lane is one active-message
//! [`Endpoint`] (the slides' "QP & CQ"), one [`SleepQueue`] of commands and, unless the
//! mode is [`OffloadMode::Direct`], one communication thread. Any number of application threads
//! push [commands](Offload::request) into a lane's queue (many producers, no lock). The
//! lane's thread alternates:
//!
//! * the **executor**: pops commands and posts them on the endpoint (sends requests,
//!   runs closures);
//! * the **completer**: polls the endpoint (runs the handlers of arriving replies and
//!   requests, which also progresses the network channel) and signals
//!   [`Ticket`]s whose requests were all answered.
//!
//! **Modes.** [`OffloadMode::Static`]: the threads always run, spinning and yielding when idle
//! (and napping [`OffloadConfig::static_nap`] when idle for long, so that 16 threads on 2 CPUs
//! still progress). [`OffloadMode::Dynamic`]: a thread whose lane is idle (nothing queued,
//! nothing unanswered) stops: it announces its sleep in its queue's counter and sleeps
//! in the kernel; the next command's producer sees the sleeping bit and wakes it (the
//! only system call, off the fast path: see [`SleepQueue`] for the protocol). A sleeping
//! lane still answers requests that arrive through its endpoint, within
//! [`OffloadConfig::max_sleep`]. [`OffloadMode::Direct`]: no thread; the calling application thread
//! runs each command on the endpoint itself (behind a mutex), for comparison.
//!
//! **Placement.** [`OffloadConfig::cpus`] pins each lane's thread; `smelt_model::place::default_cpus`
//! places them from the machine model: one per NUMA node (the model's nodes), each on the
//! CPU of its node that is cheapest for the node's other CPUs to reach (the model crate
//! holds it: this crate compiles no model).
//!
//! **Completion.** Requests are fire-and-forget; [`Offload::flush`] (or
//! [`Offload::request_ticket`]) gives a [`Ticket`] that completes when every command
//! queued on that lane before it was executed and every request was answered, and
//! reports the first error among them. Every wait is bounded (`OffloadConfig::link.timeout`).
//!
//! **Shutdown** ([`Offload::shutdown`]) drains the queues and answers outstanding
//! requests within a deadline, then returns the endpoints with what was left undone.
//!
//! ```
//! use smelt_am::{threads, AmConfig};
//! use smelt_offload::{OffloadConfig, OffloadMode, Offload};
//! use std::time::Duration;
//! const ADD: u8 = 1;
//! const SUM: u8 = 2;
//! let mut eps = threads(2, AmConfig::default(), |_| 0u64).unwrap();
//! let mut server = eps.pop().unwrap();
//! let mut client = eps.pop().unwrap();
//! server.register(ADD, |_, ctx, m| ctx.reply(SUM, &[m.args[0] + m.args[1]]).unwrap()).unwrap();
//! client.register(SUM, |sum: &mut u64, _, m| *sum += m.args[0]).unwrap();
//! let srv = std::thread::spawn(move || server.run_until(Duration::from_secs(5), |_| false).ok());
//! let pool = Offload::start(vec![client], OffloadConfig::new(OffloadMode::Dynamic)).unwrap();
//! std::thread::scope(|s| {
//!     for i in 0..4 {
//!         let pool = &pool;
//!         s.spawn(move || pool.request(0, 1, ADD, &[i, 1]).unwrap());
//!     }
//! });
//! pool.flush(0).unwrap().wait().unwrap();
//! let ends = pool.shutdown(Duration::from_secs(5)).unwrap();
//! assert_eq!(*ends[0].endpoint.state(), 0 + 1 + 2 + 3 + 4);
//! drop(ends);
//! srv.join().unwrap();
//! ```

#![warn(missing_docs)]
#![deny(unsafe_code)]

use smelt_am::{AmError, Endpoint, MAX_ARGS};
use smelt_mesh::world::{World, WorldLink};
pub use smelt_mesh::LinkConfig;
use smelt_transport::{Backoff, Link, SleepOutcome, SleepQueue, WaitPolicy};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// How communication is driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffloadMode {
    /// No communication thread: the application thread runs each command itself.
    Direct,
    /// A communication thread per lane, always running (spin, yield, short naps).
    Static,
    /// A communication thread per lane, asleep while its lane is idle and woken by the
    /// next command through the sleeping bit in the queue's counter.
    Dynamic,
}

impl OffloadMode {
    /// The mode's name: `direct`, `static`, `dynamic`.
    pub fn name(self) -> &'static str {
        match self {
            OffloadMode::Direct => "direct",
            OffloadMode::Static => "static",
            OffloadMode::Dynamic => "dynamic",
        }
    }
}

/// Settings of a pool.
#[derive(Debug, Clone)]
pub struct OffloadConfig {
    /// How communication is driven.
    pub mode: OffloadMode,
    /// OS CPU of each lane's thread (empty: not pinned). See
    /// `smelt_model::place::default_cpus`.
    pub cpus: Vec<u32>,
    /// The shared link settings: `capacity` is the commands each lane's queue holds
    /// (default 1024; a producer that finds it full waits, with back-off, at most
    /// `timeout`); `timeout` is the longest any wait of the pool may take (default
    /// 30 s); `wait` is how idle communication threads and waiting application threads
    /// back off (default `None`: [`WaitPolicy::OVERSUBSCRIBED`];
    /// [`WaitPolicy::DEDICATED`] spins longer, for threads that own their CPUs).
    pub link: smelt_mesh::LinkConfig,
    /// Idle rounds before a dynamic thread sleeps or a static one naps (at least; the
    /// `link.wait` policy's spinning and yielding come first).
    pub idle_rounds: u32,
    /// Longest sleep of a dynamic thread (it then looks at its endpoint; default 1 ms).
    pub max_sleep: Duration,
    /// A static thread's nap when idle past `idle_rounds` (default 20 µs).
    pub static_nap: Duration,
}

impl OffloadConfig {
    /// Defaults for `mode`: no pinning (see `smelt_model::place::default_cpus`), 1024
    /// commands per queue.
    pub fn new(mode: OffloadMode) -> OffloadConfig {
        OffloadConfig {
            mode,
            cpus: Vec::new(),
            // 1024 commands per queue, not the shared 64 slots: a command is one
            // operation (not a cache line), and producers batch many between flushes.
            link: smelt_mesh::LinkConfig::default().capacity(1024),
            idle_rounds: 64,
            max_sleep: Duration::from_millis(1),
            static_nap: Duration::from_micros(20),
        }
    }

    /// The wait policy: `link.wait`, else [`WaitPolicy::OVERSUBSCRIBED`].
    pub fn wait_policy(&self) -> WaitPolicy {
        self.link.wait_or(WaitPolicy::OVERSUBSCRIBED)
    }

    /// Checks the settings for a pool of `lanes` endpoints (what [`Offload::start`] does
    /// first).
    pub fn validate(&self, lanes: usize) -> Result<(), OffloadError> {
        let bad = |s: String| Err(OffloadError::Invalid(s));
        if lanes == 0 {
            return bad("a pool of no endpoints".into());
        }
        let cap = self.link.capacity;
        if cap == 0 || cap > smelt_transport::SLEEPQ_MAX_CAPACITY {
            return bad(format!(
                "a queue of {} commands (1 to {})",
                cap,
                smelt_transport::SLEEPQ_MAX_CAPACITY
            ));
        }
        if self.max_sleep.is_zero() || self.link.timeout.is_zero() {
            return bad("a zero max_sleep or timeout".into());
        }
        if !self.cpus.is_empty() {
            if self.mode == OffloadMode::Direct {
                return bad("CPUs for communication threads in direct mode (it has none)".into());
            }
            if self.cpus.len() != lanes {
                return bad(format!(
                    "{} CPUs for {} communication threads (give one per endpoint, or none)",
                    self.cpus.len(),
                    lanes
                ));
            }
            let allowed = smelt_transport::allowed_cpus()
                .map_err(|e| OffloadError::Invalid(format!("cannot read the allowed CPUs: {e}")))?;
            if let Some(c) = self.cpus.iter().find(|c| !allowed.contains(c)) {
                return bad(format!(
                    "CPU {c} is not one this process may run on ({allowed:?})"
                ));
            }
        }
        Ok(())
    }
}

/// What can go wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OffloadError {
    /// The pool could not be set up as asked.
    #[error("invalid offload setup: {0}")]
    Invalid(String),
    /// No lane with that index.
    #[error("no lane {lane} (the pool has {lanes})")]
    NoSuchLane {
        /// The index asked for.
        lane: usize,
        /// Lanes in the pool.
        lanes: usize,
    },
    /// An active-message operation failed (on the communication thread, reported by the
    /// next ticket of its lane, or in direct mode at once).
    #[error("active message: {0}")]
    Am(#[from] AmError),
    /// A wait reached its limit.
    #[error("timed out after {after:?} {what}")]
    Timeout {
        /// What it waited for.
        what: String,
        /// The limit.
        after: Duration,
    },
    /// The pool is shutting down or its lane's thread ended.
    #[error("lane {0} is stopped")]
    Stopped(usize),
}

/// A one-shot completion signal: the communication thread completes it, an application
/// thread waits for it (spinning, yielding, then parking). One word, so signal and
/// wait never miss each other: 0 pending, 1 done, 2 the waiter parks.
struct Signal {
    state: AtomicU32,
    waiter: Thread,
    result: Mutex<Option<Result<(), OffloadError>>>,
}

const PENDING: u32 = 0;
const DONE: u32 = 1;
const PARKED: u32 = 2;

impl Signal {
    fn new() -> Arc<Signal> {
        Arc::new(Signal {
            state: AtomicU32::new(PENDING),
            waiter: std::thread::current(),
            result: Mutex::new(None),
        })
    }

    fn complete(&self, r: Result<(), OffloadError>) {
        if r.is_err() {
            *self.result.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
        }
        if self.state.swap(DONE, Ordering::AcqRel) == PARKED {
            self.waiter.unpark();
        }
    }
}

/// Completes when every command queued on its lane before it was executed and every
/// request among them was answered; see [`Offload::flush`].
#[must_use = "a ticket does nothing unless waited for"]
pub struct Ticket {
    sig: Arc<Signal>,
    timeout: Duration,
    wait: WaitPolicy,
}

impl Ticket {
    /// True once complete (does not wait).
    pub fn is_done(&self) -> bool {
        self.sig.state.load(Ordering::Acquire) == DONE
    }

    /// Waits (spin, yield, then park) at most the pool's timeout; the first error of the
    /// commands it covers, if any. Wait from the thread that made the ticket.
    pub fn wait(self) -> Result<(), OffloadError> {
        let timeout = self.timeout;
        self.wait_for(timeout)
    }

    /// As [`wait`](Ticket::wait), at most `timeout`.
    pub fn wait_for(self, timeout: Duration) -> Result<(), OffloadError> {
        let mut b = Backoff::with_policy(&self.wait);
        let mut start = None;
        loop {
            match self.sig.state.load(Ordering::Acquire) {
                DONE => break,
                _ if !b.is_completed() => b.snooze(),
                _ => {
                    let t0 = *start.get_or_insert_with(Instant::now);
                    let left = timeout.saturating_sub(t0.elapsed());
                    if left.is_zero() {
                        return Err(OffloadError::Timeout {
                            what: "waiting for a lane to flush".into(),
                            after: timeout,
                        });
                    }
                    if std::thread::current().id() != self.sig.waiter.id() {
                        // Nobody would unpark this thread: nap instead.
                        std::thread::sleep(left.min(Duration::from_micros(100)));
                        continue;
                    }
                    match self.sig.state.compare_exchange(
                        PENDING,
                        PARKED,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) | Err(PARKED) => std::thread::park_timeout(left),
                        Err(_) => break,
                    }
                }
            }
        }
        let r = self
            .sig
            .result
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        r.unwrap_or(Ok(()))
    }
}

/// A closure run on a lane's endpoint by its communication thread.
pub type LaneFn<S, L> = Box<dyn FnOnce(&mut Endpoint<S, L>) -> Result<(), AmError> + Send>;

enum Cmd<S, L: Link> {
    Request {
        dest: usize,
        handler: u8,
        n: u8,
        args: [u64; MAX_ARGS],
        ticket: Option<Arc<Signal>>,
    },
    Run(LaneFn<S, L>),
    Flush(Arc<Signal>),
}

/// Counters of one lane.
#[derive(Debug, Default)]
struct Counters {
    commands: AtomicU64,
    requests: AtomicU64,
    handled: AtomicU64,
    errors: AtomicU64,
    sleeps: AtomicU64,
    naps: AtomicU64,
}

/// What one lane did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaneStats {
    /// Commands executed.
    pub commands: u64,
    /// Requests posted.
    pub requests: u64,
    /// Messages handled by the completer (replies and requests that arrived).
    pub handled: u64,
    /// Commands that failed.
    pub errors: u64,
    /// Times the thread slept (dynamic mode).
    pub sleeps: u64,
    /// Times a producer found it asleep and woke it.
    pub wakes: u64,
    /// Naps of a static thread.
    pub naps: u64,
    /// Commands queued now.
    pub queued: u64,
}

struct Lane<S, L: Link> {
    q: SleepQueue<Cmd<S, L>>,
    c: Counters,
    /// Direct mode: the endpoint, driven by the calling thread.
    direct: Option<Mutex<Endpoint<S, L>>>,
    /// Set by the thread when it ends (no more commands are taken).
    ended: AtomicBool,
}

struct Shared<S, L: Link> {
    lanes: Vec<Lane<S, L>>,
    stop: AtomicBool,
    deadline: Mutex<Option<Instant>>,
    cfg: OffloadConfig,
}

/// What a lane left at shutdown.
pub struct LaneEnd<S, L: Link = WorldLink> {
    /// The lane's endpoint, back to the caller.
    pub endpoint: Endpoint<S, L>,
    /// Commands still queued at the deadline (dropped, not executed).
    pub dropped_commands: u64,
    /// Requests sent and not answered at the deadline.
    pub unanswered: u64,
    /// The first error of the commands executed since the last ticket, if any.
    pub error: Option<OffloadError>,
    /// CPU time the lane's thread used (none in direct mode or if unknown).
    pub cpu_time: Option<Duration>,
    /// The lane's counters.
    pub stats: LaneStats,
}

/// A pool of communication threads over active-message endpoints; see the crate docs.
pub struct Offload<S: Send + 'static, L: Link + 'static = WorldLink> {
    shared: Arc<Shared<S, L>>,
    threads: Vec<Option<JoinHandle<ThreadEnd<S, L>>>>,
}

struct ThreadEnd<S, L: Link> {
    endpoint: Endpoint<S, L>,
    unanswered: u64,
    error: Option<OffloadError>,
    cpu_time: Option<Duration>,
}

impl<S: Send + 'static> Offload<S, WorldLink> {
    /// A collective call: this member's pool of `lanes` lanes over `world` (threads of
    /// this process, processes of `smelt launch`). Lane `i` is an endpoint of the
    /// world's `i`-th set of endpoints ([`Endpoint::from_world`], settings `am`), so
    /// lane `i` of every member reaches lane `i` of every other; it gets state
    /// `state(i)`, and `setup(i, endpoint)` registers its handlers before its thread
    /// starts (messages wait in the links until the lane's thread polls, so none meets
    /// an unregistered handler). Every member makes the same number of lanes with the
    /// same `am`; a member must not shut its pool down while others may still send to
    /// it (meet them first, e.g. at a barrier). Then as [`Offload::start`].
    pub fn from_world(
        world: &World,
        lanes: usize,
        am: smelt_am::AmConfig,
        cfg: OffloadConfig,
        mut state: impl FnMut(usize) -> S,
        mut setup: impl FnMut(usize, &mut Endpoint<S, WorldLink>) -> Result<(), AmError>,
    ) -> Result<Self, OffloadError> {
        cfg.validate(lanes)?;
        let mut eps = Vec::with_capacity(lanes);
        for i in 0..lanes {
            let mut ep = Endpoint::from_world(world, state(i), am.clone())?;
            setup(i, &mut ep)?;
            eps.push(ep);
        }
        Offload::start(eps, cfg)
    }
}

impl<S: Send + 'static, L: Link + 'static> Offload<S, L> {
    /// Starts a pool with one lane per endpoint (and, unless direct, one communication
    /// thread per lane, pinned to `cfg.cpus` if given).
    pub fn start(endpoints: Vec<Endpoint<S, L>>, cfg: OffloadConfig) -> Result<Self, OffloadError> {
        cfg.validate(endpoints.len())?;
        let direct = cfg.mode == OffloadMode::Direct;
        let mut eps = Vec::new();
        let mut lanes = Vec::new();
        for ep in endpoints {
            lanes.push(Lane {
                q: SleepQueue::new(cfg.link.capacity)
                    .map_err(|e| OffloadError::Invalid(e.to_string()))?,
                c: Counters::default(),
                direct: None,
                ended: AtomicBool::new(false),
            });
            if direct {
                lanes.last_mut().unwrap().direct = Some(Mutex::new(ep));
            } else {
                eps.push(ep);
            }
        }
        let shared = Arc::new(Shared {
            lanes,
            stop: AtomicBool::new(false),
            deadline: Mutex::new(None),
            cfg,
        });
        let mut pool = Offload {
            shared,
            threads: Vec::new(),
        };
        for (i, ep) in eps.into_iter().enumerate() {
            let sh = pool.shared.clone();
            let cpu = sh.cfg.cpus.get(i).copied();
            let (tx, rx) = std::sync::mpsc::channel();
            let h = std::thread::Builder::new()
                .name(format!("smelt-offload-{i}"))
                .spawn(move || {
                    let pinned = cpu
                        .map(|c| smelt_transport::pin_current_thread(smelt_mesh::CpuId(c)))
                        .transpose();
                    let _ = tx.send(pinned.map(|_| ()).map_err(|e| e.to_string()));
                    comm_thread(&sh, i, ep)
                })
                .map_err(|e| OffloadError::Invalid(format!("cannot start a thread: {e}")))?;
            pool.threads.push(Some(h));
            match rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    return Err(OffloadError::Invalid(format!(
                        "cannot pin communication thread {i} to CPU {}: {e}",
                        cpu.unwrap_or(0)
                    )))
                }
                Err(_) => return Err(OffloadError::Stopped(i)),
            }
        }
        Ok(pool)
    }

    /// The number of lanes.
    pub fn lanes(&self) -> usize {
        self.shared.lanes.len()
    }

    /// The pool's mode.
    pub fn mode(&self) -> OffloadMode {
        self.shared.cfg.mode
    }

    fn lane(&self, lane: usize) -> Result<&Lane<S, L>, OffloadError> {
        match self.shared.lanes.get(lane) {
            Some(l) => Ok(l),
            None => Err(OffloadError::NoSuchLane {
                lane,
                lanes: self.shared.lanes.len(),
            }),
        }
    }

    fn push(&self, lane: usize, cmd: Cmd<S, L>) -> Result<(), OffloadError> {
        let l = self.lane(lane)?;
        if l.ended.load(Ordering::Acquire) {
            return Err(OffloadError::Stopped(lane));
        }
        let mut cmd = match l.q.push(cmd) {
            Ok(()) => return Ok(()),
            Err(c) => c,
        };
        // Full: wait for room with back-off, bounded.
        let mut b = Backoff::with_policy(&self.shared.cfg.wait_policy());
        let t0 = Instant::now();
        loop {
            if l.ended.load(Ordering::Acquire) {
                return Err(OffloadError::Stopped(lane));
            }
            if b.is_completed() {
                if t0.elapsed() > self.shared.cfg.link.timeout {
                    return Err(OffloadError::Timeout {
                        what: format!("queueing a command on lane {lane} (its queue stayed full)"),
                        after: self.shared.cfg.link.timeout,
                    });
                }
                std::thread::sleep(Duration::from_micros(20));
            } else {
                b.snooze();
            }
            match l.q.push(cmd) {
                Ok(()) => return Ok(()),
                Err(c) => cmd = c,
            }
        }
    }

    fn direct(
        &self,
        lane: usize,
    ) -> Result<Option<std::sync::MutexGuard<'_, Endpoint<S, L>>>, OffloadError> {
        Ok(self
            .lane(lane)?
            .direct
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner())))
    }

    /// The command of a request (checked as the endpoint would check it).
    fn request_cmd(
        dest: usize,
        handler: u8,
        args: &[u64],
        ticket: Option<Arc<Signal>>,
    ) -> Result<Cmd<S, L>, OffloadError> {
        if args.len() > MAX_ARGS {
            return Err(AmError::TooManyArgs { n: args.len() }.into());
        }
        if handler == 0 {
            return Err(AmError::ReservedHandler.into());
        }
        let mut a = [0u64; MAX_ARGS];
        a[..args.len()].copy_from_slice(args);
        Ok(Cmd::Request {
            dest,
            handler,
            n: args.len() as u8,
            args: a,
            ticket,
        })
    }

    /// Queues a short request (up to 8 words) to `dest` (an index in the lane's
    /// endpoint's destination table). Errors found on the communication thread are
    /// reported by the lane's next ticket.
    pub fn request(
        &self,
        lane: usize,
        dest: usize,
        handler: u8,
        args: &[u64],
    ) -> Result<(), OffloadError> {
        let cmd = Self::request_cmd(dest, handler, args, None)?;
        if let Some(mut ep) = self.direct(lane)? {
            return Ok(ep.request(dest, handler, args)?);
        }
        self.push(lane, cmd)
    }

    /// A request and a ticket for it in one command (the round trip: the ticket
    /// completes when it and every earlier request of the lane were answered).
    pub fn request_ticket(
        &self,
        lane: usize,
        dest: usize,
        handler: u8,
        args: &[u64],
    ) -> Result<Ticket, OffloadError> {
        let timeout = self.shared.cfg.link.timeout;
        if let Some(mut ep) = self.direct(lane)? {
            ep.request(dest, handler, args)?;
            quiesce(&mut ep, timeout)?;
            return Ok(self.done_ticket());
        }
        let sig = Signal::new();
        self.push(
            lane,
            Self::request_cmd(dest, handler, args, Some(sig.clone()))?,
        )?;
        Ok(Ticket {
            sig,
            timeout,
            wait: self.shared.cfg.wait_policy(),
        })
    }

    /// Queues a closure to run on the lane's endpoint (network progress, an aggregation
    /// buffer's flush, a bulk send): its error is reported by the lane's next ticket.
    pub fn run(
        &self,
        lane: usize,
        job: impl FnOnce(&mut Endpoint<S, L>) -> Result<(), AmError> + Send + 'static,
    ) -> Result<(), OffloadError> {
        if let Some(mut ep) = self.direct(lane)? {
            return Ok(job(&mut ep)?);
        }
        self.push(lane, Cmd::Run(Box::new(job)))
    }

    /// A ticket that completes when every command queued on `lane` before it was
    /// executed and every request was answered.
    pub fn flush(&self, lane: usize) -> Result<Ticket, OffloadError> {
        if let Some(mut ep) = self.direct(lane)? {
            quiesce(&mut ep, self.shared.cfg.link.timeout)?;
            return Ok(self.done_ticket());
        }
        let sig = Signal::new();
        self.push(lane, Cmd::Flush(sig.clone()))?;
        Ok(Ticket {
            sig,
            timeout: self.shared.cfg.link.timeout,
            wait: self.shared.cfg.wait_policy(),
        })
    }

    fn done_ticket(&self) -> Ticket {
        let sig = Signal::new();
        sig.complete(Ok(()));
        Ticket {
            sig,
            timeout: self.shared.cfg.link.timeout,
            wait: self.shared.cfg.wait_policy(),
        }
    }

    /// Flushes every lane and waits for all of them.
    pub fn flush_all(&self) -> Result<(), OffloadError> {
        let tickets = (0..self.lanes())
            .map(|l| self.flush(l))
            .collect::<Result<Vec<_>, _>>()?;
        let mut first = Ok(());
        for t in tickets {
            let r = t.wait();
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// The counters of `lane`.
    pub fn stats(&self, lane: usize) -> Result<LaneStats, OffloadError> {
        let l = self.lane(lane)?;
        let c = &l.c;
        Ok(LaneStats {
            commands: c.commands.load(Ordering::Relaxed),
            requests: c.requests.load(Ordering::Relaxed),
            handled: c.handled.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            sleeps: c.sleeps.load(Ordering::Relaxed),
            wakes: l.q.wakes(),
            naps: c.naps.load(Ordering::Relaxed),
            queued: l.q.len() as u64,
        })
    }

    /// Stops the pool: each thread executes what is queued and waits for the answers to
    /// its requests until `timeout`, then stops; commands still queued then are dropped
    /// (and counted). Gives back every endpoint with what was left.
    pub fn shutdown(mut self, timeout: Duration) -> Result<Vec<LaneEnd<S, L>>, OffloadError> {
        self.stop(timeout)
    }

    fn stop(&mut self, timeout: Duration) -> Result<Vec<LaneEnd<S, L>>, OffloadError> {
        *self
            .shared
            .deadline
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + timeout);
        self.shared.stop.store(true, Ordering::Release);
        for l in &self.shared.lanes {
            l.q.wake();
        }
        let mut ends = Vec::new();
        let mut threads = std::mem::take(&mut self.threads).into_iter();
        for (i, lane) in self.shared.lanes.iter().enumerate() {
            if lane.direct.is_some() {
                ends.push(None);
                continue;
            }
            match threads.next().flatten().map(|h| h.join()) {
                Some(Ok(t)) => ends.push(Some(t)),
                _ => return Err(OffloadError::Stopped(i)),
            }
        }
        // Every thread has ended: the shared state is ours alone now.
        let empty = Arc::new(Shared {
            lanes: Vec::new(),
            stop: AtomicBool::new(true),
            deadline: Mutex::new(None),
            cfg: self.shared.cfg.clone(),
        });
        let shared = Arc::try_unwrap(std::mem::replace(&mut self.shared, empty))
            .map_err(|_| OffloadError::Invalid("the pool is still shared".into()))?;
        let mut out = Vec::new();
        for (i, (lane, end)) in shared.lanes.into_iter().zip(ends).enumerate() {
            let mut dropped = 0;
            while let Some(cmd) = lane.q.pop() {
                dropped += 1;
                if let Cmd::Flush(t)
                | Cmd::Request {
                    ticket: Some(t), ..
                } = cmd
                {
                    t.complete(Err(OffloadError::Stopped(i)));
                }
            }
            let c = &lane.c;
            let stats = LaneStats {
                commands: c.commands.load(Ordering::Relaxed),
                requests: c.requests.load(Ordering::Relaxed),
                handled: c.handled.load(Ordering::Relaxed),
                errors: c.errors.load(Ordering::Relaxed),
                sleeps: c.sleeps.load(Ordering::Relaxed),
                wakes: lane.q.wakes(),
                naps: c.naps.load(Ordering::Relaxed),
                queued: 0,
            };
            let (endpoint, unanswered, error, cpu_time) = match (end, lane.direct) {
                (Some(t), _) => (t.endpoint, t.unanswered, t.error, t.cpu_time),
                (None, Some(m)) => {
                    let mut ep = m.into_inner().unwrap_or_else(|p| p.into_inner());
                    let error = quiesce(&mut ep, timeout).err();
                    let u = ep.outstanding_total();
                    (ep, u, error, None)
                }
                (None, None) => unreachable!("a lane has a thread or a direct endpoint"),
            };
            out.push(LaneEnd {
                endpoint,
                dropped_commands: dropped,
                unanswered,
                error,
                cpu_time,
                stats,
            });
        }
        Ok(out)
    }
}

impl<S: Send + 'static, L: Link + 'static> Drop for Offload<S, L> {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            let t = self.shared.cfg.link.timeout;
            let _ = self.stop(t);
        }
    }
}

/// True once the pool is stopping and its deadline has passed.
fn stopping<S, L: Link>(sh: &Shared<S, L>) -> bool {
    sh.stop.load(Ordering::Acquire)
        && sh
            .deadline
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none_or(|d| Instant::now() >= d)
}

/// Waits until every request of `ep` was answered, at most `timeout`; a peer that
/// left on the way is no failure (its unanswered requests are forgotten).
fn quiesce<S, L: Link + 'static>(
    ep: &mut Endpoint<S, L>,
    timeout: Duration,
) -> Result<(), OffloadError> {
    let end = Instant::now() + timeout;
    loop {
        match ep.quiesce(end.saturating_duration_since(Instant::now())) {
            Err(AmError::PeerGone { .. }) => continue,
            r => return Ok(r?),
        }
    }
}

/// The loop of one lane's communication thread: executor and completer in turn.
fn comm_thread<S, L: Link + 'static>(
    sh: &Shared<S, L>,
    i: usize,
    mut ep: Endpoint<S, L>,
) -> ThreadEnd<S, L> {
    let lane = &sh.lanes[i];
    let cfg = &sh.cfg;
    let mut waiting: Vec<Arc<Signal>> = Vec::new();
    // The first error since the last ticket; the next ticket reports it.
    let mut error: Option<OffloadError> = None;
    let mut b = Backoff::with_policy(&cfg.wait_policy());
    let mut idle = 0u32;
    let mut draining_since: Option<Instant> = None;
    let fail = |error: &mut Option<OffloadError>, e: AmError| {
        lane.c.errors.fetch_add(1, Ordering::Relaxed);
        if error.is_none() {
            *error = Some(e.into());
        }
    };
    loop {
        if sh.stop.load(Ordering::Acquire) {
            let deadline = sh
                .deadline
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .unwrap_or_else(Instant::now);
            draining_since.get_or_insert_with(Instant::now);
            let drained = lane.q.is_empty() && ep.outstanding_total() == 0 && waiting.is_empty();
            if drained || Instant::now() >= deadline {
                break;
            }
        }
        let observed = lane.q.observe();
        let mut did = 0usize;
        // Executor.
        while did < 64 {
            if did > 0 && stopping(sh) {
                break; // the deadline is checked at the top of the loop
            }
            let Some(cmd) = lane.q.pop() else { break };
            did += 1;
            lane.c.commands.fetch_add(1, Ordering::Relaxed);
            match cmd {
                Cmd::Request {
                    dest,
                    handler,
                    n,
                    args,
                    ticket,
                } => {
                    match ep.request(dest, handler, &args[..n as usize]) {
                        Ok(()) => {
                            lane.c.requests.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => fail(&mut error, e),
                    }
                    if let Some(t) = ticket {
                        waiting.push(t);
                    }
                }
                Cmd::Run(job) => {
                    if let Err(e) = job(&mut ep) {
                        fail(&mut error, e);
                    }
                }
                Cmd::Flush(t) => waiting.push(t),
            }
        }
        // Completer.
        match ep.poll() {
            Ok(n) => {
                did += n;
                lane.c.handled.fetch_add(n as u64, Ordering::Relaxed);
            }
            // A peer that left is no failure of ours; its requests are forgotten.
            Err(AmError::PeerGone { .. }) => did += 1,
            Err(e) => {
                did += 1;
                fail(&mut error, e)
            }
        }
        if !waiting.is_empty() && ep.outstanding_total() == 0 {
            let r = error.take().map_or(Ok(()), Err);
            for t in waiting.drain(..) {
                t.complete(r.clone());
            }
            did += 1;
        }
        if did > 0 {
            idle = 0;
            b.reset();
            continue;
        }
        idle = idle.saturating_add(1);
        // Idle: spin, then yield (the wait policy's phases, at least `idle_rounds`
        // rounds), before sleeping or napping.
        if idle < cfg.idle_rounds || !b.is_completed() {
            b.snooze();
            continue;
        }
        let quiet = waiting.is_empty() && ep.outstanding_total() == 0;
        if cfg.mode == OffloadMode::Dynamic && quiet && !sh.stop.load(Ordering::Acquire) {
            lane.c.sleeps.fetch_add(1, Ordering::Relaxed);
            if lane.q.sleep(observed, cfg.max_sleep) == SleepOutcome::Raced {
                lane.c.sleeps.fetch_sub(1, Ordering::Relaxed);
            }
            idle = 0;
            b.reset();
        } else {
            lane.c.naps.fetch_add(1, Ordering::Relaxed);
            std::thread::park_timeout(cfg.static_nap);
        }
    }
    lane.ended.store(true, Ordering::Release);
    // Tickets still waiting: their requests were not answered in time.
    let unanswered = ep.outstanding_total();
    for t in waiting.drain(..) {
        t.complete(Err(OffloadError::Timeout {
            what: format!("answers to {unanswered} requests at shutdown"),
            after: draining_since.map_or(Duration::ZERO, |d| d.elapsed()),
        }));
    }
    ThreadEnd {
        endpoint: ep,
        unanswered,
        error,
        cpu_time: smelt_transport::thread_cpu_time(),
    }
}
