//! What a test does when an outside tool it needs (mpirun, a C or Fortran compiler,
//! Open MPI's mpicc) is missing: under CI (`CI=true`, as CI runs `.ci/run`) the test
//! fails, naming the tool, so no test passes by skipping there; elsewhere it says on
//! stderr why it is skipped and the caller returns. Shared by the test crates through
//! `#[path]`.
#![allow(dead_code)]

/// Whether this run is CI's: `CI` set to `true` or `1`.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Reports that `tool` is missing for `test`: panics under CI, else says it skips.
pub fn tool_missing_for(tool: &str, test: &str) {
    if under_ci() {
        panic!(
            "{test}: {tool} is missing; under CI=true a test cannot pass by skipping \
             (scripts/deps.sh installs it)"
        );
    }
    eprintln!("{test}: skipped: {tool} is missing (scripts/deps.sh installs it)");
}

/// [`tool_missing_for`] the running test (the test harness names each test's thread
/// after the test).
pub fn tool_missing(tool: &str) {
    let t = std::thread::current();
    tool_missing_for(tool, t.name().unwrap_or("a test"));
}
