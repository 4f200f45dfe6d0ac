//! Functional tests of channels and queuepairs.

use smelt_transport::*;
use std::time::Duration;

fn stress() -> u64 {
    smelt_transport::stress_scale()
}

/// A deterministic message of `len` bytes for sequence number `seq`.
fn pattern(seq: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seq.wrapping_mul(31).wrapping_add(i as u64 * 7) & 0xff) as u8)
        .collect()
}

#[test]
fn fifo_single_thread_with_wraparound() {
    let (mut tx, mut rx) = channel(4);
    let mut buf = [0u8; 64];
    for round in 0..50u64 {
        for k in 0..3 {
            let m = pattern(
                round * 3 + k,
                (round as usize + k as usize) % (PAYLOAD_PER_SLOT + 1),
            );
            tx.try_send(&m).unwrap();
        }
        for k in 0..3 {
            let m = pattern(
                round * 3 + k,
                (round as usize + k as usize) % (PAYLOAD_PER_SLOT + 1),
            );
            let n = rx.try_recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &m[..], "round {round} msg {k}");
        }
        assert!(rx.is_empty());
    }
}

#[test]
fn full_and_empty_states() {
    let (mut tx, mut rx) = channel(3);
    assert!(rx.is_empty());
    assert_eq!(tx.free_slots(), 3);
    assert_eq!(rx.try_recv_word(), Err(TransportError::Empty));
    tx.try_send_word(1).unwrap();
    tx.try_send_empty().unwrap();
    tx.try_send(b"x").unwrap();
    assert!(tx.is_full());
    assert_eq!(tx.len(), 3);
    assert_eq!(rx.len(), 3);
    assert_eq!(tx.try_send_word(9), Err(TransportError::Full));
    assert_eq!(rx.peek_len(), Some(8));
    assert_eq!(rx.try_recv_word().unwrap(), 1);
    assert_eq!(tx.free_slots(), 1);
    assert_eq!(rx.try_recv_word().unwrap(), 0);
    // A bytes message is not a word and stays queued.
    assert_eq!(rx.try_recv_word(), Err(TransportError::NotAWord { len: 1 }));
    assert_eq!(rx.try_recv_vec().unwrap(), b"x");
    assert!(rx.is_empty());
    assert_eq!(tx.len(), 0);
}

#[test]
fn multi_slot_messages_and_limits() {
    let (mut tx, mut rx) = channel(5);
    assert_eq!(tx.max_message_len(), 5 * PAYLOAD_PER_SLOT);
    let big = pattern(7, 5 * PAYLOAD_PER_SLOT);
    assert_eq!(
        tx.try_send(&[0u8; 5 * PAYLOAD_PER_SLOT + 1]),
        Err(TransportError::MessageTooLarge {
            len: 5 * PAYLOAD_PER_SLOT + 1,
            max: 5 * PAYLOAD_PER_SLOT
        })
    );
    // Blocking send of a too-large message errors too (never hangs).
    assert!(matches!(
        tx.send(&[0u8; 1000]),
        Err(TransportError::MessageTooLarge { .. })
    ));
    tx.try_send(b"ab").unwrap();
    // 4 slots free, big needs 5.
    assert_eq!(tx.try_send(&big), Err(TransportError::Full));
    let mut small = [0u8; 1];
    assert_eq!(
        rx.try_recv(&mut small),
        Err(TransportError::BufferTooSmall { needed: 2, got: 1 })
    );
    assert_eq!(rx.try_recv_vec().unwrap(), b"ab");
    // Now the big one wraps around the ring end.
    tx.try_send(&big).unwrap();
    assert!(tx.is_full());
    assert_eq!(rx.try_recv_vec().unwrap(), big);
    for len in [55, 56, 57, 112, 113, 200] {
        let m = pattern(len as u64, len);
        tx.try_send(&m).unwrap();
        assert_eq!(rx.try_recv_vec().unwrap(), m, "len {len}");
    }
}

#[test]
fn invalid_capacity_is_an_error() {
    assert_eq!(
        try_channel(0, None).err(),
        Some(TransportError::InvalidCapacity(0))
    );
    assert!(try_channel(MAX_CAPACITY + 1, None).is_err());
}

