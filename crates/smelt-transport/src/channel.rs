//! The single-producer single-consumer ring of cache-line slots.
//!
//! Layout (every part on its own cache line(s), each with one writer). The same layout
//! serves a ring on this process's heap and a ring in memory shared by several
//! processes ([`crate::shm`]): it is `#[repr(C)]`, holds no pointers, and all-zero
//! bytes are its initial state.
//!
//! * `slots`: `capacity` slots of 64 bytes, written only by the producer. A slot is an
//!   8-byte header, an 8-byte tag and 48 bytes of payload. The header holds the slot's
//!   sequence number (low 32 bits of position + 1; it doubles as the epoch that tells
//!   a new message from the previous lap's) and either the message length (first
//!   slot of a message) or a continuation mark. The tag is the sender's label for the
//!   message (the collectives put the operation and its sequence number there); it is
//!   carried by the first slot. The first slot's header is written last, with
//!   `Release`: once the consumer sees it (`Acquire`), every byte of the message, in
//!   all its slots, is visible.
//! * `head`: the consumer's read position (its acknowledgement), written only by the
//!   consumer. The producer reads it only when its cached copy says the ring is full.
//!   The producer's position is not stored anywhere but in the slots' headers: a send
//!   writes one cache line (the slot), as the C UMP ring does, and whoever needs the
//!   position (`Consumer::len`, a producer end re-opened in place) counts the published
//!   headers from `head` on.
//! * `prod` / `cons`: each side's rarely-written words (waiting, closed). They stay
//!   shared in both caches, so checking the peer's word after each operation is a
//!   cache hit. The waiting word is the futex a process parks on when the ring is
//!   shared between processes; the wake-up handshake is in [`crate::wake`].
//! * `marks`: the producer's barrier marks, the tags of its last two two-party
//!   barriers ([`Producer::set_mark`], [`Consumer::wait_mark`]). A barrier of two ends
//!   is then one line written by each and read by the other, as a flag barrier is,
//!   instead of a message each way (which also moves the ring's position).

use crate::backoff::{Backoff, WaitPolicy};
use crate::sync::{Arc, AtomicU32, AtomicU64, Ordering, UnsafeCell};
use crate::wake::{futex_wait, futex_wake, waiter_fence, waker_fence};
use crate::{Abort, TransportError};
use std::marker::PhantomData;
use std::time::{Duration, Instant};

/// Bytes of one slot: one cache line.
pub const SLOT_BYTES: usize = 64;
/// Payload bytes carried per slot (the rest is the header and the tag).
pub const PAYLOAD_PER_SLOT: usize = 48;
/// Largest ring, in slots.
pub const MAX_CAPACITY: usize = 1 << 24;

/// Words of a slot after its header: the tag, then the payload.
const BODY_WORDS: usize = 1 + PAYLOAD_PER_SLOT / 8;
const LEN_MASK: u64 = 0x7fff_ffff;
const CONT: u64 = 1 << 31;
const SEQ_AND_CONT: u64 = !LEN_MASK;

// The header's 31-bit length field must hold the longest message of the largest ring.
const _: () = assert!((MAX_CAPACITY as u64) * (PAYLOAD_PER_SLOT as u64) <= LEN_MASK);
// The 32-bit sequence number must tell one lap from the next: a ring never holds more
// than 2^32 positions.
const _: () = assert!((MAX_CAPACITY as u64) < (1u64 << 32));
const _: () = assert!(PAYLOAD_PER_SLOT.is_multiple_of(8) && 8 + 8 * BODY_WORDS == SLOT_BYTES);

/// One cache line: header word, tag word, 48 payload bytes.
#[repr(C, align(64))]
pub(crate) struct Slot {
    header: AtomicU64,
    /// `[tag, payload...]`.
    body: UnsafeCell<[u64; BODY_WORDS]>,
}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Slot>() == SLOT_BYTES);

/// A value alone on a pair of cache lines (the adjacent-line prefetcher pulls lines in
/// pairs on x86, so 128 bytes keep writers apart).
#[repr(C, align(128))]
pub(crate) struct Line<T>(pub(crate) T);

/// One side's rarely-written words.
#[repr(C)]
pub(crate) struct SideWords {
    /// Non-zero while this side is about to park or parked (the futex word).
    waiting: AtomicU32,
    /// Non-zero once this side was dropped.
    closed: AtomicU32,
}

/// The producer's barrier marks (written only by the producer): the tag of its `k`-th
/// two-party barrier (low 32 bits) and its position then (low 32 bits) in word `k % 2` (one store per barrier, so a consumer polling the
/// line costs the producer no second transfer). The consumer counts its own barriers
/// and looks at word `k % 2` for its `k`-th: the producer can be at most one barrier
/// ahead (it cannot leave a barrier the consumer has not entered), and its next
/// barrier's mark goes to the other word (0: no barrier yet).
#[repr(C)]
pub(crate) struct Marks {
    words: [AtomicU64; 2],
}

/// The control block at the start of a ring's memory.
#[repr(C)]
pub(crate) struct Ctrl {
    head: Line<AtomicU64>,
    prod: Line<SideWords>,
    cons: Line<SideWords>,
    marks: Line<Marks>,
}

/// Bytes of a ring's control block.
#[cfg(not(loom))]
pub(crate) const CTRL_BYTES: usize = std::mem::size_of::<Ctrl>();
#[cfg(not(loom))]
const _: () = assert!(CTRL_BYTES == 512);

/// Bytes of memory a ring of `capacity` slots needs (control block + slots).
#[cfg(not(loom))]
pub(crate) const fn ring_bytes(capacity: usize) -> usize {
    CTRL_BYTES + capacity * SLOT_BYTES
}

impl Ctrl {
    fn new() -> Ctrl {
        let side = || {
            Line(SideWords {
                waiting: AtomicU32::new(0),
                closed: AtomicU32::new(0),
            })
        };
        Ctrl {
            head: Line(AtomicU64::new(0)),
            prod: side(),
            cons: side(),
            marks: Line(Marks {
                words: [AtomicU64::new(0), AtomicU64::new(0)],
            }),
        }
    }
}

/// A barrier mark's word: the tag's low 32 bits, then the producer's position's.
#[inline(always)]
fn mark_word(tag: u64, pos: u64) -> u64 {
    ((tag as u32 as u64) << 32) | pos as u32 as u64
}

/// Header bits naming position `pos` as the first slot of a message.
#[inline(always)]
fn seq_bits(pos: u64) -> u64 {
    ((pos.wrapping_add(1)) as u32 as u64) << 32
}

/// Slots needed by a message of `len` bytes (an empty message still takes one).
#[inline(always)]
fn slots_for(len: usize) -> usize {
    if len == 0 {
        1
    } else {
        len.div_ceil(PAYLOAD_PER_SLOT)
    }
}

/// Which side of a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Who {
    Prod = 0,
    Cons = 1,
}

impl Who {
    fn other(self) -> Who {
        match self {
            Who::Prod => Who::Cons,
            Who::Cons => Who::Prod,
        }
    }
}

/// What a ring shared with another process needs to know about that process: whether
/// it still lives, and whether the job it belongs to was aborted. Implemented by the
/// shared-memory job ([`crate::shm`]).
pub(crate) trait Remote: Send + Sync {
    /// False once member `rank`'s process has died (or exited without leaving).
    fn peer_alive(&self, rank: u32) -> bool;
    /// True once any process raised the job's abort flag.
    fn aborted(&self) -> bool;
}

