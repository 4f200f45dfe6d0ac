//! A bounded lock-free queue whose consumer can sleep, with the sleeping bit kept in
//! the queue's counter (Endo and Taura, "Parallelized software offloading of low-level
//! communication with user-level threads", HPC Asia 2018).
//!
//! Many producers (application threads) hand items to one consumer (a communication
//! thread). The ring is Vyukov's bounded queue: each slot has a sequence word, a
//! producer claims a slot with a CAS on the enqueue position, writes the item and
//! publishes the slot with a `Release` store of its sequence; the consumer takes a
//! slot whose sequence says "full" and hands it back with a `Release` store.
//!
//! # Sleeping without a lost wake-up
//!
//! Next to the ring sits one more word, the **counter**: twice the number of items
//! published so far, plus the [`SLEEPING`](SleepQueue::observe) bit (bit 0).
//!
//! * **Producer** ([`SleepQueue::push`]): writes its slot, then `fetch_add(2)` on the
//!   counter. Only if the old value had the sleeping bit does it clear the bit
//!   (`fetch_and`) and, if it was the one that cleared it, ring the consumer's bell (a
//!   futex wake: the only system call, off the fast path). The fast path is one CAS on
//!   the enqueue position, one store of the slot and one `fetch_add`: no mutex, no
//!   condition variable, no system call.
//! * **Consumer** ([`SleepQueue::sleep`]): reads the counter (`observe`, `Acquire`)
//!   *before* its last [`pop`](SleepQueue::pop) found nothing, reads the bell, and then
//!   announces its sleep with `compare_exchange(observed, observed | SLEEPING)`. It parks
//!   on the bell only if that CAS succeeded, at most the timeout it was given, and
//!   clears the bit when it wakes.
//!
//! Why no item is ever left behind a sleeping consumer: all read-modify-writes of the
//! counter are totally ordered (one location's modification order), so there is no
//! store-buffer race to fence against (unlike the two-word handshake of `wake.rs`).
//! Take any push and its `fetch_add`:
//!
//! 1. If the `fetch_add` comes before the consumer's `observe` in the counter's order,
//!    the `observe` (`Acquire`) reads it or a later value, so it synchronises with the
//!    `fetch_add` (`Release`, and the later RMWs continue its release sequence); the slot
//!    write happens-before the consumer's `pop`, which therefore finds the item.
//! 2. If the `fetch_add` comes after the `observe` but before the sleep CAS, the counter
//!    no longer equals the observed value: the CAS fails and the consumer goes on
//!    popping instead of sleeping.
//! 3. If the `fetch_add` comes after the CAS, it reads a value with the sleeping bit
//!    (only the consumer clears it, or a producer that then wakes it), so the producer
//!    rings the bell. The consumer read the bell's generation before its CAS, and the
//!    producer's `fetch_add` (`AcqRel`) read the CAS (`AcqRel`), so that read
//!    happens-before the ring: the futex wait compares against the old generation and
//!    returns at once if the ring came first.
//!
//! The park is bounded by the caller's timeout anyway, so a sleeping consumer also
//! notices shutdown and work that arrives by other paths (an incoming message).
//!
//! The protocol is model-checked with loom (`tests/loom.rs`: under loom the bell is a
//! mutex and condition variable without timeout, so a lost wake-up is a deadlock loom
//! reports) and stressed in `tests/sleepq.rs`.

use crate::error::TransportError;
use crate::sync::{AtomicU32, AtomicU64, Ordering, UnsafeCell};
use crossbeam_utils::CachePadded;
use std::mem::MaybeUninit;
use std::time::Duration;

/// The sleeping bit in the counter word.
const SLEEPING: u64 = 1;
/// What one published item adds to the counter.
const ONE: u64 = 2;

/// The largest capacity accepted.
pub const SLEEPQ_MAX_CAPACITY: usize = 1 << 24;

struct Slot<T> {
    seq: AtomicU64,
    val: UnsafeCell<MaybeUninit<T>>,
}

/// How a call of [`SleepQueue::sleep`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SleepOutcome {
    /// The counter moved since it was observed: an item was published, do not sleep.
    Raced,
    /// Slept and was woken by a producer (or by [`SleepQueue::wake`]).
    Woken,
    /// Slept until the timeout.
    TimedOut,
}

/// The consumer's doorbell: a generation word (a futex outside loom).
struct Bell {
    gen: CachePadded<AtomicU32>,
    #[cfg(loom)]
    lock: loom::sync::Mutex<()>,
    #[cfg(loom)]
    cv: loom::sync::Condvar,
}

