//! Tuning files and `auto` end to end: the resolution order (`SMELT_TUNE`, the
//! host's tuning file, the prediction; refused files fall back with a reason), and
//! predicted tuning files on every machine of `testdata/machines/`.
//!
//! The environment-dependent checks are one test so that no other test of this
//! binary sees the variables change.

use smelt_model::import::{import, ImportOptions};
use smelt_model::Model;
use smelt_tree::tuning::{self, Entry, Origin, Source, SyncMode, TuningFile};
use smelt_tree::{Algorithm, Costs, NonTree, Op, Topology};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn model() -> Model {
    let mut m = smelt_model::synthetic(2, 4, 50.0, 40.0, 3.0);
    m.provenance.host = "tunehost".into();
    m
}

fn entry(bytes: u64, algo: &str) -> Entry {
    Entry {
        bytes,
        algo: algo.into(),
        segment: Some(768),
        median_ns: 10.0,
        candidates: BTreeMap::new(),
    }
}

#[test]
fn auto_uses_override_then_file_then_prediction() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("XDG_CACHE_HOME", dir.path());
    std::env::remove_var(tuning::TUNE_ENV);
    let m = model();
    let all: Vec<usize> = (0..m.len()).collect();
    let resolve = || tuning::resolve_auto(Op::Reduce, 64, SyncMode::Loose, &m, &all, None);

    // No file: the prediction, which is the simulator's best candidate.
    let r = resolve().unwrap();
    assert_eq!(r.origin, Origin::Predicted);
    assert!(r.warning.is_none());
    let predicted = r.choice.algorithm;
    assert_eq!(
        predicted,
        tuning::predict_auto(Op::Reduce, 64, SyncMode::Loose, &m, &all, None).unwrap()
    );

    // A valid file for this host: its choice (a tree the simulator would not pick).
    let path = tuning::cached_path("tunehost").unwrap();
    assert!(path.starts_with(dir.path()));
    let pick = if predicted == Algorithm::Tree(Topology::Fibonacci) {
        "binary"
    } else {
        "fibonacci"
    };
    let mut f = TuningFile::new("tunehost", "", &m.cpus, Source::Measured);
    f.insert(SyncMode::Loose, Op::Reduce, 8, entry(64, pick));
    f.save(&path).unwrap();
    let r = resolve().unwrap();
    assert_eq!(r.origin, Origin::File(path.clone()));
    assert_eq!(r.choice.algorithm.to_string(), pick);
    assert_eq!(r.choice.segment, Some(768));
    // Topology::Auto resolves through it too (a broadcast: no rule, so predicted).
    let t = Topology::Auto.generate(&m, &all, None).unwrap();
    assert_eq!(t.len(), 8);
    // An operation without rules in the file: the prediction, no warning.
    let r = tuning::resolve_auto(Op::Gather, 64, SyncMode::Loose, &m, &all, None).unwrap();
    assert_eq!(r.origin, Origin::Predicted);
    assert!(r.warning.is_none());

    // Refused files: malformed, other host, other version, other CPUs.
    let mut other_host = f.clone();
    other_host.host = "elsewhere".into();
    let mut other_version = f.clone();
    other_version.smelt_version = "0.0.1-old".into();
    let mut other_cpus = f.clone();
    other_cpus.cpus = "0-3".into();
    for (text, says) in [
        ("{ not json".to_string(), "not a smelt tuning file"),
        (other_host.to_json_string(), "elsewhere"),
        (other_version.to_json_string(), "0.0.1-old"),
        (other_cpus.to_json_string(), "0-3"),
    ] {
        std::fs::write(&path, text).unwrap();
        let r = resolve().unwrap();
        assert_eq!(r.origin, Origin::Predicted, "{says}");
        assert_eq!(r.choice.algorithm, predicted);
        let w = r.warning.unwrap();
        assert!(
            w.contains(says) && w.contains("refused") && w.contains("prediction"),
            "{w}"
        );
    }

    // SMELT_TUNE wins over everything; a malformed one is an error.
    f.save(&path).unwrap();
    std::env::set_var(
        tuning::TUNE_ENV,
        "reduce:0-100=knomial:3,segment=480;bcast=binary",
    );
    let r = resolve().unwrap();
    assert_eq!(r.origin, Origin::Override);
    assert_eq!(r.choice.to_string(), "knomial:3,segment=480");
    // No matching rule: the file.
    let r = tuning::resolve_auto(Op::Reduce, 4096, SyncMode::Loose, &m, &all, None).unwrap();
    assert_eq!(r.origin, Origin::File(path.clone()));
    std::env::set_var(tuning::TUNE_ENV, "reduce=knomial");
    let e = resolve().unwrap_err().to_string();
    assert!(e.contains("SMELT_TUNE") && e.contains("radix"), "{e}");
    std::env::remove_var(tuning::TUNE_ENV);

    // Non-tree algorithms in the file: `auto` resolves to them, the group's table
    // (tuning::auto_table) picks them per size, and a subgroup of 4 members uses
    // the rules of the group of 4 (a node), the whole machine those of 8.
    let mut f = f.clone();
    f.insert(SyncMode::Loose, Op::Barrier, 8, entry(0, "dissemination"));
    f.insert(
        SyncMode::Loose,
        Op::Allreduce,
        8,
        entry(8, "recursive-doubling"),
    );
    f.insert(SyncMode::Loose, Op::Allreduce, 8, entry(4096, "binary"));
    f.insert(SyncMode::Loose, Op::Barrier, 4, entry(0, "knomial:2"));
    f.insert(SyncMode::Loose, Op::Allreduce, 4, entry(8, "binary"));
    f.save(&path).unwrap();
    let r = tuning::resolve_auto(Op::Barrier, 0, SyncMode::Loose, &m, &all, None).unwrap();
    assert_eq!(
        r.choice.algorithm,
        Algorithm::NonTree(NonTree::Dissemination)
    );
    // The tree such a group runs its other collectives on is a tree all the same.
    let (t, _) =
        tuning::resolve_auto_tree(Op::Barrier, 0, SyncMode::Loose, &m, &all, None).unwrap();
    assert_ne!(t, Topology::Auto);
    let (table, warning) = tuning::auto_table(&m, &all).unwrap();
    assert!(warning.is_none());
    assert_eq!(table.origin(), Some(&Origin::File(path.clone())));
    let nt = |t: &tuning::AlgorithmTable, op, b| t.non_tree(SyncMode::Loose, op, b);
    assert_eq!(nt(&table, Op::Barrier, 0), Some(NonTree::Dissemination));
    assert_eq!(
        nt(&table, Op::Allreduce, 8),
        Some(NonTree::RecursiveDoubling)
    );
    assert_eq!(
        nt(&table, Op::Allreduce, 181),
        Some(NonTree::RecursiveDoubling)
    );
    assert_eq!(nt(&table, Op::Allreduce, 182), None); // nearer 4096 on a log scale
    assert!(table.may_use(NonTree::Dissemination) && table.may_use(NonTree::RecursiveDoubling));
    // The file's fragment sizes reach the group's table, per operation and size class.
    let mut g = f.clone();
    let mut big = entry(1 << 20, "binary");
    big.segment = Some(2400);
    g.insert(SyncMode::Loose, Op::Broadcast, 8, big);
    g.save(&path).unwrap();
    let (seg, _) = tuning::auto_table(&m, &all).unwrap();
    assert!(seg.tunes_segments());
    assert_eq!(
        seg.segment(SyncMode::Loose, Op::Broadcast, 3 << 20),
        Some(2400)
    );
    assert_eq!(seg.segment(SyncMode::Loose, Op::Allreduce, 8), Some(768));
    assert_eq!(seg.segment(SyncMode::Strict, Op::Allreduce, 8), None);
    // The table crosses to a process job's members as JSON and answers alike there.
    std::env::set_var(
        tuning::TUNE_ENV,
        "barrier@strict=dissemination;bcast:0-64=binary",
    );
    let (seg, _) = tuning::auto_table(&m, &all).unwrap();
    std::env::remove_var(tuning::TUNE_ENV);
    let back = tuning::AlgorithmTable::from_json(&seg.to_json()).unwrap();
    for mode in SyncMode::ALL {
        for op in [Op::Barrier, Op::Allreduce, Op::Broadcast, Op::Reduce] {
            for b in [0, 8, 64, 181, 182, 4096, 3 << 20] {
                assert_eq!(
                    back.lookup(mode, op, b),
                    seg.lookup(mode, op, b),
                    "{op} {b}"
                );
                assert_eq!(
                    back.segment(mode, op, b),
                    seg.segment(mode, op, b),
                    "{op} {b}"
                );
            }
        }
    }
    assert!(tuning::AlgorithmTable::from_json("{}").is_err());
    f.save(&path).unwrap();
    let node: Vec<usize> = (0..4).collect();
    let (sub, _) = tuning::auto_table(&m, &node).unwrap();
    assert_eq!(nt(&sub, Op::Barrier, 0), None);
    assert_eq!(nt(&sub, Op::Allreduce, 8), None);
    let six: Vec<usize> = (0..6).collect(); // no rules for 6: those of 4
    let (sub, _) = tuning::auto_table(&m, &six).unwrap();
    assert_eq!(
        sub.lookup(SyncMode::Loose, Op::Barrier, 0),
        Some(Algorithm::Tree(Topology::Knomial(2)).into())
    );
    // SMELT_TUNE wins here too.
    std::env::set_var(tuning::TUNE_ENV, "barrier=knomial:4");
    let (table, _) = tuning::auto_table(&m, &all).unwrap();
    assert_eq!(nt(&table, Op::Barrier, 0), None);
    assert_eq!(table.origin(), Some(&Origin::Override));
    assert_eq!(
        nt(&table, Op::Allreduce, 8),
        Some(NonTree::RecursiveDoubling)
    );
    std::env::remove_var(tuning::TUNE_ENV);
    // A file naming a non-tree algorithm for an operation it does not run is refused.
    let mut bad = f.clone();
    bad.insert(SyncMode::Loose, Op::Reduce, 8, entry(8, "dissemination"));
    let e = TuningFile::from_json(&bad.to_json_string())
        .unwrap_err()
        .to_string();
    assert!(e.contains("dissemination") && e.contains("barrier"), "{e}");
}

