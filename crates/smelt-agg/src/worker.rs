//! Workers: the per-thread half of an aggregator (its private buffers, its state and
//! handler) over the per-process half (the shared endpoint, the outgoing queue, the PP
//! buffers).

use crate::pp::PpBuf;
use crate::shared::*;
use crate::{AggConfig, AggError, Scheme};
use smelt_am::{AmError, Endpoint};
use smelt_mesh::world::WorldLink;
use smelt_transport::{Backoff, Link, WaitPolicy};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The user's handler of delivered items.
pub(crate) type ItemHandler<S> = Arc<dyn Fn(&mut S, &[u8], &mut Out<'_>) + Send + Sync>;

/// A message waiting for the endpoint.
struct OutMsg {
    to: usize,
    args: [u64; 2],
    direct: bool,
    data: Vec<u8>,
}

/// The half of an aggregator that one process's workers share.
pub(crate) struct Proc<L: Link> {
    sh: Arc<Shared>,
    ep: Mutex<Endpoint<Arc<Shared>, L>>,
    outq: Mutex<VecDeque<OutMsg>>,
    queued: AtomicUsize,
    pool: Mutex<Vec<Vec<u8>>>,
    pp: Vec<PpBuf>,
    failed: Mutex<Option<AggError>>,
    gone: Mutex<Option<AmError>>,
    base: Instant,
    wait: WaitPolicy,
    cfg: AggConfig,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<L: Link + 'static> Proc<L> {
    fn recycle(&self, mut v: Vec<u8>) {
        v.clear();
        let mut p = lock(&self.pool);
        if p.len() < 4 * self.sh.workers * self.sh.processes + 8 {
            p.push(v);
        }
    }

    fn buffer(&self) -> Vec<u8> {
        lock(&self.pool).pop().unwrap_or_default()
    }

    fn fail(&self, e: AggError) -> AggError {
        let mut f = lock(&self.failed);
        if f.is_none() {
            *f = Some(e.clone());
        }
        e
    }

    fn check(&self) -> Result<(), AggError> {
        match &*lock(&self.failed) {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Sends what waits in the outgoing queue and runs the endpoint's handlers, if the
    /// endpoint is free (or always, with `block`). Whoever releases the endpoint looks
    /// at the queue again, so a message queued while the endpoint was taken is sent.
    fn pump(&self, mut block: bool) -> Result<(), AggError> {
        loop {
            let mut ep = if block {
                lock(&self.ep)
            } else {
                match self.ep.try_lock() {
                    Ok(g) => g,
                    Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                    Err(std::sync::TryLockError::WouldBlock) => return Ok(()),
                }
            };
            loop {
                let m = {
                    let mut q = lock(&self.outq);
                    let Some(m) = q.pop_front() else {
                        break;
                    };
                    self.queued.store(q.len(), Ordering::Release);
                    m
                };
                let r = if m.direct {
                    if m.data.len() <= 8 * (smelt_am::MAX_ARGS - 1) {
                        let mut args = [0u64; smelt_am::MAX_ARGS];
                        args[0] = m.args[0];
                        let words = m.data.len().div_ceil(8);
                        for (k, c) in m.data.chunks(8).enumerate() {
                            let mut b = [0u8; 8];
                            b[..c.len()].copy_from_slice(c);
                            args[1 + k] = u64::from_le_bytes(b);
                        }
                        ep.request(m.to, H_DIRECT, &args[..1 + words])
                    } else {
                        ep.request_bulk(m.to, H_DIRECT, &m.args[..1], &m.data)
                    }
                } else {
                    ep.request_bulk(m.to, H_DATA, &m.args, &m.data)
                };
                self.recycle(m.data);
                r.map_err(|e| self.fail(e.into()))?;
            }
            match ep.poll() {
                Ok(_) => {}
                Err(e @ AmError::PeerGone { .. }) => {
                    lock(&self.gone).get_or_insert(e);
                }
                Err(e) => return Err(self.fail(e.into())),
            }
            drop(ep);
            if self.queued.load(Ordering::Acquire) == 0 {
                return Ok(());
            }
            block = false;
        }
    }

    fn enqueue(&self, m: OutMsg) -> Result<(), AggError> {
        let q = {
            let mut q = lock(&self.outq);
            q.push_back(m);
            self.queued.store(q.len(), Ordering::Release);
            q.len()
        };
        // A long queue means the endpoint's holder is slow: wait for the endpoint
        // rather than let the queue grow.
        self.pump(q > 4 * self.sh.workers + 4)
    }

    /// Sends a short control request to process `to` (or handles it here).
    fn control(&self, to: usize, handler: u8, args: &[u64]) -> Result<(), AggError> {
        let mut ep = lock(&self.ep);
        ep.request(to, handler, args)
            .map_err(|e| self.fail(e.into()))
    }
}

/// One worker's private buffer.
#[derive(Default)]
struct Buf {
    data: Vec<u8>,
    n: usize,
    since: Option<Instant>,
    /// WsP: the items grouped by destination worker.
    groups: Vec<Vec<u8>>,
}

/// The sending half of a worker (what a handler inserts through).
struct Tx<L: Link> {
    p: Arc<Proc<L>>,
    me: usize,
    local: usize,
    t: usize,
    total: usize,
    g: usize,
    item: usize,
    scheme: Scheme,
    timed: bool,
    bufs: Vec<Buf>,
    inserted: u64,
    messages: u64,
    items_shipped: u64,
    deferred: Option<AggError>,
}

/// Inserting from inside a handler.
trait Insert {
    fn insert(&mut self, item: &[u8], dest: usize) -> Result<(), AggError>;
    fn me(&self) -> usize;
    fn size(&self) -> usize;
}

/// What a handler inserts through: items inserted here are sent like any other (and
/// counted for termination).
pub struct Out<'a> {
    tx: &'a mut dyn Insert,
}

impl Out<'_> {
    /// Inserts `item` for worker `dest` (errors as [`Worker::insert`]).
    pub fn insert(&mut self, item: &[u8], dest: usize) -> Result<(), AggError> {
        self.tx.insert(item, dest)
    }
    /// The worker running the handler.
    pub fn me(&self) -> usize {
        self.tx.me()
    }
    /// Workers in the job.
    pub fn size(&self) -> usize {
        self.tx.size()
    }
}

impl<L: Link + 'static> Insert for Tx<L> {
    fn insert(&mut self, item: &[u8], dest: usize) -> Result<(), AggError> {
        let r = self.put(item, dest);
        if let Err(e) = &r {
            self.deferred.get_or_insert_with(|| e.clone());
        }
        r
    }
    fn me(&self) -> usize {
        self.me
    }
    fn size(&self) -> usize {
        self.total
    }
}

