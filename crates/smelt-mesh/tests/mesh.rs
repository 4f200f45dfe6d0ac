//! Point-to-point messaging (`smelt_mesh::mesh`): any-to-any sends, waiting on many
//! links at once, departures, timeouts, abort, and many members on few CPUs.

use smelt_mesh::mesh::{Mesh, MeshBuilder, MeshError};
use smelt_mesh::Rank;
use smelt_transport::{
    stress_scale, try_queuepair, Link, QueuePairEnd, TransportError, WaitPolicy,
};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

#[test]
fn try_recv_again_drains_the_last_sender_and_leaves_the_rest_to_try_recv_any() {
    let mut m = MeshBuilder::new(3).all_to_all().build().unwrap();
    let mut c = m.pop().unwrap();
    let mut b = m.pop().unwrap();
    let mut a = m.pop().unwrap();
    let mut buf = [0u8; 64];
    // Nothing received yet: nothing to look at again.
    assert_eq!(a.try_recv_again(&mut buf), Ok(None));
    for t in 0..3 {
        b.send_word(Rank(0), 10 + t, t, T).unwrap();
    }
    c.send_word(Rank(0), 20, 0, T).unwrap();
    assert_eq!(a.try_recv_any(&mut buf), Ok(Some((Rank(1), 10, 8))));
    // Member 1's next messages, in order, then nothing there (member 2's waits).
    assert_eq!(a.try_recv_again(&mut buf), Ok(Some((Rank(1), 11, 8))));
    assert_eq!(a.try_recv_again(&mut buf), Ok(Some((Rank(1), 12, 8))));
    assert_eq!(a.try_recv_again(&mut buf), Ok(None));
    assert_eq!(a.try_recv_any(&mut buf), Ok(Some((Rank(2), 20, 8))));
    // A departure is not reported here but by try_recv_any.
    drop(c);
    assert_eq!(a.try_recv_again(&mut buf), Ok(None));
    assert!(matches!(
        a.try_recv_any(&mut buf),
        Err(MeshError::PeerGone { peer: Rank(2), .. })
    ));
    // Reported, its link is gone: a send to it is refused without waiting.
    assert_eq!(
        a.try_send(Rank(2), 0, b"x"),
        Err(MeshError::PeerGone {
            rank: Rank(0),
            peer: Rank(2)
        })
    );
}

#[test]
fn ping_pong_and_tags() {
    let mut m = MeshBuilder::new(2).all_to_all().build().unwrap();
    let mut b = m.pop().unwrap();
    let mut a = m.pop().unwrap();
    assert_eq!((a.rank(), b.rank(), a.size()), (Rank(0), Rank(1), 2));
    assert_eq!(a.peers(), vec![Rank(1)]);
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut buf = [0u8; 256];
            for i in 0..1000u64 {
                let (from, tag, n) = b.recv_any(&mut buf, T).unwrap();
                assert_eq!((from, tag, n), (Rank(0), i, (i % 200) as usize));
                assert!(buf[..n].iter().all(|&x| x == i as u8));
                b.send_word(Rank(0), i + 1, i * 3, T).unwrap();
            }
        });
        let mut buf = [0u8; 8];
        for i in 0..1000u64 {
            a.send(Rank(1), i, &vec![i as u8; (i % 200) as usize], T)
                .unwrap();
            let (tag, n) = a.recv_from(Rank(1), &mut buf, T).unwrap();
            assert_eq!((tag, n, u64::from_le_bytes(buf)), (i + 1, 8, i * 3));
        }
    });
}

