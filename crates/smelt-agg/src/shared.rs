//! What the workers of one process share with each other and with their endpoint's
//! handlers: the workers' inboxes, their item counters, the termination state.

use crate::AggConfig;
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Handler of aggregated buffers.
pub(crate) const H_DATA: u8 = 1;
/// The (empty) reply to every request.
pub(crate) const H_ACK: u8 = 2;
/// A process's counts for a termination wave, to process 0.
pub(crate) const H_WAVE: u8 = 3;
/// Process 0's verdict on a wave, to every process.
pub(crate) const H_DECIDE: u8 = 4;
/// One item as its own message (no aggregation).
pub(crate) const H_DIRECT: u8 = 5;
/// The start-up handshake: this process's handlers are registered.
pub(crate) const H_HELLO: u8 = 6;

/// Kinds of data messages (the first argument word of an `H_DATA` request).
pub(crate) const K_WORKER: u64 = 1;
pub(crate) const K_SORT: u64 = 2;
pub(crate) const K_GROUPED: u64 = 3;

/// One worker's inbox: items delivered to it and not yet handed to its handler.
#[derive(Default)]
pub(crate) struct Inbox {
    pub(crate) items: Mutex<Vec<u8>>,
    pub(crate) ready: AtomicBool,
}

/// A worker's counters, read by its process's wave.
#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) inserted: AtomicU64,
    pub(crate) handled: AtomicU64,
}

/// The state of the termination waves.
#[derive(Default)]
pub(crate) struct Term {
    /// Terminations entered by this process's workers, over all epochs.
    pub(crate) entered: AtomicU64,
    /// The last epoch this process knows to be over.
    pub(crate) done_epoch: AtomicU64,
    /// At process 0: the reports of the current wave.
    pub(crate) coord: Mutex<Coord>,
    /// The last verdict received: (epoch, wave, done).
    pub(crate) verdict: Mutex<Option<(u64, u64, bool)>>,
    /// This process's leader: (epoch, wave) of the report it waits a verdict on.
    pub(crate) leader: Mutex<Leader>,
}

#[derive(Default)]
pub(crate) struct Leader {
    pub(crate) wave: u64,
    pub(crate) waiting: bool,
}

#[derive(Default)]
pub(crate) struct Coord {
    pub(crate) epoch: u64,
    pub(crate) wave: u64,
    pub(crate) got: usize,
    pub(crate) inserted: u64,
    pub(crate) handled: u64,
    pub(crate) all_in: bool,
    /// The sums of the previous wave, if every worker was in it.
    pub(crate) prev: Option<(u64, u64)>,
    /// Malformed reports seen (a wave out of order).
    pub(crate) errors: u64,
}

/// A process's shared part.
pub(crate) struct Shared {
    pub(crate) process: usize,
    pub(crate) processes: usize,
    pub(crate) workers: usize,
    pub(crate) item: usize,
    pub(crate) inboxes: Vec<CachePadded<Inbox>>,
    pub(crate) counts: Vec<CachePadded<Counts>>,
    pub(crate) term: Term,
    /// Data messages that could not be read (counted, never handed on).
    pub(crate) malformed: AtomicU64,
    /// Data messages that came back to this process (never delivered): the last
    /// reason.
    pub(crate) returned: Mutex<(u64, Option<smelt_am::Reason>)>,
    /// Start-up: processes whose hello arrived here.
    pub(crate) hellos: AtomicU64,
    /// Start-up: processes that returned this one's hello (not registered yet).
    pub(crate) hello_again: Mutex<Vec<usize>>,
}