fn machine_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/machines");
    let mut files = Vec::new();
    for d in ["core-to-core-latency", "smelt-machinedb"] {
        let Ok(rd) = std::fs::read_dir(root.join(d)) else {
            continue;
        };
        let mut v: Vec<PathBuf> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.is_dir() || p.extension().is_some_and(|x| x == "csv"))
            .collect();
        v.sort();
        files.extend(v);
    }
    files
}

/// `smelt tune predict` on every machine: the file validates, and in every cell
/// the choice is predicted no slower than the best static tree.
#[test]
fn predicted_files_never_pick_slower_than_the_best_static_tree() {
    let files = machine_files();
    assert!(files.len() >= 2, "no machine files found");
    let all_cands = tuning::parse_candidates(tuning::DEFAULT_CANDIDATES).unwrap();
    for p in files {
        let m = import(&p, &ImportOptions::default()).unwrap();
        // The local search (`optimized`) takes seconds per operation and machine in a
        // debug build; the property does not depend on it (every static tree is a
        // candidate; the unit tests include it on a synthetic machine).
        let cands: Vec<Algorithm> = all_cands
            .iter()
            .copied()
            .filter(|t| *t != Algorithm::Tree(Topology::Optimized))
            .collect();
        let groups: Vec<Vec<usize>> = tuning::default_groups(&m)
            .into_iter()
            .map(|g| g.1)
            .collect();
        let f = tuning::tune_predicted(
            &m,
            &groups,
            &Op::RUN,
            &[8, 4096],
            &[SyncMode::Loose],
            &cands,
        )
        .unwrap();
        let f = TuningFile::from_json(&f.to_json_string()).unwrap();
        f.check_machine(&m).unwrap();
        let mut cells = 0;
        for (mode, op, g, e) in f.cells() {
            cells += 1;
            let best_static = e.best_static_ns();
            assert!(
                e.median_ns <= best_static,
                "{}: {mode} {op} {g} {} B: auto {} > static {best_static}",
                p.display(),
                e.bytes,
                e.median_ns
            );
            // The looked-up choice is the entry's, and re-simulating it gives its time.
            let choice = f.lookup(mode, op, g, e.bytes).unwrap();
            assert_eq!(choice.algorithm.to_string(), e.algo);
        }
        assert!(cells >= Op::RUN.len(), "{}", p.display());
        // Whole machine, checked independently of the file: the auto tree's time.
        let all: Vec<usize> = (0..m.len()).collect();
        let c = Costs::new(&m, &all).unwrap();
        let root = c.default_root();
        let (auto, t_auto, _) =
            tuning::predict_best(&c, root, &cands, Op::Barrier, SyncMode::Loose, 0).unwrap();
        let pl = tuning::payload_for(0);
        // The time predict_best reports is the algorithm's own.
        let own = match auto {
            Algorithm::Tree(t) => tuning::predicted_time(
                &c,
                root,
                &t.children(&c, root),
                Op::Barrier,
                SyncMode::Loose,
                pl,
            ),
            Algorithm::NonTree(a) => tuning::predicted_non_tree_time(&c, a, SyncMode::Loose, pl),
        };
        assert_eq!(own, t_auto);
        let d = tuning::predicted_non_tree_time(&c, NonTree::Dissemination, SyncMode::Loose, pl);
        assert!(
            t_auto <= d,
            "{}: barrier auto {t_auto} > dissemination {d}",
            p.display()
        );
        for t in cands
            .iter()
            .filter_map(|a| a.tree())
            .filter(|t| t.is_static())
        {
            let v = tuning::predicted_time(
                &c,
                root,
                &t.children(&c, root),
                Op::Barrier,
                SyncMode::Loose,
                pl,
            );
            assert!(
                t_auto <= v,
                "{}: barrier auto {t_auto} > {t} {v}",
                p.display()
            );
        }
    }
}
