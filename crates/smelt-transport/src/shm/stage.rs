//! Staging buffers: single-copy transfers of medium and large messages between the
//! processes of one job.
//!
//! A ring's slots carry 48 payload bytes per 64-byte line and every byte is copied
//! twice (into the ring, out of it); threads lend their buffers instead
//! ([`crate::lend_all`]), which processes cannot. A **stage** is the processes' middle
//! way: a few large buffers per direction of a link, carved from the job's arena
//! ([`ShmMember::arena_stage`]). The sender copies a chunk into its next free buffer
//! once ([`Stage::send`]) and sends a one-word descriptor on the link's ring (so
//! staged chunks keep their place among the link's other messages, with their tag);
//! the receiver takes the descriptor and hands the buffer itself to a closure
//! ([`Stage::recv`]), which combines the chunk straight into its own data (or copies
//! it out), then releases the buffer. One copy and one read, at memory speed, instead
//! of two copies through cache-line slots.
//!
//! Layout of one stage (both directions of one link), in the arena:
//! * a line recording the pair of members and claiming each side (as
//!   [`ShmMember::arena_link`]'s);
//! * per direction (lower rank to higher first): a control line pair (`released`,
//!   written by the receiver: buffers it gave back; `waiting`, written by the sender
//!   before it sleeps on `released`), a header line per buffer (`seq`, `len`: written
//!   by the sender after the bytes, with `Release`), then the buffers.
//!
//! What the receiver may rely on: it reads a buffer only after the descriptor arrived
//! and the buffer's header carries the chunk's sequence number (`Acquire`: the bytes
//! the sender copied before are visible), and the sender writes a buffer again only
//! after the receiver released it. Waits are bounded: a sender waiting for a buffer
//! checks the peer's process (its liveness lock), the job's abort flag, the link's
//! [`Abort`] and its deadline at every park (≤ 1 ms), so a receiver that dies
//! mid-transfer fails the sender with [`TransportError::PeerDied`], never a hang; a
//! receiver waits on the ring, which does the same.

use super::{Mapping, ShmMember, ARENA_ALIGN};
use crate::channel::Remote;
use crate::{Abort, Backoff, Link, TransportError, WaitPolicy};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bit set in the tag of a staged chunk's descriptor (beside the caller's tag): a
/// receiver that expects ring data sees another tag, and one that expects a staged
/// chunk and gets data sees this bit clear.
pub const STAGED_TAG: u64 = 1 << 52;

/// Largest number of buffers per direction.
pub const MAX_STAGE_SLOTS: usize = 64;
/// Largest buffer.
pub const MAX_STAGE_BYTES: usize = 64 << 20;

/// Bytes of a header line per buffer.
const HEADER: usize = 64;

/// Bytes one direction's control lines and headers take.
const fn control_bytes(slots: usize) -> usize {
    (2 * ARENA_ALIGN + slots * HEADER).next_multiple_of(ARENA_ALIGN)
}

/// Bytes of the arena a stage of `slots` buffers of `bytes` bytes per direction takes
/// ([`ShmMember::arena_stage`]).
pub const fn arena_stage_bytes(slots: usize, bytes: usize) -> usize {
    ARENA_ALIGN + 2 * (control_bytes(slots) + slots * bytes.next_multiple_of(ARENA_ALIGN))
}

/// One direction's memory: control words, headers, buffers.
#[derive(Clone, Copy)]
struct Dir {
    /// Buffers the receiver gave back (wrapping); written by the receiver only.
    released: *const AtomicU32,
    /// 1 while the sender sleeps on `released`; written by the sender only.
    waiting: *const AtomicU32,
    /// First header line: `seq` (u64: chunk number + 1) then `len` (u64).
    headers: *mut u8,
    /// First buffer.
    data: *mut u8,
}

