//! What the CLI test files share: running the built `smelt` binary.
#![allow(dead_code)]

use std::process::{Command, Output};

/// Runs `smelt ARGS` to completion.
pub fn smelt(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smelt"))
        .args(args)
        .output()
        .expect("run smelt")
}

/// Runs `smelt ARGS`, which must succeed; its standard output.
pub fn ok(args: &[&str]) -> String {
    let o = smelt(args);
    assert!(
        o.status.success(),
        "smelt {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}
