//! `smelt tune` end to end on this machine (a tiny set of cells, bounded by
//! `--time-limit`), and `auto` in `smelt tree` using what it wrote.

use smelt_tree::tuning::{Source, TuningFile};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `smelt ARGS` with `XDG_CACHE_HOME=cache` and optionally `SMELT_TUNE`.
fn run(cache: &Path, tune: Option<&str>, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_smelt"));
    c.args(args)
        .env("XDG_CACHE_HOME", cache)
        .env("SMELT_PROGRESS_SECS", "1000")
        .env_remove("SMELT_TUNE");
    if let Some(t) = tune {
        c.env("SMELT_TUNE", t);
    }
    c.output().expect("run smelt")
}

fn ok(cache: &Path, tune: Option<&str>, args: &[&str]) -> (String, String) {
    let o = run(cache, tune, args);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "smelt {args:?} failed: {err}");
    (String::from_utf8(o.stdout).unwrap(), err)
}

/// A uniform model of this host over the CPUs this process may use (what
/// `smelt tune` builds without a cached model), for `smelt tree --model`.
fn host_model(dir: &Path) -> PathBuf {
    let cpus = smelt_transport::allowed_cpus().unwrap();
    let n = cpus.len();
    let mut m = smelt_model::Model::new(
        cpus,
        smelt_model::cost_matrix(n, |_, _| 100.0),
        smelt_model::cost_matrix(n, |_, _| 100.0),
    );
    m.provenance.host = smelt_model::host::host_name();
    m.provenance.cpu_model = smelt_model::host::cpu_model_from_proc().unwrap_or_default();
    let p = dir.join("host.json");
    m.save(&p).unwrap();
    p
}

/// Classic Open MPI rules: (collective, comm size, [(from, alg, fan, seg)]).
fn parse_ompi(text: &str) -> Vec<(u32, u64, Vec<Vec<u64>>)> {
    let mut lines = text
        .lines()
        .map(|l| l.split('#').next().unwrap().trim())
        .filter(|l| !l.is_empty());
    let mut next = || lines.next().expect("truncated rules file");
    let mut out = Vec::new();
    for _ in 0..next().parse::<usize>().unwrap() {
        let coll: u32 = next().parse().unwrap();
        for _ in 0..next().parse::<usize>().unwrap() {
            let g: u64 = next().parse().unwrap();
            let rules: Vec<Vec<u64>> = (0..next().parse::<usize>().unwrap())
                .map(|_| {
                    next()
                        .split_whitespace()
                        .map(|x| x.parse().unwrap())
                        .collect()
                })
                .collect();
            assert!(rules.iter().all(|r| r.len() == 4), "{rules:?}");
            assert_eq!(rules[0][0], 0, "the first rule starts at 0 bytes");
            assert!(rules.windows(2).all(|w| w[0][0] < w[1][0]), "ascending");
            out.push((coll, g, rules));
        }
    }
    assert!(lines.next().is_none(), "trailing lines");
    out
}

