//! Hardening of the `smelt` command: outputs never destroy inputs or non-files and
//! are checked before any work, inputs are bounded regular files, every numeric
//! option is range-checked, Graphviz is time-limited, absurd costs are refused and
//! predictions stay finite, measured zeros are warnings, usage errors are one line,
//! control characters are escaped, failed bench figures exit non-zero, and long
//! work shows progress and respects its time limit. Each test runs the built binary
//! as a user would.

use std::ffi::OsStr;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn smelt_cmd<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut c = Command::new(env!("CARGO_BIN_EXE_smelt"));
    c.args(args).stdin(Stdio::null());
    c
}

/// Runs smelt; kills it and fails the test when it takes longer than `limit`.
fn run_within(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the smelt binary runs");
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "smelt {:?} ran for more than {limit:?}; stderr: {}",
                cmd.get_args().collect::<Vec<_>>(),
                text(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn run<S: AsRef<OsStr>>(args: &[S]) -> Output {
    run_within(smelt_cmd(args), Duration::from_secs(60))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Exit status 2, nothing on stdout, exactly one `error:` line on stderr that
/// contains every one of `wants`; returns that line.
fn refused<S: AsRef<OsStr> + std::fmt::Debug>(args: &[S], wants: &[&str]) -> String {
    let out = run(args);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: not one line: {err}");
    assert!(err.starts_with("error: "), "{args:?}: {err}");
    for w in wants {
        assert!(err.contains(w), "{args:?}: {w:?} missing in: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
    err
}

fn ok<S: AsRef<OsStr> + std::fmt::Debug>(args: &[S]) -> Output {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?}: exit {:?}: {}",
        out.status.code(),
        text(&out.stderr)
    );
    out
}

fn machines() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/machines")
}

fn i7_csv() -> PathBuf {
    machines().join("core-to-core-latency/Intel Core i7-6700K.csv")
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A small model file in `dir` (synthetic 2 sockets x 2 cores).
fn model(dir: &Path) -> PathBuf {
    let m = smelt_model::synthetic(2, 2, 20.0, 70.0, 3.0);
    let path = dir.join("m.json");
    std::fs::write(&path, m.to_json()).unwrap();
    path
}

fn mkfifo(path: &Path) {
    let st = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(st.success());
}

#[test]
fn an_output_that_is_an_input_is_refused_and_the_input_kept() {
    let d = tempfile::tempdir().unwrap();
    let csv = d.path().join("in.csv");
    std::fs::copy(i7_csv(), &csv).unwrap();
    let before = std::fs::read(&csv).unwrap();
    refused(
        &["import", p(&csv), "-o", p(&csv)],
        &["-o", "same file as the input"],
    );
    assert_eq!(std::fs::read(&csv).unwrap(), before);

    let m = model(d.path());
    let mtext = std::fs::read(&m).unwrap();
    // Same file by another name: ./m.json, a hard link, a symbolic link.
    let dotted = d.path().join(".").join("m.json");
    let hard = d.path().join("hard.json");
    std::fs::hard_link(&m, &hard).unwrap();
    let soft = d.path().join("soft.json");
    std::os::unix::fs::symlink(&m, &soft).unwrap();
    for out in [&m, &dotted, &hard, &soft] {
        refused(&["tree", "--model", p(&m), "-o", p(out)], &["same file"]);
        refused(&["model", "heatmap", p(&m), "-o", p(out)], &["same file"]);
        refused(
            &["evaluate", "--model", p(&m), "--plot", p(out)],
            &["--plot", "same file"],
        );
        refused(
            &["bench", "--model", p(&m), "--json-out", p(out)],
            &["--json-out", "same file"],
        );
    }
    assert_eq!(std::fs::read(&m).unwrap(), mtext);
    // A file inside an imported machine database directory is an input too.
    let db = d.path().join("db");
    std::fs::create_dir(&db).unwrap();
    for e in std::fs::read_dir(machines().join("smelt-machinedb/intel_xeon_e5_v2_2x10")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), db.join(e.file_name())).unwrap();
    }
    let send = db.join("pairwise-nsend_send");
    refused(&["import", p(&db), "-o", p(&send)], &["same file"]);
}

#[test]
fn links_are_written_through_and_non_files_never_written() {
    let d = tempfile::tempdir().unwrap();
    let m = model(d.path());
    // A symbolic link: the file it points to is replaced, the link stays.
    let target = d.path().join("tree.txt");
    std::fs::write(&target, "old").unwrap();
    let link = d.path().join("link.txt");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    ok(&["tree", "--model", p(&m), "-o", p(&link)]);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(std::fs::read_to_string(&target)
        .unwrap()
        .contains("tree over 4 CPUs"));
    // A link that points nowhere is refused and left alone.
    let dangling = d.path().join("dangling.txt");
    std::os::unix::fs::symlink(d.path().join("nowhere"), &dangling).unwrap();
    refused(
        &["tree", "--model", p(&m), "-o", p(&dangling)],
        &["symbolic link"],
    );
    assert!(!d.path().join("nowhere").exists());
    // A FIFO (a reader would block forever, a rename would destroy it) and a
    // directory are never written.
    let fifo = d.path().join("fifo");
    mkfifo(&fifo);
    refused(&["tree", "--model", p(&m), "-o", p(&fifo)], &["FIFO"]);
    refused(&["import", p(&i7_csv()), "-o", p(&fifo)], &["FIFO"]);
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    refused(
        &["model", "heatmap", p(&m), "-o", p(d.path())],
        &["directory"],
    );
    refused(
        &["tree", "--model", p(&m), "-o", "/dev/null"],
        &["character device"],
    );
    // No temporary file is left behind by any of this.
    let stray: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
}

#[test]
fn unwritable_outputs_fail_before_any_work_in_one_clean_line() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("no/such/dir/out.json");
    let start = Instant::now();
    for args in [
        vec!["bench", "--json-out", p(&missing)],
        vec!["probe", "-o", p(&missing)],
        vec!["import", p(&i7_csv()), "-o", p(&missing)],
    ] {
        let e = refused(&args, &["does not exist"]);
        // One mention of the path, no temporary file name.
        assert_eq!(e.matches("out.json").count(), 1, "{e}");
        assert!(!e.contains(".smelt-"), "{e}");
    }
    // bench and probe refused before measuring anything.
    assert!(start.elapsed() < Duration::from_secs(20));
    let file = d.path().join("plain");
    std::fs::write(&file, "x").unwrap();
    refused(
        &["probe", "-o", p(&file.join("m.json"))],
        &["is not a directory"],
    );
}

