//! Point-to-point messaging beyond lockstep collectives: a [`Mesh`] gives each member
//! of a set links to some or all of the others, a tagged [`send`](Mesh::send) to any
//! linked member, and [`recv_any`](Mesh::recv_any), which waits on all of its links
//! at once (spin, then yield, then park, as every smelt wait). Servers are not SPMD:
//! a replica waits for whichever of its clients, its tree parent or its children
//! speaks next. Every wait is bounded; failures are reported per call (a peer that
//! left, a timeout, the mesh's abort flag), never by hanging.
//!
//! ```
//! use smelt_mesh::mesh::{MeshBuilder, MeshError};
//! use smelt_mesh::Rank;
//! use std::time::Duration;
//! let t = Duration::from_secs(5);
//! // A server (member 0) linked to two clients (`all_to_all()` links every pair).
//! let mut members = MeshBuilder::new(3)
//!     .links([(Rank(0), Rank(1)), (Rank(0), Rank(2))])
//!     .build()
//!     .unwrap();
//! let mut server = members.remove(0);
//! std::thread::scope(|s| {
//!     for mut client in members {
//!         s.spawn(move || {
//!             client.send(Rank(0), 7, b"ping", t).unwrap();
//!             let mut buf = [0u8; 16];
//!             let (from, tag, n) = client.recv_any(&mut buf, t).unwrap();
//!             assert_eq!((from, tag, &buf[..n]), (Rank(0), 8, &b"pong"[..]));
//!         });
//!     }
//!     let mut buf = [0u8; 16];
//!     let mut served = 0;
//!     while served < 2 {
//!         match server.recv_any(&mut buf, t) {
//!             Ok((from, 7, n)) if &buf[..n] == b"ping" => {
//!                 server.send(from, 8, b"pong", t).unwrap();
//!                 served += 1;
//!             }
//!             // A client that got its answer leaves: reported once, then ignored.
//!             Err(MeshError::PeerGone { .. }) => {}
//!             other => panic!("{other:?}"),
//!         }
//!     }
//! });
//! ```
//!
//! **Ordering and flow control.** Each link is reliable and FIFO, so messages from one
//! member to another arrive in the order sent; messages from different members are
//! interleaved as they arrive ([`recv_any`](Mesh::recv_any) polls the links round-robin
//! from where it last found one, so a busy peer cannot starve the others). Links are
//! bounded rings: a send to a full ring waits for room, and while it waits it keeps
//! taking in what arrives on this member's other links (kept in arrival order for
//! the next receives). Two members that send to each other at once therefore never
//! deadlock on full rings.
//!
//! **Failures.** A peer whose end of a link is gone (its `Mesh` was dropped: the
//! thread ended, panicked, or was stopped) is reported once by a receive, as
//! [`MeshError::PeerGone`], after every message it sent before leaving has been
//! received; later receives go on with the remaining peers, and sends to it fail with
//! the same error. The shared abort flag ([`Mesh::abort_handle`]) makes every pending
//! and later wait of every member return [`MeshError::Aborted`]. A wait that reaches
//! its timeout returns [`MeshError::Timeout`]. Unlike a group's collectives, one
//! member's failure does not fail the others: servers decide what a peer's departure
//! means.

use smelt_ids::Rank;
use smelt_transport::{
    allowed_cpus, try_queuepair, Abort, Backoff, Link, QueuePairEnd, TransportError, WaitPolicy,
};
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// Why a mesh operation did not complete.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MeshError {
    /// The mesh could not be built as asked.
    #[error("invalid mesh: {0}")]
    Invalid(String),
    /// This member has no link to `peer` (or `peer` is not a member).
    #[error("member {rank} has no link to member {peer}")]
    NoLink {
        /// This member.
        rank: Rank,
        /// The member asked for.
        peer: Rank,
    },
    /// `peer` closed its end of the link (its mesh was dropped: it ended, failed or
    /// was stopped). Receives report this once per peer, after its last message.
    #[error("member {peer} left (member {rank} found its link closed)")]
    PeerGone {
        /// This member.
        rank: Rank,
        /// The member that left.
        peer: Rank,
    },
    /// Every peer of this member has left: nothing can arrive any more.
    #[error("member {rank}: every peer has left")]
    NoPeers {
        /// This member.
        rank: Rank,
    },
    /// The wait reached its timeout.
    #[error("member {rank} timed out after {after:?} {what}")]
    Timeout {
        /// This member.
        rank: Rank,
        /// The member it waited for (a send, or a receive from one member), if one.
        peer: Option<Rank>,
        /// What it waited for ("sending to member 3", "receiving from any member").
        what: String,
        /// The timeout.
        after: Duration,
    },
    /// The mesh's abort flag was raised.
    #[error("member {rank}: the mesh was aborted")]
    Aborted {
        /// This member.
        rank: Rank,
    },
    /// Any other transport error on the link to `peer` (a message larger than the
    /// link carries, a receive buffer too small for the waiting message, which stays
    /// queued).
    #[error("member {rank}, link to member {peer}: {source}")]
    Transport {
        /// This member.
        rank: Rank,
        /// The other end.
        peer: Rank,
        /// What the transport said.
        source: TransportError,
    },
}

