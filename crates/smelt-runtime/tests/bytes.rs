//! `broadcast_into`, `reduce_bytes` and `allreduce_bytes` (collectives over byte
//! buffers of a length every member knows, with a combining function of the caller's)
//! on several tree shapes and roots, at lengths around the fragment size, checked
//! against a sequential computation; a length mismatch fails every member.

use smelt_runtime::{CpuId, Group, GroupError, Member, Pos};
use smelt_tree::Tree;
mod common;

/// A star, a chain and a binary tree over `n` members rooted at `root`.
fn shapes(n: usize, root: usize) -> Vec<Tree> {
    common::shapes(n, root, 5000)
}

fn data(rank: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + rank * 7 + 1) as u8).collect()
}

/// Byte-wise wrapping sum: commutative, so the tree's order does not matter.
fn add(acc: &mut [u8], x: &[u8]) {
    for (a, b) in acc.iter_mut().zip(x) {
        *a = a.wrapping_add(*b);
    }
}

/// Runs `body(n, root, member)` on every member of a group of every shape of 1 to 6
/// members and three roots; every member must succeed.
fn on_every_shape(body: impl Fn(usize, usize, &mut Member) -> Result<(), GroupError> + Sync) {
    for n in 1..=6 {
        for root in [0, n - 1, n / 2] {
            for tree in shapes(n, root) {
                let out = Group::new(&tree)
                    .unwrap()
                    .run(|m| body(n, root, m))
                    .unwrap();
                assert!(out.iter().all(|r| r.is_ok()), "{out:?}");
            }
        }
    }
}

#[test]
fn byte_collectives_match_a_sequential_computation() {
    // 64 slots of 48 bytes: 3072-byte fragments.
    let lens = [0usize, 1, 47, 3071, 3072, 3073, 10_000];
    on_every_shape(|n, root, m| {
        let r = m.rank().index();
        for &len in &lens {
            // broadcast_into: the root's bytes everywhere, root unchanged.
            let mut b = if r == root {
                data(root, len)
            } else {
                vec![0xAA; len]
            };
            m.broadcast_into(&mut b)?;
            assert_eq!(b, data(root, len), "broadcast n={n} root={root} len={len}");
            // reduce_bytes / allreduce_bytes: the byte-wise sum of all.
            let mut want = vec![0u8; len];
            for k in 0..n {
                add(&mut want, &data(k, len));
            }
            let mut d = data(r, len);
            let at_root = m.reduce_bytes(&mut d, add)?;
            assert_eq!(at_root, r == root);
            if at_root {
                assert_eq!(d, want, "reduce n={n} root={root} len={len}");
            }
            let mut d = data(r, len);
            m.allreduce_bytes(&mut d, add)?;
            assert_eq!(d, want, "allreduce n={n} root={root} len={len}");
        }
        Ok(())
    });
}

#[test]
fn combining_order_is_the_trees_pre_order() {
    // A non-commutative combination (append) shows the order: own value first, then
    // each child's subtree in send order.
    let tree = Tree::new(
        CpuId::list([10, 11, 12, 13]),
        Pos(0),
        vec![Pos::list([2, 1]), Pos::list([3]), vec![], vec![]],
    )
    .unwrap();
    let out = Group::new(&tree)
        .unwrap()
        .run(|m: &mut Member| -> Result<Vec<u8>, GroupError> {
            // Each member holds its rank in byte 0; `combine` shifts the incoming
            // digits in after the accumulated ones (base 4), so the root's result
            // spells the order.
            let mut d = vec![m.rank().index() as u8, 1];
            m.reduce_bytes(&mut d, |acc, x| {
                let digits = x[1] as u32;
                acc[0] = (acc[0] as u32 * 4u32.pow(digits) + x[0] as u32) as u8;
                acc[1] += x[1];
            })?;
            Ok(d)
        })
        .unwrap();
    // Pre-order: 0, 2, 1, 3 -> base-4 digits 0 2 1 3 = 0*64 + 2*16 + 1*4 + 3 = 39.
    assert_eq!(out[0].as_ref().unwrap(), &vec![39, 4]);
}

