//! The single-producer single-consumer ring of cache-line slots.
//!
//! Layout (every part on its own cache line(s), each with one writer):
//!
//! * `slots`: `capacity` slots of 64 bytes, written only by the producer. A slot is an
//!   8-byte header followed by 56 bytes of payload. The header holds the slot's
//!   sequence number (low 32 bits of position + 1; it doubles as the epoch that tells
//!   a new message from the previous lap's) and either the message length (first
//!   slot of a message) or a continuation mark. The first slot's header is written
//!   last, with `Release`: once the consumer sees it (`Acquire`), every byte of the
//!   message, in all its slots, is visible.
//! * `head`: the consumer's read position (its acknowledgement), written only by the
//!   consumer. The producer reads it only when its cached copy says the ring is full.
//! * `tail`: the producer's write position, a hint for `len()` queries only.
//! * `prod` / `cons`: each side's rarely-written flags (parked, dropped). They stay
//!   shared in both caches, so checking the peer's flag after each operation is a
//!   cache hit.

use crate::backoff::{Backoff, WaitPolicy};
use crate::sync::{Arc, AtomicBool, AtomicU64, Ordering, UnsafeCell};
use crate::{Abort, TransportError};
use crossbeam_utils::CachePadded;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

/// Bytes of one slot: one cache line.
pub const SLOT_BYTES: usize = 64;
/// Payload bytes carried per slot (the rest is the header word).
pub const PAYLOAD_PER_SLOT: usize = 56;
/// Largest ring, in slots.
pub const MAX_CAPACITY: usize = 1 << 24;

const WORDS: usize = PAYLOAD_PER_SLOT / 8;
const LEN_MASK: u64 = 0x7fff_ffff;
const CONT: u64 = 1 << 31;
const SEQ_AND_CONT: u64 = !LEN_MASK;

/// One cache line: header word + 56 payload bytes.
#[repr(C, align(64))]
struct Slot {
    header: AtomicU64,
    data: UnsafeCell<[u64; WORDS]>,
}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Slot>() == SLOT_BYTES);

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

/// One side's rarely-written state: whether it is parked (and which thread to wake)
/// and whether it was dropped.
#[derive(Debug, Default)]
struct Side {
    waiting: AtomicBool,
    closed: AtomicBool,
    thread: std::sync::Mutex<Option<std::thread::Thread>>,
}

impl Side {
    /// Called by the other side after it made progress this side may wait for.
    #[inline(always)]
    fn wake_if_waiting(&self) {
        if self.waiting.load(Ordering::Relaxed) {
            self.wake_slow();
        }
    }

    #[cold]
    fn wake_slow(&self) {
        if self.waiting.swap(false, Ordering::AcqRel) {
            self.unpark();
        }
    }

    fn unpark(&self) {
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = t.as_ref() {
            t.unpark();
        }
    }

    /// Records the calling thread as the one to unpark.
    fn register_current(&self) {
        let me = std::thread::current();
        let mut t = self.thread.lock().unwrap_or_else(|e| e.into_inner());
        if t.as_ref().map(|t| t.id()) != Some(me.id()) {
            *t = Some(me);
        }
    }
}

struct Shared {
    slots: Box<[Slot]>,
    head: CachePadded<AtomicU64>,
    tail: CachePadded<AtomicU64>,
    prod: CachePadded<Side>,
    cons: CachePadded<Side>,
    abort: Option<Abort>,
}

// SAFETY: the only non-Sync part is the slots' payload cells. The ring protocol gives
// exclusive access to each payload: the producer writes a slot only after the
// consumer's `head` (Release, read with Acquire) shows the slot's previous message was
// fully read, and the consumer reads a slot only after its header (written last with
// Release, read with Acquire) announces the new message. No two threads ever access one
// payload concurrently, and there is exactly one Producer and one Consumer.
unsafe impl Sync for Shared {}
// SAFETY: see the Sync impl; the payloads are plain integers with no thread affinity.
unsafe impl Send for Shared {}

