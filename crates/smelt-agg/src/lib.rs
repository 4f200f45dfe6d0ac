//! SMP-aware message aggregation over smelt's active messages.
//!
//! Fine-grained irregular programs (histograms, index gathers, graph traversals) send
//! billions of 8–16 byte items; sent one by one, they are bound by the per-message
//! overhead. An aggregator gathers items in buffers of `g` items and ships a buffer as
//! one active message (a bulk request carrying only its filled part), following the
//! schemes of TramLib (Ghosh et al., "Node-aware message aggregation", section III):
//!
//! * [`Scheme::WW`]: each worker keeps a private buffer per destination *worker*;
//! * [`Scheme::WPs`]: each worker keeps a private buffer per destination *process*; the
//!   destination sorts the items to its workers;
//! * [`Scheme::WsP`]: as WPs, but the source groups the items by destination worker
//!   (a small header of per-worker counts) so the destination only splits;
//! * [`Scheme::PP`]: one buffer per (source process, destination process), shared by
//!   the source process's workers and filled with atomics;
//! * [`Scheme::Direct`]: no aggregation, every item its own active message (the
//!   baseline).
//!
//! A job has `N` processes of `t` workers (threads): each member of a world is one
//! process ([`from_world`], a collective call; [`threads`] makes the aggregator of a
//! world of threads at once). Each process has one active-message
//! endpoint ([`smelt_am::Endpoint`]) shared by its workers: whoever gets its lock sends
//! the buffers waiting to go out and runs the endpoint's handlers, which put arriving
//! items into the destination workers' inboxes. Items are handed to the user's handler
//! on their destination worker's own thread, when it inserts, polls, flushes or
//! terminates. Buffers for a worker's own process are handed over in memory (still one
//! message each, as in an SMP runtime), the others travel as active messages.
//!
//! **Flush policies** ([`FlushPolicy`]): a full buffer is always shipped; [`Worker::flush`]
//! ships every partial buffer; with `idle`, a [`Worker::poll`] that finds nothing to do
//! flushes; with `timeout`, a buffer whose first item is older than that is shipped at
//! the next insert or poll of its worker. A shipped buffer carries only its filled part.
//!
//! **Termination** ([`Worker::terminate`], collective over every worker of the job):
//! returns once every item inserted anywhere (including items that handlers inserted)
//! has been delivered and handled. Each worker counts the items it inserted and
//! handled; the processes report their sums in waves to process 0, which declares the
//! end only after two consecutive waves in which every worker had entered, the sums
//! were equal, and nothing changed between the waves (Mattern's four-counter method).
//!
//! ```
//! use smelt_agg::{threads, AggConfig, Scheme};
//! use std::time::Duration;
//! // 2 processes of 2 workers; each worker's state counts what it received.
//! let cfg = AggConfig::new(Scheme::WPs, 8).buffer_items(16);
//! let workers = threads(2, 2, cfg, |_| 0u64, |sum: &mut u64, item: &[u8], _| {
//!     *sum += u64::from_le_bytes(item.try_into().unwrap());
//! }).unwrap();
//! let sums: Vec<u64> = std::thread::scope(|s| {
//!     let hs: Vec<_> = workers.into_iter().map(|mut w| s.spawn(move || {
//!         for i in 0..100u64 {
//!             w.insert(&i.to_le_bytes(), (i % 4) as usize).unwrap();
//!         }
//!         w.terminate(Duration::from_secs(30)).unwrap();
//!         *w.state()
//!     })).collect();
//!     hs.into_iter().map(|h| h.join().unwrap()).collect()
//! });
//! assert_eq!(sums.iter().sum::<u64>(), 4 * (0..100).sum::<u64>());
//! ```

#![warn(missing_docs)]
#![deny(unsafe_code)]

mod pp;
mod shared;
pub mod tally;
mod worker;
pub mod world;

pub use worker::{Out, Worker, WorkerStats};
pub use world::from_world;

use smelt_am::AmError;
use std::time::Duration;

/// How items are gathered into messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// A private buffer per destination worker at each worker.
    WW,
    /// A private buffer per destination process at each worker; items sorted to
    /// workers at the destination.
    WPs,
    /// A private buffer per destination process at each worker, grouped by destination
    /// worker at the source.
    WsP,
    /// One buffer per (source process, destination process), shared by the source's
    /// workers and filled with atomics.
    PP,
    /// No aggregation: each item is its own active message.
    Direct,
}

impl Scheme {
    /// Every scheme, the aggregating ones first.
    pub const ALL: [Scheme; 5] = [
        Scheme::WW,
        Scheme::WPs,
        Scheme::WsP,
        Scheme::PP,
        Scheme::Direct,
    ];