impl Dir {
    /// # Safety
    /// `p` points at `control_bytes(slots) + slots * stride` bytes of the mapping,
    /// 128-byte aligned, that stay mapped while the caller's `Arc<Mapping>` lives.
    unsafe fn at(p: *mut u8, slots: usize) -> Dir {
        // SAFETY: all offsets lie inside the part (the caller's contract).
        unsafe {
            Dir {
                released: p as *const AtomicU32,
                waiting: p.add(ARENA_ALIGN) as *const AtomicU32,
                headers: p.add(2 * ARENA_ALIGN),
                data: p.add(control_bytes(slots)),
            }
        }
    }
}

/// This member's end of a staged link to one peer ([`ShmMember::arena_stage`]): send
/// chunks of up to [`chunk`](Stage::chunk) bytes with [`send`](Stage::send) and
/// receive them with [`recv`](Stage::recv), the descriptors going over the link's
/// own ring (any [`Link`] to the same peer, in the same job). Keeps the segment mapped
/// while it lives.
pub struct Stage {
    map: Arc<Mapping>,
    peer: u32,
    abort: Option<Abort>,
    wait: WaitPolicy,
    out: Dir,
    inn: Dir,
    slots: u32,
    bytes: usize,
    stride: usize,
    /// Chunks sent (64 bits: never wraps, so chunk `i` is always in buffer
    /// `i % slots`; the shared counters hold the low 32 bits).
    sent: u64,
    /// Chunks received and released (wrapping).
    taken: u64,
    /// The last `released` seen (saves a line transfer while buffers are free).
    seen_released: u32,
}

// SAFETY: a Stage's pointers point into a mapping its Arc keeps alive; the memory is
// shared with other processes anyway and reached only through atomics and the
// protocol described at the top of this module (one sender and one receiver per
// direction: each side is claimed once).
unsafe impl Send for Stage {}

impl std::fmt::Debug for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stage")
            .field("peer", &self.peer)
            .field("slots", &self.slots)
            .field("chunk", &self.bytes)
            .field("sent", &self.sent)
            .field("taken", &self.taken)
            .finish()
    }
}

impl ShmMember {
    /// This member's end of the stage at arena offset `offset` (which takes
    /// [`arena_stage_bytes`]`(slots, bytes)` bytes) to member `peer`: `slots`
    /// buffers (1 to [`MAX_STAGE_SLOTS`]) of `bytes` bytes (1 to [`MAX_STAGE_BYTES`])
    /// each way. As [`arena_link`](Self::arena_link): each side is opened once, by
    /// one of the two members; waits end when `abort` is raised, and wait as `wait`.
    pub fn arena_stage(
        &self,
        offset: u64,
        slots: usize,
        bytes: usize,
        peer: u32,
        abort: Option<Abort>,
        wait: WaitPolicy,
    ) -> Result<Stage, TransportError> {
        let me = self.rank;
        if peer == me || peer >= self.members() {
            return Err(TransportError::NotYours(format!(
                "a stage from member {me} to member {peer} in a job of {} members",
                self.members()
            )));
        }
        if !(1..=MAX_STAGE_SLOTS).contains(&slots) || !(1..=MAX_STAGE_BYTES).contains(&bytes) {
            return Err(TransportError::NotYours(format!(
                "a stage of {slots} buffers of {bytes} bytes (1 to {MAX_STAGE_SLOTS} buffers of 1 to {MAX_STAGE_BYTES} bytes)"
            )));
        }
        crate::wake::init();
        let p = self
            .arena_part(offset, arena_stage_bytes(slots, bytes) as u64)
            .map_err(|e| TransportError::NotYours(e.to_string()))?;
        super::claim_pair_end(p, me, peer, offset, "stage")?;
        let stride = bytes.next_multiple_of(ARENA_ALIGN);
        let dir = control_bytes(slots) + slots * stride;
        // Both directions lie inside the part (`arena_stage_bytes`), 128-byte aligned, zero
        // until first used; this member is the only sender of one and the only receiver of
        // the other (claimed above, once per side); the mapping lives as long as
        // `self.map`, whose clone the Stage holds.
        // SAFETY: as argued in the lines above.
        let (low_to_high, high_to_low) = unsafe {
            (
                Dir::at(p.add(ARENA_ALIGN), slots),
                Dir::at(p.add(ARENA_ALIGN + dir), slots),
            )
        };
        let (out, inn) = if me < peer {
            (low_to_high, high_to_low)
        } else {
            (high_to_low, low_to_high)
        };
        Ok(Stage {
            map: self.map.clone(),
            peer,
            abort,
            wait,
            out,
            inn,
            slots: slots as u32,
            bytes,
            stride,
            sent: 0,
            taken: 0,
            seen_released: 0,
        })
    }
}

