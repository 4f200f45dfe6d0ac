//! Long messages between member processes through the links' staging buffers
//! (`smelt_transport::shm::Stage`, from 512 B): reductions, broadcasts and
//! allreductions (the tree, the two-member exchange, Rabenseifner of two members)
//! checked against a sequential computation at lengths around every boundary (one
//! value, odd lengths, the 512 B threshold, the ring's 3 KiB message, a 16 368 B chunk,
//! the four chunks a link holds), a member whose data are shorter named, and a member
//! killed while the others stage to it failing them promptly. The test binary re-runs
//! itself as each member (`TEST_SMELT_STAGED_MEMBER`).

use smelt_runtime::process::{join_from_env, GroupJob};
use smelt_runtime::{GroupConfig, GroupError, Member, Rank, ReduceOp};
use smelt_tree::Tree;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Lengths in bytes around every boundary of the staged path.
const BYTES: [usize; 22] = [
    1,
    47,
    48,
    511,
    512,
    513,
    1000,
    1024,
    2047,
    3071,
    3072,
    3073,
    16367,
    16368,
    16369,
    16384,
    65471,
    65472,
    65473,
    65536,
    16368 * 5 + 7,
    300_001,
];

fn spawn(job: &GroupJob, scenario: &str) -> Vec<Child> {
    (0..job.size())
        .map(|r| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "member_entry", "--nocapture", "--test-threads=1"])
                .stdout(std::process::Stdio::null())
                .envs(job.env(Rank(r)))
                .env("TEST_SMELT_STAGED_MEMBER", scenario)
                .spawn()
                .unwrap()
        })
        .collect()
}

fn codes(children: Vec<Child>) -> Vec<Option<i32>> {
    children
        .into_iter()
        .map(|mut c| c.wait().unwrap().code())
        .collect()
}

/// Member `r`'s byte `i`.
fn byte(r: usize, i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (r * 17 + 3)) as u8
}

/// Every staged collective at every length of [`BYTES`], checked (`first`, with two
/// members: the member whose value the allreduce must put on the left, checked with
/// a combine that does not commute).
fn check_all(m: &mut Member, first: Option<usize>) -> Result<(), GroupError> {
    let n = m.size();
    let me = m.rank().index();
    let root = m.context(0)?.root().index();
    for len in BYTES {
        // u8 sums, reduce and allreduce (wrapping).
        let want: Vec<u8> = (0..len)
            .map(|i| (0..n).fold(0u8, |a, r| a.wrapping_add(byte(r, i))))
            .collect();
        let mut v: Vec<u8> = (0..len).map(|i| byte(me, i)).collect();
        if m.reduce_slice_op(&mut v, ReduceOp::Sum)? {
            assert_eq!(v, want, "reduce u8 sum, {len} B, member {me}");
        }
        let mut v: Vec<u8> = (0..len).map(|i| byte(me, i)).collect();
        m.allreduce_slice_op(&mut v, ReduceOp::Sum)?;
        assert_eq!(v, want, "allreduce u8 sum, {len} B, member {me}");
        // f64 sums of whole numbers (exact in any order), an odd number of values.
        let k = (len / 8).max(1) | 1;
        let mut f: Vec<f64> = (0..k).map(|i| (i % 1000 + me * 7) as f64).collect();
        m.allreduce_slice_op(&mut f, ReduceOp::Sum)?;
        for (i, x) in f.iter().enumerate() {
            let w: f64 = (0..n).map(|r| (i % 1000 + r * 7) as f64).sum();
            assert_eq!(
                *x, w,
                "allreduce f64 sum, {k} values, member {me}, value {i}"
            );
        }
        // i32 max, reduce.
        let k = (len / 4).max(1);
        let mut x: Vec<i32> = (0..k).map(|i| (i as i32 ^ me as i32) - 5).collect();
        if m.reduce_slice_op(&mut x, ReduceOp::Max)? {
            for (i, v) in x.iter().enumerate() {
                let w = (0..n).map(|r| (i as i32 ^ r as i32) - 5).max().unwrap();
                assert_eq!(*v, w, "reduce i32 max, {k} values, value {i}");
            }
        }
        // A broadcast into a buffer of known length.
        let mut b: Vec<u8> = if me == root {
            (0..len).map(|i| byte(99, i)).collect()
        } else {
            vec![0; len]
        };
        m.broadcast_into(&mut b)?;
        assert!(
            b.iter().enumerate().all(|(i, &x)| x == byte(99, i)),
            "broadcast {len} B, member {me}"
        );
        // A closure's reduction (packed values), u16 wrapping sums.
        let k = (len / 2).max(1);
        let mut s: Vec<u16> = (0..k).map(|i| (i * 3 + me) as u16).collect();
        if m.reduce_slice(&mut s, u16::wrapping_add)? {
            for (i, v) in s.iter().enumerate() {
                let w = (0..n).fold(0u16, |a, r| a.wrapping_add((i * 3 + r) as u16));
                assert_eq!(*v, w, "reduce_slice u16, {k} values, value {i}");
            }
        }
        // allreduce_bytes: with two members a combine that does not commute (the
        // root's value must come first on both), else xor.
        let mut d: Vec<u8> = (0..len).map(|i| byte(me, i)).collect();
        if let Some(first) = first {
            let (root, child) = (first, 1 - first);
            m.allreduce_bytes(&mut d, |a, o| {
                for (x, y) in a.iter_mut().zip(o) {
                    *x = x.wrapping_mul(3).wrapping_add(*y);
                }
            })?;
            for (i, x) in d.iter().enumerate() {
                let w = byte(root, i).wrapping_mul(3).wrapping_add(byte(child, i));
                assert_eq!(*x, w, "allreduce_bytes (root first), {len} B, byte {i}");
            }
        } else {
            m.allreduce_bytes(&mut d, |a, o| {
                for (x, y) in a.iter_mut().zip(o) {
                    *x ^= *y;
                }
            })?;
            for (i, x) in d.iter().enumerate() {
                let w = (0..n).fold(0u8, |a, r| a ^ byte(r, i));
                assert_eq!(*x, w, "allreduce_bytes xor, {len} B, byte {i}");
            }
        }
    }
    Ok(())
}

