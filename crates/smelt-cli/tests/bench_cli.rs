//! CLI tests of `smelt probe` and `smelt bench`: they run the built `smelt` binary as a
//! user would and check what comes out (a valid model, a parsable report naming every
//! topology and operation, exit status 2 on bad input). No timing assertions.

use std::process::Command;

#[path = "../../../tests/support/skip.rs"]
mod skip;

fn smelt() -> Command {
    Command::new(env!("CARGO_BIN_EXE_smelt"))
}

fn run(args: &[&str]) -> (i32, String, String) {
    run_cmd(smelt(), args)
}

/// `cmd ARGS` (a `smelt` command with, say, variables of its own): exit code, stdout,
/// stderr.
fn run_cmd(mut cmd: Command, args: &[&str]) -> (i32, String, String) {
    let out = cmd.args(args).output().expect("cannot run smelt");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `smelt ARGS`, which must exit 0; its standard output parsed as JSON.
fn run_json(args: &[&str]) -> serde_json::Value {
    run_json_cmd(smelt(), args)
}

/// [`run_json`] of `cmd`.
fn run_json_cmd(cmd: Command, args: &[&str]) -> serde_json::Value {
    let (code, out, err) = run_cmd(cmd, args);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

/// `smelt bench --quick --json --no-peers --rounds 10 --ops barrier` with `threads`
/// members (also the peer thread count) over `topologies`; the parsed report.
fn bench_barrier_json(topologies: &str, threads: &str) -> serde_json::Value {
    run_json(&[
        "bench",
        "--quick",
        "--json",
        "--no-peers",
        "--rounds",
        "10",
        "--ops",
        "barrier",
        "--topologies",
        topologies,
        "--threads",
        threads,
        "--peer-threads",
        threads,
    ])
}

#[test]
fn probe_writes_a_valid_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.json");
    let (code, _, err) = run(&["probe", "--quick", "-q", "-o", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let m = smelt_model::Model::load(&path).unwrap();
    assert_eq!(m.provenance.method, "probe");
    assert!(!m.provenance.notes.is_empty());
    assert!(!m.provenance.date.is_empty() && !m.provenance.host.is_empty());
    let n = m.len();
    assert!(n >= 1);
    let rtt = m.rtt.as_ref().expect("the probe records round trips");
    for (i, row) in rtt.iter().enumerate() {
        for (j, v) in row.iter().enumerate() {
            if i != j {
                assert!(*v > 0.0, "rtt[{i}][{j}] = {v}");
            }
        }
    }
    if n > 1 {
        assert!(m.inferred_hierarchy.is_some());
    }
}

#[test]
fn probe_cache_keeps_the_model_where_the_mpi_interposer_looks() {
    let dir = tempfile::tempdir().unwrap();
    let out = smelt()
        .args(["probe", "--quick", "--reps", "3", "--cache"])
        .env("XDG_CACHE_HOME", dir.path())
        .output()
        .expect("cannot run smelt");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        out.stdout.is_empty(),
        "the model goes to the cache, not stdout"
    );
    let path = smelt_model::host::cached_model_path_in(
        Some(dir.path().into()),
        None,
        &smelt_model::host::host_name(),
    )
    .unwrap();
    assert!(err.contains("cached as"), "{err}");
    let m = smelt_model::Model::load(&path).unwrap();
    assert_eq!(m.provenance.method, "probe");
}

#[test]
fn probe_prints_the_model_without_output_file() {
    let (code, out, err) = run(&[
        "probe",
        "--quick",
        "--quiet",
        "--reps",
        "3",
        "--time-limit",
        "30",
        "--sample",
    ]);
    assert_eq!(code, 0, "{err}");
    let m = smelt_model::Model::from_json(&out, None).unwrap();
    assert!(m.provenance.notes.iter().any(|n| n.contains("--sample")));
}

#[test]
fn probe_rejects_bad_cpus_with_exit_2() {
    for cpus in ["100000", "3-1", "x"] {
        let (code, out, err) = run(&["probe", "--quick", "--cpus", cpus]);
        assert_eq!(code, 2, "--cpus {cpus}: {err}");
        assert!(out.is_empty());
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("error:"), "{err}");
    }
    let (code, _, err) = run(&["probe", "--time-limit", "-3"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn bench_quick_json_names_every_topology_and_op() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.json");
    let (code, _, err) = run(&["probe", "--quick", "-q", "-o", model.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let out_file = dir.path().join("bench.json");
    let out = smelt()
        .args([
            "bench",
            "--quick",
            "--json",
            "--rounds",
            "20",
            "--peer-threads",
            "2,3",
            "--model",
            model.to_str().unwrap(),
            "--json-out",
            out_file.to_str().unwrap(),
        ])
        .env("SMELT_PEERS_DIR", dir.path().join("peers"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    assert_eq!(saved["collectives"], j["collectives"]);
    let cols = j["collectives"].as_array().unwrap();
    for t in smelt_tree::Topology::EVALUATED {
        for op in ["broadcast", "reduce", "barrier", "2pc"] {
            let c = cols
                .iter()
                .find(|c| c["topology"] == t.to_string().as_str() && c["op"] == op)
                .unwrap_or_else(|| panic!("no {t} {op} in the report"));
            assert!(
                ["ok", "failed", "skipped"].contains(&c["status"].as_str().unwrap()),
                "{c}"
            );
        }
    }
    // Peers are present, measured or explicitly skipped/failed with a reason.
    let peers = j["peers"].as_array().unwrap();
    for name in [
        "pthread_barrier",
        "dissemination_barrier",
        "std::sync::Barrier",
    ] {
        assert!(peers.iter().any(|p| p["name"] == name), "no {name}");
    }
    assert!(peers
        .iter()
        .any(|p| p["name"].as_str().unwrap().starts_with("mpi_barrier")));
    assert!(peers
        .iter()
        .any(|p| p["name"].as_str().unwrap().starts_with("omp_barrier")));
    for p in peers.iter().chain(j["transport"].as_array().unwrap()) {
        match p["status"].as_str().unwrap() {
            "ok" => assert!(p["ns"]["median"].as_f64().unwrap() > 0.0, "{p}"),
            "skipped" | "failed" => assert!(!p["reason"].as_str().unwrap().is_empty()),
            s => panic!("status {s}"),
        }
    }
    let transport = j["transport"].as_array().unwrap();
    assert!(transport
        .iter()
        .any(|p| p["name"] == "smelt queuepair" && p["status"] == "ok"));
    assert!(j["floor"]["probes"].as_u64().unwrap() > 0);
}

#[test]
fn bench_csv_has_the_machinedb_header() {
    let (code, out, err) = run(&[
        "bench",
        "--quick",
        "--csv",
        "--no-peers",
        "--rounds",
        "10",
        "--ops",
        "barrier,broadcast",
        "--topologies",
        "binary,adaptive",
        "--peer-threads",
        "2",
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "algorithm,bintree,bintree_stderr,AT,AT_stderr");
    assert!(lines[1].starts_with("barriers,"));
    assert!(lines[2].starts_with("ab,"));
}

#[test]
fn bench_rejects_bad_options_with_exit_2() {
    for args in [
        vec!["bench", "--ops", "gossip", "--no-peers"],
        vec!["bench", "--topologies", "spiral", "--no-peers"],
        vec!["bench", "--model", "/nonexistent/model.json"],
        vec!["bench", "--rounds", "0"],
        vec!["bench", "--cpus", "100000", "--no-peers"],
        vec!["bench", "--threads", "100000", "--no-peers"],
        vec!["bench", "--peer-threads", "2,0", "--no-peers"],
    ] {
        let (code, _, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.starts_with("error:"), "{args:?}: {err}");
    }
}

#[test]
fn bench_flattens_smelt_when_oversubscribed() {
    // One thread more than this process may use: smelt's comparison row and the extra
    // collectives row run the tree flat (`GroupConfig::flatten_oversubscribed`); the
    // per-topology rows keep the trees as given.
    let n = smelt_transport::allowed_cpus().unwrap().len();
    let j = bench_barrier_json("binary", &(n + 1).to_string());
    let cols = j["collectives"].as_array().unwrap();
    let binary = cols.iter().find(|c| c["topology"] == "binary").unwrap();
    assert_eq!(binary["flattened"], false, "{binary}");
    let flat = cols
        .iter()
        .find(|c| c["topology"] == "adaptive-shuffled (flattened: oversubscribed)")
        .unwrap_or_else(|| panic!("no flattened row in {cols:?}"));
    assert_eq!(flat["flattened"], true, "{flat}");
    assert_eq!(flat["op"], "barrier");
    assert_eq!(flat["status"], "ok", "{flat}");
    let peers = j["peers"].as_array().unwrap();
    let smelt = peers
        .iter()
        .find(|p| p["metric"] == "barrier" && p["threads"] == n + 1)
        .unwrap_or_else(|| panic!("no smelt barrier row in {peers:?}"));
    // The default, auto, with what it picked named (over the oversubscribed group no
    // tuning file applies: the prediction).
    let name = smelt["name"].as_str().unwrap();
    let algo = smelt["auto"]["algorithm"].as_str().unwrap();
    assert_eq!(
        name,
        format!("smelt (auto: {algo}, flattened: oversubscribed)"),
        "{smelt}"
    );
    // Flat, the barrier runs on the flat tree (not by dissemination, which the
    // prediction picks: it does not model scheduling).
    if std::env::var_os("SMELT_TUNE").is_none() {
        assert_eq!(algo, "sequential", "{smelt}");
    }
    assert_eq!(smelt["flattened"], true);
    assert_eq!(smelt["status"], "ok", "{smelt}");
    // Two members on as many CPUs: not flattened.
    for p in peers.iter().filter(|p| p["threads"] == 2 && n >= 2) {
        assert_eq!(p["flattened"], false, "{p}");
        let algo = p["auto"]["algorithm"].as_str().unwrap();
        assert_eq!(p["name"], format!("smelt (auto: {algo})"), "{p}");
    }
}

#[test]
fn bench_compares_topologies_only_when_they_differ() {
    // With two members every topology is the same tree: no topology ratio, a warning
    // instead. With three, the best static and best smelt trees are compared.
    let topology_ratios = |threads: &str| {
        let j = bench_barrier_json("binary,adaptive", threads);
        let warned = j["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("same tree"));
        let ratios: Vec<String> = j["ratios"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["what"].as_str().unwrap().to_string())
            .filter(|w| w.contains("best static tree"))
            .collect();
        (warned, ratios)
    };
    let (warned, ratios) = topology_ratios("2");
    assert!(warned && ratios.is_empty(), "{ratios:?}");
    let (warned, ratios) = topology_ratios("3");
    assert!(!warned, "a 3-member run must not claim the trees are equal");
    assert_eq!(ratios, vec!["barrier: best static tree / best smelt tree"]);
}

#[test]
fn bench_processes_measures_process_members_beside_thread_members() {
    // Its segments in a directory of its own: the other tests of this binary make
    // theirs in /dev/shm at the same time.
    let shm = tempfile::tempdir().unwrap();
    let mut cmd = smelt();
    cmd.env("SMELT_SHM_DIR", shm.path());
    let v = run_json_cmd(
        cmd,
        &[
            "bench",
            "processes",
            "--quick",
            "--json",
            "--no-peers",
            "--rounds",
            "10",
            "--ops",
            "barrier",
            "--topologies",
            "binary",
            "--peer-threads",
            "2,5",
        ],
    );
    let peers = v["peers"].as_array().unwrap();
    for (metric, n) in [
        ("barrier", 2),
        ("barrier", 5),
        ("broadcast", 2),
        ("reduce", 2),
    ] {
        for mode in ["threads", "processes"] {
            let row = peers.iter().find(|p| {
                p["mode"] == mode
                    && p["metric"] == metric
                    && p["threads"] == n
                    && p["name"].as_str().unwrap().starts_with("smelt")
            });
            let row = row.unwrap_or_else(|| panic!("no {mode} {metric} row for {n}: {peers:?}"));
            assert!(
                row["ns"]["median"].as_f64().is_some_and(|x| x > 0.0),
                "{row}"
            );
        }
    }
    let left: Vec<_> = std::fs::read_dir(shm.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// `smelt bench mpi` runs an unchanged MPI program under mpirun for every system in
/// one run; without an interposer library smelt's rows say why they are skipped and
/// the run still succeeds. Checks the JSON rows, not the times.
#[test]
fn bench_mpi_reports_every_system_op_and_size() {
    if which("mpirun").is_none() || which("mpicc").is_none() {
        skip::tool_missing("Open MPI (mpirun, mpicc)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("libsmelt_mpi.so");
    let j = run_json(&[
        "bench",
        "mpi",
        "--quick",
        "--json",
        "--sizes",
        "8,1000",
        "--ranks",
        "2",
        "--nodes-of",
        "0",
        "--lib",
        missing.to_str().unwrap(),
    ]);
    let rows = j["rows"].as_array().unwrap();
    // 4 systems x (3 sized ops x 2 sizes + barrier).
    assert_eq!(rows.len(), 4 * 7, "{j}");
    for r in rows {
        let sys = r["system"].as_str().unwrap();
        let status = r["status"].as_str().unwrap_or_default();
        match sys {
            "Open MPI (tuned)" | "Open MPI (sm)" => {
                assert_eq!(status, "ok", "{r}");
                assert!(r["ns"]["median"].as_f64().unwrap() > 0.0, "{r}");
            }
            "Open MPI (han)" | "smelt (interposer)" => {
                assert_eq!(status, "skipped", "{r}");
                assert!(!r["reason"].as_str().unwrap().is_empty(), "{r}");
            }
            other => panic!("unexpected system {other}"),
        }
    }
    let (code, _, err) = run(&["bench", "mpi", "--ops", "scan"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("scan"), "{err}");
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[test]
fn bench_measures_a_saved_tree() {
    let dir = tempfile::tempdir().unwrap();
    let cpus = smelt_transport::allowed_cpus().unwrap();
    let list: Vec<String> = cpus.iter().take(2).map(|c| c.to_string()).collect();
    let model = dir.path().join("m.json");
    let (code, _, err) = run(&[
        "probe",
        "--quick",
        "--cpus",
        &list.join(","),
        "-o",
        model.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let t = dir.path().join("pair.json");
    let (code, _, err) = run(&[
        "tree",
        "--model",
        model.to_str().unwrap(),
        "--algo",
        "sequential",
        "--format",
        "json",
        "-o",
        t.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let j = run_json(&[
        "bench",
        "--quick",
        "--json",
        "--no-peers",
        "--rounds",
        "10",
        "--ops",
        "barrier,broadcast",
        "--model",
        model.to_str().unwrap(),
        "--topologies",
        "binary",
        "--tree",
        t.to_str().unwrap(),
        "--peer-threads",
        "2",
    ]);
    let rows: Vec<&serde_json::Value> = j["collectives"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["topology"] == "file:pair.json")
        .collect();
    assert_eq!(rows.len(), 2, "{j}");
    for r in rows {
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["members"], list.len(), "{r}");
    }
    // A tree over CPUs the run does not use is refused before measuring.
    let far = dir.path().join("far.json");
    std::fs::write(
        &far,
        r#"{"members":[100000,100001],"root":100000,"children":{"100000":[100001]}}"#,
    )
    .unwrap();
    let (code, _, err) = run(&[
        "bench",
        "--quick",
        "--no-peers",
        "--model",
        model.to_str().unwrap(),
        "--tree",
        far.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--tree") && err.contains("100000"), "{err}");
}

#[test]
fn bench_sync_measures_loose_and_strict_reductions() {
    let j = run_json(&[
        "bench",
        "sync",
        "--quick",
        "--json",
        "--threads",
        "3",
        "--sizes",
        "8,1024,4104",
        "--topologies",
        "sequential,knomial:1",
    ]);
    let rows = j["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3 * 2 * 2, "{j}");
    for r in rows {
        assert!(r["median_ns"].as_f64().unwrap() > 0.0, "{r}");
        assert!(["loose", "strict"].contains(&r["mode"].as_str().unwrap()));
    }
    let gains = j["gains"].as_array().unwrap();
    assert_eq!(gains.len(), 6, "{j}");
    assert!(gains
        .iter()
        .all(|g| g["loose_speedup"].as_f64().unwrap() > 0.0));
    // Sizes must be whole doubles.
    let (code, _, err) = run(&["bench", "sync", "--quick", "--sizes", "12"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("multiple of 8"), "{err}");
}

#[test]
fn bench_large_reports_bandwidth_against_memcpy() {
    let j = run_json(&[
        "bench",
        "large",
        "--quick",
        "--json",
        "--no-peers",
        "--sizes",
        "65536,1048584",
        "--capacity",
        "64",
    ]);
    assert_eq!(j["capacity"], 64);
    assert_eq!(j["segment"], 1536);
    // The combine alone, per size: the kernel, a plain loop and memcpy.
    let combine = j["combine"].as_array().unwrap();
    assert_eq!(combine.len(), 2, "{j}");
    for c in combine {
        for k in [
            "kernel_gbs",
            "plain_loop_gbs",
            "memcpy_gbs",
            "kernel_vs_memcpy",
        ] {
            assert!(c[k].as_f64().unwrap() > 0.0, "{c}");
        }
    }
    let rows = j["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{j}");
    for r in rows {
        assert!(r["memcpy_gbs"].as_f64().unwrap() > 0.0);
        let ops: Vec<(&str, &str)> = r["ops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (o["op"].as_str().unwrap(), o["algorithm"].as_str().unwrap()))
            .collect();
        assert_eq!(
            ops,
            [
                ("broadcast", "tree"),
                ("reduce", "tree"),
                ("allreduce", "tree"),
                ("allreduce", "recursive-doubling"),
                ("allreduce", "rabenseifner"),
                ("allreduce", "ring")
            ]
        );
        for o in r["ops"].as_array().unwrap() {
            assert!(o["smelt_gbs"].as_f64().unwrap() > 0.0, "{o}");
            assert!(o["vs_memcpy"].as_f64().unwrap() > 0.0, "{o}");
            assert_eq!(o["open_mpi_note"], "--no-peers");
        }
        // Exactly one allreduce row is what `auto` picks at this size; the other
        // operations have one algorithm, theirs.
        let autos: Vec<&serde_json::Value> = r["ops"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["op"] == "allreduce" && o["auto"] == true)
            .collect();
        assert_eq!(autos.len(), 1, "{r}");
        assert!(
            r["ops"]
                .as_array()
                .unwrap()
                .iter()
                .all(|o| o["op"] == "allreduce" || o["auto"] == true),
            "{r}"
        );
    }
    let (code, _, err) = run(&["bench", "large", "--quick", "--no-peers", "--sizes", "100"]);
    assert_eq!(code, 2, "{err}");
}

/// The non-tree algorithms are rows of their own, for the operations they run only
/// (dissemination: barrier; recursive doubling: allreduce), measured with 5 members
/// (not a power of two).
#[test]
fn bench_shows_non_tree_rows_for_their_operations() {
    let j = run_json(&[
        "bench",
        "--quick",
        "--json",
        "--no-peers",
        "--rounds",
        "10",
        "--ops",
        "broadcast,allreduce,barrier",
        "--topologies",
        "binary",
        "--threads",
        "5",
        "--peer-threads",
        "2",
    ]);
    let cols = j["collectives"].as_array().unwrap();
    let row = |t: &str, op: &str| {
        cols.iter()
            .find(|c| c["topology"] == t && c["op"] == op)
            .cloned()
    };
    for (t, op) in [
        ("dissemination", "barrier"),
        ("recursive-doubling", "allreduce"),
    ] {
        let c = row(t, op).unwrap_or_else(|| panic!("no {t} {op} row: {cols:?}"));
        assert_eq!(c["status"], "ok", "{c}");
    }
    for (t, op) in [
        ("dissemination", "broadcast"),
        ("dissemination", "allreduce"),
        ("recursive-doubling", "barrier"),
    ] {
        assert!(row(t, op).is_none(), "{t} {op} is not measured");
    }
    assert_eq!(row("binary", "barrier").unwrap()["status"], "ok");
}

/// `smelt bench aggregation --quick --json`: every benchmark, setup and scheme has
/// a row without error; the histogram rows' message counts keep the paper's bounds
/// (⌈z/g⌉ + N·t per worker for WW, ⌈z/g⌉ + N for the others, z items per worker, N
/// processes of t workers); each case has its best-over-none ratio and the orderings
/// are reported.
#[test]
fn aggregation_bench_reports_every_scheme_within_the_message_bounds() {
    let r = run_json(&["bench", "aggregation", "--quick", "--json"]);
    let g = r["buffer_items"].as_u64().unwrap();
    let rows = r["rows"].as_array().unwrap();
    for bench in ["histogram", "index-gather"] {
        for scheme in ["WW", "WPs", "WsP", "PP", "none"] {
            assert!(
                rows.iter()
                    .any(|x| x["bench"] == bench && x["scheme"] == scheme),
                "no {bench} {scheme} row"
            );
        }
    }
    for x in rows {
        assert!(x["error"].is_null(), "{x}");
        assert!(x["items_per_s"].as_f64().unwrap() > 0.0, "{x}");
        if x["bench"] != "histogram" || x["scheme"] == "none" {
            continue;
        }
        let z = x["measured_per_worker"].as_u64().unwrap();
        let (n, t) = (
            x["processes"].as_u64().unwrap(),
            x["workers_per_process"].as_u64().unwrap(),
        );
        let buffers = if x["scheme"] == "WW" { n * t } else { n };
        let bound = (z.div_ceil(g) + buffers) as f64;
        let key = if x["scheme"] == "PP" {
            "messages_per_worker" // PP's buffers are the process's: the mean
        } else {
            "max_messages_per_worker"
        };
        assert!(x[key].as_f64().unwrap() <= bound, "{key} over {bound}: {x}");
    }
    let ratios = r["ratios"].as_array().unwrap();
    assert!(ratios.len() >= 6, "{ratios:?}");
    assert!(ratios
        .iter()
        .all(|x| x["best_over_none"].as_f64().unwrap() > 0.0));
    assert!(!r["orderings"].as_array().unwrap().is_empty());
}

/// `smelt bench offload --quick --json`: round trips for the three modes, the rate
/// for 1 to 6 queues in each, the targets with their values, and the global-array
/// section (inside a node always; across nodes measured or said to be skipped).
#[test]
fn offload_bench_reports_round_trips_rates_and_global_arrays() {
    let r = run_json(&["bench", "offload", "--quick", "--json"]);
    let rt = r["round_trip"].as_array().unwrap();
    for mode in ["direct", "static", "dynamic"] {
        let x = rt.iter().find(|x| x["mode"] == mode).unwrap();
        assert!(x["ns"].as_f64().unwrap() > 0.0, "{x}");
    }
    let rate = r["rate"].as_array().unwrap();
    assert_eq!(rate.len(), 18, "{rate:?}");
    assert!(rate
        .iter()
        .all(|x| x["error"].is_null() && x["messages"].as_u64().unwrap() > 0));
    let targets = r["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 4);
    assert!(
        targets.iter().all(|t| t["value"].as_f64().is_some()),
        "{targets:?}"
    );
    let g = &r["global"];
    assert!(g["inside_node"]["get_8b_ns"].as_f64().unwrap() > 0.0, "{g}");
    assert!(
        g["inside_node"]["queuepair_rtt_ns"].as_f64().unwrap() > 0.0,
        "{g}"
    );
    let across = &g["across_nodes"];
    assert!(
        across.get("skipped").is_some() || across["get_across_over_mpi_get"].as_f64().is_some(),
        "{across}"
    );
}

/// `smelt bench am --quick --json`: the threads and processes rows (LogP figures or
/// the reason they failed), the peers' medians over 5 interleaved rounds, and each of
/// the two ratios with the threads row the median of its rounds' ratios.
#[test]
fn am_bench_ratios_are_medians_of_interleaved_rounds() {
    // A figure that comes out inconsistent on a loaded machine (say a negative L) is
    // reported as failed, the report still printed, and the exit code says so.
    let (code, out, err) = run(&["bench", "am", "--quick", "--json"]);
    assert!(
        code == 0 || (code == 1 && err.contains("failed: ")),
        "exit {code}: {err}"
    );
    let r: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let rows = r["transports"].as_array().unwrap();
    for t in ["threads", "processes"] {
        let x = rows.iter().find(|x| x["transport"] == t).unwrap();
        assert!(
            x["logp"]["rtt_ns"].as_f64().is_some_and(|v| v > 0.0) || x["error"].is_string(),
            "{x}"
        );
    }
    assert_eq!(r["peers"]["rounds"], 5, "{}", r["peers"]);
    for name in ["am_rtt_over_queuepair_rtt", "am_rate_over_crossbeam_rate"] {
        let per: Vec<f64> = r["ratios"]["rounds"][name]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert!(per.len() <= 5, "{name}: {per:?}");
        if per.is_empty() {
            // No round measured both figures: no ratio is made up.
            assert!(r["ratios"][name].is_null(), "{}", r["ratios"]);
            continue;
        }
        assert!(
            per.iter().all(|&v| v.is_finite() && v > 0.0),
            "{name}: {per:?}"
        );
        let mut sorted = per.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        let got = r["ratios"][name].as_f64().unwrap();
        assert!(
            (got - median).abs() <= 1e-9 * median,
            "{name}: {got} vs {per:?}"
        );
    }
}

/// `smelt bench --help` lists every benchmark as a subcommand, each with its own
/// `--help` and examples; the old flag-modes (and `smelt tune`'s) are usage errors
/// (exit 2) naming the subcommand they became, a subcommand refuses another's options,
/// and plain `smelt bench` keeps the collectives' options.
#[test]
fn bench_help_lists_subcommands() {
    const BENCHMARKS: [&str; 9] = [
        "collectives",
        "processes",
        "mpi",
        "large",
        "sync",
        "am",
        "aggregation",
        "offload",
        "tasks",
    ];
    let (code, out, err) = run(&["bench", "--help"]);
    assert_eq!(code, 0, "{err}");
    let listed: Vec<&str> = out
        .split("Benchmarks:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Benchmarks section:\n{out}"))
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for b in BENCHMARKS {
        assert!(listed.contains(&b), "{b} not listed: {listed:?}\n{out}");
        let (code, help, err) = run(&["bench", b, "--help"]);
        assert_eq!(code, 0, "{b}: {err}");
        assert!(
            help.contains(&format!("smelt bench {b} ")) && help.contains("Examples:"),
            "{b}: no examples:\n{help}"
        );
    }
    // The collectives' options stay on plain `smelt bench` (its default benchmark).
    assert!(
        out.contains("--peer-threads") && out.contains("--csv"),
        "{out}"
    );
    for flag in [
        "--processes",
        "--mpi",
        "--large",
        "--sync",
        "--am",
        "--aggregation",
        "--offload",
        "--tasks",
    ] {
        let (code, _, err) = run(&["bench", flag, "--quick"]);
        assert_eq!(code, 2, "{flag}: {err}");
        // The error names the subcommand it became.
        let now = format!("'smelt bench {}'", &flag[2..]);
        assert!(err.contains(flag) && err.contains(&now), "{flag}: {err}");
    }
    for (old, now) in [
        ("--check", "'smelt tune check'"),
        ("--predict", "'smelt tune predict'"),
        ("--compare", "'smelt tune compare'"),
    ] {
        let (code, _, err) = run(&["tune", old]);
        assert_eq!(code, 2, "{old}: {err}");
        assert!(err.contains(now), "{old}: {err}");
    }
    // Each benchmark takes only its own options.
    let (code, _, err) = run(&["bench", "am", "--ranks", "2"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--ranks"), "{err}");
    let (code, _, err) = run(&["bench", "--quick", "am"]);
    assert_eq!(code, 2, "{err}");
}