/// A member's doorbell: what a peer rings after sending, so that a member parked in
/// [`Mesh::recv_any`] wakes at once instead of at its park timeout. Only meshes built
/// in one process ([`MeshBuilder`]) have them; meshes over other links poll with
/// growing park timeouts. (Between processes, a `recv_from` that waited in its link's
/// ring futex, woken by the sender, was measured against these timed parks: level at
/// 2 members, and at 8 processes on 2 CPUs the non-tree barrier and allreduce became
/// 1.3-2x slower: a sleeping member leaves the CPU to those with work.)
#[derive(Debug, Default)]
struct Doorbell {
    /// Set while the owner is about to park or parked.
    waiting: AtomicBool,
    /// The owner's thread, recorded before it parks.
    thread: Mutex<Option<Thread>>,
}

impl Doorbell {
    /// The sender's side: after the message is published, wake the owner if it parks.
    ///
    /// No fence between the publishing store and the load of `waiting`: a sender on
    /// the fast path pays one read of a line that stays shared. The price is a rare
    /// late wake-up: an owner that armed its bell while this sender's message was
    /// still in the sender's store buffer re-checks, finds nothing, and parks — but
    /// only for its current nap (at most [`WaitPolicy::park_max`]), after which it
    /// finds the message. Owners park only after spinning and yielding, so only a
    /// message to an idle member can be late, by at most one nap; none is lost.
    #[inline(always)]
    fn ring(&self) {
        if self.waiting.load(Ordering::Relaxed) {
            let t = self.thread.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(t) = t.as_ref() {
                t.unpark();
            }
        }
    }

    /// The owner's side, before re-checking its links and parking.
    fn arm(&self) {
        {
            let mut t = self.thread.lock().unwrap_or_else(|e| e.into_inner());
            let me = std::thread::current();
            if t.as_ref().is_none_or(|x| x.id() != me.id()) {
                *t = Some(me);
            }
        }
        self.waiting.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    fn disarm(&self) {
        self.waiting.store(false, Ordering::Relaxed);
    }
}

/// A message taken in while a send waited for room, kept for the next receive.
#[derive(Debug)]
struct Held {
    from: Rank,
    tag: u64,
    bytes: Vec<u8>,
}

/// One link of a mesh member.
#[derive(Debug)]
struct Peer<L> {
    rank: Rank,
    /// None once the peer's departure was reported.
    link: Option<L>,
    /// The peer's doorbell (meshes built in one process).
    bell: Option<Arc<Doorbell>>,
    /// Polled only every [`QUIET_EVERY`] passes (and always before parking).
    quiet: bool,
}

/// How often a receive polls the links marked quiet ([`Mesh::set_quiet`]): once every
/// this many passes over the others (a power of two).
pub const QUIET_EVERY: u32 = 16;
const _: () = assert!(QUIET_EVERY.is_power_of_two());

/// One member's links to the other members of a set, for point-to-point messages in
/// any pattern (see the [module documentation](self)). Built for thread members by
/// [`MeshBuilder`], or over links of any transport by [`Mesh::with_links`]. A mesh is
/// `Send`: build them in one thread and move each into its member's thread.
#[derive(Debug)]
pub struct Mesh<L: Link = QueuePairEnd> {
    rank: Rank,
    size: usize,
    /// Links in rank order of the peer.
    peers: Vec<Peer<L>>,
    /// Index into `peers` by rank (usize::MAX: no link).
    index: Vec<usize>,
    /// Messages taken in while a send waited for room, in arrival order.
    held: VecDeque<Held>,
    /// Where the next poll starts (round-robin fairness).
    next: usize,
    /// Passes over the links so far (quiet links are polled every QUIET_EVERY).
    pass: u32,
    wait: WaitPolicy,
    abort: Abort,
    bell: Option<Arc<Doorbell>>,
    /// Receive buffer for messages taken in while sending.
    scratch: Vec<u8>,
}

const NONE: usize = usize::MAX;

/// A link to a peer with the peer's doorbell, as a mesh is built from.
type LinkTo<L> = (Rank, L, Option<Arc<Doorbell>>);

impl<L: Link> Mesh<L> {
    /// Member `rank` of a set of `size` members over `links` (this member's end of a
    /// link to each listed peer, any transport). `abort`, shared by the members of this
    /// process, ends their waits when raised; `wait` says how they wait.
    pub fn with_links(
        rank: Rank,
        size: usize,
        links: Vec<(Rank, L)>,
        abort: Option<Abort>,
        wait: WaitPolicy,
    ) -> Result<Mesh<L>, MeshError> {
        Self::build(
            rank,
            size,
            links.into_iter().map(|(r, l)| (r, l, None)).collect(),
            abort.unwrap_or_default(),
            wait,
            None,
        )
    }