/// Member `r`'s value `i` of `size` bytes for [`check_units`]: a key (unique among
/// the members) in the first 4 bytes, then bytes that name the value and the member.
fn value(r: usize, i: usize, size: usize) -> Vec<u8> {
    let key = ((i as u32).wrapping_mul(2_654_435_761) & !0xff) | r as u32;
    let mut v = key.to_le_bytes().to_vec();
    v.extend((4..size).map(|k| (i.wrapping_mul(7) ^ k ^ (r << 5)) as u8));
    v
}

/// Values of 12 and 24 bytes (sizes that divide 48, as `reduce_bytes` allows) under
/// a combine that keeps the value with the larger key, whole: reduce and allreduce
/// of more than one staged chunk, checked against the sequential result. A chunk that
/// cut a value in two would combine its pieces under wrong keys.
fn check_units(m: &mut Member) -> Result<(), GroupError> {
    let n = m.size();
    let me = m.rank().index();
    for size in [12usize, 24] {
        let keep_max = move |acc: &mut [u8], other: &[u8]| {
            for (a, o) in acc.chunks_exact_mut(size).zip(other.chunks_exact(size)) {
                let key = |v: &[u8]| u32::from_le_bytes(v[..4].try_into().unwrap());
                if key(o) > key(a) {
                    a.copy_from_slice(o);
                }
            }
        };
        for count in [1400usize, 6001] {
            let mine: Vec<u8> = (0..count).flat_map(|i| value(me, i, size)).collect();
            let want: Vec<u8> = (0..count)
                .flat_map(|i| {
                    (0..n)
                        .map(|r| value(r, i, size))
                        .max_by_key(|v| u32::from_le_bytes(v[..4].try_into().unwrap()))
                        .unwrap()
                })
                .collect();
            let mut v = mine.clone();
            if m.reduce_bytes(&mut v, keep_max)? {
                assert!(v == want, "reduce_bytes, {count} values of {size} B");
            }
            let mut v = mine;
            m.allreduce_bytes(&mut v, keep_max)?;
            assert!(
                v == want,
                "allreduce_bytes, {count} values of {size} B, member {me}"
            );
        }
    }
    Ok(())
}

/// Kills the calling process with SIGKILL (no destructors, no unwinding).
fn kill_self() -> ! {
    let _ = Command::new("kill")
        .args(["-9", &std::process::id().to_string()])
        .status();
    std::thread::sleep(Duration::from_secs(60));
    unreachable!("SIGKILL")
}