/// Where a ring's memory lives.
pub(crate) enum Memory {
    /// This process's heap: both ends are threads of this process; a parked end is a
    /// thread, unparked by the other end.
    Heap {
        ctrl: *mut Ctrl,
        slots: *mut [Slot],
        /// Each on a line of its own: registering writes them, and nothing the other
        /// side reads on every message may share their lines.
        threads: Box<[Line<std::sync::Mutex<Option<std::thread::Thread>>>; 2]>,
    },
    /// A mapping shared with another process: parking is a futex wait on the side's
    /// waiting word, and the other end's process is watched for death. (Not modelled
    /// under loom: the model checks the protocol on heap rings.)
    #[cfg_attr(loom, allow(dead_code))]
    Shared {
        /// Keeps the mapping alive and answers liveness questions.
        remote: Arc<dyn Remote>,
        /// The member at the other end of this ring.
        peer: u32,
    },
}

pub(crate) struct Shared {
    ctrl: *const Ctrl,
    slots: *const Slot,
    mem: Memory,
    abort: Option<Abort>,
    /// Where the producer lends a buffer to the consumer (heap rings only: both ends
    /// share an address space); see `crate::loan`.
    loan: Option<Box<crate::loan::LoanBox>>,
}

// The only non-Sync parts are the slots' payload cells (and raw pointers to the
// memory, which `mem` keeps alive: a heap allocation freed only in Drop, or a mapping
// held by the `Remote`). The producer writes a slot only after the consumer's `head`
// (Release, read with Acquire) shows its previous message was fully read; the consumer
// reads a slot only after its header (written last, Release) announces the message.
// SAFETY: so no two threads ever access one payload concurrently (one Producer, one
// Consumer, the protocol above).
unsafe impl Sync for Shared {}
// SAFETY: see the Sync impl; the payloads are plain integers with no thread affinity.
unsafe impl Send for Shared {}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Memory::Heap { ctrl, slots, .. } = self.mem {
            // Both were made by Box::into_raw in `heap_ring` and are freed only
            // here, once, when the last end (the last Arc) is gone.
            // SAFETY: as argued in the lines above.
            unsafe {
                drop(Box::from_raw(ctrl));
                drop(Box::from_raw(slots));
            }
        }
    }
}

impl Shared {
    #[inline(always)]
    fn ctrl(&self) -> &Ctrl {
        // `ctrl` points to a live, initialised Ctrl for as long as `self.mem`
        // lives (see the Sync impl); Ctrl holds only atomics.
        // SAFETY: as argued in the lines above.
        unsafe { &*self.ctrl }
    }

    #[inline(always)]
    fn side(&self, who: Who) -> &SideWords {
        match who {
            Who::Prod => &self.ctrl().prod.0,
            Who::Cons => &self.ctrl().cons.0,
        }
    }

    /// Called by one side after it made progress the other side (`who`) may wait for.
    #[inline(always)]
    fn wake_if_waiting(&self, who: Who) {
        waker_fence();
        if self.side(who).waiting.load(Ordering::Relaxed) != 0 {
            self.wake_slow(who);
        }
    }

    #[cold]
    fn wake_slow(&self, who: Who) {
        let side = self.side(who);
        if side.waiting.swap(0, Ordering::AcqRel) != 0 {
            match &self.mem {
                Memory::Heap { threads, .. } => {
                    let t = threads[who as usize]
                        .0
                        .lock()
                        .unwrap_or_else(|e| e.into_inner());
                    if let Some(t) = t.as_ref() {
                        t.unpark();
                    }
                }
                Memory::Shared { .. } => futex_wake(&side.waiting),
            }
        }
    }

    /// Records the calling thread as the one to unpark (heap rings only).
    fn register_current(&self, who: Who) {
        if let Memory::Heap { threads, .. } = &self.mem {
            let me = std::thread::current();
            let mut t = threads[who as usize]
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if t.as_ref().map(|t| t.id()) != Some(me.id()) {
                *t = Some(me);
            }
        }
    }

    /// Parks the calling side for at most `wait` (until woken by the other side).
    fn park(&self, who: Who, wait: Duration) {
        match &self.mem {
            Memory::Heap { .. } => {
                #[cfg(loom)]
                {
                    let _ = wait;
                    loom::thread::yield_now();
                }
                #[cfg(not(loom))]
                std::thread::park_timeout(wait);
            }
            Memory::Shared { .. } => futex_wait(&self.side(who).waiting, 1, wait),
        }
    }

    /// The ring's loan box (heap rings only).
    pub(crate) fn loan_box(&self) -> Option<&crate::loan::LoanBox> {
        self.loan.as_deref()
    }

    /// True once the ring's abort flag (if any) was raised.
    pub(crate) fn is_aborted(&self) -> bool {
        self.abort.as_ref().is_some_and(|a| a.is_triggered())
    }

    /// The other process's failure, if it has one: aborted job or dead peer.
    fn remote_failure(&self) -> Option<TransportError> {
        match &self.mem {
            Memory::Heap { .. } => None,
            Memory::Shared { remote, peer, .. } => {
                if remote.aborted() {
                    Some(TransportError::Aborted)
                } else if !remote.peer_alive(*peer) {
                    Some(TransportError::PeerDied { peer: *peer })
                } else {
                    None
                }
            }
        }
    }
}

