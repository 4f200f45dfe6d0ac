//! The endpoint: a handler table, a destination table, and the links to reach them.

use crate::error::AmError;
use crate::poll::{PollPolicy, Poller};
use crate::remote::Remote;
use crate::wire::{self, Head, Kind, Reason, FIRST, LAST, MAX_ARGS};
use smelt_mesh::mesh::{Mesh, MeshError};
use smelt_mesh::world::WorldLink;
use smelt_mesh::Rank;
use smelt_transport::{Backoff, Link, TransportError, WaitPolicy};
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// An endpoint's global name: the node, the process on that node, the endpoint in
/// that process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name {
    /// Node.
    pub node: u32,
    /// Process on the node.
    pub process: u32,
    /// Endpoint in the process.
    pub endpoint: u32,
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.node, self.process, self.endpoint)
    }
}

/// How a destination is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// This endpoint itself.
    Me,
    /// Over the local links, as this member of the mesh.
    Local(Rank),
    /// Over the slow channel.
    Remote,
}

/// One entry of the destination table.
#[derive(Debug, Clone)]
pub(crate) struct Dest {
    pub(crate) name: Name,
    /// The tag this endpoint presents to it.
    pub(crate) key: u64,
    pub(crate) route: Route,
    pub(crate) gone: bool,
}

/// Settings of an endpoint.
#[derive(Debug, Clone)]
pub struct AmConfig {
    /// The links: slots (cache lines of 48 payload bytes) per local link, each way
    /// (small values make senders wait for room, and serve their own queue meanwhile;
    /// at least 2; default 256, see [`AmConfig::default`]); the longest any send or
    /// wait may take before it fails with [`AmError::Timeout`] (default 30 s); how
    /// waits back off (default: from the number of members and CPUs).
    pub link: smelt_mesh::LinkConfig,
    /// Data bytes per chunk of a bulk message (default 8 KiB); larger data blocks are
    /// pipelined in chunks of this size (or of what a link carries, if less).
    pub bulk_chunk: usize,
    /// Largest data block of one bulk message (default 64 MiB). Larger ones are
    /// refused at the sender ([`AmError::TooLarge`]) and at the receiver
    /// ([`Reason::TooLarge`]).
    pub max_bulk: usize,
    /// When the slow channel is polled (default: adaptive, 1/8 to 1/32).
    pub poll: PollPolicy,
}

/// Default data bytes per bulk chunk.
pub const BULK_CHUNK: usize = 8 << 10;

impl Default for AmConfig {
    fn default() -> Self {
        AmConfig {
            // 256 slots, not the shared 64: one link per pair carries every message
            // (short, bulk chunks, replies) of both endpoints, and 64 slots hold less
            // than one 8 KiB bulk chunk.
            link: smelt_mesh::LinkConfig::default().capacity(256),
            bulk_chunk: BULK_CHUNK,
            max_bulk: 64 << 20,
            poll: PollPolicy::default(),
        }
    }
}

impl AmConfig {
    pub(crate) fn validate(&self) -> Result<(), AmError> {
        if self.link.capacity < 2 || self.link.capacity > smelt_transport::MAX_CAPACITY {
            return Err(AmError::Invalid(format!(
                "a capacity of {} slots per link (2 to {})",
                self.link.capacity,
                smelt_transport::MAX_CAPACITY
            )));
        }
        if self.bulk_chunk == 0 {
            return Err(AmError::Invalid("a bulk chunk of 0 bytes".into()));
        }
        self.poll.validate()
    }
}

/// A message as its handler sees it.
#[derive(Debug, Clone, Copy)]
pub struct Msg<'a> {
    /// The sender's index in this endpoint's destination table.
    pub from: usize,
    /// The handler index it was sent to.
    pub handler: u8,
    /// Its argument words (up to 8).
    pub args: &'a [u64],
    /// Its data block (empty for a short message).
    pub data: &'a [u8],
}

/// A message that came back to its sender, as handler 0 sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Returned {
    /// Why it came back.
    pub reason: Reason,
    /// The endpoint that sent it back (the message's destination).
    pub by: usize,
    /// Whether the message was a request (else a reply).
    pub was_request: bool,
    /// The handler index it was sent to.
    pub handler: u8,
    /// Its argument words.
    pub args: Vec<u64>,
    /// The length of its data block (the data is not sent back).
    pub data_len: usize,
}

/// Counters of an endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests sent.
    pub requests_sent: u64,
    /// Replies sent.
    pub replies_sent: u64,
    /// Messages handed to handlers (requests and replies).
    pub handled: u64,
    /// Messages this endpoint sent back to their senders.
    pub returned_sent: u64,
    /// Messages that came back to this endpoint.
    pub returned_received: u64,
    /// Link messages that were not active messages (dropped).
    pub foreign: u64,
    /// Polls of the slow channel.
    pub remote_polls: u64,
    /// Polls of the slow channel that found a message.
    pub remote_hits: u64,
    /// Link messages that carried several replies at once (the replies a poll made
    /// while more requests from their endpoint waited; see [`wire`](crate::wire)).
    pub reply_batches: u64,
}

/// A request or reply handler: gets the endpoint's state, the context to reply
/// through, and the message.
pub type Handler<S, L> = Box<dyn FnMut(&mut S, &mut Ctx<'_, L>, &Msg<'_>) + Send>;
/// Handler 0: gets the endpoint's state and a message that came back.
pub type ReturnHandler<S> = Box<dyn FnMut(&mut S, &Returned) + Send>;

/// Most returned messages kept for [`Endpoint::take_returned`] when no handler 0 is
/// registered (later ones are counted in [`Stats::returned_received`] only).
pub const KEEP_RETURNED: usize = 4096;

/// A message taken in while waiting, or a departure to report.
#[derive(Debug)]
struct Held {
    from: usize,
    tag: u64,
    bytes: Vec<u8>,
}

/// Tag of a held departure notice (never a valid active-message tag).
const GONE: u64 = 0;

/// Most bytes of replies sent as one batch (128 replies without argument words).
pub const BATCH_BYTES: usize = 1024;

/// A bulk message arriving in chunks from one sender.
#[derive(Debug, Default)]
struct Assembly {
    active: bool,
    /// Refused at its first chunk: drop the rest.
    skip: bool,
    handler: u8,
    nargs: usize,
    args: [u64; MAX_ARGS],
    total: usize,
    data: Vec<u8>,
}

/// Everything an endpoint uses to move messages (what a reply needs).
pub struct Net<L: Link> {
    me: usize,
    mesh: Mesh<L>,
    /// Global index of each local mesh rank.
    global: Vec<usize>,
    remote: Option<Box<dyn Remote>>,
    dests: Vec<Dest>,
    key: u64,
    poller: Poller,
    held: VecDeque<Held>,
    /// Buffers of held messages, for reuse.
    spare: Vec<Vec<u8>>,
    out: Vec<u8>,
    take: Vec<u8>,
    outstanding: Vec<u32>,
    /// Set when a reply answered the last request outstanding to its sender (a poll
    /// returns then: see [`Endpoint::poll_some`]).
    answered: bool,
    /// Short replies made by this poll's handlers to `batch_to`, not sent yet: each
    /// its tag word and argument words ([`wire`]'s batch). Sent as one link message
    /// when nothing more from the link waits, when full, before any other message
    /// and at the end of every poll, so none outlives the poll that made it.
    batch: Vec<u8>,
    batch_to: usize,
    /// Replies in `batch`.
    batch_n: usize,
    /// Most bytes of `batch` (the link's largest message, at most [`BATCH_BYTES`]).
    batch_max: usize,
    /// Errors of sending a batch, for the next polls.
    deferred: VecDeque<AmError>,
    /// Set while the handler of a request runs that nothing else was waiting
    /// behind: its reply goes at once (after the batch, if there is one).
    alone: bool,
    /// Unanswered requests to one destination above which a request first runs this
    /// endpoint's handlers (half a link's slots).
    poll_above: u32,
    /// Set when the message just handled already decided whether the batch goes
    /// (a request: see `alone`), so the poll need not look at the links again.
    decided: bool,
    cfg: AmConfig,
    wait: WaitPolicy,
    /// The mesh's abort flag (a handle kept: waits look at it every round).
    abort: smelt_transport::Abort,
    stats: Stats,
}

