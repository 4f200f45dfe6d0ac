//! Property-style tests with deterministic seeds: every generator on random
//! subsets and roots, the simulator against independent formulas, the optimizer
//! and the exhaustive search against the heuristics.

mod common;

use common::{random_model, recursive_lat, stress, xeon, Rng};
use smelt_model::Model;
use smelt_tree::optimum::optimum;
use smelt_tree::sim::{self, simulate, Op, Payload};
use smelt_tree::{Costs, CpuId, Pos, Topology, Tree};
use std::time::Duration;

fn all_topologies() -> Vec<Topology> {
    let mut v = Topology::EVALUATED.to_vec();
    v.extend([
        Topology::Knomial(1),
        Topology::Knomial(3),
        Topology::Knomial(8),
    ]);
    v
}

fn models(rng: &mut Rng) -> Vec<Model> {
    vec![
        xeon(),
        random_model(rng, 24, 4),
        random_model(rng, 9, 3),
        smelt_model::synthetic(4, 4, 40.0, 120.0, 3.0),
    ]
}

#[test]
fn every_generator_builds_a_valid_tree_for_any_subset_and_root() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for m in models(&mut rng) {
        for _ in 0..6 * stress() {
            let k = 1 + rng.below(m.len());
            let members = rng.subset(m.len(), k);
            let root = if rng.below(3) == 0 {
                None
            } else {
                Some(members[rng.below(k)])
            };
            for t in all_topologies() {
                let tree = t.generate(&m, &members, root).unwrap();
                tree.validate().unwrap_or_else(|e| panic!("{t}: {e}"));
                let want: Vec<CpuId> = members.iter().map(|&p| CpuId(m.cpus[p])).collect();
                assert_eq!(tree.members, want, "{t}");
                if let Some(r) = root {
                    assert_eq!(tree.members[tree.root], CpuId(m.cpus[r]), "{t}");
                }
                // Predictions are finite and ordered sensibly.
                let p = sim::predict(&m, &tree, Payload::default()).unwrap();
                assert!(p.broadcast >= 0.0 && p.broadcast.is_finite());
                assert!(p.ab >= p.broadcast && p.barrier >= p.reduce, "{t} {p:?}");
                assert!(p.two_pc >= p.broadcast, "{t} {p:?}");
                assert!(
                    (p.broadcast - recursive_lat(&m, &tree)).abs() < 1e-6 * p.broadcast.max(1.0)
                );
            }
        }
    }
}

#[test]
fn generator_errors_are_reported() {
    let m = xeon();
    assert!(Topology::Adaptive.generate(&m, &[], None).is_err());
    assert!(Topology::Adaptive.generate(&m, &[1, 1], None).is_err());
    assert!(Topology::Adaptive.generate(&m, &[1, 99], None).is_err());
    assert!(Topology::Binary.generate(&m, &[1, 2], Some(3)).is_err());
    let stranger = Tree::new(
        CpuId::list([0, 4_000_000_000]),
        Pos(0),
        vec![vec![Pos(1)], vec![]],
    )
    .unwrap();
    assert!(sim::predict(&m, &stranger, Payload::default())
        .unwrap_err()
        .to_string()
        .contains("4000000000"));
    assert!("knomial:0".parse::<Topology>().is_err());
    assert!("nope"
        .parse::<Topology>()
        .unwrap_err()
        .contains("unknown topology"));
    for t in all_topologies() {
        assert_eq!(t.to_string().parse::<Topology>().unwrap(), t);
    }
}

/// A uniformly random tree with random send orders over `n` members.
fn random_tree(rng: &mut Rng, m: &Model, members: &[usize]) -> Tree {
    let n = members.len();
    let perm = rng.subset(n, n);
    let mut children = vec![Vec::new(); n];
    for i in 1..n {
        let p = perm[rng.below(i)];
        let at = rng.below(children[p].len() + 1);
        children[p].insert(at, Pos(perm[i]));
    }
    Tree::new(
        members.iter().map(|&p| CpuId(m.cpus[p])).collect(),
        Pos(perm[0]),
        children,
    )
    .unwrap()
}

