//! The C API's fork-join tasks (`smelt_task_run/spawn/sync`): `tests/c/tasks.c` built
//! against libsmelt and run (fib on 1, 2 and 16 workers, a parallel sum, implicit sync,
//! misuse errors).

mod common;
use common::{cc, compile, repo_root, run};

#[test]
fn c_tasks_spawn_sync_and_misuse() {
    let Some(cc) = cc() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("tasks");
    let src = repo_root().join("crates/smelt-capi/tests/c/tasks.c");
    let out = compile(
        &cc,
        &["-std=c11", "-Wall", "-Werror"],
        &src,
        &exe,
        &["-lpthread"],
    );
    assert!(
        out.status.success(),
        "{cc} failed on tasks.c:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = run(&exe, &[]);
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert!(
        r.status.success(),
        "tasks.c failed ({}):\n{stdout}\n{}",
        r.status,
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(stdout.contains("tasks ok"), "{stdout}");
}