/// What a handler gets to reply through: the opaque token of the request it handles.
pub struct Ctx<'a, L: Link> {
    net: &'a mut Net<L>,
    from: usize,
    request: bool,
    replied: bool,
}

impl<L: Link> Ctx<'_, L> {
    /// The sender's name.
    pub fn from_name(&self) -> Name {
        self.net.dests[self.from].name
    }

    /// This endpoint's index in its destination table.
    pub fn me(&self) -> usize {
        self.net.me
    }

    /// True in a request's handler (which must reply), false in a reply's.
    pub fn is_request(&self) -> bool {
        self.request
    }

    /// True once this handler replied.
    pub fn replied(&self) -> bool {
        self.replied
    }

    /// Replies to the request being handled with a short message to the requester's
    /// handler `handler`. Exactly one reply per request: a second one fails with
    /// [`AmError::AlreadyReplied`], one in a reply handler with
    /// [`AmError::NotARequest`]. A handler that returns without replying makes its
    /// request come back to the requester ([`Reason::NoReply`]).
    ///
    /// A short reply over the local links leaves once its handler returned: at once
    /// if no other message is waiting, else with the other replies of this poll to the
    /// same endpoint in one link message (a batch, see [`wire`](crate::wire)), at the
    /// latest when the poll ends. A failure to send it then (other than the
    /// requester's departure, which a poll reports anyway) is reported by the next
    /// poll.
    pub fn reply(&mut self, handler: u8, args: &[u64]) -> Result<(), AmError> {
        self.reply_inner(handler, args, None)
    }

    /// Replies with a data block (as [`reply`](Self::reply)).
    pub fn reply_bulk(&mut self, handler: u8, args: &[u64], data: &[u8]) -> Result<(), AmError> {
        self.reply_inner(handler, args, Some(data))
    }

    fn reply_inner(
        &mut self,
        handler: u8,
        args: &[u64],
        data: Option<&[u8]>,
    ) -> Result<(), AmError> {
        if !self.request {
            return Err(AmError::NotARequest);
        }
        if self.replied {
            return Err(AmError::AlreadyReplied);
        }
        check_message(handler, args, data, self.net.cfg.max_bulk)?;
        // The token is spent whether or not the reply gets through.
        self.replied = true;
        if self.net.alone && self.net.batch_n == 0 {
            // Nothing to batch with: the fast path below.
        } else if data.is_none() && self.net.batchable(self.from) {
            // Sent with the other replies of this poll to that endpoint (at the
            // latest when the poll ends; at once if this request was the last one
            // waiting).
            self.net.push_reply(self.from, handler, args);
            if self.net.alone {
                self.net.flush_batch();
            }
            self.net.stats.replies_sent += 1;
            return Ok(());
        }
        if data.is_some()
            || !self
                .net
                .try_send_short(Kind::Reply, self.from, handler, args)?
        {
            self.net
                .send_message(Kind::Reply, self.from, handler, args, data)?;
        }
        self.net.stats.replies_sent += 1;
        Ok(())
    }
}

fn check_message(
    handler: u8,
    args: &[u64],
    data: Option<&[u8]>,
    max: usize,
) -> Result<(), AmError> {
    if handler == 0 {
        return Err(AmError::ReservedHandler);
    }
    if args.len() > MAX_ARGS {
        return Err(AmError::TooManyArgs { n: args.len() });
    }
    match data {
        Some(d) if d.len() > max => Err(AmError::TooLarge { len: d.len(), max }),
        _ => Ok(()),
    }
}

impl<L: Link> Net<L> {
    fn err_mesh(&self, dest: usize, e: MeshError) -> AmError {
        match e {
            MeshError::PeerGone { .. } => AmError::PeerGone { dest },
            MeshError::Aborted { .. } => AmError::Aborted,
            MeshError::Transport { source, .. } => AmError::Transport { dest, source },
            other => AmError::Transport {
                dest,
                source: TransportError::NotYours(other.to_string()),
            },
        }
    }

    fn dest(&self, dest: usize) -> Result<&Dest, AmError> {
        match self.dests.get(dest) {
            Some(d) => Ok(d),
            None => Err(AmError::NoSuchDestination {
                dest,
                size: self.dests.len(),
            }),
        }
    }

    /// True if a short reply to `to` may wait in the batch (a live destination over
    /// the local links).
    #[inline]
    fn batchable(&self, to: usize) -> bool {
        matches!(self.dests.get(to), Some(d) if !d.gone && matches!(d.route, Route::Local(_)))
    }

    /// Adds a short reply to the batch (sending the batch first if it goes elsewhere
    /// or is full).
    #[inline]
    fn push_reply(&mut self, to: usize, handler: u8, args: &[u64]) {
        let need = 8 * (1 + args.len());
        if self.batch_n > 0 && (self.batch_to != to || self.batch.len() + need > self.batch_max) {
            self.flush_batch();
        }
        if self.batch_n == 0 {
            self.batch_to = to;
            self.batch_max = self.room(to).min(BATCH_BYTES);
        }
        let t = wire::tag(Kind::Reply, handler, args.len(), false, FIRST | LAST);
        self.batch.extend_from_slice(&t.to_le_bytes());
        for a in args {
            self.batch.extend_from_slice(&a.to_le_bytes());
        }
        self.batch_n += 1;
    }

    /// Sends the batched replies (one alone as a plain reply), waiting for room as
    /// [`send_raw`] does. A failure is reported by the next poll; a destination that
    /// left is reported by the poll that finds its link closed, not again here.
    #[inline]
    fn flush_batch(&mut self) {
        if self.batch_n > 0 {
            self.send_batch();
        }
    }

    #[inline(never)]
    fn send_batch(&mut self) {
        let n = std::mem::replace(&mut self.batch_n, 0);
        let to = self.batch_to;
        let b = std::mem::take(&mut self.batch);
        let r = if n == 1 {
            self.send_raw(to, wire::word(&b, 0), &b[8..])
        } else {
            self.stats.reply_batches += 1;
            self.send_raw(to, wire::batch_tag(), &b)
        };
        self.batch = b;
        self.batch.clear();
        match r {
            Ok(()) | Err(AmError::PeerGone { .. }) => {}
            Err(e) => self.deferred.push_back(e),
        }
    }

    /// Largest payload of one link message to `dest`.
    fn room(&self, dest: usize) -> usize {
        match self.dests[dest].route {
            Route::Me => usize::MAX,
            Route::Local(r) => self.mesh.max_message_len(r).unwrap_or(0),
            Route::Remote => self.remote.as_ref().map_or(0, |r| r.max_message_len()),
        }
    }

    /// Tries to send one link message: `Ok(false)` if there is no room now.
    #[inline]
    fn try_send_raw(&mut self, to: usize, tag: u64, payload: &[u8]) -> Result<bool, AmError> {
        if self.batch_n > 0 {
            // Per-pair order: the replies batched so far go first.
            self.flush_batch();
        }
        match self.dests[to].route {
            Route::Local(r) => match self.mesh.try_send(r, tag, payload) {
                Ok(()) => Ok(true),
                Err(MeshError::Transport {
                    source: TransportError::Full,
                    ..
                }) => Ok(false),
                Err(e) => Err(self.err_mesh(to, e)),
            },
            Route::Me => {
                let mut bytes = self.spare.pop().unwrap_or_default();
                bytes.clear();
                bytes.extend_from_slice(payload);
                self.held.push_back(Held {
                    from: self.me,
                    tag,
                    bytes,
                });
                Ok(true)
            }
            Route::Remote => {
                let r = self.remote.as_mut().expect("a remote route has a remote");
                match r.try_send(to, tag, payload) {
                    Ok(()) => Ok(true),
                    Err(TransportError::Full) => Ok(false),
                    Err(TransportError::Disconnected | TransportError::PeerDied { .. }) => {
                        Err(AmError::PeerGone { dest: to })
                    }
                    Err(TransportError::Aborted) => Err(AmError::Aborted),
                    Err(source) => Err(AmError::Transport { dest: to, source }),
                }
            }
        }
    }

