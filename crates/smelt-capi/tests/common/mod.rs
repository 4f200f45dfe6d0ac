//! Shared by the tests that build programs against libsmelt (C, Fortran).

// Each test crate uses some of these.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "../../../../tests/support/skip.rs"]
pub mod skip;

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory holding libsmelt.so: the test exe is `<target>/<profile>/deps/x-hash`.
/// `cargo test` refreshes `deps/libsmelt.so` but not the copy `cargo build` put in
/// `<profile>/`, so the newer of the two is taken.
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let profile = deps.parent().unwrap();
    let modified = |d: &Path| {
        ["libsmelt.so", "libsmelt.a"]
            .iter()
            .filter_map(|f| d.join(f).metadata().and_then(|m| m.modified()).ok())
            .max()
    };
    [profile, deps]
        .into_iter()
        .filter_map(|d| Some((modified(d)?, d)))
        .max_by_key(|&(t, _)| t)
        .map(|(_, d)| d.to_path_buf())
        .unwrap_or_else(|| panic!("libsmelt.so not found next to {}", exe.display()))
}

/// The first C compiler found (cc, gcc, clang).
pub fn cc() -> Option<String> {
    let found = ["cc", "gcc", "clang"].into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        skip::tool_missing("a C compiler (cc, gcc or clang)");
    }
    found.map(String::from)
}

/// Compiles the C or C++ file `src` into `exe` with `compiler`: `flags`, smelt.h's
/// directory, `src`, then libsmelt and `libs`.
pub fn compile(compiler: &str, flags: &[&str], src: &Path, exe: &Path, libs: &[&str]) -> Output {
    Command::new(compiler)
        .args(flags)
        .arg("-I")
        .arg(repo_root().join("crates/smelt-capi/include"))
        .arg(src)
        .arg("-L")
        .arg(lib_dir())
        .arg("-lsmelt")
        .args(libs)
        .arg("-o")
        .arg(exe)
        .output()
        .unwrap()
}

/// Compiles the Fortran module `include/smelt.f90` and `examples/fortran/<example>`
/// with `compiler` and `flags` (the module's .mod file goes to `dir`) into `dir/<exe>`,
/// linked with libsmelt; fails the test with the compiler's errors.
pub fn compile_fortran(
    compiler: &str,
    flags: &[&str],
    example: &str,
    dir: &Path,
    exe: &str,
) -> PathBuf {
    let exe = dir.join(exe);
    let out = Command::new(compiler)
        .args(flags)
        .arg("-J")
        .arg(dir)
        .arg(repo_root().join("crates/smelt-capi/include/smelt.f90"))
        .arg(repo_root().join("examples/fortran").join(example))
        .arg("-L")
        .arg(lib_dir())
        .arg("-lsmelt")
        .arg("-o")
        .arg(&exe)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{compiler} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs `exe` with `args`, finding libsmelt.so.
pub fn run(exe: &Path, args: &[&str]) -> Output {
    Command::new(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .output()
        .unwrap()
}

/// Compiles the C file `src` (C11, `-Wall -Werror`) and runs it with `args`; asserts
/// that it exits 0 and returns stdout (None without a C compiler).
pub fn build_and_run_file(src: &Path, args: &[&str]) -> Option<String> {
    let name = src.file_stem().unwrap().to_string_lossy().into_owned();
    let cc = cc()?;
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join(&name);
    let out = compile(
        &cc,
        &["-std=c11", "-Wall", "-Werror"],
        src,
        &exe,
        &["-lpthread"],
    );
    assert!(
        out.status.success(),
        "{cc} failed on {name}.c:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = run(&exe, args);
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{name} failed ({}):\n{stdout}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    Some(stdout)
}

/// The `smelt` binary of this build (`<target>/<profile>/smelt`, beside libsmelt),
/// built with `cargo build -p smelt-cli` first if it is not there.
pub fn smelt_bin() -> PathBuf {
    let lib = lib_dir();
    // lib_dir is <target>/<profile> (or its deps/).
    let profile_dir = if lib.ends_with("deps") {
        lib.parent().unwrap().to_path_buf()
    } else {
        lib
    };
    let bin = profile_dir.join("smelt");
    if !bin.exists() {
        let target_dir = profile_dir.parent().unwrap();
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "-p", "smelt-cli", "--bin", "smelt", "--target-dir"])
            .arg(target_dir);
        match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => {}
            Some("release") => {
                cmd.arg("--release");
            }
            Some(other) => {
                cmd.args(["--profile", other]);
            }
        }
        let st = cmd.status().unwrap();
        assert!(st.success(), "cargo build -p smelt-cli failed");
    }
    assert!(bin.exists(), "no smelt binary at {}", bin.display());
    bin
}
