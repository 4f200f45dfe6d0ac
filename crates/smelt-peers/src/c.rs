//! The C peers: sources embedded in the binary, compiled at run time into a cache
//! directory with whatever compilers exist, run under a timeout.
//!
//! Every program follows the protocol of `c/peer.h`: arguments
//! `CPUS THREADS BATCH_US RUNS`, output lines `RESULT name threads median p10 p90`
//! (ns per operation).

use crate::{Metric, PeerResult, Status};
use smelt_probe::harness::Budget;
use smelt_probe::stats::{self, Summary};
use smelt_probe::CpuId;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PEER_H: &str = include_str!("../c/peer.h");
const BARRIERS_C: &str = include_str!("../c/barriers.c");
const OMP_C: &str = include_str!("../c/omp.c");
const UMP_C: &str = include_str!("../c/ump.c");
const MPI_C: &str = include_str!("../c/mpi.c");
const MPI_SIZES_C: &str = include_str!("../c/mpi_sizes.c");

/// Compile time limit per program.
const COMPILE_TIMEOUT: Duration = Duration::from_secs(120);

/// Finds an executable on `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn first_of(names: &[&str]) -> Option<PathBuf> {
    names.iter().find_map(|n| which(n))
}

/// The default cache directory for compiled peers: `$SMELT_PEERS_DIR`, else
/// `$XDG_CACHE_HOME/smelt/peers`, else `$HOME/.cache/smelt/peers`, else
/// `<tmp>/smelt-peers`.
pub fn default_cache_dir() -> PathBuf {
    if let Some(d) = smelt_settings::path(smelt_settings::PEERS_DIR) {
        return d;
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("smelt").join("peers");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".cache").join("smelt").join("peers");
    }
    std::env::temp_dir().join("smelt-peers")
}

fn fnv(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for b in p.bytes().chain([0u8]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    h
}

/// Outcome of running a child process under a deadline.
pub struct Ran {
    /// It exited with status 0 in time.
    pub ok: bool,
    /// What it printed.
    pub stdout: String,
    /// What it printed on stderr.
    pub stderr: String,
    /// It was killed at the deadline.
    pub timed_out: bool,
}

/// Runs `cmd` in its own process group; kills the whole group at the deadline.
pub fn run_bounded(mut cmd: Command, timeout: Duration) -> std::io::Result<Ran> {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn()?;
    // Drain the pipes on threads so a chatty child cannot block on a full pipe.
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let to = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let te = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break Some(st);
        }
        if start.elapsed() >= timeout {
            timed_out = true;
            // Kill the process group (mpirun and its ranks), then the child itself.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stdout = to.join().unwrap_or_default();
    let stderr = te.join().unwrap_or_default();
    Ok(Ran {
        ok: status.is_some_and(|s| s.success()),
        stdout,
        stderr,
        timed_out,
    })
}

fn last_line(s: &str) -> String {
    s.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .chars()
        .take(200)
        .collect()
}

/// One `RESULT` line: name, threads, ns per operation.
pub type ResultLine = (String, usize, Summary);

/// Parses `RESULT name threads median p10 p90` lines.
pub fn parse_results(out: &str) -> Vec<ResultLine> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() != 6 || f[0] != "RESULT" {
                return None;
            }
            let t: usize = f[2].parse().ok()?;
            let v: Vec<f64> = f[3..]
                .iter()
                .map(|x| x.parse().ok())
                .collect::<Option<_>>()?;
            if v.iter().any(|x| !x.is_finite()) {
                return None;
            }
            Some((
                f[1].to_string(),
                t,
                Summary {
                    median: v[0],
                    mad: (v[2] - v[1]) / 2.563,
                    p10: v[1],
                    p90: v[2],
                    min: v[1],
                    max: v[2],
                    n: 0,
                    rejected: 0,
                },
            ))
        })
        .collect()
}