/// Every member sends `k` numbered messages to every other member, in an order of its
/// own, over small rings (sends wait for room while peers also send): each member gets
/// every message, in order per sender, and nobody deadlocks.
fn all_to_all(n: usize, k: u64, capacity: usize) {
    let meshes = MeshBuilder::new(n)
        .all_to_all()
        .capacity(capacity)
        .build()
        .unwrap();
    let start = Instant::now();
    std::thread::scope(|s| {
        for mut m in meshes {
            s.spawn(move || {
                let me = m.rank().index();
                let mut next_from = vec![0u64; n];
                let mut got = 0u64;
                let want = k * (n as u64 - 1);
                let mut buf = [0u8; 64];
                let check =
                    |next_from: &mut [u64], from: Rank, tag: u64, len: usize, buf: &[u8]| {
                        assert_eq!(tag, next_from[from], "member {me} from {from}");
                        assert_eq!(len, 16);
                        assert_eq!(&buf[..8], &(from.index() as u64).to_le_bytes());
                        assert_eq!(&buf[8..16], &tag.to_le_bytes());
                        next_from[from] += 1;
                    };
                for i in 0..k {
                    for d in 1..n {
                        // Every other member once, in an order that depends on `me`.
                        let to = Rank((me + if me % 2 == 0 { d } else { n - d }) % n);
                        let mut msg = [0u8; 16];
                        msg[..8].copy_from_slice(&(me as u64).to_le_bytes());
                        msg[8..].copy_from_slice(&i.to_le_bytes());
                        m.send(to, i, &msg, T).unwrap();
                    }
                    // Receive what is there without waiting.
                    loop {
                        match m.try_recv_any(&mut buf) {
                            Ok(Some((from, tag, len))) => {
                                check(&mut next_from, from, tag, len, &buf);
                                got += 1;
                            }
                            Ok(None) => break,
                            // A member that got all it wanted left.
                            Err(MeshError::PeerGone { peer, .. }) => {
                                assert_eq!(next_from[peer], k, "{peer} left early");
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                // Members that are done leave; what they sent is still received, and
                // their departure is reported after it.
                while got < want {
                    match m.recv_any(&mut buf, T) {
                        Ok((from, tag, len)) => {
                            check(&mut next_from, from, tag, len, &buf);
                            got += 1;
                        }
                        Err(MeshError::PeerGone { peer, .. }) => {
                            assert_eq!(next_from[peer], k, "{peer} left early");
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                got
            });
        }
    });
    assert!(start.elapsed() < T, "took {:?}", start.elapsed());
}

#[test]
fn all_to_all_few_members() {
    all_to_all(3, 2000 * stress_scale(), 4);
}

#[test]
fn all_to_all_16_members_on_2_cpus() {
    // (The machine the tests run on has 2 CPUs; elsewhere this is 16 threads anyway.)
    all_to_all(16, 200 * stress_scale(), 2);
}

/// One server, fifteen clients doing request/reply: the server waits on all fifteen
/// links at once.
#[test]
fn server_and_15_clients() {
    let n = 16;
    let rounds = 300 * stress_scale();
    // Star: only the pairs asked for.
    let meshes = MeshBuilder::new(n)
        .links((1..n).map(|c| (Rank(0), Rank(c))))
        .build()
        .unwrap();
    assert_eq!(meshes[3].peers(), vec![Rank(0)]);
    assert_eq!(meshes[0].peers().len(), n - 1);
    let mut it = meshes.into_iter();
    let mut server = it.next().unwrap();
    std::thread::scope(|s| {
        for mut c in it {
            s.spawn(move || {
                let mut buf = [0u8; 8];
                for i in 0..rounds {
                    c.send_word(Rank(0), c.rank().index() as u64, i, T).unwrap();
                    let (tag, _) = c.recv_from(Rank(0), &mut buf, T).unwrap();
                    assert_eq!(tag, i + 1000);
                }
                // Leaving: the server sees this client gone.
            });
        }
        let mut buf = [0u8; 8];
        let mut served = 0;
        let mut gone = 0;
        while gone < n - 1 {
            match server.recv_any(&mut buf, T) {
                Ok((from, tag, 8)) => {
                    assert_eq!(tag, from.index() as u64);
                    let i = u64::from_le_bytes(buf);
                    server.send_word(from, i + 1000, 0, T).unwrap();
                    served += 1;
                }
                Ok(other) => panic!("unexpected {other:?}"),
                Err(MeshError::PeerGone { peer, .. }) => {
                    assert!(!server.is_linked(peer));
                    gone += 1;
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(served, rounds * (n as u64 - 1));
        assert_eq!(
            server.recv_any(&mut buf, T),
            Err(MeshError::NoPeers { rank: Rank(0) })
        );
    });
}

#[test]
fn departure_is_reported_after_the_last_message() {
    let mut m = MeshBuilder::new(3).all_to_all().build().unwrap();
    let c = m.pop().unwrap();
    let mut b = m.pop().unwrap();
    let mut a = m.pop().unwrap();
    b.send(Rank(0), 1, b"last words", T).unwrap();
    drop(b);
    let mut buf = [0u8; 32];
    assert_eq!(a.recv_any(&mut buf, T).unwrap(), (Rank(1), 1, 10));
    assert_eq!(
        a.recv_any(&mut buf, T),
        Err(MeshError::PeerGone {
            rank: Rank(0),
            peer: Rank(1)
        })
    );
    assert_eq!(
        a.send(Rank(1), 0, b"x", T),
        Err(MeshError::PeerGone {
            rank: Rank(0),
            peer: Rank(1)
        })
    );
    assert!(a.is_linked(Rank(2)));
    drop(c);
    assert!(matches!(
        a.recv_any(&mut buf, T),
        Err(MeshError::PeerGone { peer: Rank(2), .. })
    ));
    assert_eq!(
        a.recv_any(&mut buf, T),
        Err(MeshError::NoPeers { rank: Rank(0) })
    );
}

#[test]
fn a_waiting_receive_sees_a_peer_leave() {
    let mut m = MeshBuilder::new(2).all_to_all().build().unwrap();
    let b = m.pop().unwrap();
    let mut a = m.pop().unwrap();
    let t0 = Instant::now();
    std::thread::scope(|s| {
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(b);
        });
        let mut buf = [0u8; 8];
        assert!(matches!(
            a.recv_any(&mut buf, T),
            Err(MeshError::PeerGone { peer: Rank(1), .. })
        ));
    });
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn timeouts_are_bounded() {
    let mut m = MeshBuilder::new(2)
        .all_to_all()
        .capacity(1)
        .build()
        .unwrap();
    let _b = m.pop().unwrap();
    let mut a = m.pop().unwrap();
    let mut buf = [0u8; 8];
    let t0 = Instant::now();
    let e = a
        .recv_any(&mut buf, Duration::from_millis(100))
        .unwrap_err();
    let took = t0.elapsed();
    assert!(matches!(e, MeshError::Timeout { peer: None, .. }), "{e}");
    assert!(took >= Duration::from_millis(100) && took < Duration::from_secs(3));
    assert!(matches!(
        a.recv_from(Rank(1), &mut buf, Duration::from_millis(20)),
        Err(MeshError::Timeout {
            peer: Some(Rank(1)),
            ..
        })
    ));
    // A one-slot ring: the second send waits for room that never comes.
    a.send_word(Rank(1), 0, 1, T).unwrap();
    let t0 = Instant::now();
    let e = a
        .send_word(Rank(1), 0, 2, Duration::from_millis(100))
        .unwrap_err();
    assert!(
        matches!(
            e,
            MeshError::Timeout {
                peer: Some(Rank(1)),
                ..
            }
        ),
        "{e}"
    );
    assert!(t0.elapsed() < Duration::from_secs(3));
    assert!(e.to_string().contains("sending to member 1"), "{e}");
}

#[test]
fn abort_ends_every_wait() {
    let meshes = MeshBuilder::new(4).all_to_all().build().unwrap();
    let abort = meshes[0].abort_handle();
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for mut m in meshes {
            s.spawn(move || {
                let mut buf = [0u8; 8];
                let e = m.recv_any(&mut buf, Duration::from_secs(30)).unwrap_err();
                assert_eq!(e, MeshError::Aborted { rank: m.rank() });
                assert!(matches!(
                    m.send(Rank((m.rank().index() + 1) % 4), 0, b"", T),
                    Err(MeshError::Aborted { .. })
                ));
                assert!(matches!(
                    m.try_send(Rank((m.rank().index() + 1) % 4), 0, b""),
                    Err(MeshError::Aborted { .. })
                ));
            });
        }
        std::thread::sleep(Duration::from_millis(50));
        abort.trigger();
    });
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn bad_requests_are_errors() {
    assert!(matches!(
        MeshBuilder::new(0).build(),
        Err(MeshError::Invalid(_))
    ));
    assert!(matches!(
        MeshBuilder::new(2).link(Rank(1), Rank(1)).build(),
        Err(MeshError::Invalid(_))
    ));
    let e = MeshBuilder::new(2)
        .link(Rank(0), Rank(2))
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("member 2"), "{e}");
    assert!(matches!(
        MeshBuilder::new(2).capacity(0).all_to_all().build(),
        Err(MeshError::Invalid(_))
    ));
    // Only the pairs asked for.
    let mut m = MeshBuilder::new(3)
        .link(Rank(0), Rank(1))
        .link(Rank(1), Rank(0))
        .build()
        .unwrap();
    assert_eq!(m[0].peers(), vec![Rank(1)]);
    assert!(m[2].peers().is_empty());
    assert_eq!(
        m[0].send(Rank(2), 0, b"x", T),
        Err(MeshError::NoLink {
            rank: Rank(0),
            peer: Rank(2)
        })
    );
    assert_eq!(
        m[0].send(Rank(9), 0, b"x", T),
        Err(MeshError::NoLink {
            rank: Rank(0),
            peer: Rank(9)
        })
    );
    // The same refusals without waiting (try_send looks at its link once).
    for to in [Rank(2), Rank(9)] {
        assert_eq!(
            m[0].try_send(to, 0, b"x"),
            Err(MeshError::NoLink {
                rank: Rank(0),
                peer: to
            })
        );
    }
    let mut buf = [0u8; 4];
    assert_eq!(
        m[2].recv_any(&mut buf, T),
        Err(MeshError::NoPeers { rank: Rank(2) })
    );
    // Too large for the link; a buffer too small leaves the message queued.
    let max = m[0].max_message_len(Rank(1)).unwrap();
    assert_eq!(max, 64 * 48);
    assert!(matches!(
        m[0].send(Rank(1), 0, &vec![0; max + 1], T),
        Err(MeshError::Transport {
            source: TransportError::MessageTooLarge { .. },
            ..
        })
    ));
    m[0].send(Rank(1), 5, b"12345678", T).unwrap();
    assert!(matches!(
        m[1].recv_any(&mut buf, T),
        Err(MeshError::Transport {
            source: TransportError::BufferTooSmall { needed: 8, got: 4 },
            ..
        })
    ));
    let mut big = [0u8; 8];
    assert_eq!(m[1].recv_any(&mut big, T).unwrap(), (Rank(0), 5, 8));
    // Closing a link is seen by the other side.
    m[0].close_link(Rank(1)).unwrap();
    assert!(matches!(
        m[1].recv_any(&mut big, T),
        Err(MeshError::PeerGone { peer: Rank(0), .. })
    ));
}

/// A mesh over links made outside the builder (no doorbells: parked receivers poll
/// with growing park timeouts).
#[test]
fn mesh_over_links_of_your_own() {
    let n = 4;
    let mut ends: Vec<Vec<(Rank, QueuePairEnd)>> = (0..n).map(|_| Vec::new()).collect();
    for a in 0..n {
        for b in a + 1..n {
            let (x, y) = try_queuepair(8, None).unwrap();
            ends[a].push((Rank(b), x));
            ends[b].push((Rank(a), y));
        }
    }
    let meshes: Vec<Mesh> = ends
        .into_iter()
        .enumerate()
        .map(|(r, l)| Mesh::with_links(Rank(r), n, l, None, WaitPolicy::OVERSUBSCRIBED).unwrap())
        .collect();
    std::thread::scope(|s| {
        for mut m in meshes {
            s.spawn(move || {
                let me = m.rank().index();
                // A token goes round the ring 100 times; each member leaves after the
                // last token it will see.
                const LIMIT: u64 = 400;
                let mut buf = [0u8; 8];
                if me == 0 {
                    m.send_word(Rank(1), 0, 1, T).unwrap();
                }
                loop {
                    match m.recv_any(&mut buf, T) {
                        Ok(_) => {}
                        Err(MeshError::PeerGone { .. }) => continue,
                        Err(e) => panic!("{e}"),
                    }
                    let w = u64::from_le_bytes(buf);
                    if w < LIMIT {
                        m.send_word(Rank((me + 1) % n), 0, w + 1, T).unwrap();
                    }
                    if w + n as u64 > LIMIT {
                        break;
                    }
                }
            });
        }
    });
    // Bad sets.
    assert!(matches!(
        Mesh::<QueuePairEnd>::with_links(Rank(3), 2, Vec::new(), None, WaitPolicy::DEDICATED),
        Err(MeshError::Invalid(_))
    ));
    let (x, y) = try_queuepair(8, None).unwrap();
    assert!(matches!(
        Mesh::with_links(
            Rank(0),
            2,
            vec![(Rank(1), x), (Rank(1), y)],
            None,
            WaitPolicy::DEDICATED
        ),
        Err(MeshError::Invalid(_))
    ));
}

/// Quiet links are polled less often but lose nothing, whether the receiver is busy
/// on its other links or parked.
#[test]
fn quiet_links_deliver_everything() {
    let n = 12;
    let meshes = MeshBuilder::new(n)
        .links((1..n).map(|c| (Rank(0), Rank(c))))
        .build()
        .unwrap();
    let mut it = meshes.into_iter();
    let mut server = it.next().unwrap();
    for c in 2..n {
        server.set_quiet(Rank(c), true).unwrap();
    }
    assert!(server.set_quiet(Rank(99), true).is_err());
    let rounds = 200 * stress_scale();
    std::thread::scope(|s| {
        for mut c in it {
            s.spawn(move || {
                let busy = c.rank() == Rank(1);
                for i in 0..if busy { rounds * 10 } else { rounds } {
                    c.send_word(Rank(0), c.rank().index() as u64, i, T).unwrap();
                    if !busy && i % 50 == 0 {
                        // Let the server park now and then.
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            });
        }
        let mut next = vec![0u64; n];
        let mut buf = [0u8; 8];
        let want = rounds * 10 + rounds * (n as u64 - 2);
        let mut got = 0;
        while got < want {
            match server.recv_any(&mut buf, T) {
                Ok((from, tag, 8)) => {
                    assert_eq!(tag, from.index() as u64);
                    assert_eq!(u64::from_le_bytes(buf), next[from]);
                    next[from] += 1;
                    got += 1;
                }
                Err(MeshError::PeerGone { .. }) => {}
                other => panic!("{other:?}"),
            }
        }
    });
}

/// `Mesh::link_mut` is the link itself (none to this member or to no peer), and
/// `Mesh::holds_from` says when messages of a peer were taken off that link while a
/// send waited for room: they are then in the mesh, not on the link, and the next
/// receive returns them in order.
#[test]
fn link_mut_is_the_link_and_holds_from_says_what_left_it() {
    let mut m = MeshBuilder::new(2)
        .all_to_all()
        .capacity(4)
        .build()
        .unwrap();
    let mut b = m.pop().unwrap();
    let mut a = m.pop().unwrap();
    assert!(a.link_mut(Rank(0)).is_none() && a.link_mut(Rank(7)).is_none());
    assert!(a.link_mut(Rank(1)).is_some() && !a.holds_from(Rank(1)));
    std::thread::scope(|s| {
        s.spawn(move || {
            for t in 0..3u64 {
                b.send_word(Rank(0), 100 + t, t, T).unwrap();
            }
            // Until `a` is blocked on the full link (taking in these three).
            std::thread::sleep(Duration::from_millis(200));
            let mut buf = [0u8; 8];
            for t in 0..12u64 {
                assert_eq!(b.recv_from(Rank(0), &mut buf, T).unwrap(), (t, 8));
            }
        });
        // More than the link holds: the sends wait for `b`, taking in its messages.
        for t in 0..12u64 {
            a.send_word(Rank(1), t, t, T).unwrap();
        }
    });
    assert!(a.holds_from(Rank(1)));
    assert!(
        !Link::is_ready(a.link_mut(Rank(1)).unwrap()),
        "held, not on the link"
    );
    let mut buf = [0u8; 8];
    for t in 0..3u64 {
        assert_eq!(a.recv_from(Rank(1), &mut buf, T).unwrap(), (100 + t, 8));
    }
    assert!(!a.holds_from(Rank(1)));
}