/// The loosely synchronized reduce ([`Op::Reduce`]) as a recursion: children polled
/// in send order; a run of messages already there when the parent gets to them costs
/// the largest receive of the run.
fn recursive_reduce_overlapped(m: &Model, t: &Tree) -> f64 {
    fn done(m: &Model, t: &Tree, v: Pos) -> f64 {
        let pv = m.position(t.members[v].get()).unwrap();
        let kids: Vec<(f64, f64)> = t.children[v]
            .iter()
            .map(|&c| {
                let pc = m.position(t.members[c].get()).unwrap();
                (done(m, t, c) + m.send(pc, pv), m.receive(pc, pv))
            })
            .collect();
        let mut cur = 0.0f64;
        let mut i = 0;
        while i < kids.len() {
            if kids[i].0 > cur {
                cur = kids[i].0 + kids[i].1;
                i += 1;
            } else {
                let mut run = 0.0f64;
                while i < kids.len() && kids[i].0 <= cur {
                    run = run.max(kids[i].1);
                    i += 1;
                }
                cur += run;
            }
        }
        cur
    }
    done(m, t, t.root)
}

/// The strict reduce (the original Simulator's, [`sim::reduce_time`]) written as a
/// recursion, independently of the event simulator.
fn recursive_reduce(m: &Model, t: &Tree) -> f64 {
    fn done(m: &Model, t: &Tree, v: Pos) -> f64 {
        let pv = m.position(t.members[v].get()).unwrap();
        let mut arr: Vec<(f64, usize, usize)> = t.children[v]
            .iter()
            .enumerate()
            .map(|(k, &c)| {
                let pc = m.position(t.members[c].get()).unwrap();
                (done(m, t, c) + m.send(pc, pv), k, pc)
            })
            .collect();
        arr.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut cur = 0.0f64;
        for (a, _, pc) in arr {
            cur = cur.max(a) + m.receive(pc, pv);
        }
        cur
    }
    done(m, t, t.root)
}

#[test]
fn simulator_matches_the_recursive_formulas() {
    let mut rng = Rng(42);
    for m in models(&mut rng) {
        for _ in 0..20 * stress() {
            let k = 1 + rng.below(m.len());
            let members = rng.subset(m.len(), k);
            let t = random_tree(&mut rng, &m, &members);
            let c = Costs::for_tree(&m, &t).unwrap();
            let one = Payload::default();
            let b = simulate(&c, t.root.index(), &t.child_indices(), Op::Broadcast, one);
            assert!((b - recursive_lat(&m, &t)).abs() < 1e-6 * b.max(1.0));
            let (root, ch) = (t.root.index(), t.child_indices());
            let r = simulate(&c, root, &ch, Op::Reduce, one);
            assert!(
                (r - recursive_reduce_overlapped(&m, &t)).abs() < 1e-6 * r.max(1.0),
                "{r}"
            );
            let strict = sim::reduce_time(&c, root, &ch, &vec![0.0; c.len()], 1.0);
            assert!(
                (strict - recursive_reduce(&m, &t)).abs() < 1e-6 * strict.max(1.0),
                "{strict}"
            );
            // Overlapping never makes a reduce slower than taking the same messages
            // one by one in send order.
            assert!(r <= recursive_reduce_in_order(&c, root, &ch) + 1e-6 * r.max(1.0));
            // Barrier = strict reduce with members entering as the previous release
            // left them, then a broadcast; two members: one crossing exchange.
            let bar = simulate(&c, root, &ch, Op::Barrier, one);
            let want = match c.len() {
                1 => 0.0,
                2 => {
                    let o = 1 - root;
                    let s = c.s(root, o).max(c.s(o, root));
                    (s + c.r(o, root)).max(s + c.r(root, o))
                }
                n => {
                    let at = sim::broadcast_arrivals(&c, root, &ch, 1.0, 0.0);
                    let fw: Vec<f64> = (0..n)
                        .map(|v| at[v] + ch[v].iter().map(|&x| c.s(v, x)).sum::<f64>())
                        .collect();
                    let ready: Vec<f64> = fw.iter().map(|x| x - fw[root]).collect();
                    sim::reduce_time(&c, root, &ch, &ready, 1.0) + b
                }
            };
            assert!((bar - want).abs() < 1e-6 * bar.max(1.0), "{bar} {want}");
            // Payload: every cost scales with 1 + (lines-1) * factor.
            let three = Payload {
                lines: 3,
                extra_line_factor: 0.5,
            };
            for op in Op::ALL {
                let x = simulate(&c, t.root.index(), &t.child_indices(), op, one);
                let y = simulate(&c, t.root.index(), &t.child_indices(), op, three);
                assert!((y - 2.0 * x).abs() < 1e-6 * y.max(1.0), "{op:?} {x} {y}");
            }
        }
    }
}

/// Reduce taking every child's message in send order, one after the other.
fn recursive_reduce_in_order(c: &Costs, root: usize, ch: &[Vec<usize>]) -> f64 {
    fn done(c: &Costs, ch: &[Vec<usize>], v: usize) -> f64 {
        let mut t = 0.0f64;
        for &x in &ch[v] {
            t = t.max(done(c, ch, x) + c.s(x, v)) + c.r(x, v);
        }
        t
    }
    done(c, ch, root)
}

