//! Every collective over random trees of 1..=16 members, checked against a sequential
//! computation; barrier semantics; atomic broadcast with two concurrent contexts;
//! failure reporting. Scale with SMELT_STRESS.

use smelt_runtime::{CpuId, Group, GroupConfig, GroupError, Member, Pinning, Pos, Rank};
use smelt_tree::Tree;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn stress() -> usize {
    smelt_transport::stress_scale() as usize
}

/// Small deterministic PRNG (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A random tree over `n` members: random CPU ids (this machine's CPUs when they
/// suffice, so small groups run pinned; made-up ids otherwise), random root, random
/// shape and send order.
fn random_tree(rng: &mut Rng, n: usize) -> Tree {
    let allowed = smelt_transport::allowed_cpus().unwrap();
    let mut cpus: Vec<u32> = if n <= allowed.len() && rng.below(2) == 0 {
        allowed[..n].to_vec()
    } else {
        (0..n as u32).map(|i| 4096 + i * 3).collect()
    };
    for i in (1..n).rev() {
        cpus.swap(i, rng.below(i + 1));
    }
    let root = rng.below(n);
    // Attach members in a random order, each to a random already-attached member.
    let mut order: Vec<usize> = (0..n).filter(|&m| m != root).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let mut attached = vec![root];
    let mut children = vec![Vec::new(); n];
    for m in order {
        let p = attached[rng.below(attached.len())];
        let at = rng.below(children[p].len() + 1);
        children[p].insert(at, m);
        attached.push(m);
    }
    Tree::from_raw(cpus, root, children).unwrap()
}

fn value(rank: usize, round: usize) -> u64 {
    (rank as u64 + 1) * 1_000_003 + round as u64 * 7919
}

#[test]
fn all_collectives_on_random_trees() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let trees_per_size = 3 * stress();
    let rounds = 40;
    let mut total = 0;
    for n in 1..=16 {
        for _ in 0..trees_per_size {
            let tree = random_tree(&mut rng, n);
            let group = Group::new(&tree).unwrap();
            // One tree: a member's rank is its position in the tree.
            let rank_of = |p: Pos| Rank(p.index());
            let root = rank_of(tree.root);
            let out = group
                .run(|m: &mut Member| -> Result<(), GroupError> {
                    let p = Pos(m.rank().index());
                    assert_eq!(m.cpu(), tree.members[p]);
                    assert_eq!(m.root(), Some(root));
                    let children: Vec<Rank> =
                        tree.children[p].iter().map(|&c| rank_of(c)).collect();
                    assert_eq!(m.children(), children);
                    assert_eq!(m.parent(), tree.parents()[p].map(rank_of));
                    let (r, root) = (m.rank().index(), root.index());
                    for round in 0..rounds {
                        // broadcast of a word and of bytes (multi-fragment sometimes)
                        let w = m.broadcast_word(if m.is_root() { value(r, round) } else { 0 })?;
                        assert_eq!(w, value(root, round));
                        let len = (round * 997) % 9000;
                        let mut buf = if m.is_root() {
                            (0..len).map(|i| (i + round) as u8).collect()
                        } else {
                            vec![1, 2, 3]
                        };
                        m.broadcast(&mut buf)?;
                        assert_eq!(buf.len(), len);
                        assert!(buf.iter().enumerate().all(|(i, &b)| b == (i + round) as u8));
                        // reduce / allreduce, sums and max
                        let s = m.reduce(value(r, round), |a, b| a.wrapping_add(b))?;
                        let expect: u64 = (0..n).map(|k| value(k, round)).sum();
                        assert_eq!(s, m.is_root().then_some(expect));
                        let mx = m.allreduce((r as i32 - 5) * (round as i32 + 1), i32::max)?;
                        assert_eq!(mx, (n as i32 - 1 - 5) * (round as i32 + 1));
                        let f = m.allreduce(0.5f64 * r as f64, |a, b| a + b)?;
                        assert_eq!(f, 0.5 * (n * (n - 1) / 2) as f64);
                        // element-wise slices
                        let mut v: Vec<u32> = (0..round + 1).map(|i| (r * i) as u32).collect();
                        m.allreduce_slice(&mut v, |a, b| a + b)?;
                        let tri = (n * (n - 1) / 2) as u32;
                        assert!(v.iter().enumerate().all(|(i, &x)| x == tri * i as u32));
                        // gather / scatter
                        let g = m.gather_word(value(r, round))?;
                        if let Some(g) = g {
                            assert_eq!(g, (0..n).map(|k| value(k, round)).collect::<Vec<_>>());
                        }
                        let vals: Vec<u64> = (0..n).map(|k| value(k, round) + 1).collect();
                        let mine = m.scatter_word(m.is_root().then_some(&vals[..]))?;
                        assert_eq!(mine, value(r, round) + 1);
                        m.barrier()?;
                    }
                    Ok(())
                })
                .unwrap();
            assert!(out.iter().all(|r| r.is_ok()), "{out:?}");
            total += rounds;
        }
    }
    assert_eq!(total, 16 * trees_per_size * rounds);
}

