//! The layers hold (issue 23): the services made from a world (active messages,
//! aggregation, global arrays, tasks, the store, offload lanes) depend on the mesh layer and the
//! transport, never on the tree, model, probe or runtime crates, nor on hwloc or
//! plotting. What `cargo tree -p CRATE -e normal` shows, read from the workspace's
//! manifests (normal dependencies of a default build: optional ones are left out).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The workspace's `crates` folder.
fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates/")
        .to_path_buf()
}

/// The normal, non-optional dependencies named in a manifest.
fn dependencies(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut normal = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            // [dependencies] and [target.'cfg(..)'.dependencies]; not dev or build.
            normal = line.ends_with("dependencies]")
                && !line.contains("dev-dependencies")
                && !line.contains("build-dependencies");
            continue;
        }
        if !normal || line.is_empty() || line.starts_with('#') || line.contains("optional = true") {
            continue;
        }
        let name: String = line
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        if !name.is_empty() {
            out.push(name);
        }
    }
    out
}

/// Every dependency `krate` reaches (through the workspace's crates), itself excluded.
fn closure(krate: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![krate.to_string()];
    while let Some(c) = todo.pop() {
        let path = crates_dir().join(&c).join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue; // not a workspace crate
        };
        for d in dependencies(&text) {
            if seen.insert(d.clone()) {
                todo.push(d);
            }
        }
    }
    seen
}

const FORBIDDEN: [&str; 8] = [
    "smelt-tree",
    "smelt-model",
    "smelt-probe",
    "smelt-runtime",
    "smelt-peers",
    "smelt-bench",
    "hwlocality",
    "plotters",
];

#[test]
fn the_services_depend_on_the_mesh_layer_only() {
    for krate in [
        "smelt-am",
        "smelt-agg",
        "smelt-global",
        "smelt-tasks",
        "smelt-kvs",
        "smelt-offload",
    ] {
        let deps = closure(krate);
        assert!(
            deps.contains("smelt-mesh"),
            "{krate} is built on the mesh layer: {deps:?}"
        );
        let bad: Vec<&&str> = FORBIDDEN.iter().filter(|f| deps.contains(**f)).collect();
        assert!(bad.is_empty(), "{krate} depends on {bad:?} (all: {deps:?})");
    }
}

/// The runtime (collectives over a mesh) is handed a ready tree and algorithm table
/// (`smelt-plan`): it compiles no model crate, and no tree, probe, hwloc or plotting
/// crate either.
#[test]
fn the_runtime_depends_on_no_model_or_tree_crate() {
    let deps = closure("smelt-runtime");
    assert!(
        deps.contains("smelt-plan") && deps.contains("smelt-mesh"),
        "{deps:?}"
    );
    for f in [
        "smelt-tree",
        "smelt-model",
        "smelt-probe",
        "hwlocality",
        "plotters",
    ] {
        assert!(
            !deps.contains(f),
            "smelt-runtime depends on {f} (all: {deps:?})"
        );
    }
}

#[test]
fn the_manifest_reader_sees_what_it_must() {
    let m = "[package]\nname = \"x\"\n[dependencies]\nsmelt-mesh.workspace = true\n\
             hwlocality = { workspace = true, optional = true }\nserde = \"1\"\n\
             [target.'cfg(unix)'.dependencies]\nlibc = \"0.2\"\n\
             [dev-dependencies]\nsmelt-tree.workspace = true\n";
    assert_eq!(dependencies(m), ["smelt-mesh", "serde", "libc"]);
    // A crate of the workspace reaches what its own dependencies reach.
    assert!(closure("smelt-agg").contains("smelt-transport"));
    assert!(closure("smelt-world").contains("smelt-model"));
}