    fn build(
        rank: Rank,
        size: usize,
        mut links: Vec<LinkTo<L>>,
        abort: Abort,
        wait: WaitPolicy,
        bell: Option<Arc<Doorbell>>,
    ) -> Result<Mesh<L>, MeshError> {
        if rank.index() >= size {
            return Err(MeshError::Invalid(format!(
                "rank {rank} in a set of {size} members"
            )));
        }
        links.sort_by_key(|(r, _, _)| *r);
        let mut index = vec![NONE; size];
        let mut peers = Vec::with_capacity(links.len());
        let mut max = 0;
        for (r, link, b) in links {
            if r.index() >= size {
                return Err(MeshError::Invalid(format!(
                    "member {rank}: a link to member {r} in a set of {size} members"
                )));
            }
            if r == rank {
                return Err(MeshError::Invalid(format!(
                    "member {rank}: a link to itself"
                )));
            }
            if index[r] != NONE {
                return Err(MeshError::Invalid(format!(
                    "member {rank}: two links to member {r}"
                )));
            }
            index[r] = peers.len();
            max = max.max(link.max_message_len());
            peers.push(Peer {
                rank: r,
                link: Some(link),
                bell: b,
                quiet: false,
            });
        }
        Ok(Mesh {
            rank,
            size,
            peers,
            index,
            held: VecDeque::new(),
            next: 0,
            pass: 0,
            wait,
            abort,
            bell,
            scratch: vec![0; max],
        })
    }

    /// This member's rank.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// Number of members in the set.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The members this one has a link to, in rank order (including peers that left).
    pub fn peers(&self) -> Vec<Rank> {
        self.peers.iter().map(|p| p.rank).collect()
    }

    /// True if this member has a link to `peer` whose departure was not reported yet.
    pub fn is_linked(&self, peer: Rank) -> bool {
        self.peer_index(peer)
            .is_some_and(|i| self.peers[i].link.is_some())
    }

    /// Largest message that can be sent to `peer` (None without a link).
    pub fn max_message_len(&self, peer: Rank) -> Option<usize> {
        let i = self.peer_index(peer)?;
        self.peers[i].link.as_ref().map(|l| l.max_message_len())
    }

    /// The largest message every link of this member carries (0 without links).
    pub fn max_message_len_all(&self) -> usize {
        self.peers
            .iter()
            .filter_map(|p| p.link.as_ref().map(|l| l.max_message_len()))
            .min()
            .unwrap_or(0)
    }

    /// A handle to the abort flag shared by the mesh's members: raising it makes every
    /// member's pending and later waits return [`MeshError::Aborted`] (parked members
    /// notice within their longest park, [`WaitPolicy::park_max`]).
    pub fn abort_handle(&self) -> Abort {
        self.abort.clone()
    }

    /// Marks the link to `peer` quiet (or not): a link that rarely carries anything
    /// (a standby path, a control link) is polled only once every [`QUIET_EVERY`]
    /// passes of a receive, and always before the receive parks, so that many idle
    /// links cost a busy member little. Messages on it arrive as before, later by at
    /// most that many passes.
    pub fn set_quiet(&mut self, peer: Rank, quiet: bool) -> Result<(), MeshError> {
        let Some(i) = self.peer_index(peer) else {
            return Err(MeshError::NoLink {
                rank: self.rank,
                peer,
            });
        };
        self.peers[i].quiet = quiet;
        Ok(())
    }