    /// Takes every waiting message into the held queue (while a send waits for room,
    /// so that peers sending to this endpoint progress). True if any.
    fn take_in(&mut self) -> bool {
        let mut any = false;
        loop {
            if self.take.len() < self.mesh.max_message_len_all().max(64) {
                let n = self.rx_len();
                self.take.resize(n, 0);
            }
            match self.mesh.try_recv_any(&mut self.take) {
                Ok(Some((r, tag, n))) => {
                    any = true;
                    let mut bytes = self.spare.pop().unwrap_or_default();
                    bytes.clear();
                    bytes.extend_from_slice(&self.take[..n]);
                    let from = self.global[r.index()];
                    self.held.push_back(Held { from, tag, bytes });
                }
                Ok(None) => break,
                Err(MeshError::PeerGone { peer, .. }) => {
                    any = true;
                    let from = self.global[peer.index()];
                    self.held.push_back(Held {
                        from,
                        tag: GONE,
                        bytes: Vec::new(),
                    });
                }
                Err(_) => break,
            }
        }
        if let Some(r) = self.remote.as_mut() {
            r.progress();
            let mut buf = self.spare.pop().unwrap_or_default();
            while let Ok(Some((from, tag))) = r.try_recv(&mut buf) {
                any = true;
                self.held.push_back(Held {
                    from,
                    tag,
                    bytes: std::mem::take(&mut buf),
                });
                buf = self.spare.pop().unwrap_or_default();
            }
            self.spare.push(buf);
        }
        any
    }

    /// A receive buffer's size: the longest message any link carries.
    fn rx_len(&self) -> usize {
        let local = self
            .mesh
            .peers()
            .into_iter()
            .filter_map(|p| self.mesh.max_message_len(p))
            .max()
            .unwrap_or(0);
        local.max(64)
    }

    /// Sends one link message, waiting for room; while it waits it takes messages in
    /// (what handlers use: they never run handlers themselves).
    fn send_raw(&mut self, to: usize, tag: u64, payload: &[u8]) -> Result<(), AmError> {
        if self.try_send_raw(to, tag, payload)? {
            return Ok(());
        }
        self.send_raw_wait(to, tag, payload)
    }

    #[inline(never)]
    fn send_raw_wait(&mut self, to: usize, tag: u64, payload: &[u8]) -> Result<(), AmError> {
        let mut waiter = Waiter::new(&self.wait, self.cfg.link.timeout);
        while !self.try_send_raw(to, tag, payload)? {
            let took = self.take_in();
            waiter.step(took, &self.abort, || {
                format!("sending to endpoint {to} (its queue stayed full)")
            })?;
        }
        Ok(())
    }

    /// The chunks of a message to `to`, after checking that it can be sent.
    fn chunks<'d>(
        &self,
        kind: Kind,
        to: usize,
        handler: u8,
        args: &'d [u64],
        data: Option<&'d [u8]>,
    ) -> Result<Chunks<'d>, AmError> {
        let d = self.dest(to)?;
        if d.gone {
            return Err(AmError::PeerGone { dest: to });
        }
        let key = (kind == Kind::Request).then_some(d.key);
        let room = self.room(to);
        let head = 8 * (key.is_some() as usize + args.len());
        if data.is_some() && head + 8 >= room {
            return Err(AmError::Invalid(format!(
                "the link to endpoint {to} carries {room} bytes, too few for a bulk message's header (raise the capacity)"
            )));
        }
        let chunk = self.cfg.bulk_chunk;
        Ok(Chunks {
            kind,
            handler,
            key,
            args,
            single: data.is_none_or(|d| d.len() <= chunk.min(room - head)),
            data,
            room,
            chunk,
            off: 0,
            first: true,
            done: false,
        })
    }

    /// The fast path of a short message: one attempt with the payload built on the
    /// stack. `Ok(true)` if it went; `Ok(false)` if the general path must take it (no
    /// room, or a destination it must check and report on).
    #[inline]
    fn try_send_short(
        &mut self,
        kind: Kind,
        to: usize,
        handler: u8,
        args: &[u64],
    ) -> Result<bool, AmError> {
        let Some(d) = self.dests.get(to) else {
            return Ok(false);
        };
        if d.gone {
            return Ok(false);
        }
        let mut buf = [0u8; 8 * (MAX_ARGS + 1)];
        let mut len = 0;
        if kind == Kind::Request {
            buf[..8].copy_from_slice(&d.key.to_le_bytes());
            len = 8;
        }
        for a in args {
            buf[len..len + 8].copy_from_slice(&a.to_le_bytes());
            len += 8;
        }
        let t = wire::tag(kind, handler, args.len(), false, FIRST | LAST);
        self.try_send_raw(to, t, &buf[..len]).or(Ok(false))
    }

    /// Sends a whole message from a handler (a reply), waiting as [`send_raw`] does.
    fn send_message(
        &mut self,
        kind: Kind,
        to: usize,
        handler: u8,
        args: &[u64],
        data: Option<&[u8]>,
    ) -> Result<(), AmError> {
        let mut chunks = self.chunks(kind, to, handler, args, data)?;
        let mut out = std::mem::take(&mut self.out);
        let mut r = Ok(());
        while let Some(t) = chunks.next(&mut out) {
            r = self.send_raw(to, t, &out);
            if r.is_err() {
                break;
            }
        }
        self.out = out;
        r
    }

    /// Sends a message back to `to` (its handler 0), from the receiving side.
    fn send_back(&mut self, to: usize, h: &Head, args: &[u64], data_len: usize, reason: Reason) {
        if self.dests.get(to).is_none_or(|d| d.gone) {
            return;
        }
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        push_words(&mut out, None, args);
        out.extend_from_slice(&(data_len as u64).to_le_bytes());
        let t = wire::returned_tag(h.handler, args.len(), reason, h.kind == Kind::Request);
        // A peer that left or a full queue that stays full: the notice is lost, as the
        // message itself would have been; nothing else to tell.
        if self.send_raw(to, t, &out).is_ok() {
            self.stats.returned_sent += 1;
        }
        self.out = out;
    }
}

fn push_words(out: &mut Vec<u8>, key: Option<u64>, args: &[u64]) {
    if let Some(k) = key {
        out.extend_from_slice(&k.to_le_bytes());
    }
    for a in args {
        out.extend_from_slice(&a.to_le_bytes());
    }
}

/// The link messages of one active message, built one at a time.
struct Chunks<'d> {
    kind: Kind,
    handler: u8,
    key: Option<u64>,
    args: &'d [u64],
    data: Option<&'d [u8]>,
    single: bool,
    room: usize,
    chunk: usize,
    off: usize,
    first: bool,
    done: bool,
}

