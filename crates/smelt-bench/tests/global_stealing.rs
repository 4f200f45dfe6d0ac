//! The work-stealing task counter over global arrays (`smelt_bench::global::stealing`,
//! moved here from `smelt-global` with its workload): every task runs once and every
//! member's recomputation matches, over 16 threads and over processes of this host.

use smelt_bench::global::stealing::{self, Opts};
use smelt_global::{threads, GlobalArray, GlobalConfig};
use smelt_mesh::world::WorldBuilder;
use smelt_mesh::{Rank, World};
use std::process::{Child, Command};
use std::time::Duration;

const ROLE: &str = "TEST_SMELT_BENCH_GLOBAL_ROLE";

fn cfg() -> GlobalConfig {
    GlobalConfig {
        link: smelt_global::LinkConfig::default().timeout(Duration::from_secs(60)),
        ..GlobalConfig::default()
    }
}

#[test]
fn work_stealing_over_16_threads_matches_the_sequential_recomputation() {
    const MEMBERS: usize = 16;
    let opts = Opts {
        tasks: 2000 * smelt_transport::stress_scale(),
        work: 20,
        seed: 5,
    };
    let counters = threads::<u64>(MEMBERS as u64, MEMBERS, cfg()).unwrap();
    let results = threads::<u64>(opts.tasks, MEMBERS, cfg()).unwrap();
    let reports: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = counters
            .iter()
            .zip(&results)
            .map(|(c, r)| s.spawn(move || stealing::run(c, r, &opts).unwrap()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(reports.iter().all(|r| r.mismatches == 0), "{reports:?}");
    let ran: u64 = reports.iter().map(|r| r.own + r.stolen).sum();
    assert_eq!(ran, opts.tasks);
}

const MEMBERS: usize = 4;

fn opts() -> Opts {
    Opts {
        tasks: 1500,
        work: 20,
        seed: 9,
    }
}

/// The counters and the results array, made in the same order by every member.
fn arrays(w: &World) -> (GlobalArray<u64>, GlobalArray<u64>) {
    let c = GlobalArray::<u64>::from_world(w, MEMBERS as u64, cfg()).unwrap();
    let r = GlobalArray::<u64>::from_world(w, opts().tasks, cfg()).unwrap();
    (c, r)
}

/// The member processes' side (does nothing when run as a test of its own).
#[test]
fn member_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    assert_eq!(role, "stealing", "unknown role {role}");
    let w = World::from_env().unwrap();
    let (c, r) = arrays(&w);
    let rep = stealing::run(&c, &r, &opts()).unwrap();
    assert_eq!(rep.mismatches, 0, "{rep:?}");
}

#[test]
fn work_stealing_across_processes_matches_the_sequential_recomputation() {
    let o = opts();
    let job = WorldBuilder::new(MEMBERS).create_job(false).unwrap();
    let kids: Vec<Child> = (1..MEMBERS)
        .map(|rank| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "member_entry", "--nocapture", "--test-threads=1"])
                .env(ROLE, "stealing")
                .envs(job.env(Rank(rank)))
                .spawn()
                .unwrap()
        })
        .collect();
    let w = job.join(Rank(0)).unwrap();
    let (c, r) = arrays(&w);
    let rep = stealing::run(&c, &r, &o).unwrap();
    assert_eq!(rep.mismatches, 0);
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
}
