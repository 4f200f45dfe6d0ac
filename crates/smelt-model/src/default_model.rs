//! The model a command or library entry point uses when it is given none, the same
//! everywhere: the explicit file (an option such as `--model`, or a variable such as
//! `SMELT_MPI_MODEL`), else [`MODEL_ENV`] (`SMELT_MODEL`), else this host's cached
//! probe (`smelt probe --cache`, [`crate::host::cached_model_path`]), else a uniform
//! model over the CPUs asked for, with a one-line notice on stderr.
//!
//! ```no_run
//! let (model, source) = smelt_model::default_model::default_model(None, None)?;
//! eprintln!("model: {source}");
//! # Ok::<(), smelt_model::ModelError>(())
//! ```

use crate::{cost_matrix, format_cpu_list, parse_cpu_list, Model, ModelError};
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

/// The variable that names a model file for every command and library entry point
/// not given one explicitly.
pub const MODEL_ENV: &str = smelt_settings::MODEL;

/// Set (to anything but `0`), [`default_model`] says on stderr which model it used
/// (what `--verbose` does for the commands that have it).
pub const VERBOSE_ENV: &str = smelt_settings::VERBOSE;

/// The cost of every send and receive of the uniform model, ns.
pub const UNIFORM_COST_NS: f64 = 100.0;

/// Where the default model came from.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelSource {
    /// The file the caller was given (an option, or its own variable).
    Explicit(PathBuf),
    /// `SMELT_MODEL=FILE`.
    Env(PathBuf),
    /// This host's cached probe (`smelt probe --cache`).
    Cache(PathBuf),
    /// A uniform model over the CPUs asked for; why (no cache, or why it was not used).
    Uniform(String),
}

impl ModelSource {
    /// True for the uniform model (nothing measured about this machine).
    pub fn is_uniform(&self) -> bool {
        matches!(self, ModelSource::Uniform(_))
    }

    /// Short name: `explicit`, `env`, `cache` or `uniform` (JSON reports).
    pub fn kind(&self) -> &'static str {
        match self {
            ModelSource::Explicit(_) => "explicit",
            ModelSource::Env(_) => "env",
            ModelSource::Cache(_) => "cache",
            ModelSource::Uniform(_) => "uniform",
        }
    }

    /// The one-line notice printed when the model is uniform (`None` otherwise).
    pub fn notice(&self) -> Option<String> {
        match self {
            ModelSource::Uniform(why) => Some(format!(
                "notice: no model of this machine ({why}); using a uniform model: run 'smelt probe --cache' (or 'smelt run') to measure it"
            )),
            _ => None,
        }
    }
}

impl fmt::Display for ModelSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelSource::Explicit(p) => write!(f, "{}", p.display()),
            ModelSource::Env(p) => write!(f, "{MODEL_ENV}={}", p.display()),
            ModelSource::Cache(p) => write!(f, "this host's cached probe {}", p.display()),
            ModelSource::Uniform(why) => write!(f, "a uniform model ({why})"),
        }
    }
}

/// The default model ([`resolve`]), printing the uniform model's one-line notice on
/// stderr when it comes to that, and with [`VERBOSE_ENV`] set (not `0`) a line
/// `smelt: model: SOURCE` whichever source it was. `explicit`: the file the caller was given; `cpus`:
/// the CPUs the caller needs (a cached model that lacks one of them is not used; the
/// uniform model is over them), `None`: the CPUs this process may use.
///
/// An explicit or `SMELT_MODEL` file that cannot be read or is invalid is an error;
/// a cached model that cannot be used is passed over (the notice says why).
pub fn default_model(
    explicit: Option<&Path>,
    cpus: Option<&[u32]>,
) -> Result<(Model, ModelSource), ModelError> {
    let r = resolve(explicit, cpus)?;
    if let Some(n) = r.1.notice() {
        eprintln!("{}", crate::text::escape_line(&n));
    }
    // Anything but off (0, no, false, off) asks for the line, as documented.
    if smelt_settings::raw(VERBOSE_ENV).is_some()
        && smelt_settings::flag(VERBOSE_ENV) != Ok(Some(false))
    {
        eprintln!(
            "smelt: model: {}",
            crate::text::escape_line(&r.1.to_string())
        );
    }
    Ok(r)
}

/// [`default_model`] without the notice, for this process's environment
/// (`SMELT_MODEL`, `XDG_CACHE_HOME`, `HOME`, host name).
pub fn resolve(
    explicit: Option<&Path>,
    cpus: Option<&[u32]>,
) -> Result<(Model, ModelSource), ModelError> {
    resolve_in(
        explicit,
        smelt_settings::raw(MODEL_ENV),
        crate::host::cached_model_path(),
        cpus,
    )
}

/// [`resolve`] with the variable's value and the cache path given.
pub fn resolve_in(
    explicit: Option<&Path>,
    env: Option<OsString>,
    cache: Option<PathBuf>,
    cpus: Option<&[u32]>,
) -> Result<(Model, ModelSource), ModelError> {
    if let Some(p) = explicit {
        return Ok((Model::load(p)?, ModelSource::Explicit(p.to_path_buf())));
    }
    if let Some(v) = env.filter(|v| !v.is_empty()) {
        let p = PathBuf::from(v);
        let m = Model::load(&p).map_err(|e| ModelError::Invalid {
            path: None,
            why: format!("{MODEL_ENV}: {e}"),
        })?;
        return Ok((m, ModelSource::Env(p)));
    }
    let why = match cache {
        None => "no cache directory: neither XDG_CACHE_HOME nor HOME is set".to_string(),
        // Anything there (a FIFO, a device, a dangling link) is the cache: the bounded
        // reader refuses what is not a regular file, with the reason.
        Some(p) if std::fs::symlink_metadata(&p).is_err() => {
            format!("no cached probe of this host: {} is absent", p.display())
        }
        Some(p) => match Model::load(&p) {
            Err(e) => format!("the cached probe could not be used: {e}"),
            Ok(m) => match cpus.and_then(|c| c.iter().find(|c| !m.cpus.contains(c))) {
                Some(c) => format!(
                    "the cached probe {} has CPUs {}, not CPU {c}",
                    p.display(),
                    format_cpu_list(&m.cpus)
                ),
                None => return Ok((m, ModelSource::Cache(p))),
            },
        },
    };
    let cpus = match cpus {
        Some(c) => c.to_vec(),
        None => allowed_cpus()?,
    };
    Ok((uniform(&cpus)?, ModelSource::Uniform(why)))
}

