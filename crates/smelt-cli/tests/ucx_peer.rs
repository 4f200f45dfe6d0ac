//! The UCX peer of `smelt bench am` (`smelt_peers::ucx`): `ucx_perftest` run as a
//! server/client pair of processes over shared memory for a short iteration count,
//! every test giving a positive finite figure. Without `ucx_perftest` the test says
//! it skips, and fails under `CI=true` (scripts/deps.sh installs `ucx-utils`). No
//! timing assertions beyond "a positive finite time".

use smelt_peers::ucx::{self, UcxOpts, UcxTest};
use smelt_peers::{Metric, Status};
use smelt_probe::CpuId;
use std::time::Duration;

#[path = "../../../tests/support/skip.rs"]
mod skip;

fn cpus() -> (Option<CpuId>, Option<CpuId>) {
    let c = smelt_probe::affinity::allowed_cpus();
    (c.first().copied().map(CpuId), c.get(1).copied().map(CpuId))
}

fn short(cpus: (Option<CpuId>, Option<CpuId>)) -> UcxOpts {
    UcxOpts {
        iters: 2_000,
        warmup: 100,
        repeats: 2,
        timeout: Duration::from_secs(60),
        ..UcxOpts::quick(cpus)
    }
}

#[test]
fn ucx_perftest_pair_gives_positive_finite_figures() {
    if smelt_peers::c::which(ucx::PROGRAM).is_none() {
        skip::tool_missing("ucx_perftest (Debian's ucx-utils)");
        return;
    }
    let rows = ucx::peers(&short(cpus()));
    let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["ucx_am_lat", "ucx_am_bw", "ucx_get"]);
    assert_eq!(rows[0].metric, Metric::Latency);
    assert_eq!(rows[1].metric, Metric::Throughput);
    assert_eq!(rows[2].metric, Metric::Latency);
    for r in &rows {
        match &r.status {
            Status::Ok { ns } => {
                assert!(
                    ns.median.is_finite() && ns.median > 0.0,
                    "{}: {ns:?}",
                    r.name
                );
                assert!(ns.n >= 1, "{}: {ns:?}", r.name);
            }
            other => panic!("{}: {other:?}", r.name),
        }
    }
}

/// Unpinned works too (the pair on whatever CPUs the OS gives).
#[test]
fn ucx_perftest_unpinned_run_parses() {
    let Some(exe) = smelt_peers::c::which(ucx::PROGRAM) else {
        skip::tool_missing("ucx_perftest (Debian's ucx-utils)");
        return;
    };
    let f = ucx::run_once(&exe, UcxTest::AmLat, &short((None, None))).unwrap();
    assert_eq!(f.iterations, 2_000);
    let ns = UcxTest::AmLat.ns_of(&f);
    assert!(ns.is_finite() && ns > 0.0, "{f:?}");
}

/// Transports UCX does not have are a failed row with UCX's words, not a hang or a
/// panic.
#[test]
fn an_unknown_transport_is_a_failed_row() {
    if smelt_peers::c::which(ucx::PROGRAM).is_none() {
        skip::tool_missing("ucx_perftest (Debian's ucx-utils)");
        return;
    }
    let o = UcxOpts {
        tls: "no_such_transport_xyz".into(),
        repeats: 1,
        timeout: Duration::from_secs(20),
        ..short((None, None))
    };
    let rows = ucx::peers(&o);
    assert_eq!(rows.len(), 3);
    for r in &rows {
        assert!(
            matches!(&r.status, Status::Failed { reason } if !reason.is_empty()),
            "{}: {:?}",
            r.name,
            r.status
        );
    }
}

/// A server slow to listen: the client is refused (UCX says so on stdout) and tried
/// again until the server listens, within the deadline.
#[test]
fn a_client_refused_by_a_server_not_yet_listening_is_tried_again() {
    let Some(exe) = smelt_peers::c::which(ucx::PROGRAM) else {
        skip::tool_missing("ucx_perftest (Debian's ucx-utils)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("slow_server_perftest");
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\ncase \" $* \" in *\" localhost \"*) ;; *) sleep 1 ;; esac\nexec {} \"$@\"\n",
            exe.display()
        ),
    )
    .unwrap();
    let mut perm = std::fs::metadata(&p).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&p, perm).unwrap();
    let o = UcxOpts {
        iters: 1_000,
        ..short((None, None))
    };
    // Another test's fork may hold the new script open a moment (ETXTBSY).
    let mut r = Err(smelt_peers::PeerError::Failed(String::new()));
    for _ in 0..20 {
        r = ucx::run_once(&p, UcxTest::AmLat, &o);
        if !matches!(&r, Err(e) if e.to_string().contains("Text file busy")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let f = r.unwrap();
    assert_eq!(f.iterations, 1_000);
}
