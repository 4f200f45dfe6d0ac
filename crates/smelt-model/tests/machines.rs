//! Imports the real machine files in `testdata/machines/` and checks what the
//! importers and the hierarchy inference make of them, plus every kind of bad input.

#![allow(clippy::needless_range_loop)]

use smelt_model::import::{
    fill_gaps, import, import_c2c_csv, import_machinedb, Format, ImportOptions,
    C2C_COST_PER_ONE_WAY, C2C_RECEIVE_PER_SEND,
};
use smelt_model::infer::{compare, infer_hierarchy};
use smelt_model::stats::median;
use smelt_model::{parse_cpu_list, Hierarchy, Level, Model, ModelError};
use std::path::{Path, PathBuf};

fn machines() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/machines")
}

fn xeon_dir() -> PathBuf {
    machines().join("smelt-machinedb/intel_xeon_e5_v2_2x10")
}

fn csv(name: &str) -> PathBuf {
    machines()
        .join("core-to-core-latency")
        .join(format!("{name}.csv"))
}

fn groups(list: &[&str]) -> Vec<Vec<u32>> {
    list.iter().map(|s| parse_cpu_list(s).unwrap()).collect()
}

fn sizes(l: &Level) -> Vec<usize> {
    l.groups.iter().map(Vec::len).collect()
}

#[test]
fn machinedb_xeon_imports_with_clock_hierarchy_and_sockets() {
    let m = import(&xeon_dir(), &ImportOptions::default()).unwrap();
    m.validate().unwrap();
    assert_eq!(m.cpus, (0..20).collect::<Vec<u32>>());
    assert_eq!(m.provenance.method, "import:smelt-machinedb");
    assert_eq!(m.provenance.clock_ghz, Some(2.49399));
    assert_eq!(m.provenance.host, "intel_xeon_e5_v2_2x10");
    // "0 2 62.182222 ..." in pairwise-nsend_send, cycles at 2.49399 GHz.
    assert!((m.send[0][2] - 62.182222 / 2.49399).abs() < 1e-9);
    // "6 16 779.117014 ..." in pairwise-nsend_receive.
    assert!((m.receive[6][16] - 779.117014 / 2.49399).abs() < 1e-9);
    assert!(m.rtt.is_some());
    let names: Vec<&str> = m.hierarchy.levels.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        ["Package", "NUMANode", "L3Cache", "L2Cache", "Core"],
        "{:?}",
        m.hierarchy
    );
    assert_eq!(m.hierarchy.source, "lscpu+likwid");
    assert_eq!(
        m.hierarchy.level("NUMANode").unwrap().groups,
        groups(&["0-9", "10-19"])
    );
    // The inference must find the two sockets, and only them.
    let inf = m.inferred_hierarchy.as_ref().unwrap();
    assert_eq!(inf.source, "inferred");
    assert_eq!(inf.levels[0].name, "Cluster1");
    assert_eq!(inf.levels[0].groups, groups(&["0-9", "10-19"]));
    assert_eq!(&infer_hierarchy(&m), inf);
    let lines = compare(&m.hierarchy, inf);
    assert!(
        lines[0].contains("Cluster1 matches Package = NUMANode = L3Cache"),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("L2Cache (10 groups) does not show")),
        "{lines:?}"
    );
}

#[test]
fn ghz_flag_wins_over_lscpu() {
    let m = import_machinedb(&xeon_dir(), Some(2.0)).unwrap();
    assert_eq!(m.provenance.clock_ghz, Some(2.0));
    assert!((m.send[0][2] - 62.182222 / 2.0).abs() < 1e-9);
    let e = import_machinedb(&xeon_dir(), Some(-1.0)).unwrap_err();
    assert!(e.to_string().contains("--ghz"), "{e}");
}

/// The derivation constants of the CSV importer are what the machine database
/// Xeon shows where send, receive and rtt were all measured.
#[test]
fn c2c_derivation_constants_match_the_machinedb_xeon() {
    let m = import_machinedb(&xeon_dir(), None).unwrap();
    let rtt = m.rtt.as_ref().unwrap();
    let (mut ratio, mut frac) = (Vec::new(), Vec::new());
    for i in 0..m.len() {
        for j in 0..m.len() {
            if i != j {
                ratio.push(m.receive[i][j] / m.send[i][j]);
                frac.push((m.send[i][j] + m.receive[i][j]) / (rtt[i][j] / 2.0));
            }
        }
    }
    let (r, f) = (median(&mut ratio), median(&mut frac));
    assert!((r - C2C_RECEIVE_PER_SEND).abs() < 0.02, "receive/send {r}");
    assert!((f - C2C_COST_PER_ONE_WAY).abs() < 0.01, "(s+r)/(rtt/2) {f}");
}