/// The sending end of a channel. Not `Clone` and not `Sync`: exactly one thread sends.
///
/// Aligned to 128 bytes: its positions change on every message, and an end built by
/// one thread and then moved to another must not share a cache-line pair with
/// anything a third party writes (the other end, say, allocated right beside it).
#[repr(align(128))]
pub struct Producer {
    shared: Arc<Shared>,
    /// `shared.slots` and `shared.ctrl`, kept here so the fast path reaches the ring
    /// in one load (valid while `shared` lives, i.e. as long as this end).
    slots: *const Slot,
    ctrl: *const Ctrl,
    /// The waker's fence is a real fence (no asymmetric barrier in this process).
    sym: bool,
    /// Next position to write (monotonic).
    tail: u64,
    /// `tail % capacity`.
    idx: usize,
    /// The last consumer position seen plus the capacity: the position this end may
    /// write up to (excluded) without looking at the consumer's.
    limit: u64,
    cap: usize,
    policy: WaitPolicy,
    /// Barrier marks set so far ([`Producer::set_mark`]; its parity picks the word).
    marks: u64,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

/// The receiving end of a channel. Not `Clone` and not `Sync`: exactly one thread
/// receives. Aligned to 128 bytes, as [`Producer`].
#[repr(align(128))]
pub struct Consumer {
    shared: Arc<Shared>,
    /// As [`Producer`]'s.
    slots: *const Slot,
    ctrl: *const Ctrl,
    sym: bool,
    /// Next position to read (monotonic).
    head: u64,
    /// `head % capacity`.
    idx: usize,
    /// Last position stored to `head` in the control block (acknowledged).
    published: u64,
    /// `published + ack_batch`: acknowledge once `head` reaches it.
    ack_at: u64,
    /// Acknowledge after this many slots (and whenever the ring runs empty).
    ack_batch: u64,
    cap: usize,
    policy: WaitPolicy,
    /// Two-party barriers this end matched ([`Consumer::wait_mark`]); its parity
    /// names the word of the producer's marks the next one is in.
    marks: u64,
    /// The tags this end matched, by word: a receive that has waited a while and
    /// finds word `marks % 2` changed tells the caller that the producer entered a
    /// barrier this end is not in.
    seen_marks: [u64; 2],
    /// True while [`Consumer::wait_mark`] waits (a new mark is then what it waits for).
    in_mark: bool,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

/// A channel of `capacity_slots` cache-line slots; see the crate docs.
///
/// # Panics
/// If `capacity_slots` is 0 or above [`MAX_CAPACITY`]; use [`try_channel`] to get an
/// error instead.
pub fn channel(capacity_slots: usize) -> (Producer, Consumer) {
    try_channel(capacity_slots, None).unwrap_or_else(|e| panic!("{e}"))
}

/// A channel whose blocking operations also end (with
/// [`TransportError::Aborted`]) when `abort` is triggered.
///
/// # Panics
/// As [`channel`].
pub fn channel_with_abort(capacity_slots: usize, abort: &Abort) -> (Producer, Consumer) {
    try_channel(capacity_slots, Some(abort.clone())).unwrap_or_else(|e| panic!("{e}"))
}

fn check_capacity(capacity_slots: usize) -> Result<(), TransportError> {
    if capacity_slots == 0 || capacity_slots > MAX_CAPACITY {
        return Err(TransportError::InvalidCapacity(capacity_slots));
    }
    Ok(())
}

/// Checked constructor: fails with [`TransportError::InvalidCapacity`] for a capacity of
/// 0 or above [`MAX_CAPACITY`].
pub fn try_channel(
    capacity_slots: usize,
    abort: Option<Abort>,
) -> Result<(Producer, Consumer), TransportError> {
    check_capacity(capacity_slots)?;
    crate::wake::init();
    let slots: Box<[Slot]> = (0..capacity_slots)
        .map(|_| Slot {
            header: AtomicU64::new(0),
            body: UnsafeCell::new([0; BODY_WORDS]),
        })
        .collect();
    let ctrl = Box::into_raw(Box::new(Ctrl::new()));
    let slots = Box::into_raw(slots);
    let shared = Arc::new(Shared {
        ctrl,
        slots: slots as *const Slot,
        mem: Memory::Heap {
            ctrl,
            slots,
            threads: Box::new([
                Line(std::sync::Mutex::new(None)),
                Line(std::sync::Mutex::new(None)),
            ]),
        },
        abort,
        loan: Some(Box::default()),
    });
    Ok((
        Producer::new(shared.clone(), capacity_slots),
        Consumer::new(shared, capacity_slots),
    ))
}

/// Opens the ring of `capacity` slots at `base` (which must hold
/// [`ring_bytes`]`(capacity)` bytes, zeroed before any process used it, aligned to 128
/// bytes, and stay mapped while `remote` lives).
///
/// # Safety
/// `base` must satisfy the above, and for each ring at most one process may open
/// the producer end and one the consumer end.
#[cfg(not(loom))]
pub(crate) unsafe fn shared_ring(
    base: *mut u8,
    capacity: usize,
    remote: Arc<dyn Remote>,
    peer: u32,
    abort: Option<Abort>,
) -> Result<Arc<Shared>, TransportError> {
    check_capacity(capacity)?;
    crate::wake::init();
    let ctrl = base as *const Ctrl;
    // SAFETY: the caller guarantees ring_bytes(capacity) bytes at base.
    let slots = unsafe { base.add(CTRL_BYTES) } as *const Slot;
    Ok(Arc::new(Shared {
        ctrl,
        slots,
        mem: Memory::Shared { remote, peer },
        abort,
        loan: None,
    }))
}

#[cfg(not(loom))]
impl Producer {
    /// The producer end of a ring opened with [`shared_ring`]; a ring re-opened in
    /// place resumes at the positions recorded in its memory.
    pub(crate) fn resume(shared: Arc<Shared>, capacity: usize) -> Producer {
        let mut p = Producer::new(shared, capacity);
        let head = p.shared.ctrl().head.0.load(Ordering::Acquire);
        // The write position: past every slot published from the acknowledged
        // position on (a message whose first header was never stored, by a producer
        // that died while writing it, ends the count and is overwritten).
        p.tail = head + published_from(p.slots, capacity, head) as u64;
        p.idx = (p.tail % capacity as u64) as usize;
        p.limit = head + capacity as u64;
        p
    }
}

#[cfg(not(loom))]
impl Consumer {
    /// The consumer end of a ring opened with [`shared_ring`] (see
    /// [`Producer::resume`]).
    pub(crate) fn resume(shared: Arc<Shared>, capacity: usize) -> Consumer {
        let mut c = Consumer::new(shared, capacity);
        c.head = c.shared.ctrl().head.0.load(Ordering::Acquire);
        c.published = c.head;
        c.ack_at = c.head + c.ack_batch;
        c.idx = (c.head % capacity as u64) as usize;
        // Both ends count their barriers again from here (a job's rings are
        // re-opened between runs, not inside a barrier).
        c.seen_marks = [c.mark(0), c.mark(1)];
        c
    }
}

// SAFETY: the raw pointers are copies of `shared`'s (the ring this end owns a share
// of; see the Send impl of `Shared`): they point into memory that lives as long as the
// `Arc`, and an end is used by one thread at a time (`&mut self` operations).
unsafe impl Send for Producer {}
// SAFETY: as for Producer.
unsafe impl Send for Consumer {}

impl Producer {
    fn new(shared: Arc<Shared>, cap: usize) -> Producer {
        Producer {
            slots: shared.slots,
            ctrl: shared.ctrl,
            sym: crate::wake::waker_fence_is_full(),
            shared,
            tail: 0,
            idx: 0,
            limit: cap as u64,
            cap,
            policy: WaitPolicy::default(),
            marks: 0,
            _not_sync: PhantomData,
        }
    }
}

impl Consumer {
    fn new(shared: Arc<Shared>, cap: usize) -> Consumer {
        Consumer {
            slots: shared.slots,
            ctrl: shared.ctrl,
            sym: crate::wake::waker_fence_is_full(),
            shared,
            head: 0,
            idx: 0,
            published: 0,
            ack_at: default_ack_batch(cap),
            ack_batch: default_ack_batch(cap),
            cap,
            policy: WaitPolicy::default(),
            marks: 0,
            seen_marks: [0; 2],
            in_mark: false,
            _not_sync: PhantomData,
        }
    }
}

/// What the blocking loop needs from either end.
trait End {
    fn shared(&self) -> &Shared;
    /// The side this end is.
    fn who(&self) -> Who;
    fn policy(&self) -> &WaitPolicy;
    /// Why a wait that found nothing for a while should end although the peer lives
    /// (checked before parking, never on the fast path). Default: no reason.
    fn stalled(&self) -> Option<TransportError> {
        None
    }
}

/// Dropping either end: mark it closed and wake the other end if it is parked.
fn close<E: End>(end: &E) {
    let sh = end.shared();
    sh.side(end.who()).closed.store(1, Ordering::SeqCst);
    sh.wake_if_waiting(end.who().other());
}

impl End for Producer {
    #[inline(always)]
    fn shared(&self) -> &Shared {
        &self.shared
    }
    #[inline(always)]
    fn who(&self) -> Who {
        Who::Prod
    }
    #[inline(always)]
    fn policy(&self) -> &WaitPolicy {
        &self.policy
    }
}

impl End for Consumer {
    #[inline(always)]
    fn shared(&self) -> &Shared {
        &self.shared
    }
    #[inline(always)]
    fn who(&self) -> Who {
        Who::Cons
    }
    #[inline(always)]
    fn policy(&self) -> &WaitPolicy {
        &self.policy
    }
    /// A receive waiting while the producer entered a two-party barrier this end has
    /// not matched: the producer waits for this end's mark and sends nothing, so the
    /// receive would only time out. (The producer stores its mark after every message
    /// it sent before it, so the caller's retry still takes those.)
    fn stalled(&self) -> Option<TransportError> {
        if self.in_mark {
            return None;
        }
        let i = (self.marks & 1) as usize;
        let now = self.mark(i);
        (now != self.seen_marks[i]).then_some(TransportError::PeerInBarrier {
            mark: (now >> 32) as u32,
        })
    }
}

/// Acknowledge every `capacity / 8` slots (1 to 64): often enough that the producer
/// rarely finds the ring full for lack of an acknowledgement (seven eighths of the ring
/// are free when it reads one), rarely enough that the acknowledgement line does not
/// bounce between the caches while streaming. Against `capacity / 16` (4 slots of the
/// default 64), streaming one-word messages took 0.62x the time per message
/// (`scripts/bench-compare.sh`, `qp_stream`, 7 alternated pairs) and the collectives
/// the same (broadcast between threads 1.02, between processes 1.00, reduce 1.00).
/// A quarter ring (the C UMP ring's batch) streamed faster still (0.49-0.58x) but made
/// back-to-back broadcasts between processes 1.04x slower in three runs of 5-7 pairs.
fn default_ack_batch(capacity: usize) -> u64 {
    (capacity / 8).clamp(1, 64) as u64
}

#[inline(always)]
fn would_block(r: &Result<impl Sized, TransportError>) -> bool {
    matches!(r, Err(TransportError::Full) | Err(TransportError::Empty))
}

/// The blocking loop shared by every blocking operation: retry `attempt` while it
/// would block, backing off (spin, yield, then park on the end's side until the peer
/// wakes us or a growing timeout passes). Ends on success, on a real error, on abort,
/// on the death of the process at the other end (shared rings), or at the deadline
/// (computed lazily, only once the waiter is about to park).
#[inline(always)]
fn blocking<E: End, T>(
    end: &mut E,
    timeout: Option<Duration>,
    mut attempt: impl FnMut(&mut E) -> Result<T, TransportError>,
) -> Result<T, TransportError> {
    let r = attempt(end);
    if !would_block(&r) {
        return r;
    }
    block_on(end, timeout, attempt)
}

#[inline(never)]
fn block_on<E: End, T>(
    end: &mut E,
    timeout: Option<Duration>,
    mut attempt: impl FnMut(&mut E) -> Result<T, TransportError>,
) -> Result<T, TransportError> {
    let policy = *end.policy();
    let mut backoff = Backoff::with_policy(&policy);
    let mut deadline: Option<Instant> = None;
    let mut park = policy.park_initial;
    let mut registered = false;
    let who = end.who();
    loop {
        let r = attempt(end);
        if !would_block(&r) {
            return r;
        }
        if let Some(a) = &end.shared().abort {
            if a.is_triggered() {
                return Err(TransportError::Aborted);
            }
        }
        if !backoff.is_completed() {
            backoff.snooze();
            continue;
        }
        let now = Instant::now();
        if let Some(t) = timeout {
            // A timeout too large to represent as an Instant means "no deadline".
            if deadline.is_none() {
                deadline = now.checked_add(t);
            }
            if let Some(d) = deadline {
                if now >= d {
                    return Err(TransportError::Timeout(t));
                }
            }
        }
        if let Some(e) = end.shared().remote_failure().or_else(|| end.stalled()) {
            // What the peer published before it died (or before it entered the
            // barrier) is still delivered.
            let r = attempt(end);
            return if would_block(&r) { Err(e) } else { r };
        }
        // Once per wait: registering writes shared state.
        if !registered {
            registered = true;
            end.shared().register_current(who);
            if let Some(a) = &end.shared().abort {
                if a.register_current() {
                    return Err(TransportError::Aborted);
                }
            }
        }
        let side = end.shared().side(who);
        side.waiting.store(1, Ordering::SeqCst);
        waiter_fence();
        let r = attempt(end);
        if !would_block(&r) {
            end.shared().side(who).waiting.store(0, Ordering::Relaxed);
            return r;
        }
        let wait = match deadline {
            Some(d) => park.min(d.saturating_duration_since(now)),
            None => park,
        };
        end.shared().park(who, wait);
        end.shared().side(who).waiting.store(0, Ordering::Relaxed);
        park = (park * 2).min(policy.park_max);
    }
}

/// The fast path's wake-up of the other side (see [`Shared::wake_if_waiting`]): `sym`
/// is the end's cached [`crate::wake::waker_fence_is_full`].
#[inline(always)]
fn wake_peer(shared: &Shared, ctrl: &Ctrl, sym: bool, who: Who) {
    #[cfg(loom)]
    {
        let _ = sym;
        crate::sync::fence(Ordering::SeqCst);
    }
    #[cfg(not(loom))]
    if sym {
        std::sync::atomic::fence(Ordering::SeqCst);
    } else {
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
    }
    let side = match who {
        Who::Prod => &ctrl.prod.0,
        Who::Cons => &ctrl.cons.0,
    };
    if side.waiting.load(Ordering::Relaxed) != 0 {
        shared.wake_slow(who);
    }
}

macro_rules! ring_access {
    ($t:ty) => {
        impl $t {
            #[inline(always)]
            fn ring_ctrl(&self) -> &Ctrl {
                // SAFETY: `ctrl` is `shared.ctrl`, live while `shared` is (see Shared).
                unsafe { &*self.ctrl }
            }

            #[inline(always)]
            fn ring_slot(&self, i: usize) -> &Slot {
                // Callers pass i < capacity (ring indices wrap at capacity); the
                // slots live while `shared` does.
                // SAFETY: as argued in the lines above.
                unsafe { &*self.slots.add(i) }
            }
        }
    };
}
ring_access!(Producer);
ring_access!(Consumer);

/// Slots published from position `from` on in the ring of `cap` slots at `slots`: the
/// headers that carry their own position's sequence number (a first slot or a
/// continuation), counted until the first that does not (at most `cap`).
fn published_from(slots: *const Slot, cap: usize, from: u64) -> usize {
    let mut n = 0;
    while n < cap {
        let pos = from + n as u64;
        // SAFETY: the index is below `cap`, and the slots live as long as the end that passed them (see Shared).
        let slot = unsafe { &*slots.add((pos % cap as u64) as usize) };
        if slot.header.load(Ordering::Acquire) & !(LEN_MASK | CONT) != seq_bits(pos) {
            break;
        }
        n += 1;
    }
    n
}

/// Copies `src` (at most [`PAYLOAD_PER_SLOT`] bytes) into a slot's payload.
#[inline(always)]
fn write_payload(slot: &Slot, src: &[u8]) {
    debug_assert!(src.len() <= PAYLOAD_PER_SLOT);
    slot.body.with_mut(|p| {
        // The caller owns the slot (it is free: `has_room`), so only this producer accesses
        // its body; the payload starts after the tag word and src.len() <= 48 = the
        // payload's size.
        // SAFETY: as argued in the lines above.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), (p as *mut u8).add(8), src.len()) }
    });
}

/// Copies a slot's first `dst.len()` payload bytes (at most [`PAYLOAD_PER_SLOT`]).
#[inline(always)]
fn read_payload(slot: &Slot, dst: &mut [u8]) {
    debug_assert!(dst.len() <= PAYLOAD_PER_SLOT);
    slot.body.with(|p| {
        // The message's header (Acquire) published this slot, so the producer finished
        // writing it and will not touch it until `head` moves past it; the payload starts
        // after the tag word and dst.len() <= 48.
        // SAFETY: as argued in the lines above.
        unsafe {
            std::ptr::copy_nonoverlapping((p as *const u8).add(8), dst.as_mut_ptr(), dst.len())
        }
    });
}

impl Producer {
    /// Slots in the ring.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Largest message this channel carries, in bytes.
    pub fn max_message_len(&self) -> usize {
        self.cap * PAYLOAD_PER_SLOT
    }

