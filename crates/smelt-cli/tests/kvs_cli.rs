//! `smelt kvs` end to end: the four setups in one run (smelt's tree, sequential
//! sending, the plain broadcast, the Raft peer), histories and their check, bad input.

mod common;

use common::{ok, smelt};

/// Exit status `code` and exactly one `error:` line naming `what`.
fn fails_with(code: i32, args: &[&str], what: &str) {
    let o = smelt(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "smelt {args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error:") && err.contains(what), "{err}");
}

/// `smelt kvs` of `setups` with 4 replicas and 12 clients on 3 keys, half gets, for
/// 0.4 s, its history written to `history` and checked; `more` arguments after.
fn history_run(setups: &str, history: &str, more: &[&str]) -> String {
    let mut args = vec![
        "kvs",
        "--replicas",
        "4",
        "--clients",
        "12",
        "--keys",
        "3",
        "--get-ratio",
        "0.5",
        "--duration",
        "0.4",
        "--setups",
        setups,
        "--history",
        history,
        "--check",
    ];
    args.extend_from_slice(more);
    ok(&args)
}

#[test]
fn four_setups_in_one_run() {
    let out = ok(&[
        "kvs",
        "--replicas",
        "4",
        "--clients",
        "4",
        "--duration",
        "0.3",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v["rows"].as_array().unwrap();
    let setups: Vec<&str> = rows.iter().map(|r| r["setup"].as_str().unwrap()).collect();
    assert_eq!(setups, ["tree", "sequential", "broadcast", "raft"]);
    assert_eq!(rows[0]["protocol"], "1paxos");
    assert_eq!(rows[1]["tree"], "sequential");
    assert_eq!(rows[2]["protocol"], "broadcast");
    // The Raft peer's row, beside smelt's.
    assert_eq!(rows[3]["protocol"], "raft");
    assert_eq!(rows[3]["tree"], serde_json::Value::Null);
    assert!(
        v["ratios_vs_raft"]["set_throughput_tree_over_raft"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    for r in rows {
        assert_eq!(r["logs_identical"], true, "{r}");
        assert!(r["sets"]["ok"].as_u64().unwrap() > 0, "{r}");
        assert!(r["gets"]["p99_ns"].as_u64().unwrap() >= r["gets"]["p50_ns"].as_u64().unwrap());
    }
    assert!(
        v["ratios"]["set_throughput_tree_over_sequential"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    // Human output, 2PC.
    let out = ok(&[
        "kvs",
        "--replicas",
        "3",
        "--clients",
        "3",
        "--protocol",
        "2pc",
        "--tree",
        "binary",
        "--duration",
        "0.2",
        "--setups",
        "tree,sequential",
    ]);
    assert!(
        out.contains("2pc over binary") && out.contains("2pc over sequential"),
        "{out}"
    );
    assert!(out.contains("tree vs sequential sending"), "{out}");
    assert!(
        out.contains("replica logs identical after each run: yes"),
        "{out}"
    );
}

/// The Raft peer alone: its history is written and linearizable, its logs agree, in
/// text the row and the tree-vs-raft line; its leader stopped mid-run, Raft fails over.
#[test]
fn the_raft_row_is_checked_like_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("raft.jsonl");
    let out = history_run("raft", h.to_str().unwrap(), &["--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["linearizable"], true, "{v}");
    assert!(v["history"]["ops"].as_u64().unwrap() > 0, "{v}");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["setup"], "raft");
    assert_eq!(rows[0]["logs_identical"], true);
    assert!(rows[0]["sets"]["ok"].as_u64().unwrap() > 0);
    let out = ok(&["kvs", "--check-file", h.to_str().unwrap()]);
    assert!(out.contains("linearizable"), "{out}");
    // Text, beside smelt's tree; the leader stopped mid-run.
    let out = ok(&[
        "kvs",
        "--replicas",
        "5",
        "--clients",
        "5",
        "--duration",
        "1.2",
        "--setups",
        "tree,raft",
        "--crash",
        "leader@0.3",
        "--check",
    ]);
    assert!(out.contains("raft (raft-rs, in memory)"), "{out}");
    assert!(out.contains("tree vs raft: set throughput"), "{out}");
    assert!(out.contains("raft: replica"), "{out}");
    assert!(out.contains("linearizable: yes"), "{out}");
    assert!(
        out.contains("replica logs identical after each run: yes"),
        "{out}"
    );
}

#[test]
fn history_is_written_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("h.jsonl");
    let hs = h.to_str().unwrap();
    let out = history_run("tree", hs, &[]);
    assert!(out.contains("linearizable: yes"), "{out}");
    let text = std::fs::read_to_string(&h).unwrap();
    let mut sets = 0;
    let mut null_gets = 0;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let o = v.as_object().unwrap();
        let keys: Vec<&str> = o.keys().map(|k| k.as_str()).collect();
        assert_eq!(keys.len(), 7, "{line}");
        for k in ["client", "op", "key", "value", "call_ns", "return_ns", "ok"] {
            assert!(o.contains_key(k), "{k} missing: {line}");
        }
        assert!(v["return_ns"].as_u64() >= v["call_ns"].as_u64());
        match v["op"].as_str().unwrap() {
            "set" => sets += 1,
            "get" if v["value"].is_null() => null_gets += 1,
            _ => {}
        }
    }
    assert!(sets > 0);
    let _ = null_gets;
    let out = ok(&["kvs", "--check-file", hs]);
    assert!(out.contains("linearizable"), "{out}");
    // A history that is not linearizable: a stale read after the set returned.
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"client\":0,\"op\":\"set\",\"key\":1,\"value\":7,\"call_ns\":0,\"return_ns\":10,\"ok\":true}\n\
         {\"client\":1,\"op\":\"get\",\"key\":1,\"value\":null,\"call_ns\":20,\"return_ns\":30,\"ok\":true}\n",
    )
    .unwrap();
    fails_with(
        1,
        &["kvs", "--check-file", bad.to_str().unwrap()],
        "not linearizable",
    );
    std::fs::write(&bad, "{\"op\": 3}\n").unwrap();
    fails_with(2, &["kvs", "--check-file", bad.to_str().unwrap()], "line 1");
}

#[test]
fn bad_input_is_one_error_line() {
    fails_with(2, &["kvs", "--replicas", "0"], "--replicas");
    fails_with(2, &["kvs", "--clients", "0"], "--clients");
    fails_with(2, &["kvs", "--protocol", "raft"], "unknown protocol");
    fails_with(2, &["kvs", "--tree", "oak"], "--tree");
    fails_with(2, &["kvs", "--setups", "tree,forest"], "unknown setup");
    fails_with(2, &["kvs", "--get-ratio", "1.5"], "--get-ratio");
    fails_with(2, &["kvs", "--key-len", "300"], "--key-len");
    fails_with(2, &["kvs", "--value-len", "4"], "--value-len");
    fails_with(2, &["kvs", "--duration", "0"], "--duration");
    fails_with(
        2,
        &[
            "kvs",
            "--history",
            "/nonexistent-dir/h.jsonl",
            "--duration",
            "0.1",
        ],
        "--history",
    );
    fails_with(
        2,
        &["kvs", "--check-file", "/nonexistent-file"],
        "--check-file",
    );
}

/// Replicas stopped mid-run: 1Paxos fails over (only the clients of the stopped
/// replicas fail), the history stays linearizable, the survivors' logs agree.
#[test]
fn crashes_mid_run_fail_over() {
    let out = ok(&[
        "kvs",
        "--replicas",
        "5",
        "--clients",
        "10",
        "--keys",
        "3",
        "--get-ratio",
        "0.5",
        "--duration",
        "0.8",
        "--setups",
        "tree,sequential",
        "--crash",
        "acceptor@0.2",
        "--crash",
        "leader@0.4",
        "--check",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["linearizable"], true, "{v}");
    for r in v["rows"].as_array().unwrap() {
        assert_eq!(r["logs_identical"], true, "{r}");
        assert_eq!(r["crashed"].as_array().unwrap().len(), 2, "{r}");
        assert!(r["view_changes"].as_u64().unwrap() >= 2, "{r}");
        // Only the clients of the two stopped replicas fail (one operation each).
        let failed = r["sets"]["failed"].as_u64().unwrap() + r["gets"]["failed"].as_u64().unwrap();
        assert!(failed <= 4, "{r}");
        assert!(r["sets"]["ok"].as_u64().unwrap() > 0);
    }
}

/// `--processes`: every replica is a `smelt kvs-replica` process linked by shared
/// memory; the acceptor's process is killed (SIGKILL) mid-run and the survivors fail
/// over; the history is linearizable, the logs agree, and the segments (made in a
/// directory of this test's, `SMELT_SHM_DIR`) are all gone afterwards.
#[test]
fn replicas_as_processes_fail_over_and_leave_nothing() {
    let dir = std::env::temp_dir().join(format!("smelt-kvs-cli-shm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_smelt"))
        .args([
            "kvs",
            "--processes",
            "--replicas",
            "4",
            "--clients",
            "6",
            "--keys",
            "3",
            "--get-ratio",
            "0.5",
            "--duration",
            "0.6",
            "--setups",
            "tree,sequential",
            "--attempt-timeout",
            "0.2",
            "--attempts",
            "20",
            "--crash",
            "acceptor@0.2",
            "--check",
            "--json",
        ])
        .env("SMELT_SHM_DIR", &dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["processes"], true, "{v}");
    assert_eq!(v["linearizable"], true, "{v}");
    for r in v["rows"].as_array().unwrap() {
        assert_eq!(r["logs_identical"], true, "{r}");
        assert_eq!(r["crashed"].as_array().unwrap().len(), 1, "{r}");
        assert!(r["view_changes"].as_u64().unwrap() >= 1, "{r}");
        assert!(r["sets"]["ok"].as_u64().unwrap() > 0, "{r}");
    }
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    let _ = std::fs::remove_dir(&dir);
    // The hidden replica subcommand, run by hand: one error line, status 2.
    fails_with(2, &["kvs-replica"], "SMELT_KVS_REPLICA is not set");
}

#[test]
fn simulated_mode_predicts_every_setup() {
    let csv = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/machines/core-to-core-latency/Intel Core i7-6700K.csv");
    let csv = csv.to_str().unwrap();
    let args = [
        "kvs",
        "--model",
        csv,
        "--simulate",
        "--clients",
        "4",
        "--json",
    ];
    let out = ok(&args);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["simulated"], true);
    assert_eq!(v["cpus"], 8);
    // Default replica counts on 8 CPUs: 4 and 8; three setups each.
    let rows = v["rows"].as_array().unwrap();
    let keys: Vec<(u64, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["replicas"].as_u64().unwrap(),
                r["setup"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        [
            (4, "tree"),
            (4, "sequential"),
            (4, "broadcast"),
            (8, "tree"),
            (8, "sequential"),
            (8, "broadcast")
        ]
    );
    for r in rows {
        for k in ["set_per_sec", "set_mean_ns", "set_p50_ns", "get_per_sec"] {
            let x = r[k].as_f64().unwrap();
            assert!(x.is_finite() && x > 0.0, "{k}: {r}");
        }
    }
    let ratios = v["ratios"].as_array().unwrap();
    assert_eq!(ratios.len(), 2);
    assert!(
        ratios[1]["set_throughput_tree_over_sequential"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    // Deterministic.
    assert_eq!(ok(&args), out);
    // Human output: the table and the ratios.
    let text = ok(&[
        "kvs",
        "--model",
        csv,
        "--simulate",
        "--replicas",
        "8",
        "--clients",
        "2,8",
    ]);
    assert!(text.contains("tree vs sequential sending"), "{text}");
    assert!(text.matches("sequential ").count() >= 2, "{text}");
    // Bad input: one error line, status 2.
    fails_with(2, &["kvs", "--simulate"], "--model");
    fails_with(
        2,
        &["kvs", "--model", csv, "--simulate", "--replicas", "9"],
        "8 CPUs",
    );
    fails_with(
        2,
        &["kvs", "--model", "/nonexistent.json", "--simulate"],
        "--model",
    );
    fails_with(2, &["kvs", "--replicas", "2,3"], "--simulate");
    fails_with(
        2,
        &["kvs", "--model", csv, "--simulate", "--get-ratio", "1"],
        "--get-ratio",
    );
}

/// The pids of the processes whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces; it ends at the last ')'.
        let rest = &stat[stat.rfind(')').unwrap_or(0) + 1..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(parent) {
            v.push(pid);
        }
    }
    v
}

/// True while `pid` runs (a zombie has ended).
fn runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let rest = &s[s.rfind(')').unwrap_or(0) + 1..];
            !matches!(rest.split_whitespace().next(), Some("Z") | Some("X"))
        })
        .unwrap_or(false)
}

/// `smelt kvs --processes` killed (SIGKILL) mid-run: its replica processes notice that
/// the store's process is gone and end by themselves, and nothing is left in the
/// segment directory.
#[test]
fn replica_processes_end_when_the_store_process_dies() {
    let dir = std::env::temp_dir().join(format!("smelt-kvs-cli-orphans-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut driver = std::process::Command::new(env!("CARGO_BIN_EXE_smelt"))
        .args([
            "kvs",
            "--processes",
            "--replicas",
            "3",
            "--clients",
            "3",
            "--duration",
            "20",
            "--setups",
            "tree",
        ])
        .env("SMELT_SHM_DIR", &dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the three replica processes to run (bounded).
    let t0 = std::time::Instant::now();
    let mut reps = Vec::new();
    while reps.len() < 3 && t0.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(50));
        reps = children_of(driver.id());
    }
    assert_eq!(reps.len(), 3, "replica processes: {reps:?}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    driver.kill().unwrap();
    driver.wait().unwrap();
    let t1 = std::time::Instant::now();
    while reps.iter().any(|&p| runs(p)) && t1.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let left: Vec<u32> = reps.iter().copied().filter(|&p| runs(p)).collect();
    // Never leave them behind, even when the test fails.
    for &p in &left {
        let _ = std::process::Command::new("kill")
            .args(["-9", &p.to_string()])
            .status();
    }
    assert!(left.is_empty(), "replica processes still running: {left:?}");
    eprintln!(
        "replica processes ended {:?} after the store's process",
        t1.elapsed()
    );
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert!(files.is_empty(), "left behind: {files:?}");
    let _ = std::fs::remove_dir(&dir);
}