    /// Its name as written in the paper (`none` for [`Scheme::Direct`]).
    pub fn name(self) -> &'static str {
        match self {
            Scheme::WW => "WW",
            Scheme::WPs => "WPs",
            Scheme::WsP => "WsP",
            Scheme::PP => "PP",
            Scheme::Direct => "none",
        }
    }
}

impl std::fmt::Display for Scheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Scheme {
    type Err = AggError;
    fn from_str(s: &str) -> Result<Scheme, AggError> {
        Scheme::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s) || (s == "direct" && *k == Scheme::Direct))
            .ok_or_else(|| {
                AggError::Invalid(format!("unknown scheme {s:?} (WW, WPs, WsP, PP or none)"))
            })
    }
}

/// When partial buffers are shipped (a full buffer always is, and so is every buffer
/// at [`Worker::flush`] and [`Worker::terminate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlushPolicy {
    /// A [`Worker::poll`] that finds no item to hand to the handler flushes the
    /// worker's partial buffers.
    pub idle: bool,
    /// A buffer whose first item was inserted longer ago than this is shipped at the
    /// worker's next insert or poll.
    pub timeout: Option<Duration>,
}

impl FlushPolicy {
    /// Full buffers and explicit flushes only.
    pub const EXPLICIT: FlushPolicy = FlushPolicy {
        idle: false,
        timeout: None,
    };
    /// Also when the worker is idle.
    pub const IDLE: FlushPolicy = FlushPolicy {
        idle: true,
        timeout: None,
    };
    /// Also after `d`.
    pub fn after(d: Duration) -> FlushPolicy {
        FlushPolicy {
            idle: false,
            timeout: Some(d),
        }
    }
}

/// Default items per buffer (`g`).
pub const DEFAULT_BUFFER_ITEMS: usize = 1024;
/// Largest item, in bytes.
pub const MAX_ITEM: usize = 4096;
/// Slots (48 payload bytes, a cache line each) per link of the processes' endpoints
/// by default, for jobs of up to 4 processes: room for dozens of full buffers in
/// flight between two processes, so that a sender rarely waits for its destination to
/// take one in (1 MiB per pair of processes). Larger jobs get proportionally fewer
/// (`AM_CAPACITY · 4 / processes`, at least 256) when the configuration keeps this
/// default.
pub const AM_CAPACITY: usize = 8192;

/// The endpoint settings for a job of `processes`: [`AM_CAPACITY`] scaled down for
/// large jobs when the configuration keeps the default.
pub(crate) fn am_config(cfg: &AggConfig, processes: usize) -> smelt_am::AmConfig {
    let mut am = cfg.am.clone();
    if am.link.capacity == AM_CAPACITY {
        am.link.capacity = (AM_CAPACITY * 4 / processes.max(1)).clamp(256, AM_CAPACITY);
    }
    am
}
/// Most workers per process (a destination worker travels as 16 bits).
pub const MAX_WORKERS: usize = 1 << 16;

/// Settings of an aggregator, chosen at creation.
#[derive(Debug, Clone)]
pub struct AggConfig {
    /// The scheme.
    pub scheme: Scheme,
    /// Bytes per item (1 to [`MAX_ITEM`]); every item has this size.
    pub item_size: usize,
    /// Items per buffer, `g` (default [`DEFAULT_BUFFER_ITEMS`]).
    pub buffer_items: usize,
    /// When partial buffers go out.
    pub flush: FlushPolicy,
    /// Settings of the processes' active-message endpoints.
    pub am: smelt_am::AmConfig,
}

impl AggConfig {
    /// `scheme` with items of `item_size` bytes, buffers of 1024 items, explicit
    /// flushes, the default endpoint settings with links of [`AM_CAPACITY`] slots
    /// (smelt-am's default of 256 for [`Scheme::Direct`], which sends no buffers).
    pub fn new(scheme: Scheme, item_size: usize) -> AggConfig {
        AggConfig {
            scheme,
            item_size,
            buffer_items: DEFAULT_BUFFER_ITEMS,
            flush: FlushPolicy::EXPLICIT,
            // No aggregation sends no buffers: smelt-am's own default rings suit it.
            am: if scheme == Scheme::Direct {
                smelt_am::AmConfig::default()
            } else {
                let mut am = smelt_am::AmConfig::default();
                // Buffers of up to 1024 items travel as bulk messages: rings of
                // AM_CAPACITY slots, not smelt-am's 256.
                am.link.capacity = AM_CAPACITY;
                am
            },
        }
    }

    /// With buffers of `g` items.
    pub fn buffer_items(mut self, g: usize) -> AggConfig {
        self.buffer_items = g;
        self
    }