    /// The link to `peer` itself (`None`: no link, or the peer left), for what the
    /// mesh's messages do not carry, such as loans
    /// ([`Link::exchange_loans`]). Messages from `peer` the mesh holds
    /// (taken in while a send waited for room) are not on the link any more: use it
    /// only where none can be held, e.g. where every message of the exchange goes
    /// through the link itself.
    pub fn link_mut(&mut self, peer: Rank) -> Option<&mut L> {
        let i = self.peer_index(peer)?;
        self.peers[i].link.as_mut()
    }

    /// Whether messages from `peer` wait in the mesh (taken in while a send waited
    /// for room), not on the link.
    pub fn holds_from(&self, peer: Rank) -> bool {
        self.held.iter().any(|h| h.from == peer)
    }

    /// How this member waits.
    pub fn wait_policy(&self) -> WaitPolicy {
        self.wait
    }

    /// Sets how this member waits (its receives and its sends).
    pub fn set_wait_policy(&mut self, p: WaitPolicy) {
        self.wait = p;
    }

    /// Closes this member's link to `peer` (as if `peer` had left, on both sides:
    /// `peer` sees [`MeshError::PeerGone`] naming this member). Messages not yet
    /// received from it are dropped.
    pub fn close_link(&mut self, peer: Rank) -> Result<(), MeshError> {
        let Some(i) = self.peer_index(peer) else {
            return Err(MeshError::NoLink {
                rank: self.rank,
                peer,
            });
        };
        self.peers[i].link = None;
        if let Some(b) = &self.peers[i].bell {
            b.ring();
        }
        self.held.retain(|h| h.from != peer);
        Ok(())
    }

    fn peer_index(&self, peer: Rank) -> Option<usize> {
        self.index.get(peer.index()).copied().filter(|&i| i != NONE)
    }

    #[cold]
    fn transport(&self, peer: Rank, e: TransportError) -> MeshError {
        match e {
            TransportError::Disconnected | TransportError::PeerDied { .. } => MeshError::PeerGone {
                rank: self.rank,
                peer,
            },
            TransportError::Aborted => MeshError::Aborted { rank: self.rank },
            source => MeshError::Transport {
                rank: self.rank,
                peer,
                source,
            },
        }
    }

    /// Sends `msg` with `tag` to `to`, waiting at most `timeout` for room in the link.
    /// While it waits it takes in messages arriving on this member's links (they are
    /// returned by the next receives, in order), so members sending to each other
    /// cannot deadlock.
    pub fn send(
        &mut self,
        to: Rank,
        tag: u64,
        msg: &[u8],
        timeout: Duration,
    ) -> Result<(), MeshError> {
        self.send_with(to, timeout, |l| l.try_send(tag, msg))
    }

    /// Sends one word with `tag` to `to` (the transport's fast path; received as an
    /// 8-byte message), as [`send`](Mesh::send).
    pub fn send_word(
        &mut self,
        to: Rank,
        tag: u64,
        w: u64,
        timeout: Duration,
    ) -> Result<(), MeshError> {
        let b = w.to_le_bytes();
        self.send_with(to, timeout, |l| l.try_send(tag, &b))
    }

    /// Sends `msg` with `tag` to `to` if that is possible without waiting
    /// ([`TransportError::Full`] otherwise, as [`MeshError::Transport`]).
    #[inline]
    pub fn try_send(&mut self, to: Rank, tag: u64, msg: &[u8]) -> Result<(), MeshError> {
        // One look at the link (`linked` and then the link again read its
        // discriminant twice, on the way of every message sent).
        let aborted = self.abort.is_triggered();
        let p = match self.peer_index(to) {
            Some(i) if !aborted => &mut self.peers[i],
            _ => return Err(self.not_linked(to)),
        };
        let Some(link) = p.link.as_mut() else {
            return Err(self.not_linked(to));
        };
        match link.try_send(tag, msg) {
            Ok(()) => {
                if let Some(b) = &p.bell {
                    b.ring();
                }
                Ok(())
            }
            Err(e) => Err(self.transport(to, e)),
        }
    }

    /// Why there is no live link to `to` now: the mesh aborted, no link was made to
    /// it, or it left.
    #[cold]
    fn not_linked(&self, to: Rank) -> MeshError {
        if self.abort.is_triggered() {
            return MeshError::Aborted { rank: self.rank };
        }
        match self.peer_index(to) {
            None => MeshError::NoLink {
                rank: self.rank,
                peer: to,
            },
            Some(_) => MeshError::PeerGone {
                rank: self.rank,
                peer: to,
            },
        }
    }