#[test]
fn non_commutative_reduce_follows_preorder() {
    // Combine digits as a string-like number: op(a, b) = a * 10 + b restricted to
    // small trees keeps it associative over the pre-order fold of single digits?
    // Use 2x2 matrix multiplication mod 2^64 instead: associative, not commutative.
    fn mul(a: u64, b: u64) -> u64 {
        // pack 2x2 matrix of u16 entries into a u64
        let e = |x: u64, i: u32| (x >> (16 * i)) & 0xffff;
        let c = |i: u32, j: u32| (e(a, i * 2) * e(b, j) + e(a, i * 2 + 1) * e(b, 2 + j)) & 0xffff;
        c(0, 0) | c(0, 1) << 16 | c(1, 0) << 32 | c(1, 1) << 48
    }
    let mut rng = Rng(77);
    for n in 1..=12 {
        let tree = random_tree(&mut rng, n);
        let mat = |r: usize| -> u64 { 1 | ((r as u64 + 2) << 16) | (3 << 32) | ((r as u64) << 48) };
        // One tree: ranks are positions.
        let expect = tree
            .preorder()
            .into_iter()
            .map(|p| mat(p.index()))
            .reduce(mul)
            .unwrap();
        let out = Group::new(&tree)
            .unwrap()
            .run(|m| m.reduce(mat(m.rank().index()), mul))
            .unwrap();
        assert_eq!(out[tree.root], Ok(Some(expect)), "n={n}");
    }
}

#[test]
fn barrier_lets_nobody_through_early() {
    let mut rng = Rng(99);
    for n in [2, 5, 9, 16] {
        let tree = random_tree(&mut rng, n);
        let arrived = AtomicUsize::new(0);
        let rounds = 50 * stress();
        Group::new(&tree)
            .unwrap()
            .run(|m| {
                for round in 0..rounds {
                    arrived.fetch_add(1, Ordering::SeqCst);
                    m.barrier().unwrap();
                    let seen = arrived.load(Ordering::SeqCst);
                    assert!(seen >= (round + 1) * n, "left the barrier early: {seen}");
                    // second barrier so nobody races into the next round's increment
                    // before everyone has checked
                    m.barrier().unwrap();
                    assert!(arrived.load(Ordering::SeqCst) <= (round + 1) * n);
                    m.barrier().unwrap();
                }
            })
            .unwrap();
        assert_eq!(arrived.load(Ordering::SeqCst), rounds * n);
    }
}