impl<L: Link + 'static> Tx<L> {
    fn put(&mut self, item: &[u8], dest: usize) -> Result<(), AggError> {
        if item.len() != self.item {
            return Err(AggError::ItemSize {
                got: item.len(),
                expected: self.item,
            });
        }
        if dest >= self.total {
            return Err(AggError::NoSuchWorker {
                dest,
                size: self.total,
            });
        }
        let (dp, dw) = (dest / self.t, dest % self.t);
        self.inserted += 1;
        // Published before the item can be shipped (and so handled anywhere).
        self.p.sh.counts[self.local]
            .inserted
            .store(self.inserted, Ordering::Release);
        let g = self.g;
        match self.scheme {
            Scheme::WW => {
                let b = &mut self.bufs[dest];
                if b.n == 0 && self.timed {
                    b.since = Some(Instant::now());
                }
                b.data.extend_from_slice(item);
                b.n += 1;
                if b.n == g {
                    self.ship(dest)?;
                }
            }
            Scheme::WPs => {
                let b = &mut self.bufs[dp];
                if b.n == 0 && self.timed {
                    b.since = Some(Instant::now());
                }
                b.data.extend_from_slice(&(dw as u16).to_le_bytes());
                b.data.extend_from_slice(item);
                b.n += 1;
                if b.n == g {
                    self.ship(dp)?;
                }
            }
            Scheme::WsP => {
                let b = &mut self.bufs[dp];
                if b.n == 0 && self.timed {
                    b.since = Some(Instant::now());
                }
                b.groups[dw].extend_from_slice(item);
                b.n += 1;
                if b.n == g {
                    self.ship(dp)?;
                }
            }
            Scheme::PP => {
                let cfg = &self.p.cfg;
                let m = self.p.pp[dp].insert(
                    dw as u16,
                    item,
                    self.p.base,
                    &self.p.wait,
                    cfg.am.link.timeout,
                )?;
                if let Some(m) = m {
                    self.send(dp, [K_SORT, 0], false, m, g)?;
                }
            }
            Scheme::Direct => {
                let mut v = self.p.buffer();
                v.extend_from_slice(item);
                self.send(dp, [dw as u64, 0], true, v, 1)?;
            }
        }
        Ok(())
    }

    /// Ships private buffer `b` (a destination worker for WW, a process otherwise).
    fn ship(&mut self, b: usize) -> Result<(), AggError> {
        let n = self.bufs[b].n;
        if n == 0 {
            return Ok(());
        }
        let fresh = self.p.buffer();
        let buf = &mut self.bufs[b];
        buf.n = 0;
        buf.since = None;
        let (to, args, data) = match self.scheme {
            Scheme::WW => (
                b / self.t,
                [K_WORKER, (b % self.t) as u64],
                std::mem::replace(&mut buf.data, fresh),
            ),
            Scheme::WPs => (b, [K_SORT, 0], std::mem::replace(&mut buf.data, fresh)),
            Scheme::WsP => {
                let mut d = fresh;
                for gr in &buf.groups {
                    d.extend_from_slice(&(gr.len() / self.item).to_le_bytes()[..4]);
                }
                for gr in &mut buf.groups {
                    d.extend_from_slice(gr);
                    gr.clear();
                }
                (b, [K_GROUPED, 0], d)
            }
            Scheme::PP | Scheme::Direct => unreachable!("no private buffers"),
        };
        self.send(to, args, false, data, n)
    }

    fn send(
        &mut self,
        to: usize,
        args: [u64; 2],
        direct: bool,
        data: Vec<u8>,
        n: usize,
    ) -> Result<(), AggError> {
        self.messages += 1;
        self.items_shipped += n as u64;
        let sh = &self.p.sh;
        if to == sh.process && !direct {
            // A buffer for this process: handed over in memory. (Without aggregation
            // every item is an active message, to this process's endpoint too.)
            sh.accept(&args, &data);
            self.p.recycle(data);
            return Ok(());
        }
        self.p.enqueue(OutMsg {
            to,
            args,
            direct,
            data,
        })
    }

    /// Ships every partial buffer (and this process's partial PP buffers).
    fn flush_all(&mut self, shared: bool) -> Result<(), AggError> {
        for b in 0..self.bufs.len() {
            self.ship(b)?;
        }
        if shared && self.scheme == Scheme::PP {
            for dp in 0..self.p.pp.len() {
                if let Some(m) = self.p.pp[dp].flush(&self.p.wait, self.p.cfg.am.link.timeout)? {
                    let n = m.len() / (self.item + 2);
                    self.send(dp, [K_SORT, 0], false, m, n)?;
                }
            }
        }
        Ok(())
    }

    /// Ships the buffers older than the flush timeout.
    fn flush_old(&mut self, d: Duration) -> Result<(), AggError> {
        let now = Instant::now();
        for b in 0..self.bufs.len() {
            if self.bufs[b]
                .since
                .is_some_and(|s| now.duration_since(s) >= d)
            {
                self.ship(b)?;
            }
        }
        if self.scheme == Scheme::PP {
            for dp in 0..self.p.pp.len() {
                if self.p.pp[dp].older_than(d, self.p.base) {
                    if let Some(m) =
                        self.p.pp[dp].flush(&self.p.wait, self.p.cfg.am.link.timeout)?
                    {
                        let n = m.len() / (self.item + 2);
                        self.send(dp, [K_SORT, 0], false, m, n)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A worker's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Items this worker inserted (handlers' inserts included).
    pub inserted: u64,
    /// Items handed to this worker's handler.
    pub handled: u64,
    /// Messages this worker sent: buffers it shipped (for PP, the shared buffers it
    /// happened to ship), or items sent on their own with [`Scheme::Direct`]. A
    /// buffer for the worker's own process is one message handed over in memory.
    pub messages: u64,
    /// Items in those messages.
    pub items_shipped: u64,
}

/// One worker of an aggregator: inserts items for any worker of the job and handles
/// the items sent to it. Used by one thread.
pub struct Worker<S, L: Link = WorldLink> {
    tx: Tx<L>,
    state: S,
    handler: ItemHandler<S>,
    rx: Vec<u8>,
    handled: u64,
    epoch: u64,
    tick: u32,
}

impl<S, L: Link> std::fmt::Debug for Worker<S, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("id", &self.tx.me)
            .field("scheme", &self.tx.scheme)
            .field("inserted", &self.tx.inserted)
            .field("handled", &self.handled)
            .finish()
    }
}

/// Builds the workers of the processes whose endpoints are `eps` (with the states
/// `shared`; process index `shared[i].process`).
pub(crate) fn build<S, L: Link + 'static, H>(
    eps: Vec<Endpoint<Arc<Shared>, L>>,
    shared: Vec<Arc<Shared>>,
    t: usize,
    cfg: AggConfig,
    handshake: bool,
    mut state: impl FnMut(usize) -> S,
    handler: H,
) -> Result<Vec<Worker<S, L>>, AggError>
where
    H: Fn(&mut S, &[u8], &mut Out<'_>) + Send + Sync + 'static,
{
    let handler: ItemHandler<S> = Arc::new(handler);
    let mut out = Vec::new();
    for (mut ep, sh) in eps.into_iter().zip(shared) {
        ep.register(H_DATA, |sh: &mut Arc<Shared>, ctx, m| {
            sh.accept(m.args, m.data);
            // The requester may have left once everything was handled.
            let _ = ctx.reply(H_ACK, &[]);
        })?;
        ep.register(H_DIRECT, |sh: &mut Arc<Shared>, ctx, m| {
            sh.accept_direct(m.args, m.data);
            let _ = ctx.reply(H_ACK, &[]);
        })?;
        ep.register(H_ACK, |_, _, _| {})?;
        ep.register(H_HELLO, |sh: &mut Arc<Shared>, ctx, _| {
            sh.hellos.fetch_add(1, Ordering::SeqCst);
            let _ = ctx.reply(H_ACK, &[]);
        })?;
        ep.on_returned(|sh: &mut Arc<Shared>, r| {
            if r.handler == H_HELLO && r.was_request {
                lock(&sh.hello_again).push(r.by);
            } else if r.was_request && (r.handler == H_DATA || r.handler == H_DIRECT) {
                let mut x = lock(&sh.returned);
                x.0 += 1;
                x.1 = Some(r.reason);
            }
        });
        ep.register(H_WAVE, |sh: &mut Arc<Shared>, ctx, m| {
            if let [e, w, i, h, a] = *m.args {
                sh.report(e, w, i, h, a != 0);
            }
            let _ = ctx.reply(H_ACK, &[]);
        })?;
        ep.register(H_DECIDE, |sh: &mut Arc<Shared>, ctx, m| {
            if let [e, w, d] = *m.args {
                sh.verdict(e, w, d != 0);
            }
            let _ = ctx.reply(H_ACK, &[]);
        })?;
        let n = sh.processes;
        let wait = cfg.am.link.wait.unwrap_or(
            if std::thread::available_parallelism().map_or(1, |c| c.get()) >= n * t {
                WaitPolicy::DEDICATED
            } else {
                WaitPolicy::OVERSUBSCRIBED
            },
        );
        let pp = if cfg.scheme == Scheme::PP {
            (0..n)
                .map(|_| PpBuf::new(cfg.buffer_items, cfg.item_size))
                .collect()
        } else {
            Vec::new()
        };
        if handshake {
            hello(&mut ep, &sh, cfg.am.link.timeout)?;
        }
        let p = Arc::new(Proc {
            sh: sh.clone(),
            ep: Mutex::new(ep),
            outq: Mutex::new(VecDeque::new()),
            queued: AtomicUsize::new(0),
            pool: Mutex::new(Vec::new()),
            pp,
            failed: Mutex::new(None),
            gone: Mutex::new(None),
            base: Instant::now(),
            wait,
            cfg: cfg.clone(),
        });
        for local in 0..t {
            let me = sh.process * t + local;
            let nbufs = match cfg.scheme {
                Scheme::WW => n * t,
                Scheme::WPs | Scheme::WsP => n,
                Scheme::PP | Scheme::Direct => 0,
            };
            let bufs = (0..nbufs)
                .map(|_| Buf {
                    groups: if cfg.scheme == Scheme::WsP {
                        vec![Vec::new(); t]
                    } else {
                        Vec::new()
                    },
                    ..Default::default()
                })
                .collect();
            out.push(Worker {
                tx: Tx {
                    p: p.clone(),
                    me,
                    local,
                    t,
                    total: n * t,
                    g: cfg.buffer_items,
                    item: cfg.item_size,
                    scheme: cfg.scheme,
                    timed: cfg.flush.timeout.is_some(),
                    bufs,
                    inserted: 0,
                    messages: 0,
                    items_shipped: 0,
                    deferred: None,
                },
                state: state(me),
                handler: handler.clone(),
                rx: Vec::new(),
                handled: 0,
                epoch: 0,
                tick: 0,
            });
        }
    }
    Ok(out)
}

/// The start-up handshake of processes that start on their own (member processes,
/// MPI ranks): a hello to every other process, until every other process's hello
/// arrived here and every process took this one's (a hello that finds its
/// destination's handlers not registered yet comes back, and is sent again). No item
/// is sent before: an item to a process not yet ready would come back without its
/// data.
fn hello<L: Link + 'static>(
    ep: &mut Endpoint<Arc<Shared>, L>,
    sh: &Arc<Shared>,
    limit: Duration,
) -> Result<(), AggError> {
    let n = sh.processes;
    for q in (0..n).filter(|&q| q != sh.process) {
        ep.request(q, H_HELLO, &[])?;
    }
    let start = Instant::now();
    loop {
        let again: Vec<usize> = std::mem::take(&mut *lock(&sh.hello_again));
        for q in again {
            ep.request(q, H_HELLO, &[])?;
        }
        if sh.hellos.load(Ordering::SeqCst) >= (n - 1) as u64
            && ep.outstanding_total() == 0
            && lock(&sh.hello_again).is_empty()
        {
            return Ok(());
        }
        let left = limit.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(AggError::Timeout {
                what: format!(
                    "for the other processes to start (process {}: {} of {} hellos)",
                    sh.process,
                    sh.hellos.load(Ordering::SeqCst),
                    n - 1
                ),
                after: limit,
            });
        }
        match ep.wait(left.min(Duration::from_millis(10))) {
            Ok(_) | Err(AmError::Timeout { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

impl<S, L: Link + 'static> Worker<S, L> {
    /// This worker's index in the job (`process · t + local`).
    pub fn id(&self) -> usize {
        self.tx.me
    }

    /// Workers in the job.
    pub fn size(&self) -> usize {
        self.tx.total
    }

    /// Its process.
    pub fn process(&self) -> usize {
        self.tx.p.sh.process
    }

    /// Processes in the job.
    pub fn processes(&self) -> usize {
        self.tx.p.sh.processes
    }

    /// Workers per process.
    pub fn workers_per_process(&self) -> usize {
        self.tx.t
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.tx.scheme
    }

    /// The counters.
    pub fn stats(&self) -> WorkerStats {
        WorkerStats {
            inserted: self.tx.inserted,
            handled: self.handled,
            messages: self.tx.messages,
            items_shipped: self.tx.items_shipped,
        }
    }

    /// Aggregated messages of this worker's process that arrived unreadable (never
    /// handed to a handler); 0 unless something sent garbage to the endpoint.
    pub fn malformed(&self) -> u64 {
        self.tx.p.sh.malformed.load(Ordering::Relaxed)
    }

    /// The handler's state.
    pub fn state(&self) -> &S {
        &self.state
    }

    /// The handler's state, to change.
    pub fn state_mut(&mut self) -> &mut S {
        &mut self.state
    }

    /// Ends the worker and gives its state back.
    pub fn into_state(self) -> S {
        self.state
    }

    fn errors(&mut self) -> Result<(), AggError> {
        if let Some(e) = self.tx.deferred.take() {
            return Err(e);
        }
        self.tx.p.check()
    }

    /// Inserts `item` (exactly the aggregator's item size) for worker `dest`. It goes
    /// out when its buffer is full, at a flush, or by the flush policy. Every 64th
    /// insert also makes progress (sends, runs handlers, flushes old buffers).
    pub fn insert(&mut self, item: &[u8], dest: usize) -> Result<(), AggError> {
        self.tx.put(item, dest)?;
        self.tick = self.tick.wrapping_add(1);
        if self.tick.is_multiple_of(64) {
            self.progress()?;
        }
        Ok(())
    }

    /// Inserts an 8-byte item (the aggregator's item size must be 8).
    pub fn insert_u64(&mut self, item: u64, dest: usize) -> Result<(), AggError> {
        self.insert(&item.to_le_bytes(), dest)
    }

    fn progress(&mut self) -> Result<usize, AggError> {
        self.tx.p.pump(false)?;
        let n = self.drain()?;
        if let Some(d) = self.tx.p.cfg.flush.timeout {
            self.tx.flush_old(d)?;
        }
        self.errors()?;
        Ok(n)
    }

    /// Hands the items in this worker's inbox to the handler: how many.
    fn drain(&mut self) -> Result<usize, AggError> {
        let sh = self.tx.p.sh.clone();
        let inbox = &sh.inboxes[self.tx.local];
        if !inbox.ready.load(Ordering::Acquire) {
            return Ok(0);
        }
        let mut rx = std::mem::take(&mut self.rx);
        {
            let mut items = lock(&inbox.items);
            std::mem::swap(&mut *items, &mut rx);
            inbox.ready.store(false, Ordering::Release);
        }
        let item = self.tx.item;
        let n = rx.len() / item;
        {
            let mut out = Out { tx: &mut self.tx };
            for it in rx.chunks_exact(item) {
                (self.handler)(&mut self.state, it, &mut out);
            }
        }
        rx.clear();
        self.rx = rx;
        self.handled += n as u64;
        sh.counts[self.tx.local]
            .handled
            .store(self.handled, Ordering::Release);
        Ok(n)
    }

    /// Makes progress without waiting: sends what waits, runs the endpoint's handlers,
    /// hands the items that arrived for this worker to its handler (how many), and
    /// ships buffers by the flush policy (with `idle`, every partial buffer when no
    /// item arrived).
    pub fn poll(&mut self) -> Result<usize, AggError> {
        let n = self.progress()?;
        if n == 0 && self.tx.p.cfg.flush.idle {
            self.tx.flush_all(true)?;
            self.tx.p.pump(false)?;
        }
        self.errors()?;
        Ok(n)
    }

    /// Ships every partial buffer of this worker (and, for PP, of its process), each
    /// carrying only its filled part.
    pub fn flush(&mut self) -> Result<(), AggError> {
        self.tx.flush_all(true)?;
        self.tx.p.pump(false)?;
        self.errors()
    }

    /// Waits, handling items, until every item inserted by any worker of the job has
    /// been delivered and handled (items that handlers insert meanwhile included), for
    /// at most `timeout`. Collective: every worker of the job calls it; it can be
    /// called again for another phase. The process's shared PP buffers are flushed
    /// once all its workers have entered (so a worker that finishes early does not
    /// ship a buffer the others are still filling).
    pub fn terminate(&mut self, timeout: Duration) -> Result<(), AggError> {
        self.tx.flush_all(false)?;
        self.epoch += 1;
        let epoch = self.epoch;
        let p = self.tx.p.clone();
        p.sh.term.entered.fetch_add(1, Ordering::SeqCst);
        let start = Instant::now();
        let mut b = Backoff::with_policy(&p.wait);
        let mut nap = p.wait.park_initial;
        loop {
            if self.is_done(epoch) {
                return self.settle(timeout.saturating_sub(start.elapsed()));
            }
            let n = self.progress()?;
            let all_in = p.sh.term.entered.load(Ordering::SeqCst) >= epoch * self.tx.t as u64;
            self.tx.flush_all(all_in)?;
            self.tx.p.pump(false)?;
            if self.tx.local == 0 {
                self.leader_step(epoch)?;
                if self.is_done(epoch) {
                    return self.settle(timeout.saturating_sub(start.elapsed()));
                }
            }
            // A process that left is not an error by itself: it may have learnt the
            // end before this one (the verdicts travel separately); it is reported if
            // the end never comes.
            if n > 0 {
                b.reset();
                nap = p.wait.park_initial;
            } else if b.is_completed() {
                if start.elapsed() > timeout {
                    let (i, h, _) = p.sh.sums(epoch);
                    let mut gone = lock(&p.gone)
                        .as_ref()
                        .map_or(String::new(), |e| format!("; {e}"));
                    let bad = p.sh.malformed.load(Ordering::Relaxed);
                    if bad > 0 {
                        gone += &format!("; {bad} unreadable messages");
                    }
                    let (ep_out, ep_stats) = {
                        let ep = lock(&p.ep);
                        (ep.outstanding_total(), ep.stats().clone())
                    };
                    gone += &format!(
                        "; {} items queued, {ep_out} requests unanswered, endpoint {:?}",
                        p.queued.load(Ordering::Relaxed),
                        ep_stats
                    );
                    if let (n, Some(why)) = *lock(&p.sh.returned) {
                        gone += &format!("; {n} messages of items came back ({why})");
                    }
                    let (wave, waiting) = {
                        let l = lock(&p.sh.term.leader);
                        (l.wave, l.waiting)
                    };
                    return Err(AggError::Timeout {
                        what: format!(
                            "waiting for every item to be delivered (process {}: {} inserted, {} handled; wave {wave}{}{gone})",
                            p.sh.process, i, h, if waiting { ", waiting for its verdict" } else { "" }
                        ),
                        after: timeout,
                    });
                }
                std::thread::park_timeout(nap);
                nap = (nap * 2).min(p.wait.park_max);
            } else {
                b.snooze();
            }
        }
    }

    /// After the end: waits until every request of this process's endpoint was
    /// answered (the acknowledgements of its last messages), so that no message of
    /// this job is still on its way when the endpoint is dropped (a later endpoint on
    /// the same network must not meet it).
    fn settle(&mut self, left: Duration) -> Result<(), AggError> {
        let p = self.tx.p.clone();
        let mut ep = lock(&p.ep);
        match ep.quiesce(left.max(Duration::from_millis(100))) {
            Ok(()) | Err(AmError::PeerGone { .. }) => Ok(()),
            Err(e) => Err(p.fail(e.into())),
        }
    }

    /// True once the end of `epoch` is known here. Worker 0 learns it in its
    /// [`leader_step`](Self::leader_step) (which must consume each verdict); the
    /// others also from the verdict itself.
    fn is_done(&self, epoch: u64) -> bool {
        let term = &self.tx.p.sh.term;
        if term.done_epoch.load(Ordering::Acquire) >= epoch {
            return true;
        }
        self.tx.local != 0 && matches!(*lock(&term.verdict), Some((e, _, true)) if e == epoch)
    }

    /// Worker 0 of each process: reports the process's counts for a wave and waits
    /// for the verdict; at process 0, also judges the waves.
    fn leader_step(&mut self, epoch: u64) -> Result<(), AggError> {
        let p = self.tx.p.clone();
        let sh = &p.sh;
        {
            let mut l = lock(&sh.term.leader);
            if !l.waiting {
                let (i, h, all_in) = sh.sums(epoch);
                l.waiting = true;
                let wave = l.wave;
                drop(l);
                if sh.process == 0 {
                    sh.report(epoch, wave, i, h, all_in);
                } else {
                    p.control(0, H_WAVE, &[epoch, wave, i, h, all_in as u64])?;
                }
            } else {
                let v = *lock(&sh.term.verdict);
                if let Some((e, w, done)) = v {
                    if e == epoch && w == l.wave {
                        l.waiting = false;
                        l.wave += 1;
                        if done {
                            sh.term.done_epoch.store(epoch, Ordering::Release);
                        }
                    }
                }
            }
        }
        if sh.process == 0 {
            let verdict = {
                let mut c = lock(&sh.term.coord);
                if c.got == sh.processes {
                    c.got = 0;
                    let sums = (c.inserted, c.handled);
                    let done = c.all_in && sums.0 == sums.1 && c.prev == Some(sums);
                    c.prev = (c.all_in && !done).then_some(sums);
                    Some((c.epoch, c.wave, done))
                } else {
                    None
                }
            };
            if let Some((e, w, done)) = verdict {
                for q in 1..sh.processes {
                    p.control(q, H_DECIDE, &[e, w, done as u64])?;
                }
                sh.verdict(e, w, done);
            }
        }
        Ok(())
    }
}