    /// Slots not yet acknowledged by the consumer (received messages count until the
    /// consumer acknowledges them; see [`Consumer::set_ack_batch`]).
    pub fn len(&self) -> usize {
        (self.tail - self.ring_ctrl().head.0.load(Ordering::Acquire)) as usize
    }

    /// True if no sent message is still waiting to be received.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slots free for new messages (as acknowledged so far).
    pub fn free_slots(&self) -> usize {
        self.cap - self.len()
    }

    /// True if no slot is free.
    pub fn is_full(&self) -> bool {
        self.free_slots() == 0
    }

    /// True once the consumer was dropped.
    pub fn is_disconnected(&self) -> bool {
        self.ring_ctrl().cons.0.closed.load(Ordering::Acquire) != 0
    }

    /// Enters the two-party barrier `tag` (its low 32 bits tell it from the previous
    /// and the next barrier; the collectives put their sequence number there):
    /// publishes it, with the ring position after every message sent so far, to the
    /// consumer, which [`Consumer::wait_mark`]s for it. Both ends of a queuepair do
    /// this on their producer and wait on their consumer
    /// ([`QueuePairEnd`](crate::QueuePairEnd)'s [`Link::pair_barrier`](crate::Link::pair_barrier)).
    #[inline]
    pub fn set_mark(&mut self, tag: u64) {
        let k = self.marks;
        self.marks = k.wrapping_add(1);
        let ctrl = self.ring_ctrl();
        ctrl.marks.0.words[(k & 1) as usize].store(mark_word(tag, self.tail), Ordering::Release);
        wake_peer(&self.shared, ctrl, self.sym, Who::Cons);
    }

