//! UCX as a peer: Debian's `ucx-utils` `ucx_perftest`, run as a server and a client
//! process on this host over shared memory (`UCX_TLS=sm,self`), each pinned to its own
//! CPU with `ucx_perftest -c CPU` (UCX's own affinity option), bounded by a deadline
//! that kills both.
//!
//! Tests and what is taken from `ucx_perftest`'s final line (`-f`: only final
//! numbers; columns: iterations, latency 50th percentile / average / overall in µs,
//! bandwidth average / overall in MB/s, message rate average / overall in msg/s):
//!
//! * `ucp_am_lat` ([`UcxTest::AmLat`]): a ping-pong of 8-byte active messages;
//!   `ucx_perftest` reports ping-pong latencies halved (one way), so the 50th
//!   percentile is UCX's **one-way AM latency** (median);
//! * `ucp_am_bw` ([`UcxTest::AmBw`]): a stream of 8-byte active messages from client
//!   to server, no replies; the **overall message rate** (iterations over the whole
//!   run) is reported as ns per message;
//! * `ucp_get` ([`UcxTest::Get`]): 8-byte `ucp_get`s from the server's memory (a
//!   stream of gets, UCX's "get latency" test); the 50th percentile, µs per get.
//!
//! Each test is run [`UcxOpts::repeats`] times (a fresh server/client pair each time)
//! and summarised like smelt's own figures (median over the runs). A missing
//! `ucx_perftest` makes every row [`Status::Skipped`]; a run that fails, times out or
//! prints no final line makes the row [`Status::Failed`] with what it printed.

use crate::c::{run_bounded, which};
use crate::{Metric, PeerError, PeerResult, Status};
use smelt_probe::stats;
use smelt_probe::CpuId;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The program this peer runs.
pub const PROGRAM: &str = "ucx_perftest";

/// A `ucx_perftest` test this peer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UcxTest {
    /// `ucp_am_lat`: active-message ping-pong, one-way latency.
    AmLat,
    /// `ucp_am_bw`: active-message stream, message rate.
    AmBw,
    /// `ucp_get`: one-sided get, latency per get.
    Get,
}

impl UcxTest {
    /// All three, in report order.
    pub const ALL: [UcxTest; 3] = [UcxTest::AmLat, UcxTest::AmBw, UcxTest::Get];

    /// `ucx_perftest -t` name.
    pub fn name(self) -> &'static str {
        match self {
            UcxTest::AmLat => "ucp_am_lat",
            UcxTest::AmBw => "ucp_am_bw",
            UcxTest::Get => "ucp_get",
        }
    }

    /// The peer row's name.
    pub fn row_name(self) -> &'static str {
        match self {
            UcxTest::AmLat => "ucx_am_lat",
            UcxTest::AmBw => "ucx_am_bw",
            UcxTest::Get => "ucx_get",
        }
    }

    /// The row's metric.
    pub fn metric(self) -> Metric {
        match self {
            UcxTest::AmLat | UcxTest::Get => Metric::Latency,
            UcxTest::AmBw => Metric::Throughput,
        }
    }

    /// The figure of one run, ns: one-way latency (50th percentile), ns per message
    /// (overall rate), or ns per get (50th percentile).
    pub fn ns_of(self, f: &FinalLine) -> f64 {
        match self {
            UcxTest::AmLat | UcxTest::Get => f.latency_p50_us * 1e3,
            UcxTest::AmBw => 1e9 / f.msgrate_overall,
        }
    }
}

/// How the UCX peer is run.
#[derive(Debug, Clone)]
pub struct UcxOpts {
    /// Iterations per run (`-n`).
    pub iters: u64,
    /// Warm-up iterations per run (`-w`).
    pub warmup: u64,
    /// Message size in bytes (`-s`).
    pub size: usize,
    /// Runs per test (a fresh pair of processes each).
    pub repeats: usize,
    /// `UCX_TLS`.
    pub tls: String,
    /// CPUs of the server and the client (`-c`); `None`: not pinned.
    pub cpus: (Option<CpuId>, Option<CpuId>),
    /// Deadline of one run (server and client together).
    pub timeout: Duration,
}

impl UcxOpts {
    /// A short run: 5 runs of 20 000 iterations per test (the shape of smelt's
    /// `--quick` LogP stream: 5 samples of 20 000 messages, the median reported).
    pub fn quick(cpus: (Option<CpuId>, Option<CpuId>)) -> UcxOpts {
        UcxOpts {
            iters: 20_000,
            warmup: 10_000,
            size: 8,
            repeats: 5,
            tls: "sm,self".into(),
            cpus,
            timeout: Duration::from_secs(30),
        }
    }

