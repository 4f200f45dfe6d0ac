//! The polled steps (`smelt_runtime::polled`): a reduction up and a broadcast down
//! written as state machines that only poll, interleaved with blocking collectives on
//! the same context; a member that sends another collective's message is told apart.

use smelt_plan::Tree;
use smelt_runtime::polled::{Neighbour, PolledColl};
use smelt_runtime::{CpuId, Group, GroupError, Pos};
use std::time::{Duration, Instant};

/// 0 is the root with children 1 and 2; 1 has child 3 (an inner member that forwards).
fn tree() -> Tree {
    Tree::new(
        CpuId::list([0, 1, 2, 3]),
        Pos(0),
        vec![vec![Pos(1), Pos(2)], vec![Pos(3)], vec![], vec![]],
    )
    .unwrap()
}

/// Polls `step` (which returns `Ok(true)` when done) until done, failing after 20 s.
fn poll_until(mut step: impl FnMut() -> Result<bool, GroupError>) -> Result<(), GroupError> {
    let start = Instant::now();
    while !step()? {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "a polled step never completed"
        );
        std::thread::yield_now();
    }
    Ok(())
}

#[test]
fn polled_allreduce_and_blocking_collectives_interleave() {
    let sums = Group::new(&tree())
        .unwrap()
        .run(|m| -> Result<(u64, u64), GroupError> {
            let me = m.rank().index() as u64 + 1;
            let mut total = 0;
            for round in 0..50u64 {
                let c = m.context(0)?;
                let mut acc = (me * (round + 1)).to_le_bytes();
                let mut buf = [0u8; 8];
                // Up: every child's partial sum, then on to the parent.
                let t = c.begin_polled(PolledColl::Reduce)?;
                for i in 0..c.num_children() {
                    poll_until(|| {
                        Ok(match c.poll_recv(Neighbour::Child(i), t, &mut buf, None)? {
                            Some(n) => {
                                assert_eq!(n, 8);
                                let sum = u64::from_le_bytes(acc) + u64::from_le_bytes(buf);
                                acc = sum.to_le_bytes();
                                true
                            }
                            None => false,
                        })
                    })?;
                }
                poll_until(|| c.poll_send(Neighbour::Parent, t, &acc, None))?;
                // Down: the root's total to everyone.
                let t = c.begin_polled(PolledColl::Broadcast)?;
                if !c.is_root() {
                    poll_until(|| {
                        Ok(c.poll_recv(Neighbour::Parent, t, &mut acc, None)?.is_some())
                    })?;
                }
                for i in 0..c.num_children() {
                    poll_until(|| c.poll_send(Neighbour::Child(i), t, &acc, None))?;
                }
                total += u64::from_le_bytes(acc);
                // A blocking collective on the same context, between polled ones.
                let b = m.allreduce(me, |a, b| a + b)?;
                assert_eq!(b, 10);
            }
            Ok((total, m.context(0)?.sequence() as u64))
        })
        .unwrap();
    // Sum over rounds of 10 × (round + 1).
    let want: u64 = (1..=50).map(|r| 10 * r).sum();
    for s in &sums {
        let (total, seq) = *s.as_ref().unwrap();
        assert_eq!(total, want);
        // Every member advanced its sequence alike (2 polled + a blocking allreduce's
        // reduce and broadcast per round).
        assert_eq!(seq, sums[0].as_ref().unwrap().1);
    }
}

#[test]
fn a_message_of_another_collective_is_a_mismatch() {
    let out = Group::new(&tree())
        .unwrap()
        .run(|m| -> Result<(), GroupError> {
            let odd_one = m.rank().index() == 2;
            let c = m.context(0)?;
            // Member 2 calls a broadcast where the others call a reduction.
            let coll = if odd_one {
                PolledColl::Broadcast
            } else {
                PolledColl::Reduce
            };
            let t = c.begin_polled(coll)?;
            let mut buf = [0u8; 8];
            for i in 0..c.num_children() {
                poll_until(|| {
                    Ok(c.poll_recv(Neighbour::Child(i), t, &mut buf, None)?
                        .is_some())
                })?;
            }
            poll_until(|| c.poll_send(Neighbour::Parent, t, &[1u8; 8], None))?;
            Ok(())
        });
    let err = match out {
        Err(e) => e.to_string(),
        Ok(v) => v
            .into_iter()
            .find_map(|r| r.err())
            .map(|e| e.to_string())
            .unwrap_or_default(),
    };
    assert!(
        err.contains("members called different collectives"),
        "expected a mismatch, got {err:?}"
    );
}

#[test]
fn a_wait_that_runs_out_is_not_a_failure() {
    // Two members; the child waits briefly for a message the root sends only later.
    let t2 = Tree::new(CpuId::list([0, 1]), Pos(0), vec![vec![Pos(1)], vec![]]).unwrap();
    let got = Group::new(&t2)
        .unwrap()
        .run(|m| -> Result<u64, GroupError> {
            let root = m.is_root();
            let c = m.context(0)?;
            let t = c.begin_polled(PolledColl::Broadcast)?;
            let mut buf = [0u8; 8];
            if root {
                std::thread::sleep(Duration::from_millis(50));
                poll_until(|| c.poll_send(Neighbour::Child(0), t, &7u64.to_le_bytes(), None))?;
                return Ok(7);
            }
            // A 1 ms wait runs out before the root sends: Ok(None), the group intact.
            let first = c.poll_recv(
                Neighbour::Parent,
                t,
                &mut buf,
                Some(Duration::from_millis(1)),
            )?;
            assert_eq!(first, None);
            poll_until(|| {
                Ok(c.poll_recv(
                    Neighbour::Parent,
                    t,
                    &mut buf,
                    Some(Duration::from_millis(5)),
                )?
                .is_some())
            })?;
            Ok(u64::from_le_bytes(buf))
        })
        .unwrap();
    assert!(got.iter().all(|r| *r.as_ref().unwrap() == 7));
}