#[test]
fn timeouts_fire() {
    let (mut tx, mut rx) = channel(1);
    assert_eq!(
        rx.recv_word_timeout(Duration::from_millis(20)),
        Err(TransportError::Timeout(Duration::from_millis(20)))
    );
    tx.send_word(1).unwrap();
    assert!(matches!(
        tx.send_word_timeout(2, Duration::from_millis(5)),
        Err(TransportError::Timeout(_))
    ));
    let mut b = [0u8; 8];
    assert_eq!(rx.recv_timeout(&mut b, Duration::from_millis(5)), Ok(8));
    // A huge timeout means no deadline (no Instant overflow) while parked.
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(20));
            tx.send_word(3).unwrap();
        });
        assert_eq!(rx.recv_timeout(&mut b, Duration::MAX), Ok(8));
    });
    assert!(matches!(
        rx.recv_timeout(&mut b, Duration::from_millis(5)),
        Err(TransportError::Timeout(_))
    ));
}

#[test]
fn disconnect_is_seen_by_both_ends() {
    let (mut tx, mut rx) = channel(2);
    tx.send_word(5).unwrap();
    drop(tx);
    assert!(rx.is_disconnected());
    // Queued messages are still delivered, then Disconnected.
    assert_eq!(rx.recv_word(), Ok(5));
    assert_eq!(rx.recv_word(), Err(TransportError::Disconnected));

    let (mut tx, rx) = channel(2);
    drop(rx);
    assert_eq!(tx.send_word(1), Err(TransportError::Disconnected));
    assert!(tx.is_disconnected());
}

#[test]
fn disconnect_wakes_a_parked_receiver() {
    let (tx, mut rx) = channel(2);
    std::thread::scope(|s| {
        let h = s.spawn(move || rx.recv_word());
        std::thread::sleep(Duration::from_millis(30));
        drop(tx);
        assert_eq!(h.join().unwrap(), Err(TransportError::Disconnected));
    });
}

#[test]
fn disconnect_wakes_a_blocked_sender() {
    let (mut tx, rx) = channel(1);
    tx.send_word(1).unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(move || tx.send_word(2));
        std::thread::sleep(Duration::from_millis(30));
        drop(rx);
        assert_eq!(h.join().unwrap(), Err(TransportError::Disconnected));
    });
}

#[test]
fn abort_wakes_waiters() {
    let abort = Abort::new();
    let (_tx, mut rx) = channel_with_abort(4, &abort);
    let (mut tx2, _rx2) = channel_with_abort(1, &abort);
    tx2.send_word(0).unwrap();
    std::thread::scope(|s| {
        let a = s.spawn(move || rx.recv_word());
        let b = s.spawn(move || tx2.send_word(1));
        std::thread::sleep(Duration::from_millis(30));
        abort.trigger();
        assert_eq!(a.join().unwrap(), Err(TransportError::Aborted));
        assert_eq!(b.join().unwrap(), Err(TransportError::Aborted));
    });
    assert!(abort.is_triggered());
}

/// Many messages of mixed sizes through a small ring between two threads, checking
/// order and contents: exercises wrap-around, flow control and multi-slot messages
/// under contention.
#[test]
fn two_threads_mixed_sizes_in_order() {
    let n = if cfg!(miri) { 300 } else { 20_000 * stress() };
    let (mut tx, mut rx) = channel(8);
    std::thread::scope(|s| {
        s.spawn(move || {
            for seq in 0..n {
                let len = (seq % 300) as usize;
                tx.send(&pattern(seq, len)).unwrap();
            }
        });
        let mut buf = vec![0u8; 8 * PAYLOAD_PER_SLOT];
        for seq in 0..n {
            let len = rx.recv(&mut buf).unwrap();
            assert_eq!(len, (seq % 300) as usize);
            assert_eq!(&buf[..len], &pattern(seq, len)[..], "message {seq}");
        }
        assert_eq!(rx.recv_word(), Err(TransportError::Disconnected));
    });
}

/// Word messages with sequence checks over one queuepair, both directions at once.
/// Default 10^6 messages each way; `SMELT_STRESS=300` sends 3*10^8.
#[test]
fn stress_queuepair_sequence() {
    let n = if cfg!(miri) {
        500
    } else {
        1_000_000 * stress()
    };
    let (mut a, b) = queuepair(64);
    std::thread::scope(|s| {
        s.spawn(move || {
            let (mut tx, mut rx) = b.split();
            std::thread::scope(|s2| {
                s2.spawn(move || {
                    for i in 0..n {
                        tx.send_word(i ^ 0xdead_beef).unwrap();
                    }
                });
                for i in 0..n {
                    assert_eq!(rx.recv_word().unwrap(), i, "b got out of order");
                }
            });
        });
        std::thread::scope(|s2| {
            let tx = &mut a.tx;
            s2.spawn(move || {
                for i in 0..n {
                    tx.send_word(i).unwrap();
                }
            });
            for i in 0..n {
                assert_eq!(
                    a.rx.recv_word().unwrap(),
                    i ^ 0xdead_beef,
                    "a got out of order"
                );
            }
        });
    });
}