/// The member side of every test (does nothing in a normal run).
#[test]
fn member_entry() {
    let Ok(scenario) = std::env::var("TEST_SMELT_STAGED_MEMBER") else {
        return;
    };
    let mut m = join_from_env().expect("joins");
    let parts: Vec<&str> = scenario.split(',').collect();
    match parts[0] {
        "check" => {
            let first = parts.get(1).and_then(|f| f.parse().ok());
            if parts.contains(&"strict") {
                m.set_sync(smelt_runtime::SyncMode::Strict);
            }
            check_all(&mut m, first).unwrap();
            // Every member ends every call before any leaves.
            m.barrier().unwrap();
        }
        "units" => {
            check_units(&mut m).unwrap();
            m.barrier().unwrap();
        }
        "longer" => {
            // Data that differ by whole chunks (one member's ends where the other's
            // chunk is due): the call itself fails on the member named (exit 4), it
            // does not end as if the lengths agreed.
            const CHUNK: usize = 16368;
            let me = m.rank().index();
            let r = match parts[1] {
                "reduce" => {
                    let mut v = vec![1u8; if me == 0 { CHUNK } else { 2 * CHUNK }];
                    m.reduce_slice_op(&mut v, ReduceOp::Sum).map(|_| ())
                }
                "broadcast" => {
                    let mut v = vec![1u8; if me == 0 { 2 * CHUNK } else { CHUNK }];
                    m.broadcast_into(&mut v)
                }
                _ => {
                    let mut v = vec![1u8; if me == 0 { CHUNK } else { 3 * CHUNK }];
                    m.allreduce_bytes(&mut v, |a, o| {
                        for (x, y) in a.iter_mut().zip(o) {
                            *x ^= *y;
                        }
                    })
                }
            };
            match r {
                Err(e) => {
                    assert!(
                        matches!(
                            e,
                            GroupError::Mismatch { .. } | GroupError::PeerFailed { .. }
                        ),
                        "{e}"
                    );
                    if matches!(e, GroupError::Mismatch { rank, .. } if rank == m.rank()) {
                        assert!(e.to_string().contains("length"), "{e}");
                    }
                    std::process::exit(4);
                }
                Ok(()) => {
                    let _ = m.barrier();
                    std::process::exit(5);
                }
            }
        }
        "shorter" => {
            // Member 1's data are shorter (through the ring) than the others' (staged).
            let len = if m.rank() == Rank(1) { 400 } else { 2000 };
            let mut v = vec![1u8; len];
            let r = m
                .reduce_slice_op(&mut v, ReduceOp::Sum)
                .and_then(|_| m.barrier());
            let e = r.expect_err("the lengths differ");
            assert!(
                matches!(
                    e,
                    GroupError::Mismatch { .. } | GroupError::PeerFailed { .. }
                ),
                "{e}"
            );
            // Named as data of another length, at the first staged chunk.
            assert!(e.to_string().contains("staged chunk"), "{e}");
            std::process::exit(4);
        }
        "die" => {
            // Member `victim` stops taking chunks and is killed while the other
            // stages 256 KiB (more than its link's buffers hold) to it: the other
            // must fail with the victim named, not hang.
            let victim: Rank = parts[1].parse().unwrap();
            let mut v = vec![1.0f64; 32 << 10];
            for r in 0..10_000u64 {
                if m.rank() == victim && r == 5 {
                    std::thread::sleep(Duration::from_millis(300));
                    kill_self();
                }
                match m.reduce_slice_op(&mut v, ReduceOp::Sum) {
                    Ok(_) => {}
                    Err(e) => {
                        assert!(
                            matches!(e, GroupError::PeerFailed { rank, .. } if rank == victim),
                            "member {}: {e}",
                            m.rank()
                        );
                        std::process::exit(3);
                    }
                }
            }
            panic!("member {} never saw the death", m.rank());
        }
        other => panic!("unknown scenario {other}"),
    }
}

fn job(tree: Tree, rules: Option<&str>) -> GroupJob {
    let cfg = GroupConfig {
        algorithms: rules
            .map(|r| std::sync::Arc::new(smelt_tree::tuning::AlgorithmTable::parse(r).unwrap())),
        ..GroupConfig::default()
    };
    GroupJob::create(&[tree], &cfg).unwrap()
}

fn run_check(tree: Tree, rules: Option<&str>, first: Option<usize>) {
    let n = tree.len();
    let job = job(tree, rules);
    let scenario = match first {
        Some(f) => format!("check,{f}"),
        None => "check".into(),
    };
    let c = codes(spawn(&job, &scenario));
    assert!(c.iter().all(|&x| x == Some(0)), "n = {n}, {rules:?}: {c:?}");
    assert_eq!(job.joined(), n);
}

#[test]
fn two_processes_match_sequential_results_at_every_boundary() {
    run_check(pair(0), None, Some(0));
    // The root at rank 1: its value comes first.
    run_check(pair(1), None, Some(1));
}

