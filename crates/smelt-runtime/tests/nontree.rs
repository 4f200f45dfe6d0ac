//! The non-tree collectives (dissemination barrier, recursive-doubling allreduce) a
//! group runs when its `GroupConfig::algorithms` table picks them: correct for every
//! group size (powers of two and not), checked against a sequential computation;
//! every member computes the same bits; the table's per-size choice is what runs;
//! back-to-back loose collectives of mixed kinds with 16 members on the machine's few
//! CPUs; a member that leaves is an error, not a hang.

use smelt_runtime::{CpuId, Group, GroupConfig, GroupError, Member, Pos, SyncMode};
use smelt_tree::tuning::AlgorithmTable;
use smelt_tree::{NonTree, Op, Tree};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
mod common;

fn cfg(rules: &str) -> GroupConfig {
    GroupConfig {
        algorithms: Some(Arc::new(AlgorithmTable::parse(rules).unwrap())),
        link: smelt_runtime::LinkConfig::default().timeout(Duration::from_secs(20)),
        ..GroupConfig::default()
    }
}

/// A binary tree over `n` members (made-up CPU ids: more members than CPUs run
/// unpinned).
fn tree(n: usize) -> Tree {
    common::shapes(n, 0, 7000).pop().unwrap()
}

const BOTH: &str = "barrier=dissemination;allreduce=recursive-doubling";

#[test]
fn dissemination_barrier_holds_everyone_for_every_size() {
    for n in (1..=9).chain([13, 16]) {
        let entered = AtomicUsize::new(0);
        let rounds = 20;
        let out = Group::with_config(&[tree(n)], &cfg(BOTH))
            .unwrap()
            .run(|m| -> Result<(), GroupError> {
                assert_eq!(
                    m.context(0)?.non_tree_for(Op::Barrier, 0),
                    (n > 1).then_some(NonTree::Dissemination)
                );
                for k in 0..rounds {
                    entered.fetch_add(1, Ordering::SeqCst);
                    m.barrier()?;
                    // Nobody leaves barrier k before every member entered it.
                    assert!(entered.load(Ordering::SeqCst) >= (k + 1) * n, "n={n} k={k}");
                    m.barrier()?;
                }
                Ok(())
            })
            .unwrap();
        assert!(out.iter().all(|r| r.is_ok()), "n={n}: {out:?}");
    }
}

/// `barrier_agree` gives every member the combination of every member's word, by
/// dissemination (the table's barrier) and on the tree, for every group size, and holds
/// everyone as a barrier does.
#[test]
fn barrier_agree_combines_every_word_for_every_size() {
    for rules in [BOTH, "allreduce=recursive-doubling"] {
        for n in (1..=9).chain([13, 16]) {
            let entered = AtomicUsize::new(0);
            let out = Group::with_config(&[tree(n)], &cfg(rules))
                .unwrap()
                .run(|m| -> Result<(), GroupError> {
                    let me = m.rank().index() as u64;
                    for k in 0..10u64 {
                        entered.fetch_add(1, Ordering::SeqCst);
                        // The largest word, and whether all words are equal.
                        let max = m.barrier_agree(me * 100 + k, u64::max)?;
                        assert_eq!(max, (n as u64 - 1) * 100 + k, "{rules} n={n}");
                        assert!(entered.load(Ordering::SeqCst) >= (k as usize + 1) * n);
                        let same = |a: u64, b: u64| if a == b { a } else { u64::MAX };
                        assert_eq!(m.barrier_agree(k, same)?, k);
                        let odd = m.barrier_agree(if me == n as u64 / 2 { 1 } else { 0 }, same)?;
                        assert_eq!(odd, if n == 1 { 1 } else { u64::MAX }, "{rules} n={n}");
                    }
                    Ok(())
                })
                .unwrap();
            assert!(out.iter().all(|r| r.is_ok()), "{rules} n={n}: {out:?}");
        }
    }
}