#[test]
fn every_csv_imports_and_validates() {
    let dir = machines().join("core-to-core-latency");
    let mut count = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "csv") {
            continue;
        }
        let m = import(&p, &ImportOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        m.validate().unwrap();
        let stem = p.file_stem().unwrap().to_string_lossy().to_string();
        assert_eq!(m.provenance.host, stem);
        assert_eq!(m.provenance.method, "import:core-to-core-latency");
        assert!(m.provenance.derivation.as_ref().unwrap().contains("3.56"));
        for i in 0..m.len() {
            for j in 0..m.len() {
                if i != j {
                    assert!(m.send[i][j] > 0.0 && m.receive[i][j] > m.send[i][j]);
                    assert_eq!(m.send[i][j], m.send[j][i]);
                }
            }
        }
        count += 1;
    }
    assert!(count >= 14, "{count}");
}

fn top(name: &str) -> (Model, Hierarchy) {
    let m = import_c2c_csv(&csv(name)).unwrap();
    let h = m.inferred_hierarchy.clone().unwrap();
    (m, h)
}

#[test]
fn dual_socket_csvs_split_in_two_at_the_top() {
    for (name, want) in [
        (
            "Dual Intel(R) Xeon(R) CPU E5-2690 0 @ 2.90GHz",
            ["0-7,16-23", "8-15,24-31"],
        ),
        (
            "Dual Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz",
            ["0-13,28-41", "14-27,42-55"],
        ),
        (
            "Dual Intel(R) Xeon(R) CPU X5650  @ 2.67GHz",
            ["0-5,12-17", "6-11,18-23"],
        ),
        ("Dual IBM Power7 8 cores@3.3 GHz 2010-Q1", ["0-7", "8-15"]),
    ] {
        let (_, h) = top(name);
        assert_eq!(h.levels[0].groups, groups(&want), "{name}: {h:?}");
    }
}