    /// Index of a live link to `to`.
    fn linked(&self, to: Rank) -> Result<usize, MeshError> {
        match self.peer_index(to) {
            Some(i) if !self.abort.is_triggered() && self.peers[i].link.is_some() => Ok(i),
            _ => Err(self.not_linked(to)),
        }
    }

    fn send_with(
        &mut self,
        to: Rank,
        timeout: Duration,
        mut attempt: impl FnMut(&mut L) -> Result<(), TransportError>,
    ) -> Result<(), MeshError> {
        let i = self.linked(to)?;
        let mut pace = Pace::new(&self.wait, timeout);
        loop {
            let p = &mut self.peers[i];
            let link = p.link.as_mut().expect("linked");
            match attempt(link) {
                Ok(()) => {
                    if let Some(b) = &p.bell {
                        b.ring();
                    }
                    return Ok(());
                }
                Err(TransportError::Full) => {}
                Err(e) => return Err(self.transport(to, e)),
            }
            // Full: take in what arrives meanwhile, so a peer sending to us can
            // progress and free room on its side.
            let took = self.take_in()?;
            if took {
                pace.reset();
                continue;
            }
            if self.abort.is_triggered() {
                return Err(MeshError::Aborted { rank: self.rank });
            }
            match pace.next() {
                Step::Retry => {}
                Step::TimedOut => {
                    return Err(MeshError::Timeout {
                        rank: self.rank,
                        peer: Some(to),
                        what: format!("sending to member {to} (its link stayed full)"),
                        after: timeout,
                    })
                }
                // The receiver wakes no one when it frees room on a link we do not
                // wait in, so the park is short and grows to the policy's longest.
                Step::Park(nap) => std::thread::park_timeout(nap),
            }
        }
    }

    /// Takes every waiting message of every live link into `held`; true if any.
    fn take_in(&mut self) -> Result<bool, MeshError> {
        let mut any = false;
        for i in 0..self.peers.len() {
            while let Some(link) = self.peers[i].link.as_mut() {
                match link.try_recv(&mut self.scratch) {
                    Ok((tag, n)) => {
                        any = true;
                        self.held.push_back(Held {
                            from: self.peers[i].rank,
                            tag,
                            bytes: self.scratch[..n].to_vec(),
                        });
                    }
                    Err(TransportError::BufferTooSmall { needed, .. }) => {
                        // A link carrying more than the others (other transports).
                        self.scratch.resize(needed, 0);
                    }
                    // Empty, or gone (reported by the next receive in order).
                    Err(_) => break,
                }
            }
        }
        Ok(any)
    }

    /// Gives back a held message if there is one from `from` (any member for None).
    fn pop_held(
        &mut self,
        from: Option<Rank>,
        buf: &mut [u8],
    ) -> Option<Result<(Rank, u64, usize), MeshError>> {
        let k = match from {
            None => (!self.held.is_empty()).then_some(0)?,
            Some(r) => self.held.iter().position(|h| h.from == r)?,
        };
        let h = &self.held[k];
        if buf.len() < h.bytes.len() {
            return Some(Err(MeshError::Transport {
                rank: self.rank,
                peer: h.from,
                source: TransportError::BufferTooSmall {
                    needed: h.bytes.len(),
                    got: buf.len(),
                },
            }));
        }
        let h = self.held.remove(k).expect("index checked");
        buf[..h.bytes.len()].copy_from_slice(&h.bytes);
        Some(Ok((h.from, h.tag, h.bytes.len())))
    }

    /// One non-blocking pass over the links (starting at the round-robin position):
    /// the first message found, or `None`. A link found closed (after its last
    /// message) is reported once as [`MeshError::PeerGone`] and dropped.
    #[inline(always)]
    fn poll(&mut self, buf: &mut [u8]) -> Result<Option<(Rank, u64, usize)>, MeshError> {
        let n = self.peers.len();
        self.pass = self.pass.wrapping_add(1);
        let all = self.pass & (QUIET_EVERY - 1) == 0; // a power of two
                                                      // Round robin from `next` (no division on the polling path).
        let mut i = self.next;
        for _ in 0..n {
            if i >= n {
                i -= n;
            }
            if self.peers[i].quiet && !all {
                i += 1;
                continue;
            }
            let Some(link) = self.peers[i].link.as_mut() else {
                i += 1;
                continue;
            };
            match link.try_recv(buf) {
                Ok((tag, len)) => {
                    self.next = i + 1;
                    // The length on its own (opaque to the optimizer): a copy of the
                    // (tag, length) pair whole reads it with one 16-byte load from
                    // the transport's two 8-byte stores, which the store buffer
                    // cannot forward (a stall of every message received).
                    let len = std::hint::black_box(len);
                    return Ok(Some((self.peers[i].rank, tag, len)));
                }
                Err(TransportError::Empty) => i += 1,
                Err(e @ (TransportError::Disconnected | TransportError::PeerDied { .. })) => {
                    self.next = i + 1;
                    self.peers[i].link = None;
                    return Err(self.transport(self.peers[i].rank, e));
                }
                Err(e) => return Err(self.transport(self.peers[i].rank, e)),
            }
        }
        Ok(None)
    }

