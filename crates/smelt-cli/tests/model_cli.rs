//! `smelt import`, `smelt model show` and `smelt model heatmap`, run as a user would.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn smelt(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smelt"))
        .args(args)
        .output()
        .expect("the smelt binary runs")
}

fn run(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let v: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
    smelt(&v)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn machines() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/machines")
}

/// Every importable thing under testdata/machines: machine database directories
/// and CSV files.
fn all_inputs() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(machines().join("smelt-machinedb")).unwrap() {
        let p = e.unwrap().path();
        if p.join("pairwise-nsend_send").is_file() {
            v.push(p);
        }
    }
    for e in std::fs::read_dir(machines().join("core-to-core-latency")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "csv") {
            v.push(p);
        }
    }
    v.sort();
    v
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn imports_every_machine_file_and_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = all_inputs();
    assert!(inputs.len() >= 15, "{inputs:?}");
    for (k, input) in inputs.iter().enumerate() {
        let out_path = dir.path().join(format!("m{k}.json"));
        let out = run(&[&"import", input, &"-o", &out_path]);
        ok(&out);
        assert!(text(&out.stdout).contains("inferred hierarchy:"));
        let j: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
        assert_eq!(j["format"], "smelt-model");
        assert_eq!(j["version"], 1);
        let p = &j["provenance"];
        for key in ["host", "cpu_model", "date", "tool", "method"] {
            assert!(
                p[key].as_str().is_some_and(|s| !s.is_empty()),
                "{key} in {input:?}"
            );
        }
        assert_eq!(p["units"], "ns");
        assert!(p["method"].as_str().unwrap().starts_with("import:"));
        assert!(p["date"].as_str().unwrap().ends_with('Z'));
        let n = j["cpus"].as_array().unwrap().len();
        assert!(n >= 2);
        for m in ["send", "receive"] {
            let rows = j[m].as_array().unwrap();
            assert_eq!(rows.len(), n);
            assert!(rows.iter().all(|r| r.as_array().unwrap().len() == n));
        }
        assert!(j["hierarchy"]["levels"].is_array());
        assert_eq!(j["inferred_hierarchy"]["source"], "inferred");

        let show = run(&[&"model", &"show", &out_path]);
        ok(&show);
        let s = text(&show.stdout);
        for want in [
            "host:",
            "CPUs (",
            "OS hierarchy",
            "Inferred hierarchy",
            "OS vs inferred",
        ] {
            assert!(s.contains(want), "{want} missing in:\n{s}");
        }
    }
}

#[test]
fn show_reports_sockets_and_per_level_costs() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("xeon.json");
    let db = machines().join("smelt-machinedb/intel_xeon_e5_v2_2x10");
    ok(&run(&[&"import", &db, &"-o", &m]));
    let out = run(&[&"model", &"show", &m]);
    ok(&out);
    let s = text(&out.stdout);
    assert!(
        s.contains("Cluster1      2 groups, sizes 2 x 10  0-9 | 10-19"),
        "{s}"
    );
    assert!(
        s.contains("Cluster1 matches Package = NUMANode = L3Cache"),
        "{s}"
    );
    assert!(s.contains("clock:       2.49399 GHz"), "{s}");
    let out = run(&[&"model", &"show", &m, &"--json"]);
    ok(&out);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["cpus"], "0-19");
    assert_eq!(j["inferred_hierarchy"]["levels"][0]["groups"], 2);
    let costs = j["inferred_hierarchy"]["costs"].as_array().unwrap();
    assert_eq!(costs[0]["level"], "(machine)");
    assert_eq!(costs[0]["pairs"], 200);
    let remote = costs[0]["receive"]["median"].as_f64().unwrap();
    let local = costs[1]["receive"]["median"].as_f64().unwrap();
    assert!(remote > 2.0 * local, "{remote} vs {local}");
    assert!(costs[1]["rtt"]["min"].as_f64().unwrap() > 0.0);
}