/// More threads than cores: 16 channels in a chain, each stage forwarding; every stage
/// must progress (backoff must not livelock).
#[test]
fn oversubscribed_chain_progresses() {
    let stages = 16;
    let n = if cfg!(miri) { 20 } else { 2_000 * stress() };
    let mut txs = Vec::new();
    let mut rxs = Vec::new();
    for _ in 0..stages {
        let (t, r) = channel(4);
        txs.push(t);
        rxs.push(r);
    }
    let mut first = txs.remove(0);
    let mut last = rxs.pop().unwrap();
    std::thread::scope(|s| {
        for (mut rx, mut tx) in rxs.into_iter().zip(txs) {
            rx.set_wait_policy(WaitPolicy::OVERSUBSCRIBED);
            tx.set_wait_policy(WaitPolicy::OVERSUBSCRIBED);
            s.spawn(move || {
                for _ in 0..n {
                    let w = rx.recv_word().unwrap();
                    tx.send_word(w + 1).unwrap();
                }
            });
        }
        s.spawn(move || {
            for i in 0..n {
                first.send_word(i).unwrap();
            }
        });
        for i in 0..n {
            assert_eq!(last.recv_word().unwrap(), i + stages as u64 - 1);
        }
    });
}

#[test]
fn backoff_completes() {
    let mut b = Backoff::with_policy(&WaitPolicy::OVERSUBSCRIBED);
    let mut steps = 0;
    while !b.is_completed() {
        b.snooze();
        steps += 1;
        assert!(steps < 1000);
    }
    b.reset();
    assert!(!b.is_completed());
}

#[test]
#[cfg_attr(miri, ignore = "sched_setaffinity is a foreign call")]
fn affinity_queries() {
    let cpus = allowed_cpus().unwrap();
    assert!(!cpus.is_empty());
    std::thread::spawn(move || {
        pin_current_thread(smelt_ids::CpuId(cpus[0])).unwrap();
        assert_eq!(allowed_cpus().unwrap(), vec![cpus[0]]);
        assert_eq!(current_cpu(), Some(cpus[0]));
        assert!(pin_current_thread(smelt_ids::CpuId(100_000)).is_err());
    })
    .join()
    .unwrap();
}

#[test]
fn acknowledgements_are_batched_but_never_withheld() {
    // The default: an eighth of the ring, 1 to 64 slots.
    for (cap, batch) in [(2, 1), (16, 2), (64, 8), (1024, 64)] {
        assert_eq!(channel(cap).1.ack_batch(), batch, "capacity {cap}");
    }
    let (mut tx, mut rx) = channel(64);
    rx.set_ack_batch(16);
    for i in 0..64 {
        tx.try_send_word(i).unwrap();
    }
    for i in 0..10 {
        assert_eq!(rx.try_recv_word().unwrap(), i);
    }
    // Not acknowledged yet: the producer still sees a full ring.
    assert_eq!(tx.try_send_word(99), Err(TransportError::Full));
    for i in 10..16 {
        assert_eq!(rx.try_recv_word().unwrap(), i);
    }
    assert_eq!(tx.free_slots(), 16);
    for i in 16..64 {
        assert_eq!(rx.try_recv_word().unwrap(), i);
    }
    // Finding the ring empty acknowledges everything.
    assert_eq!(rx.try_recv_word(), Err(TransportError::Empty));
    assert_eq!(tx.free_slots(), 64);

    // A producer parked on a full ring is acknowledged by the next receive even
    // within a batch; a slow consumer therefore never stalls it.
    let (mut tx, mut rx) = channel(8);
    rx.set_ack_batch(8);
    let n = if cfg!(miri) { 12 } else { 40 };
    std::thread::scope(|s| {
        s.spawn(move || {
            for i in 0..n {
                tx.send_word(i).unwrap();
            }
        });
        for i in 0..n {
            std::thread::sleep(Duration::from_micros(300));
            assert_eq!(rx.recv_word_timeout(Duration::from_secs(10)), Ok(i));
        }
    });
}