#[test]
fn reduce_overlaps_messages_already_there() {
    // A star 0 <- 1, 2, 3: send 1, receive 10, except receive 40 from member 2. All
    // three messages are there at 1 when the root polls child 1 (it waits for it):
    // the first is taken alone (1 + 10), the two others together at the dearer (40).
    let n = 4;
    let send = vec![1.0; n * n];
    let mut recv = vec![10.0; n * n];
    recv[2 * n] = 40.0;
    let c = Costs::from_matrices(send, recv, n).unwrap();
    let ch = vec![vec![1, 2, 3], vec![], vec![], vec![]];
    assert_eq!(simulate(&c, 0, &ch, Op::Reduce, Payload::default()), 51.0);
    // The strict reduce (barrier, 2PC) takes them one by one: 1 + 10 + 40 + 10.
    assert_eq!(sim::reduce_time(&c, 0, &ch, &[0.0; 4], 1.0), 61.0);
}

#[test]
fn two_members_barrier_is_one_exchange() {
    // send 0->1: 2, 1->0: 5; receive 0->1: 7, 1->0: 3. Both send at once: the root
    // holds 1's arrival at 5 + 3, member 1 the root's at 5 + 7.
    let c = Costs::from_matrices(vec![0.0, 2.0, 5.0, 0.0], vec![0.0, 7.0, 3.0, 0.0], 2).unwrap();
    let ch = vec![vec![1], vec![]];
    assert_eq!(simulate(&c, 0, &ch, Op::Barrier, Payload::default()), 12.0);
}

#[test]
fn two_phase_commit_on_a_chain_is_hand_computable() {
    // 0 -> 1 -> 2 with send 1 and receive 10 everywhere.
    let n = 3;
    let send = vec![1.0; n * n];
    let recv = vec![10.0; n * n];
    let c = Costs::from_matrices(send, recv, n).unwrap();
    let ch = vec![vec![1], vec![2], vec![]];
    let pl = Payload::default();
    assert_eq!(simulate(&c, 0, &ch, Op::Broadcast, pl), 22.0);
    assert_eq!(simulate(&c, 0, &ch, Op::AtomicBroadcast, pl), 33.0);
    assert_eq!(simulate(&c, 0, &ch, Op::Reduce, pl), 22.0);
    // Barrier: the previous release left 0 at 1 (its clock starts), 1 at 12 (holds
    // it at 11, forwards), 2 at 22, i.e. 0 / 11 / 21 relative to the root; 2's arrival
    // reaches 1 at 22, taken 32; 1's reaches the root at 33, taken 43; the release
    // reaches 2 at 43 + 22.
    assert_eq!(simulate(&c, 0, &ch, Op::Barrier, pl), 65.0);
    // prepare reaches 2 at 22; 2 votes: at 1 at 23, taken 33; 1 ready at 12 (sent at
    // 11+1), sends up at 34, root takes it at 44; commit reaches 2 at 66.
    assert_eq!(simulate(&c, 0, &ch, Op::TwoPhaseCommit, pl), 66.0);
}

#[test]
fn optimized_is_never_worse_than_the_adaptive_trees() {
    let mut rng = Rng(7);
    for m in models(&mut rng) {
        for _ in 0..4 * stress() {
            let k = 2 + rng.below(m.len() - 1);
            let members = rng.subset(m.len(), k);
            let root = Some(members[rng.below(k)]);
            let lat = |t: Topology| recursive_lat(&m, &t.generate(&m, &members, root).unwrap());
            let a = lat(Topology::Adaptive);
            let s = lat(Topology::AdaptiveSorted);
            let sh = lat(Topology::AdaptiveShuffled);
            let o = lat(Topology::Optimized);
            assert!(
                s <= a + 1e-9 && sh <= s + 1e-9 && o <= sh + 1e-9,
                "{a} {s} {sh} {o}"
            );
        }
    }
}

#[test]
fn trees_optimized_for_an_operation_beat_every_topology_at_it() {
    let mut rng = Rng(11);
    for m in models(&mut rng) {
        for _ in 0..2 * stress() {
            let k = 2 + rng.below(m.len() - 1);
            let members = rng.subset(m.len(), k);
            let c = Costs::new(&m, &members).unwrap();
            let root = rng.below(k);
            for op in [Op::Reduce, Op::Barrier, Op::TwoPhaseCommit] {
                let pl = Payload::default();
                let ch = Topology::OptimizedFor(op).children(&c, root);
                let mine = simulate(&c, root, &ch, op, pl);
                for t in Topology::EVALUATED {
                    let other = simulate(&c, root, &t.children(&c, root), op, pl);
                    assert!(mine <= other + 1e-9, "{op:?}: {t} {other} < {mine}");
                }
            }
        }
    }
}

