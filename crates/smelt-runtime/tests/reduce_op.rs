//! The typed reductions with a predefined operation (`reduce_slice_op`,
//! `allreduce_slice_op`) on every algorithm (the tree, lent between threads or in
//! fragments; recursive doubling; Rabenseifner's reduce-scatter + allgather; the
//! ring's reduce-scatter + allgather): every
//! element type × operation against a sequential computation at lengths around the
//! algorithms' boundaries (1 value, odd lengths, lengths not divisible by the group
//! size or by Rabenseifner's 48-byte units, around a link message, a fragment and a
//! loan chunk), in place; identical bits on every member for floating point; the
//! documented grouping of recursive doubling, Rabenseifner and the ring; 16 members on
//! the machine's few CPUs; an operation a type does not have is refused; a caller's
//! combine that may not commute never runs the ring.

use smelt_runtime::{Elem, Group, GroupConfig, GroupError, ReduceOp, LEND_FROM, LOAN_CHUNK};
use smelt_tree::tuning::AlgorithmTable;
use smelt_tree::{NonTree, Op, Tree};
use std::sync::{Arc, Mutex};
use std::time::Duration;
mod common;

/// One member's part of a test.
type Body<'a> = &'a (dyn Fn(&mut smelt_runtime::Member) -> Result<(), GroupError> + Sync);

/// The algorithms: (name, table rules or none for the tree, `lend_from`). The
/// default `lend_from` is 64 KiB, 32 KiB with more members than CPUs; 32 KiB set
/// explicitly lends Rabenseifner's pairs at the lengths here on any machine.
const ALGOS: [(&str, Option<&str>, usize); 6] = [
    ("tree (lent)", None, LEND_FROM),
    ("tree (fragments)", None, usize::MAX),
    (
        "recursive doubling",
        Some("allreduce=recursive-doubling"),
        LEND_FROM,
    ),
    ("rabenseifner", Some("allreduce=rabenseifner"), LEND_FROM),
    (
        "rabenseifner (pairs lent)",
        Some("allreduce=rabenseifner"),
        32 << 10,
    ),
    ("ring", Some("allreduce=ring"), LEND_FROM),
];

fn cfg(rules: Option<&str>, lend_from: usize) -> GroupConfig {
    GroupConfig {
        algorithms: rules.map(|r| Arc::new(AlgorithmTable::parse(r).unwrap())),
        link: smelt_runtime::LinkConfig::default().timeout(Duration::from_secs(60)),
        lend_from,
        ..GroupConfig::default()
    }
}

fn tree(n: usize) -> Tree {
    common::shapes(n, 0, 7000).pop().unwrap()
}

/// Member `r`'s `i`-th value: small integers (exact in every type, so any order of
/// combination gives the same result), with zeros for the logical operations.
fn value<T: Elem>(r: usize, i: usize) -> T {
    let w = (i * 7 + r * 3 + 1) % 11;
    let w = if (i + r).is_multiple_of(4) { 0 } else { w };
    if T::FLOAT {
        let f = w as f64 - 3.0;
        if T::NAME == "f32" {
            T::from_word((f as f32).to_bits() as u64)
        } else {
            T::from_word(f.to_bits())
        }
    } else {
        T::from_word(w as u64)
    }
}

fn sequential<T: Elem>(n: usize, len: usize, op: ReduceOp) -> Vec<T> {
    (0..len)
        .map(|i| {
            (1..n).fold(value::<T>(0, i), |acc, r| {
                T::combine_one(op, acc, value::<T>(r, i))
            })
        })
        .collect()
}