    /// How blocking sends wait (default [`WaitPolicy::DEDICATED`]).
    pub fn set_wait_policy(&mut self, p: WaitPolicy) {
        self.policy = p;
    }

    /// How blocking sends (and [`crate::lend_all`]'s wait for its loans) wait.
    pub fn wait_policy(&self) -> &WaitPolicy {
        &self.policy
    }

    /// The ring this end belongs to (for `crate::loan`).
    pub(crate) fn ring(&self) -> &Shared {
        &self.shared
    }

    /// True if `n` slots are free; re-reads the consumer's position only when the
    /// cached one says they are not.
    #[inline(always)]
    fn has_room(&mut self, n: usize) -> bool {
        if self.tail + n as u64 <= self.limit {
            return true;
        }
        self.limit = self.ring_ctrl().head.0.load(Ordering::Acquire) + self.cap as u64;
        self.tail + n as u64 <= self.limit
    }

    #[inline(always)]
    fn check_room(&mut self, n: usize) -> Result<(), TransportError> {
        if self.ring_ctrl().cons.0.closed.load(Ordering::Relaxed) != 0 {
            return Err(TransportError::Disconnected);
        }
        if self.has_room(n) {
            Ok(())
        } else {
            Err(TransportError::Full)
        }
    }

    #[inline(always)]
    fn advance(&mut self, n: usize) {
        self.tail += n as u64;
        self.idx += n;
        if self.idx >= self.cap {
            self.idx -= self.cap;
        }
        wake_peer(&self.shared, self.ring_ctrl(), self.sym, Who::Cons);
    }

    /// Sends `msg` labelled with `tag` if there is room now; [`TransportError::Full`]
    /// otherwise. The receiver gets the tag with [`Consumer::try_recv_tagged`].
    #[inline]
    pub fn try_send_tagged(&mut self, tag: u64, msg: &[u8]) -> Result<(), TransportError> {
        if msg.len() <= PAYLOAD_PER_SLOT {
            // One slot (the short messages of active messages, say): no loop.
            self.check_room(1)?;
            let slot = self.ring_slot(self.idx);
            write_payload(slot, msg);
            slot.body.with_mut(|p| {
                // SAFETY: the slot is free and owned by the producer (see write_payload).
                unsafe { (*p)[0] = tag }
            });
            slot.header
                .store(seq_bits(self.tail) | msg.len() as u64, Ordering::Release);
            self.advance(1);
            return Ok(());
        }
        self.send_slots(tag, msg)
    }

    /// The rest of [`try_send_tagged`](Producer::try_send_tagged): a message of
    /// several slots (out of line, so that the one-slot path inlines into callers).
    #[inline(never)]
    fn send_slots(&mut self, tag: u64, msg: &[u8]) -> Result<(), TransportError> {
        let n = slots_for(msg.len());
        if n > self.cap {
            return Err(TransportError::MessageTooLarge {
                len: msg.len(),
                max: self.max_message_len(),
            });
        }
        self.check_room(n)?;
        // Continuation slots first; their headers need no ordering of their own, the
        // first slot's Release store publishes them.
        let mut i = self.idx;
        for k in 1..n {
            i += 1;
            if i == self.cap {
                i = 0;
            }
            let slot = self.ring_slot(i);
            write_payload(
                slot,
                &msg[k * PAYLOAD_PER_SLOT..msg.len().min((k + 1) * PAYLOAD_PER_SLOT)],
            );
            slot.header
                .store(seq_bits(self.tail + k as u64) | CONT, Ordering::Relaxed);
        }
        let first = self.ring_slot(self.idx);
        write_payload(first, &msg[..msg.len().min(PAYLOAD_PER_SLOT)]);
        first.body.with_mut(|p| {
            // SAFETY: the slot is free and owned by the producer (see write_payload).
            unsafe { (*p)[0] = tag }
        });
        first
            .header
            .store(seq_bits(self.tail) | msg.len() as u64, Ordering::Release);
        self.advance(n);
        Ok(())
    }

    /// Sends `msg` (tag 0) if there is room now; [`TransportError::Full`] otherwise.
    #[inline]
    pub fn try_send(&mut self, msg: &[u8]) -> Result<(), TransportError> {
        self.try_send_tagged(0, msg)
    }