/// Every tree and send order for a fixed root, by brute force (tiny n only).
fn brute_force(c: &Costs, root: usize) -> f64 {
    let n = c.len();
    let others: Vec<usize> = (0..n).filter(|&v| v != root).collect();
    let mut best = f64::INFINITY;
    // Parent choice for every non-root member, as a counter in base n.
    let mut par = vec![0usize; others.len()];
    loop {
        // Check it is a tree rooted at `root` (no cycles).
        let mut parent = vec![usize::MAX; n];
        for (i, &v) in others.iter().enumerate() {
            parent[v] = par[i];
        }
        let ok = others.iter().all(|&v| {
            let (mut x, mut steps) = (v, 0);
            while x != root && steps <= n {
                x = parent[x];
                if x == v || x == usize::MAX {
                    return false;
                }
                steps += 1;
            }
            x == root
        });
        if ok {
            let mut kids = vec![Vec::new(); n];
            for &v in &others {
                kids[parent[v]].push(v);
            }
            best = best.min(best_orders(c, root, &mut kids, 0));
        }
        // Next parent vector.
        let mut i = 0;
        loop {
            if i == par.len() {
                return best;
            }
            par[i] += 1;
            if par[i] < n {
                break;
            }
            par[i] = 0;
            i += 1;
        }
    }
}

fn best_orders(c: &Costs, root: usize, kids: &mut Vec<Vec<usize>>, v: usize) -> f64 {
    if v == kids.len() {
        return sim::broadcast_latency(c, root, kids);
    }
    let mut best = f64::INFINITY;
    let k = kids[v].len();
    let mut perm: Vec<usize> = (0..k).collect();
    let orig = kids[v].clone();
    loop {
        kids[v] = perm.iter().map(|&i| orig[i]).collect();
        best = best.min(best_orders(c, root, kids, v + 1));
        // next permutation
        let Some(i) = (1..k).rev().find(|&i| perm[i - 1] < perm[i]) else {
            break;
        };
        let j = (i..k).rev().find(|&j| perm[j] > perm[i - 1]).unwrap();
        perm.swap(i - 1, j);
        perm[i..].reverse();
    }
    kids[v] = orig;
    best
}

#[test]
fn exhaustive_search_is_optimal_and_beats_every_heuristic() {
    let mut rng = Rng(99);
    let m = xeon();
    for round in 0..3 * stress() {
        // Brute force agrees on tiny groups.
        let members = rng.subset(m.len(), 5);
        let c = Costs::new(&m, &members).unwrap();
        let root = rng.below(5);
        let opt = optimum(&c, root, Duration::from_secs(60), None).unwrap();
        assert!(opt.proven);
        let bf = brute_force(&c, root);
        assert!(
            (opt.latency - bf).abs() < 1e-6,
            "round {round}: {} vs {bf}",
            opt.latency
        );
        assert!((sim::broadcast_latency(&c, root, &opt.children) - opt.latency).abs() < 1e-6);
        // On 7 members it is at most every heuristic.
        let members = rng.subset(m.len(), 7);
        let c = Costs::new(&m, &members).unwrap();
        let root = rng.below(7);
        let opt = optimum(&c, root, Duration::from_secs(60), None).unwrap();
        assert!(opt.proven);
        for t in all_topologies() {
            let h = sim::broadcast_latency(&c, root, &t.children(&c, root));
            assert!(
                opt.latency <= h + 1e-9,
                "{t}: {h} < optimum {}",
                opt.latency
            );
        }
    }
}

#[test]
fn exhaustive_search_respects_its_time_limit() {
    let mut rng = Rng(5);
    let m = random_model(&mut rng, 12, 2);
    let c = Costs::new(&m, &(0..12).collect::<Vec<_>>()).unwrap();
    let inc = Topology::Optimized.children(&c, 0);
    let opt = optimum(&c, 0, Duration::from_millis(50), Some(&inc)).unwrap();
    // Either finished or stopped early; the result is never worse than the incumbent.
    assert!(opt.latency <= sim::broadcast_latency(&c, 0, &inc) + 1e-9);
    assert!(opt.elapsed < Duration::from_secs(30));
    assert!(optimum(
        &Costs::new(
            &smelt_model::synthetic(2, 8, 1.0, 1.0, 2.0),
            &(0..16).collect::<Vec<_>>()
        )
        .unwrap(),
        0,
        Duration::from_secs(1),
        None
    )
    .is_err());
}