/// A C peer program: its source, how to compile it, and what it reports.
struct Program {
    /// Label used in the peer names, e.g. `gcc` for the OpenMP built with gcc.
    label: &'static str,
    file: &'static str,
    source: &'static str,
    /// Compiler candidates (first found wins) and flags.
    compilers: &'static [&'static str],
    flags: &'static [&'static str],
    /// Reported names, their metric, and whether the value is a round trip to halve.
    outputs: &'static [(&'static str, Metric, bool)],
}

const BARRIERS: Program = Program {
    label: "",
    file: "barriers.c",
    source: BARRIERS_C,
    compilers: &["cc", "gcc", "clang"],
    flags: &["-O2", "-pthread"],
    outputs: &[
        ("pthread_barrier", Metric::Barrier, false),
        ("dissemination_barrier", Metric::Barrier, false),
    ],
};

const OMP_GCC: Program = Program {
    label: "GOMP",
    file: "omp.c",
    source: OMP_C,
    compilers: &["gcc"],
    flags: &["-O2", "-fopenmp"],
    outputs: &[
        ("omp_barrier", Metric::Barrier, false),
        ("omp_reduction", Metric::Reduce, false),
    ],
};

const OMP_CLANG: Program = Program {
    label: "libomp",
    file: "omp.c",
    source: OMP_C,
    compilers: &["clang"],
    flags: &["-O2", "-fopenmp"],
    outputs: &[
        ("omp_barrier", Metric::Barrier, false),
        ("omp_reduction", Metric::Reduce, false),
    ],
};

const UMP: Program = Program {
    label: "",
    file: "ump.c",
    source: UMP_C,
    compilers: &["cc", "gcc", "clang"],
    flags: &["-O2", "-pthread"],
    outputs: &[
        ("ump_rtt", Metric::Latency, true),
        ("ump_stream", Metric::Throughput, false),
    ],
};

const MPI: Program = Program {
    label: "Open MPI",
    file: "mpi.c",
    source: MPI_C,
    compilers: &["mpicc.openmpi", "mpicc"],
    flags: &["-O2"],
    outputs: &[
        ("mpi_barrier", Metric::Barrier, false),
        ("mpi_bcast_1B", Metric::Broadcast, false),
        ("mpi_reduce_int", Metric::Reduce, false),
    ],
};

const MPI_SIZES: Program = Program {
    label: "",
    file: "mpi_sizes.c",
    source: MPI_SIZES_C,
    compilers: &["mpicc.openmpi", "mpicc"],
    flags: &["-O2"],
    // Named by operation and size at run time (see `CPeers::mpi_sizes`).
    outputs: &[],
};

/// The MPI collective operations `smelt bench mpi` measures.
pub const MPI_OPS: [&str; 4] = ["bcast", "reduce", "allreduce", "barrier"];

/// An implementation of MPI's collectives, as an unchanged MPI program gets them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MpiSystem {
    /// Open MPI's default selection (the `tuned` component).
    Tuned,
    /// Open MPI's shared-memory collective component (`--mca coll_sm_priority 100`).
    Sm,
    /// Open MPI's hierarchical component (`--mca coll_han_priority 100`); it
    /// disqualifies itself when every rank is on one host.
    Han,
    /// smelt through the interposer library `lib` (`LD_PRELOAD`), with emulated nodes
    /// of `ranks_per_node` ranks (`SMELT_RANKS_PER_NODE`) if given.
    Smelt {
        /// Path of `libsmelt_mpi.so`.
        lib: PathBuf,
        /// Ranks per emulated node.
        ranks_per_node: Option<usize>,
    },
}

impl MpiSystem {
    /// Name in tables and JSON.
    pub fn label(&self) -> String {
        match self {
            MpiSystem::Tuned => "Open MPI (tuned)".into(),
            MpiSystem::Sm => "Open MPI (sm)".into(),
            MpiSystem::Han => "Open MPI (han)".into(),
            MpiSystem::Smelt {
                ranks_per_node: None,
                ..
            } => "smelt (interposer)".into(),
            MpiSystem::Smelt {
                ranks_per_node: Some(k),
                ..
            } => format!("smelt (interposer, nodes of {k})"),
        }
    }
}