impl Bell {
    fn new() -> Bell {
        Bell {
            gen: CachePadded::new(AtomicU32::new(0)),
            #[cfg(loom)]
            lock: loom::sync::Mutex::new(()),
            #[cfg(loom)]
            cv: loom::sync::Condvar::new(),
        }
    }

    fn generation(&self) -> u32 {
        self.gen.load(Ordering::Acquire)
    }

    fn ring(&self) {
        self.gen.fetch_add(1, Ordering::Release);
        #[cfg(loom)]
        {
            let _g = self.lock.lock().unwrap();
            self.cv.notify_all();
        }
        #[cfg(not(loom))]
        crate::wake::futex_wake(&self.gen);
    }

    /// Waits while the generation is `seen`; returns true if it moved. Under loom the
    /// wait has no timeout, so a wake-up that never comes is a deadlock.
    fn wait(&self, seen: u32, timeout: Duration) -> bool {
        #[cfg(loom)]
        {
            let _ = timeout;
            let mut g = self.lock.lock().unwrap();
            while self.gen.load(Ordering::Acquire) == seen {
                g = self.cv.wait(g).unwrap();
            }
            true
        }
        #[cfg(not(loom))]
        {
            let deadline = std::time::Instant::now() + timeout;
            loop {
                if self.gen.load(Ordering::Acquire) != seen {
                    return true;
                }
                let now = std::time::Instant::now();
                if now >= deadline {
                    return false;
                }
                crate::wake::futex_wait(&self.gen, seen, deadline - now);
            }
        }
    }
}

/// A bounded multi-producer queue with one sleeping consumer; see the module docs.
///
/// ```
/// use smelt_transport::{SleepQueue, SleepOutcome};
/// use std::time::Duration;
/// let q = std::sync::Arc::new(SleepQueue::new(8).unwrap());
/// let q2 = q.clone();
/// let consumer = std::thread::spawn(move || {
///     let mut got = 0u64;
///     while got < 3 {
///         let seen = q2.observe();
///         match q2.pop() {
///             Some(v) => got += v,
///             None => { q2.sleep(seen, Duration::from_millis(10)); }
///         }
///     }
///     got
/// });
/// for _ in 0..3 { q.push(1u64).unwrap(); }
/// assert_eq!(consumer.join().unwrap(), 3);
/// ```
pub struct SleepQueue<T> {
    slots: Box<[Slot<T>]>,
    mask: u64,
    enq: CachePadded<AtomicU64>,
    deq: CachePadded<AtomicU64>,
    counter: CachePadded<AtomicU64>,
    bell: Bell,
    wakes: AtomicU64,
}

// SAFETY: items move between threads through the slots (hence T: Send); a slot's
// value is accessed only by the thread that owns it by the sequence protocol.
unsafe impl<T: Send> Send for SleepQueue<T> {}
// SAFETY: as above; every shared access goes through atomics or through a slot owned
// exclusively by the claiming thread.
unsafe impl<T: Send> Sync for SleepQueue<T> {}

impl<T> std::fmt::Debug for SleepQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SleepQueue")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish()
    }
}