    /// Sends one word (8 bytes) labelled with `tag` if there is room now: one slot, two
    /// stores into it before the header.
    #[inline(always)]
    pub fn try_send_word_tagged(&mut self, tag: u64, w: u64) -> Result<(), TransportError> {
        self.check_room(1)?;
        let slot = self.ring_slot(self.idx);
        slot.body.with_mut(|p| {
            // SAFETY: the slot is free, so only this producer accesses its body.
            unsafe {
                (*p)[0] = tag;
                (*p)[1] = w;
            }
        });
        slot.header
            .store(seq_bits(self.tail) | 8, Ordering::Release);
        self.advance(1);
        Ok(())
    }

    /// Sends one word (tag 0) if there is room now.
    #[inline]
    pub fn try_send_word(&mut self, w: u64) -> Result<(), TransportError> {
        self.try_send_word_tagged(0, w)
    }

    /// Sends an empty (zero-payload) message labelled with `tag` if there is room now.
    #[inline(always)]
    pub fn try_send_empty_tagged(&mut self, tag: u64) -> Result<(), TransportError> {
        self.check_room(1)?;
        let slot = self.ring_slot(self.idx);
        slot.body.with_mut(|p| {
            // SAFETY: the slot is free, so only this producer accesses its body.
            unsafe { (*p)[0] = tag }
        });
        slot.header.store(seq_bits(self.tail), Ordering::Release);
        self.advance(1);
        Ok(())
    }

    /// Sends an empty (zero-payload) message (tag 0) if there is room now.
    #[inline]
    pub fn try_send_empty(&mut self) -> Result<(), TransportError> {
        self.try_send_empty_tagged(0)
    }

    /// Sends `msg` labelled with `tag`, waiting while the ring is full, at most
    /// `timeout` (`None`: no limit).
    #[inline]
    pub fn send_tagged(
        &mut self,
        tag: u64,
        msg: &[u8],
        timeout: Option<Duration>,
    ) -> Result<(), TransportError> {
        blocking(self, timeout, |p| p.try_send_tagged(tag, msg))
    }

    /// Sends one word labelled with `tag`, waiting while the ring is full, at most
    /// `timeout` (`None`: no limit).
    #[inline(always)]
    pub fn send_word_tagged(
        &mut self,
        tag: u64,
        w: u64,
        timeout: Option<Duration>,
    ) -> Result<(), TransportError> {
        // The fast path inline, the wait out of line (no closure between them). The
        // arms build their results: passing the fast path's on whole copied it with
        // loads that straddle its stores, which the store buffer cannot forward.
        match self.try_send_word_tagged(tag, w) {
            Ok(()) => Ok(()),
            Err(TransportError::Full) => self.send_word_wait(tag, w, timeout),
            Err(e) => Err(e),
        }
    }

    #[inline(never)]
    fn send_word_wait(
        &mut self,
        tag: u64,
        w: u64,
        timeout: Option<Duration>,
    ) -> Result<(), TransportError> {
        block_on(self, timeout, |p| p.try_send_word_tagged(tag, w))
    }

    /// Sends an empty message labelled with `tag`, waiting while the ring is full, at
    /// most `timeout` (`None`: no limit).
    #[inline(always)]
    pub fn send_empty_tagged(
        &mut self,
        tag: u64,
        timeout: Option<Duration>,
    ) -> Result<(), TransportError> {
        // As send_word_tagged.
        match self.try_send_empty_tagged(tag) {
            Ok(()) => Ok(()),
            Err(TransportError::Full) => self.send_empty_wait(tag, timeout),
            Err(e) => Err(e),
        }
    }

    #[inline(never)]
    fn send_empty_wait(
        &mut self,
        tag: u64,
        timeout: Option<Duration>,
    ) -> Result<(), TransportError> {
        block_on(self, timeout, |p| p.try_send_empty_tagged(tag))
    }

    /// Sends `msg`, waiting while the ring is full.
    #[inline]
    pub fn send(&mut self, msg: &[u8]) -> Result<(), TransportError> {
        blocking(self, None, |p| p.try_send(msg))
    }

    /// Sends `msg`, waiting at most `timeout` for room.
    pub fn send_timeout(&mut self, msg: &[u8], timeout: Duration) -> Result<(), TransportError> {
        blocking(self, Some(timeout), |p| p.try_send(msg))
    }

    /// Sends one word, waiting while the ring is full.
    #[inline]
    pub fn send_word(&mut self, w: u64) -> Result<(), TransportError> {
        blocking(self, None, |p| p.try_send_word(w))
    }

    /// Sends one word, waiting at most `timeout` for room.
    #[inline]
    pub fn send_word_timeout(&mut self, w: u64, timeout: Duration) -> Result<(), TransportError> {
        blocking(self, Some(timeout), |p| p.try_send_word(w))
    }

    /// Sends an empty message, waiting while the ring is full.
    pub fn send_empty(&mut self) -> Result<(), TransportError> {
        blocking(self, None, |p| p.try_send_empty())
    }

    /// Sends an empty message, waiting at most `timeout` for room.
    #[inline]
    pub fn send_empty_timeout(&mut self, timeout: Duration) -> Result<(), TransportError> {
        blocking(self, Some(timeout), |p| p.try_send_empty())
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        close(self);
    }
}

impl Consumer {
    /// Slots in the ring.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Largest message this channel carries, in bytes.
    pub fn max_message_len(&self) -> usize {
        self.cap * PAYLOAD_PER_SLOT
    }

    /// Slots holding messages not yet received (a hint: a message being published
    /// right now may not be counted yet). Counts the published headers from the read
    /// position on (the producer stores its position nowhere else).
    pub fn len(&self) -> usize {
        published_from(self.slots, self.cap, self.head)
    }

    /// True if no message is ready to be received.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ready_header().is_none()
    }

    /// Length of the next message, if one is ready.
    pub fn peek_len(&self) -> Option<usize> {
        self.ready_header().map(|h| (h & LEN_MASK) as usize)
    }

    /// True once the producer was dropped (messages it sent may still be queued).
    pub fn is_disconnected(&self) -> bool {
        self.ring_ctrl().prod.0.closed.load(Ordering::Acquire) != 0
    }

    /// Word `i` of the producer's barrier marks (Acquire: what the producer sent
    /// before the mark is visible once the mark is).
    #[inline(always)]
    fn mark(&self, i: usize) -> u64 {
        self.ring_ctrl().marks.0.words[i].load(Ordering::Acquire)
    }

    /// Checks once for the producer's barrier mark `tag` ([`Producer::set_mark`]) as
    /// its barrier number `k`, this end's `k`-th: `Ok(None)` once the producer entered
    /// that barrier (even if it already went on to its next) and every message it sent
    /// before it was received; `Ok(Some(got))` if a message tagged `got` is waiting
    /// instead (the producer is in something else, or was before the barrier: the
    /// message stays queued); else [`TransportError::Empty`] (or `Disconnected` once
    /// the producer is gone).
    #[inline(always)]
    pub fn try_mark(&mut self, tag: u64) -> Result<Option<u64>, TransportError> {
        let i = (self.marks & 1) as usize;
        let mut w = self.mark(i);
        if w >> 32 != tag as u32 as u64 {
            // Not there: a waiting message then means the producer did something
            // else, since it stores a barrier's mark before any message it sends
            // after the barrier (and before it closes its end), so the mark is read
            // again after the message (or the close).
            let next = self.next_header();
            w = self.mark(i);
            if w >> 32 != tag as u32 as u64 {
                next?;
                return Ok(Some(self.current_tag()));
            }
        }
        if w as u32 != self.head as u32 {
            // Messages the producer sent before the barrier are still queued.
            self.next_header()?;
            return Ok(Some(self.current_tag()));
        }
        self.seen_marks[i] = w;
        self.marks = self.marks.wrapping_add(1);
        Ok(None)
    }