#[test]
fn tune_writes_a_file_that_auto_uses() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let tiny = [
        "tune",
        "--quick",
        "--time-limit",
        "20",
        "--ops",
        "broadcast,reduce,barrier",
        "--sizes",
        "8,4k",
        "--candidates",
        "sequential,binary,knomial:2",
    ];
    let (table, err) = ok(&cache, None, &tiny);
    assert!(
        table.contains("broadcast") && table.contains("barrier"),
        "{table}"
    );
    assert!(err.contains("wrote"), "{err}");
    let host = smelt_model::host::host_name();
    let path =
        smelt_model::host::cached_tune_path_in(Some(cache.clone().into()), None, &host).unwrap();
    let f = TuningFile::load(&path).unwrap();
    assert_eq!(f.source, Source::Measured);
    assert_eq!(f.host, host);
    assert_eq!(
        f.cells().count(),
        5,
        "broadcast and reduce at 2 sizes, barrier"
    );

    // --resume keeps every cell: nothing left to measure.
    let mut resume = tiny.to_vec();
    resume.push("--resume");
    let (_, err) = ok(&cache, None, &resume);
    assert!(err.contains("0 measured now, 5 kept"), "{err}");

    // `smelt tree` (auto by default) takes the reduce choice from the file.
    let model = host_model(dir.path());
    let m = model.to_str().unwrap();
    let tree = ["tree", "--model", m, "--op", "reduce", "--format", "json"];
    let (out, err) = ok(&cache, None, &tree);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["auto"]["from"]
            .as_str()
            .unwrap()
            .starts_with("tuning file"),
        "{v}"
    );
    let want = f
        .lookup(
            smelt_tree::tuning::SyncMode::Loose,
            smelt_tree::Op::Reduce,
            f.cells().next().unwrap().2,
            64,
        )
        .unwrap();
    assert_eq!(v["auto"]["choice"].as_str().unwrap(), want.to_string());
    assert!(err.is_empty(), "{err}");

    // SMELT_TUNE wins; a malformed one is a clear error.
    let (out, _) = ok(&cache, Some("reduce=knomial:3"), &tree);
    assert!(out.contains("\"from\": \"SMELT_TUNE\""), "{out}");
    let o = run(&cache, Some("reduce:9-1=binary"), &tree);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("SMELT_TUNE rule 1") && e.contains("empty range"),
        "{e}"
    );

    // The Open MPI export parses as the classic rules format.
    let rules = dir.path().join("ompi.rules");
    ok(&cache, None, &["tune", "export", rules.to_str().unwrap()]);
    let parsed = parse_ompi(&std::fs::read_to_string(&rules).unwrap());
    let colls: Vec<u32> = parsed.iter().map(|r| r.0).collect();
    assert_eq!(colls, vec![6, 7, 11], "barrier, bcast, reduce");

    // A refused file (another smelt version): a warning, and the prediction.
    let mut old = f.clone();
    old.smelt_version = "0.0.0-old".into();
    std::fs::write(&path, old.to_json_string()).unwrap();
    let (out, err) = ok(&cache, None, &tree);
    assert!(out.contains("the simulator's prediction"), "{out}");
    assert!(
        err.starts_with("warning:") && err.contains("0.0.0-old") && err.contains("refused"),
        "{err}"
    );
    // ... and --resume refuses to build on it.
    let o = run(&cache, None, &resume);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("0.0.0-old"));
}

