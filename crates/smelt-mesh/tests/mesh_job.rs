//! Meshes over a shared-memory job (`smelt_mesh::mesh_job`), with every rank joined
//! from this process (the member processes of the key-value store are tested in
//! smelt-kvs's tests/processes.rs): links, the blob, departures, bad input.

use smelt_mesh::mesh::MeshError;
use smelt_mesh::mesh_job::{join, MeshJob};
use smelt_mesh::{Rank, WaitPolicy};
use std::time::Duration;

const T: Duration = Duration::from_secs(5);

#[test]
fn members_exchange_messages_and_see_departures() {
    let job = MeshJob::create(
        3,
        &[(Rank(0), Rank(1)), (Rank(2), Rank(0)), (Rank(1), Rank(0))],
        8,
        b"description",
    )
    .unwrap();
    assert_eq!(job.size(), 3);
    let w = WaitPolicy::OVERSUBSCRIBED;
    let mut a = job.join(Rank(0), w, None).unwrap();
    let mut b = job.join(Rank(1), w, None).unwrap();
    assert!(job.path().exists(), "named until every member joined");
    let mut c = job.join(Rank(2), w, None).unwrap();
    assert!(!job.path().exists(), "unlinked once every member joined");
    assert_eq!(a.peers(), [Rank(1), Rank(2)]);
    assert_eq!(b.peers(), [Rank(0)]);
    assert!(matches!(
        b.send(Rank(2), 1, b"x", T),
        Err(MeshError::NoLink { .. })
    ));
    // Longer than one slot, and more messages than a ring holds: flow control.
    let big = vec![7u8; 300];
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..100u64 {
                b.send(Rank(0), i, &big, T).unwrap();
            }
        });
        s.spawn(|| c.send_word(Rank(0), 9, 42, T).unwrap());
        let mut buf = vec![0u8; 512];
        let mut next = 0;
        let mut word = false;
        while next < 100 || !word {
            let (from, tag, n) = a.recv_any(&mut buf, T).unwrap();
            if from == Rank(1) {
                assert_eq!((tag, &buf[..n]), (next, &big[..]));
                next += 1;
            } else {
                assert_eq!(
                    (from, tag, &buf[..n]),
                    (Rank(2), 9, &42u64.to_le_bytes()[..])
                );
                word = true;
            }
        }
    });
    drop(b);
    let mut buf = [0u8; 8];
    assert!(matches!(
        a.recv_any(&mut buf, T),
        Err(MeshError::PeerGone { peer: Rank(1), .. })
    ));
    assert!(matches!(
        a.recv_any(&mut buf, Duration::from_millis(20)),
        Err(MeshError::Timeout { .. })
    ));
    drop(c);
    assert!(matches!(
        a.recv_any(&mut buf, T),
        Err(MeshError::PeerGone { peer: Rank(2), .. })
    ));
    assert!(matches!(
        a.recv_any(&mut buf, T),
        Err(MeshError::NoPeers { .. })
    ));
}

#[test]
fn bad_input_is_an_error() {
    for (n, pairs, cap) in [
        (0, vec![], 8),
        (2, vec![(Rank(0), Rank(0))], 8),
        (2, vec![(Rank(0), Rank(2))], 8),
        (2, vec![(Rank(0), Rank(1))], 0),
    ] {
        assert!(
            matches!(
                MeshJob::create(n, &pairs, cap, b""),
                Err(MeshError::Invalid(_))
            ),
            "{n} {pairs:?} {cap}"
        );
    }
    let job = MeshJob::create(2, &[(Rank(0), Rank(1))], 8, b"").unwrap();
    let _a = job.join(Rank(0), WaitPolicy::DEDICATED, None).unwrap();
    // A rank joins once; a rank that does not exist never.
    assert!(job.join(Rank(0), WaitPolicy::DEDICATED, None).is_err());
    assert!(job.join(Rank(2), WaitPolicy::DEDICATED, None).is_err());
    // Another job's key, or a segment that is not there: refused.
    let other = MeshJob::create(2, &[(Rank(0), Rank(1))], 8, b"").unwrap();
    assert!(matches!(
        join(job.path(), &other.key(), Rank(1), None, None),
        Err(MeshError::Invalid(_))
    ));
    assert!(matches!(
        join(
            &job.path().with_extension("gone"),
            &job.key(),
            Rank(1),
            None,
            None
        ),
        Err(MeshError::Invalid(_))
    ));
}
