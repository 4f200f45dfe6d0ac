//! Large messages: every collective that moves bytes or slices, from 0 bytes to
//! 16 MiB + 1 (odd sizes, sizes around the fragment size), with the default fragment
//! size and with small and odd configured ones, on a star, a chain and a binary tree
//! of three and four members, checked against a sequential computation; a message
//! past `GroupConfig::max_message` fails every member with a clear error and no hang.
//!
//! Messages of 64 KiB and more are lent between threads (single copy); a test runs
//! both paths at the same sizes. The largest sizes run once per collective by default; `SMELT_STRESS=k` adds k
//! pseudo-random sizes up to 16 MiB + 1 per configuration.

use smelt_runtime::{Group, GroupConfig, GroupError, Member};
use smelt_tree::Tree;
mod common;

/// A star, a chain and a binary tree over `n` members rooted at `root`.
fn shapes(n: usize, root: usize) -> Vec<Tree> {
    common::shapes(n, root, 7000)
}

fn data(rank: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 131 + rank * 17 + 3) as u8).collect()
}

fn add(acc: &mut [u8], x: &[u8]) {
    for (a, b) in acc.iter_mut().zip(x) {
        *a = a.wrapping_add(*b);
    }
}

fn stress() -> usize {
    // 0 when unset: the stress sizes run only when asked for.
    smelt_settings::count(smelt_settings::STRESS)
        .unwrap()
        .unwrap_or(0) as usize
}

/// Runs every byte and slice collective with `len` bytes on `tree`, checking each
/// member's result against the sequential computation.
fn check_all(tree: &Tree, cfg: &GroupConfig, len: usize) {
    let n = tree.len();
    let root = tree.root.index();
    let out = Group::with_config(std::slice::from_ref(tree), cfg)
        .unwrap()
        .run(|m: &mut Member| -> Result<(), GroupError> {
            let me = m.rank().index();
            let mut expect_sum = vec![0u8; len];
            for r in 0..n {
                add(&mut expect_sum, &data(r, len));
            }
            // broadcast_into
            let mut b = if me == root {
                data(root, len)
            } else {
                vec![0; len]
            };
            m.broadcast_into(&mut b)?;
            assert!(b == data(root, len), "broadcast_into of {len} bytes");
            // broadcast (Vec)
            let mut v = if me == root {
                data(root, len)
            } else {
                vec![1, 2, 3]
            };
            m.broadcast(&mut v)?;
            assert!(v == data(root, len), "broadcast of {len} bytes");
            // reduce_bytes
            let mut d = data(me, len);
            if m.reduce_bytes(&mut d, add)? {
                assert!(d == expect_sum, "reduce_bytes of {len} bytes");
            }
            // allreduce_bytes
            let mut d = data(me, len);
            m.allreduce_bytes(&mut d, add)?;
            assert!(d == expect_sum, "allreduce_bytes of {len} bytes");
            // reduce_slice / allreduce_slice of u64 and f64 (whole values only)
            let k = len / 8;
            let mine: Vec<u64> = (0..k).map(|i| (i as u64) * 3 + me as u64).collect();
            let want: Vec<u64> = (0..k)
                .map(|i| (0..n).map(|r| (i as u64) * 3 + r as u64).sum())
                .collect();
            let mut s = mine.clone();
            if m.reduce_slice(&mut s, |a, b| a + b)? {
                assert!(s == want, "reduce_slice of {k} u64");
            }
            let mut s = mine.clone();
            m.allreduce_slice(&mut s, |a, b| a + b)?;
            assert!(s == want, "allreduce_slice of {k} u64");
            // Integers in doubles: exact in any order.
            let mut f: Vec<f64> = mine.iter().map(|&x| x as f64).collect();
            m.allreduce_slice(&mut f, |a, b| a + b)?;
            assert!(
                f.iter().zip(&want).all(|(a, b)| *a == *b as f64),
                "allreduce_slice of {k} f64"
            );
            // gather / scatter of len / n bytes each (bounded: the root holds all)
            let part = (len / n).min(1 << 20);
            let mut all = vec![0u8; if me == root { part * n } else { 0 }];
            if m.gather_bytes(&data(me, part), &mut all)? {
                for r in 0..n {
                    assert!(
                        all[r * part..(r + 1) * part] == data(r, part)[..],
                        "gather of {part} bytes"
                    );
                }
            }
            let src: Vec<u8> = if me == root {
                (0..n).flat_map(|r| data(r + 10, part)).collect()
            } else {
                Vec::new()
            };
            let mut mine_part = vec![0u8; part];
            m.scatter_bytes(&src, &mut mine_part)?;
            assert!(mine_part == data(me + 10, part), "scatter of {part} bytes");
            Ok(())
        })
        .unwrap();
    for (r, o) in out.iter().enumerate() {
        assert!(o.is_ok(), "member {r} with {len} bytes: {o:?}");
    }
}

