//! Loans: single-copy transfers of large buffers between the two ends of a channel
//! whose ends are threads of one process.
//!
//! A ring's cache-line slots carry 48 payload bytes each and every byte is copied
//! twice (into the ring, out of it). For large messages between threads the sender
//! can instead *lend* its buffer: [`lend_all`] publishes the buffer's address in the
//! ring's loan box, sends an empty message with the caller's tag as the signal, and
//! waits until every receiver has given it back; [`Consumer::borrow`] receives the
//! signal, takes the loan and hands the lent bytes to a closure (which copies them
//! out, or combines them into its own data in place), then gives it back. One copy
//! (or none) instead of two, at the speed of `memcpy` between cores.
//!
//! The buffer never leaves the lender's borrow: [`lend_all`] returns only once no
//! receiver can read it any more (given back, or withdrawn before any receiver took
//! it), and the address travels only through the ring's own loan box, never as
//! message data, so no message a peer sends can make a receiver read memory that was
//! not lent. Rings in memory shared between processes have no loan box: there,
//! [`Producer::can_lend`] is false and callers send fragments as usual.

use crate::channel::{Consumer, Producer};
use crate::{Backoff, TransportError};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Nothing lent.
const IDLE: u32 = 0;
/// Lent, not taken yet: the lender may still withdraw it.
const POSTED: u32 = 1;
/// Taken: the receiver is reading the buffer.
const TAKEN: u32 = 2;
/// Given back: the receiver no longer reads it.
const DONE: u32 = 3;

/// One ring's loan box: written by the producer (`ptr`, `len`, then `state` =
/// POSTED, Release), taken by the consumer (POSTED -> TAKEN, Acquire), given back
/// (DONE, Release), reset by the producer (IDLE) after it saw DONE (Acquire).
#[derive(Default)]
pub(crate) struct LoanBox {
    state: AtomicU32,
    ptr: AtomicUsize,
    len: AtomicUsize,
    /// The lending thread, unparked when the loan comes back.
    lender: Mutex<Option<std::thread::Thread>>,
}

impl Producer {
    /// True if this end can lend buffers to its consumer ([`lend_all`]): both ends
    /// are threads of this process.
    pub fn can_lend(&self) -> bool {
        self.ring().loan_box().is_some()
    }
}

impl Consumer {
    /// True if this end can borrow what its producer lends ([`Consumer::borrow`]).
    pub fn can_lend(&self) -> bool {
        self.ring().loan_box().is_some()
    }

    /// Receives a loan (the signal [`lend_all`] sends, tagged) and calls `f(tag,
    /// bytes)` with the lent bytes, then gives the loan back. `f` sees the tag first
    /// and may decline to read. Waits for the signal at most `timeout`. A data message
    /// where a loan was expected, or a signal with nothing lent, gives
    /// [`TransportError::NoLoan`] (a data message stays queued).
    pub fn borrow<R>(
        &mut self,
        timeout: Option<Duration>,
        f: impl FnOnce(u64, &[u8]) -> R,
    ) -> Result<R, TransportError> {
        if self.ring().loan_box().is_none() {
            return Err(TransportError::NoLoan(
                "a channel between processes (nothing can be lent across them)".into(),
            ));
        }
        let tag = match self.recv_tagged(&mut [], timeout) {
            Ok((tag, _)) => tag,
            Err(TransportError::BufferTooSmall { needed, .. }) => {
                return Err(TransportError::NoLoan(format!("a {needed}-byte message")))
            }
            Err(e) => return Err(e),
        };
        let b = self.ring().loan_box().expect("checked above");
        if b.state
            .compare_exchange(POSTED, TAKEN, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(TransportError::NoLoan(
                "an empty message with nothing lent".into(),
            ));
        }
        /// Gives the loan back when `f` returns or unwinds.
        struct GiveBack<'a>(&'a LoanBox);
        impl Drop for GiveBack<'_> {
            fn drop(&mut self) {
                self.0.state.store(DONE, Ordering::Release);
                let lender = self.0.lender.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(t) = lender.as_ref() {
                    t.unpark();
                }
            }
        }
        let _back = GiveBack(b);
        let (ptr, len) = (
            b.ptr.load(Ordering::Relaxed) as *const u8,
            b.len.load(Ordering::Relaxed),
        );
        // `ptr`/`len` were stored from a live `&[u8]` by `lend_all` before it set POSTED
        // (Release); our POSTED -> TAKEN (Acquire) makes them and the bytes visible.
        // `lend_all` holds that shared borrow (nothing can write the bytes) and does not
        // return while the state is TAKEN, i.e. until `_back` stores DONE after `f`
        // returned; `f` cannot keep the slice (its lifetime ends with the call). A zero-
        // length loan may carry a dangling but aligned pointer, which from_raw_parts
        // accepts for len 0.
        // SAFETY: a live, unaliased-for-writes buffer of `len` bytes.
        let data = unsafe { std::slice::from_raw_parts(ptr, len) };
        Ok(f(tag, data))
    }
}