/// A model of `cpus` (this host) in which every send and receive costs
/// [`UNIFORM_COST_NS`]: machine-aware trees then have nothing to be aware of.
pub fn uniform(cpus: &[u32]) -> Result<Model, ModelError> {
    if cpus.is_empty() {
        return Err(ModelError::Invalid {
            path: None,
            why: "a uniform model needs at least one CPU".into(),
        });
    }
    let n = cpus.len();
    let mut m = Model::new(
        cpus.to_vec(),
        cost_matrix(n, |_, _| UNIFORM_COST_NS),
        cost_matrix(n, |_, _| UNIFORM_COST_NS),
    );
    m.provenance.host = crate::host::host_name();
    m.provenance.cpu_model = crate::host::cpu_model_from_proc().unwrap_or_default();
    m.provenance.method = "uniform".into();
    m.provenance.date = crate::host::now_rfc3339();
    m.validate()?;
    Ok(m)
}

/// The CPUs this thread may run on (`Cpus_allowed_list` of `/proc/thread-self/status`,
/// else of `/proc/self/status`).
pub fn allowed_cpus() -> Result<Vec<u32>, ModelError> {
    for p in ["/proc/thread-self/status", "/proc/self/status"] {
        let Ok(text) = std::fs::read_to_string(p) else {
            continue;
        };
        if let Some(list) = text
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        {
            return parse_cpu_list(list.trim());
        }
    }
    Err(ModelError::Invalid {
        path: None,
        why: "cannot tell which CPUs this process may use (/proc/self/status has no Cpus_allowed_list)".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, m: &Model) -> PathBuf {
        let p = dir.join(name);
        m.save(&p).unwrap();
        p
    }

    #[test]
    fn explicit_then_env_then_cache_then_uniform() {
        let d = tempfile::tempdir().unwrap();
        let mut a = crate::synthetic(1, 2, 10.0, 10.0, 1.0);
        a.provenance.host = "a".into();
        let mut b = a.clone();
        b.provenance.host = "b".into();
        let mut c = a.clone();
        c.provenance.host = "c".into();
        let (pa, pb, pc) = (
            write(d.path(), "a.json", &a),
            write(d.path(), "b.json", &b),
            write(d.path(), "c.json", &c),
        );
        let host = |r: (Model, ModelSource)| (r.0.provenance.host, r.1.kind());
        let env = || Some(OsString::from(pb.as_os_str()));
        let r = resolve_in(Some(&pa), env(), Some(pc.clone()), None).unwrap();
        assert_eq!(host(r), ("a".into(), "explicit"));
        let r = resolve_in(None, env(), Some(pc.clone()), None).unwrap();
        assert_eq!(host(r), ("b".into(), "env"));
        let r = resolve_in(None, Some("".into()), Some(pc.clone()), Some(&[0, 1])).unwrap();
        assert_eq!(host(r), ("c".into(), "cache"));
        // The cache lacks CPU 5: uniform over the CPUs asked for, saying why.
        let (m, s) = resolve_in(None, None, Some(pc.clone()), Some(&[0, 5])).unwrap();
        assert_eq!(m.cpus, vec![0, 5]);
        assert_eq!(m.provenance.method, "uniform");
        assert!(s.notice().unwrap().contains("not CPU 5"), "{s}");
        let (_, s) = resolve_in(None, None, Some(d.path().join("none.json")), Some(&[0])).unwrap();
        assert!(
            s.is_uniform() && s.to_string().contains("none.json is absent"),
            "{s}"
        );
        let (_, s) = resolve_in(None, None, None, Some(&[0])).unwrap();
        assert!(s.to_string().contains("no cache directory"), "{s}");
    }

    #[test]
    fn bad_files_are_errors_but_a_bad_cache_is_passed_over() {
        let d = tempfile::tempdir().unwrap();
        let bad = d.path().join("bad.json");
        std::fs::write(&bad, "{not json").unwrap();
        assert!(resolve_in(Some(&bad), None, None, Some(&[0])).is_err());
        let e = resolve_in(None, Some(bad.clone().into()), None, Some(&[0])).unwrap_err();
        assert!(e.to_string().contains(MODEL_ENV), "{e}");
        let (m, s) = resolve_in(None, None, Some(bad), Some(&[0, 1])).unwrap();
        assert_eq!(m.len(), 2);
        assert!(s.to_string().contains("could not be used"), "{s}");
    }

    #[test]
    fn uniform_model_is_valid_and_this_host() {
        let m = uniform(&[3, 1]).unwrap();
        assert_eq!(m.cpus, vec![3, 1]);
        assert_eq!(m.send[0][1], UNIFORM_COST_NS);
        assert_eq!(m.provenance.host, crate::host::host_name());
        assert!(uniform(&[]).is_err());
        assert!(!allowed_cpus().unwrap().is_empty());
    }
}