#[test]
fn sizes_around_the_fragment_and_odd_ones() {
    for segment in [None, Some(48), Some(100), Some(1 << 20)] {
        let cfg = GroupConfig {
            segment,
            ..GroupConfig::default()
        };
        let seg = cfg.segment_bytes();
        assert_eq!(seg % 48, 0);
        let mut sizes = vec![0, 1, 7, 47, 48, 49, 95, 96, 97, 1000, 4097, 65_537];
        sizes.extend([
            seg - 1,
            seg,
            seg + 1,
            2 * seg - 1,
            2 * seg,
            2 * seg + 1,
            3 * seg + 5,
        ]);
        for n in [3, 4] {
            for tree in shapes(n, n / 2) {
                for &len in &sizes {
                    check_all(&tree, &cfg, len);
                }
            }
        }
    }
}

/// A tuned fragment size per operation and message size (here from `SMELT_TUNE`-style
/// rules; from the host's tuning file alike): each call uses the size its operation
/// and length select, every member cuts alike, and results stay right at sizes around
/// each tuned fragment, in both modes.
#[test]
fn tuned_fragment_sizes_per_operation_and_size() {
    let rules = "bcast:0-2k=binary,segment=96;bcast=binary,segment=500;\
                 reduce=binary,segment=144;allreduce:4k-=binary,segment=48";
    let table = smelt_tree::tuning::AlgorithmTable::parse(rules).unwrap();
    assert!(table.tunes_segments());
    let cfg = GroupConfig {
        algorithms: Some(std::sync::Arc::new(table)),
        ..GroupConfig::default()
    };
    let own = cfg.segment_bytes();
    use smelt_tree::Op;
    for mode in [
        smelt_runtime::SyncMode::Loose,
        smelt_runtime::SyncMode::Strict,
    ] {
        let tree = shapes(4, 1).pop().unwrap();
        let out = Group::with_config(std::slice::from_ref(&tree), &cfg)
            .unwrap()
            .run(|m: &mut Member| -> Result<(), GroupError> {
                m.set_sync(mode);
                let c = m.context(0)?;
                assert_eq!(c.fragment_bytes(Op::Broadcast, 1000), 96);
                assert_eq!(c.fragment_bytes(Op::Broadcast, 5000), 480); // 500 rounded down
                assert_eq!(c.fragment_bytes(Op::Reduce, 5000), 144);
                assert_eq!(c.fragment_bytes(Op::Allreduce, 5000), 48);
                assert_eq!(c.fragment_bytes(Op::Allreduce, 1000), own);
                // Remembered per operation, mode and length: a repeat gives the same,
                // another length or mode its own.
                for (op, len, want) in [
                    (Op::Broadcast, 1000, 96),
                    (Op::Broadcast, 1000, 96),
                    (Op::Reduce, 5000, 144),
                    (Op::Broadcast, 5000, 480),
                    (Op::Broadcast, 1000, 96),
                    (Op::Allreduce, 5000, 48),
                    (Op::Allreduce, 1000, own),
                    (Op::Allreduce, 1000, own),
                    (Op::Allreduce, 5000, 48),
                ] {
                    assert_eq!(c.fragment_bytes(op, len), want, "{op:?} of {len} B");
                }
                Ok(())
            })
            .unwrap();
        assert!(out.iter().all(|r| r.is_ok()), "{out:?}");
        for len in [
            0, 95, 96, 97, 143, 144, 145, 479, 480, 481, 1000, 2048, 4095, 4096, 9000,
        ] {
            let mut cfg = cfg.clone();
            cfg.sync = mode;
            check_all(&tree, &cfg, len);
        }
    }
}

/// Loans (single copy between threads) from every size up, across chunk boundaries,
/// and the fragment path at sizes that are normally lent.
#[test]
fn lent_and_fragmented_paths_agree() {
    let chunk = smelt_runtime::LOAN_CHUNK;
    for lend_from in [100, usize::MAX] {
        let cfg = GroupConfig {
            lend_from,
            ..GroupConfig::default()
        };
        let sizes = [
            0,
            1,
            99,
            100,
            101,
            4096,
            chunk - 1,
            chunk,
            chunk + 1,
            2 * chunk + 7,
        ];
        for n in [2, 3, 4] {
            for tree in shapes(n, n - 1) {
                for len in sizes {
                    check_all(&tree, &cfg, len);
                }
            }
        }
    }
}

