//! Every `SMELT_*` environment variable of smelt, in one list ([`ALL`]): its name,
//! what kind of value it takes, its default, its range and a one-line description;
//! and the only functions in the workspace that read them ([`text`], [`path`],
//! [`flag`], [`count`], [`bytes`], [`seconds`], [`is_set`]).
//!
//! Every reader returns `Err` with a message that names the variable and says what was
//! expected, so a garbage value is never silently ignored; a caller decides whether
//! that is an error (the `smelt` command: one `error:` line) or a documented fallback
//! with a warning (the MPI interposer, which must never stop a program). An unset or
//! empty variable is "not set" (`Ok(None)`), as an empty `PATH` entry would be.
//!
//! `smelt info` prints [`report`]: every setting with its current value and where
//! that came from, like `ompi_info --all` or `ucx_info -c`.
//!
//! Written here rather than with a configuration crate: the settings are a fixed
//! list of plain environment variables read in libraries (and inside an `LD_PRELOAD`
//! interposer), where a dependency-free, allocation-light reader is what fits.

#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

/// What a setting's value is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// `1/0`, `on/off`, `yes/no`, `true/false`.
    Flag,
    /// A whole number in `min..=max`.
    Count {
        /// Smallest value accepted.
        min: u64,
        /// Largest value accepted.
        max: u64,
    },
    /// A number of bytes, optionally with a `K`, `M` or `G` suffix (powers of 1024).
    Bytes,
    /// Seconds (a decimal number) in `0..=max`.
    Seconds {
        /// Largest value accepted.
        max: f64,
    },
    /// A file or directory.
    Path,
    /// Free text with a grammar of its own (see the setting's description).
    Text,
}

impl Kind {
    /// The kind in words, for listings and error messages.
    pub fn describe(&self) -> String {
        match self {
            Kind::Flag => "on/off".into(),
            Kind::Count { min, max } => format!("a whole number from {min} to {max}"),
            Kind::Bytes => "a number of bytes (e.g. 4096, 64K, 16M, 1G)".into(),
            Kind::Seconds { max } => format!("seconds from 0 to {max}"),
            Kind::Path => "a path".into(),
            Kind::Text => "text".into(),
        }
    }
}

/// Who sets a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// A user, to change what smelt does.
    User,
    /// Tests and benchmarks.
    Testing,
    /// `smelt launch`, the store or a test harness, for the processes it starts (a
    /// user does not set these).
    Launcher,
}

/// One `SMELT_*` variable.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// The variable's name.
    pub name: &'static str,
    /// What it takes.
    pub kind: Kind,
    /// Its default in words (`""`: none, the feature is off or derived).
    pub default: &'static str,
    /// Which part of smelt reads it.
    pub area: &'static str,
    /// Who sets it.
    pub audience: Audience,
    /// One line: what it does.
    pub doc: &'static str,
}

const fn user(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    area: &'static str,
    doc: &'static str,
) -> Setting {
    Setting {
        name,
        kind,
        default,
        area,
        audience: Audience::User,
        doc,
    }
}

const fn internal(
    name: &'static str,
    kind: Kind,
    area: &'static str,
    doc: &'static str,
) -> Setting {
    Setting {
        name,
        kind,
        default: "",
        area,
        audience: Audience::Launcher,
        doc,
    }
}

const U32_MAX: u64 = u32::MAX as u64;

