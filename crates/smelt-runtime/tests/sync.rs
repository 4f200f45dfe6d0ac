//! Loose and strict synchronization (`SyncMode`): back-to-back collectives of mixed
//! kinds on one context deliver in order and never mix data of consecutive calls
//! (16 members, more threads than CPUs); a strict collective returns on no member
//! before every member entered it; the per-call choice restores the context's mode.

use smelt_runtime::{Group, GroupConfig, GroupError, Member, SyncMode};
use smelt_tree::Tree;
use std::sync::atomic::{AtomicUsize, Ordering};

mod common;

/// A star, a chain and a binary tree over `n` members rooted at member 0.
fn shapes(n: usize) -> Vec<Tree> {
    common::shapes(n, 0, 9000)
}

fn rounds() -> usize {
    60 * smelt_transport::stress_scale() as usize
}

/// One round of mixed collectives; every result checked against what the round's
/// inputs give. Lengths change from round to round, so data of one call landing in
/// the next would be caught (wrong length or wrong values).
fn mixed_round(m: &mut Member, n: usize, round: usize) -> Result<(), GroupError> {
    let me = m.rank().index();
    let r = round as u64;
    assert_eq!(m.broadcast_word(if me == 0 { r } else { u64::MAX })?, r);
    let sum: u64 = (0..n as u64).map(|x| x + r).sum();
    if let Some(v) = m.reduce(me as u64 + r, |a, b| a + b)? {
        assert_eq!(v, sum);
    }
    let len = 1 + (round * 37) % 700;
    let mut v: Vec<u64> = (0..len).map(|i| (i + me) as u64 ^ r).collect();
    m.allreduce_slice(&mut v, |a, b| a.wrapping_add(b))?;
    for (i, x) in v.iter().enumerate() {
        let want = (0..n).fold(0u64, |acc, k| acc.wrapping_add((i + k) as u64 ^ r));
        assert_eq!(*x, want, "round {round} allreduce_slice[{i}]");
    }
    let blen = (round * 1013) % 5000;
    let mut b: Vec<u8> = if me == 0 {
        (0..blen).map(|i| (i + round) as u8).collect()
    } else {
        vec![0; blen]
    };
    m.broadcast_into(&mut b)?;
    assert!(
        b.iter().enumerate().all(|(i, x)| *x == (i + round) as u8),
        "round {round} broadcast_into"
    );
    if let Some(all) = m.gather_word((me as u64) << 32 | r)? {
        assert!(all
            .iter()
            .enumerate()
            .all(|(k, x)| *x == (k as u64) << 32 | r));
    }
    let vals: Vec<u64> = (0..n as u64).map(|k| k * 1000 + r).collect();
    assert_eq!(
        m.scatter_word((me == 0).then_some(&vals[..]))?,
        me as u64 * 1000 + r
    );
    if round.is_multiple_of(7) {
        m.barrier()?;
    }
    Ok(())
}

#[test]
fn loose_back_to_back_mixed_collectives_never_mix_calls() {
    let n = 16;
    for tree in shapes(n) {
        let out = Group::new(&tree)
            .unwrap()
            .run(|m: &mut Member| {
                assert_eq!(m.context(0).unwrap().sync_mode(), SyncMode::Loose);
                for round in 0..rounds() {
                    mixed_round(m, n, round)?;
                }
                Ok::<(), GroupError>(())
            })
            .unwrap();
        assert!(out.iter().all(|r| r.is_ok()), "{out:?}");
    }
}

#[test]
fn strict_collectives_return_only_after_everyone_entered() {
    let n = 8;
    let rounds = rounds();
    for tree in shapes(n) {
        for how in ["config", "set_sync", "with_sync"] {
            let entered: Vec<AtomicUsize> = (0..rounds).map(|_| AtomicUsize::new(0)).collect();
            let cfg = GroupConfig {
                sync: if how == "config" {
                    SyncMode::Strict
                } else {
                    SyncMode::Loose
                },
                ..GroupConfig::default()
            };
            let out = Group::with_config(std::slice::from_ref(&tree), &cfg)
                .unwrap()
                .run(|m: &mut Member| {
                    if how == "set_sync" {
                        m.set_sync(SyncMode::Strict);
                    }
                    for (round, e) in entered.iter().enumerate() {
                        e.fetch_add(1, Ordering::SeqCst);
                        let mut v = vec![m.rank().index() as u64; 1 + round % 50];
                        let mut call = |m: &mut Member| m.allreduce_slice(&mut v, |a, b| a + b);
                        if how == "with_sync" {
                            m.with_sync(SyncMode::Strict, &mut call)?;
                        } else {
                            call(m)?;
                        }
                        // Strict: every member entered before anyone left.
                        assert_eq!(e.load(Ordering::SeqCst), n, "{how}, round {round}");
                        assert!(v.iter().all(|&x| x == (n * (n - 1) / 2) as u64));
                    }
                    let mode = m.context(0).unwrap().sync_mode();
                    Ok::<SyncMode, GroupError>(mode)
                })
                .unwrap();
            let want = if how == "with_sync" {
                SyncMode::Loose
            } else {
                SyncMode::Strict
            };
            for r in &out {
                assert_eq!(r.as_ref().unwrap(), &want, "{how}: the mode afterwards");
            }
        }
    }
}

#[test]
fn strict_and_loose_give_the_same_results() {
    let n = 5;
    for tree in shapes(n) {
        let run = |mode: SyncMode| {
            let cfg = GroupConfig {
                sync: mode,
                ..GroupConfig::default()
            };
            Group::with_config(std::slice::from_ref(&tree), &cfg)
                .unwrap()
                .run(|m: &mut Member| {
                    for round in 0..20 {
                        mixed_round(m, n, round)?;
                    }
                    let mut f = vec![m.rank().index() as f64 * 0.1 + 0.3; 300];
                    m.allreduce_slice(&mut f, |a, b| a + b)?;
                    Ok::<Vec<f64>, GroupError>(f)
                })
                .unwrap()
        };
        let (a, b) = (run(SyncMode::Loose), run(SyncMode::Strict));
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.as_ref().unwrap(), y.as_ref().unwrap());
        }
    }
    assert_eq!("strict".parse::<SyncMode>(), Ok(SyncMode::Strict));
    assert!("tight"
        .parse::<SyncMode>()
        .unwrap_err()
        .contains("loose, strict"));
}
