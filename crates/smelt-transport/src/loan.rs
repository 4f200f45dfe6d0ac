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
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
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
    /// The loan may be written (lent from a `&mut [u8]` by [`exchange`];
    /// [`Consumer::borrow_mut`] takes only such a loan). Stored before `state` = POSTED (Release).
    writable: AtomicBool,
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
        let t = self.take_loan(timeout, false)?;
        // `t.ptr`/`t.len` were stored from a live `&[u8]` (or `&mut [u8]`) by the lender
        // before it set POSTED (Release); `take_loan`'s POSTED -> TAKEN (Acquire) makes
        // them and the bytes visible. The lender holds that borrow (nothing else writes
        // the bytes) and does not return while the state is TAKEN, i.e. until `t._back`
        // stores DONE after `f` returned; `f` cannot keep the slice (its lifetime ends
        // with the call). A zero-length loan may carry a dangling but aligned pointer,
        // which from_raw_parts accepts for len 0.
        // SAFETY: a live, unaliased-for-writes buffer of `len` bytes.
        let data = unsafe { std::slice::from_raw_parts(t.ptr, t.len) };
        Ok(f(t.tag, data))
    }

    /// As [`borrow`](Consumer::borrow), for a loan the producer lent for writing
    /// ([`Link::exchange_loans_mut`](crate::Link::exchange_loans_mut)): `f` may write the lent bytes (the lender reads them once
    /// its call returns). A read-only loan is given back untouched and gives
    /// [`TransportError::NoLoan`].
    pub fn borrow_mut<R>(
        &mut self,
        timeout: Option<Duration>,
        f: impl FnOnce(u64, &mut [u8]) -> R,
    ) -> Result<R, TransportError> {
        let t = self.take_loan(timeout, true)?;
        // `t.ptr`/`t.len` were stored from a live `&mut [u8]` (the writable flag, checked
        // by `take_loan`, is set only from one: `exchange`'s `Lent::Exclusive`) before
        // POSTED (Release), made visible by `take_loan`'s Acquire. The lender holds that
        // exclusive borrow and neither it nor its `borrow` closure can touch the bytes
        // (the borrow is moved into the call) until the state leaves TAKEN, which only
        // `t._back` does after `f` returned; only this consumer took the loan (the CAS
        // from POSTED), so this is the one reference to the bytes meanwhile, and `f`
        // cannot keep it. Zero length: a dangling, aligned pointer is valid.
        // SAFETY: an exclusively lent buffer of `len` bytes.
        let data = unsafe { std::slice::from_raw_parts_mut(t.ptr, t.len) };
        Ok(f(t.tag, data))
    }

    /// Receives a loan's signal and takes the loan (POSTED -> TAKEN); with `write`,
    /// only a writable one (a read-only one is given back).
    fn take_loan(
        &mut self,
        timeout: Option<Duration>,
        write: bool,
    ) -> Result<Taken<'_>, TransportError> {
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
        if write && !b.writable.load(Ordering::Relaxed) {
            drop(GiveBack(b));
            return Err(TransportError::NoLoan(
                "a read-only loan where a writable one was expected".into(),
            ));
        }
        Ok(Taken {
            tag,
            ptr: b.ptr.load(Ordering::Relaxed) as *mut u8,
            len: b.len.load(Ordering::Relaxed),
            _back: GiveBack(b),
        })
    }
}

/// A loan [`Consumer::take_loan`] took: its signal's tag, the lent bytes' address
/// and length, and the guard that gives it back.
struct Taken<'a> {
    tag: u64,
    ptr: *mut u8,
    len: usize,
    /// Gives the loan back when the borrow ends (dropped with it).
    _back: GiveBack<'a>,
}

/// Gives a taken loan back when dropped (after the borrower's closure returned or
/// unwound) and wakes the lender.
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
        b.writable.store(false, Ordering::Relaxed);
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
    exchange(to, tag, Lent::Shared(data), timeout, || Ok(during()))
}

/// A buffer an end lends ([`exchange`]): read-only, or for writing.
pub(crate) enum Lent<'a> {
    Shared(&'a [u8]),
    Exclusive(&'a mut [u8]),
}

/// Lends `data` on `to` and, while it is out, runs `during` (one end's half of an
/// exchange of loans: it borrows the peer's loan), then waits for the loan to come
/// back ([`lend_while`]'s body). When `during` fails, this end's loan is withdrawn
/// (or, if the peer already took it, waited for) instead of waited for, and its error
/// returned: the exchange failed, and the peer learns it from its own borrow or from
/// the group's abort.
pub(crate) fn exchange<R>(
    to: &mut Producer,
    tag: u64,
    data: Lent<'_>,
    timeout: Option<Duration>,
    during: impl FnOnce() -> Result<R, TransportError>,
) -> Result<R, TransportError> {
    // `data` stays borrowed (read-only, or exclusively) until this returns.
    let (ptr, len, writable) = match data {
        Lent::Shared(d) => (d.as_ptr() as usize, d.len(), false),
        Lent::Exclusive(d) => (d.as_mut_ptr() as usize, d.len(), true),
    };
    let Some(b) = to.ring().loan_box() else {
        return Err(TransportError::NoLoan(
            "a channel between processes: nothing can be lent".into(),
        ));
    };
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    debug_assert_eq!(b.state.load(Ordering::Acquire), IDLE);
    *b.lender.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::thread::current());
    b.ptr.store(ptr, Ordering::Relaxed);
    b.len.store(len, Ordering::Relaxed);
    b.writable.store(writable, Ordering::Relaxed);
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
    let back = wait_returned(back.0, deadline, timeout, r.is_err());
    let r = r?;
    back.map(|()| r)
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