// Names, each written once: the readers take these constants.
/// See [`ALL`].
pub const MAX_INPUT_BYTES: &str = "SMELT_MAX_INPUT_BYTES";
/// See [`ALL`].
pub const MODEL: &str = "SMELT_MODEL";
/// See [`ALL`].
pub const VERBOSE: &str = "SMELT_VERBOSE";
/// See [`ALL`].
pub const TUNE: &str = "SMELT_TUNE";
/// See [`ALL`].
pub const SHM_DIR: &str = "SMELT_SHM_DIR";
/// See [`ALL`].
pub const SHM_LIMIT: &str = "SMELT_SHM_LIMIT";
/// See [`ALL`].
pub const WORLD_ARENA: &str = "SMELT_WORLD_ARENA";
/// See [`ALL`].
pub const STRESS: &str = "SMELT_STRESS";
/// See [`ALL`].
pub const PROGRESS_SECS: &str = "SMELT_PROGRESS_SECS";
/// See [`ALL`].
pub const PEERS_DIR: &str = "SMELT_PEERS_DIR";
/// See [`ALL`].
pub const DOT_TIMEOUT: &str = "SMELT_DOT_TIMEOUT";
/// See [`ALL`].
pub const MPI_LIB: &str = "SMELT_MPI_LIB";
/// See [`ALL`].
pub const MPI: &str = "SMELT_MPI";
/// See [`ALL`].
pub const MPI_VERBOSE: &str = "SMELT_MPI_VERBOSE";
/// See [`ALL`].
pub const MPI_MAX_BYTES: &str = "SMELT_MPI_MAX_BYTES";
/// See [`ALL`].
pub const MPI_TIMEOUT: &str = "SMELT_MPI_TIMEOUT";
/// See [`ALL`].
pub const MPI_TREE: &str = "SMELT_MPI_TREE";
/// See [`ALL`].
pub const MPI_SETUP_AFTER: &str = "SMELT_MPI_SETUP_AFTER";
/// See [`ALL`].
pub const MPI_MODEL: &str = "SMELT_MPI_MODEL";
/// See [`ALL`].
pub const MPI_FORCE: &str = "SMELT_MPI_FORCE";
/// See [`ALL`].
pub const MPI_MEASURE: &str = "SMELT_MPI_MEASURE";
/// See [`ALL`].
pub const RANKS_PER_NODE: &str = "SMELT_RANKS_PER_NODE";
/// See [`ALL`].
pub const AM_TRANSPORT: &str = "SMELT_AM_TRANSPORT";
/// See [`ALL`].
pub const AM_MPI_IN_FLIGHT: &str = "SMELT_AM_MPI_IN_FLIGHT";
/// See [`ALL`].
pub const JOB: &str = "SMELT_JOB";
/// See [`ALL`].
pub const JOB_KEY: &str = "SMELT_JOB_KEY";
/// See [`ALL`].
pub const RANK: &str = "SMELT_RANK";
/// See [`ALL`].
pub const SIZE: &str = "SMELT_SIZE";
/// See [`ALL`].
pub const CPU: &str = "SMELT_CPU";
/// See [`ALL`].
pub const KVS_REPLICA: &str = "SMELT_KVS_REPLICA";
/// See [`ALL`].
pub const WAIT: &str = "SMELT_WAIT";
/// See [`ALL`].
pub const SIM_MACHINES: &str = "SMELT_SIM_MACHINES";