#[test]
fn csv_inference_sees_smt_ccx_and_tiles() {
    // Ryzen 9 5950X: two CCDs of 8 cores, SMT pairs.
    let (_, h) = top("AMD Ryzen 9 5950X @ 3.40 GHz");
    assert_eq!(h.levels.len(), 2);
    assert_eq!(h.levels[0].groups, groups(&["0-7,16-23", "8-15,24-31"]));
    assert_eq!(sizes(&h.levels[1]), vec![2; 16]);
    // Threadripper 1950X: 4 CCX of 4 cores (8 threads), SMT pairs.
    let (_, h) = top("AMD Ryzen Threadripper 1950X");
    let ccx = h.levels.iter().find(|l| l.groups.len() == 4).unwrap();
    assert_eq!(
        ccx.groups,
        groups(&["0-3,16-19", "4-7,20-23", "8-11,24-27", "12-15,28-31"])
    );
    assert_eq!(sizes(h.levels.last().unwrap()), vec![2; 16]);
    // Dual EPYC 7742: 32 CCX of 8 threads and 128 SMT pairs.
    let (_, h) = top("Dual AMD EPYC 7742 64-Core Processor");
    let ccx = h.levels.iter().find(|l| l.groups.len() == 32).unwrap();
    assert_eq!(sizes(ccx), vec![8; 32]);
    assert_eq!(ccx.groups[0], parse_cpu_list("0-3,128-131").unwrap());
    assert_eq!(sizes(h.levels.last().unwrap()), vec![2; 128]);
    // Xeon Phi 7210: 32 tiles of 2 cores.
    let (_, h) = top("Intel(R) Xeon Phi(TM) CPU 7210 @ 1.30GHz");
    assert_eq!(h.levels.len(), 1);
    assert_eq!(sizes(&h.levels[0]), vec![2; 32]);
    // Graviton2: a mesh with no visible grouping.
    let (_, h) = top("AWS Graviton2");
    assert!(h.levels.is_empty(), "{h:?}");
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// A 6-CPU lower-triangular matrix: CPUs 0-2 and 3-5 are two "sockets".
fn six(blank: &[(usize, usize)]) -> String {
    let mut out = String::new();
    for i in 0..6 {
        let cells: Vec<String> = (0..6)
            .map(|j| {
                if j >= i || blank.contains(&(i, j)) {
                    String::new()
                } else if i / 3 == j / 3 {
                    format!("{}", 20 + i + j)
                } else {
                    format!("{}", 100 + i + j)
                }
            })
            .collect();
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

#[test]
fn csv_gaps_are_filled_from_the_inferred_groups() {
    let dir = tempfile::tempdir().unwrap();
    // No final newline, two pairs not measured: (4,3) local, (5,1) remote.
    let text = six(&[(4, 3), (5, 1)]);
    let p = write(dir.path(), "gappy.csv", text.trim_end());
    let m = import_c2c_csv(&p).unwrap();
    let k = (C2C_COST_PER_ONE_WAY) / (1.0 + C2C_RECEIVE_PER_SEND);
    // Local pairs of socket 3-5 measured: (5,3)=28, (5,4)=29 → median 28.5.
    assert!(
        (m.send[4][3] / k - 28.5).abs() < 1e-9,
        "{}",
        m.send[4][3] / k
    );
    assert_eq!(m.send[3][4], m.send[4][3]);
    // Remote pairs between the two groups, median of the 8 measured.
    let mut remote = Vec::new();
    for i in 3..6 {
        for j in 0..3 {
            if (i, j) != (5, 1) {
                remote.push((100 + i + j) as f64);
            }
        }
    }
    assert!((m.send[5][1] / k - median(&mut remote)).abs() < 1e-9);
    assert!(m
        .provenance
        .notes
        .iter()
        .any(|n| n.contains("13 of 15 CPU pairs measured; 2 filled")));
    let h = m.inferred_hierarchy.unwrap();
    assert_eq!(h.levels[0].groups, groups(&["0-2", "3-5"]));
}

#[test]
fn fill_gaps_never_writes_zeros_and_refuses_isolated_cpus() {
    let nan = f64::NAN;
    let h = Hierarchy::default();
    let mut m = vec![
        vec![0.0, 5.0, nan],
        vec![5.0, 0.0, nan],
        vec![nan, nan, 0.0],
    ];
    let e = fill_gaps(&mut m, &[0, 1, 2], &h).unwrap_err().to_string();
    assert!(e.contains("CPU 2 has no measured pair"), "{e}");
    let mut m = vec![
        vec![0.0, 5.0, 7.0],
        vec![5.0, 0.0, nan],
        vec![7.0, nan, 0.0],
    ];
    assert_eq!(fill_gaps(&mut m, &[0, 1, 2], &h).unwrap(), 2);
    assert_eq!(m[1][2], 6.0);
}

/// Expects a parse error naming `file` and, if given, `line`, containing `what`.
fn expect_parse(res: Result<Model, ModelError>, file: &str, line: Option<usize>, what: &str) {
    let e = res.expect_err("bad input must be refused");
    let text = e.to_string();
    match &e {
        ModelError::Parse { path, line: l, .. } => {
            assert!(path.ends_with(file), "{text}");
            assert_eq!(*l, line, "{text}");
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
    assert!(text.contains(what), "{text}");
    assert!(!text.contains('\n'), "one line: {text}");
}

#[test]
fn bad_csv_files_are_refused_with_file_line_and_problem() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // (file, text, expected line, expected text)
    let cases: [(&str, &str, Option<usize>, &str); 13] = [
        ("empty.csv", "", None, "empty"),
        ("blank.csv", ",,\n\n2,3,\n", Some(2), "empty line"),
        // 3 rows of 4 cells: not square.
        (
            "wide.csv",
            ",,,\n1,,,\n2,3,,\n",
            Some(1),
            "4 cells, expected 3",
        ),
        // Truncated: last row has fewer cells.
        (
            "short.csv",
            ",,\n1,,\n2,3\n",
            Some(3),
            "2 cells, expected 3",
        ),
        ("neg.csv", ",,\n1,,\n2,-3,\n", Some(3), "negative"),
        ("nan.csv", ",,\nNaN,,\n2,3,\n", Some(2), "finite"),
        (
            "word.csv",
            ",,\nabc,,\n2,3,\n",
            Some(2),
            "'abc' is not a number",
        ),
        (
            "zero.csv",
            ",,\n0,,\n0,0,\n",
            None,
            "every latency in the matrix is 0",
        ),
        ("huge.csv", ",,\n1e308,,\n2,3,\n", Some(2), "out of range"),
        // Pair 0-1 given below and above the diagonal.
        (
            "dup.csv",
            ",4,\n1,,\n2,3,\n",
            Some(2),
            "duplicate pair CPU 0 <-> CPU 1",
        ),
        ("diag.csv", "5,,\n1,,\n2,3,\n", Some(1), "diagonal"),
        ("one.csv", "\n", None, "empty"),
        ("none.csv", ",,\n,,\n,,\n", None, "every cell is empty"),
    ];
    for (file, text, line, what) in cases {
        expect_parse(import_c2c_csv(&write(d, file, text)), file, line, what);
    }
    // A value above the diagonal with an empty mirror is accepted.
    let m = import_c2c_csv(&write(d, "upper.csv", ",1,2\n,,3\n,,\n")).unwrap();
    assert_eq!(m.send[0][1], m.send[1][0]);
}

/// A machine database directory with 4 CPUs, all pairs, cycles at 1 GHz.
fn small_db(dir: &Path) {
    let mut send = String::new();
    let mut recv = String::new();
    for s in 0..4 {
        for d in 0..4 {
            if s != d {
                let far = if s / 2 == d / 2 { 1.0 } else { 3.0 };
                send.push_str(&format!("{s} {d} {} 1.5\n", 50.0 * far));
                recv.push_str(&format!("{s} {d} {} 2.5\n", 180.0 * far));
            }
        }
    }
    std::fs::write(dir.join("pairwise-nsend_send"), send).unwrap();
    std::fs::write(dir.join("pairwise-nsend_receive"), recv).unwrap();
    std::fs::write(
        dir.join("lscpu.txt"),
        "CPU(s): 4\nOn-line CPU(s) list:   0-3\nCPU MHz:  1000.000\nNUMA node0 CPU(s):  0,1\nNUMA node1 CPU(s): 2,3\n",
    )
    .unwrap();
}

fn edit(path: &Path, f: impl Fn(String) -> String) {
    let t = std::fs::read_to_string(path).unwrap();
    std::fs::write(path, f(t)).unwrap();
}

#[test]
fn small_machinedb_imports_and_fills_missing_pairs() {
    let dir = tempfile::tempdir().unwrap();
    small_db(dir.path());
    let m = import(dir.path(), &ImportOptions::default()).unwrap();
    assert_eq!(m.send[0][2], 150.0);
    assert_eq!(m.hierarchy.source, "lscpu");
    assert_eq!(
        m.inferred_hierarchy.as_ref().unwrap().levels[0].groups,
        groups(&["0-1", "2-3"])
    );
    // Drop the 0 -> 3 send measurement: filled from the other cross-node pairs.
    let send = dir.path().join("pairwise-nsend_send");
    edit(&send, |t| t.replace("0 3 150 1.5\n", ""));
    let m = import(dir.path(), &ImportOptions::default()).unwrap();
    assert_eq!(m.send[0][3], 150.0);
    assert!(m
        .provenance
        .notes
        .iter()
        .any(|n| n.contains("pairwise-nsend_send: 1 of 12 ordered pairs missing")));
}

/// Expects the import of the small machine database, with `file` changed by `f`, to
/// fail with a parse error naming `file` and, if given, `line`, containing `what`.
fn refused_after_edit(file: &str, f: impl Fn(String) -> String, line: Option<usize>, what: &str) {
    let dir = tempfile::tempdir().unwrap();
    small_db(dir.path());
    edit(&dir.path().join(file), f);
    expect_parse(
        import(dir.path(), &ImportOptions::default()),
        file,
        line,
        what,
    );
}

#[test]
fn bad_machinedb_files_are_refused_with_file_line_and_problem() {
    const SEND: &str = "pairwise-nsend_send";
    const RECEIVE: &str = "pairwise-nsend_receive";
    const LSCPU: &str = "lscpu.txt";
    // (file, search, replace, expected line, expected text)
    let cases: [(&str, &str, &str, Option<usize>, &str); 11] = [
        (SEND, "0 1 50 1.5", "0 1 1e300 1.5", Some(1), "out of range"),
        (
            SEND,
            "0 1 50 1.5",
            "0 1 50",
            Some(1),
            "3 columns, expected 4",
        ),
        (SEND, "0 1 50 1.5", "0 1 -50 1.5", Some(1), "negative"),
        (SEND, "0 1 50 1.5", "0 1 nan 1.5", Some(1), "finite"),
        (
            SEND,
            "0 2 150 1.5",
            "0 1 150 1.5",
            Some(2),
            "duplicate pair 0 -> 1",
        ),
        (
            RECEIVE,
            "0 1 180 2.5",
            "0 9 180 2.5",
            Some(1),
            "unknown CPU 9",
        ),
        (
            SEND,
            "0 1 50 1.5",
            "0 0 50 1.5",
            Some(1),
            "paired with itself",
        ),
        (
            SEND,
            "0 1 50 1.5",
            "x 1 50 1.5",
            Some(1),
            "not a CPU number",
        ),
        (
            LSCPU,
            "CPU MHz:  1000.000",
            "CPU MHz:  fast",
            Some(3),
            "not a number",
        ),
        (
            LSCPU,
            "NUMA node1 CPU(s): 2,3",
            "NUMA node1 CPU(s): 2,3,7",
            Some(4),
            "CPU 7",
        ),
        (
            LSCPU,
            "NUMA node1 CPU(s): 2,3",
            "NUMA node1 CPU(s): 2",
            Some(4),
            "leaves out CPUs 3",
        ),
    ];
    for (file, from, to, line, what) in cases {
        let replace = |t: String| {
            assert!(t.contains(from), "{from}");
            t.replacen(from, to, 1)
        };
        refused_after_edit(file, replace, line, what);
    }
    // Empty pair file.
    refused_after_edit(RECEIVE, |_| String::new(), None, "empty");
    // A CPU with no measurement at all cannot be filled.
    let drop_cpu_3 = |t: String| {
        t.lines()
            .filter(|l| !l.starts_with("3 ") && !l.contains(" 3 "))
            .map(|l| format!("{l}\n"))
            .collect()
    };
    refused_after_edit(SEND, drop_cpu_3, None, "CPU 3 has no measured pair");
    // No clock anywhere.
    let dir = tempfile::tempdir().unwrap();
    small_db(dir.path());
    edit(&dir.path().join("lscpu.txt"), |t| {
        t.replace("CPU MHz:  1000.000\n", "")
    });
    let e = import(dir.path(), &ImportOptions::default()).unwrap_err();
    assert!(e.to_string().contains("pass --ghz"), "{e}");
    let m = import(
        dir.path(),
        &ImportOptions {
            format: Some(Format::MachineDb),
            ghz: Some(2.0),
        },
    )
    .unwrap();
    assert_eq!(m.send[0][1], 25.0);
}

/// A measured 0 is a missing measurement: filled like an empty cell, with a
/// warning in the provenance naming the cell (real core-to-core CSVs have them).
#[test]
fn zero_cells_are_filled_and_named_in_provenance() {
    let dir = tempfile::tempdir().unwrap();
    let src = std::fs::read_to_string(csv("Intel Core i7-6700K")).unwrap();
    // Row 3 (CPU 2), column 1 (CPU 0): set to 0.
    let mut lines: Vec<String> = src.lines().map(str::to_string).collect();
    let mut cells: Vec<String> = lines[2].split(',').map(str::to_string).collect();
    cells[0] = "0".into();
    lines[2] = cells.join(",");
    let p = dir.path().join("zero.csv");
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    let m = import_c2c_csv(&p).unwrap();
    assert!(m.send[2][0] > 0.0 && m.send[0][2] == m.send[2][0]);
    let note = m
        .provenance
        .notes
        .iter()
        .find(|n| n.starts_with("warning:") && n.contains("held 0"))
        .expect("a warning note");
    assert!(note.contains("line 3 column 1 (CPU 2 <-> CPU 0)"), "{note}");

    let dir = tempfile::tempdir().unwrap();
    small_db(dir.path());
    let send = dir.path().join("pairwise-nsend_send");
    edit(&send, |t| t.replace("0 3 150 1.5\n", "0 3 0 1.5\n"));
    let m = import(dir.path(), &ImportOptions::default()).unwrap();
    assert_eq!(m.send[0][3], 150.0);
    assert!(
        m.provenance
            .notes
            .iter()
            .any(|n| n.starts_with("warning: pairwise-nsend_send") && n.contains("(0 -> 3)")),
        "{:?}",
        m.provenance.notes
    );
}

#[test]
fn models_with_out_of_range_costs_are_refused() {
    let mut m = smelt_model::synthetic(1, 2, 10.0, 10.0, 1.0);
    m.send[0][1] = 1e308;
    let e = m.validate().unwrap_err().to_string();
    assert!(e.contains("at most 1e9"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.json");
    std::fs::write(&p, m.to_json()).unwrap();
    assert!(smelt_model::Model::load(&p).is_err());
}