    /// The full run: 7 runs of 100 000 iterations per test (smelt's full LogP
    /// stream: 7 samples of 100 000).
    pub fn full(cpus: (Option<CpuId>, Option<CpuId>)) -> UcxOpts {
        UcxOpts {
            iters: 100_000,
            repeats: 7,
            timeout: Duration::from_secs(120),
            ..UcxOpts::quick(cpus)
        }
    }
}

/// The final summary line of `ucx_perftest`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FinalLine {
    /// Iterations measured.
    pub iterations: u64,
    /// Latency (or overhead, for bandwidth tests), 50th percentile, µs.
    pub latency_p50_us: f64,
    /// Latency, average of the last report interval, µs.
    pub latency_avg_us: f64,
    /// Latency over the whole run, µs.
    pub latency_overall_us: f64,
    /// Bandwidth, last interval, MB/s.
    pub bandwidth_avg_mb_s: f64,
    /// Bandwidth over the whole run, MB/s.
    pub bandwidth_overall_mb_s: f64,
    /// Message rate, last interval, msg/s.
    pub msgrate_avg: f64,
    /// Message rate over the whole run, msg/s.
    pub msgrate_overall: f64,
}

/// Parses the last summary line of `ucx_perftest`'s output: a `Final:` line (the
/// default output), or with `-f` the last line of 8 numeric columns (iterations,
/// then 7 figures). The figures must be finite and the iterations positive.
pub fn parse_final(out: &str) -> Result<FinalLine, PeerError> {
    let line = out
        .lines()
        .rev()
        .find_map(|l| {
            let l = l.trim();
            let rest = l.strip_prefix("Final:").unwrap_or(l);
            let f: Vec<&str> = rest.split_whitespace().collect();
            if f.len() != 8 {
                return None;
            }
            let iterations: u64 = f[0].replace(',', "").parse().ok()?;
            let v: Vec<f64> = f[1..]
                .iter()
                .map(|x| x.replace(',', "").parse::<f64>().ok())
                .collect::<Option<_>>()?;
            Some((iterations, v))
        })
        .ok_or_else(|| {
            PeerError::Failed(format!(
                "no final line of 8 numbers in ucx_perftest's output: {:?}",
                tail(out)
            ))
        })?;
    let (iterations, v) = line;
    if iterations == 0 {
        return Err(PeerError::Failed(
            "ucx_perftest's final line reports 0 iterations".into(),
        ));
    }
    if let Some(x) = v.iter().find(|x| !x.is_finite() || **x < 0.0) {
        return Err(PeerError::Failed(format!(
            "ucx_perftest's final line has a figure that is not a finite non-negative number ({x})"
        )));
    }
    Ok(FinalLine {
        iterations,
        latency_p50_us: v[0],
        latency_avg_us: v[1],
        latency_overall_us: v[2],
        bandwidth_avg_mb_s: v[3],
        bandwidth_overall_mb_s: v[4],
        msgrate_avg: v[5],
        msgrate_overall: v[6],
    })
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    let t = lines[lines.len().saturating_sub(3)..].join(" | ");
    let n = t.chars().count();
    t.chars().skip(n.saturating_sub(300)).collect()
}

/// A free TCP port for the server's connection set-up (the OS picks one; it is
/// released before the server binds it, so another program could take it meanwhile:
/// then the server fails and the run is tried again).
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn base_cmd(exe: &std::path::Path, o: &UcxOpts, cpu: Option<CpuId>, port: u16) -> Command {
    let mut c = Command::new(exe);
    c.args(["-p", &port.to_string()]).env("UCX_TLS", &o.tls);
    if let Some(cpu) = cpu {
        c.args(["-c", &cpu.to_string()]);
    }
    c
}

/// Kills a server still running, and reaps it.
fn finish(mut server: Child) {
    let _ = server.kill();
    let _ = server.wait();
}