/// Every `SMELT_*` variable smelt reads.
pub const ALL: &[Setting] = &[
    user(MODEL, Kind::Path, "this host's cached probe, else a uniform model", "model",
        "the model file used where a command or library entry point is given none"),
    user(VERBOSE, Kind::Flag, "off", "model",
        "say which model (and whence) commands and libraries use"),
    user(MAX_INPUT_BYTES, Kind::Bytes, "64M", "files",
        "the largest file smelt reads (models, tuning files, tree files, histories)"),
    user(TUNE, Kind::Text, "", "tuning",
        "rules that override auto for one run: OP[:MIN-MAX][@MODE]=ALGO[/SEGMENT],... (docs/tune.md)"),
    user(SHM_DIR, Kind::Path, "/dev/shm", "transport",
        "where shared-memory segments of process jobs are made"),
    user(SHM_LIMIT, Kind::Bytes, "", "transport",
        "a cap on the free shared memory smelt sees (to test the space check)"),
    user(WORLD_ARENA, Kind::Bytes, "1G", "mesh",
        "the arena of a world's segment: room for every service's rings and regions (sparse: only what services carve takes memory)"),
    user(PEERS_DIR, Kind::Path, "$XDG_CACHE_HOME/smelt/peers", "bench",
        "where the C peers are compiled and kept (a bundle's prebuilt peers)"),
    user(DOT_TIMEOUT, Kind::Seconds { max: 86400.0 }, "30", "cli",
        "the time limit of one Graphviz run of smelt tree --format svg"),
    user(PROGRESS_SECS, Kind::Seconds { max: 86400.0 }, "10", "cli",
        "seconds between progress lines of long runs when stderr is not a terminal"),
    user(MPI_LIB, Kind::Path, "libsmelt_mpi.so next to smelt", "bench",
        "the interposer library smelt bench mpi preloads"),
    user(MPI, Kind::Flag, "on", "interposer",
        "off: the MPI interposer passes every call to MPI"),
    user(MPI_VERBOSE, Kind::Flag, "off", "interposer",
        "print the interposer's settings, choices and per-call summary"),
    user(MPI_MAX_BYTES, Kind::Count { min: 0, max: 1 << 30 }, "per operation (docs/mpi.md)", "interposer",
        "the largest message the interposer takes (larger ones go to MPI)"),
    user(MPI_TIMEOUT, Kind::Count { min: 0, max: 1 << 32 }, "3600", "interposer",
        "seconds the interposer waits for a live but absent peer"),
    user(MPI_TREE, Kind::Text, "auto", "interposer",
        "the tree inside each node (smelt tree --algo names)"),
    user(MPI_SETUP_AFTER, Kind::Count { min: 0, max: 1 << 32 }, "5", "interposer",
        "collectives a communicator passes to MPI before smelt sets it up"),
    user(MPI_MODEL, Kind::Path, "this host's cached probe", "interposer",
        "the model the interposer builds its trees from"),
    user(MPI_FORCE, Kind::Flag, "off", "interposer",
        "take every call smelt can, also where its path does not win (nodes of 1-2 ranks)"),
    user(MPI_MEASURE, Kind::Count { min: 0, max: 1024 }, "10", "interposer",
        "trial calls per path (smelt, MPI) before a communicator picks the faster for each call and size; 0: the cut-offs alone"),
    user(RANKS_PER_NODE, Kind::Count { min: 0, max: 1 << 20 }, "0 (real nodes)", "mpi",
        "split each host's MPI ranks into emulated nodes of this many consecutive ranks"),
    user(AM_TRANSPORT, Kind::Text, "shm", "active messages",
        "mpi: every active message over MPI (each rank its own node); shm: nodes share memory"),
    user(AM_MPI_IN_FLIGHT, Kind::Count { min: 1, max: 1 << 20 }, "64", "active messages",
        "the most MPI sends in flight per endpoint"),
    Setting {
        name: STRESS,
        kind: Kind::Count { min: 1, max: 1_000_000 },
        default: "1",
        area: "tests",
        audience: Audience::Testing,
        doc: "the scale factor of stress and soak tests",
    },
    Setting {
        name: WAIT,
        kind: Kind::Text,
        default: "",
        area: "examples",
        audience: Audience::Testing,
        doc: "spin,yield,park_us: the wait policy of examples/quick_bench (for tuning)",
    },
    Setting {
        name: SIM_MACHINES,
        kind: Kind::Text,
        default: "",
        area: "tests",
        audience: Audience::Testing,
        doc: "more machine directories (DIR:DIR...) for the store simulator's tests",
    },
    internal(JOB, Kind::Path, "launch", "the shared-memory segment of the job a process joins"),
    internal(JOB_KEY, Kind::Text, "launch", "the job's key (checked against the segment's)"),
    internal(RANK, Kind::Count { min: 0, max: U32_MAX }, "launch", "this member's rank in the job"),
    internal(SIZE, Kind::Count { min: 1, max: U32_MAX }, "launch", "the number of members of the job"),
    internal(CPU, Kind::Count { min: 0, max: U32_MAX }, "launch", "the CPU this member is pinned to"),
    internal(KVS_REPLICA, Kind::Text, "store", "set in a replica process of smelt kvs --processes"),
];

/// The entry of `name` in [`ALL`].
pub fn find(name: &str) -> Option<&'static Setting> {
    ALL.iter().find(|s| s.name == name)
}

/// A variable's value is not what it should be.
#[derive(Debug, Clone, PartialEq)]
pub struct SettingError {
    /// The variable.
    pub name: String,
    /// Its value (lossy for a value that is not UTF-8).
    pub value: String,
    /// What it should be.
    pub expected: String,
}

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "environment variable {}: {:?} is not {}",
            self.name, self.value, self.expected
        )
    }
}