/// One figure of `CPeers::mpi_sizes`: `op` of `bytes` bytes with `ranks` ranks.
#[derive(Debug, Clone, PartialEq)]
pub struct MpiFigure {
    /// [`MpiSystem::label`].
    pub system: String,
    /// One of [`MPI_OPS`].
    pub op: String,
    /// Message size (0 for the barrier).
    pub bytes: usize,
    /// MPI ranks.
    pub ranks: usize,
    /// ns per operation, or why there is none.
    pub status: Status,
}

fn display_name(p: &Program, raw: &str) -> String {
    let base = match raw {
        "ump_rtt" | "ump_stream" => "UMP ring (C)",
        other => other,
    };
    if p.label.is_empty() {
        base.to_string()
    } else {
        format!("{base} ({})", p.label)
    }
}

/// The file name under which a program built beforehand is found when no compiler
/// is on `PATH` (`barriers-cc-prebuilt`, `omp-gcc-prebuilt`, ...): what
/// `scripts/bundle.sh` puts in the bundle's peer directory.
fn prebuilt_name(p: &Program) -> String {
    format!(
        "{}-{}-prebuilt",
        p.file.trim_end_matches(".c"),
        p.compilers[0]
    )
}

/// Compiles and runs the C peers. Build products are cached per source and compiler.
pub struct CPeers {
    dir: PathBuf,
}

