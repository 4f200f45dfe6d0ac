//! Model check of the ring protocol with loom (every interleaving and every allowed
//! reordering of the atomics, plus data-race detection on the slot payloads).
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p smelt-transport --release --test loom`
#![cfg(loom)]

use smelt_transport::{channel, TransportError};

/// Loom's exhaustive search with a preemption bound (3 unless LOOM_MAX_PREEMPTIONS says
/// otherwise), which keeps the spin-wait loops' state space small.
fn bounded() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b
}

#[test]
fn loom_words_wrap_around_with_flow_control() {
    bounded().check(|| {
        let (mut tx, mut rx) = channel(1);
        let t = loom::thread::spawn(move || {
            for i in 0..2u64 {
                tx.send_word(i + 10).unwrap();
            }
        });
        for i in 0..2u64 {
            assert_eq!(rx.recv_word().unwrap(), i + 10);
        }
        t.join().unwrap();
        assert_eq!(rx.recv_word(), Err(TransportError::Disconnected));
    });
}

#[test]
fn loom_multi_slot_message_is_published_whole() {
    bounded().check(|| {
        let (mut tx, mut rx) = channel(2);
        let t = loom::thread::spawn(move || {
            let msg: Vec<u8> = (0..90u8).collect();
            tx.send(&msg).unwrap();
            tx.send(&[7u8; 3]).unwrap();
        });
        let mut buf = [0u8; 96];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(n, 90);
        assert!(buf[..90].iter().enumerate().all(|(i, &b)| b == i as u8));
        assert_eq!(rx.recv(&mut buf).unwrap(), 3);
        assert_eq!(&buf[..3], &[7, 7, 7]);
        t.join().unwrap();
    });
}

#[test]
fn loom_try_ops_and_disconnect() {
    bounded().check(|| {
        let (mut tx, mut rx) = channel(2);
        let t = loom::thread::spawn(move || {
            let mut sent = 0u64;
            while sent < 2 {
                match tx.try_send_word(sent) {
                    Ok(()) => sent += 1,
                    Err(TransportError::Full) => loom::thread::yield_now(),
                    Err(e) => panic!("{e}"),
                }
            }
        });
        let mut got = Vec::new();
        loop {
            match rx.try_recv_word() {
                Ok(w) => got.push(w),
                Err(TransportError::Empty) => loom::thread::yield_now(),
                Err(TransportError::Disconnected) => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, vec![0, 1]);
        t.join().unwrap();
    });
}

#[test]
fn loom_batched_acknowledgements() {
    bounded().check(|| {
        let (mut tx, mut rx) = channel(3);
        rx.set_ack_batch(2);
        let t = loom::thread::spawn(move || {
            for i in 0..4u64 {
                tx.send_word(i).unwrap();
            }
        });
        for i in 0..4u64 {
            assert_eq!(rx.recv_word().unwrap(), i);
        }
        t.join().unwrap();
    });
}

#[test]
fn loom_blocking_receiver_sees_last_message_then_disconnect() {
    bounded().check(|| {
        let (mut tx, mut rx) = channel(2);
        let t = loom::thread::spawn(move || {
            tx.send(&[1, 2, 3]).unwrap();
            drop(tx);
        });
        let mut buf = [0u8; 8];
        assert_eq!(rx.recv(&mut buf), Ok(3));
        assert_eq!(&buf[..3], &[1, 2, 3]);
        assert_eq!(rx.recv(&mut buf), Err(TransportError::Disconnected));
        t.join().unwrap();
    });
}

#[test]
fn loom_blocked_sender_sees_consumer_drop() {
    bounded().check(|| {
        let (mut tx, mut rx) = channel(1);
        tx.send_word(1).unwrap();
        let t = loom::thread::spawn(move || {
            assert_eq!(rx.recv_word(), Ok(1));
            drop(rx);
        });
        // Either the slot was freed and this send lands before the drop, or the
        // consumer is gone: never a hang, never a lost error.
        let r = tx.send_word(2);
        assert!(r.is_ok() || r == Err(TransportError::Disconnected), "{r:?}");
        t.join().unwrap();
        assert_eq!(tx.send_word(3), Err(TransportError::Disconnected));
    });
}

/// The consumer of the sleep-bit queue: pops until it has `n` items, sleeping whenever
/// a pop finds nothing. Under loom the sleep has no timeout, so a lost wake-up (an item
/// queued while the consumer sleeps and nobody rings) is a deadlock loom reports.
fn sleepq_consume(q: &smelt_transport::SleepQueue<u64>, n: u64) -> u64 {
    let mut sum = 0;
    let mut got = 0;
    while got < n {
        let seen = q.observe();
        match q.pop() {
            Some(v) => {
                sum += v;
                got += 1;
            }
            None => {
                q.sleep(seen, std::time::Duration::from_secs(1));
            }
        }
    }
    sum
}

#[test]
fn loom_sleepq_no_lost_wakeup_one_producer() {
    use loom::sync::Arc;
    bounded().check(|| {
        let q = Arc::new(smelt_transport::SleepQueue::new(2).unwrap());
        let p = q.clone();
        let t = loom::thread::spawn(move || {
            p.push(1).unwrap();
            p.push(2).unwrap();
        });
        assert_eq!(sleepq_consume(&q, 2), 3);
        t.join().unwrap();
        assert!(!q.is_sleeping());
    });
}

#[test]
fn loom_sleepq_no_lost_wakeup_two_producers() {
    use loom::sync::Arc;
    bounded().check(|| {
        let q = Arc::new(smelt_transport::SleepQueue::new(2).unwrap());
        let ts: Vec<_> = (0..2u64)
            .map(|i| {
                let p = q.clone();
                loom::thread::spawn(move || p.push(10 + i).unwrap())
            })
            .collect();
        assert_eq!(sleepq_consume(&q, 2), 21);
        for t in ts {
            t.join().unwrap();
        }
    });
}

/// The protocol on bare atomics, the consumer announcing its sleep either with the CAS
/// against the value it observed before its empty pop (as `SleepQueue` does) or
/// blindly (`fetch_or`). Property: if the consumer goes to sleep, the producer wakes it.
fn sleep_bit_model(blind: bool) {
    use loom::sync::atomic::{AtomicU64, Ordering};
    use loom::sync::Arc;
    bounded().check(move || {
        // (counter: published << 1 | sleeping, the one slot)
        let st = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        let p = st.clone();
        let t = loom::thread::spawn(move || {
            p.1.store(7, Ordering::Release);
            let old = p.0.fetch_add(2, Ordering::AcqRel);
            old & 1 != 0 && p.0.fetch_and(!1, Ordering::AcqRel) & 1 != 0
        });
        let seen = st.0.load(Ordering::Acquire) & !1;
        let empty = st.1.load(Ordering::Acquire) != 7;
        let slept = empty
            && if blind {
                st.0.fetch_or(1, Ordering::AcqRel);
                true
            } else {
                st.0.compare_exchange(seen, seen | 1, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            };
        let woke = t.join().unwrap();
        assert!(!slept || woke, "lost wake-up");
    });
}

#[test]
fn loom_sleep_bit_cas_never_loses_a_wakeup() {
    sleep_bit_model(false);
}

/// The blind variant: loom finds the push that lands between the empty pop and the
/// announcement, and nobody wakes the sleeper. Shows the model can fail.
#[test]
#[should_panic(expected = "lost wake-up")]
fn loom_sleep_bit_blind_loses_a_wakeup() {
    sleep_bit_model(true);
}

/// Two-party barriers on a queuepair: both ends' marks, one end a barrier ahead (it
/// writes the other word), a message between two barriers delivered, and a barrier
/// never left before the peer entered it.
#[test]
fn loom_pair_barrier_holds_and_lets_one_end_run_ahead() {
    use loom::sync::atomic::{AtomicU64, Ordering};
    use loom::sync::Arc;
    use smelt_transport::{queuepair, Link};
    bounded().check(|| {
        let (mut a, mut b) = queuepair(2);
        let entered = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let e2 = entered.clone();
        let t = loom::thread::spawn(move || {
            e2[1].store(1, Ordering::SeqCst);
            assert_eq!(b.pair_barrier(11, None).unwrap(), None);
            assert!(e2[0].load(Ordering::SeqCst) >= 1);
            Link::send_word(&mut b, 12, 5, None).unwrap();
            e2[1].store(2, Ordering::SeqCst);
            assert_eq!(b.pair_barrier(13, None).unwrap(), None);
            assert!(e2[0].load(Ordering::SeqCst) >= 2);
        });
        entered[0].store(1, Ordering::SeqCst);
        assert_eq!(a.pair_barrier(11, None).unwrap(), None);
        assert!(entered[1].load(Ordering::SeqCst) >= 1);
        assert_eq!(Link::recv_word(&mut a, None).unwrap(), (12, 5));
        entered[0].store(2, Ordering::SeqCst);
        assert_eq!(a.pair_barrier(13, None).unwrap(), None);
        assert!(entered[1].load(Ordering::SeqCst) >= 2);
        t.join().unwrap();
    });
}

/// One end in a barrier, the other sending a message: the barrier reports the
/// message's tag (which stays queued); then the sender enters the barrier too.
#[test]
fn loom_pair_barrier_sees_a_message_instead() {
    use smelt_transport::{queuepair, Link};
    bounded().check(|| {
        let (mut a, mut b) = queuepair(2);
        let t = loom::thread::spawn(move || {
            Link::send_word(&mut b, 21, 9, None).unwrap();
            assert_eq!(b.pair_barrier(22, None).unwrap(), None);
        });
        assert_eq!(a.pair_barrier(22, None).unwrap(), Some(21));
        assert_eq!(Link::recv_word(&mut a, None).unwrap(), (21, 9));
        // The peer entered barrier 22 meanwhile: its mark is still there to match.
        assert_eq!(a.rx.wait_mark(22, None).unwrap(), None);
        t.join().unwrap();
    });
}