    /// With flush policy `f`.
    pub fn flush(mut self, f: FlushPolicy) -> AggConfig {
        self.flush = f;
        self
    }

    pub(crate) fn validate(&self, processes: usize, workers: usize) -> Result<(), AggError> {
        if self.item_size == 0 || self.item_size > MAX_ITEM {
            return Err(AggError::Invalid(format!(
                "items of {} bytes (1 to {MAX_ITEM})",
                self.item_size
            )));
        }
        if self.buffer_items == 0 {
            return Err(AggError::Invalid("buffers of 0 items".into()));
        }
        let bytes = self
            .buffer_items
            .saturating_mul(self.item_size + 2)
            .saturating_add(4 * workers);
        if bytes > self.am.max_bulk {
            return Err(AggError::Invalid(format!(
                "buffers of {} items of {} bytes exceed the endpoints' largest message ({} bytes)",
                self.buffer_items, self.item_size, self.am.max_bulk
            )));
        }
        if processes == 0 || workers == 0 {
            return Err(AggError::Invalid(format!(
                "a job of {processes} processes of {workers} workers"
            )));
        }
        if workers > MAX_WORKERS {
            return Err(AggError::Invalid(format!(
                "{workers} workers per process (at most {MAX_WORKERS})"
            )));
        }
        if let Some(d) = self.flush.timeout {
            if d.is_zero() {
                return Err(AggError::Invalid("a flush timeout of 0".into()));
            }
        }
        Ok(())
    }
}

/// Why an aggregation operation did not complete.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AggError {
    /// A bad setting.
    #[error("invalid aggregation setup: {0}")]
    Invalid(String),
    /// The check over a whole job ([`tally::verify`]) found items sent short, lost,
    /// duplicated, altered or at the wrong worker; the text says which.
    #[error("aggregation check failed: {0}")]
    Check(String),
    /// No worker with that index.
    #[error("no worker {dest} (the job has {size})")]
    NoSuchWorker {
        /// The index asked for.
        dest: usize,
        /// Workers in the job.
        size: usize,
    },
    /// An item of the wrong size.
    #[error("an item of {got} bytes (this aggregator's items have {expected})")]
    ItemSize {
        /// Bytes given.
        got: usize,
        /// The aggregator's item size.
        expected: usize,
    },
    /// A wait reached its limit.
    #[error("timed out after {after:?} {what}")]
    Timeout {
        /// What it waited for.
        what: String,
        /// The limit.
        after: Duration,
    },
    /// The active-message layer failed.
    #[error("active messages: {0}")]
    Am(#[from] AmError),
}

/// Builds a job of `processes` × `workers` workers in this OS process: the
/// aggregator of a world of `processes` threads ([`from_world`]) made at once, each
/// group of `workers` threads sharing one active-message endpoint, as the threads of
/// one process of a real job would. Worker `w` is worker `w % workers` of process
/// `w / workers`; it gets state `state(w)`; `handler` runs on each item delivered to
/// a worker, on that worker's thread, and may insert more items through its [`Out`].
/// Move each worker into its thread.
pub fn threads<S, H>(
    processes: usize,
    workers: usize,
    cfg: AggConfig,
    state: impl FnMut(usize) -> S,
    handler: H,
) -> Result<Vec<Worker<S>>, AggError>
where
    H: Fn(&mut S, &[u8], &mut Out<'_>) + Send + Sync + 'static,
{
    cfg.validate(processes, workers)?;
    let shared: Vec<_> = (0..processes)
        .map(|p| shared::Shared::new(p, processes, workers, &cfg))
        .collect();
    // Between threads, making a service is not a meeting: this thread makes every
    // member's endpoint in turn (and, every endpoint existing before any item is
    // sent, needs no hellos).
    let am = am_config(&cfg, processes);
    let eps = smelt_mesh::World::threads(processes)
        .map_err(AmError::from)?
        .iter()
        .zip(&shared)
        .map(|(w, sh)| smelt_am::Endpoint::from_world(w, sh.clone(), am.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    worker::build(eps, shared, workers, cfg, false, state, handler)
}

/// The exact number of messages a worker (for [`Scheme::PP`]: a process) sends when
/// `counts[d]` of its items go to buffer `d` and it flushes once at the end:
/// `sum(ceil(counts[d] / g))`. The paper's bound is `ceil(z/g) + B` for `z` items and
/// `B` buffers (`N·t` for WW, `N` for the others).
pub fn messages_for(counts: &[u64], g: u64) -> u64 {
    counts.iter().map(|&c| c.div_ceil(g)).sum()
}