impl<T> SleepQueue<T> {
    /// A queue of `capacity` slots (rounded up to a power of two, 1 to
    /// [`SLEEPQ_MAX_CAPACITY`]).
    pub fn new(capacity: usize) -> Result<SleepQueue<T>, TransportError> {
        if capacity == 0 || capacity > SLEEPQ_MAX_CAPACITY {
            return Err(TransportError::InvalidCapacity(capacity));
        }
        let cap = capacity.next_power_of_two();
        let slots = (0..cap as u64)
            .map(|i| Slot {
                seq: AtomicU64::new(i),
                val: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect::<Vec<_>>()
            .into_boxed_slice();
        Ok(SleepQueue {
            slots,
            mask: cap as u64 - 1,
            enq: CachePadded::new(AtomicU64::new(0)),
            deq: CachePadded::new(AtomicU64::new(0)),
            counter: CachePadded::new(AtomicU64::new(0)),
            bell: Bell::new(),
            wakes: AtomicU64::new(0),
        })
    }

    /// The number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Items queued now (a snapshot).
    pub fn len(&self) -> usize {
        let e = self.enq.load(Ordering::Relaxed);
        let d = self.deq.load(Ordering::Relaxed);
        e.saturating_sub(d) as usize
    }

    /// True if nothing is queued now (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Items published so far.
    pub fn published(&self) -> u64 {
        self.counter.load(Ordering::Relaxed) / ONE
    }

    /// How many times a producer found the consumer asleep and woke it.
    pub fn wakes(&self) -> u64 {
        self.wakes.load(Ordering::Relaxed)
    }

    /// True while the consumer has announced its sleep and nobody has woken it.
    pub fn is_sleeping(&self) -> bool {
        self.counter.load(Ordering::Relaxed) & SLEEPING != 0
    }

    /// Queues `v`; gives it back if the queue is full. Wakes the consumer if it sleeps.
    pub fn push(&self, v: T) -> Result<(), T> {
        let mut pos = self.enq.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[(pos & self.mask) as usize];
            let seq = slot.seq.load(Ordering::Acquire);
            if seq == pos {
                match self.enq.compare_exchange_weak(
                    pos,
                    pos + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // The CAS made this thread the only owner of the slot until it
                        // publishes it (seq = pos + 1); the consumer released the previous
                        // value (seq == pos), so it holds no live value.
                        // SAFETY: as argued in the lines above.
                        slot.val.with_mut(|p| unsafe { (*p).write(v) });
                        slot.seq.store(pos + 1, Ordering::Release);
                        self.publish();
                        return Ok(());
                    }
                    Err(p) => pos = p,
                }
            } else if seq < pos {
                // The slot still holds the value of the previous lap: full.
                return Err(v);
            } else {
                pos = self.enq.load(Ordering::Relaxed);
            }
        }
    }

    /// Bumps the counter; wakes the consumer if it announced its sleep.
    #[inline]
    fn publish(&self) {
        let old = self.counter.fetch_add(ONE, Ordering::AcqRel);
        if old & SLEEPING != 0 {
            self.wake_if_sleeping();
        }
    }

    #[cold]
    fn wake_if_sleeping(&self) {
        let old = self.counter.fetch_and(!SLEEPING, Ordering::AcqRel);
        if old & SLEEPING != 0 {
            self.wakes.fetch_add(1, Ordering::Relaxed);
            self.bell.ring();
        }
    }

    /// Wakes the consumer if it sleeps (shutdown, or work that arrived by another path).
    pub fn wake(&self) {
        self.wake_if_sleeping();
    }

    /// Takes the oldest published item, if any. Several consumers may pop, but only one
    /// may [`sleep`](SleepQueue::sleep) on a queue.
    pub fn pop(&self) -> Option<T> {
        let mut pos = self.deq.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[(pos & self.mask) as usize];
            let seq = slot.seq.load(Ordering::Acquire);
            if seq == pos + 1 {
                match self.deq.compare_exchange_weak(
                    pos,
                    pos + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // Seq == pos + 1 (Acquire) says the producer wrote the value and
                        // published it; the CAS made this thread the only one to take it;
                        // after the read the slot is handed back below.
                        // SAFETY: as argued in the lines above.
                        let v = slot.val.with(|p| unsafe { (*p).assume_init_read() });
                        slot.seq.store(pos + self.mask + 1, Ordering::Release);
                        return Some(v);
                    }
                    Err(p) => pos = p,
                }
            } else if seq <= pos {
                // Not yet published (empty, or a producer is still writing).
                return None;
            } else {
                pos = self.deq.load(Ordering::Relaxed);
            }
        }
    }

    /// The counter as the consumer sees it: call it before the [`pop`](SleepQueue::pop)
    /// whose emptiness makes it want to sleep, and pass the value to
    /// [`sleep`](SleepQueue::sleep).
    #[inline]
    pub fn observe(&self) -> u64 {
        self.counter.load(Ordering::Acquire) & !SLEEPING
    }

    /// Sleeps unless an item was published since `observed` (see the module docs):
    /// announces the sleep with a CAS on the counter, parks at most `timeout` (to be
    /// woken by the next push), and clears the sleeping bit before returning.
    pub fn sleep(&self, observed: u64, timeout: Duration) -> SleepOutcome {
        let gen = self.bell.generation();
        if self
            .counter
            .compare_exchange(
                observed,
                observed | SLEEPING,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return SleepOutcome::Raced;
        }
        let woken = self.bell.wait(gen, timeout);
        // Clear the bit ourselves after a timeout (a producer clears it when it wakes us).
        self.counter.fetch_and(!SLEEPING, Ordering::AcqRel);
        if woken {
            SleepOutcome::Woken
        } else {
            SleepOutcome::TimedOut
        }
    }
}

impl<T> Drop for SleepQueue<T> {
    fn drop(&mut self) {
        while self.pop().is_some() {}
    }
}