#[test]
fn numeric_options_are_range_checked_naming_the_option() {
    let d = tempfile::tempdir().unwrap();
    let m = model(d.path());
    let m = p(&m);
    let csv = i7_csv();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["bench", "--timeout", "1e20"], "--timeout"),
        (vec!["bench", "--time-limit", "1e20"], "--time-limit"),
        (vec!["bench", "--timeout", "nan"], "--timeout"),
        (vec!["bench", "--threads", "0"], "--threads"),
        (vec!["bench", "--threads", "100000"], "--threads"),
        (vec!["bench", "--rounds", "0"], "--rounds"),
        (vec!["bench", "--peer-threads", "2,99999"], "--peer-threads"),
        (vec!["probe", "--time-limit", "1e20"], "--time-limit"),
        (vec!["probe", "--time-limit", "inf"], "--time-limit"),
        (vec!["probe", "--reps", "0"], "--reps"),
        (vec!["probe", "--sample", "0"], "--sample"),
        (vec!["tree", "--model", m, "--lines", "0"], "--lines"),
        (
            vec!["tree", "--model", m, "--lines", "4000000000"],
            "--lines",
        ),
        (
            vec!["tree", "--model", m, "--line-factor", "1e308"],
            "--line-factor",
        ),
        (
            vec!["evaluate", "--model", m, "--time-limit", "1e300"],
            "--time-limit",
        ),
        (
            vec!["evaluate", "--model", m, "--optimum", "--subsets", "0"],
            "--subsets",
        ),
        (
            vec!["evaluate", "--model", m, "--subset-size", "99"],
            "--subset-size",
        ),
        (
            vec!["import", p(&csv), "-o", "x.json", "--ghz", "1e-300"],
            "--ghz",
        ),
    ];
    for (args, opt) in cases {
        refused(&args, &[opt, "try 'smelt "]);
    }
}