/// Lends `data` to the consumer of every producer in `tos` at once (each receives
/// the signal tagged `tag` and reads the buffer with [`Consumer::borrow`], all in
/// parallel) and returns once every one of them gave it back. On a failure (a send
/// or a wait past `timeout`, an abort, a consumer gone) the loans not taken yet are
/// withdrawn and those taken are waited for (a taker only copies: bounded), then the
/// first failure is returned with the index of its producer. Producers that cannot
/// lend ([`Producer::can_lend`]) fail with [`TransportError::NoLoan`] before anything
/// is lent.
pub fn lend_all(
    tos: &mut [&mut Producer],
    tag: u64,
    data: &[u8],
    timeout: Option<Duration>,
) -> Result<(), (usize, TransportError)> {
    if let Some(i) = tos.iter().position(|p| !p.can_lend()) {
        return Err((
            i,
            TransportError::NoLoan("a channel between processes: nothing can be lent".into()),
        ));
    }
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    let mut result = Ok(());
    let mut posted = 0;
    for (i, p) in tos.iter_mut().enumerate() {
        let b = p.ring().loan_box().expect("can_lend checked");
        // Every loan ends IDLE before `lend_all` returns (given back, or withdrawn).
        debug_assert_eq!(b.state.load(Ordering::Acquire), IDLE);
        *b.lender.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::thread::current());
        b.ptr.store(data.as_ptr() as usize, Ordering::Relaxed);
        b.len.store(data.len(), Ordering::Relaxed);
        b.state.store(POSTED, Ordering::Release);
        posted = i + 1;
        if let Err(e) = p.send_empty_tagged(tag, timeout) {
            result = Err((i, e));
            break;
        }
    }
    for (i, p) in tos.iter().enumerate().take(posted) {
        let r = wait_returned(p, deadline, timeout, result.is_err());
        if let (Err(e), Ok(())) = (r, &result) {
            result = Err((i, e));
        }
    }
    result
}

/// Lends `data` to `to`'s consumer and, while the loan is out, runs `during` (which
/// typically borrows what the peer lends on the other ring of the queuepair, so two
/// ends exchange loans at once and each reads the other's buffer in parallel); then
/// waits until the loan is given back (or withdraws it, on a failure or past
/// `timeout`) and returns `during`'s result. If `during` unwinds, the loan is
/// withdrawn or waited for before the unwinding goes on, so the buffer is never read
/// after this returns. The lent bytes stay borrowed for the whole call: `during`
/// cannot write them.
pub fn lend_while<R>(
    to: &mut Producer,
    tag: u64,
    data: &[u8],
    timeout: Option<Duration>,
    during: impl FnOnce() -> R,
) -> Result<R, TransportError> {
    let Some(b) = to.ring().loan_box() else {
        return Err(TransportError::NoLoan(
            "a channel between processes: nothing can be lent".into(),
        ));
    };
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    debug_assert_eq!(b.state.load(Ordering::Acquire), IDLE);
    *b.lender.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::thread::current());
    b.ptr.store(data.as_ptr() as usize, Ordering::Relaxed);
    b.len.store(data.len(), Ordering::Relaxed);
    b.state.store(POSTED, Ordering::Release);
    /// Withdraws or waits for the loan if `during` unwinds.
    struct Back<'a>(&'a Producer, bool);
    impl Drop for Back<'_> {
        fn drop(&mut self) {
            if self.1 {
                let _ = wait_returned(self.0, None, None, true);
            }
        }
    }
    if let Err(e) = to.send_empty_tagged(tag, timeout) {
        let _ = wait_returned(to, deadline, timeout, true);
        return Err(e);
    }
    let mut back = Back(to, true);
    let r = during();
    back.1 = false;
    wait_returned(back.0, deadline, timeout, false).map(|()| r)
}

/// Waits until `p`'s loan is given back, or withdraws it (not taken yet) when
/// `give_up` is set, the deadline passed, the ring was aborted or its consumer is gone.
fn wait_returned(
    p: &Producer,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
    give_up: bool,
) -> Result<(), TransportError> {
    let b = p.ring().loan_box().expect("lent");
    // The producer's own wait policy: with more threads than CPUs the borrowers need
    // the CPU this thread would spin on (DEDICATED's spin is tens of microseconds).
    let policy = *p.wait_policy();
    let mut backoff = Backoff::with_policy(&policy);
    let mut park = policy.park_initial.min(Duration::from_micros(20));
    loop {
        match b.state.load(Ordering::Acquire) {
            DONE => {
                b.state.store(IDLE, Ordering::Relaxed);
                return Ok(());
            }
            POSTED => {
                let failure = if give_up || p.ring().is_aborted() {
                    Some(TransportError::Aborted)
                } else if p.is_disconnected() {
                    Some(TransportError::Disconnected)
                } else if deadline.is_some_and(|d| Instant::now() >= d) {
                    Some(TransportError::Timeout(timeout.unwrap_or_default()))
                } else {
                    None
                };
                if let Some(e) = failure {
                    if b.state
                        .compare_exchange(POSTED, IDLE, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        return if give_up { Ok(()) } else { Err(e) };
                    }
                    // Taken meanwhile: wait for it to come back.
                    continue;
                }
            }
            // TAKEN: the receiver is reading; it only copies or combines, so this
            // ends without waiting on anything else.
            _ => {}
        }
        if backoff.is_completed() {
            std::thread::park_timeout(park);
            park = (park * 2).min(policy.park_max);
        } else {
            backoff.snooze();
        }
    }
}
