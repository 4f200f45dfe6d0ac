//! The C API's fork-join tasks (`smelt_task_run/spawn/sync`): `tests/c/tasks.c` built
//! against libsmelt and run (fib on 1, 2 and 16 workers, a parallel sum, implicit sync,
//! misuse errors).

mod common;
use common::{build_and_run_file, repo_root};

#[test]
fn c_tasks_spawn_sync_and_misuse() {
    let src = repo_root().join("crates/smelt-capi/tests/c/tasks.c");
    if let Some(stdout) = build_and_run_file(&src, &[]) {
        assert!(stdout.contains("tasks ok"), "{stdout}");
    }
}