    /// True if a message is waiting (held, or on a link): [`is_ready`](Self::is_ready)
    /// without the departures, which cost more to look for (a server deciding whether
    /// to answer now or with what comes next asks this after every message).
    #[inline]
    pub fn has_message(&self) -> bool {
        !self.held.is_empty()
            || self
                .peers
                .iter()
                .any(|p| p.link.as_ref().is_some_and(|l| l.is_ready()))
    }

    /// True if a receive would not wait (a message or a departure to report).
    pub fn is_ready(&self) -> bool {
        !self.held.is_empty()
            || self.peers.iter().any(|p| {
                p.link
                    .as_ref()
                    .is_some_and(|l| l.is_ready() || l.is_disconnected())
            })
    }

    /// Receives the next message from the member whose message the last receive
    /// returned, if one is waiting on that link and nothing is held: `Ok(None)`
    /// otherwise (nothing there, a departure, or a held message: ask
    /// [`try_recv_any`](Self::try_recv_any), which reports them in order). What a
    /// server draining a busy peer calls between messages: no round-robin pass and no
    /// abort check (its next `try_recv_any` makes them).
    #[inline]
    pub fn try_recv_again(
        &mut self,
        buf: &mut [u8],
    ) -> Result<Option<(Rank, u64, usize)>, MeshError> {
        if !self.held.is_empty() {
            return Ok(None);
        }
        let Some(p) = self.next.checked_sub(1).and_then(|i| self.peers.get_mut(i)) else {
            return Ok(None);
        };
        let Some(link) = p.link.as_mut() else {
            return Ok(None);
        };
        match link.try_recv(buf) {
            Ok((tag, len)) => Ok(Some((p.rank, tag, len))),
            Err(_) => Ok(None),
        }
    }

    /// Receives the next message from any linked member into `buf`, if one is waiting:
    /// `Ok(Some((from, tag, len)))`, `Ok(None)` if none.
    #[inline]
    pub fn try_recv_any(
        &mut self,
        buf: &mut [u8],
    ) -> Result<Option<(Rank, u64, usize)>, MeshError> {
        if !self.held.is_empty() {
            if let Some(r) = self.pop_held(None, buf) {
                return r.map(Some);
            }
        }
        if self.abort.is_triggered() {
            return Err(MeshError::Aborted { rank: self.rank });
        }
        self.poll(buf)
    }

    /// Receives the next message from any linked member into `buf`, waiting at most
    /// `timeout`: the sender's rank, the message's tag and its length.
    ///
    /// Errors: [`MeshError::PeerGone`] once for each peer that left (after its last
    /// message; call again to go on with the others), [`MeshError::NoPeers`] when no
    /// linked peer is left, [`MeshError::Timeout`], [`MeshError::Aborted`], and
    /// [`MeshError::Transport`] with [`TransportError::BufferTooSmall`] if `buf` cannot
    /// hold the waiting message (it stays queued).
    pub fn recv_any(
        &mut self,
        buf: &mut [u8],
        timeout: Duration,
    ) -> Result<(Rank, u64, usize), MeshError> {
        self.recv_inner(None, buf, timeout)
    }

    /// Receives the next message from `from` into `buf`, waiting at most `timeout`
    /// (messages from other members stay queued for later receives).
    pub fn recv_from(
        &mut self,
        from: Rank,
        buf: &mut [u8],
        timeout: Duration,
    ) -> Result<(u64, usize), MeshError> {
        if self.peer_index(from).is_none() {
            return Err(MeshError::NoLink {
                rank: self.rank,
                peer: from,
            });
        }
        self.recv_inner(Some(from), buf, timeout)
            .map(|(_, tag, n)| (tag, n))
    }