#[test]
fn recursive_doubling_matches_a_sequential_fold_for_every_size() {
    for n in (1..=9).chain([12, 16]) {
        let out = Group::with_config(&[tree(n)], &cfg(BOTH))
            .unwrap()
            .run(|m| -> Result<(), GroupError> {
                let r = m.rank().index();
                if n > 1 {
                    assert_eq!(
                        m.context(0)?.non_tree_for(Op::Allreduce, 8),
                        Some(NonTree::RecursiveDoubling)
                    );
                }
                // Words.
                let s = m.allreduce(r as u64 + 1, |a, b| a + b)?;
                assert_eq!(s, (n * (n + 1) / 2) as u64);
                let mx = m.allreduce(r as i32 * 7 % 5, i32::max)?;
                assert_eq!(mx, (0..n).map(|i| i as i32 * 7 % 5).max().unwrap());
                // Bytes, around and beyond one link message (3072 bytes).
                for len in [0usize, 1, 47, 48, 3071, 3072, 3073, 10_000] {
                    let mine: Vec<u8> = (0..len).map(|i| (i * 31 + r * 7 + 1) as u8).collect();
                    let mut want = vec![0u8; len];
                    for k in 0..n {
                        for (i, w) in want.iter_mut().enumerate() {
                            *w ^= (i * 31 + k * 7 + 1) as u8;
                        }
                    }
                    let mut got = mine.clone();
                    m.allreduce_bytes(&mut got, |a, b| {
                        for (x, y) in a.iter_mut().zip(b) {
                            *x ^= *y;
                        }
                    })?;
                    assert_eq!(got, want, "n={n} len={len}");
                }
                // Slices of u32 (exact) and f64 (rounding: every member the same bits).
                let mut v: Vec<u32> = (0..1000).map(|i| i * (r as u32 + 1)).collect();
                m.allreduce_slice(&mut v, |a, b| a.wrapping_add(b))?;
                let tri = (n * (n + 1) / 2) as u32;
                assert!(v.iter().enumerate().all(|(i, x)| *x == i as u32 * tri));
                let mut f: Vec<f64> = (0..500).map(|i| 0.1 * i as f64 + r as f64 / 3.0).collect();
                m.allreduce_slice(&mut f, |a, b| a + b)?;
                Ok(())
            })
            .unwrap();
        assert!(out.iter().all(|r| r.is_ok()), "n={n}: {out:?}");
    }
    // Every member computes the same bits (f64 addition is not associative).
    for n in [3, 5, 6, 8] {
        let out = Group::with_config(&[tree(n)], &cfg(BOTH))
            .unwrap()
            .run(|m| {
                let r = m.rank().index() as f64;
                let mut f: Vec<f64> = (0..300).map(|i| 0.1 * i as f64 + r / 3.0 + 1e-9).collect();
                m.allreduce_slice(&mut f, |a, b| a + b).unwrap();
                let w = m.allreduce(r / 7.0 + 0.1, |a, b| a + b).unwrap();
                (
                    f.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                    w.to_bits(),
                )
            })
            .unwrap();
        assert!(out.iter().all(|o| *o == out[0]), "n={n}");
    }
}