#[test]
fn inputs_are_bounded_regular_files() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out.json");
    // Neither grows memory (/dev/zero) nor blocks (a FIFO nobody writes).
    refused(
        &["import", "/dev/zero", "--format", "c2c-csv", "-o", p(&out)],
        &["/dev/zero", "character device"],
    );
    let fifo = d.path().join("in.csv");
    mkfifo(&fifo);
    refused(&["import", p(&fifo), "-o", p(&out)], &["FIFO"]);
    refused(&["tree", "--model", p(&fifo)], &["FIFO"]);
    refused(&["evaluate", "--model", p(&fifo)], &["FIFO"]);
    refused(&["model", "show", p(&fifo)], &["FIFO"]);
    // The size bound, adjustable through SMELT_MAX_INPUT_BYTES.
    let mut c = smelt_cmd(["import", p(&i7_csv()), "-o", p(&out)]);
    c.env("SMELT_MAX_INPUT_BYTES", "100");
    let o = run_within(c, Duration::from_secs(30));
    let e = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("input limit of 100 bytes") && e.contains("SMELT_MAX_INPUT_BYTES"),
        "{e}"
    );
    assert!(!out.exists());
    let mut c = smelt_cmd(["model", "show", p(&model(d.path()))]);
    c.env("SMELT_MAX_INPUT_BYTES", "lots");
    let o = run_within(c, Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("SMELT_MAX_INPUT_BYTES"));
    let mut c = smelt_cmd(["import", p(&i7_csv()), "-o", p(&out)]);
    c.env("SMELT_MAX_INPUT_BYTES", "1M");
    assert!(run_within(c, Duration::from_secs(30)).status.success());
}

