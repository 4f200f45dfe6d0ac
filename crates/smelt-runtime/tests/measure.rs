//! The measurement helpers run every operation to completion and return the requested
//! number of samples (no timing assertions: performance lives in the benchmarks).

use smelt_runtime::measure::{measure, measure_back_to_back, summarize, MeasureConfig, Op};
use smelt_tree::Tree;
use std::time::Duration;

fn cfg() -> MeasureConfig {
    MeasureConfig {
        rounds: 5,
        warmup: 1,
        batch: Duration::from_micros(200),
        ..Default::default()
    }
}

fn trees() -> Vec<Tree> {
    let cpus = smelt_transport::allowed_cpus().unwrap();
    let mut v = vec![
        Tree::from_raw(vec![cpus[0]], 0, vec![vec![]]).unwrap(),
        Tree::from_raw(
            (0..6).map(|i| 5000 + i).collect(),
            2,
            vec![vec![], vec![], vec![0, 3], vec![1, 4], vec![5], vec![]],
        )
        .unwrap(),
    ];
    if cpus.len() >= 2 {
        v.push(Tree::from_raw(vec![cpus[1], cpus[0]], 1, vec![vec![], vec![0]]).unwrap());
    }
    v
}

#[test]
fn paper_style_and_back_to_back_measure_every_op() {
    for tree in trees() {
        for op in Op::RUN {
            let m = measure(&tree, op, &cfg()).unwrap();
            assert_eq!(m.stats.n + m.stats.rejected, 5, "{op} on {tree:?}");
            assert!(m.stats.min > 0.0 && m.stats.p10 <= m.stats.p90);
            let b = measure_back_to_back(&tree, op, &cfg()).unwrap();
            assert_eq!(b.stats.n + b.stats.rejected, 5);
            assert!(b.ops_per_run >= 1);
        }
    }
}

#[test]
fn flattened_groups_are_measured_over_the_flat_tree() {
    // More members than CPUs (made-up CPU ids, a binary tree): the tree runs flat when
    // asked to.
    let n = smelt_transport::allowed_cpus().unwrap().len().max(2) + 1;
    let children = (0..n)
        .map(|i| (2 * i + 1..=2 * i + 2).filter(|&c| c < n).collect())
        .collect();
    let tree = Tree::from_raw((0..n as u32).map(|i| 5000 + i).collect(), 0, children).unwrap();
    let mut c = cfg();
    c.group.flatten_oversubscribed = true;
    for op in Op::RUN {
        let m = measure(&tree, op, &c).unwrap();
        assert!(m.placement.flattened, "{op}");
        assert_eq!(m.stats.n + m.stats.rejected, 5, "{op}");
        let b = measure_back_to_back(&tree, op, &c).unwrap();
        assert!(
            b.placement.flattened && b.stats.n + b.stats.rejected == 5,
            "{op}"
        );
    }
}

#[test]
fn stats_percentiles() {
    let s = summarize(&[5.0, 1.0, 3.0, 2.0, 4.0]);
    assert_eq!(
        (s.min, s.median, s.max, s.n, s.rejected),
        (1.0, 3.0, 5.0, 5, 0)
    );
    assert!((s.p10 - 1.4).abs() < 1e-9 && (s.p90 - 4.6).abs() < 1e-9);
    // The probe's outlier rejection: a sample far in the tail is dropped.
    let s = summarize(&[100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 10_000.0]);
    assert_eq!((s.n, s.rejected), (7, 1));
    assert!(s.max < 200.0);
    assert_eq!(summarize(&[]).n, 0);
    assert_eq!("2pc".parse::<Op>(), Ok(Op::TwoPhaseCommit));
    assert!("nope".parse::<Op>().is_err());
}