/// Runs both reductions of `len` values of `T` with every operation `T` has, on a
/// group of `n`, checking every member.
fn check<T: Elem>(g: &mut dyn FnMut(Body<'_>), n: usize, lens: &[usize]) {
    let lens = lens.to_vec();
    g(&move |m| {
        let r = m.rank().index();
        for &len in &lens {
            for op in ReduceOp::ALL {
                if op.check::<T>().is_err() {
                    continue;
                }
                let want = sequential::<T>(n, len, op);
                let mine: Vec<T> = (0..len).map(|i| value::<T>(r, i)).collect();
                let mut v = mine.clone();
                m.allreduce_slice_op(&mut v, op)?;
                assert!(
                    v == want,
                    "allreduce {} {op} len {len} n {n} member {r}",
                    T::NAME
                );
                let mut v = mine.clone();
                if m.reduce_slice_op(&mut v, op)? {
                    assert!(v == want, "reduce {} {op} len {len} n {n}", T::NAME);
                }
            }
        }
        Ok(())
    });
}

fn run_all_types(n: usize, rules: Option<&str>, lend: usize, small: &[usize], big: &[usize]) {
    let mut g = |f: Body<'_>| {
        let out = Group::with_config(&[tree(n)], &cfg(rules, lend))
            .unwrap()
            .run(f)
            .unwrap();
        for r in out {
            r.unwrap();
        }
    };
    check::<i8>(&mut g, n, small);
    check::<u8>(&mut g, n, small);
    check::<i16>(&mut g, n, small);
    check::<u16>(&mut g, n, small);
    check::<i32>(&mut g, n, small);
    check::<u32>(&mut g, n, small);
    check::<i64>(&mut g, n, small);
    check::<u64>(&mut g, n, small);
    check::<f32>(&mut g, n, small);
    check::<f64>(&mut g, n, small);
    check::<usize>(&mut g, n, small);
    check::<isize>(&mut g, n, small);
    // The long lengths with two types (every operation each).
    check::<f64>(&mut g, n, big);
    if n == 3 {
        check::<u32>(&mut g, n, big);
    }
}

/// Lengths (in values) around the boundaries of the 48-byte units, a link message
/// (about 3 KiB with the default capacity), the 64 KiB loan threshold and a loan chunk.
const SMALL: [usize; 9] = [0, 1, 2, 3, 5, 7, 13, 47, 100];

fn big(n: usize) -> Vec<usize> {
    let chunk = LOAN_CHUNK / 8;
    vec![
        383,
        384 * n + 1,
        (64 << 10) / 8 - 1,
        (64 << 10) / 8 + 3,
        chunk + 5 * n + 1,
        2 * chunk + 7,
    ]
}

#[test]
fn every_type_and_op_on_every_algorithm_matches_a_sequential_fold() {
    for n in [2, 3, 4, 5] {
        for (name, rules, lend) in ALGOS {
            eprintln!("{name}, {n} members");
            run_all_types(n, rules, lend, &SMALL, &big(n));
        }
    }
}

#[test]
fn sixteen_members_on_few_cpus() {
    for (name, rules, lend) in ALGOS {
        eprintln!("{name}, 16 members");
        let n = 16;
        let mut g = |f: Body<'_>| {
            let out = Group::with_config(&[tree(n)], &cfg(rules, lend))
                .unwrap()
                .run(f)
                .unwrap();
            for r in out {
                r.unwrap();
            }
        };
        check::<f64>(&mut g, n, &[1, 17, 1000, 40_000]);
        check::<i32>(&mut g, n, &[3, 4099]);
    }
}

