//! `scripts/bench-compare.sh`: its table (pairs, median ratio new/old, missing and
//! failed figures) from a run's files, and its refusals of bad arguments (before any
//! build), and that docs/bench.md names every figure of its probe. Building two
//! revisions and measuring them is too slow for the suite.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn script() -> PathBuf {
    root().join("scripts/bench-compare.sh")
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new("bash")
        .arg(script())
        .args(args)
        .current_dir(root())
        .output()
        .expect("run bash");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

/// The two lines of the table about `figure`.
fn rows<'a>(out: &'a str, figure: &str) -> (&'a str, &'a str) {
    let mut it = out
        .lines()
        .skip_while(|l| !l.starts_with(&format!("{figure} ")));
    let a = it
        .next()
        .unwrap_or_else(|| panic!("no row {figure} in\n{out}"));
    (a, it.next().unwrap_or(""))
}

#[test]
fn report_gives_every_pair_and_the_median_ratio() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    write(p, "old.name", "84cb409 (84cb40909c6d)\n");
    write(p, "new.name", "today's tree\n");
    // Three pairs: ratios 1.10, 0.90, 1.50 for qp_latency (median 1.10); 2.0 and 1.0
    // and 1.0 for reduce (median 1.0); am missing in the old build; a failure.
    write(
        p,
        "old.1",
        "qp_latency\t100.0\nreduce_threads\t10\nam_rtt_threads\tmissing\tnot in this build\nbarrier_threads\t50\n",
    );
    write(
        p,
        "new.1",
        "qp_latency\t110.0\nreduce_threads\t20\nam_rtt_threads\t300.5\nbarrier_threads\tFAILED\tmember 1 timed out\n",
    );
    write(p, "old.2", "qp_latency\t100\nreduce_threads\t10\n");
    write(p, "new.2", "qp_latency\t90\nreduce_threads\t10\n");
    write(p, "old.3", "qp_latency\t100\nreduce_threads\t1e1\n");
    write(p, "new.3", "qp_latency\t150\nreduce_threads\t10\n");
    write(p, "load.1", "1.00 2.00 3.00");
    let (rc, out, err) = run(&["--report", p.to_str().unwrap()]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(out.contains("old: 84cb409"), "{out}");
    assert!(out.contains("pair 1: load average 1.00 2.00 3.00"), "{out}");
    let (a, b) = rows(&out, "qp_latency");
    assert!(a.contains("median 1.100"), "{a}");
    assert!(
        b.contains("100.0->110.0 (1.100)") && b.contains("100.0->90.0 (0.900)"),
        "{b}"
    );
    let (a, _) = rows(&out, "reduce_threads");
    assert!(a.contains("median 1.000"), "{a}");
    let (a, b) = rows(&out, "am_rtt_threads");
    assert!(
        a.contains("no ratio") && a.contains("old: not in this build"),
        "{a}"
    );
    assert!(b.contains("missing->300.5"), "{b}");
    let (a, b) = rows(&out, "barrier_threads");
    assert!(
        a.contains("no ratio") && a.contains("new: member 1 timed out"),
        "{a}"
    );
    assert!(
        b.contains("50.0->FAILED") && b.contains("none->none"),
        "{b}"
    );
}

#[test]
fn report_with_an_even_number_of_pairs_takes_the_middle_two() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    for (k, (o, n)) in [(10.0, 11.0), (10.0, 12.0), (10.0, 9.0), (10.0, 20.0)]
        .iter()
        .enumerate()
    {
        write(p, &format!("old.{}", k + 1), &format!("qp_stream\t{o}\n"));
        write(p, &format!("new.{}", k + 1), &format!("qp_stream\t{n}\n"));
    }
    let (rc, out, err) = run(&["--report", p.to_str().unwrap()]);
    assert_eq!(rc, 0, "{out}{err}");
    // Ratios 1.1, 1.2, 0.9, 2.0: median (1.1 + 1.2) / 2.
    assert!(rows(&out, "qp_stream").0.contains("median 1.150"), "{out}");
}

#[test]
fn bad_arguments_are_refused_before_building() {
    let (rc, _, err) = run(&[]);
    assert_eq!(rc, 2, "{err}");
    let (rc, _, err) = run(&["HEAD", "-n", "0"]);
    assert_eq!(rc, 2);
    assert!(err.contains("-n takes 1 to 1000 pairs"), "{err}");
    let (rc, _, err) = run(&["no-such-revision-xyz"]);
    assert_eq!(rc, 2);
    assert!(
        err.contains("unknown revision no-such-revision-xyz"),
        "{err}"
    );
    let (rc, _, err) = run(&["HEAD", "--bogus"]);
    assert_eq!(rc, 2);
    assert!(err.contains("unknown argument --bogus"), "{err}");
    let (rc, _, err) = run(&["--report", "/nonexistent/dir"]);
    assert_eq!(rc, 2);
    assert!(err.contains("no such directory"), "{err}");
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "old.1", "qp_latency\t1\n");
    let (rc, _, err) = run(&["--report", d.path().to_str().unwrap()]);
    assert_eq!(rc, 2);
    assert!(err.contains("new.1 is missing"), "{err}");
}

#[test]
fn the_probe_names_every_figure_the_docs_list() {
    let src = std::fs::read_to_string(root().join("bench/compare/probe.rs")).unwrap();
    let docs = std::fs::read_to_string(root().join("docs/bench.md")).unwrap();
    let start = src.find("const FIGURES").expect("FIGURES in probe.rs");
    let list = &src[start..start + src[start..].find("];").unwrap()];
    let names: Vec<&str> = list.split('"').skip(1).step_by(2).collect();
    assert!(names.len() >= 10, "{names:?}");
    for n in names {
        assert!(
            docs.contains(&format!("`{n}`")),
            "docs/bench.md does not name {n}"
        );
    }
}
