//! `smelt kvs` end to end: the three setups in one run, histories and their check,
//! bad input.

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

#[test]
fn three_setups_in_one_run() {
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
    assert_eq!(setups, ["tree", "sequential", "broadcast"]);
    assert_eq!(rows[0]["protocol"], "1paxos");
    assert_eq!(rows[1]["tree"], "sequential");
    assert_eq!(rows[2]["protocol"], "broadcast");
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

#[test]
fn history_is_written_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("h.jsonl");
    let hs = h.to_str().unwrap();
    let out = ok(&[
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
        "tree",
        "--history",
        hs,
        "--check",
    ]);
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