impl Shared {
    pub(crate) fn new(
        process: usize,
        processes: usize,
        workers: usize,
        cfg: &AggConfig,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            process,
            processes,
            workers,
            item: cfg.item_size,
            inboxes: (0..workers).map(|_| Default::default()).collect(),
            counts: (0..workers).map(|_| Default::default()).collect(),
            term: Term::default(),
            malformed: AtomicU64::new(0),
            returned: Mutex::new((0, None)),
            hellos: AtomicU64::new(0),
            hello_again: Mutex::new(Vec::new()),
        })
    }

    fn push(&self, w: usize, items: &[u8]) {
        if items.is_empty() {
            return;
        }
        let inbox = &self.inboxes[w];
        inbox
            .items
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(items);
        inbox.ready.store(true, Ordering::Release);
    }

    /// Delivers a data message (`args[0]` its kind) to the inboxes.
    pub(crate) fn accept(&self, args: &[u64], data: &[u8]) {
        if !self.try_accept(args, data) {
            self.malformed.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn try_accept(&self, args: &[u64], data: &[u8]) -> bool {
        let item = self.item;
        match args.first().copied() {
            Some(K_WORKER) => {
                let Some(&w) = args.get(1) else { return false };
                let w = w as usize;
                if w >= self.workers || !data.len().is_multiple_of(item) {
                    return false;
                }
                self.push(w, data);
                true
            }
            Some(K_SORT) => {
                // Items with their destination worker (16 bits) in front: sort them to
                // the workers, one lock per worker.
                let rec = item + 2;
                if !data.len().is_multiple_of(rec) {
                    return false;
                }
                let mut per: Vec<Vec<u8>> = vec![Vec::new(); self.workers];
                for r in data.chunks_exact(rec) {
                    let w = u16::from_le_bytes([r[0], r[1]]) as usize;
                    if w >= self.workers {
                        return false;
                    }
                    per[w].extend_from_slice(&r[2..]);
                }
                for (w, v) in per.iter().enumerate() {
                    self.push(w, v);
                }
                true
            }
            Some(K_GROUPED) => {
                // A header of one u32 count per worker, then the items grouped.
                let head = 4 * self.workers;
                if data.len() < head {
                    return false;
                }
                let counts = data[..head]
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize);
                let total: usize = counts.clone().sum();
                if total * item != data.len() - head {
                    return false;
                }
                let mut at = head;
                for (w, c) in counts.enumerate() {
                    self.push(w, &data[at..at + c * item]);
                    at += c * item;
                }
                true
            }
            _ => false,
        }
    }

    /// Delivers one item sent on its own (`args[0]`: the worker; the item's bytes in
    /// the following words).
    pub(crate) fn accept_direct(&self, args: &[u64], data: &[u8]) {
        let Some(&w) = args.first() else {
            self.malformed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let w = w as usize;
        if w >= self.workers {
            self.malformed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if !data.is_empty() {
            if data.len() != self.item {
                self.malformed.fetch_add(1, Ordering::Relaxed);
                return;
            }
            self.push(w, data);
            return;
        }
        let mut bytes = [0u8; 8 * smelt_am::MAX_ARGS];
        for (i, a) in args[1..].iter().enumerate() {
            bytes[8 * i..8 * i + 8].copy_from_slice(&a.to_le_bytes());
        }
        if self.item > 8 * (args.len() - 1) {
            self.malformed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.push(w, &bytes[..self.item]);
    }

    /// The sums of this process's counters, and whether all its workers entered
    /// termination `epoch`.
    pub(crate) fn sums(&self, epoch: u64) -> (u64, u64, bool) {
        let all_in = self.term.entered.load(Ordering::SeqCst) >= epoch * self.workers as u64;
        let mut i = 0;
        let mut h = 0;
        for c in &self.counts {
            i += c.inserted.load(Ordering::SeqCst);
            h += c.handled.load(Ordering::SeqCst);
        }
        (i, h, all_in)
    }

    /// At process 0: a process's report for wave `wave` of `epoch`.
    pub(crate) fn report(&self, epoch: u64, wave: u64, inserted: u64, handled: u64, all_in: bool) {
        let mut c = self.term.coord.lock().unwrap_or_else(|e| e.into_inner());
        if c.got == 0 {
            if epoch != c.epoch {
                c.epoch = epoch;
                c.prev = None;
            }
            c.wave = wave;
            c.inserted = 0;
            c.handled = 0;
            c.all_in = true;
        } else if c.wave != wave || c.epoch != epoch {
            c.errors += 1;
            return;
        }
        c.got += 1;
        c.inserted += inserted;
        c.handled += handled;
        c.all_in &= all_in;
    }

    /// At any process: process 0's verdict.
    pub(crate) fn verdict(&self, epoch: u64, wave: u64, done: bool) {
        *self.term.verdict.lock().unwrap_or_else(|e| e.into_inner()) = Some((epoch, wave, done));
    }
}