/// One run of `test`: a server, then a client (retried while the server is not yet
/// listening), both within `o.timeout`. The client's final line.
pub fn run_once(exe: &std::path::Path, test: UcxTest, o: &UcxOpts) -> Result<FinalLine, PeerError> {
    let start = Instant::now();
    let mut last_err = String::new();
    // A taken port makes the server exit at once: try a few.
    for _ in 0..3 {
        let port = free_port().map_err(|source| PeerError::Io {
            what: "no free TCP port".into(),
            source,
        })?;
        let mut server = base_cmd(exe, o, o.cpus.0, port)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| PeerError::Io {
                what: format!("cannot start {PROGRAM}"),
                source,
            })?;
        loop {
            let left = o.timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                finish(server);
                return Err(PeerError::Failed(format!(
                    "{PROGRAM} -t {} timed out after {:?} (both processes killed)",
                    test.name(),
                    o.timeout
                )));
            }
            if let Ok(Some(st)) = server.try_wait() {
                let mut e = String::new();
                if let Some(mut s) = server.stderr.take() {
                    use std::io::Read;
                    let _ = s.read_to_string(&mut e);
                }
                last_err = format!(
                    "the server exited ({st}) before the client ran: {}",
                    tail(&e)
                );
                break;
            }
            let mut client = base_cmd(exe, o, o.cpus.1, port);
            client.args([
                "localhost",
                "-t",
                test.name(),
                "-n",
                &o.iters.to_string(),
                "-w",
                &o.warmup.to_string(),
                "-s",
                &o.size.to_string(),
                "-f",
            ]);
            let ran = match run_bounded(client, left) {
                Ok(r) => r,
                Err(source) => {
                    finish(server);
                    return Err(PeerError::Io {
                        what: format!("cannot start the {PROGRAM} client"),
                        source,
                    });
                }
            };
            if ran.timed_out {
                finish(server);
                return Err(PeerError::Failed(format!(
                    "{PROGRAM} -t {} timed out after {:?} (both processes killed)",
                    test.name(),
                    o.timeout
                )));
            }
            // (UCX logs its errors on stdout.)
            if !ran.ok
                && (ran.stdout.contains("Connection refused")
                    || ran.stderr.contains("Connection refused"))
            {
                // The server is not listening yet.
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            // The server ends by itself after one test; give it a moment, then kill.
            let until = Instant::now() + Duration::from_secs(2);
            while Instant::now() < until && matches!(server.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(5));
            }
            finish(server);
            if !ran.ok {
                return Err(PeerError::Failed(format!(
                    "{PROGRAM} -t {} failed: {}",
                    test.name(),
                    tail(&format!("{}\n{}", ran.stdout, ran.stderr))
                )));
            }
            return parse_final(&ran.stdout);
        }
    }
    Err(PeerError::Failed(last_err))
}

/// How the pair was placed, for the report.
pub fn placement(o: &UcxOpts) -> String {
    match o.cpus {
        (Some(a), Some(b)) => format!(
            "server on CPU {a}, client on CPU {b} (ucx_perftest -c), UCX_TLS={}",
            o.tls
        ),
        _ => format!("not pinned (no CPU pair), UCX_TLS={}", o.tls),
    }
}

/// One test's row and the final lines of its runs (as many as succeeded before one
/// failed).
#[derive(Debug, Clone)]
pub struct Measured {
    /// The test.
    pub test: UcxTest,
    /// The row: the median over the runs of [`UcxTest::ns_of`], or why there is none.
    pub row: PeerResult,
    /// What each run printed.
    pub runs: Vec<FinalLine>,
}

/// Runs every test of [`UcxTest::ALL`], `o.repeats` times each: one row per test,
/// with the runs' final lines. Without `ucx_perftest` on `PATH`, every row is
/// skipped.
pub fn measure(o: &UcxOpts) -> Vec<Measured> {
    let Some(exe) = which(PROGRAM) else {
        return UcxTest::ALL
            .iter()
            .map(|&t| Measured {
                test: t,
                row: PeerResult {
                    name: t.row_name().into(),
                    metric: t.metric(),
                    threads: 2,
                    status: Status::Skipped {
                        reason: format!("no {PROGRAM} (Debian: apt-get install ucx-utils)"),
                    },
                },
                runs: Vec::new(),
            })
            .collect();
    };
    UcxTest::ALL
        .iter()
        .map(|&t| {
            let mut runs = Vec::new();
            let mut r = Ok(());
            for _ in 0..o.repeats.max(1) {
                match run_once(&exe, t, o) {
                    Ok(f) => runs.push(f),
                    Err(e) => {
                        r = Err(e.to_string());
                        break;
                    }
                }
            }
            let v: Vec<f64> = runs.iter().map(|f| t.ns_of(f)).collect();
            let r = r.and_then(|()| {
                if let Some(x) = v.iter().find(|x| !(x.is_finite() && **x > 0.0)) {
                    return Err(format!(
                        "{} gave a figure that is not a positive time ({x} ns)",
                        t.name()
                    ));
                }
                stats::summarize(&v).ok_or_else(|| format!("{}: no samples", t.name()))
            });
            Measured {
                test: t,
                row: PeerResult::measured(t.row_name(), t.metric(), 2, r),
                runs,
            }
        })
        .collect()
}

