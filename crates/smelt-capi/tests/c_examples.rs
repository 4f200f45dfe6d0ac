//! Builds the C examples in `examples/c/` against the libsmelt that cargo built for
//! this test (found next to the test executable), runs them, and checks their output.

use std::process::Command;

mod common;
use common::{build_and_run_file, cc, compile, repo_root, run};

/// Compiles `examples/c/<name>.c` and runs it with `args`; returns stdout.
fn build_and_run(name: &str, args: &[&str]) -> Option<String> {
    build_and_run_file(&repo_root().join(format!("examples/c/{name}.c")), args)
}

#[test]
fn c_barrier_example_runs() {
    if let Some(out) = build_and_run("barrier", &["", "200"]) {
        assert!(out.contains("barrier ok:"), "{out}");
        assert!(out.contains("x 200 rounds"), "{out}");
    }
}

#[test]
fn c_bcast_reduce_example_runs() {
    if let Some(out) = build_and_run("bcast_reduce", &[]) {
        assert!(out.contains("broadcast ok"), "{out}");
        assert!(out.contains("reduce ok: sum = "), "{out}");
    }
}

/// `examples/c/kvs.c`: 3 replicas, 2 clients on 2 threads, read-your-writes and final
/// values, use after close; with 1Paxos and with 2PC.
#[test]
fn c_kvs_example_runs() {
    for proto in ["1paxos", "2pc"] {
        if let Some(out) = build_and_run("kvs", &[proto, "100"]) {
            let ok = format!("kvs ok: 3 replicas, 2 clients, {proto}, 100 sets and 200 gets");
            assert!(out.contains(&ok), "{out}");
        }
    }
}

/// `examples/c/am_histogram.c`: a histogram on active messages over 4 and 16 threads
/// (queues of 4 slots), a wrong-tag request returned to handler 0, a freed handle.
#[test]
fn c_am_histogram_example_runs() {
    for threads in ["4", "16"] {
        if let Some(out) = build_and_run("am_histogram", &[threads, "5000"]) {
            let n: u64 = threads.parse().unwrap();
            let ok = format!("am histogram ok: {threads} threads, {} updates counted, 1 wrong-tag request returned", n * 5000);
            assert!(out.contains(&ok), "{out}");
        }
    }
}

/// `examples/c/agg_histogram.c`: a histogram over message aggregation, 4 processes of
/// 4 worker threads, every scheme and no aggregation; every bin exact; bad items,
/// schemes and freed handles are errors.
#[test]
fn c_agg_histogram_example_runs() {
    for scheme in ["ww", "wps", "wsp", "pp", "none"] {
        if let Some(out) = build_and_run("agg_histogram", &[scheme, "4", "4", "3000"]) {
            let ok = format!(
                "agg histogram ok: {scheme}, 4 processes x 4 workers, 48000 updates counted"
            );
            assert!(out.contains(&ok), "{out}");
        }
    }
}

/// `examples/c/offload.c`: 16 C threads hand 2000 requests each to 2 communication
/// threads (direct, static, dynamic); the sum, the replies and the counters are exact;
/// mistakes (a bad mode, CPU list, lane, handler, a taken handle, use after stop) are
/// errors.
#[test]
fn c_offload_example_runs() {
    for mode in ["direct", "static", "dynamic"] {
        if let Some(out) = build_and_run("offload", &[mode, "16", "2000"]) {
            let ok = format!("offload ok: {mode}, 16 threads, 32000 requests summed");
            assert!(out.contains(&ok), "{out}");
        }
    }
}

/// `tests/c/am_misuse.c`: active-message mistakes (NULLs, handler 0, 9 words, unknown
/// destinations, tokens used twice, stale or made up, a handler calling its own
/// endpoint, a departed peer) are errors.
#[test]
fn c_am_misuse_is_an_error() {
    let src = repo_root().join("crates/smelt-capi/tests/c/am_misuse.c");
    if let Some(out) = build_and_run_file(&src, &[]) {
        assert!(out.contains("am misuse ok"), "{out}");
    }
}

/// `examples/c/global_stealing.c`: the work-stealing counter on global arrays over 4
/// and 16 threads, checked against a sequential recomputation.
#[test]
fn c_global_stealing_example_runs() {
    for threads in ["4", "16"] {
        if let Some(out) = build_and_run("global_stealing", &[threads, "5000"]) {
            let ok = format!("global stealing ok: 5000 tasks over {threads} threads");
            assert!(out.contains(&ok), "{out}");
        }
    }
}

