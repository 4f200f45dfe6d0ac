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