    /// Waits, at most `timeout`, for the producer's barrier mark `tag` (see
    /// [`try_mark`](Consumer::try_mark), which it repeats, backing off as every
    /// blocking call does).
    pub fn wait_mark(
        &mut self,
        tag: u64,
        timeout: Option<Duration>,
    ) -> Result<Option<u64>, TransportError> {
        if let Ok(r) = self.try_mark(tag) {
            return Ok(r);
        }
        self.in_mark = true;
        let r = block_on(self, timeout, |c| c.try_mark(tag));
        self.in_mark = false;
        r
    }

    /// How blocking receives wait (default [`WaitPolicy::DEDICATED`]).
    pub fn set_wait_policy(&mut self, p: WaitPolicy) {
        self.policy = p;
    }

    /// Acknowledge consumed slots to the producer at least every `n` slots (clamped to
    /// `1..=capacity`; default `capacity / 8`, 1 to 64). The consumer also
    /// acknowledges whenever it finds the ring empty and whenever the producer is parked
    /// waiting for room, so a producer never stays blocked while the consumer keeps
    /// receiving. `1` acknowledges every message (the strictest flow control: a send
    /// blocks only when `capacity` slots are truly unconsumed).
    pub fn set_ack_batch(&mut self, n: usize) {
        self.ack_batch = n.clamp(1, self.cap) as u64;
        self.ack_at = self.published + self.ack_batch;
    }

    /// Current acknowledgement batch (see [`set_ack_batch`](Consumer::set_ack_batch)).
    pub fn ack_batch(&self) -> usize {
        self.ack_batch as usize
    }

    /// The next message's header if it has been published.
    #[inline(always)]
    fn ready_header(&self) -> Option<u64> {
        let h = self.ring_slot(self.idx).header.load(Ordering::Acquire);
        (h & SEQ_AND_CONT == seq_bits(self.head)).then_some(h)
    }

    /// The ring this end belongs to (for `crate::loan`).
    pub(crate) fn ring(&self) -> &Shared {
        &self.shared
    }

    /// The next header, or `Empty` / `Disconnected`. An empty poll with nothing to
    /// acknowledge and a producer still there is inline and two loads (the C ring's is
    /// one); the rest (acknowledge what was read, a closed producer) is out of line and
    /// runs once per message, not once per poll. (Acknowledging inline made the word
    /// collectives' fast path longer: back-to-back broadcasts between two threads
    /// 1.13x slower, alternated builds.)
    #[inline(always)]
    fn next_header(&mut self) -> Result<u64, TransportError> {
        if let Some(h) = self.ready_header() {
            return Ok(h);
        }
        if self.published == self.head
            && self.ring_ctrl().prod.0.closed.load(Ordering::Relaxed) == 0
        {
            return Err(TransportError::Empty);
        }
        self.not_ready()
    }

    /// The rest of [`next_header`](Consumer::next_header), out of the fast path:
    /// acknowledge what was read (the ring ran empty), then `Empty` or `Disconnected`
    /// (or the header, when a message arrived meanwhile: the producer's last message
    /// was published before it closed).
    #[inline(never)]
    fn not_ready(&mut self) -> Result<u64, TransportError> {
        if self.published != self.head {
            self.publish();
        }
        if self.is_disconnected() {
            return self.ready_header().ok_or(TransportError::Disconnected);
        }
        Err(TransportError::Empty)
    }

    /// The tag of the message at the read position (published by its header).
    #[inline(always)]
    fn current_tag(&self) -> u64 {
        self.ring_slot(self.idx).body.with(|p| {
            // Called only after `next_header` returned this message's header
            // (Acquire), which published the slot's body.
            // SAFETY: as argued in the lines above.
            unsafe { (*p)[0] }
        })
    }

    #[inline(always)]
    fn advance(&mut self, n: usize) {
        self.head += n as u64;
        self.idx += n;
        if self.idx >= self.cap {
            self.idx -= self.cap;
        }
        if self.head >= self.ack_at || self.ring_ctrl().prod.0.waiting.load(Ordering::Relaxed) != 0
        {
            self.publish();
        }
    }

    /// Acknowledges every slot read so far and wakes a producer waiting for room.
    #[inline(always)]
    fn publish(&mut self) {
        self.published = self.head;
        self.ack_at = self.head + self.ack_batch;
        self.ring_ctrl().head.0.store(self.head, Ordering::Release);
        wake_peer(&self.shared, self.ring_ctrl(), self.sym, Who::Prod);
    }

    /// Receives the next message into `buf` if one is ready; returns its tag and
    /// length. A too-short `buf` gives [`TransportError::BufferTooSmall`] and leaves
    /// the message queued.
    #[inline(always)]
    pub fn try_recv_tagged(&mut self, buf: &mut [u8]) -> Result<(u64, usize), TransportError> {
        let h = self.next_header()?;
        let len = (h & LEN_MASK) as usize;
        if buf.len() < len {
            return Err(TransportError::BufferTooSmall {
                needed: len,
                got: buf.len(),
            });
        }
        let tag = self.current_tag();
        if len <= PAYLOAD_PER_SLOT {
            // One slot: no loop.
            read_payload(self.ring_slot(self.idx), &mut buf[..len]);
            self.advance(1);
            return Ok((tag, len));
        }
        self.recv_slots(tag, len, buf)
    }

    /// The rest of [`try_recv_tagged`](Consumer::try_recv_tagged): a message of
    /// several slots (out of line, so that the one-slot path inlines into callers).
    #[inline(never)]
    fn recv_slots(
        &mut self,
        tag: u64,
        len: usize,
        buf: &mut [u8],
    ) -> Result<(u64, usize), TransportError> {
        let n = slots_for(len);
        let mut i = self.idx;
        for k in 0..n {
            let lo = k * PAYLOAD_PER_SLOT;
            let hi = len.min(lo + PAYLOAD_PER_SLOT);
            read_payload(self.ring_slot(i), &mut buf[lo..hi]);
            i += 1;
            if i == self.cap {
                i = 0;
            }
        }
        self.advance(n);
        Ok((tag, len))
    }

    /// Receives the next message into `buf` if one is ready; returns its length.
    #[inline]
    pub fn try_recv(&mut self, buf: &mut [u8]) -> Result<usize, TransportError> {
        self.try_recv_tagged(buf).map(|(_, n)| n)
    }

    /// Receives a one-word message (sent with `send_word`; an empty message reads as
    /// 0) if one is ready; returns its tag and the word. A longer message gives
    /// [`TransportError::NotAWord`] and stays queued.
    #[inline(always)]
    pub fn try_recv_word_tagged(&mut self) -> Result<(u64, u64), TransportError> {
        let h = self.next_header()?;
        let len = h & LEN_MASK;
        let (tag, w) = match len {
            8 | 0 => self.ring_slot(self.idx).body.with(|p| {
                // SAFETY: published by the header read above (see current_tag).
                unsafe { ((*p)[0], if len == 8 { (*p)[1] } else { 0 }) }
            }),
            _ => return Err(TransportError::NotAWord { len: len as usize }),
        };
        self.advance(1);
        Ok((tag, w))
    }