#[test]
fn strict_calls_stage_alike() {
    // Strict: a barrier before and after every call, the same paths in between.
    let tree_job = job(pair(1), None);
    let c = codes(spawn(&tree_job, "check,1,strict"));
    assert_eq!(c, vec![Some(0); 2]);
    let pair_job = job(pair(0), Some("allreduce=rabenseifner"));
    let c = codes(spawn(&pair_job, "check,0,strict"));
    assert_eq!(c, vec![Some(0); 2]);
}

fn pair(root: usize) -> Tree {
    let mut children = vec![vec![], vec![]];
    children[root].push(1 - root);
    Tree::from_raw(vec![0, 1], root, children).unwrap()
}

#[test]
fn two_processes_run_rabenseifner_and_recursive_doubling_through_the_stages() {
    run_check(pair(0), Some("allreduce=rabenseifner"), Some(0));
    // Recursive doubling puts rank 0's value first, wherever the root is.
    run_check(pair(1), Some("allreduce=recursive-doubling"), Some(0));
}

/// The ring allreduce between member processes (over the links beyond the tree): 3
/// members (no power of two) and 4, typed reductions against sequential results.
#[test]
fn processes_run_the_ring_allreduce() {
    run_check(
        Tree::from_raw(vec![0, 1, 2], 0, vec![vec![1], vec![2], vec![]]).unwrap(),
        Some("allreduce=ring"),
        None,
    );
    run_check(
        Tree::from_raw(
            vec![0, 1, 2, 3],
            1,
            vec![vec![], vec![0, 2, 3], vec![], vec![]],
        )
        .unwrap(),
        Some("allreduce=ring"),
        None,
    );
}

#[test]
fn trees_of_processes_match_sequential_results_at_every_boundary() {
    // A chain (inner members forward) and a star (the root combines several).
    run_check(
        Tree::from_raw(vec![0, 1, 2], 0, vec![vec![1], vec![2], vec![]]).unwrap(),
        None,
        None,
    );
    run_check(
        Tree::from_raw(
            vec![0, 1, 2, 3],
            2,
            vec![vec![], vec![], vec![0, 1, 3], vec![]],
        )
        .unwrap(),
        None,
        None,
    );
}

#[test]
fn a_member_with_shorter_data_is_named_not_waited_for() {
    let job = job(
        Tree::from_raw(vec![0, 1], 0, vec![vec![1], vec![]]).unwrap(),
        None,
    );
    let t = Instant::now();
    let c = codes(spawn(&job, "shorter"));
    assert_eq!(c, vec![Some(4); 2]);
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
}

#[test]
fn a_member_killed_mid_transfer_fails_the_other_promptly() {
    // The root killed while its child stages to it, then the child killed while the
    // root waits for its chunks.
    for victim in [0usize, 1] {
        let job = job(
            Tree::from_raw(vec![0, 1], 0, vec![vec![1], vec![]]).unwrap(),
            None,
        );
        let t = Instant::now();
        let c = codes(spawn(&job, &format!("die,{victim}")));
        let other = 1 - victim;
        assert_eq!(c[other], Some(3), "victim {victim}: {c:?}");
        assert_eq!(c[victim], None, "victim {victim}: {c:?}");
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    }
}

#[test]
fn values_whose_size_divides_48_are_never_cut_between_chunks() {
    let cases = [
        (pair(0), None),
        (pair(1), Some("allreduce=rabenseifner")),
        (pair(0), Some("allreduce=recursive-doubling")),
        (
            Tree::from_raw(vec![0, 1, 2], 1, vec![vec![], vec![0, 2], vec![]]).unwrap(),
            None,
        ),
    ];
    for (tree, rules) in cases {
        let job = job(tree, rules);
        let c = codes(spawn(&job, "units"));
        assert!(c.iter().all(|&x| x == Some(0)), "{rules:?}: {c:?}");
    }
}

#[test]
fn data_longer_by_whole_chunks_fail_the_call() {
    // (call, the member that must see it in the call itself)
    for (call, named) in [("reduce", 0), ("broadcast", 1), ("allreduce", 0)] {
        let job = job(pair(0), None);
        let t = Instant::now();
        let c = codes(spawn(&job, &format!("longer,{call}")));
        assert_eq!(c[named], Some(4), "{call}: {c:?}");
        assert!(
            c.iter().all(|&x| x == Some(4) || x == Some(5)),
            "{call}: {c:?}"
        );
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    }
}