/// The sending end of a channel. Not `Clone` and not `Sync`: exactly one thread sends.
pub struct Producer {
    shared: Arc<Shared>,
    /// Next position to write (monotonic).
    tail: u64,
    /// `tail % capacity`.
    idx: usize,
    /// Last consumer position seen.
    cached_head: u64,
    cap: usize,
    policy: WaitPolicy,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

/// The receiving end of a channel. Not `Clone` and not `Sync`: exactly one thread
/// receives.
pub struct Consumer {
    shared: Arc<Shared>,
    /// Next position to read (monotonic).
    head: u64,
    /// `head % capacity`.
    idx: usize,
    /// Last position stored to `shared.head` (acknowledged to the producer).
    published: u64,
    /// Acknowledge after this many slots (and whenever the ring runs empty).
    ack_batch: u64,
    cap: usize,
    policy: WaitPolicy,
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

/// Checked constructor: fails with [`TransportError::InvalidCapacity`] for a capacity of
/// 0 or above [`MAX_CAPACITY`].
pub fn try_channel(
    capacity_slots: usize,
    abort: Option<Abort>,
) -> Result<(Producer, Consumer), TransportError> {
    if capacity_slots == 0 || capacity_slots > MAX_CAPACITY {
        return Err(TransportError::InvalidCapacity(capacity_slots));
    }
    let slots: Box<[Slot]> = (0..capacity_slots)
        .map(|_| Slot {
            header: AtomicU64::new(0),
            data: UnsafeCell::new([0; WORDS]),
        })
        .collect();
    let shared = Arc::new(Shared {
        slots,
        head: CachePadded::new(AtomicU64::new(0)),
        tail: CachePadded::new(AtomicU64::new(0)),
        prod: CachePadded::new(Side::default()),
        cons: CachePadded::new(Side::default()),
        abort,
    });
    let p = Producer {
        shared: shared.clone(),
        tail: 0,
        idx: 0,
        cached_head: 0,
        cap: capacity_slots,
        policy: WaitPolicy::default(),
        _not_sync: PhantomData,
    };
    let c = Consumer {
        shared,
        head: 0,
        idx: 0,
        published: 0,
        ack_batch: default_ack_batch(capacity_slots),
        cap: capacity_slots,
        policy: WaitPolicy::default(),
        _not_sync: PhantomData,
    };
    Ok((p, c))
}

/// What the blocking loop needs from either end.
trait End {
    fn shared(&self) -> &Shared;
    /// The side this end parks on.
    fn side(&self) -> &Side;
    /// The other end's side.
    fn peer(&self) -> &Side;
    fn policy(&self) -> &WaitPolicy;
}

/// Dropping either end: mark it closed and wake the other end if it is parked.
fn close<E: End>(end: &E) {
    end.side().closed.store(true, Ordering::SeqCst);
    let peer = end.peer();
    if peer.waiting.load(Ordering::SeqCst) {
        peer.wake_slow();
    }
}

impl End for Producer {
    #[inline(always)]
    fn shared(&self) -> &Shared {
        &self.shared
    }
    #[inline(always)]
    fn side(&self) -> &Side {
        &self.shared.prod
    }
    #[inline(always)]
    fn peer(&self) -> &Side {
        &self.shared.cons
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
    fn side(&self) -> &Side {
        &self.shared.cons
    }
    #[inline(always)]
    fn peer(&self) -> &Side {
        &self.shared.prod
    }
    #[inline(always)]
    fn policy(&self) -> &WaitPolicy {
        &self.policy
    }
}

/// Acknowledge every `capacity / 16` slots (1 to 32): often enough that the producer
/// rarely finds the ring full for lack of an acknowledgement, rarely enough that the
/// acknowledgement line does not bounce on every message while streaming.
fn default_ack_batch(capacity: usize) -> u64 {
    (capacity / 16).clamp(1, 32) as u64
}

#[inline(always)]
fn would_block(r: &Result<impl Sized, TransportError>) -> bool {
    matches!(r, Err(TransportError::Full) | Err(TransportError::Empty))
}

/// The blocking loop shared by every blocking operation: retry `attempt` while it
/// would block, backing off (spin, yield, then park on the end's side until the peer
/// wakes us or a growing timeout passes). Ends on success, on a real error, on abort,
/// or at the deadline (computed lazily, only once the waiter is about to park).
/// Borrows of the shared state are taken afresh each step (no reference counting on
/// the hot path: the Arc's counters share a cache line with both ends).
/// One attempt inline (the fast path), then [`block_on`] if it would block.
#[inline]
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
            if deadline.is_some_and(|d| now >= d) {
                return Err(TransportError::Timeout(t));
            }
        }
        end.side().register_current();
        if let Some(a) = &end.shared().abort {
            if a.register_current() {
                return Err(TransportError::Aborted);
            }
        }
        end.side().waiting.store(true, Ordering::SeqCst);
        let r = attempt(end);
        if !would_block(&r) {
            end.side().waiting.store(false, Ordering::Relaxed);
            return r;
        }
        let wait = match deadline {
            Some(d) => park.min(d.saturating_duration_since(now)),
            None => park,
        };
        std::thread::park_timeout(wait);
        end.side().waiting.store(false, Ordering::Relaxed);
        park = (park * 2).min(policy.park_max);
    }
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
        (self.tail - self.shared.head.load(Ordering::Acquire)) as usize
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
        self.shared.cons.closed.load(Ordering::Acquire)
    }

    /// How blocking sends wait (default [`WaitPolicy::DEDICATED`]).
    pub fn set_wait_policy(&mut self, p: WaitPolicy) {
        self.policy = p;
    }

    /// True if `n` slots are free; re-reads the consumer's position only when the
    /// cached one says they are not.
    #[inline(always)]
    fn has_room(&mut self, n: usize) -> bool {
        if (self.tail - self.cached_head) as usize + n <= self.cap {
            return true;
        }
        self.cached_head = self.shared.head.load(Ordering::Acquire);
        (self.tail - self.cached_head) as usize + n <= self.cap
    }

    #[inline(always)]
    fn check_room(&mut self, n: usize) -> Result<(), TransportError> {
        if self.shared.cons.closed.load(Ordering::Relaxed) {
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
        self.shared.tail.store(self.tail, Ordering::Relaxed);
        self.shared.cons.wake_if_waiting();
    }

    /// Sends `msg` if there is room now; [`TransportError::Full`] otherwise.
    #[inline]
    pub fn try_send(&mut self, msg: &[u8]) -> Result<(), TransportError> {
        let n = slots_for(msg.len());
        if n > self.cap {
            return Err(TransportError::MessageTooLarge {
                len: msg.len(),
                max: self.max_message_len(),
            });
        }
        self.check_room(n)?;
        let slots = &self.shared.slots;
        // Continuation slots first; their headers need no ordering of their own, the
        // first slot's Release store publishes them.
        let mut i = self.idx;
        for k in 1..n {
            i += 1;
            if i == self.cap {
                i = 0;
            }
            let chunk = &msg[k * PAYLOAD_PER_SLOT..msg.len().min((k + 1) * PAYLOAD_PER_SLOT)];
            let slot = &slots[i];
            slot.data.with_mut(|p| {
                // SAFETY: the slot is free (has_room), so only this producer accesses its
                // payload; chunk.len() <= 56 = size of the payload array.
                unsafe { std::ptr::copy_nonoverlapping(chunk.as_ptr(), p as *mut u8, chunk.len()) }
            });
            slot.header
                .store(seq_bits(self.tail + k as u64) | CONT, Ordering::Relaxed);
        }
        let first = &slots[self.idx];
        let chunk = &msg[..msg.len().min(PAYLOAD_PER_SLOT)];
        first.data.with_mut(|p| {
            // SAFETY: as above, the slot is free and owned by the producer; the chunk fits.
            unsafe { std::ptr::copy_nonoverlapping(chunk.as_ptr(), p as *mut u8, chunk.len()) }
        });
        first
            .header
            .store(seq_bits(self.tail) | msg.len() as u64, Ordering::Release);
        self.advance(n);
        Ok(())
    }

    /// Sends one word (8 bytes) if there is room now: one slot, one payload store.
    #[inline]
    pub fn try_send_word(&mut self, w: u64) -> Result<(), TransportError> {
        self.check_room(1)?;
        let slot = &self.shared.slots[self.idx];
        slot.data.with_mut(|p| {
            // SAFETY: the slot is free, so only this producer accesses its payload.
            unsafe { (*p)[0] = w }
        });
        slot.header
            .store(seq_bits(self.tail) | 8, Ordering::Release);
        self.advance(1);
        Ok(())
    }

    /// Sends an empty (zero-payload) message if there is room now.
    #[inline]
    pub fn try_send_empty(&mut self) -> Result<(), TransportError> {
        self.check_room(1)?;
        self.shared.slots[self.idx]
            .header
            .store(seq_bits(self.tail), Ordering::Release);
        self.advance(1);
        Ok(())
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
    /// right now may not be counted yet).
    pub fn len(&self) -> usize {
        (self
            .shared
            .tail
            .load(Ordering::Acquire)
            .saturating_sub(self.head)) as usize
    }

    /// True if no message is ready to be received.
    pub fn is_empty(&self) -> bool {
        self.ready_header().is_none()
    }

    /// Length of the next message, if one is ready.
    pub fn peek_len(&self) -> Option<usize> {
        self.ready_header().map(|h| (h & LEN_MASK) as usize)
    }

    /// True once the producer was dropped (messages it sent may still be queued).
    pub fn is_disconnected(&self) -> bool {
        self.shared.prod.closed.load(Ordering::Acquire)
    }

    /// How blocking receives wait (default [`WaitPolicy::DEDICATED`]).
    pub fn set_wait_policy(&mut self, p: WaitPolicy) {
        self.policy = p;
    }

    /// Acknowledge consumed slots to the producer at least every `n` slots (clamped to
    /// `1..=capacity`; default `capacity / 16`, 1 to 32). The consumer also
    /// acknowledges whenever it finds the ring empty and whenever the producer is parked
    /// waiting for room, so a producer never stays blocked while the consumer keeps
    /// receiving. `1` acknowledges every message (the strictest flow control: a send
    /// blocks only when `capacity` slots are truly unconsumed).
    pub fn set_ack_batch(&mut self, n: usize) {
        self.ack_batch = n.clamp(1, self.cap) as u64;
    }

    /// Current acknowledgement batch (see [`set_ack_batch`](Consumer::set_ack_batch)).
    pub fn ack_batch(&self) -> usize {
        self.ack_batch as usize
    }

    /// The next message's header if it has been published.
    #[inline(always)]
    fn ready_header(&self) -> Option<u64> {
        let h = self.shared.slots[self.idx].header.load(Ordering::Acquire);
        (h & SEQ_AND_CONT == seq_bits(self.head)).then_some(h)
    }

    /// The next header, or `Empty` / `Disconnected`.
    #[inline(always)]
    fn next_header(&mut self) -> Result<u64, TransportError> {
        if let Some(h) = self.ready_header() {
            return Ok(h);
        }
        if self.published != self.head {
            self.publish();
        }
        if self.shared.prod.closed.load(Ordering::Acquire) {
            // The producer's last message was published before it closed.
            return self.ready_header().ok_or(TransportError::Disconnected);
        }
        Err(TransportError::Empty)
    }

    #[inline(always)]
    fn advance(&mut self, n: usize) {
        self.head += n as u64;
        self.idx += n;
        if self.idx >= self.cap {
            self.idx -= self.cap;
        }
        if self.head - self.published >= self.ack_batch
            || self.shared.prod.waiting.load(Ordering::Relaxed)
        {
            self.publish();
        }
    }

    /// Acknowledges every slot read so far and wakes a producer waiting for room.
    #[inline(always)]
    fn publish(&mut self) {
        self.published = self.head;
        self.shared.head.store(self.head, Ordering::Release);
        self.shared.prod.wake_if_waiting();
    }

    /// Receives the next message into `buf` if one is ready; returns its length.
    /// A too-short `buf` gives [`TransportError::BufferTooSmall`] and leaves the
    /// message queued.
    #[inline]
    pub fn try_recv(&mut self, buf: &mut [u8]) -> Result<usize, TransportError> {
        let h = self.next_header()?;
        let len = (h & LEN_MASK) as usize;
        if buf.len() < len {
            return Err(TransportError::BufferTooSmall {
                needed: len,
                got: buf.len(),
            });
        }
        let n = slots_for(len);
        let slots = &self.shared.slots;
        let mut i = self.idx;
        for k in 0..n {
            let lo = k * PAYLOAD_PER_SLOT;
            let hi = len.min(lo + PAYLOAD_PER_SLOT);
            let dst = &mut buf[lo..hi];
            slots[i].data.with(|p| {
                // SAFETY: the header (Acquire) published this message, so the producer
                // finished writing these slots and will not touch them until `head`
                // moves past them; dst.len() <= 56 = size of the payload array.
                unsafe {
                    std::ptr::copy_nonoverlapping(p as *const u8, dst.as_mut_ptr(), dst.len())
                }
            });
            i += 1;
            if i == self.cap {
                i = 0;
            }
        }
        self.advance(n);
        Ok(len)
    }

    /// Receives a one-word message (sent with `send_word`; an empty message reads as
    /// 0) if one is ready. A longer message gives [`TransportError::NotAWord`] and stays
    /// queued.
    #[inline]
    pub fn try_recv_word(&mut self) -> Result<u64, TransportError> {
        let h = self.next_header()?;
        let len = h & LEN_MASK;
        let w = match len {
            8 => self.shared.slots[self.idx].data.with(|p| {
                // SAFETY: published by the header read above (see try_recv).
                unsafe { (*p)[0] }
            }),
            0 => 0,
            _ => return Err(TransportError::NotAWord { len: len as usize }),
        };
        self.advance(1);
        Ok(w)
    }

    /// Receives the next message into a new vector if one is ready.
    pub fn try_recv_vec(&mut self) -> Result<Vec<u8>, TransportError> {
        let h = self.next_header()?;
        let mut v = vec![0; (h & LEN_MASK) as usize];
        self.try_recv(&mut v)?;
        Ok(v)
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
