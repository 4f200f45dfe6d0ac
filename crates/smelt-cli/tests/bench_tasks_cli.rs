//! `smelt bench tasks --quick --json`: every workload on every runtime and worker
//! count, each result checked against the sequential one (a wrong result is a FAILED
//! row and exit status 1), fib across members and processes, the targets.

use std::process::Command;

#[test]
fn tasks_bench_reports_every_workload_runtime_and_target() {
    let o = Command::new(env!("CARGO_BIN_EXE_smelt"))
        .args(["bench", "tasks", "--quick", "--json"])
        .output()
        .expect("run smelt");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "smelt bench tasks failed ({}):\n{stdout}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let r: serde_json::Value = serde_json::from_str(&stdout).expect("JSON report");
    let rows = r["rows"].as_array().expect("rows");
    let has = |w: &str, rt: &str, k: u64| {
        rows.iter().any(|x| {
            x["workload"].as_str().is_some_and(|s| s.starts_with(w))
                && x["runtime"] == rt
                && x["workers"] == k
                && x["ms"].as_f64().is_some_and(|v| v > 0.0)
                && x.get("error").is_none()
        })
    };
    for w in ["fib(27)", "fib(30)", "UTS T1-like", "cilksort"] {
        assert!(has(w, "sequential", 1), "{w} sequential: {r}");
        for k in [1, 2] {
            assert!(has(w, "smelt-tasks", k), "{w} smelt {k}: {r}");
            assert!(has(w, "rayon", k), "{w} rayon {k}: {r}");
        }
    }
    for k in [1, 2] {
        assert!(
            has("fib(27) cutoff", "smelt-tasks members (threads, AM)", k),
            "{r}"
        );
        assert!(
            has(
                "fib(30) cutoff",
                "smelt-tasks processes (AM, shared memory)",
                k
            ),
            "{r}"
        );
    }
    // fib's tasks: one per join, fib(n+1) - 1.
    let fib27 = rows
        .iter()
        .find(|x| x["workload"] == "fib(27)" && x["runtime"] == "smelt-tasks" && x["workers"] == 1)
        .unwrap();
    assert_eq!(fib27["tasks"], 317_810);
    assert!(fib27["overhead_ns_per_task"].as_f64().is_some(), "{fib27}");
    let targets = r["targets"].as_array().expect("targets");
    assert_eq!(targets.len(), 4, "{r}");
    assert!(targets.iter().all(|t| t["value"].as_f64().is_some()), "{r}");
}