impl Chunks<'_> {
    /// Writes the next link message's payload into `out`: its tag, or `None` after
    /// the last.
    fn next(&mut self, out: &mut Vec<u8>) -> Option<u64> {
        if self.done {
            return None;
        }
        out.clear();
        let Some(data) = self.data else {
            self.done = true;
            push_words(out, self.key, self.args);
            return Some(wire::tag(
                self.kind,
                self.handler,
                self.args.len(),
                false,
                FIRST | LAST,
            ));
        };
        let mut flags = 0;
        if self.first {
            flags |= FIRST;
            push_words(out, self.key, self.args);
            if !self.single {
                out.extend_from_slice(&(data.len() as u64).to_le_bytes());
            }
        }
        let n = (data.len() - self.off)
            .min(self.room - out.len())
            .min(self.chunk);
        if self.off + n == data.len() {
            flags |= LAST;
            self.done = true;
        }
        out.extend_from_slice(&data[self.off..self.off + n]);
        self.off += n;
        self.first = false;
        Some(wire::tag(
            self.kind,
            self.handler,
            self.args.len(),
            true,
            flags,
        ))
    }
}

/// The pacing of a wait for room or for messages: spin, yield, then park for a
/// growing time, up to the timeout.
struct Waiter {
    backoff: Backoff,
    /// Rounds without progress so far.
    rounds: u32,
    spin_polls: u32,
    park: Duration,
    park_max: Duration,
    start: Option<Instant>,
    timeout: Duration,
}

/// Rounds a dedicated wait (one that spins before it yields) polls back to back,
/// before the spin phase's pauses: a request or a reply often comes within a round
/// trip, a few hundred nanoseconds, and a pause between two polls delays finding it
/// by half a pause on average (`am_cost rtt`, this and the build without it
/// alternated 10 times: 0.958, faster in 10 of 10). A wait that yields early (the
/// oversubscribed policy) keeps its pauses.
const EAGER_ROUNDS: u32 = 64;

impl Waiter {
    fn new(wait: &WaitPolicy, timeout: Duration) -> Waiter {
        Waiter {
            backoff: Backoff::with_policy(wait),
            rounds: 0,
            spin_polls: wait.spin_polls,
            park: wait.park_initial,
            park_max: wait.park_max,
            start: None,
            timeout,
        }
    }

    /// True once the wait stopped spinning (it yields or parks between rounds).
    fn slow(&self) -> bool {
        self.rounds >= self.spin_polls
    }

    /// One round of waiting: `progressed` says whether the last round did something
    /// (then the wait starts over from spinning).
    fn step(
        &mut self,
        progressed: bool,
        abort: &smelt_transport::Abort,
        what: impl FnOnce() -> String,
    ) -> Result<(), AmError> {
        if progressed {
            self.backoff.reset();
            self.rounds = 0;
            return Ok(());
        }
        self.rounds = self.rounds.saturating_add(1);
        if abort.is_triggered() {
            return Err(AmError::Aborted);
        }
        if self.rounds <= EAGER_ROUNDS && self.spin_polls >= EAGER_ROUNDS {
            // Poll again at once (see EAGER_ROUNDS).
            return Ok(());
        }
        if !self.backoff.is_completed() {
            self.backoff.snooze();
            return Ok(());
        }
        let now = Instant::now();
        let start = *self.start.get_or_insert(now);
        if now - start >= self.timeout {
            return Err(AmError::Timeout {
                what: what(),
                after: self.timeout,
            });
        }
        // Nobody wakes a sender when room is freed: park briefly, longer each time.
        std::thread::park_timeout(self.park);
        self.park = (self.park * 2).min(self.park_max);
        Ok(())
    }
}

/// An active-message endpoint (see the [crate documentation](crate)): a handler table,
/// a destination table and the links to reach every destination. `S` is the state its
/// handlers work on ([`state`](Endpoint::state)); `L` the transport of its local
/// links: a world's [`WorldLink`] (queuepairs between threads or in the job's
/// segment between processes; [`Endpoint::from_world`], [`threads`](crate::threads)),
/// or [`ShmLink`](smelt_mesh::mesh_job::ShmLink) between MPI ranks of a node.
pub struct Endpoint<S, L: Link = WorldLink> {
    net: Net<L>,
    /// Indexed by a `u8`: no bounds check on the way to a handler.
    handlers: Box<[Option<Handler<S, L>>; 256]>,
    on_returned: Option<ReturnHandler<S>>,
    returned: VecDeque<Returned>,
    state: S,
    rx: Vec<u8>,
    /// Per sender: a request and a reply in chunks.
    asm: Vec<[Assembly; 2]>,
    /// Payload of the request being sent.
    req: Vec<u8>,
    /// Errors met while serving during a send, for the next polls.
    pending: VecDeque<AmError>,
    /// A batch of replies being handled: its bytes, from `inbox_from`, handled up to
    /// `inbox_pos`.
    inbox: Vec<u8>,
    inbox_pos: usize,
    inbox_from: usize,
    /// Set once this poll took a message from the links: the next is looked for on
    /// the same link first (a busy sender's requests, without a round-robin pass).
    again: bool,
    /// Set when a request was handled with nothing else waiting (`Net::alone`): the
    /// poll ends there instead of looking at the links once more.
    drained: bool,
}

impl<S, L: Link> std::fmt::Debug for Endpoint<S, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("me", &self.net.me)
            .field("name", &self.net.dests[self.net.me].name)
            .field("destinations", &self.net.dests.len())
            .field("stats", &self.net.stats)
            .finish()
    }
}