#[test]
fn two_concurrent_contexts_deliver_in_root_order() {
    // Same 6 members, two trees with different roots; each member drives context 1
    // from a second thread while context 0 runs on the member's own thread.
    let cpus: Vec<u32> = (0..6).map(|i| 9000 + i).collect();
    let t0 = Tree::from_raw(
        cpus.clone(),
        0,
        vec![vec![1, 2], vec![3], vec![4, 5], vec![], vec![], vec![]],
    )
    .unwrap();
    let t1 = Tree::from_raw(
        cpus,
        5,
        vec![vec![], vec![0], vec![1], vec![], vec![2], vec![4, 3]],
    )
    .unwrap();
    let n = 300 * stress();
    let cfg = GroupConfig {
        pinning: Pinning::Never,
        ..Default::default()
    };
    let group = Group::with_config(&[t0, t1], &cfg).unwrap();
    let seqs = group
        .run(|m| -> Result<(Vec<u64>, Vec<u64>), GroupError> {
            let mut c1 = m.take_context(1)?;
            std::thread::scope(|s| {
                let h = s.spawn(move || -> Result<Vec<u64>, GroupError> {
                    let mut got = Vec::new();
                    for i in 0..n as u64 {
                        got.push(c1.broadcast_word(1_000_000 + i)?);
                    }
                    Ok(got)
                });
                let mut got = Vec::new();
                for i in 0..n as u64 {
                    got.push(m.broadcast_word(i)?);
                }
                Ok((got, h.join().unwrap()?))
            })
        })
        .unwrap();
    let expect0: Vec<u64> = (0..n as u64).collect();
    let expect1: Vec<u64> = (0..n as u64).map(|i| 1_000_000 + i).collect();
    for s in seqs {
        let (a, b) = s.unwrap();
        assert_eq!(a, expect0);
        assert_eq!(b, expect1);
    }
}

#[test]
fn a_panicking_member_fails_the_group_promptly() {
    let mut rng = Rng(5);
    for n in [2, 7, 16] {
        let tree = random_tree(&mut rng, n);
        let victim = Rank(n - 1);
        let errors = AtomicUsize::new(0);
        let r = Group::new(&tree).unwrap().run(|m| {
            for round in 0..1000 {
                if m.rank() == victim && round == 3 {
                    panic!("boom");
                }
                if let Err(e) = m.barrier() {
                    assert!(
                        matches!(e, GroupError::PeerFailed { rank, .. } if rank == victim),
                        "{e}"
                    );
                    errors.fetch_add(1, Ordering::SeqCst);
                    return;
                }
            }
        });
        match r {
            Err(GroupError::MemberPanicked { rank, message, .. }) => {
                assert_eq!(rank, victim);
                assert_eq!(message, "boom");
            }
            other => panic!("expected MemberPanicked, got {other:?}"),
        }
        assert_eq!(errors.load(Ordering::SeqCst), n - 1);
        // Every other member got PeerFailed naming the victim (not a Timeout of its
        // own): the failure was pushed to them, not discovered by waiting 30 s.
    }
}

#[test]
fn a_member_returning_early_is_reported() {
    let tree = Tree::from_raw(vec![7000, 7001, 7002], 0, vec![vec![1], vec![2], vec![]]).unwrap();
    let r = Group::new(&tree).unwrap().run(|m| {
        let rounds = if m.rank() == Rank(2) { 1 } else { 5 };
        for _ in 0..rounds {
            m.barrier()?;
        }
        Ok::<(), GroupError>(())
    });
    match r {
        Err(GroupError::PeerFailed { rank, .. }) => assert_eq!(rank, Rank(2)),
        other => panic!("expected PeerFailed naming rank 2, got {other:?}"),
    }
}

#[test]
fn operation_timeout_fires() {
    let tree = Tree::from_raw(vec![7000, 7001], 0, vec![vec![1], vec![]]).unwrap();
    let cfg = GroupConfig {
        link: smelt_runtime::LinkConfig::default().timeout(Duration::from_millis(50)),
        ..Default::default()
    };
    let group = Group::with_config(&[tree], &cfg).unwrap();
    let mut members = group.into_members();
    let mut child = members.pop().unwrap();
    let mut root = members.pop().unwrap();
    // The child never calls the barrier (it is kept alive, not dropped).
    let e = root.barrier().unwrap_err();
    assert!(
        matches!(
            e,
            GroupError::Timeout {
                rank: Rank(0),
                peer: Rank(1),
                ..
            }
        ),
        "{e}"
    );
    // The group is now failed for everybody.
    assert!(matches!(
        child.barrier(),
        Err(GroupError::PeerFailed { rank: Rank(0), .. })
    ));
}

