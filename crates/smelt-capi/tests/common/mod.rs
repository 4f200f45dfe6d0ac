//! Shared by the tests that build programs against libsmelt (C, Fortran).

use std::path::{Path, PathBuf};

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory holding libsmelt.so: the test exe is `<target>/<profile>/deps/x-hash`.
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let profile = deps.parent().unwrap();
    for d in [profile, deps] {
        if d.join("libsmelt.so").exists() || d.join("libsmelt.a").exists() {
            return d.to_path_buf();
        }
    }
    panic!("libsmelt.so not found next to {}", exe.display());
}
