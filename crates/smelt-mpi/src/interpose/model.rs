//! The machine model a node's trees are built from: `SMELT_MPI_MODEL` (a smelt model
//! file), else this host's cached probe (`smelt probe --cache`), else a uniform model.
//!
//! Only a node's leader builds the node's trees (the other ranks join them from the
//! shared memory the leader made), so the leader alone loads the model and decides;
//! every rank of the node runs the same trees by construction. A model that cannot be
//! used never stops the program: the trees fall back to the uniform model, and
//! `SMELT_MPI_VERBOSE=1` says why.

use smelt_model::{format_cpu_list, Model};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// Where the model came from.
enum Source {
    /// `SMELT_MPI_MODEL=FILE`.
    Env(PathBuf),
    /// This host's cached probe.
    Cache(PathBuf),
}

impl Source {
    fn describe(&self) -> String {
        match self {
            Source::Env(p) => format!("SMELT_MPI_MODEL={}", p.display()),
            Source::Cache(p) => format!("the cached probe of this host {}", p.display()),
        }
    }
}

/// The process's model, loaded once (by the first leader set-up that needs it).
enum Loaded {
    /// No model to use: why, for the summary.
    None(String),
    /// The model could not be read or is invalid.
    Failed(Source, String),
    Ready(Source, Box<Model>),
}

fn loaded(setting: Option<&str>) -> &'static Loaded {
    static L: OnceLock<Loaded> = OnceLock::new();
    L.get_or_init(|| {
        let src = match setting {
            Some(f) => Source::Env(PathBuf::from(f)),
            None => match smelt_model::host::cached_model_path() {
                // Anything there (a FIFO, a device, a dangling link) is the cache: the
                // bounded reader refuses what is not a regular file, with the reason.
                Some(p) if std::fs::symlink_metadata(&p).is_ok() => Source::Cache(p),
                Some(p) => {
                    return Loaded::None(format!(
                        "no SMELT_MPI_MODEL, no cached probe of this host ({} absent; `smelt probe --cache` makes it)",
                        p.display()
                    ))
                }
                None => {
                    return Loaded::None(
                        "no SMELT_MPI_MODEL, no cache directory (XDG_CACHE_HOME, HOME)".into(),
                    )
                }
            },
        };
        let path = match &src {
            Source::Env(p) | Source::Cache(p) => p.clone(),
        };
        match Model::load(&path) {
            Ok(m) => Loaded::Ready(src, Box::new(m)),
            Err(e) => Loaded::Failed(src, e.to_string()),
        }
    })
}

/// Prints `msg` once per process under `SMELT_MPI_VERBOSE=1`.
fn warn_once(verbose: bool, msg: &str) {
    static SAID: Mutex<Vec<String>> = Mutex::new(Vec::new());
    if !verbose {
        return;
    }
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if !said.iter().any(|s| s == msg) {
        super::stats::say(msg);
        said.push(msg.to_string());
    }
}

/// The model of one node's trees, decided by its leader.
pub struct NodeModel {
    /// The model restricted to the node's CPUs, position `i` being local rank `i`'s CPU;
    /// `None`: the uniform model.
    pub model: Option<Model>,
    /// For the summary: where the model comes from, or why it is uniform.
    pub describe: String,
}