impl<S, L: Link + 'static> Endpoint<S, L> {
    /// An endpoint over `mesh` (its links to the endpoints of its node; mesh rank `r`
    /// is destination `global[r]`) and `remote` (every destination routed
    /// [`Route::Remote`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        me: usize,
        mesh: Mesh<L>,
        global: Vec<usize>,
        remote: Option<Box<dyn Remote>>,
        dests: Vec<Dest>,
        key: u64,
        state: S,
        cfg: AmConfig,
    ) -> Result<Endpoint<S, L>, AmError> {
        cfg.validate()?;
        if me >= dests.len() || global.len() != mesh.size() {
            return Err(AmError::Invalid(format!(
                "endpoint {me} in a table of {} with a mesh of {} for {} local endpoints",
                dests.len(),
                mesh.size(),
                global.len()
            )));
        }
        if remote.is_none() && dests.iter().any(|d| d.route == Route::Remote) {
            return Err(AmError::Invalid(
                "destinations on other nodes but no network channel".into(),
            ));
        }
        let wait = cfg.link.wait.unwrap_or_else(|| mesh.wait_policy());
        let n = dests.len();
        let abort = mesh.abort_handle();
        let mut net = Net {
            me,
            mesh,
            global,
            remote,
            dests,
            key,
            poller: Poller::new(cfg.poll),
            held: VecDeque::new(),
            spare: Vec::new(),
            out: Vec::new(),
            take: Vec::new(),
            outstanding: vec![0; n],
            answered: false,
            batch: Vec::with_capacity(BATCH_BYTES),
            batch_to: 0,
            batch_n: 0,
            batch_max: 0,
            deferred: VecDeque::new(),
            alone: false,
            poll_above: (cfg.link.capacity / 2).max(1) as u32,
            decided: false,
            abort,
            cfg,
            wait,
            stats: Stats::default(),
        };
        net.mesh.set_wait_policy(wait);
        let rx = vec![0; net.rx_len()];
        Ok(Endpoint {
            net,
            handlers: Box::new(std::array::from_fn(|_| None)),
            on_returned: None,
            returned: VecDeque::new(),
            state,
            rx,
            asm: (0..n).map(|_| Default::default()).collect(),
            req: Vec::new(),
            pending: VecDeque::new(),
            inbox: Vec::new(),
            inbox_pos: 0,
            inbox_from: 0,
            again: false,
            drained: false,
        })
    }

    /// This endpoint's index in its destination table.
    pub fn me(&self) -> usize {
        self.net.me
    }

    /// Entries of the destination table (every endpoint of the job).
    pub fn size(&self) -> usize {
        self.net.dests.len()
    }

    /// The name of destination `dest`.
    pub fn name(&self, dest: usize) -> Option<Name> {
        self.net.dests.get(dest).map(|d| d.name)
    }

    /// The index of the endpoint called `name`, if it is in the table.
    pub fn lookup(&self, name: Name) -> Option<usize> {
        self.net.dests.iter().position(|d| d.name == name)
    }

    /// True if `dest` is reached over the slow channel (another node).
    pub fn is_remote(&self, dest: usize) -> bool {
        self.net
            .dests
            .get(dest)
            .is_some_and(|d| d.route == Route::Remote)
    }

    /// This endpoint's tag: what senders must present.
    pub fn tag(&self) -> u64 {
        self.net.key
    }

    /// Changes this endpoint's tag: requests that present the old one come back to
    /// their senders ([`Reason::WrongTag`]). The other endpoints must learn the new tag
    /// ([`set_dest_tag`](Self::set_dest_tag)) before they can send here again.
    pub fn set_tag(&mut self, tag: u64) {
        self.net.key = tag;
    }

    /// The tag this endpoint presents to `dest`.
    pub fn dest_tag(&self, dest: usize) -> Option<u64> {
        self.net.dests.get(dest).map(|d| d.key)
    }

    /// Sets the tag this endpoint presents to `dest`.
    pub fn set_dest_tag(&mut self, dest: usize, tag: u64) -> Result<(), AmError> {
        self.net.dest(dest)?;
        self.net.dests[dest].key = tag;
        Ok(())
    }

    /// Registers `f` as the handler at `index` (1 to 255), replacing any before.
    pub fn register(
        &mut self,
        index: u8,
        f: impl FnMut(&mut S, &mut Ctx<'_, L>, &Msg<'_>) + Send + 'static,
    ) -> Result<(), AmError> {
        if index == 0 {
            return Err(AmError::ReservedHandler);
        }
        self.handlers[index as usize] = Some(Box::new(f));
        Ok(())
    }

    /// Removes the handler at `index`: messages to it come back to their senders
    /// ([`Reason::UnknownHandler`]).
    pub fn unregister(&mut self, index: u8) {
        self.handlers[index as usize] = None;
    }

    /// Registers handler 0: what runs for each message that comes back to this
    /// endpoint. Without one, they are kept for [`take_returned`](Self::take_returned).
    pub fn on_returned(&mut self, f: impl FnMut(&mut S, &Returned) + Send + 'static) {
        self.on_returned = Some(Box::new(f));
    }

    /// The messages that came back while no handler 0 was registered (at most
    /// [`KEEP_RETURNED`]), oldest first.
    pub fn take_returned(&mut self) -> Vec<Returned> {
        self.returned.drain(..).collect()
    }

    /// The handlers' state.
    pub fn state(&self) -> &S {
        &self.state
    }

    /// The handlers' state, to change.
    pub fn state_mut(&mut self) -> &mut S {
        &mut self.state
    }

    /// Ends the endpoint and gives its state back.
    pub fn into_state(self) -> S {
        self.state
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.net.stats
    }

    /// Requests sent to `dest` and not yet answered (by a reply or by coming back).
    pub fn outstanding(&self, dest: usize) -> u32 {
        self.net.outstanding.get(dest).copied().unwrap_or(0)
    }

    /// Requests sent to any destination and not yet answered.
    pub fn outstanding_total(&self) -> u64 {
        self.net.outstanding.iter().map(|&n| n as u64).sum()
    }

    /// A handle to the abort flag of the endpoints of this process: raising it makes
    /// their waits fail with [`AmError::Aborted`].
    pub fn abort_handle(&self) -> smelt_transport::Abort {
        self.net.mesh.abort_handle()
    }

    /// Sends a short request (up to 8 argument words) to handler `handler` of `dest`.
    /// If the destination's queue is full, this endpoint runs its own handlers on what
    /// arrives meanwhile, so endpoints flooding each other never deadlock. So it does,
    /// before sending, while half a link's capacity of requests to `dest` is
    /// unanswered: their replies are taken in before they fill the link back (a
    /// destination answering a stream of requests then never waits for room, and
    /// answers in batches).
    #[inline]
    pub fn request(&mut self, dest: usize, handler: u8, args: &[u64]) -> Result<(), AmError> {
        // The fast path: a valid short request to a destination with room now.
        if handler != 0 && args.len() <= MAX_ARGS && dest < self.net.outstanding.len() {
            if self.net.outstanding[dest] >= self.net.poll_above {
                self.serve_while_sending();
            }
            // Counted first: a request to this endpoint itself is answered from the
            // held queue, later.
            self.net.outstanding[dest] += 1;
            if self
                .net
                .try_send_short(Kind::Request, dest, handler, args)?
            {
                self.net.stats.requests_sent += 1;
                return Ok(());
            }
            self.net.outstanding[dest] -= 1;
        }
        self.request_slow(dest, handler, args)
    }

    /// Runs this endpoint's handlers on what waits (a request's, while many of its
    /// requests are unanswered); errors are reported by the next poll, in order.
    #[inline(never)]
    fn serve_while_sending(&mut self) {
        self.poll_inner(64);
    }

    #[inline(never)]
    fn request_slow(&mut self, dest: usize, handler: u8, args: &[u64]) -> Result<(), AmError> {
        self.request_inner(dest, handler, args, None)
    }

    /// Sends a request with a data block (pipelined in chunks of
    /// [`AmConfig::bulk_chunk`] bytes; the handler gets it whole).
    pub fn request_bulk(
        &mut self,
        dest: usize,
        handler: u8,
        args: &[u64],
        data: &[u8],
    ) -> Result<(), AmError> {
        self.request_inner(dest, handler, args, Some(data))
    }

    fn request_inner(
        &mut self,
        dest: usize,
        handler: u8,
        args: &[u64],
        data: Option<&[u8]>,
    ) -> Result<(), AmError> {
        check_message(handler, args, data, self.net.cfg.max_bulk)?;
        if data.is_none() && dest < self.net.outstanding.len() {
            // Counted first: a request to this endpoint itself is answered from the
            // held queue, later.
            self.net.outstanding[dest] += 1;
            if self
                .net
                .try_send_short(Kind::Request, dest, handler, args)?
            {
                self.net.stats.requests_sent += 1;
                return Ok(());
            }
            self.net.outstanding[dest] -= 1;
        }
        let mut chunks = self.net.chunks(Kind::Request, dest, handler, args, data)?;
        // Counted first: a request to this endpoint itself may be answered while it
        // is being sent.
        self.net.outstanding[dest] += 1;
        let mut out = std::mem::take(&mut self.req);
        let mut r = Ok(());
        'chunks: while let Some(t) = chunks.next(&mut out) {
            let mut waiter: Option<Waiter> = None;
            loop {
                match self.net.try_send_raw(dest, t, &out) {
                    Ok(true) => continue 'chunks,
                    Ok(false) => {}
                    Err(e) => {
                        r = Err(e);
                        break 'chunks;
                    }
                }
                // No room: serve this endpoint's own queue (run its handlers) meanwhile.
                // An error is reported by the next poll, in order.
                let errors = self.pending.len();
                let served = self.poll_inner(64) > 0 || self.pending.len() > errors;
                let w = waiter
                    .get_or_insert_with(|| Waiter::new(&self.net.wait, self.net.cfg.link.timeout));
                if let Err(e) = w.step(served, &self.net.abort, || {
                    format!("sending a request to endpoint {dest} (its queue stayed full)")
                }) {
                    r = Err(e);
                    break 'chunks;
                }
            }
        }
        self.req = out;
        match r {
            Ok(()) => self.net.stats.requests_sent += 1,
            Err(_) => self.net.outstanding[dest] = self.net.outstanding[dest].saturating_sub(1),
        }
        r
    }

    /// Runs the handlers of up to `max` waiting messages without waiting: how many.
    /// A reply that answers the last request outstanding to its sender ends the call
    /// (messages waiting behind it run at the next poll): a loop waiting for replies
    /// goes on at once. Errors are those of [`poll`](Self::poll).
    pub fn poll_some(&mut self, max: usize) -> Result<usize, AmError> {
        if let Some(e) = self.pending.pop_front() {
            return Err(e);
        }
        if let Some(e) = self.net.deferred.pop_front() {
            return Err(e);
        }
        let n = self.poll_inner(max);
        if n == 0 {
            // What went wrong before any handler ran (nothing else is queued: the
            // errors queued before were reported first).
            if let Some(e) = self.pending.pop_front() {
                return Err(e);
            }
        }
        Ok(n)
    }

    /// Runs handlers (as [`poll_some`](Self::poll_some)), then sends the replies they
    /// batched: how many ran. An error is queued in `pending`, for the caller to
    /// report. (A count, not a `Result`: the fast path's `Result`, kept across the
    /// flush and copied out whole, was read back with one 16-byte load from two 8-byte
    /// stores, which the store buffer cannot forward: a stall of every poll.)
    fn poll_inner(&mut self, max: usize) -> usize {
        let n = match self.poll_loop(max) {
            Ok(n) => n,
            Err(e) => {
                self.pending.push_back(e);
                0
            }
        };
        self.net.flush_batch();
        n
    }

    /// True if a message is waiting: in a batch being handled, held, or on a link.
    #[inline]
    fn more_waiting(&self) -> bool {
        self.inbox_pos < self.inbox.len()
            || !self.net.held.is_empty()
            || self.net.mesh.has_message()
    }

    fn poll_loop(&mut self, max: usize) -> Result<usize, AmError> {
        let mut n = 0;
        self.again = false;
        self.drained = false;
        self.net.answered = false;
        while n < max {
            match self.poll_one() {
                // A reply that answered the last request outstanding to its sender
                // ends the poll: whoever polls is most likely waiting for it, and
                // looking at the links once more would cost it a cache miss (the
                // next slot's line, still the sender's) before it can go on. What
                // waits behind it is handled by the next poll.
                Ok(true) if self.net.answered => {
                    n += 1;
                    break;
                }
                Ok(true) => {
                    n += 1;
                    // Replies wait in the batch while more requests are there to
                    // answer; none waits for a message that is not there yet.
                    let decided = std::mem::take(&mut self.net.decided);
                    if self.net.batch_n > 0 && !decided && !self.more_waiting() {
                        self.net.flush_batch();
                    }
                }
                Ok(false) => break,
                // After handling some: report those now, the error at the next poll.
                Err(e) if n > 0 => {
                    self.pending.push_back(e);
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    /// Runs the handlers of the messages waiting now (at most 64 of them, and up to
    /// a reply that answers the last request outstanding to its sender, as
    /// [`poll_some`](Self::poll_some)): how many ran. Errors: [`AmError::PeerGone`] once for each endpoint that left (after its
    /// last message), [`AmError::HandlerPanicked`] when a handler of this endpoint
    /// panicked (the endpoint goes on), [`AmError::Aborted`].
    pub fn poll(&mut self) -> Result<usize, AmError> {
        self.poll_some(64)
    }

    /// Waits at most `timeout` for a message and runs the handlers of those waiting:
    /// how many ran (at least 1), or [`AmError::Timeout`].
    pub fn wait(&mut self, timeout: Duration) -> Result<usize, AmError> {
        self.wait_until(None, timeout)
    }

    /// [`wait`](Self::wait), until `deadline` if one is given (else `timeout` after
    /// the first round that found nothing).
    fn wait_until(
        &mut self,
        deadline: Option<Instant>,
        timeout: Duration,
    ) -> Result<usize, AmError> {
        let mut waiter = Waiter::new(&self.net.wait, timeout);
        let mut end = deadline;
        loop {
            let n = self.poll()?;
            if n > 0 {
                return Ok(n);
            }
            // The timeout counts from the first round that found nothing (a wait that
            // finds a message at once reads no clock), and holds while spinning and
            // yielding too: on loaded CPUs those rounds can last long (a yield, or an
            // MPI poll that yields inside MPI, costs another thread's time slice). A
            // deadline given is looked at every 16th spinning round (no clock read
            // between a message and the next while they come quickly).
            let due = match deadline {
                None => waiter.rounds.is_multiple_of(16),
                Some(_) => waiter.rounds % 16 == 15,
            };
            if due || waiter.slow() {
                let now = Instant::now();
                if now >= *end.get_or_insert(now + timeout) {
                    return Err(AmError::Timeout {
                        what: "waiting for a message".into(),
                        after: timeout,
                    });
                }
            }
            if self.net.remote.is_some() && waiter.slow() {
                // Past spinning, rounds are slow (each yields or parks): the network
                // is polled at every one, or a message from another node would wait
                // for 8 to 32 of them. Nothing local is lost by it: nothing came.
                self.poll_remote()?;
                if !self.net.held.is_empty() {
                    return self.poll();
                }
            }
            if waiter.backoff.is_completed() && self.net.remote.is_none() {
                // Only local links: park on the mesh's doorbell, which a sender rings.
                let now = Instant::now();
                let left = end
                    .get_or_insert(now + timeout)
                    .saturating_duration_since(now);
                if left.is_zero() {
                    return Err(AmError::Timeout {
                        what: "waiting for a message".into(),
                        after: timeout,
                    });
                }
                let nap = waiter.park.min(left);
                waiter.park = (waiter.park * 2).min(waiter.park_max);
                let mut rx = std::mem::take(&mut self.rx);
                let r = self.net.mesh.recv_any(&mut rx, nap);
                let r = match r {
                    Ok((r, tag, len)) => {
                        let from = self.net.global[r.index()];
                        let r = self.handle(from, tag, &rx[..len]).map(|()| 1);
                        self.net.flush_batch();
                        r
                    }
                    Err(MeshError::Timeout { .. }) => Ok(0),
                    Err(MeshError::PeerGone { peer, .. }) => {
                        Err(self.gone(self.net.global[peer.index()]))
                    }
                    Err(MeshError::NoPeers { .. }) => Err(AmError::Timeout {
                        what: "waiting for a message (every other endpoint left)".into(),
                        after: timeout,
                    }),
                    Err(e) => Err(self.net.err_mesh(self.net.me, e)),
                };
                self.rx = rx;
                match r? {
                    0 => continue,
                    n => {
                        let more = self.poll_inner(64);
                        return Ok(n + more);
                    }
                }
            }
            waiter.step(false, &self.net.abort, || "waiting for a message".into())?;
        }
    }

    /// Runs handlers until `done(state)` holds, for at most `timeout`.
    pub fn run_until(
        &mut self,
        timeout: Duration,
        mut done: impl FnMut(&S) -> bool,
    ) -> Result<(), AmError> {
        // Busy: no clock reads while messages keep coming.
        while !done(&self.state) {
            if self.poll()? == 0 {
                break;
            }
        }
        let end = Instant::now() + timeout;
        while !done(&self.state) {
            // One deadline for every wait: no clock read per message.
            match self.wait_until(Some(end), timeout) {
                Ok(_) => {}
                Err(AmError::Timeout { .. }) => {
                    return Err(AmError::Timeout {
                        what: "running handlers until the condition held".into(),
                        after: timeout,
                    })
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Runs handlers until every request this endpoint sent was answered (replied to
    /// or returned), for at most `timeout`.
    pub fn quiesce(&mut self, timeout: Duration) -> Result<(), AmError> {
        let end = Instant::now() + timeout;
        while self.outstanding_total() > 0 {
            match self.wait_until(Some(end), timeout) {
                Ok(_) => {}
                Err(AmError::Timeout { .. }) => {
                    return Err(AmError::Timeout {
                        what: format!(
                            "waiting for {} requests to be answered",
                            self.outstanding_total()
                        ),
                        after: timeout,
                    })
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn gone(&mut self, dest: usize) -> AmError {
        if let Some(d) = self.net.dests.get_mut(dest) {
            d.gone = true;
        }
        // Its requests will never be answered.
        if let Some(o) = self.net.outstanding.get_mut(dest) {
            *o = 0;
        }
        AmError::PeerGone { dest }
    }

    /// Takes one message (held, local, or from the slow channel when it is due) and
    /// runs its handler: false if none was waiting.
    fn poll_one(&mut self) -> Result<bool, AmError> {
        if self.inbox_pos < self.inbox.len() {
            return self.next_batched().map(|()| true);
        }
        if self.drained {
            // The request just handled was the last one waiting: what came since is
            // for the next poll.
            return Ok(false);
        }
        if let Some(h) = self.net.held.pop_front() {
            let r = if h.tag == GONE {
                Err(self.gone(h.from))
            } else {
                self.handle(h.from, h.tag, &h.bytes)
            };
            self.net.spare.push(h.bytes);
            return r.map(|()| true);
        }
        if self.net.remote.is_some() && self.net.poller.due() {
            self.poll_remote()?;
            if let Some(h) = self.net.held.pop_front() {
                let r = self.handle(h.from, h.tag, &h.bytes);
                self.net.spare.push(h.bytes);
                return r.map(|()| true);
            }
        }
        let again = match self.again {
            true => self.net.mesh.try_recv_again(&mut self.rx).unwrap_or(None),
            false => None,
        };
        let got = match again {
            Some(m) => Ok(Some(m)),
            None => self.net.mesh.try_recv_any(&mut self.rx),
        };
        match got {
            Ok(Some((r, tag, len))) => {
                self.again = true;
                let from = self.net.global[r.index()];
                // The fast path (a whole short request or reply, told by one compare of
                // its tag) reads the words in place; the others get the buffer.
                if let Some((kind, handler, nargs)) = wire::short(tag) {
                    let mut args = [0u64; MAX_ARGS];
                    if self.short_args(from, kind, handler, nargs, &self.rx[..len], &mut args) {
                        return self
                            .dispatch_fast(from, kind, handler, &args[..nargs])
                            .map(|()| true);
                    }
                }
                let Some(h) = wire::decode(tag) else {
                    self.net.stats.foreign += 1;
                    return Ok(true);
                };
                let rx = std::mem::take(&mut self.rx);
                let r = self.handle_general(from, &h, &rx[..len]);
                self.rx = rx;
                r.map(|()| true)
            }
            Ok(None) => Ok(false),
            Err(MeshError::PeerGone { peer, .. }) => Err(self.gone(self.net.global[peer.index()])),
            Err(MeshError::Transport {
                peer,
                source: TransportError::BufferTooSmall { needed, .. },
                ..
            }) => {
                // A link that carries more than the others: grow and take it next time.
                let _ = peer;
                self.rx.resize(needed, 0);
                Ok(true)
            }
            Err(e) => Err(self.net.err_mesh(self.net.me, e)),
        }
    }

    /// A due poll of the slow channel: takes in up to the policy's batch.
    fn poll_remote(&mut self) -> Result<(), AmError> {
        let net = &mut self.net;
        let Some(remote) = net.remote.as_mut() else {
            return Ok(());
        };
        remote.progress();
        net.stats.remote_polls += 1;
        let mut found = false;
        for _ in 0..net.poller.batch() {
            let mut buf = net.spare.pop().unwrap_or_default();
            match remote.try_recv(&mut buf) {
                Ok(Some((from, tag))) => {
                    found = true;
                    net.held.push_back(Held {
                        from,
                        tag,
                        bytes: buf,
                    });
                }
                Ok(None) => {
                    net.spare.push(buf);
                    break;
                }
                Err(e) => {
                    net.spare.push(buf);
                    net.poller.record(found);
                    return Err(match e {
                        TransportError::Aborted => AmError::Aborted,
                        source => AmError::Transport {
                            dest: net.me,
                            source,
                        },
                    });
                }
            }
        }
        net.stats.remote_hits += found as u64;
        net.poller.record(found);
        Ok(())
    }

    /// Takes in a batch of replies from `from`: its replies are handled one per
    /// [`poll_one`](Self::poll_one), before anything that arrived after it.
    fn take_batch(&mut self, from: usize, bytes: &[u8]) {
        if self.inbox_pos < self.inbox.len() {
            // (Not reached: a batch is taken in only once the last one was handled.)
            self.inbox.drain(..self.inbox_pos);
        } else {
            self.inbox.clear();
        }
        self.inbox_pos = 0;
        self.inbox_from = from;
        self.inbox.extend_from_slice(bytes);
    }

    /// Handles the next reply of the batch being handled. A malformed one ends the
    /// batch (counted as foreign).
    fn next_batched(&mut self) -> Result<(), AmError> {
        let at = self.inbox_pos;
        let from = self.inbox_from;
        let entry = (at + 8 <= self.inbox.len())
            .then(|| wire::word(&self.inbox[at..], 0))
            .and_then(wire::decode)
            .filter(|h| {
                h.kind == Kind::Reply
                    && h.first
                    && h.last
                    && !h.bulk
                    && at + 8 * (1 + h.nargs) <= self.inbox.len()
            });
        let Some(h) = entry else {
            self.net.stats.foreign += 1;
            self.inbox_pos = self.inbox.len();
            return Ok(());
        };
        let end = at + 8 * (1 + h.nargs);
        self.inbox_pos = end;
        // The fast path reads the words in place; the others get the bytes.
        let mut args = [0u64; MAX_ARGS];
        if self.fast_args(from, &h, &self.inbox[at + 8..end], &mut args) {
            return self.dispatch_fast(from, h.kind, h.handler, &args[..h.nargs]);
        }
        let inbox = std::mem::take(&mut self.inbox);
        let r = self.handle_general(from, &h, &inbox[at + 8..end]);
        self.inbox = inbox;
        r
    }

    /// Handles one link message from `from`.
    #[inline]
    fn handle(&mut self, from: usize, tag: u64, bytes: &[u8]) -> Result<(), AmError> {
        let Some(h) = wire::decode(tag) else {
            self.net.stats.foreign += 1;
            return Ok(());
        };
        self.handle_head(from, &h, bytes)
    }

    /// Handles one link message from `from` whose tag decoded as `h`.
    #[inline]
    fn handle_head(&mut self, from: usize, h: &Head, bytes: &[u8]) -> Result<(), AmError> {
        let mut args = [0u64; MAX_ARGS];
        if self.fast_args(from, h, bytes, &mut args) {
            return self.dispatch_fast(from, h.kind, h.handler, &args[..h.nargs]);
        }
        self.handle_general(from, h, bytes)
    }

    /// The fast path's checks on a message [`decode`](wire::decode) read: a whole
    /// short request or reply goes to [`short_args`](Self::short_args).
    #[inline]
    fn fast_args(&self, from: usize, h: &Head, bytes: &[u8], args: &mut [u64; MAX_ARGS]) -> bool {
        h.first
            && h.last
            && !h.bulk
            && matches!(h.kind, Kind::Request | Kind::Reply)
            && self.short_args(from, h.kind, h.handler, h.nargs, bytes, args)
    }

    /// The fast path's checks on a whole short request or reply ([`wire::short`]):
    /// one that passes every check (length, handler, the tag for a request, an
    /// outstanding request for a reply) gives its argument words in `args` (true);
    /// anything else goes to [`handle_general`](Self::handle_general). (The words go to
    /// the caller's array, not back in an `Option`: that copy read them with 16-byte
    /// loads from the 8-byte stores just made, which the store buffer cannot forward.)
    #[inline]
    fn short_args(
        &self,
        from: usize,
        kind: Kind,
        handler: u8,
        nargs: usize,
        bytes: &[u8],
        args: &mut [u64; MAX_ARGS],
    ) -> bool {
        let keyed = kind == Kind::Request;
        if !(from < self.asm.len()
            && bytes.len() == 8 * (keyed as usize + nargs)
            && self.handlers[handler as usize].is_some()
            && if keyed {
                wire::word(bytes, 0) == self.net.key
            } else {
                self.net.outstanding[from] > 0
            })
        {
            return false;
        }
        for (a, w) in args
            .iter_mut()
            .zip(bytes[8 * keyed as usize..].chunks_exact(8))
        {
            *a = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        }
        true
    }

    /// Runs the handler of a message [`short_args`](Self::short_args) accepted.
    #[inline(always)]
    fn dispatch_fast(
        &mut self,
        from: usize,
        kind: Kind,
        handler: u8,
        args: &[u64],
    ) -> Result<(), AmError> {
        if kind == Kind::Request {
            // Its reply is batched only if more is waiting to be handled.
            self.net.alone = !self.more_waiting();
            self.drained = self.net.alone;
            let r = self.dispatch(from, kind, handler, args, &[]);
            self.net.alone = false;
            self.net.decided = true;
            return r;
        }
        // A reply answers its request.
        let o = &mut self.net.outstanding[from];
        *o -= 1;
        self.net.answered |= *o == 0;
        self.dispatch(from, kind, handler, args, &[])
    }

    /// Every other message (bulk, returned, batches, and those a check refuses).
    #[inline(never)]
    fn handle_general(&mut self, from: usize, h: &Head, bytes: &[u8]) -> Result<(), AmError> {
        let h = *h;
        if from >= self.asm.len() {
            self.net.stats.foreign += 1;
            return Ok(());
        }
        if h.kind == Kind::Batch {
            // Its first reply now (each poll_one handles one message).
            self.take_batch(from, bytes);
            return self.next_batched();
        }
        if h.kind == Kind::Returned {
            return self.returned(from, &h, bytes);
        }
        let slot = (h.kind == Kind::Reply) as usize;
        if !h.first {
            return self.continue_bulk(from, slot, &h, bytes);
        }
        let keyed = h.kind == Kind::Request;
        let words = keyed as usize + h.nargs;
        let multi = h.bulk && !h.last;
        if bytes.len() < 8 * (words + multi as usize) {
            self.net.stats.foreign += 1;
            return Ok(());
        }
        let mut args = [0u64; MAX_ARGS];
        for (i, a) in args[..h.nargs].iter_mut().enumerate() {
            *a = wire::word(bytes, keyed as usize + i);
        }
        let (total, data) = if multi {
            (wire::word(bytes, words) as usize, &bytes[8 * (words + 1)..])
        } else {
            (bytes.len() - 8 * words, &bytes[8 * words..])
        };
        let refuse = if keyed && wire::word(bytes, 0) != self.net.key {
            Some(Reason::WrongTag)
        } else if self.handlers[h.handler as usize].is_none() {
            Some(Reason::UnknownHandler)
        } else if total > self.net.cfg.max_bulk {
            Some(Reason::TooLarge)
        } else if h.kind == Kind::Reply && self.net.outstanding[from] == 0 {
            Some(Reason::UnexpectedReply)
        } else {
            None
        };
        // A reply answers its request when it is whole (or refused).
        if h.kind == Kind::Reply
            && refuse != Some(Reason::UnexpectedReply)
            && (!multi || refuse.is_some())
        {
            self.net.outstanding[from] = self.net.outstanding[from].saturating_sub(1);
            self.net.answered |= self.net.outstanding[from] == 0;
        }
        if let Some(reason) = refuse {
            self.net
                .send_back(from, &h, &args[..h.nargs], total, reason);
            if multi {
                let a = &mut self.asm[from][slot];
                a.active = true;
                a.skip = true;
            }
            return Ok(());
        }
        if multi {
            let a = &mut self.asm[from][slot];
            a.active = true;
            a.skip = false;
            a.handler = h.handler;
            a.nargs = h.nargs;
            a.args = args;
            a.total = total;
            a.data.clear();
            a.data.reserve(total);
            a.data.extend_from_slice(data);
            return Ok(());
        }
        self.dispatch(from, h.kind, h.handler, &args[..h.nargs], data)
    }

    fn continue_bulk(
        &mut self,
        from: usize,
        slot: usize,
        h: &Head,
        bytes: &[u8],
    ) -> Result<(), AmError> {
        let a = &mut self.asm[from][slot];
        if !a.active {
            // A chunk without a first one: not from a well-behaved sender.
            self.net.stats.foreign += 1;
            return Ok(());
        }
        if !a.skip {
            a.data.extend_from_slice(bytes);
        }
        if !h.last {
            return Ok(());
        }
        a.active = false;
        if slot == 1 && !a.skip {
            self.net.outstanding[from] = self.net.outstanding[from].saturating_sub(1);
        }
        let a = &mut self.asm[from][slot];
        if a.skip || a.data.len() != a.total {
            if !a.skip {
                self.net.stats.foreign += 1;
            }
            return Ok(());
        }
        let (handler, nargs, args) = (a.handler, a.nargs, a.args);
        let data = std::mem::take(&mut a.data);
        let r = self.dispatch(from, h.kind, handler, &args[..nargs], &data);
        self.asm[from][slot].data = data;
        r
    }

    fn returned(&mut self, from: usize, h: &Head, bytes: &[u8]) -> Result<(), AmError> {
        let (reason, was_request) = h.returned.expect("decoded as returned");
        if bytes.len() < 8 * (h.nargs + 1) {
            self.net.stats.foreign += 1;
            return Ok(());
        }
        if was_request {
            let o = &mut self.net.outstanding[from];
            *o = o.saturating_sub(1);
        }
        self.net.stats.returned_received += 1;
        let r = Returned {
            reason,
            by: from,
            was_request,
            handler: h.handler,
            args: (0..h.nargs).map(|i| wire::word(bytes, i)).collect(),
            data_len: wire::word(bytes, h.nargs) as usize,
        };
        match self.on_returned.as_mut() {
            Some(f) => {
                let state = &mut self.state;
                catch_unwind(AssertUnwindSafe(|| f(state, &r))).map_err(|p| {
                    AmError::HandlerPanicked {
                        handler: 0,
                        from,
                        message: smelt_mesh::panic_message(&*p),
                    }
                })
            }
            None => {
                if self.returned.len() < KEEP_RETURNED {
                    self.returned.push_back(r);
                }
                Ok(())
            }
        }
    }

    /// Runs the handler of a whole message.
    #[inline(always)]
    fn dispatch(
        &mut self,
        from: usize,
        kind: Kind,
        handler: u8,
        args: &[u64],
        data: &[u8],
    ) -> Result<(), AmError> {
        let Endpoint {
            net,
            handlers,
            state,
            ..
        } = self;
        let f = handlers[handler as usize]
            .as_mut()
            .expect("checked at arrival");
        let mut ctx = Ctx {
            net,
            from,
            request: kind == Kind::Request,
            replied: false,
        };
        let msg = Msg {
            from,
            handler,
            args,
            data,
        };
        let r = catch_unwind(AssertUnwindSafe(|| f(state, &mut ctx, &msg)));
        let replied = ctx.replied;
        net.stats.handled += 1;
        let head = || Head {
            handler,
            nargs: args.len(),
            kind,
            bulk: !data.is_empty(),
            first: true,
            last: true,
            returned: None,
        };
        match r {
            Ok(()) => {
                if kind == Kind::Request && !replied {
                    net.send_back(from, &head(), args, data.len(), Reason::NoReply);
                }
                Ok(())
            }
            Err(p) => {
                if kind == Kind::Request && !replied {
                    net.send_back(from, &head(), args, data.len(), Reason::HandlerPanicked);
                }
                Err(AmError::HandlerPanicked {
                    handler,
                    from,
                    message: smelt_mesh::panic_message(&*p),
                })
            }
        }
    }
}