impl CPeers {
    /// Peers compiled into `dir` (created on first use).
    pub fn new(dir: impl Into<PathBuf>) -> CPeers {
        CPeers { dir: dir.into() }
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn all_status(p: &Program, threads: usize, status: Status) -> Vec<PeerResult> {
        p.outputs
            .iter()
            .map(|(n, m, _)| PeerResult {
                name: display_name(p, n),
                metric: *m,
                threads,
                status: status.clone(),
            })
            .collect()
    }

    /// Compiles `p` if needed; `Err(status)` is the Skipped/Failed to report.
    fn build(&self, p: &Program) -> Result<PathBuf, Status> {
        let Some(cc) = first_of(p.compilers) else {
            // A host with no compiler (the bundle of `scripts/bundle.sh` on a bare
            // machine): a program built beforehand as `STEM-COMPILER-prebuilt` in the
            // directory serves instead.
            let pre = self.dir.join(prebuilt_name(p));
            if pre.is_file() {
                return Ok(pre);
            }
            return Err(Status::Skipped {
                reason: format!("no {}", p.compilers.last().copied().unwrap_or("compiler")),
            });
        };
        let ccs = cc.display().to_string();
        let mut key = vec![PEER_H, p.source, ccs.as_str()];
        key.extend(p.flags.iter().copied());
        let h = fnv(&key);
        let stem = p.file.trim_end_matches(".c");
        let exe = self.dir.join(format!("{stem}-{}-{h:016x}", p.compilers[0]));
        if exe.is_file() {
            return Ok(exe);
        }
        let fail = |why: String| Status::Failed { reason: why };
        let src = self.dir.join(format!("src-{h:016x}"));
        std::fs::create_dir_all(&src)
            .map_err(|e| fail(format!("cannot create {}: {e}", src.display())))?;
        for (name, text) in [("peer.h", PEER_H), (p.file, p.source)] {
            std::fs::write(src.join(name), text)
                .map_err(|e| fail(format!("cannot write {}: {e}", src.join(name).display())))?;
        }
        // Compile to a temporary name, then rename: concurrent runs never see half a binary.
        let tmp = self
            .dir
            .join(format!("{stem}-{h:016x}.tmp{}", std::process::id()));
        let mut cmd = Command::new(&cc);
        cmd.args(p.flags)
            .arg("-o")
            .arg(&tmp)
            .arg(src.join(p.file))
            .arg("-I")
            .arg(&src);
        let ran = run_bounded(cmd, COMPILE_TIMEOUT)
            .map_err(|e| fail(format!("cannot run {ccs}: {e}")))?;
        if !ran.ok {
            let _ = std::fs::remove_file(&tmp);
            let msg = if ran.timed_out {
                "compiler timed out".to_string()
            } else {
                last_line(&ran.stderr)
            };
            // A compiler without OpenMP/MPI support is a missing toolchain, not a bug.
            return Err(Status::Skipped {
                reason: format!("{} cannot build {}: {msg}", cc.display(), p.file),
            });
        }
        std::fs::rename(&tmp, &exe)
            .map_err(|e| fail(format!("cannot install {}: {e}", exe.display())))?;
        Ok(exe)
    }

    /// Builds and runs `p` (under `launcher`, with `extra` arguments after the common
    /// ones); returns the run and its RESULT lines, or the status of every figure.
    #[allow(clippy::too_many_arguments)]
    fn run_raw(
        &self,
        p: &Program,
        launcher: Option<&[String]>,
        cpus: &[u32],
        threads: usize,
        budget: &Budget,
        env: &[(&str, &str)],
        extra: &[String],
    ) -> Result<(Ran, Vec<ResultLine>), Status> {
        let exe = self.build(p)?;
        let list: Vec<String> = cpus.iter().map(|c| c.to_string()).collect();
        let args = [
            list.join(","),
            threads.to_string(),
            (budget.batch.as_micros().max(1)).to_string(),
            budget.runs.max(1).to_string(),
        ];
        let mut cmd = match launcher {
            Some(l) => {
                let mut c = Command::new(&l[0]);
                c.args(&l[1..]).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        cmd.args(&args).args(extra);
        // Waiters spin as long as smelt's do before yielding (see peer.h).
        let spins = smelt_probe::harness::team_spin_polls(threads <= cpus.len());
        cmd.env("SMELT_PEER_SPINS", spins.to_string());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let ran = run_bounded(cmd, budget.timeout).map_err(|e| Status::Failed {
            reason: format!("cannot run {}: {e}", exe.display()),
        })?;
        let got = parse_results(&ran.stdout);
        Ok((ran, got))
    }

    /// The status of a figure that a run did not report.
    fn missing(ran: &Ran, budget: &Budget) -> Status {
        if ran.timed_out {
            return Status::Failed {
                reason: format!("killed after {:.0} s timeout", budget.timeout.as_secs_f64()),
            };
        }
        Status::Failed {
            reason: format!(
                "no result ({}){}",
                if ran.ok {
                    "exit 0"
                } else {
                    "crashed or exited with an error"
                },
                match last_line(&ran.stderr) {
                    s if s.is_empty() => String::new(),
                    s => format!(": {s}"),
                }
            ),
        }
    }

    fn run_program(
        &self,
        p: &Program,
        launcher: Option<Vec<String>>,
        cpus: &[u32],
        threads: usize,
        budget: &Budget,
        env: &[(&str, &str)],
    ) -> Vec<PeerResult> {
        let (ran, got) = match self.run_raw(p, launcher.as_deref(), cpus, threads, budget, env, &[])
        {
            Ok(r) => r,
            Err(s) => return Self::all_status(p, threads, s),
        };
        p.outputs
            .iter()
            .map(|(raw, metric, halve)| {
                let status = match got.iter().find(|(n, _, _)| n == raw) {
                    Some((_, _, s)) => Status::Ok {
                        ns: if *halve { stats::halve(*s) } else { *s },
                    },
                    None => Self::missing(&ran, budget),
                };
                PeerResult {
                    name: display_name(p, raw),
                    metric: *metric,
                    threads,
                    status,
                }
            })
            .collect()
    }

    /// `pthread_barrier_wait` and the dissemination barrier with `threads` threads.
    pub fn barriers(&self, cpus: &[CpuId], threads: usize, budget: &Budget) -> Vec<PeerResult> {
        let cpus: Vec<u32> = cpus.iter().map(|c| c.get()).collect();
        let cpus = &cpus[..];
        self.run_program(&BARRIERS, None, cpus, threads, budget, &[])
    }

    /// OpenMP barrier and reduction, built with gcc (libgomp) and clang (LLVM libomp).
    pub fn openmp(&self, cpus: &[CpuId], threads: usize, budget: &Budget) -> Vec<PeerResult> {
        let cpus: Vec<u32> = cpus.iter().map(|c| c.get()).collect();
        let cpus = &cpus[..];
        let env = [("OMP_PROC_BIND", "false"), ("OMP_DYNAMIC", "false")];
        let mut v = self.run_program(&OMP_GCC, None, cpus, threads, budget, &env);
        v.extend(self.run_program(&OMP_CLANG, None, cpus, threads, budget, &env));
        v
    }

    /// The UMP-style C ring between two CPUs: one-way latency and streaming ns/message.
    pub fn ump(&self, a: CpuId, b: CpuId, budget: &Budget) -> Vec<PeerResult> {
        let (a, b) = (a.get(), b.get());
        let cpus = if a == b { vec![a] } else { vec![a, b] };
        self.run_program(&UMP, None, &cpus, 2, budget, &[])
    }

    /// Open MPI `MPI_Barrier`, `MPI_Bcast` (1 B) and `MPI_Reduce` (1 int) with `ranks`
    /// ranks over shared memory (ob1 + vader), ranks pinned like smelt's members.
    pub fn mpi(&self, cpus: &[CpuId], ranks: usize, budget: &Budget) -> Vec<PeerResult> {
        let cpus: Vec<u32> = cpus.iter().map(|c| c.get()).collect();
        let cpus = &cpus[..];
        match mpi_launcher(ranks, &[]) {
            Some(l) => self.run_program(&MPI, Some(l), cpus, ranks, budget, &MPI_ENV),
            None => Self::all_status(
                &MPI,
                ranks,
                Status::Skipped {
                    reason: "no mpirun".into(),
                },
            ),
        }
    }

    /// `MPI_Bcast` (bytes), `MPI_Reduce` and `MPI_Allreduce` (doubles, sum) of each of
    /// `sizes` bytes and `MPI_Barrier` (those of `ops`), root 0, with `ranks` ranks of
    /// an unchanged MPI program on `system`, ranks pinned to `cpus` like smelt's
    /// members. Every result is checked against plain C arithmetic before it is timed.
    pub fn mpi_sizes(
        &self,
        cpus: &[CpuId],
        ranks: usize,
        budget: &Budget,
        sizes: &[usize],
        ops: &[&str],
        system: &MpiSystem,
    ) -> Vec<MpiFigure> {
        let cpus: Vec<u32> = cpus.iter().map(|c| c.get()).collect();
        let cpus = &cpus[..];
        let wanted: Vec<(&str, usize)> = ops
            .iter()
            .flat_map(|&op| {
                let sizes: Vec<usize> = if op == "barrier" {
                    vec![0]
                } else {
                    sizes.to_vec()
                };
                sizes.into_iter().map(move |b| (op, b))
            })
            .collect();
        let all = |status: Status| -> Vec<MpiFigure> {
            wanted
                .iter()
                .map(|&(op, bytes)| MpiFigure {
                    system: system.label(),
                    op: op.to_string(),
                    bytes,
                    ranks,
                    status: status.clone(),
                })
                .collect()
        };
        let mut mca: Vec<String> = Vec::new();
        let mut env: Vec<(&str, String)> = Vec::new();
        match system {
            MpiSystem::Tuned => {}
            MpiSystem::Sm => mca.extend(["--mca", "coll_sm_priority", "100"].map(String::from)),
            MpiSystem::Han => {
                // Every rank of `smelt bench` runs on this host, where han hands every
                // call back to the other components: its figures would be tuned's.
                return all(Status::Skipped {
                    reason: "han disqualifies itself when every rank is on one host".into(),
                });
            }
            MpiSystem::Smelt {
                lib,
                ranks_per_node,
            } => {
                if !lib.is_file() {
                    return all(Status::Skipped {
                        reason: format!("no interposer library at {}", lib.display()),
                    });
                }
                env.push(("LD_PRELOAD", lib.display().to_string()));
                // Rank 0's summary at MPI_Finalize proves the library took over.
                env.push(("SMELT_MPI_VERBOSE", "1".into()));
                if let Some(k) = ranks_per_node {
                    env.push(("SMELT_RANKS_PER_NODE", k.to_string()));
                }
            }
        }
        // `-x NAME=VALUE` sets the variable in the ranks only, not in mpirun itself.
        for (k, v) in &env {
            mca.push("-x".into());
            mca.push(format!("{k}={v}"));
        }
        let Some(launcher) = mpi_launcher(ranks, &mca) else {
            return all(Status::Skipped {
                reason: "no mpirun".into(),
            });
        };
        let list = |v: Vec<String>| v.join(",");
        let extra = [
            list(sizes.iter().map(|b| b.to_string()).collect()),
            list(ops.iter().map(|o| o.to_string()).collect()),
        ];
        let (ran, got) = match self.run_raw(
            &MPI_SIZES,
            Some(&launcher),
            cpus,
            ranks,
            budget,
            &MPI_ENV,
            &extra,
        ) {
            Ok(r) => r,
            Err(s) => return all(s),
        };
        if matches!(system, MpiSystem::Smelt { .. })
            && ran.ok
            && !ran.stderr.contains("smelt-mpi: summary")
        {
            return all(Status::Failed {
                reason: "the interposer did not take over (no smelt-mpi summary under \
                         SMELT_MPI_VERBOSE=1): build it with --features mpi"
                    .into(),
            });
        }
        let mut out = all(Status::Failed {
            reason: String::new(),
        });
        for f in &mut out {
            // smelt's rows name what the interposer ran (its summary): by default
            // `auto`'s pick for the node, e.g. `smelt (interposer, auto: sequential)`.
            if let (MpiSystem::Smelt { .. }, Some(pick)) =
                (system, interposer_pick(&ran.stderr, &f.op))
            {
                f.system = format!("{}, {pick})", f.system.trim_end_matches(')'));
            }
            let raw = format!("{}_{}", f.op, f.bytes);
            f.status = match got.iter().find(|(n, _, _)| *n == raw) {
                Some((_, _, s)) => Status::Ok { ns: *s },
                None => Self::missing(&ran, budget),
            };
        }
        out
    }
}

/// What the MPI interposer ran for `op` (`bcast`, `reduce`, `allreduce`, `barrier`)
/// on rank 0's node, from its `SMELT_MPI_VERBOSE=1` summary: the node's tree (`auto:
/// TREE` when `auto` picked it), and for the barrier and the (8-byte) allreduce the
/// algorithm `auto`'s table runs them by. `None` when the summary does not say.
pub fn interposer_pick(stderr: &str, op: &str) -> Option<String> {
    let line = |key: &str| {
        stderr
            .lines()
            .find_map(|l| l.split_once(key).map(|(_, rest)| rest.to_string()))
    };
    let tree_line = line(", tree ")?;
    let mut words = tree_line.split_whitespace();
    let tree = words.next()?.to_string();
    let auto = words.next().is_some_and(|w| w.starts_with("(auto"));
    let by = line("auto on rank 0's node: barrier by ").and_then(|rest| {
        let (barrier, rest) = rest.split_once(", ")?;
        let allreduce = rest
            .strip_prefix("8-byte allreduce by ")?
            .trim()
            .to_string();
        Some((barrier.trim().to_string(), allreduce))
    });
    let algo = match (op, &by) {
        ("barrier", Some((b, _))) if b != "the tree" => b.clone(),
        ("allreduce", Some((_, a))) if a != "the tree" => format!("{a} at 8 B"),
        _ => tree,
    };
    Some(if auto { format!("auto: {algo}") } else { algo })
}

/// Environment of every `mpirun` the peers start (root is allowed: CI runs as root;
/// more ranks than CPUs are allowed: groups are oversubscribed on purpose).
pub const MPI_ENV: [(&str, &str); 3] = [
    ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
    ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
    ("OMPI_MCA_rmaps_base_oversubscribe", "1"),
];

/// `mpirun` with `ranks` ranks over shared memory (ob1 + vader), unbound (the
/// programs pin themselves), plus `extra` options; `None` without an mpirun.
fn mpi_launcher(ranks: usize, extra: &[String]) -> Option<Vec<String>> {
    let mpirun = first_of(&["mpirun.openmpi", "mpirun"])?;
    let mut l: Vec<String> = [
        mpirun.display().to_string().as_str(),
        "--allow-run-as-root",
        "--bind-to",
        "none",
        "--mca",
        "pml",
        "ob1",
        "--mca",
        "btl",
        "self,vader",
        "--oversubscribe",
        "-np",
        &ranks.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    l.extend(extra.iter().cloned());
    Some(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_what_the_interposer_ran() {
        let err = "smelt-mpi: summary of rank 0\n\
            smelt-mpi: communicator of 2 ranks: 1 node(s), 2 rank(s) on rank 0's node, tree sequential (auto: tuning file /c/tune-vm.json), dedicated wait, cut-offs 512/512/1024/256/64 bytes (bcast/reduce/allreduce/gather/scatter)\n\
            smelt-mpi: auto on rank 0's node: barrier by dissemination, 8-byte allreduce by the tree\n";
        assert_eq!(interposer_pick(err, "bcast").unwrap(), "auto: sequential");
        assert_eq!(
            interposer_pick(err, "barrier").unwrap(),
            "auto: dissemination"
        );
        assert_eq!(
            interposer_pick(err, "allreduce").unwrap(),
            "auto: sequential"
        );
        let fixed = "smelt-mpi: communicator of 4 ranks: 1 node(s), 4 rank(s) on rank 0's node, tree binary (SMELT_MPI_TREE), dedicated wait\n";
        assert_eq!(interposer_pick(fixed, "reduce").unwrap(), "binary");
        assert_eq!(interposer_pick("no summary", "reduce"), None);
    }

    #[test]
    fn parses_result_lines() {
        let out =
            "noise\nRESULT pthread_barrier 2 100.5 90 120\nRESULT bad 2 x 1 2\nRESULT short 1 2\n";
        let r = parse_results(out);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].0, "pthread_barrier");
        assert_eq!(r[0].1, 2);
        assert_eq!(r[0].2.median, 100.5);
        assert_eq!((r[0].2.p10, r[0].2.p90), (90.0, 120.0));
    }

    #[test]
    fn a_hung_program_is_killed() {
        let mut c = Command::new("sh");
        c.args(["-c", "sleep 30"]);
        let t = Instant::now();
        let r = run_bounded(c, Duration::from_millis(200)).unwrap();
        assert!(r.timed_out && !r.ok);
        assert!(t.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn missing_compiler_is_skipped_not_failed() {
        let p = Program {
            label: "x",
            file: "barriers.c",
            source: BARRIERS_C,
            compilers: &["smelt-no-such-compiler"],
            flags: &[],
            outputs: &[("pthread_barrier", Metric::Barrier, false)],
        };
        let dir = tempfile::tempdir().unwrap();
        let peers = CPeers::new(dir.path());
        let r = peers.run_program(&p, None, &[0], 2, &Budget::quick(), &[]);
        assert_eq!(r.len(), 1);
        assert!(
            matches!(&r[0].status, Status::Skipped { reason } if reason.contains("no smelt-no-such-compiler")),
            "{r:?}"
        );
    }

    /// With no compiler, a program built beforehand (the bundle's) is run instead.
    #[test]
    fn a_prebuilt_program_serves_where_no_compiler_is() {
        let Some(cc) = first_of(BARRIERS.compilers) else {
            panic!("no C compiler to build the prebuilt program with");
        };
        let p = Program {
            compilers: &["smelt-no-such-compiler"],
            ..BARRIERS
        };
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("peer.h"), PEER_H).unwrap();
        std::fs::write(src.join("barriers.c"), BARRIERS_C).unwrap();
        let exe = dir.path().join(prebuilt_name(&p));
        let st = Command::new(cc)
            .args(["-O2", "-pthread", "-o"])
            .arg(&exe)
            .arg(src.join("barriers.c"))
            .arg("-I")
            .arg(&src)
            .status()
            .unwrap();
        assert!(st.success());
        let peers = CPeers::new(dir.path());
        assert_eq!(peers.build(&p).unwrap(), exe);
    }

    #[test]
    fn barrier_peers_run_when_a_compiler_exists() {
        if first_of(BARRIERS.compilers).is_none() {
            return; // covered by missing_compiler_is_skipped_not_failed
        }
        let dir = tempfile::tempdir().unwrap();
        let peers = CPeers::new(dir.path());
        let cpus = CpuId::list(smelt_probe::affinity::allowed_cpus());
        let b = Budget {
            batch: Duration::from_micros(500),
            runs: 3,
            timeout: Duration::from_secs(30),
        };
        let r = peers.barriers(&cpus, 2, &b);
        assert_eq!(r.len(), 2);
        for x in &r {
            assert!(x.median().is_some_and(|m| m > 0.0), "{x:?}");
        }
    }

    #[test]
    fn mpi_sizes_measures_every_op_and_size_or_says_why_not() {
        let dir = tempfile::tempdir().unwrap();
        let peers = CPeers::new(dir.path());
        let cpus = CpuId::list(smelt_probe::affinity::allowed_cpus());
        let b = Budget {
            batch: Duration::from_micros(300),
            runs: 3,
            timeout: Duration::from_secs(60),
        };
        let no_lib = MpiSystem::Smelt {
            lib: dir.path().join("libsmelt_mpi.so"),
            ranks_per_node: None,
        };
        for sys in [MpiSystem::Han, no_lib] {
            let r = peers.mpi_sizes(&cpus, 2, &b, &[8, 64], &MPI_OPS, &sys);
            // 3 sized ops x 2 sizes + 1 barrier.
            assert_eq!(r.len(), 7);
            assert!(
                r.iter().all(|f| matches!(f.status, Status::Skipped { .. })),
                "{r:?}"
            );
        }
        if first_of(MPI_SIZES.compilers).is_none() || first_of(&["mpirun"]).is_none() {
            return;
        }
        let r = peers.mpi_sizes(&cpus, 2, &b, &[8, 1000], &MPI_OPS, &MpiSystem::Tuned);
        assert_eq!(r.len(), 7);
        for f in &r {
            assert!(
                matches!(&f.status, Status::Ok { ns } if ns.median > 0.0),
                "{f:?}"
            );
            assert_eq!(f.system, "Open MPI (tuned)");
        }
        assert_eq!(
            r.iter()
                .map(|f| (f.op.as_str(), f.bytes))
                .collect::<Vec<_>>(),
            [
                ("bcast", 8),
                ("bcast", 1000),
                ("reduce", 8),
                ("reduce", 1000),
                ("allreduce", 8),
                ("allreduce", 1000),
                ("barrier", 0)
            ]
        );
    }
}