#[test]
fn import_flags_format_and_ghz() {
    let dir = tempfile::tempdir().unwrap();
    // A CSV under another extension needs --format.
    let src = machines().join("core-to-core-latency/Intel Core i7-6700K.csv");
    let txt = dir.path().join("i7.txt");
    std::fs::copy(&src, &txt).unwrap();
    let m = dir.path().join("i7.json");
    let out = run(&[&"import", &txt, &"-o", &m]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--format"),
        "{}",
        text(&out.stderr)
    );
    assert!(!m.exists());
    ok(&run(&[&"import", &txt, &"-o", &m, &"--format", &"c2c-csv"]));
    assert!(m.exists());
    // --ghz wins over lscpu.txt.
    let db = machines().join("smelt-machinedb/intel_xeon_e5_v2_2x10");
    let m2 = dir.path().join("x.json");
    ok(&run(&[&"import", &db, &"-o", &m2, &"--ghz", &"1"]));
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&m2).unwrap()).unwrap();
    assert_eq!(j["provenance"]["clock_ghz"], 1.0);
    assert_eq!(j["provenance"]["method"], "import:smelt-machinedb");
}

/// Runs an import that must fail: exit 2, one `error:` line naming `file` (and
/// `what`), no output file.
fn refused(input: &Path, file: &str, what: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out.json");
    let out = run(&[&"import", &input, &"-o", &out_path]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{input:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains(file) && err.contains(what), "{err}");
    assert!(!out_path.exists(), "no output on error");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no temp file left"
    );
}

#[test]
fn malformed_inputs_exit_2_without_output() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let csv = |name: &str, body: &str| {
        let p = d.join(name);
        std::fs::write(&p, body).unwrap();
        p
    };
    refused(&csv("empty.csv", ""), "empty.csv", "empty");
    refused(
        &csv("square.csv", ",,,\n1,,,\n2,3,,\n"),
        "square.csv:1",
        "expected 3",
    );
    refused(
        &csv("trunc.csv", ",,\n1,,\n2"),
        "trunc.csv:3",
        "1 cells, expected 3",
    );
    refused(&csv("neg.csv", ",,\n-1,,\n2,3,\n"), "neg.csv:2", "negative");
    refused(&csv("nan.csv", ",,\n1,,\n2,NaN,\n"), "nan.csv:3", "finite");
    refused(
        &csv("dup.csv", ",,1\n1,,\n2,3,\n"),
        "dup.csv:3",
        "duplicate pair",
    );
    refused(&d.join("missing.csv"), "missing.csv", "no such file");

    let db = d.join("db");
    std::fs::create_dir(&db).unwrap();
    std::fs::write(db.join("pairwise-nsend_send"), "0 1 10 1\n1 0 10 1\n").unwrap();
    std::fs::write(db.join("pairwise-nsend_receive"), "0 1 30 1\n1 0 30\n").unwrap();
    std::fs::write(
        db.join("lscpu.txt"),
        "On-line CPU(s) list: 0,1\nCPU MHz: 1000\n",
    )
    .unwrap();
    refused(&db, "pairwise-nsend_receive:2", "3 columns, expected 4");
    std::fs::write(db.join("pairwise-nsend_receive"), "0 1 30 1\n1 5 30 1\n").unwrap();
    refused(&db, "pairwise-nsend_receive:2", "unknown CPU 5");
    std::fs::write(db.join("pairwise-nsend_receive"), "0 1 30 1\n1 0 30 1\n").unwrap();
    std::fs::write(db.join("lscpu.txt"), "On-line CPU(s) list: 0,1\n").unwrap();
    refused(&db, "db", "pass --ghz");
    let notdb = d.join("notdb");
    std::fs::create_dir(&notdb).unwrap();
    refused(&notdb, "notdb", "not a Smelt machine database");
}

#[test]
fn heatmap_writes_a_png_and_refuses_bad_models() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m.json");
    let csv = machines().join("core-to-core-latency/AMD Ryzen 9 5950X @ 3.40 GHz.csv");
    ok(&run(&[&"import", &csv, &"-o", &m]));
    let png = dir.path().join("costs.png");
    let out = run(&[&"model", &"heatmap", &m, &"-o", &png]);
    ok(&out);
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert!(bytes.len() > 10_000, "{} bytes", bytes.len());
    // Width and height from the IHDR chunk: two panels side by side.
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert!(w > h, "{w}x{h}");

    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"format\": \"smelt-model\"").unwrap();
    let png2 = dir.path().join("bad.png");
    let out = run(&[&"model", &"heatmap", &bad, &"-o", &png2]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("bad.json"));
    assert!(!png2.exists());
    let out = run(&[&"model", &"show", &bad]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).starts_with("error: "));
}
