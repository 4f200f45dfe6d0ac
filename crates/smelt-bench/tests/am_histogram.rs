//! The distributed histogram (`smelt_bench::am::histogram`, Bale's histogram with
//! active messages; moved here from `smelt-am` with its workload): every update
//! counted once, between threads through queues of every size and between processes
//! of this host (shared-memory queuepairs).

use smelt_am::Endpoint;
use smelt_am::{threads, AmConfig};
use smelt_bench::am::histogram::{self, Opts};
use smelt_mesh::world::WorldBuilder;
use smelt_mesh::{Rank, World};
use smelt_transport::stress_scale;
use std::process::{Child, Command};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);
const ROLE: &str = "TEST_SMELT_BENCH_AM_ROLE";

fn cfg(capacity: usize) -> AmConfig {
    AmConfig {
        link: smelt_am::LinkConfig::default()
            .capacity(capacity)
            .timeout(T),
        ..AmConfig::default()
    }
}

#[test]
fn the_histogram_application_counts_every_update_once() {
    for (n, per_message, capacity) in [(1, 1, 4), (3, 1, 2), (16, 8, 4), (5, 3, 256)] {
        let o = Opts {
            bins: 1000,
            updates: 2_000 * stress_scale(),
            per_message,
            seed: 7,
            timeout: T,
        };
        let eps = threads(n, cfg(capacity), |i| histogram::state(&o, n, i)).unwrap();
        let reports: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = eps
                .into_iter()
                .map(|mut ep| {
                    let o = o.clone();
                    s.spawn(move || {
                        histogram::register(&mut ep).unwrap();
                        histogram::run(&mut ep, &o).unwrap()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(reports.iter().all(|r| r.ok), "{n} endpoints: {reports:?}");
        let total: u64 = reports.iter().map(|r| r.block_sum).sum();
        assert_eq!(total, n as u64 * o.updates);
    }
}

fn opts() -> Opts {
    Opts {
        bins: 4096,
        updates: 5_000,
        per_message: 4,
        seed: 11,
        timeout: T,
    }
}

/// The member processes' side (does nothing when run as a test of its own).
#[test]
fn member_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    assert_eq!(role, "histogram", "unknown role {role}");
    let o = opts();
    let w = World::from_env().unwrap();
    let mut ep = Endpoint::from_world(&w, histogram::State::default(), cfg(4)).unwrap();
    let (n, me) = (ep.size(), ep.me());
    *ep.state_mut() = histogram::state(&o, n, me);
    histogram::register(&mut ep).unwrap();
    let r = histogram::run(&mut ep, &o).unwrap();
    assert!(r.ok, "member {me}: {r:?}");
}

#[test]
fn the_histogram_runs_across_processes() {
    let n = 4;
    let job = WorldBuilder::new(n).create_job(false).unwrap();
    let children: Vec<Child> = (1..n)
        .map(|r| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "member_entry", "--nocapture", "--test-threads=1"])
                .envs(job.env(Rank(r)))
                .env(ROLE, "histogram")
                .spawn()
                .unwrap()
        })
        .collect();
    let o = opts();
    let w = job.join(Rank(0)).unwrap();
    let mut ep = Endpoint::from_world(&w, histogram::state(&o, n, 0), cfg(4)).unwrap();
    assert_eq!(ep.name(2).unwrap().process, 2);
    histogram::register(&mut ep).unwrap();
    let r = histogram::run(&mut ep, &o).unwrap();
    assert!(r.ok, "{r:?}");
    drop(ep);
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
}