    /// Receives a one-word message if one is ready (see
    /// [`try_recv_word_tagged`](Consumer::try_recv_word_tagged)).
    #[inline]
    pub fn try_recv_word(&mut self) -> Result<u64, TransportError> {
        self.try_recv_word_tagged().map(|(_, w)| w)
    }

    /// Receives the next message into a new vector if one is ready.
    pub fn try_recv_vec(&mut self) -> Result<Vec<u8>, TransportError> {
        let h = self.next_header()?;
        let mut v = vec![0; (h & LEN_MASK) as usize];
        self.try_recv(&mut v)?;
        Ok(v)
    }

    /// Receives the next message into `buf` with its tag, waiting while the ring is
    /// empty, at most `timeout` (`None`: no limit).
    #[inline]
    pub fn recv_tagged(
        &mut self,
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> Result<(u64, usize), TransportError> {
        blocking(self, timeout, |c| c.try_recv_tagged(buf))
    }

    /// Receives a one-word message with its tag, waiting while the ring is empty, at
    /// most `timeout` (`None`: no limit).
    #[inline(always)]
    pub fn recv_word_tagged(
        &mut self,
        timeout: Option<Duration>,
    ) -> Result<(u64, u64), TransportError> {
        // As Producer::send_word_tagged.
        match self.try_recv_word_tagged() {
            Ok((tag, w)) => Ok((tag, w)),
            Err(TransportError::Empty) => self.recv_word_wait(timeout),
            Err(e) => Err(e),
        }
    }

    #[inline(never)]
    fn recv_word_wait(&mut self, timeout: Option<Duration>) -> Result<(u64, u64), TransportError> {
        block_on(self, timeout, |c| c.try_recv_word_tagged())
    }

    /// Receives the next message into `buf`, waiting while the ring is empty.
    #[inline]
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<usize, TransportError> {
        blocking(self, None, |c| c.try_recv(buf))
    }

    /// As [`recv`](Consumer::recv), waiting at most `timeout`.
    pub fn recv_timeout(
        &mut self,
        buf: &mut [u8],
        timeout: Duration,
    ) -> Result<usize, TransportError> {
        blocking(self, Some(timeout), |c| c.try_recv(buf))
    }

    /// Receives a one-word message, waiting while the ring is empty.
    #[inline]
    pub fn recv_word(&mut self) -> Result<u64, TransportError> {
        blocking(self, None, |c| c.try_recv_word())
    }

    /// As [`recv_word`](Consumer::recv_word), waiting at most `timeout`.
    #[inline]
    pub fn recv_word_timeout(&mut self, timeout: Duration) -> Result<u64, TransportError> {
        blocking(self, Some(timeout), |c| c.try_recv_word())
    }

    /// Receives the next message into a new vector, waiting while the ring is empty.
    pub fn recv_vec(&mut self) -> Result<Vec<u8>, TransportError> {
        blocking(self, None, |c| c.try_recv_vec())
    }

    /// As [`recv_vec`](Consumer::recv_vec), waiting at most `timeout`.
    pub fn recv_vec_timeout(&mut self, timeout: Duration) -> Result<Vec<u8>, TransportError> {
        blocking(self, Some(timeout), |c| c.try_recv_vec())
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        close(self);
    }
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("capacity", &self.cap)
            .field("sent_slots", &self.tail)
            .finish()
    }
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("capacity", &self.cap)
            .field("received_slots", &self.head)
            .finish()
    }
}

/// Wakes both sides of the ring at `base` if they are parked on its futex words (used
/// when a job is aborted, to end every wait at once).
///
/// # Safety
/// `base` must point to a ring's memory as for [`shared_ring`], mapped for the call.
#[cfg(not(loom))]
pub(crate) unsafe fn wake_ring(base: *const u8) {
    // The caller guarantees a live, initialised ring at base; Ctrl holds only
    // atomics, so a shared reference to it is sound while other processes use it.
    // SAFETY: as argued in the lines above.
    let ctrl = unsafe { &*(base as *const Ctrl) };
    for side in [&ctrl.prod.0, &ctrl.cons.0] {
        if side.waiting.swap(0, Ordering::AcqRel) != 0 {
            futex_wake(&side.waiting);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A peer that never dies.
    struct Alive;

    impl Remote for Alive {
        fn peer_alive(&self, _rank: u32) -> bool {
            true
        }
        fn aborted(&self) -> bool {
            false
        }
    }

    /// The producer's position lives only in the slot headers: ends re-opened in place
    /// find it by counting the published slots from the acknowledged position, and a
    /// message whose first header was never stored (a producer that died while writing
    /// it) is not counted (its slots are written again).
    #[test]
    fn a_ring_reopened_in_place_resumes_where_it_stood() {
        let cap = 4;
        let layout = std::alloc::Layout::from_size_align(ring_bytes(cap), 128).unwrap();
        // SAFETY: a non-zero size; freed at the end of the test.
        let mem = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!mem.is_null());
        let remote: Arc<dyn Remote> = Arc::new(Alive);
        // Ring_bytes(cap) zeroed bytes aligned to 128, alive until dealloc below;
        // the ends opened at once are one producer and one consumer.
        // SAFETY: as argued in the lines above.
        let open = || unsafe { shared_ring(mem, cap, remote.clone(), 1, None) }.unwrap();
        // Where a producer end opened now would write (the end is forgotten: dropping
        // it would close the ring).
        let tail_now = || {
            let p = Producer::resume(open(), cap);
            let t = p.tail;
            std::mem::forget(p);
            t
        };
        let (mut tx, mut rx) = (Producer::resume(open(), cap), Consumer::resume(open(), cap));
        assert_eq!(rx.len(), 0);
        tx.try_send_word(1).unwrap();
        tx.try_send(&[7u8; 60]).unwrap(); // two slots
        assert_eq!(rx.len(), 3);
        assert_eq!(rx.try_recv_word(), Ok(1));
        assert_eq!(rx.len(), 2);
        // Gone without closing (as a process that stops using its ends).
        std::mem::forget(tx);
        std::mem::forget(rx);

        let mut tx = Producer::resume(open(), cap);
        assert_eq!(tx.tail, 3);
        // A two-slot message at position 3 whose continuation (position 4, slot 0) was
        // written but whose first header was not.
        let slots = open().slots;
        // SAFETY: slot 0 of the ring; nobody else uses the ring now.
        unsafe { &*slots }
            .header
            .store(seq_bits(4) | CONT, Ordering::Relaxed);
        assert_eq!(tail_now(), 3);
        tx.try_send_word(9).unwrap();
        tx.try_send_word(10).unwrap(); // wraps to slot 0
        let mut rx = Consumer::resume(open(), cap);
        assert_eq!(rx.len(), 4);
        let mut buf = [0u8; 64];
        assert_eq!(rx.try_recv(&mut buf), Ok(60));
        assert_eq!(buf[..60], [7u8; 60]);
        assert_eq!(rx.try_recv_word(), Ok(9));
        assert_eq!(rx.try_recv_word(), Ok(10));
        assert_eq!(rx.try_recv_word(), Err(TransportError::Empty));
        assert_eq!(tail_now(), 5);
        drop((tx, rx));
        // SAFETY: allocated above with this layout; every end using it is gone or forgotten (never used again).
        unsafe { std::alloc::dealloc(mem, layout) };
    }
}
