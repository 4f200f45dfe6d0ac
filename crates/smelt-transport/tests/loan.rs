//! Loans: a buffer lent to the consumers of several channels at once is read by each
//! exactly as it is; a data message where a loan is expected is refused and stays
//! queued; a loan nobody takes is withdrawn at the deadline or on abort, and the
//! lender returns; rings between processes cannot lend; two ends that lend their
//! buffers for writing fill each other's (`exchange_loans_mut`), and a read-only loan
//! is never handed out for writing.

#![cfg(not(loom))]

use smelt_transport::{
    channel, channel_with_abort, lend_all, lend_while, queuepair, Abort, Link, Producer,
    TransportError,
};
use std::time::{Duration, Instant};

const T: Option<Duration> = Some(Duration::from_secs(20));

#[test]
fn lent_bytes_reach_every_borrower() {
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
    let (mut txs, rxs): (Vec<Producer>, Vec<_>) = (0..3).map(|_| channel(8)).unzip();
    assert!(txs.iter().all(|t| t.can_lend()));
    std::thread::scope(|s| {
        for mut rx in rxs {
            let want = &data;
            s.spawn(move || {
                for round in 0..20u64 {
                    let got = rx
                        .borrow(T, |tag, bytes| {
                            assert_eq!(tag, 40 + round);
                            bytes.to_vec()
                        })
                        .unwrap();
                    assert!(got == want[..got.len()]);
                    assert_eq!(got.len(), want.len() - round as usize);
                }
            });
        }
        for round in 0..20u64 {
            let mut refs: Vec<&mut Producer> = txs.iter_mut().collect();
            lend_all(
                &mut refs,
                40 + round,
                &data[..data.len() - round as usize],
                T,
            )
            .unwrap();
        }
    });
}

#[test]
fn a_data_message_is_not_a_loan_and_stays_queued() {
    let (mut a, mut b) = queuepair(8);
    assert!(a.can_lend() && b.can_lend());
    Link::send(&mut a, 5, b"hello", T).unwrap();
    let e = b.borrow(T, |_, _| ()).unwrap_err();
    assert!(matches!(e, TransportError::NoLoan(_)), "{e}");
    let mut buf = [0u8; 8];
    assert_eq!(Link::recv(&mut b, &mut buf, T).unwrap(), (5, 5));
    // An empty message with nothing lent is no loan either.
    Link::send_empty(&mut a, 6, T).unwrap();
    let e = b.borrow(T, |_, _| ()).unwrap_err();
    assert!(e.to_string().contains("nothing lent"), "{e}");
}

#[test]
fn a_loan_nobody_takes_is_withdrawn_at_the_deadline_or_on_abort() {
    let (mut tx, _rx) = channel(8);
    let t0 = Instant::now();
    let r = lend_all(
        &mut [&mut tx],
        1,
        &[1, 2, 3],
        Some(Duration::from_millis(50)),
    );
    assert!(matches!(r, Err((0, TransportError::Timeout(_)))), "{r:?}");
    assert!(t0.elapsed() < Duration::from_secs(5));

    let abort = Abort::new();
    let (mut tx, _rx) = channel_with_abort(8, &abort);
    let a2 = abort.clone();
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        a2.trigger();
    });
    let r = lend_all(&mut [&mut tx], 1, &[1, 2, 3], None);
    h.join().unwrap();
    assert!(matches!(r, Err((0, TransportError::Aborted))), "{r:?}");

    // The consumer gone: withdrawn too.
    let (mut tx, rx) = channel(8);
    drop(rx);
    let r = lend_all(&mut [&mut tx], 1, &[1, 2, 3], T);
    assert!(r.is_err(), "{r:?}");
}

#[test]
fn rings_between_processes_cannot_lend() {
    use smelt_transport::shm::{RingSpec, ShmJob, ShmMember};
    let job = ShmJob::create(2, &RingSpec::both_ways(0, 1, 8), b"").unwrap();
    let me = ShmMember::attach(job.path(), &job.key(), 0).unwrap();
    let mut tx = me.producer(0).unwrap();
    assert!(!tx.can_lend());
    let r = lend_all(&mut [&mut tx], 1, &[1], T);
    assert!(matches!(r, Err((0, TransportError::NoLoan(_)))), "{r:?}");
    let mut rx = me.consumer(1).unwrap();
    let e = rx.borrow(T, |_, _| ()).unwrap_err();
    assert!(matches!(e, TransportError::NoLoan(_)), "{e}");
}

#[test]
fn two_ends_fill_each_others_lent_buffers() {
    let (mut a, mut b) = queuepair(8);
    let len = 100_003;
    let src: Vec<u8> = (0..len).map(|i| (i * 13 + 1) as u8).collect();
    let mid = len / 2;
    let mut a_buf = src.clone();
    let mut b_buf = vec![0u8; len];
    std::thread::scope(|s| {
        let src = &src;
        s.spawn(move || {
            // b lends its upper part for a to fill, and copies a's lower part.
            let (lo, hi) = b_buf.split_at_mut(mid);
            let n = b
                .exchange_loans_mut(9, hi, T, |tag, theirs| {
                    assert_eq!(tag, 9);
                    lo.copy_from_slice(theirs);
                    theirs.len()
                })
                .unwrap();
            assert_eq!(n, mid);
            assert!(b_buf == *src, "b has a's bytes, both halves");
        });
        let (lo, hi) = a_buf.split_at_mut(mid);
        a.exchange_loans_mut(9, lo, T, |tag, theirs| {
            assert_eq!(tag, 9);
            theirs.copy_from_slice(hi);
        })
        .unwrap();
    });
    assert!(a_buf == src, "the lender's own bytes are unchanged");
}

#[test]
fn a_read_only_loan_is_not_lent_for_writing() {
    let (mut tx, mut rx) = channel(8);
    let data = vec![7u8; 1000];
    std::thread::scope(|s| {
        s.spawn(move || {
            let e = rx.borrow_mut(T, |_, bytes| bytes.fill(0)).unwrap_err();
            assert!(e.to_string().contains("read-only"), "{e}");
        });
        // The loan comes back untouched and the lender returns.
        lend_while(&mut tx, 3, &data, T, || ()).unwrap();
    });
    assert!(data.iter().all(|&b| b == 7));
}