/// The model for a node whose local rank `i` is bound to `cpus[i]` (`None`: not bound
/// to exactly one CPU). `setting` is `SMELT_MPI_MODEL`.
pub fn for_node(cpus: &[Option<u32>], setting: Option<&str>, verbose: bool) -> NodeModel {
    let uniform = |why: String| NodeModel {
        model: None,
        describe: format!("uniform: {why}"),
    };
    let (src, model) = match loaded(setting) {
        Loaded::None(why) => return uniform(why.clone()),
        Loaded::Failed(src, e) => {
            let why = format!("{} could not be loaded: {e}", src.describe());
            warn_once(verbose, &format!("{why}; trees come from a uniform model"));
            return uniform(why);
        }
        Loaded::Ready(src, m) => (src, m),
    };
    let mut bound: Vec<u32> = cpus.iter().flatten().copied().collect();
    bound.sort_unstable();
    bound.dedup();
    if bound.len() != cpus.len() {
        let shown: Vec<String> = cpus
            .iter()
            .map(|c| c.map_or("-".into(), |c| c.to_string()))
            .collect();
        return uniform(format!(
            "the node's ranks are not each bound to a CPU of their own (CPUs by local rank: {}), so {} is not used; bind them (mpirun --bind-to core)",
            shown.join(" "),
            src.describe()
        ));
    }
    let cpus: Vec<u32> = cpus.iter().flatten().copied().collect();
    match model.restrict(&cpus) {
        Ok(m) => NodeModel {
            model: Some(m),
            describe: format!(
                "{} (host {}, {}), CPUs {} by local rank",
                src.describe(),
                model.provenance.host,
                model.provenance.method,
                cpus.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        },
        Err(e) => {
            let why = format!(
                "{} does not fit the node's CPUs {}: {e}",
                src.describe(),
                format_cpu_list(&bound)
            );
            warn_once(verbose, &format!("{why}; trees come from a uniform model"));
            uniform(why)
        }
    }
}

/// Runs `f` over the model of a node of `n` ranks (local rank `i` is position `i`):
/// `model` where it has `n` CPUs, else a uniform model.
pub fn with_node_model<R>(
    n: usize,
    model: Option<&Model>,
    f: impl FnOnce(&Model, &[usize]) -> R,
) -> R {
    let uniform;
    let model = match model {
        Some(m) if m.len() == n => m,
        _ => {
            uniform = smelt_model::synthetic(1, n, 1.0, 1.0, 1.0);
            &uniform
        }
    };
    let members: Vec<usize> = (0..n).collect();
    f(model, &members)
}

/// Under `SMELT_MPI_TREE=auto`: the algorithm table of a node of `n` ranks (local rank
/// `i` is position `i` of `model`, else a uniform model): `SMELT_TUNE`, this host's
/// tuning file for a group of `n`, else the prediction, as `smelt launch` and thread
/// groups resolve it. `None` (said under `SMELT_MPI_VERBOSE=1`) when it cannot be
/// resolved: the node then runs every collective on its tree.
pub fn auto_algorithms(
    n: usize,
    model: Option<&Model>,
    verbose: bool,
) -> Option<std::sync::Arc<smelt_tree::tuning::AlgorithmTable>> {
    match with_node_model(n, model, smelt_tree::tuning::auto_table) {
        Ok((t, refused)) => {
            if let Some(why) = refused {
                warn_once(verbose, &why);
            }
            Some(std::sync::Arc::new(t))
        }
        Err(e) => {
            warn_once(verbose, &format!("auto algorithms: {e}; trees only"));
            None
        }
    }
}

/// The tree of a node of `n` ranks under `SMELT_MPI_TREE=auto` (the default): the
/// choice of this host's tuning file (`smelt tune`; the per-host cache path the CLI
/// writes, `smelt_model::host::cached_tune_path`) for a one-line broadcast over a group
/// of `n` (the rules of the largest tuned group size not above it), checked against
/// the node's `model` when there is one (else by host name). Without a usable file
/// the interposer's default tree, `adaptive-sorted`: silently when there is no file,
/// said under `SMELT_MPI_VERBOSE=1` when one was refused or has no broadcast rules.
/// Returns the tree and where it came from, for the summary.
pub fn auto_tree(n: usize, model: Option<&Model>, verbose: bool) -> (smelt_tree::Topology, String) {
    use smelt_tree::tuning::{self, SyncMode};
    let default = smelt_tree::Topology::AdaptiveSorted;
    let host = smelt_model::host::host_name();
    match tuning::host_file_of(&host, model) {
        Ok(Some((path, f))) => {
            let choice = f
                .lookup(
                    SyncMode::Loose,
                    smelt_tree::Op::Broadcast,
                    n,
                    tuning::LINE_BYTES,
                )
                .and_then(|c| c.tree());
            match choice {
                Some(t) if t != smelt_tree::Topology::Auto => {
                    (t, format!("auto: tuning file {}", path.display()))
                }
                _ => {
                    let why = format!("tuning file {} has no broadcast rules", path.display());
                    warn_once(verbose, &format!("{why}; tree {default}"));
                    (default, format!("auto: {why}; default"))
                }
            }
        }
        Ok(None) => (
            default,
            "auto: no tuning file of this host (smelt tune); default".to_string(),
        ),
        Err(why) => {
            warn_once(verbose, &format!("{why}; tree {default}"));
            (default, format!("auto: {why}; default"))
        }
    }
}