/// Pseudo-random doubles whose sums round differently in different orders.
fn noisy(r: usize, i: usize) -> f64 {
    let mut x = (r as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (i as u64 + 7).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 29;
    ((x % 1_000_003) as f64) * 1e-3 + 1.0 / ((x % 97) as f64 + 3.0)
}

/// The documented grouping of recursive doubling and Rabenseifner: ranks from p on
/// folded into rank − p, then pairs at distance 1, 2, 4, ..., the lower rank's
/// value on the left.
fn doubling_order(n: usize, i: usize) -> f64 {
    let p = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let mut v: Vec<f64> = (0..p).map(|r| noisy(r, i)).collect();
    for e in p..n {
        v[e - p] += noisy(e, i);
    }
    let mut d = 1;
    while d < p {
        v = (0..p).map(|r| v[r.min(r ^ d)] + v[r.max(r ^ d)]).collect();
        d *= 2;
    }
    v[0]
}

/// The documented order of the ring (more than two members): value `i` lies in block
/// `b` of `n` (blocks cut at 48-byte units, the first ones a unit longer), combined
/// along the ring from member `b`: `x(b−1) + (… + (x(b+1) + x(b)))`.
fn ring_order(n: usize, len: usize, i: usize) -> f64 {
    let units = (len * 8).div_ceil(48);
    let (q, rem) = (units / n, units % n);
    let unit = i * 8 / 48;
    let b = (0..n)
        .find(|&b| unit < (b + 1) * q + (b + 1).min(rem))
        .expect("in a block");
    (1..n).fold(noisy(b, i), |acc, k| noisy((b + k) % n, i) + acc)
}

#[test]
fn floating_point_results_are_the_same_bits_everywhere_in_the_documented_order() {
    for n in [2, 3, 5, 6, 8] {
        for (name, rules, lend) in ALGOS {
            let len = 3 * LOAN_CHUNK / 8 + 11;
            let results = Mutex::new(Vec::new());
            let out = Group::with_config(&[tree(n)], &cfg(rules, lend))
                .unwrap()
                .run(|m| -> Result<(), GroupError> {
                    let r = m.rank().index();
                    let mut v: Vec<f64> = (0..len).map(|i| noisy(r, i)).collect();
                    m.allreduce_slice_op(&mut v, ReduceOp::Sum)?;
                    results.lock().unwrap().push(v);
                    Ok(())
                })
                .unwrap();
            for r in out {
                r.unwrap();
            }
            let results = results.into_inner().unwrap();
            let bits = |v: &Vec<f64>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for v in &results {
                assert!(
                    bits(v) == bits(&results[0]),
                    "{name}, {n} members: bits differ"
                );
            }
            if rules.is_some() {
                let ring = name == "ring" && n > 2;
                let want: Vec<f64> = (0..len)
                    .map(|i| {
                        if ring {
                            ring_order(n, len, i)
                        } else {
                            doubling_order(n, i)
                        }
                    })
                    .collect();
                assert!(
                    bits(&results[0]) == bits(&want),
                    "{name}, {n} members: not the documented order"
                );
            }
        }
    }
}

#[test]
fn the_table_picks_rabenseifner_by_size_and_in_place_is_fine() {
    let rules = "allreduce:0-1k=recursive-doubling;allreduce:1k-=rabenseifner";
    let out = Group::with_config(&[tree(4)], &cfg(Some(rules), LEND_FROM))
        .unwrap()
        .run(|m| -> Result<(), GroupError> {
            let c = m.context(0)?;
            assert_eq!(
                c.non_tree_for(Op::Allreduce, 8),
                Some(NonTree::RecursiveDoubling)
            );
            assert_eq!(
                c.non_tree_for(Op::Allreduce, 1 << 20),
                Some(NonTree::Rabenseifner)
            );
            let r = m.rank().index() as u64;
            for len in [1usize, 128, 129, 100_000] {
                let mut v: Vec<u64> = (0..len as u64).map(|i| i * 4 + r).collect();
                m.allreduce_slice_op(&mut v, ReduceOp::Sum)?;
                assert!(v.iter().enumerate().all(|(i, x)| *x == i as u64 * 16 + 6));
            }
            Ok(())
        })
        .unwrap();
    for r in out {
        r.unwrap();
    }
}

#[test]
fn an_operation_the_type_lacks_is_refused_on_every_member() {
    let out = Group::with_config(&[tree(3)], &cfg(None, LEND_FROM))
        .unwrap()
        .run(|m| {
            let mut v = vec![1.0f64; 10];
            let e = m.allreduce_slice_op(&mut v, ReduceOp::BitXor).unwrap_err();
            assert!(matches!(e, GroupError::Invalid(_)), "{e}");
            assert!(e.to_string().contains("bxor"), "{e}");
            // The group still works.
            m.allreduce_slice_op(&mut v, ReduceOp::Sum)?;
            assert_eq!(v, vec![3.0; 10]);
            Ok::<(), GroupError>(())
        })
        .unwrap();
    for r in out {
        r.unwrap();
    }
}

/// Two members whose data differ in length: an error on both (the exchange of loans
/// checks what it borrows), no hang, on Rabenseifner's pair path and on the mesh, and
/// round the ring.
#[test]
fn lengths_that_differ_fail_on_every_member() {
    // Doubles on member 1, on the others: also across the length from which the pair
    // steps of 4 members on few CPUs are lent (member 1 sends pieces where the others
    // lend).
    let across = (
        smelt_runtime::OVERSUBSCRIBED_LEND_FROM / 8 - 6,
        smelt_runtime::OVERSUBSCRIBED_LEND_FROM / 8 + 6,
    );
    for (n, rules, (one, others)) in [
        (2, "allreduce=rabenseifner", (20_006, 20_000)),
        (4, "allreduce=rabenseifner", (20_006, 20_000)),
        (4, "allreduce=rabenseifner", across),
        (3, "allreduce=ring", (20_006, 20_000)),
        (4, "allreduce=ring", (20_006, 20_000)),
    ] {
        let r = Group::with_config(&[tree(n)], &cfg(Some(rules), LEND_FROM))
            .unwrap()
            .run(|m| {
                let len = if m.rank().index() == 1 { one } else { others };
                let mut v = vec![1.0f64; len];
                m.allreduce_slice_op(&mut v, ReduceOp::Sum)
            });
        let errors: Vec<String> = match r {
            Err(e) => vec![e.to_string()],
            Ok(out) => out
                .into_iter()
                .map(|r| r.expect_err("a member succeeded").to_string())
                .collect(),
        };
        for e in errors {
            assert!(e.contains("differ in length"), "{rules}, {n} members: {e}");
        }
    }
}

/// `allreduce_bytes` with a combine of the caller's own runs Rabenseifner by loans
/// between two threads when the table picks it (one call, as the typed allreduce), and
/// combines the root's value on the left on both halves: checked with a combine that
/// does not commute (`a·3 + b` per byte), at lengths around the loan threshold and
/// Rabenseifner's 48-byte units, and both members' bytes compared.
#[test]
fn a_callers_combine_runs_the_pair_by_loans_with_the_roots_value_first() {
    let lend = smelt_runtime::LEND_FROM;
    let lens = [lend - 1, lend, lend + 1, lend + 47, 3 * lend + 5, 1 << 20];
    let f = |a: u8, b: u8| a.wrapping_mul(3).wrapping_add(b);
    let out = Group::with_config(&[tree(2)], &cfg(Some("allreduce=rabenseifner"), LEND_FROM))
        .unwrap()
        .run(|m| -> Result<Vec<Vec<u8>>, GroupError> {
            let r = m.rank().index();
            let root = m.is_root();
            let mut got = Vec::new();
            for len in lens {
                let mut v: Vec<u8> = (0..len).map(|i| (i * 7 + r * 13 + 1) as u8).collect();
                let s0 = m.context(0)?.sequence();
                m.allreduce_bytes(&mut v, |a, b| {
                    for (x, y) in a.iter_mut().zip(b) {
                        *x = f(*x, *y);
                    }
                })?;
                // By loans from the threshold on: one call (Rabenseifner over the
                // mesh is one too; the tree's reduce and broadcast two).
                assert_eq!(m.context(0)?.sequence() - s0, 1, "len {len}");
                let x = |q: usize, i: usize| (i * 7 + q * 13 + 1) as u8;
                let (r0, r1) = if root { (r, 1 - r) } else { (1 - r, r) };
                for (i, b) in v.iter().enumerate() {
                    assert_eq!(*b, f(x(r0, i), x(r1, i)), "len {len} byte {i}");
                }
                got.push(v);
            }
            Ok(got)
        })
        .unwrap();
    let a = out[0].as_ref().unwrap();
    let b = out[1].as_ref().unwrap();
    assert!(a == b, "the members' bytes differ");
}

/// The ring combines each block in ring order, so a combine of the caller's own
/// (which may not commute) runs Rabenseifner instead, in rank order: with the left
/// projection (`acc` kept), every member ends with member 0's bytes. The typed call
/// of the same group runs the ring (its result checked against a sequential sum).
#[test]
fn a_combine_that_may_not_commute_never_runs_the_ring() {
    for n in [3, 4, 5] {
        let len = 100_003;
        let out = Group::with_config(&[tree(n)], &cfg(Some("allreduce:1k-=ring"), LEND_FROM))
            .unwrap()
            .run(|m| -> Result<(), GroupError> {
                let r = m.rank().index();
                let c = m.context(0)?;
                assert_eq!(c.non_tree_for(Op::Allreduce, len), Some(NonTree::Ring));
                let mut v: Vec<u8> = (0..len).map(|i| (i * 7 + r * 13 + 1) as u8).collect();
                m.allreduce_bytes(&mut v, |_acc, _other| {})?;
                assert!(
                    v.iter().enumerate().all(|(i, b)| *b == (i * 7 + 1) as u8),
                    "{n} members: not member 0's bytes"
                );
                let mut w: Vec<u64> = (0..len as u64 / 8).map(|i| i * 5 + r as u64).collect();
                m.allreduce_slice_op(&mut w, ReduceOp::Sum)?;
                let tri = (n * (n - 1) / 2) as u64;
                assert!(w
                    .iter()
                    .enumerate()
                    .all(|(i, x)| *x == i as u64 * 5 * n as u64 + tri));
                Ok(())
            })
            .unwrap();
        for r in out {
            r.unwrap();
        }
    }
}