/// The rows of [`measure`].
pub fn peers(o: &UcxOpts) -> Vec<PeerResult> {
    measure(o).into_iter().map(|m| m.row).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `UCX_TLS=sm,self ucx_perftest localhost -t ucp_am_lat -n 200000 -s 8 -c 1 -f`
    /// (the server `ucx_perftest -c 0`), Debian's ucx-utils 1.13.1.
    const AM_LAT_F: &str = "\
+--------------+--------------+------------------------------+---------------------+-----------------------+
|              |              |        latency (usec)        |   bandwidth (MB/s)  |  message rate (msg/s) |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
|     Test     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
                      200000      0.471    15.078    14.479        0.51       0.53       66323       69065
";

    /// The same for `ucp_am_bw`.
    const AM_BW_F: &str = "\
+--------------+--------------+------------------------------+---------------------+-----------------------+
|              |              |       overhead (usec)        |   bandwidth (MB/s)  |  message rate (msg/s) |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
|     Test     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
                      200000      0.160    11.908     7.063        0.64       1.08       83978      141588
";

    /// The default output (no `-f`): interval lines, then `Final:`.
    const AM_LAT_DEFAULT: &str = "\
+--------------+--------------+------------------------------+---------------------+-----------------------+
|              |              |        latency (usec)        |   bandwidth (MB/s)  |  message rate (msg/s) |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
[thread 0]             53646      0.466     9.341     9.341        0.82       0.82      107059      107059
Final:                100000      0.521     8.733     9.059        0.87       0.84      114507      110387
";

    #[test]
    fn parses_the_final_line_of_each_format() {
        let f = parse_final(AM_LAT_F).unwrap();
        assert_eq!(f.iterations, 200_000);
        assert_eq!(f.latency_p50_us, 0.471);
        assert_eq!(f.msgrate_overall, 69065.0);
        assert!((UcxTest::AmLat.ns_of(&f) - 471.0).abs() < 1e-9);

        let b = parse_final(AM_BW_F).unwrap();
        assert_eq!(b.latency_p50_us, 0.160);
        assert_eq!(b.bandwidth_overall_mb_s, 1.08);
        assert!((UcxTest::AmBw.ns_of(&b) - 1e9 / 141588.0).abs() < 1e-9);

        // The Final: line, not the interval line before it.
        let d = parse_final(AM_LAT_DEFAULT).unwrap();
        assert_eq!(d.iterations, 100_000);
        assert_eq!(d.latency_p50_us, 0.521);
        assert_eq!(d.msgrate_avg, 114507.0);
    }

    #[test]
    fn thousands_separators_are_read() {
        // `-N` output.
        let f = parse_final(
            "   1,000,000   0.250   0.300   0.310   30.00   31.00   3,000,000   3,100,000\n",
        )
        .unwrap();
        assert_eq!(f.iterations, 1_000_000);
        assert_eq!(f.msgrate_overall, 3_100_000.0);
    }

    #[test]
    fn bad_output_is_an_error_naming_what_was_printed() {
        let e = parse_final("").unwrap_err().to_string();
        assert!(e.contains("no final line"), "{e}");
        // Only the header: no numbers.
        let header: String = AM_LAT_F.lines().take(5).collect::<Vec<_>>().join("\n");
        assert!(parse_final(&header).is_err());
        // An error message.
        let e = parse_final("[1795661818.176632] [vm:3235 :0] perftest.c:405 UCX ERROR client failed. connect() failed: Connection refused\n").unwrap_err().to_string();
        assert!(e.contains("Connection refused"), "{e}");
        // A truncated line (7 columns).
        assert!(parse_final("200000 0.471 15.078 14.479 0.51 0.53 66323\n").is_err());
        // Not finite, negative, zero iterations.
        assert!(parse_final("200000 nan 1 1 1 1 1 1\n").is_err());
        assert!(parse_final("200000 -0.5 1 1 1 1 1 1\n").is_err());
        assert!(parse_final("0 0.5 1 1 1 1 1 1\n").is_err());
    }

    #[test]
    fn a_missing_program_fails_clearly() {
        let o = UcxOpts::quick((None, None));
        let e = run_once(
            std::path::Path::new("/nonexistent/ucx_perftest"),
            UcxTest::AmLat,
            &o,
        )
        .unwrap_err();
        assert!(
            matches!(&e, PeerError::Io { what, .. } if what.contains("cannot start")),
            "{e}"
        );
    }

    #[test]
    fn a_program_that_never_answers_is_killed_at_the_deadline() {
        // A "ucx_perftest" that sleeps whatever it is given: the server never
        // listens, the client never finishes.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fake_perftest");
        std::fs::write(&p, "#!/bin/sh\nexec sleep 30\n").unwrap();
        let mut perm = std::fs::metadata(&p).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
        std::fs::set_permissions(&p, perm).unwrap();
        let o = UcxOpts {
            timeout: Duration::from_millis(500),
            ..UcxOpts::quick((None, None))
        };
        let t = Instant::now();
        // Another test's fork may still hold the script open for writing a moment
        // (ETXTBSY): try again then.
        let mut e = String::new();
        for _ in 0..20 {
            e = run_once(&p, UcxTest::AmLat, &o).unwrap_err().to_string();
            if !e.contains("Text file busy") {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        assert!(e.contains("timed out"), "{e}");
    }
}