impl Stage {
    /// Largest chunk one [`send`](Self::send) carries.
    pub fn chunk(&self) -> usize {
        self.bytes
    }

    /// Buffers per direction.
    pub fn slots(&self) -> usize {
        self.slots as usize
    }

    /// The member at the other end.
    pub fn peer(&self) -> u32 {
        self.peer
    }

    fn released(&self, d: Dir) -> &AtomicU32 {
        // SAFETY: inside the mapping `self.map` keeps alive (Dir::at's contract).
        unsafe { &*d.released }
    }

    fn waiting(&self, d: Dir) -> &AtomicU32 {
        // SAFETY: as for `released`.
        unsafe { &*d.waiting }
    }

    fn header(&self, d: Dir, i: u64) -> (&AtomicU64, &AtomicU64) {
        let i = (i % self.slots as u64) as usize;
        // Header `i < slots` lies inside the part (Dir::at's contract), 8-byte
        // aligned; its words are only accessed atomically.
        // SAFETY: as argued in the lines above.
        unsafe {
            let h = d.headers.add(i * HEADER);
            (&*(h as *const AtomicU64), &*(h.add(8) as *const AtomicU64))
        }
    }

    /// Copies `data` (at most [`chunk`](Self::chunk) bytes) into the next outgoing
    /// buffer, waiting at most `timeout` for the peer to release one, then sends its
    /// descriptor on `link` (the link to the same peer) as a word tagged
    /// `tag |` [`STAGED_TAG`]. Failures: the peer's death
    /// ([`TransportError::PeerDied`]), an abort, the deadline, and the link's own.
    pub fn send<L: Link>(
        &mut self,
        link: &mut L,
        tag: u64,
        data: &[u8],
        timeout: Option<Duration>,
    ) -> Result<(), TransportError> {
        if data.len() > self.bytes {
            return Err(TransportError::MessageTooLarge {
                len: data.len(),
                max: self.bytes,
            });
        }
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        if (self.sent as u32).wrapping_sub(self.seen_released) >= self.slots {
            self.wait_released(deadline, timeout)?;
        }
        let i = self.sent;
        let (seq, len) = self.header(self.out, i);
        let at = (i % self.slots as u64) as usize * self.stride;
        // Buffer `i % slots` lies inside this direction (Dir::at's contract) and holds
        // `bytes >= data.len()` bytes; this member is its only writer, and the receiver
        // released it (`sent - released < slots`, Acquire in `wait_released`), so nobody
        // reads it until the header below says so.
        // SAFETY: as argued in the lines above.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.out.data.add(at), data.len());
        }
        len.store(data.len() as u64, Ordering::Relaxed);
        seq.store(i + 1, Ordering::Release);
        self.sent = i + 1;
        link.send_word(tag | STAGED_TAG, data.len() as u64, timeout)
    }

    /// Waits until the peer released a buffer (sent − released < slots).
    #[cold]
    fn wait_released(
        &mut self,
        deadline: Option<Instant>,
        timeout: Option<Duration>,
    ) -> Result<(), TransportError> {
        let released = self.released(self.out);
        let mut backoff = Backoff::with_policy(&self.wait);
        let mut park = self.wait.park_initial;
        loop {
            let r = released.load(Ordering::Acquire);
            if (self.sent as u32).wrapping_sub(r) < self.slots {
                self.seen_released = r;
                return Ok(());
            }
            if self.map.aborted() || self.abort.as_ref().is_some_and(Abort::is_triggered) {
                return Err(TransportError::Aborted);
            }
            if !backoff.is_completed() {
                backoff.snooze();
                continue;
            }
            if !self.map.peer_alive(self.peer) {
                return Err(TransportError::PeerDied { peer: self.peer });
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(TransportError::Timeout(timeout.unwrap_or_default()));
            }
            // The store-buffer handshake (see wake.rs): flag, fence, re-check; the
            // receiver stores `released`, fences, then reads the flag.
            let waiting = self.waiting(self.out);
            waiting.store(1, Ordering::SeqCst);
            crate::wake::waiter_fence();
            let r2 = released.load(Ordering::Acquire);
            if r2 == r {
                crate::wake::futex_wait(released, r, park);
                park = (park * 2).min(self.wait.park_max);
            }
            waiting.store(0, Ordering::Relaxed);
        }
    }

    /// Receives the next staged chunk from `link` (the link to the same peer),
    /// waiting at most `timeout`: `f(tag, bytes)` gets the descriptor's tag (without
    /// [`STAGED_TAG`]) and the chunk as it lies in the buffer, then the buffer goes
    /// back to the sender. A message that is not a staged chunk's descriptor (another
    /// tag, or data) is left queued and answered `Ok(Err((tag, len)))`: the tag as
    /// sent (0 for data, whose tag stays unread) and its length in bytes. A descriptor
    /// that does not match the buffer (a sender outside the protocol) is
    /// [`TransportError::NotYours`].
    pub fn recv<L: Link, R>(
        &mut self,
        link: &mut L,
        timeout: Option<Duration>,
        f: impl FnOnce(u64, &[u8]) -> R,
    ) -> Result<Result<R, (u64, usize)>, TransportError> {
        let (tag, w) = match link.recv_word(timeout) {
            Ok(x) => x,
            // Data where a descriptor was due (left queued; its tag unread).
            Err(TransportError::NotAWord { len }) => return Ok(Err((0, len))),
            Err(e) => return Err(e),
        };
        if tag & STAGED_TAG == 0 {
            return Ok(Err((tag, 8)));
        }
        let i = self.taken;
        let (seq, len) = self.header(self.inn, i);
        let n = w as usize;
        if seq.load(Ordering::Acquire) != i + 1
            || len.load(Ordering::Relaxed) != w
            || n > self.bytes
        {
            return Err(TransportError::NotYours(format!(
                "member {}'s staged chunk {i} does not match its descriptor ({w} bytes)",
                self.peer
            )));
        }
        /// Gives the buffer back and counts the chunk taken when `f` returns or
        /// unwinds (a panic in `f` must not leave `taken` behind `released`: the next
        /// receive would read this buffer again as the next chunk).
        struct Release<'a>(&'a mut Stage);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                let s = &mut *self.0;
                s.taken += 1;
                let released = s.released(s.inn);
                released.store(s.taken as u32, Ordering::Release);
                crate::wake::waker_fence();
                let waiting = s.waiting(s.inn);
                if waiting.load(Ordering::Relaxed) != 0 {
                    crate::wake::futex_wake(released);
                }
            }
        }
        let at = (i % self.slots as u64) as usize * self.stride;
        // Buffer `i % slots` of `n <= bytes` bytes inside this direction, not written while
        // borrowed; the mapping outlives `_back`'s borrow. The header's `seq` (Acquire,
        // above) is stored by the sender with Release after it copied the bytes, and the
        // sender writes this buffer again only after `released` passes it, which `_back`
        // stores once `f` returned; `f` cannot keep the slice.
        // SAFETY: as argued in the lines above.
        let bytes = unsafe { std::slice::from_raw_parts(self.inn.data.add(at), n) };
        let _back = Release(self);
        Ok(Ok(f(tag & !STAGED_TAG, bytes)))
    }
}