    fn recv_inner(
        &mut self,
        from: Option<Rank>,
        buf: &mut [u8],
        timeout: Duration,
    ) -> Result<(Rank, u64, usize), MeshError> {
        let mut pace = Pace::new(&self.wait, timeout);
        loop {
            if let Some(r) = self.pop_held(from, buf) {
                return r;
            }
            if self.abort.is_triggered() {
                return Err(MeshError::Aborted { rank: self.rank });
            }
            match from {
                None => {
                    if let Some(m) = self.poll(buf)? {
                        return Ok(m);
                    }
                    if self.peers.iter().all(|p| p.link.is_none()) {
                        return Err(MeshError::NoPeers { rank: self.rank });
                    }
                }
                Some(r) => {
                    let i = self.peer_index(r).expect("checked by recv_from");
                    let Some(link) = self.peers[i].link.as_mut() else {
                        return Err(MeshError::PeerGone {
                            rank: self.rank,
                            peer: r,
                        });
                    };
                    match link.try_recv(buf) {
                        Ok((tag, n)) => return Ok((r, tag, n)),
                        Err(TransportError::Empty) => {}
                        Err(
                            e @ (TransportError::Disconnected | TransportError::PeerDied { .. }),
                        ) => {
                            self.peers[i].link = None;
                            return Err(self.transport(r, e));
                        }
                        Err(e) => return Err(self.transport(r, e)),
                    }
                }
            }
            let nap = match pace.next() {
                Step::Retry => continue,
                Step::Park(nap) => nap,
                Step::TimedOut => {
                    return Err(MeshError::Timeout {
                        rank: self.rank,
                        peer: from,
                        what: match from {
                            Some(r) => format!("receiving from member {r}"),
                            None => "receiving from any member".into(),
                        },
                        after: timeout,
                    })
                }
            };
            match &self.bell {
                Some(bell) => {
                    bell.arm();
                    // Re-check after announcing the wait: a sender that published
                    // before it saw `waiting` is found here.
                    let ready = self.abort.is_triggered()
                        || match from {
                            None => self.is_ready(),
                            Some(r) => self.peers[self.index[r]]
                                .link
                                .as_ref()
                                .is_none_or(|l| l.is_ready() || l.is_disconnected()),
                        };
                    if !ready {
                        std::thread::park_timeout(nap);
                    }
                    bell.disarm();
                }
                None => std::thread::park_timeout(nap),
            }
        }
    }
}

/// The pacing of a mesh wait: spin (without reading the clock), then yield (checking
/// the deadline every time, as a yield may cost a scheduling round), then park for a
/// growing time.
struct Pace {
    backoff: Backoff,
    spins: u32,
    spin_polls: u32,
    deadline: Option<Instant>,
    timeout: Duration,
    park: Duration,
    park_max: Duration,
}

/// What a waiter does next.
enum Step {
    /// Try again at once (after spinning or yielding).
    Retry,
    /// Park for at most this long, then try again.
    Park(Duration),
    /// The deadline passed.
    TimedOut,
}

impl Pace {
    fn new(wait: &WaitPolicy, timeout: Duration) -> Pace {
        Pace {
            backoff: Backoff::with_policy(wait),
            spins: 0,
            spin_polls: wait.spin_polls,
            deadline: None,
            timeout,
            park: wait.park_initial,
            park_max: wait.park_max,
        }
    }

    /// Progress was made: start spinning again.
    fn reset(&mut self) {
        self.backoff.reset();
        self.spins = 0;
    }

    fn next(&mut self) -> Step {
        if self.spins < self.spin_polls {
            self.spins += 1;
            self.backoff.snooze();
            return Step::Retry;
        }
        let now = Instant::now();
        let end = *self.deadline.get_or_insert(now + self.timeout);
        if now >= end {
            return Step::TimedOut;
        }
        if !self.backoff.is_completed() {
            self.backoff.snooze();
            return Step::Retry;
        }
        let nap = self.park.min(end - now);
        self.park = (self.park * 2).min(self.park_max);
        Step::Park(nap)
    }
}

impl<L: Link> Drop for Mesh<L> {
    fn drop(&mut self) {
        // Close every link, then wake the peers parked waiting for us: they find the
        // link closed at once instead of at their next park timeout.
        for p in &mut self.peers {
            p.link = None;
            if let Some(b) = &p.bell {
                b.ring();
            }
        }
    }
}

/// Builds the meshes of a set of `n` members in one process (threads), over
/// in-process queuepairs: links between every pair ([`all_to_all`](Self::all_to_all))
/// or only between the pairs asked for ([`link`](Self::link)). Members ring each
/// other's doorbell after sending, so a member parked in [`Mesh::recv_any`] wakes at
/// once.
#[derive(Debug, Clone)]
pub struct MeshBuilder {
    n: usize,
    all: bool,
    pairs: BTreeSet<(usize, usize)>,
    capacity: usize,
    wait: Option<WaitPolicy>,
    abort: Option<Abort>,
}

impl MeshBuilder {
    /// A set of `n` members, with no links yet.
    pub fn new(n: usize) -> MeshBuilder {
        MeshBuilder {
            n,
            all: false,
            pairs: BTreeSet::new(),
            capacity: 64,
            wait: None,
            abort: None,
        }
    }