#[test]
fn a_length_mismatch_fails_every_member() {
    let tree = &shapes(3, 0)[2];
    let out = Group::new(tree).unwrap().run(|m: &mut Member| {
        let mut b = vec![0u8; if m.rank().index() == 2 { 5 } else { 4 }];
        m.broadcast_into(&mut b)
    });
    match out {
        Err(GroupError::PeerFailed { .. }) | Err(GroupError::Mismatch { .. }) => {}
        other => panic!("expected a failure, got {other:?}"),
    }
    let out = Group::new(tree).unwrap().run(|m: &mut Member| {
        let mut b = vec![0u8; if m.rank().index() == 1 { 9 } else { 8 }];
        m.reduce_bytes(&mut b, |_, _| {})
    });
    assert!(out.is_err(), "{out:?}");
}

/// A reduction of one slot (at most 48 bytes, received on the stack) against a member
/// with a longer message, either way round: the root reports the other length (the
/// longer message is received as the pipeline would, not failed as a transport error),
/// and the group fails instead of hanging.
#[test]
fn a_one_slot_reduction_against_a_longer_one_fails_with_the_lengths() {
    let tree = &shapes(3, 0)[2];
    for (root_len, child_len) in [(16, 100), (48, 49), (100, 16), (47, 48)] {
        let out = Group::new(tree).unwrap().run(|m: &mut Member| {
            let len = if m.rank().index() == 0 {
                root_len
            } else {
                child_len
            };
            let mut b = vec![1u8; len];
            m.reduce_bytes(&mut b, |a, x| a[0] = a[0].wrapping_add(x[0]))
        });
        match out {
            Err(GroupError::PeerFailed { what, .. }) | Err(GroupError::Mismatch { what, .. }) => {
                assert!(what.contains("another length"), "{what}")
            }
            other => panic!("{root_len} vs {child_len}: expected a failure, got {other:?}"),
        }
    }
}

#[test]
fn two_members_allreduce_exchanges_and_combines_root_first() {
    // Root is CPU 21 (rank 1): the result on both is combine(root's, child's), shown
    // by a non-commutative combination (the incoming digit appended in base 10).
    let tree = Tree::new(CpuId::list([20, 21]), Pos(1), vec![vec![], Pos::list([0])]).unwrap();
    let out = Group::new(&tree)
        .unwrap()
        .run(|m: &mut Member| -> Result<Vec<u8>, GroupError> {
            let mut last = Vec::new();
            for round in 0..2000usize {
                // A broadcast that nearly fills the ring first, so the exchange's sends
                // cross while the ring still holds it: no deadlock.
                let mut b = vec![round as u8; 3000];
                m.broadcast_into(&mut b)?;
                let mut d = vec![m.rank().index() as u8 + 1; 3000];
                m.allreduce_bytes(&mut d, |acc, x| {
                    for (a, b) in acc.iter_mut().zip(x) {
                        *a = *a * 10 + *b;
                    }
                })?;
                last = d;
            }
            Ok(last)
        })
        .unwrap();
    // Root (rank 1) holds 2, the child (rank 0) 1: 2 * 10 + 1 on both.
    assert_eq!(out[0].as_ref().unwrap(), &vec![21u8; 3000]);
    assert_eq!(out[1].as_ref().unwrap(), &vec![21u8; 3000]);
}

#[test]
fn gather_and_scatter_bytes_place_each_members_part_by_rank() {
    on_every_shape(|n, root, m| {
        let r = m.rank().index();
        // Around the fragment size (3072 bytes) in total and per member.
        for k in [0usize, 1, 7, 500, 3072, 3100] {
            let mut all = if r == root {
                vec![0xEE; n * k]
            } else {
                Vec::new()
            };
            let at_root = m.gather_bytes(&data(r, k), &mut all)?;
            assert_eq!(at_root, r == root);
            let want: Vec<u8> = (0..n).flat_map(|q| data(q, k)).collect();
            if at_root {
                assert_eq!(all, want, "gather n={n} root={root} k={k}");
            }
            let src = if r == root { want.clone() } else { Vec::new() };
            let mut mine = vec![0x11; k];
            m.scatter_bytes(&src, &mut mine)?;
            assert_eq!(mine, data(r, k), "scatter n={n} root={root} k={k}");
        }
        Ok(())
    });
}