#[test]
fn the_table_picks_per_size_and_mode() {
    let n = 5;
    let c = cfg("allreduce:0-64=recursive-doubling;barrier@strict=dissemination");
    let out = Group::with_config(&[tree(n)], &c)
        .unwrap()
        .run(|m| -> Result<(), GroupError> {
            let ctx = m.context(0)?;
            assert_eq!(
                ctx.non_tree_for(Op::Allreduce, 64),
                Some(NonTree::RecursiveDoubling)
            );
            assert_eq!(ctx.non_tree_for(Op::Allreduce, 65), None);
            assert_eq!(ctx.non_tree_for(Op::Barrier, 0), None);
            // A tree allreduce is a reduce and a broadcast (two calls); recursive
            // doubling is one.
            let s0 = ctx.sequence();
            let mut small = [1u8; 8];
            ctx.allreduce_bytes(&mut small, |a, b| a[0] += b[0])?;
            assert_eq!(ctx.sequence() - s0, 1);
            assert_eq!(small[0], n as u8);
            let s1 = ctx.sequence();
            let mut big = vec![1u8; 100];
            ctx.allreduce_bytes(&mut big, |a, b| a[0] += b[0])?;
            assert_eq!(ctx.sequence() - s1, 2);
            assert_eq!(big[0], n as u8);
            ctx.set_sync(SyncMode::Strict);
            assert_eq!(
                ctx.non_tree_for(Op::Barrier, 0),
                Some(NonTree::Dissemination)
            );
            ctx.barrier()?;
            let v = ctx.allreduce(2u64, |a, b| a * b)?;
            assert_eq!(v, 1 << n);
            Ok(())
        })
        .unwrap();
    assert!(out.iter().all(|r| r.is_ok()), "{out:?}");
    // A table that never picks a non-tree algorithm builds no extra links.
    let c = cfg("allreduce=binary");
    let out = Group::with_config(&[tree(4)], &c)
        .unwrap()
        .run(|m| m.context(0).unwrap().non_tree_for(Op::Allreduce, 8))
        .unwrap();
    assert!(out.iter().all(|r| r.is_none()));
    // Rules that name a non-tree algorithm for the wrong operation are refused.
    let e = AlgorithmTable::parse("reduce=recursive-doubling").unwrap_err();
    assert!(e.0.contains("allreduce"), "{e}");
    let e = AlgorithmTable::parse("*=dissemination").unwrap_err();
    assert!(e.0.contains("barrier=dissemination"), "{e}");
}

/// 16 members on the machine's CPUs (oversubscribed here): loose back-to-back
/// collectives of mixed kinds, tree and non-tree, deliver in order.
#[test]
fn sixteen_members_mix_tree_and_non_tree_collectives_back_to_back() {
    let n = 16;
    let out = Group::with_config(&[tree(n)], &cfg(BOTH))
        .unwrap()
        .run(|m| -> Result<(), GroupError> {
            let r = m.rank().index() as u64;
            for k in 0..50u64 {
                let b = m.broadcast_word(if m.is_root() { k } else { 0 })?;
                assert_eq!(b, k);
                let s = m.allreduce(r + k, |a, b| a + b)?;
                assert_eq!(s, (0..n as u64).map(|x| x + k).sum::<u64>());
                m.barrier()?;
                let red = m.reduce(r * k, |a, b| a + b)?;
                if m.is_root() {
                    assert_eq!(red, Some((0..n as u64).sum::<u64>() * k));
                }
                let mut v = vec![r as u32; 20];
                m.allreduce_slice(&mut v, |a, b| a + b)?;
                assert_eq!(v[19], (0..n as u32).sum::<u32>());
            }
            Ok(())
        })
        .unwrap();
    assert!(out.iter().all(|r| r.is_ok()), "{out:?}");
}

/// A member that leaves while the others are in a non-tree collective fails them
/// with an error naming it (no hang, long before the timeout).
#[test]
fn a_member_that_leaves_fails_the_others() {
    for (rules, op) in [
        ("barrier=dissemination", "dissemination barrier"),
        (
            "allreduce=recursive-doubling",
            "recursive-doubling allreduce",
        ),
    ] {
        let n = 6;
        let mut c = cfg(rules);
        c.link.timeout = Duration::from_secs(60);
        let start = std::time::Instant::now();
        let err = Group::with_config(&[tree(n)], &c)
            .unwrap()
            .run(|m: &mut Member| -> Result<(), GroupError> {
                if m.rank().index() == 3 {
                    return Ok(()); // leaves at once
                }
                if op.contains("barrier") {
                    m.barrier()
                } else {
                    m.allreduce(1u64, |a, b| a + b).map(|_| ())
                }
            })
            .unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{op}: took too long"
        );
        let text = err.to_string();
        assert!(text.contains('3') && text.contains(op), "{op}: {text}");
    }
}