    /// A link between every two members.
    pub fn all_to_all(mut self) -> MeshBuilder {
        self.all = true;
        self
    }

    /// A link between members `a` and `b` (asking twice gives one link).
    pub fn link(mut self, a: Rank, b: Rank) -> MeshBuilder {
        self.pairs
            .insert((a.index().min(b.index()), a.index().max(b.index())));
        self
    }

    /// Links between each of the pairs.
    pub fn links(mut self, pairs: impl IntoIterator<Item = (Rank, Rank)>) -> MeshBuilder {
        for (a, b) in pairs {
            self = self.link(a, b);
        }
        self
    }

    /// Slots per channel (each way, per link). Default 64 (a message of up to 64 × 48
    /// bytes).
    pub fn capacity(mut self, slots: usize) -> MeshBuilder {
        self.capacity = slots;
        self
    }

    /// How members wait; default [`WaitPolicy::DEDICATED`] if this process may use at
    /// least `n` CPUs, [`WaitPolicy::OVERSUBSCRIBED`] otherwise.
    pub fn wait_policy(mut self, p: WaitPolicy) -> MeshBuilder {
        self.wait = Some(p);
        self
    }

    /// Guards every link with `abort` (default: a new flag, see [`Mesh::abort_handle`]).
    pub fn abort(mut self, abort: Abort) -> MeshBuilder {
        self.abort = Some(abort);
        self
    }

    /// The members' meshes, by rank.
    pub fn build(self) -> Result<Vec<Mesh>, MeshError> {
        self.build_with(|ep| ep)
    }

    /// The members' meshes, by rank, each queuepair end wrapped by `wrap` into the
    /// link type the meshes carry (a world's [`WorldLink`](crate::world::WorldLink)).
    pub fn build_with<L: Link>(
        self,
        mut wrap: impl FnMut(QueuePairEnd) -> L,
    ) -> Result<Vec<Mesh<L>>, MeshError> {
        let n = self.n;
        if n == 0 {
            return Err(MeshError::Invalid(
                "a mesh needs at least one member".into(),
            ));
        }
        if let Some(&(a, b)) = self.pairs.iter().find(|(a, b)| a == b || *b >= n) {
            return Err(MeshError::Invalid(if a == b {
                format!("a link from member {a} to itself")
            } else {
                format!("a link to member {b} in a set of {n} members")
            }));
        }
        let pairs: Vec<(usize, usize)> = if self.all {
            (0..n)
                .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
                .collect()
        } else {
            self.pairs.into_iter().collect()
        };
        let wait = self.wait.unwrap_or_else(|| {
            if allowed_cpus().map(|c| c.len()).unwrap_or(1) >= n {
                WaitPolicy::DEDICATED
            } else {
                WaitPolicy::OVERSUBSCRIBED
            }
        });
        let abort = self.abort.unwrap_or_default();
        let bells: Vec<Arc<Doorbell>> = (0..n).map(|_| Arc::new(Doorbell::default())).collect();
        let mut links: Vec<Vec<LinkTo<L>>> = (0..n).map(|_| Vec::new()).collect();
        for (a, b) in pairs {
            let (mut ea, mut eb) = try_queuepair(self.capacity, Some(abort.clone()))
                .map_err(|e| MeshError::Invalid(format!("link {a}-{b}: {e}")))?;
            ea.set_wait_policy(wait);
            eb.set_wait_policy(wait);
            links[a].push((Rank(b), wrap(ea), Some(bells[b].clone())));
            links[b].push((Rank(a), wrap(eb), Some(bells[a].clone())));
        }
        links
            .into_iter()
            .enumerate()
            .map(|(r, l)| Mesh::build(Rank(r), n, l, abort.clone(), wait, Some(bells[r].clone())))
            .collect()
    }
}
