//! What a user gets by default (issue 27): `smelt bench`'s comparison rows measure
//! `auto` and name what it picked; every command given no model looks in the same
//! places in the same order (explicit, `SMELT_MODEL`, this host's cached probe, a
//! uniform model with a notice) and says which in `--verbose` / `SMELT_VERBOSE`;
//! `smelt run` leaves this host's model in the cache. Each runs the built `smelt` in a
//! cache directory of its own (`XDG_CACHE_HOME`). No timing assertions.

use std::path::Path;
use std::process::Command;

/// `smelt ARGS` with `XDG_CACHE_HOME=cache`, `envs` set and `SMELT_MODEL`,
/// `SMELT_TUNE`, `SMELT_VERBOSE` unset unless given: (status, stdout, stderr).
fn smelt_in(cache: &Path, envs: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_smelt"));
    c.args(args)
        .env("XDG_CACHE_HOME", cache)
        .env_remove("SMELT_MODEL")
        .env_remove("SMELT_TUNE")
        .env_remove("SMELT_VERBOSE");
    for (k, v) in envs {
        c.env(k, v);
    }
    let out = c.output().expect("cannot run smelt");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(r: (i32, String, String)) -> (String, String) {
    assert_eq!(r.0, 0, "stdout: {}\nstderr: {}", r.1, r.2);
    (r.1, r.2)
}

fn cpus() -> Vec<u32> {
    smelt_transport::allowed_cpus().unwrap()
}

/// A uniform model of this host's CPUs marked `tag` (in its method), saved at `path`.
fn save_model(path: &Path, tag: &str) {
    let mut m = smelt_model::default_model::uniform(&cpus()).unwrap();
    m.provenance.method = tag.into();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    m.save(path).unwrap();
}

fn cache_path(cache: &Path) -> std::path::PathBuf {
    smelt_model::host::cached_model_path_in(
        Some(cache.as_os_str().into()),
        None,
        &smelt_model::host::host_name(),
    )
    .unwrap()
}

#[test]
fn bench_peer_rows_measure_auto_and_name_what_it_picked() {
    if cpus().len() < 2 {
        eprintln!(
            "skipped: needs 2 CPUs (2 members on 1 CPU are oversubscribed: no tuning file applies)"
        );
        return;
    }
    let d = tempfile::tempdir().unwrap();
    // A tuning file whose only barrier candidate is the dissemination barrier: auto
    // picks it from the file; SMELT_TUNE picks the broadcast's and the reduce's trees.
    ok(smelt_in(
        d.path(),
        &[],
        &[
            "tune",
            "--quick",
            "--ops",
            "barrier",
            "--candidates",
            "dissemination",
        ],
    ));
    let (out, err) = ok(smelt_in(
        d.path(),
        &[("SMELT_TUNE", "broadcast=binary;reduce=knomial:2")],
        &[
            "bench",
            "processes",
            "--quick",
            "--json",
            "--no-peers",
            "--verbose",
            "--rounds",
            "10",
            "--ops",
            "barrier",
            "--topologies",
            "binary",
            "--peer-threads",
            "2",
        ],
    ));
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    let peers = j["peers"].as_array().unwrap();
    for (metric, algo, origin) in [
        ("barrier", "dissemination", "tuning file"),
        ("broadcast", "binary", "SMELT_TUNE"),
        ("reduce", "knomial:2", "SMELT_TUNE"),
    ] {
        for (mode, who) in [("threads", "smelt"), ("processes", "smelt processes")] {
            let row = peers
                .iter()
                .find(|p| p["metric"] == metric && p["mode"] == mode && p["threads"] == 2)
                .unwrap_or_else(|| panic!("no {mode} {metric} row: {peers:?}"));
            assert_eq!(row["name"], format!("{who} (auto: {algo})"), "{row}");
            assert_eq!(row["auto"]["algorithm"], algo, "{row}");
            let from = row["auto"]["origin"].as_str().unwrap();
            assert!(from.contains(origin), "{metric} {mode}: from {from}");
            assert_eq!(row["status"], "ok", "{row}");
            assert!(
                err.contains(&format!(
                    "auto for {metric} with 2 {mode}: {algo} (from {from})"
                )),
                "{err}"
            );
        }
    }
    // The fixed topologies stay in the topology table.
    let cols = j["collectives"].as_array().unwrap();
    assert!(cols.iter().any(|c| c["topology"] == "binary"), "{cols:?}");
}

#[test]
fn default_model_is_explicit_then_variable_then_cache_then_uniform() {
    let d = tempfile::tempdir().unwrap();
    let cache = d.path().join("cache");
    let tree = |envs: &[(&str, &str)], extra: &[&str]| {
        let mut args = vec!["tree", "--verbose"];
        args.extend_from_slice(extra);
        ok(smelt_in(&cache, envs, &args)).1
    };
    // Nothing: the uniform model, with a one-line notice.
    let err = tree(&[], &[]);
    let notice: Vec<&str> = err.lines().filter(|l| l.starts_with("notice:")).collect();
    assert_eq!(notice.len(), 1, "{err}");
    assert!(notice[0].contains("uniform model") && notice[0].contains("smelt probe --cache"));
    assert!(err.contains("smelt tree: model: a uniform model"), "{err}");
    // The host's cached probe, without a notice.
    let cached = cache_path(&cache);
    save_model(&cached, "cached");
    let err = tree(&[], &[]);
    assert!(!err.contains("notice:"), "{err}");
    assert!(
        err.contains(&format!(
            "smelt tree: model: this host's cached probe {}",
            cached.display()
        )),
        "{err}"
    );
    // SMELT_MODEL over the cache; an explicit --model over both.
    let var = d.path().join("var.json");
    let explicit = d.path().join("explicit.json");
    save_model(&var, "var");
    save_model(&explicit, "explicit");
    let v = var.to_str().unwrap();
    let err = tree(&[("SMELT_MODEL", v)], &[]);
    assert!(
        err.contains(&format!("smelt tree: model: SMELT_MODEL={v}")),
        "{err}"
    );
    let err = tree(
        &[("SMELT_MODEL", v)],
        &["--model", explicit.to_str().unwrap()],
    );
    assert!(
        err.contains(&format!("smelt tree: model: {}", explicit.display())),
        "{err}"
    );
    // A broken SMELT_MODEL is an error naming it, never a silent fallback.
    std::fs::write(&var, "{").unwrap();
    let (code, _, err) = smelt_in(&cache, &[("SMELT_MODEL", v)], &["tree"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("SMELT_MODEL"), "{err}");
    // The same order for the other commands: tune, bench and launch use the cache.
    let (_, err) = ok(smelt_in(
        &cache,
        &[],
        &[
            "tune",
            "--verbose",
            "--quick",
            "--ops",
            "barrier",
            "--candidates",
            "knomial:1",
        ],
    ));
    assert!(
        err.contains("smelt tune: model: this host's cached probe"),
        "{err}"
    );
    let (_, err) = ok(smelt_in(
        &cache,
        &[("SMELT_VERBOSE", "1")],
        &["launch", "-n", "1", "--", "true"],
    ));
    assert!(
        err.contains("smelt: model: this host's cached probe"),
        "{err}"
    );
    assert!(!err.contains("notice:"), "{err}");
    // Without the cache, launch says it uses the uniform model (one notice line).
    std::fs::remove_file(&cached).unwrap();
    let (_, err) = ok(smelt_in(&cache, &[], &["launch", "-n", "1", "--", "true"]));
    assert_eq!(
        err.lines().filter(|l| l.starts_with("notice:")).count(),
        1,
        "{err}"
    );
}

#[test]
fn run_leaves_this_hosts_model_in_the_cache() {
    let d = tempfile::tempdir().unwrap();
    let cache = d.path().join("cache");
    let out = d.path().join("out");
    let cpu = cpus()[0].to_string();
    let (stdout, _) = ok(smelt_in(
        &cache,
        &[],
        &[
            "run",
            "--no-peers",
            "--cpus",
            &cpu,
            "--out",
            out.to_str().unwrap(),
        ],
    ));
    let cached = cache_path(&cache);
    let m = smelt_model::Model::load(&cached)
        .unwrap_or_else(|e| panic!("no cached model after smelt run: {e}\n{stdout}"));
    assert_eq!(m.provenance.method, "probe");
    assert_eq!(m.cpus, vec![cpus()[0]]);
    // The same model as the run's own copy, and the tuning file beside it.
    let own = smelt_model::Model::load(out.join("model.json")).unwrap();
    assert_eq!(own.send, m.send);
    assert!(cached
        .with_file_name(format!(
            "tune-{}",
            cached
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .trim_start_matches("model-")
        ))
        .is_file());
    // What comes after uses it.
    let (_, err) = ok(smelt_in(
        &cache,
        &[],
        &["tree", "--verbose", "--cpus", &cpu],
    ));
    assert!(err.contains("this host's cached probe"), "{err}");
}