/// A group whose table was built but whose CPUs are the machine's own: the links
/// also work pinned (two members on two CPUs, when there are two).
#[test]
fn pinned_two_member_group_runs_both() {
    let cpus = smelt_transport::allowed_cpus().unwrap_or_default();
    let ids: Vec<u32> = cpus.iter().copied().take(2).collect();
    if ids.len() < 2 {
        return;
    }
    let t = Tree::new(CpuId::list(ids), Pos(0), vec![vec![Pos(1)], vec![]]).unwrap();
    let out = Group::with_config(&[t], &cfg(BOTH))
        .unwrap()
        .run(|m| -> Result<u64, GroupError> {
            m.barrier()?;
            m.allreduce(m.rank().index() as u64 + 10, |a, b| a + b)
        })
        .unwrap();
    assert_eq!(out, vec![Ok(21), Ok(21)]);
}

/// With more members than CPUs and `flatten_oversubscribed`, the barrier runs on the
/// flat tree even where the table (a file's or the prediction's choice) says
/// dissemination (`AlgorithmTable::for_flat_oversubscribed`); the allreduce keeps its
/// pick, and the barrier still holds everyone.
#[test]
fn a_flattened_oversubscribed_group_runs_the_barrier_on_its_flat_tree() {
    use smelt_tree::Algorithm;
    let n = smelt_transport::allowed_cpus().unwrap().len() + 3;
    let table =
        AlgorithmTable::fixed(Op::Barrier, Algorithm::NonTree(NonTree::Dissemination)).unwrap();
    for flatten in [false, true] {
        let c = GroupConfig {
            algorithms: Some(Arc::new(table.clone())),
            flatten_oversubscribed: flatten,
            link: smelt_runtime::LinkConfig::default().timeout(Duration::from_secs(20)),
            ..GroupConfig::default()
        };
        let entered = AtomicUsize::new(0);
        let out = Group::with_config(&[tree(n)], &c)
            .unwrap()
            .run(|m| -> Result<(), GroupError> {
                let expect = (!flatten).then_some(NonTree::Dissemination);
                assert_eq!(m.context(0)?.non_tree_for(Op::Barrier, 0), expect);
                for k in 0..10 {
                    entered.fetch_add(1, Ordering::SeqCst);
                    m.barrier()?;
                    assert!(entered.load(Ordering::SeqCst) >= (k + 1) * n);
                    m.barrier()?;
                }
                Ok(())
            })
            .unwrap();
        assert!(out.iter().all(|r| r.is_ok()), "flatten={flatten}: {out:?}");
    }
}

/// Two members whose table picks the dissemination barrier run its one round over the
/// tree's link, so a barrier (or `barrier_agree`) that crosses another collective on
/// the other member is named as a mismatch at the first message, not found by the
/// timeout (through the mesh each waited on a different link until it ran out).
#[test]
fn two_members_name_a_barrier_that_crosses_another_collective() {
    for (rules, agree) in [
        (BOTH, false),
        (BOTH, true),
        ("allreduce=recursive-doubling", true),
    ] {
        let mut c = cfg(rules);
        c.link.timeout = Duration::from_secs(30);
        let start = std::time::Instant::now();
        let err = Group::with_config(&[tree(2)], &c)
            .unwrap()
            .run(|m: &mut Member| -> Result<(), GroupError> {
                // Both agree once, then member 1 calls a broadcast where member 0
                // calls the barrier.
                assert_eq!(m.barrier_agree(m.rank().index() as u64, u64::max)?, 1);
                if m.rank().index() == 1 {
                    m.broadcast_word(0).map(|_| ())
                } else if agree {
                    m.barrier_agree(5, u64::max).map(|_| ())
                } else {
                    m.barrier()
                }
            })
            .unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{rules} agree={agree}: found by the timeout"
        );
        let text = err.to_string();
        assert!(
            text.contains("different collectives"),
            "{rules} agree={agree}: {text}"
        );
    }
}