#[test]
fn graphviz_is_killed_at_its_time_limit() {
    let d = tempfile::tempdir().unwrap();
    let m = model(d.path());
    let bin = d.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let dot = bin.join("dot");
    std::fs::write(&dot, "#!/bin/sh\nexec sleep 30\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dot, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = d.path().join("t.svg");
    let mut c = smelt_cmd(["tree", "--model", p(&m), "--format", "svg", "-o", p(&out)]);
    c.env("PATH", &path).env("SMELT_DOT_TIMEOUT", "1");
    let start = Instant::now();
    let o = run_within(c, Duration::from_secs(15));
    let e = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("killed") && e.contains("SMELT_DOT_TIMEOUT"),
        "{e}"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(!out.exists());
}

#[test]
fn absurd_costs_are_refused_and_predictions_stay_finite() {
    let d = tempfile::tempdir().unwrap();
    let csv = d.path().join("huge.csv");
    std::fs::write(&csv, ",,\n1e308,,\n2,3,\n").unwrap();
    refused(
        &["import", p(&csv), "-o", p(&d.path().join("h.json"))],
        &["huge.csv:2", "out of range"],
    );
    let mut m = smelt_model::synthetic(1, 3, 10.0, 10.0, 1.0);
    m.send[0][1] = 1e308;
    let bad = d.path().join("bad.json");
    std::fs::write(&bad, m.to_json()).unwrap();
    refused(
        &["evaluate", "--model", p(&bad)],
        &["bad.json", "at most 1e9"],
    );
    refused(&["tree", "--model", p(&bad)], &["at most 1e9"]);

    // The largest costs and message sizes accepted, and a model of free messages:
    // no inf, NaN or 300-digit number in any output.
    let mut big = smelt_model::synthetic(2, 4, 1e9, 1e9, 1.0);
    big.receive[0][5] = 1e9;
    let big_p = d.path().join("big.json");
    std::fs::write(&big_p, big.to_json()).unwrap();
    let zero = smelt_model::synthetic(2, 2, 0.0, 0.0, 1.0);
    let zero_p = d.path().join("zero.json");
    std::fs::write(&zero_p, zero.to_json()).unwrap();
    for m in [&big_p, &zero_p] {
        let m = p(m);
        for args in [
            vec![
                "evaluate",
                "--model",
                m,
                "--lines",
                "1048576",
                "--line-factor",
                "1000",
            ],
            vec!["evaluate", "--model", m, "--json"],
            vec!["evaluate", "--model", m, "--scaling"],
            vec!["evaluate", "--model", m, "--optimum"],
            vec![
                "tree",
                "--model",
                m,
                "--lines",
                "1048576",
                "--line-factor",
                "1000",
            ],
        ] {
            let o = ok(&args);
            let s = text(&o.stdout).to_ascii_lowercase();
            assert!(!s.contains("inf") && !s.contains("nan"), "{args:?}:\n{s}");
            assert!(
                !s.split(|c: char| !c.is_ascii_digit()).any(|w| w.len() > 20),
                "{args:?}: a huge number in\n{s}"
            );
        }
    }
}

#[test]
fn a_measured_zero_in_a_real_csv_is_a_warning_not_an_error() {
    // The core-to-core-latency corpus has files with 0 cells (e.g. a dual POWER9);
    // a real file from testdata with two cells set to 0 stands for them.
    let d = tempfile::tempdir().unwrap();
    let src = std::fs::read_to_string(i7_csv()).unwrap();
    let mut lines: Vec<String> = src.lines().map(str::to_string).collect();
    for (row, col) in [(3usize, 1usize), (7, 4)] {
        let mut cells: Vec<String> = lines[row].split(',').map(str::to_string).collect();
        cells[col] = "0".into();
        lines[row] = cells.join(",");
    }
    let csv = d.path().join("zeros.csv");
    std::fs::write(&csv, lines.join("\n") + "\n").unwrap();
    let out = d.path().join("m.json");
    let o = ok(&["import", p(&csv), "-o", p(&out)]);
    let e = text(&o.stderr);
    assert!(
        e.starts_with("warning: ") && e.contains("2 cells held 0"),
        "{e}"
    );
    let m = smelt_model::Model::load(&out).unwrap();
    assert!(m.send[3][1] > 0.0 && m.send[7][4] > 0.0);
    let note = m
        .provenance
        .notes
        .iter()
        .find(|n| n.contains("held 0"))
        .unwrap();
    assert!(
        note.contains("line 4 column 2 (CPU 3 <-> CPU 1)")
            && note.contains("line 8 column 5 (CPU 7 <-> CPU 4)"),
        "{note}"
    );
    // Malformed files are still refused.
    let bad = d.path().join("bad.csv");
    std::fs::write(&bad, ",,\n1,,\n2,x,\n").unwrap();
    refused(&["import", p(&bad), "-o", p(&out)], &["bad.csv:3", "'x'"]);
}

#[test]
fn usage_errors_are_one_line_with_a_hint() {
    let d = tempfile::tempdir().unwrap();
    let m = model(d.path());
    refused(
        &["tree", "--modle", p(&m)],
        &["'--modle'", "'--model'", "try 'smelt tree --help'"],
    );
    refused(
        &["model", "show"],
        &["<MODEL>", "try 'smelt model show --help'"],
    );
    refused(
        &["evaluate", "--model", p(&m), "--models", p(d.path())],
        &["--model", "try 'smelt evaluate --help'"],
    );
    refused(&["bogus"], &["'bogus'", "try 'smelt --help'"]);
    refused(&[] as &[&str], &["needs a subcommand", "probe"]);
    refused(&["model"], &["show, heatmap", "try 'smelt model --help'"]);
    refused(
        &["tree", "--model", p(&m), "--format", "png"],
        &["--format", "png"],
    );
    // --help and --version stay normal: stdout, several lines, exit 0.
    for args in [
        vec!["--help"],
        vec!["tree", "--help"],
        vec!["model", "show", "-h"],
    ] {
        let o = ok(&args);
        assert!(text(&o.stdout).lines().count() > 3, "{args:?}");
        assert!(o.stderr.is_empty());
    }
    let o = ok(&["--version"]);
    assert!(text(&o.stdout).starts_with("smelt "));
}

#[test]
fn control_characters_never_reach_the_terminal() {
    let d = tempfile::tempdir().unwrap();
    // A file name with a carriage return and an ANSI clear-screen.
    let evil = d.path().join("ev\ril\x1b[2J.csv");
    std::fs::copy(i7_csv(), &evil).unwrap();
    let out = d.path().join("m.json");
    let o = ok(&[
        OsStr::new("import"),
        evil.as_os_str(),
        OsStr::new("-o"),
        out.as_os_str(),
    ]);
    let all = [o.stdout, o.stderr].concat();
    assert!(
        !all.contains(&b'\x1b') && !all.contains(&b'\r'),
        "{}",
        text(&all)
    );
    assert!(text(&all).contains("\\x1b[2J"));
    // The host and CPU model of the model (from the file name) in `model show`.
    let o = ok(&["model", "show", p(&out)]);
    assert!(!o.stdout.contains(&b'\x1b') && !o.stdout.contains(&b'\r'));
    // An error line naming such a file.
    let missing = d.path().join("gone\r\x1b[31m.json");
    let o = run(&[
        OsStr::new("tree"),
        OsStr::new("--model"),
        missing.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!o.stderr.contains(&b'\x1b') && !o.stderr.contains(&b'\r'));
    assert_eq!(text(&o.stderr).lines().count(), 1);
    // A user-typed option value in an error.
    let e = refused(
        &["tree", "--model", p(&out), "--algo", "a\x1b[2Jb"],
        &["--algo"],
    );
    assert!(!e.contains('\x1b'));
}

#[test]
fn errors_name_the_option_typed() {
    let d = tempfile::tempdir().unwrap();
    let m = model(d.path());
    let m = p(&m);
    let e = refused(
        &["evaluate", "--model", m, "--algos", "binary,zzz"],
        &["--algos:", "zzz"],
    );
    assert!(!e.contains("--algo:"), "{e}");
    refused(&["tree", "--model", m, "--algo", "zzz"], &["--algo:"]);
    refused(
        &["bench", "--model", m, "--topologies", "zzz"],
        &["--topologies"],
    );
    refused(&["bench", "--model", m, "--ops", "zzz"], &["--ops"]);
    refused(&["evaluate", "--model", m, "--op", "zzz"], &["--op:"]);
    refused(&["tree", "--model", m, "--cpus", "0,77"], &["--cpus"]);
    refused(&["tree", "--model", m, "--root", "77"], &["--root"]);
}

#[test]
fn failed_bench_figures_exit_non_zero_after_printing_everything() {
    // A 100 µs timeout fails every figure quickly.
    let d = tempfile::tempdir().unwrap();
    let json = d.path().join("bench.json");
    let o = run(&[
        "bench",
        "--quick",
        "--no-peers",
        "--ops",
        "barrier",
        "--topologies",
        "binary",
        "--rounds",
        "10",
        "--threads",
        "2",
        "--peer-threads",
        "2",
        "--timeout",
        "0.0001",
        "--json-out",
        p(&json),
    ]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(out.contains("FAILED"), "the table is printed: {out}");
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("error: ") && last.contains("failed:"),
        "{err}"
    );
    // The report is still written, with the failures in it.
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(j.to_string().contains("failed"));
}

#[test]
fn bench_respects_its_time_limit_and_says_it_was_cut_short() {
    let o = run(&[
        "bench",
        "--quick",
        "--no-peers",
        "--json",
        "--time-limit",
        "0.001",
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("warning: cut short by --time-limit"), "{err}");
    let j: serde_json::Value = serde_json::from_str(&text(&o.stdout)).unwrap();
    let col = j["collectives"].as_array().unwrap();
    assert!(!col.is_empty());
    // The deadline is checked between rows: a row that started within the first
    // millisecond (a fast machine) may finish; every other one is skipped.
    let skipped = col.iter().filter(|c| c["status"] == "skipped").count();
    assert!(skipped >= col.len() - 1, "{col:?}");
    assert!(j["warnings"][0].as_str().unwrap().contains("cut short"));
}

#[test]
fn evaluate_scaling_shows_progress_and_respects_its_time_limit() {
    let d = tempfile::tempdir().unwrap();
    let m = smelt_model::synthetic(4, 64, 20.0, 70.0, 3.0);
    let path = d.path().join("big.json");
    std::fs::write(&path, m.to_json()).unwrap();
    let mut c = smelt_cmd([
        "evaluate",
        "--model",
        p(&path),
        "--scaling",
        "--time-limit",
        "1",
    ]);
    c.env("SMELT_PROGRESS_SECS", "0");
    let start = Instant::now();
    let o = run_within(c, Duration::from_secs(40));
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{err}");
    assert!(start.elapsed() < Duration::from_secs(30));
    assert!(
        err.lines()
            .any(|l| l.starts_with("smelt evaluate --scaling: ") && l.contains("elapsed")),
        "no progress line: {err}"
    );
    assert!(
        err.contains("warning: cut short by --time-limit 1"),
        "{err}"
    );
    assert!(out.contains("cut short"), "{out}");
    let rows = out
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .count();
    assert!((1..255).contains(&rows), "{rows} rows:\n{out}");
}

/// Every output option of every subcommand against every input option of that
/// subcommand: naming the same file (directly or through a symbolic link) is refused
/// with one clear line before any work, and the input keeps every byte. (Issue 22:
/// `smelt kvs --history` used to overwrite `--model`.)
#[test]
fn every_output_option_refuses_every_input_option() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let m = model(dir);
    // A tree file and a tuning file, as the commands write them.
    let tree = dir.join("t.json");
    ok(&["tree", "--model", p(&m), "--format", "json", "-o", p(&tree)]);
    let tune = dir.join("tune.json");
    ok(&[
        "tune",
        "predict",
        "--model",
        p(&m),
        "--quick",
        "-o",
        p(&tune),
    ]);
    let lib = dir.join("lib.so");
    std::fs::write(&lib, b"not a library").unwrap();
    let csv = dir.join("in.csv");
    std::fs::copy(i7_csv(), &csv).unwrap();
    // (arguments with IN where the input goes and OUT where the output goes; the
    // input file)
    let kvs = [
        "kvs",
        "--setups",
        "tree",
        "--replicas",
        "2",
        "--duration",
        "0.3",
    ];
    let mut cases: Vec<(Vec<&str>, &Path)> = vec![
        (vec!["import", "IN", "-o", "OUT"], &csv),
        (vec!["model", "heatmap", "IN", "-o", "OUT"], &m),
        (vec!["tree", "--model", "IN", "-o", "OUT"], &m),
        (vec!["evaluate", "--model", "IN", "--plot", "OUT"], &m),
        (
            vec![
                "evaluate",
                "--model",
                p(&m),
                "--tree",
                "IN",
                "--plot",
                "OUT",
            ],
            &tree,
        ),
        (vec!["bench", "--model", "IN", "--json-out", "OUT"], &m),
        (vec!["bench", "mpi", "--lib", "IN", "--plot", "OUT"], &lib),
        (
            vec![
                "bench",
                "--model",
                p(&m),
                "--tree",
                "IN",
                "--json-out",
                "OUT",
            ],
            &tree,
        ),
        (
            vec!["bench", "mpi", "--lib", "IN", "--json-out", "OUT"],
            &lib,
        ),
        (
            vec!["tune", "predict", "--model", "IN", "--quick", "-o", "OUT"],
            &m,
        ),
        (
            vec!["tune", "export", "--model", "IN", "-o", p(&tune), "OUT"],
            &m,
        ),
        (vec!["tune", "export", "-o", "IN", "OUT"], &tune),
    ];
    let mut k: Vec<&str> = kvs.to_vec();
    k.extend(["--model", "IN", "--history", "OUT"]);
    cases.push((k, &m));
    let link = dir.join("link");
    for (args, input) in &cases {
        let before = std::fs::read(input).unwrap();
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(input, &link).unwrap();
        for out in [*input, link.as_path()] {
            let a: Vec<&str> = args
                .iter()
                .map(|a| match *a {
                    "IN" => p(input),
                    "OUT" => p(out),
                    other => other,
                })
                .collect();
            refused(&a, &["same file as the input"]);
            assert_eq!(
                std::fs::read(input).unwrap(),
                before,
                "{a:?} changed the input"
            );
        }
    }
}

/// The tuning file that `auto` reads goes through the bounded, non-blocking,
/// regular-file-only reader: a FIFO (used to hang), a link to /dev/zero (used to grow
/// without bound) and a file over the input limit (used to be read whole) are each
/// refused with a warning, and the tree is predicted instead.
#[test]
fn a_bad_tuning_file_never_hangs_or_grows_auto() {
    let d = tempfile::tempdir().unwrap();
    let m = model(d.path());
    let host = smelt_model::Model::load(&m).unwrap().provenance.host;
    let cache = d.path().join("cache");
    std::fs::create_dir_all(cache.join("smelt")).unwrap();
    let tune = cache.join("smelt").join(format!("tune-{host}.json"));
    let cases: [(&str, &dyn Fn()); 2] = [
        ("FIFO", &|| mkfifo(&tune)),
        ("character device", &|| {
            std::os::unix::fs::symlink("/dev/zero", &tune).unwrap()
        }),
    ];
    for (why, make) in cases {
        let _ = std::fs::remove_file(&tune);
        make();
        let mut c = smelt_cmd(["tree", "--model", p(&m), "--algo", "auto"]);
        c.env("XDG_CACHE_HOME", &cache);
        let o = run_within(c, Duration::from_secs(30));
        let e = text(&o.stderr);
        assert!(o.status.success(), "{why}: {e}");
        assert!(e.contains(why) && e.contains("tune-"), "{why}: {e}");
    }
    // Over the size bound: a tuning file larger than the bound, a model below it.
    let _ = std::fs::remove_file(&tune);
    let text_len = std::fs::metadata(&m).unwrap().len();
    std::fs::write(&tune, vec![b' '; text_len as usize + 10]).unwrap();
    let mut c = smelt_cmd(["tree", "--model", p(&m), "--algo", "auto"]);
    c.env("XDG_CACHE_HOME", &cache)
        .env("SMELT_MAX_INPUT_BYTES", (text_len + 5).to_string());
    let o = run_within(c, Duration::from_secs(30));
    let e = text(&o.stderr);
    assert!(o.status.success(), "{e}");
    assert!(e.contains("input limit"), "{e}");
}

/// `smelt probe --cache` whose cache directory cannot be made fails at once, before
/// measuring (it used to probe first); `smelt kvs`'s own usage errors end with the
/// help hint as clap's do.
#[test]
fn probe_cache_is_checked_first_and_kvs_usage_errors_hint() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let mut c = smelt_cmd(["probe", "--cache", "--quiet"]);
    c.env("XDG_CACHE_HOME", file.join("cache"));
    let start = Instant::now();
    let o = run_within(c, Duration::from_secs(60));
    let e = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("--cache") && e.contains("Not a directory"),
        "{e}"
    );
    // A quick probe of even 2 CPUs takes longer than refusing.
    assert!(start.elapsed() < Duration::from_secs(5), "{e}");
    for args in [
        ["kvs", "--protocol", "nope"],
        ["kvs", "--tree", "nope"],
        ["kvs", "--setups", "nope"],
    ] {
        refused(&args, &["nope", "try 'smelt kvs --help'"]);
    }
}