/// Two members with a CPU each copy a long broadcast together (each lends the other
/// part of its buffer; from `PAIR_COPY_FROM`): sizes around the threshold and around
/// the cache-line rounding of the half, either member the root.
#[test]
fn two_members_share_the_copy_of_a_long_broadcast() {
    let from = smelt_runtime::PAIR_COPY_FROM;
    let cfg = GroupConfig::default();
    // The shared copy needs a CPU per member; with one CPU these sizes take the
    // ordinary loan (still checked), and the test says so.
    let oversubscribed = Group::with_config(&shapes(2, 0)[..1], &cfg)
        .unwrap()
        .placement()
        .oversubscribed;
    let cpus = smelt_transport::allowed_cpus().map_or(1, |c| c.len());
    assert_eq!(oversubscribed, cpus < 2, "2 members on {cpus} CPUs");
    if oversubscribed {
        eprintln!("one CPU: the shared copy is not taken here, the ordinary loan is checked");
    }
    for len in [
        from - 1,
        from,
        from + 1,
        from + 63,
        from + 64,
        from + 127,
        (1 << 20) + 3,
    ] {
        for root in [0, 1] {
            check_all(&shapes(2, root)[0], &cfg, len);
        }
    }
}

/// A shared copy where the two members' buffers differ in length (both past the
/// threshold, or one on each side of it): the group fails, without a hang.
#[test]
fn a_shared_copy_of_buffers_of_other_lengths_fails_the_group() {
    let from = smelt_runtime::PAIR_COPY_FROM;
    for root in [0, 1] {
        for (a, b) in [
            (from, from + 64),
            (from + 64, from),
            (from + 1, from),
            (2 * from, from - 1),
            (from - 1, 2 * from),
        ] {
            let t0 = std::time::Instant::now();
            let out = Group::with_config(&shapes(2, root)[..1], &GroupConfig::default())
                .unwrap()
                .run(|m: &mut Member| {
                    let len = if m.rank().index() == 0 { a } else { b };
                    let mut v = vec![1u8; len];
                    m.broadcast_into(&mut v)
                });
            let failed = match out {
                Err(_) => true,
                Ok(rs) => rs.iter().any(|r| r.is_err()),
            };
            assert!(
                failed,
                "root {root}, lengths {a} and {b}: the group must fail"
            );
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(20),
                "root {root}, lengths {a} and {b}: took {:?}",
                t0.elapsed()
            );
        }
    }
}

#[test]
fn sixteen_mebibytes_and_one() {
    let big = (16 << 20) + 1;
    let cfg = GroupConfig::default();
    let trees = shapes(3, 1);
    // The chain: every byte crosses two hops, fragment by fragment.
    check_all(&trees[1], &cfg, big);
    check_all(&trees[2], &cfg, (1 << 20) + 3);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..stress() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % (big as u64 + 1)) as usize;
        for tree in &trees {
            check_all(tree, &cfg, len);
        }
    }
}

#[test]
fn a_message_past_the_limit_fails_every_member_with_a_clear_error() {
    let cfg = GroupConfig {
        max_message: 1 << 16,
        ..GroupConfig::default()
    };
    for tree in shapes(3, 0) {
        // The root's broadcast is too long: every member fails, none hangs.
        let out = Group::with_config(std::slice::from_ref(&tree), &cfg)
            .unwrap()
            .run(|m: &mut Member| {
                let mut b = vec![0u8; (1 << 16) + 1];
                m.broadcast_into(&mut b)
            });
        let e = out.expect_err("an oversized broadcast fails the group");
        assert!(e.to_string().contains("longer than the limit"), "{e}");
        // A reduction: same.
        let out = Group::with_config(std::slice::from_ref(&tree), &cfg)
            .unwrap()
            .run(|m: &mut Member| {
                let mut b = vec![0u64; (1 << 13) + 1];
                m.allreduce_slice(&mut b, |a, b| a + b)
            });
        let e = out.expect_err("an oversized reduction fails the group");
        assert!(e.to_string().contains("longer than the limit"), "{e}");
        // At the limit: fine.
        let out = Group::with_config(std::slice::from_ref(&tree), &cfg)
            .unwrap()
            .run(|m: &mut Member| {
                let mut b = vec![1u8; 1 << 16];
                m.allreduce_bytes(&mut b, add)?;
                Ok::<_, GroupError>(b[0])
            })
            .unwrap();
        assert!(out.iter().all(|r| matches!(r, Ok(3))), "{out:?}");
    }
}