#[test]
fn attached_threads_and_mismatches() {
    let tree = Tree::from_raw(vec![7000, 7001, 7002], 1, vec![vec![], vec![0, 2], vec![]]).unwrap();
    let group = Group::new(&tree).unwrap();
    assert!(!group.placement().pinned);
    assert!(group.placement().note.is_some());
    let members = group.into_members();
    let results: Vec<Result<bool, GroupError>> = std::thread::scope(|s| {
        let hs: Vec<_> = members
            .into_iter()
            .map(|mut m| {
                s.spawn(move || {
                    let mut v = vec![1u64; if m.rank() == Rank(2) { 3 } else { 2 }];
                    m.reduce_slice(&mut v, |a, b| a + b)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        matches!(results[1], Err(GroupError::Mismatch { rank: Rank(1), .. })),
        "{results:?}"
    );
    assert!(Group::with_config(&[], &GroupConfig::default()).is_err());
    let other = Tree::from_raw(vec![1, 2], 0, vec![vec![1], vec![]]).unwrap();
    assert!(matches!(
        Group::with_config(&[tree, other], &GroupConfig::default()),
        Err(GroupError::Invalid(_))
    ));
}

#[test]
fn spread_pinning_places_extra_members_on_allowed_cpus() {
    let allowed = smelt_transport::allowed_cpus().unwrap();
    let tree = Tree::from_raw(
        (0..6).map(|i| 8000 + i).collect(),
        0,
        vec![vec![1, 4], vec![2, 3], vec![], vec![], vec![5], vec![]],
    )
    .unwrap();
    let cfg = GroupConfig {
        pinning: Pinning::Spread,
        ..Default::default()
    };
    let group = Group::with_config(std::slice::from_ref(&tree), &cfg).unwrap();
    assert!(group.placement().pinned);
    assert!(group.placement().oversubscribed == (6 > allowed.len()));
    let out = group
        .run(|m| {
            m.barrier().unwrap();
            let on = smelt_transport::allowed_cpus().unwrap();
            (m.is_pinned(), on)
        })
        .unwrap();
    for (pinned, on) in out {
        assert!(pinned);
        assert_eq!(on.len(), 1);
        assert!(allowed.contains(&on[0]));
    }
}

#[test]
fn flattening_when_oversubscribed_keeps_results() {
    let allowed = smelt_transport::allowed_cpus().unwrap();
    let n = allowed.len() + 5;
    let mut rng = Rng(4242);
    let tree = random_tree(&mut rng, n);
    // Non-commutative op: the pre-order fold must be unchanged by flattening.
    let op = |a: u64, b: u64| a.wrapping_mul(31).wrapping_add(b);
    let expect = tree
        .preorder()
        .into_iter()
        .map(|p| p.index() as u64 + 1) // one tree: ranks are positions
        .reduce(op)
        .unwrap();
    let cfg = GroupConfig {
        flatten_oversubscribed: true,
        ..Default::default()
    };
    let group = Group::with_config(std::slice::from_ref(&tree), &cfg).unwrap();
    assert!(group.placement().flattened);
    let out = group
        .run(|m| {
            let root_children = if m.is_root() { m.children().len() } else { 0 };
            m.barrier()?;
            Ok::<_, GroupError>((m.reduce(m.rank().index() as u64 + 1, op)?, root_children))
        })
        .unwrap();
    let (r, kids) = out[tree.root].clone().unwrap();
    assert_eq!(r, Some(expect));
    assert_eq!(kids, n - 1);
}

#[test]
fn a_second_tree_names_members_by_rank_not_position() {
    // Ranks follow tree 0's member order: CPUs 9100..=9103 are ranks 0..=3. Tree 1 lists
    // the same CPUs in reverse: its position 0 (its root) is CPU 9103, rank 3; its
    // position 1 is CPU 9102, rank 2, with children at positions 2 and 3 (ranks 1, 0).
    let cpus = CpuId::list(9100..9104);
    let t0 = Tree::new(
        cpus.clone(),
        Pos(0),
        vec![vec![Pos(1), Pos(2), Pos(3)], vec![], vec![], vec![]],
    )
    .unwrap();
    let reversed: Vec<CpuId> = cpus.iter().rev().copied().collect();
    let t1 = Tree::new(
        reversed,
        Pos(0),
        vec![vec![Pos(1)], vec![Pos(2), Pos(3)], vec![], vec![]],
    )
    .unwrap();
    let cfg = GroupConfig {
        pinning: Pinning::Never,
        ..Default::default()
    };
    let group = Group::with_config(&[t0, t1.clone()], &cfg).unwrap();
    assert_eq!(group.cpus(), &cpus[..]);
    let out = group
        .run(|m| -> Result<_, GroupError> {
            let (rank, cpu) = (m.rank(), m.cpu());
            let c = m.context(1)?;
            assert_eq!((c.rank(), c.cpu()), (rank, cpu));
            let shape = (c.root(), c.parent(), c.children());
            let w = c.broadcast_word(if c.is_root() {
                1000 + rank.index() as u64
            } else {
                0
            })?;
            let g = c.gather_word(rank.index() as u64 * 10)?;
            Ok((rank, cpu, shape, w, g))
        })
        .unwrap();
    for r in out {
        let (rank, cpu, (root, parent, children), w, g) = r.unwrap();
        assert_eq!(cpu, cpus[rank]);
        // The root is rank 3 (CPU 9103), although it is tree 1's position 0.
        assert_eq!(root, Rank(3));
        assert_eq!(t1.cpu(t1.root), cpus[root]);
        assert_eq!(w, 1003);
        let (want_parent, want_children) = match rank.index() {
            3 => (None, vec![Rank(2)]),
            2 => (Some(Rank(3)), vec![Rank(1), Rank(0)]),
            _ => (Some(Rank(2)), vec![]),
        };
        assert_eq!(
            (parent, children),
            (want_parent, want_children),
            "rank {rank}"
        );
        // Gathered values come back by rank, not by tree 1's positions.
        assert_eq!(g, (rank == Rank(3)).then(|| vec![0, 10, 20, 30]));
    }
}

/// A group of two members, CPUs 0 and 1, whose waits end after `timeout`.
fn pair_group(timeout: Duration) -> Group {
    let tree = Tree::from_raw(vec![0, 1], 0, vec![vec![1], vec![]]).unwrap();
    let cfg = GroupConfig {
        link: smelt_runtime::LinkConfig::default().timeout(timeout),
        ..Default::default()
    };
    Group::with_config(std::slice::from_ref(&tree), &cfg).unwrap()
}

/// Two members: one enters the barrier (a flag each way, no message), the other
/// another collective. Both fail with the mismatch (or the failure it recorded) long
/// before the timeout, whichever side sends or waits.
#[test]
fn a_pair_barrier_against_another_collective_fails_both_at_once() {
    type Call = fn(&mut Member) -> Result<(), GroupError>;
    let barrier: Call = |m| m.barrier();
    let broadcast: Call = |m| m.broadcast_word(7).map(|_| ());
    let reduce: Call = |m| m.reduce(1u64, |a, b| a + b).map(|_| ());
    let gather: Call = |m| m.gather_word(1).map(|_| ());
    // (root's call, child's call): the child receives, the root sends, the child
    // sends, the root receives, while the other waits on the barrier's flag.
    let cases = [
        ("barrier/broadcast", barrier, broadcast),
        ("broadcast/barrier", broadcast, barrier),
        ("barrier/reduce", barrier, reduce),
        ("reduce/barrier", reduce, barrier),
        ("gather/barrier", gather, barrier),
    ];
    let timeout = Duration::from_secs(60);
    for (name, root_call, child_call) in cases {
        let group = pair_group(timeout);
        let t = std::time::Instant::now();
        let out = group.run(|m| {
            // One matched barrier first: the marks are in use when they differ.
            m.barrier().unwrap();
            if m.rank() == Rank(0) {
                root_call(m)
            } else {
                child_call(m)
            }
        });
        assert!(t.elapsed() < timeout / 4, "{name}: took {:?}", t.elapsed());
        let e = out.expect_err(name);
        assert!(
            matches!(
                e,
                GroupError::Mismatch { .. } | GroupError::PeerFailed { .. }
            ) && e.to_string().contains("different collectives"),
            "{name}: {e}"
        );
    }
}

/// A mismatch names both collectives and their numbers (from the one tag word each
/// call makes): after a matched barrier (#1), the root broadcasts and the child
/// reduces (#2: each only sends, so both return), and the barrier (#3) finds the other's
/// message waiting.
#[test]
fn a_mismatch_names_both_calls_and_their_numbers() {
    let out = pair_group(Duration::from_secs(60)).run(|m| {
        m.barrier()?;
        if m.rank() == Rank(0) {
            m.broadcast_word(7)?;
        } else {
            m.reduce(1u64, |a, b| a + b)?;
        }
        m.barrier()
    });
    let e = out
        .expect_err("the barrier finds the other call's message")
        .to_string();
    assert!(
        e.contains("in barrier #3 on context 0 it received reduce #2 from member 1")
            || e.contains("in barrier #3 on context 0 it received broadcast #2 from member 0"),
        "{e}"
    );
}

/// Pair barriers among other collectives with one member often far ahead or behind
/// (sleeps, yields): never a false mismatch, and a barrier still holds everyone back
/// (a counter shows no member leaves barrier k before the other entered it).
#[test]
fn pair_barriers_with_one_member_ahead_stay_matched() {
    let tree = Tree::from_raw(vec![0, 1], 0, vec![vec![1], vec![]]).unwrap();
    let group = Group::new(&tree).unwrap();
    let entered = [AtomicUsize::new(0), AtomicUsize::new(0)];
    let rounds = 2000 * stress();
    group
        .run(|m| {
            let me = m.rank().index();
            let mut rng = Rng(17 + me as u64);
            for k in 0..rounds {
                match rng.next() % 8 {
                    0 => std::thread::sleep(Duration::from_micros(rng.next() % 200)),
                    1 | 2 => std::thread::yield_now(),
                    _ => {}
                }
                entered[me].store(k + 1, Ordering::SeqCst);
                m.barrier().unwrap();
                assert!(entered[1 - me].load(Ordering::SeqCst) > k, "round {k}");
                if k % 3 == 0 {
                    assert_eq!(m.broadcast_word(k as u64).unwrap(), k as u64);
                }
                if k % 5 == 0 {
                    assert_eq!(m.allreduce(1u64, |a, b| a + b).unwrap(), 2);
                }
            }
        })
        .unwrap();
}

/// Two members' small allreduce (up to 384 bytes, a message each way; 8 bytes as a
/// word): every length from 1 to 400 (past 384: the general path) with
/// a combine that does not commute, so the root's value must come first on both, and
/// the same length on both members every time.
#[test]
fn a_pair_allreduces_small_bytes_root_first() {
    let out = pair_group(Duration::from_secs(60)).run(|m| -> Result<(), GroupError> {
        let me = m.rank().0 as u8;
        for len in 1..=400usize {
            let mut d: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7) ^ me).collect();
            m.allreduce_bytes(&mut d, |a, o| {
                for (x, y) in a.iter_mut().zip(o) {
                    *x = x.wrapping_mul(3).wrapping_add(*y);
                }
            })?;
            for (i, x) in d.iter().enumerate() {
                let root = (i as u8).wrapping_mul(7);
                let child = root ^ 1;
                assert_eq!(
                    *x,
                    root.wrapping_mul(3).wrapping_add(child),
                    "{len} B, byte {i}"
                );
            }
        }
        Ok(())
    });
    out.unwrap();
}

/// Two members whose small allreduces differ in length (4 and 8 bytes, 8 and 16, 3
/// and 5): both fail with an error long before the timeout, neither hangs nor returns
/// a result.
#[test]
fn a_pair_allreduce_of_different_small_lengths_fails_both() {
    let timeout = Duration::from_secs(60);
    for (a, b) in [
        (4usize, 8usize),
        (8, 16),
        (3, 5),
        (8, 4),
        (64, 100),
        (100, 300),
        (300, 500),
    ] {
        let t = std::time::Instant::now();
        let out = pair_group(timeout).run(|m| {
            let len = if m.rank() == Rank(0) { a } else { b };
            let mut d = vec![1u8; len];
            m.allreduce_bytes(&mut d, |x, y| {
                for (p, q) in x.iter_mut().zip(y) {
                    *p ^= *q;
                }
            })
        });
        assert!(t.elapsed() < timeout / 4, "{a}/{b}: took {:?}", t.elapsed());
        let e = out.expect_err("lengths differ");
        let s = e.to_string();
        assert!(
            s.contains("sent") || s.contains("word") || s.contains("failed"),
            "{a}/{b}: {s}"
        );
    }
}