impl std::error::Error for SettingError {}

fn known(name: &str) -> &'static Setting {
    match find(name) {
        Some(s) => s,
        // A name missing from ALL is a bug in smelt, caught by every test that reads it.
        None => panic!("{name} is not in smelt_settings::ALL"),
    }
}

/// The raw value of `name`: `None` when unset or empty.
pub fn raw(name: &str) -> Option<OsString> {
    known(name);
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// Whether `name` is set to something (not empty).
pub fn is_set(name: &str) -> bool {
    raw(name).is_some()
}

fn error(name: &str, value: &str, expected: String) -> SettingError {
    SettingError {
        name: name.into(),
        value: value.into(),
        expected,
    }
}

/// The value of `name` as text, trimmed: `Ok(None)` when unset or blank.
pub fn text(name: &str) -> Result<Option<String>, SettingError> {
    match raw(name) {
        None => Ok(None),
        Some(v) => match v.into_string() {
            Ok(s) if s.trim().is_empty() => Ok(None),
            Ok(s) => Ok(Some(s.trim().to_string())),
            Err(v) => Err(error(name, &v.to_string_lossy(), "UTF-8 text".into())),
        },
    }
}

/// The value of `name` as a path (not trimmed: paths may hold spaces).
pub fn path(name: &str) -> Option<PathBuf> {
    raw(name).map(PathBuf::from)
}

/// `name` as on/off (`1/0`, `on/off`, `yes/no`, `true/false`, any case).
pub fn flag(name: &str) -> Result<Option<bool>, SettingError> {
    let Some(v) = text(name)? else {
        return Ok(None);
    };
    match v.to_ascii_lowercase().as_str() {
        "1" | "on" | "yes" | "true" => Ok(Some(true)),
        "0" | "off" | "no" | "false" => Ok(Some(false)),
        _ => Err(error(name, &v, "on/off (1/0, yes/no, true/false)".into())),
    }
}

/// `name` as a whole number within its range in [`ALL`].
pub fn count(name: &str) -> Result<Option<u64>, SettingError> {
    let s = known(name);
    let Kind::Count { min, max } = s.kind else {
        panic!("{name} is not a count in smelt_settings::ALL");
    };
    let Some(v) = text(name)? else {
        return Ok(None);
    };
    match v.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
        _ => Err(error(name, &v, s.kind.describe())),
    }
}

/// A size in bytes: digits with an optional `K`, `M` or `G` suffix (`KiB`, `MiB`,
/// `GiB` too; powers of 1024).
pub fn parse_bytes(s: &str) -> Option<u64> {
    let lower = s.trim().to_ascii_lowercase();
    let t = lower.strip_suffix("ib").unwrap_or(&lower);
    let (num, mult) = match t.char_indices().last()? {
        (i, 'k') => (&t[..i], 1u64 << 10),
        (i, 'm') => (&t[..i], 1 << 20),
        (i, 'g') => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

/// `name` as a number of bytes ([`parse_bytes`]).
pub fn bytes(name: &str) -> Result<Option<u64>, SettingError> {
    let Some(v) = text(name)? else {
        return Ok(None);
    };
    parse_bytes(&v)
        .map(Some)
        .ok_or_else(|| error(name, &v, Kind::Bytes.describe()))
}

/// `name` as seconds within its range in [`ALL`].
pub fn seconds(name: &str) -> Result<Option<f64>, SettingError> {
    let s = known(name);
    let Kind::Seconds { max } = s.kind else {
        panic!("{name} is not seconds in smelt_settings::ALL");
    };
    let Some(v) = text(name)? else {
        return Ok(None);
    };
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() && (0.0..=max).contains(&x) => Ok(Some(x)),
        _ => Err(error(name, &v, s.kind.describe())),
    }
}

/// Where a setting's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The environment of this process.
    Environment,
    /// Not set: the default applies.
    Default,
}

