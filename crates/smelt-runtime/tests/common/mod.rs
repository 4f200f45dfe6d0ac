//! What several integration tests share: random trees and a check of every collective
//! against a sequential computation, for members on any link.
#![allow(dead_code)]

use smelt_runtime::{CpuId, GroupError, Member, Pos};
use smelt_transport::Link;
use smelt_tree::Tree;

/// Trees over `n` members rooted at `root`: a star, a chain and a binary tree (in
/// that order), members on made-up CPU ids `first_cpu..` (so they run unpinned).
pub fn shapes(n: usize, root: usize, first_cpu: u32) -> Vec<Tree> {
    let order: Vec<usize> = std::iter::once(root)
        .chain((0..n).filter(|&m| m != root))
        .collect();
    let mut star = vec![Vec::new(); n];
    star[root] = order[1..].to_vec();
    let mut chain = vec![Vec::new(); n];
    let mut binary = vec![Vec::new(); n];
    for i in 1..n {
        chain[order[i - 1]].push(order[i]);
        binary[order[(i - 1) / 2]].push(order[i]);
    }
    let cpus = CpuId::list((0..n as u32).map(|i| first_cpu + i));
    [star, chain, binary]
        .into_iter()
        .map(|ch| {
            Tree::new(
                cpus.clone(),
                Pos(root),
                ch.into_iter().map(Pos::list).collect(),
            )
            .unwrap()
        })
        .collect()
}

/// A random tree over `n` members (CPU ids 0..n; on 2 CPUs most are made up, so members
/// run unpinned), from a small deterministic generator.
pub fn random_tree(n: usize, seed: u64) -> Tree {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let root = (next() % n as u64) as usize;
    let mut order: Vec<usize> = (0..n).filter(|&m| m != root).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    let mut children = vec![Vec::new(); n];
    let mut placed = vec![root];
    for m in order {
        let p = placed[(next() % placed.len() as u64) as usize];
        children[p].push(m);
        placed.push(m);
    }
    Tree::from_raw((0..n as u32).collect(), root, children).unwrap()
}

/// Every collective, `rounds` times, checked against what a sequential computation
/// gives.
pub fn all_collectives<L: Link>(m: &mut Member<L>, rounds: u64) -> Result<(), GroupError> {
    let n = m.size() as u64;
    let me = m.rank().index() as u64;
    for r in 0..rounds {
        m.barrier()?;
        let b = m.broadcast_word(if m.is_root() { r * 7 + 1 } else { 0 })?;
        assert_eq!(b, r * 7 + 1);
        let s = m.reduce(me + r, |a, b| a + b)?;
        if m.is_root() {
            assert_eq!(s, Some(n * (n - 1) / 2 + n * r));
        }
        let mx = m.allreduce(me ^ r, |a: u64, b| a.max(b))?;
        assert_eq!(mx, (0..n).map(|k| k ^ r).max().unwrap());
        if r % 16 == 0 {
            let mut v = vec![me as i64 - r as i64; 40];
            m.allreduce_slice(&mut v, |a, b| a + b)?;
            let expect: i64 = (0..n as i64).map(|k| k - r as i64).sum();
            assert!(v.iter().all(|&x| x == expect));
            let g = m.gather_word(me * 10 + r)?;
            if let Some(g) = g {
                assert_eq!(g, (0..n).map(|k| k * 10 + r).collect::<Vec<_>>());
            }
            let vals: Vec<u64> = (0..n).map(|k| k + 100 * r).collect();
            let got = m.scatter_word(m.is_root().then_some(&vals[..]))?;
            assert_eq!(got, me + 100 * r);
            let mut bytes = if m.is_root() {
                (0..300u32).map(|i| (i as u64 + r) as u8).collect()
            } else {
                Vec::new()
            };
            m.broadcast(&mut bytes)?;
            assert!(bytes
                .iter()
                .enumerate()
                .all(|(i, &x)| x == (i as u64 + r) as u8));
        }
    }
    Ok(())
}