#[test]
fn predict_writes_a_file_for_the_models_host_and_compares() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let m = dir.path().join("m.json");
    let mut model = smelt_model::synthetic(2, 4, 40.0, 150.0, 3.0);
    model.provenance.host = "other-box".into();
    model.save(&m).unwrap();
    let m = m.to_str().unwrap();
    let args = [
        "tune", "predict", "--model", m, "--mode", "both", "--sizes", "8,1k",
    ];
    let (table, err) = ok(&cache, None, &args);
    assert!(
        table.contains("predicted") && table.contains("strict"),
        "{table}"
    );
    let path = cache.join("smelt/tune-other-box.json");
    assert!(err.contains(path.to_str().unwrap()), "{err}");
    let f = TuningFile::load(&path).unwrap();
    assert_eq!(f.source, Source::Predicted);
    // Whole machine (8) and each socket (4).
    assert!(
        f.rules["loose"]["reduce"].contains_key(&8) && f.rules["loose"]["reduce"].contains_key(&4)
    );
    // `auto` for that model uses it.
    let (out, _) = ok(&cache, None, &["tree", "--model", m, "--format", "json"]);
    assert!(out.contains("tune-other-box.json"), "{out}");
    // A file compared with itself agrees everywhere.
    let (out, _) = ok(
        &cache,
        None,
        &[
            "tune",
            "compare",
            "-o",
            path.to_str().unwrap(),
            path.to_str().unwrap(),
        ],
    );
    assert!(out.contains("(100.0 %)"), "{out}");
    // Measuring needs this host's model.
    let o = run(&cache, None, &["tune", "--model", m, "--quick"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("smelt tune predict"));
    // predict needs a model.
    let o = run(&cache, None, &["tune", "predict"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--model"));
}

/// The non-tree algorithms are candidates of the operations they run: measured in
/// the barrier's and the allreduce's cells, named in the file, and `auto` reports them.
#[test]
fn tune_measures_non_tree_candidates() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let out = dir.path().join("t.json");
    let (table, _) = ok(
        &cache,
        None,
        &[
            "tune",
            "--quick",
            "--time-limit",
            "30",
            "--ops",
            "barrier,allreduce,reduce",
            "--sizes",
            "8",
            "--candidates",
            "binary,dissemination,recursive-doubling",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert!(table.contains("allreduce"), "{table}");
    let f = TuningFile::load(&out).unwrap();
    let mut seen = 0;
    for (_, op, _, e) in f.cells() {
        let names: Vec<&str> = e.candidates.keys().map(|s| s.as_str()).collect();
        match op.name() {
            "barrier" => {
                assert!(names.contains(&"dissemination"), "{names:?}");
                assert!(!names.contains(&"recursive-doubling"), "{names:?}");
                seen += 1;
            }
            "allreduce" => {
                assert!(names.contains(&"recursive-doubling"), "{names:?}");
                assert!(!names.contains(&"dissemination"), "{names:?}");
                seen += 1;
            }
            _ => assert_eq!(names, vec!["binary"]),
        }
    }
    assert_eq!(seen, 2);
    // check re-measures the cells, non-tree choices and candidates included.
    let (check, _) = ok(
        &cache,
        None,
        &[
            "tune",
            "check",
            "--quick",
            "--time-limit",
            "30",
            "--candidates",
            "binary,dissemination,recursive-doubling",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert!(
        check.contains("within 5 % of the best candidate: "),
        "{check}"
    );
    for op in ["barrier", "allreduce", "reduce"] {
        assert!(check.lines().any(|l| l.contains(op)), "{op}: {check}");
    }
    // --candidates with only a non-tree algorithm for an operation it does not run.
    let o = run(
        &cache,
        None,
        &[
            "tune",
            "--ops",
            "reduce",
            "--candidates",
            "dissemination",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("none of them runs reduce"), "{e}");
    // auto names a non-tree choice and shows the tree the group runs beside it.
    let model = host_model(dir.path());
    let (text, _) = ok(
        &cache,
        Some("barrier=dissemination"),
        &[
            "tree",
            "--model",
            model.to_str().unwrap(),
            "--op",
            "barrier",
        ],
    );
    assert!(
        text.contains("dissemination from SMELT_TUNE") && text.contains("is not a tree"),
        "{text}"
    );
}

/// `smelt tune --help` lists its commands, each with its own `--help` and examples;
/// plain `smelt tune` keeps measure's options; a command refuses another's options.
#[test]
fn tune_help_lists_commands() {
    let help = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_smelt"))
            .args(args)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, out, err) = help(&["tune", "--help"]);
    assert_eq!(code, Some(0), "{err}");
    let commands = out.split("Commands:").nth(1).expect("a Commands section");
    for c in ["measure", "check", "predict", "compare", "export"] {
        assert!(
            commands.lines().any(|l| l.trim_start().starts_with(c)),
            "{c} not listed:\n{out}"
        );
        let (code, h, err) = help(&["tune", c, "--help"]);
        assert_eq!(code, Some(0), "{c}: {err}");
        assert!(
            h.contains(&format!("smelt tune {c}")) && h.contains("Examples:"),
            "{c}:\n{h}"
        );
    }
    assert!(
        out.contains("--resume") && out.contains("--segments"),
        "{out}"
    );
    let (code, _, err) = help(&["tune", "compare", "--resume", "x.json"]);
    assert_eq!(code, Some(2), "{err}");
    let (code, _, err) = help(&["tune", "export"]);
    assert_eq!(code, Some(2), "export needs its RULES file: {err}");
}