/// One line of [`report`].
#[derive(Debug, Clone)]
pub struct Current {
    /// The setting.
    pub setting: &'static Setting,
    /// Its value in the environment.
    pub value: Option<String>,
    /// Where the value in force comes from.
    pub origin: Origin,
    /// Why the value set is refused, if it is.
    pub problem: Option<String>,
}

/// Every setting with its value in this process's environment, where it comes from,
/// and whether the value is valid.
pub fn report() -> Vec<Current> {
    ALL.iter()
        .map(|s| {
            let value = raw(s.name).map(|v| v.to_string_lossy().into_owned());
            let problem = if value.is_none() {
                None
            } else {
                match s.kind {
                    Kind::Flag => flag(s.name).err(),
                    Kind::Count { .. } => count(s.name).err(),
                    Kind::Bytes => bytes(s.name).err(),
                    Kind::Seconds { .. } => seconds(s.name).err(),
                    Kind::Path => None,
                    Kind::Text => text(s.name).err(),
                }
                .map(|e| e.to_string())
            };
            Current {
                setting: s,
                origin: if value.is_some() {
                    Origin::Environment
                } else {
                    Origin::Default
                },
                value,
                problem,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_listed_once_and_documented() {
        for (i, s) in ALL.iter().enumerate() {
            assert!(s.name.starts_with("SMELT_"), "{}", s.name);
            assert!(!s.doc.is_empty() && !s.area.is_empty(), "{}", s.name);
            assert!(
                ALL[i + 1..].iter().all(|o| o.name != s.name),
                "{} listed twice",
                s.name
            );
        }
        assert!(find("SMELT_GLOBAL_COUNTS").is_none());
        assert!(find("SMELT_NOPE").is_none());
    }

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("64K"), Some(64 << 10));
        assert_eq!(parse_bytes("16m"), Some(16 << 20));
        assert_eq!(parse_bytes("1GiB"), Some(1 << 30));
        assert_eq!(parse_bytes(" 2 M "), Some(2 << 20));
        assert_eq!(parse_bytes("abc"), None);
        assert_eq!(parse_bytes(""), None);
        assert_eq!(parse_bytes("-1"), None);
        assert_eq!(parse_bytes("99999999999999G"), None);
    }

    // The environment is the process's: these tests use variables no other test sets.
    #[test]
    fn garbage_is_an_error_naming_the_variable_and_empty_is_unset() {
        std::env::set_var(STRESS, "lots");
        let e = count(STRESS).unwrap_err();
        assert!(e.to_string().contains("SMELT_STRESS") && e.to_string().contains("lots"));
        std::env::set_var(STRESS, "0");
        assert!(count(STRESS).is_err(), "below the range");
        std::env::set_var(STRESS, " 3 ");
        assert_eq!(count(STRESS).unwrap(), Some(3));
        std::env::set_var(STRESS, "");
        assert_eq!(count(STRESS).unwrap(), None);
        std::env::remove_var(STRESS);

        std::env::set_var(MPI_VERBOSE, "maybe");
        assert!(flag(MPI_VERBOSE)
            .unwrap_err()
            .to_string()
            .contains("on/off"));
        std::env::set_var(MPI_VERBOSE, "YES");
        assert_eq!(flag(MPI_VERBOSE).unwrap(), Some(true));
        std::env::remove_var(MPI_VERBOSE);

        std::env::set_var(DOT_TIMEOUT, "-1");
        assert!(seconds(DOT_TIMEOUT).is_err());
        std::env::set_var(DOT_TIMEOUT, "2.5");
        assert_eq!(seconds(DOT_TIMEOUT).unwrap(), Some(2.5));
        std::env::remove_var(DOT_TIMEOUT);

        std::env::set_var(SHM_LIMIT, "1x");
        let r = report();
        let line = r.iter().find(|c| c.setting.name == SHM_LIMIT).unwrap();
        assert_eq!(line.origin, Origin::Environment);
        assert!(line.problem.as_deref().unwrap().contains("bytes"));
        std::env::remove_var(SHM_LIMIT);
    }

    #[test]
    #[should_panic(expected = "not in smelt_settings::ALL")]
    fn an_unlisted_name_is_a_bug() {
        let _ = text("SMELT_NOT_A_SETTING");
    }
}
