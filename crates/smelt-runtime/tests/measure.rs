//! The measurement helpers run every operation to completion and return the requested
//! number of samples (no timing assertions: performance lives in the benchmarks).

use smelt_runtime::measure::{measure, measure_back_to_back, MeasureConfig, Op, Stats};
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
            assert_eq!(m.stats.samples, 5, "{op} on {tree:?}");
            assert!(m.stats.min_ns > 0.0 && m.stats.p10_ns <= m.stats.p90_ns);
            let b = measure_back_to_back(&tree, op, &cfg()).unwrap();
            assert_eq!(b.stats.samples, 5);
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
        assert_eq!(m.stats.samples, 5, "{op}");
        let b = measure_back_to_back(&tree, op, &c).unwrap();
        assert!(b.placement.flattened && b.stats.samples == 5, "{op}");
    }
}

#[test]
fn stats_percentiles() {
    let s = Stats::from_samples(&[5.0, 1.0, 3.0, 2.0, 4.0]);
    assert_eq!(
        (s.min_ns, s.median_ns, s.max_ns, s.mean_ns),
        (1.0, 3.0, 5.0, 3.0)
    );
    assert!((s.p10_ns - 1.4).abs() < 1e-9 && (s.p90_ns - 4.6).abs() < 1e-9);
    assert_eq!(Stats::from_samples(&[]).samples, 0);
    assert_eq!("2pc".parse::<Op>(), Ok(Op::TwoPhaseCommit));
    assert!("nope".parse::<Op>().is_err());
}