/// `tests/c/global_misuse.c`: a bad element type, length or member count, NULLs, the
/// entry point of another element type, indices out of range, a bad operation, a freed
/// handle, a handle of another kind.
#[test]
fn c_global_misuse_is_an_error() {
    let src = repo_root().join("crates/smelt-capi/tests/c/global_misuse.c");
    if let Some(out) = build_and_run_file(&src, &[]) {
        assert!(out.contains("global misuse ok"), "{out}");
    }
}

/// `tests/c/kvs_misuse.c`: a bad configuration, NULL arguments, an oversized key or
/// value, a small buffer, a handle of the wrong kind, use after close, double close.
#[test]
fn c_kvs_misuse_is_an_error() {
    let src = repo_root().join("crates/smelt-capi/tests/c/kvs_misuse.c");
    if let Some(out) = build_and_run_file(&src, &[]) {
        assert!(out.contains("kvs misuse ok"), "{out}");
    }
}

#[test]
fn c_example_reports_a_missing_model_file() {
    let Some(cc) = cc() else { return };
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("barrier");
    let src = repo_root().join("examples/c/barrier.c");
    assert!(compile(&cc, &[], &src, &exe, &[]).status.success());
    let run = run(&exe, &["/nonexistent/model.json"]);
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("/nonexistent/model.json"), "{err}");
}

/// smelt.h is strict C99 and usable from C++ (extern "C"): a small program using the
/// model and tree functions builds with `-std=c99 -pedantic -Werror` and as C++, and
/// runs against libsmelt.
#[test]
fn header_is_c99_and_cpp_clean() {
    let src = r#"
#include <smelt.h>
#include <stdio.h>
int main(void) {
    smelt_model *m = 0;
    smelt_tree *t = 0;
    size_t n = 0;
    double ns = 0;
    if (smelt_model_synthetic(2, 2, 40.0, 60.0, 3.0, &m) != SMELT_OK) return 1;
    if (smelt_tree_build(m, "knomial:2", 0, 0, -1, &t) != SMELT_OK) return 2;
    if (smelt_tree_size(t, &n) != SMELT_OK || n != 4) return 3;
    if (smelt_tree_predict(t, "barrier", &ns) != SMELT_OK || !(ns > 0)) return 4;
    if (smelt_tree_predict(t, "gossip", &ns) != SMELT_ERR_INVALID_ARGUMENT) return 5;
    printf("ok %s %zu\n", smelt_version(), n);
    smelt_tree_free(t);
    smelt_model_free(m);
    return 0;
}
"#;
    let dir = tempfile::tempdir().unwrap();
    let mut built = 0;
    for (compiler, file, flags) in [
        (
            "cc",
            "t.c",
            vec!["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror"],
        ),
        ("c++", "t.cpp", vec!["-Wall", "-Wextra", "-Werror"]),
    ] {
        if !Command::new(compiler)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            continue;
        }
        let path = dir.path().join(file);
        std::fs::write(&path, src).unwrap();
        let exe = dir.path().join(format!("{file}.exe"));
        let out = compile(compiler, &flags, &path, &exe, &[]);
        assert!(
            out.status.success(),
            "{compiler} {file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let run = run(&exe, &[]);
        assert!(run.status.success(), "{file} exited with {}", run.status);
        assert!(String::from_utf8_lossy(&run.stdout).starts_with("ok "));
        built += 1;
    }
    if built == 0 {
        common::skip::tool_missing("a C or C++ compiler");
    }
}

/// `tests/c/misuse.c`: double free, use after free, a run body's handle after the body
/// returned, one member handle on two threads (BUSY), and a member whose broadcast len
/// differs from the root's (every member fails within 5 s with one error) — all from C.
#[test]
fn c_handle_and_argument_misuse_are_errors() {
    let src = repo_root().join("crates/smelt-capi/tests/c/misuse.c");
    if let Some(out) = build_and_run_file(&src, &[]) {
        assert!(out.contains("misuse ok"), "{out}");
    }
}

/// `tests/c/auto_nontree.c`: a group over an `auto` tree (algo NULL) runs the
/// allreduce by recursive doubling when `SMELT_TUNE` picks it (5 members: results
/// right, and a non-commutative operator's result is in recursive doubling's order).
#[test]
fn c_auto_group_runs_the_non_tree_algorithms() {
    let Some(cc) = cc() else {
        return;
    };
    let src = repo_root().join("crates/smelt-capi/tests/c/auto_nontree.c");
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("auto_nontree");
    let out = compile(
        &cc,
        &["-std=c11", "-Wall", "-Werror"],
        &src,
        &exe,
        &["-lpthread"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe)
        .env("LD_LIBRARY_PATH", common::lib_dir())
        .env("XDG_CACHE_HOME", dir.path())
        .env(
            "SMELT_TUNE",
            "barrier=dissemination;allreduce=recursive-doubling",
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && stdout.contains("auto_nontree ok"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
}
