//! What the tests that run programs under `mpirun` share (smelt-mpi's interposer tests
//! and smelt-am's): a private shared-memory directory checked empty afterwards, and
//! one job at a time, with its output, killed whole (mpirun and its ranks) at a limit.
//! Included by each with `#[path = ...] mod mpirun_job;`.

#![allow(dead_code)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Whether `mpirun` can be run here; if not, says why `test` is skipped.
pub fn have_mpirun(test: &str) -> bool {
    let ok = Command::new("mpirun")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        super::skip::tool_missing_for("`mpirun` on PATH", test);
    }
    ok
}

/// mpirun jobs run one at a time (the machine may have 2 cores).
static SERIAL: Mutex<()> = Mutex::new(());

/// A private directory for a job's shared memory (`SMELT_SHM_DIR`), removed on drop.
pub struct ShmDir(pub PathBuf);

impl ShmDir {
    /// `<shm>/<prefix>-<pid>-<tag>`, empty.
    pub fn new(prefix: &str, tag: &str) -> ShmDir {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let d = base.join(format!("{prefix}-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).expect("create the shared-memory directory");
        ShmDir(d)
    }

    /// What is left in it.
    pub fn leftovers(&self) -> Vec<String> {
        std::fs::read_dir(&self.0)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for ShmDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A finished (or killed) job.
pub struct Run {
    /// Exit code; None if killed at the limit.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
    /// Files left in the job's shared-memory directory.
    pub leftovers: Vec<String>,
}

impl Run {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }

    pub fn show(&self) -> String {
        format!(
            "exit {:?} after {:.1} s\n--- stdout\n{}--- stderr\n{}",
            self.code,
            self.took.as_secs_f64(),
            self.stdout,
            self.stderr
        )
    }

    /// The line of stdout that starts with `prefix`.
    pub fn line(&self, prefix: &str) -> &str {
        self.stdout
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line {prefix:?}:\n{}", self.show()))
    }

    /// `key=value` of the line that starts with `prefix`.
    pub fn field(&self, prefix: &str, key: &str) -> String {
        let line = self.line(prefix);
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
            .to_string()
    }
}

/// A job to run under `mpirun`.
pub struct Job<'a> {
    /// Ranks.
    pub np: usize,
    /// mpirun options besides `--oversubscribe -np N` (and `--allow-run-as-root`).
    pub mpirun_args: &'a [&'a str],
    pub prog: &'a Path,
    pub args: &'a [&'a str],
    /// Variables exported to every rank (`-x`); `SMELT_SHM_DIR` is added.
    pub vars: Vec<(String, String)>,
    /// Variables of the test's own environment that must not reach the job.
    pub clear: &'a [&'a str],
    /// Name prefix of the shared-memory directory.
    pub shm_prefix: &'a str,
    pub limit: Duration,
}

/// Variables of smelt's MPI layer that change a job's layout: a test's own
/// environment must not pass them to its jobs (the tests set what they need).
pub const LAYOUT_VARS: &[&str] = &[
    "SMELT_RANKS_PER_NODE",
    "SMELT_AM_TRANSPORT",
    "SMELT_AM_MPI_IN_FLIGHT",
];

/// `(name, value)` pairs as [`Job::vars`] takes them.
pub fn vars(env: &[(&str, &str)]) -> Vec<(String, String)> {
    env.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Runs one service of a driver program (`prog SERVICE ARGS..`, as `smelt-bench-mpi`)
/// on `np` ranks with `env` (the test's own [`LAYOUT_VARS`] cleared), its shared
/// memory in a `smelt-SERVICE-test-..` directory, killed at `limit`.
pub fn service(
    prog: &Path,
    service: &str,
    np: usize,
    args: &[&str],
    env: &[(&str, &str)],
    limit: Duration,
) -> Run {
    let args: Vec<&str> = std::iter::once(service)
        .chain(args.iter().copied())
        .collect();
    run(Job {
        np,
        mpirun_args: &[],
        prog,
        args: &args,
        vars: vars(env),
        clear: LAYOUT_VARS,
        shm_prefix: &format!("smelt-{service}-test"),
        limit,
    })
}

/// Runs `prog ARGS..` (a program linked against the library in `lib_dir`) on 4 ranks
/// in emulated nodes of `per_node` ranks (`SMELT_RANKS_PER_NODE`), killed after 120 s;
/// fails the test if the job leaves anything in shared memory.
pub fn four_ranks(
    prog: &Path,
    args: &[&str],
    per_node: &str,
    lib_dir: &Path,
    shm_prefix: &str,
) -> Run {
    let lib = lib_dir.display().to_string();
    let r = run(Job {
        np: 4,
        mpirun_args: &[],
        prog,
        args,
        vars: vars(&[
            ("SMELT_RANKS_PER_NODE", per_node),
            ("LD_LIBRARY_PATH", &lib),
        ]),
        clear: LAYOUT_VARS,
        shm_prefix,
        limit: Duration::from_secs(120),
    });
    assert!(
        r.leftovers.is_empty(),
        "left in shared memory: {:?}\n{}",
        r.leftovers,
        r.show()
    );
    r
}

/// Runs the job (one at a time), killing its whole process group after the limit.
pub fn run(job: Job<'_>) -> Run {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tag = format!(
        "{}-{}",
        job.np,
        job.args.first().copied().unwrap_or_else(|| job
            .prog
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or("job"))
    );
    let shm = ShmDir::new(job.shm_prefix, &tag);
    let mut cmd = Command::new("mpirun");
    if is_root() {
        // Open MPI refuses to run as root without it.
        cmd.arg("--allow-run-as-root");
    }
    cmd.args(["--oversubscribe"])
        .args(job.mpirun_args)
        .args(["-np", &job.np.to_string()]);
    let mut vars = vec![("SMELT_SHM_DIR".to_string(), shm.0.display().to_string())];
    for (k, v) in job.vars {
        vars.retain(|(x, _)| *x != k);
        vars.push((k, v));
    }
    for k in job.clear {
        if !vars.iter().any(|(x, _)| x == k) {
            cmd.env_remove(k);
        }
    }
    for (k, v) in &vars {
        cmd.env(k, v).args(["-x", k]);
    }
    cmd.arg(job.prog).args(job.args);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let start = Instant::now();
    let mut child = cmd.spawn().expect("cannot run mpirun");
    let pgid = child.id() as i32;
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out, &mut s).ok();
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut err, &mut s).ok();
        s
    });
    let code = loop {
        if let Some(st) = child.try_wait().expect("wait for mpirun") {
            break st.code();
        }
        if start.elapsed() > job.limit {
            // The whole process group: mpirun and every rank it started.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pgid}")])
                .status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code,
        took: start.elapsed(),
        stdout: t_out.join().unwrap_or_default(),
        stderr: t_err.join().unwrap_or_default(),
        leftovers: shm.leftovers(),
    }
}
