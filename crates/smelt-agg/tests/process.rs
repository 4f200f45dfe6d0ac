//! Aggregation between processes of this host: a world of 4 member processes (the
//! test binary started again) of 4 worker threads each, 16 workers on this machine's
//! CPUs, every scheme; each process reports the checksums of what its workers sent and
//! received, and the sums over all processes must match.

use smelt_agg::tally::{self, Tally, Totals};
use smelt_agg::{from_world, AggConfig, FlushPolicy, Scheme};
use smelt_mesh::world::WorldBuilder;
use smelt_mesh::{Rank, World};
use std::process::{Command, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);
const ROLE: &str = "TEST_SMELT_AGG_ROLE";
const N: usize = 4;
const T: usize = 4;

fn cfg(scheme: Scheme, flush: FlushPolicy) -> AggConfig {
    let mut c = AggConfig::new(scheme, 8).buffer_items(64).flush(flush);
    c.am.link.timeout = LIMIT;
    c
}

fn items() -> u64 {
    1000 * smelt_transport::stress_scale()
}

fn parse(flush: &str) -> FlushPolicy {
    match flush {
        "idle" => FlushPolicy::IDLE,
        "timeout" => FlushPolicy::after(Duration::from_micros(300)),
        _ => FlushPolicy::EXPLICIT,
    }
}

/// The member processes' side (does nothing when run as a test of its own).
#[test]
fn member_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let (scheme, flush) = role.split_once(':').unwrap();
    let ws = from_world(
        &World::from_env().unwrap(),
        T,
        cfg(scheme.parse().unwrap(), parse(flush)),
        |_| Tally::default(),
        tally::receive,
    )
    .unwrap();
    let t = tally::run(ws, items(), LIMIT).unwrap();
    let w: Vec<String> = t
        .sent
        .words()
        .iter()
        .chain(&t.received.words())
        .map(u64::to_string)
        .collect();
    println!("TALLY {}", w.join(" "));
}

fn across_processes(scheme: Scheme, flush: &str) {
    let c = cfg(scheme, parse(flush));
    let job = WorldBuilder::new(N).create_job(false).unwrap();
    let children: Vec<_> = (1..N)
        .map(|r| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "member_entry", "--nocapture", "--test-threads=1"])
                .envs(job.env(Rank(r)))
                .env(ROLE, format!("{scheme}:{flush}"))
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let world = job.join(Rank(0)).unwrap();
    let ws = from_world(&world, T, c, |_| Tally::default(), tally::receive).unwrap();
    assert_eq!(ws[5 % T].size(), N * T);
    let Totals {
        mut sent,
        received: mut got,
        ..
    } = tally::run(ws, items(), LIMIT).unwrap();
    for ch in children {
        let out = ch.wait_with_output().unwrap();
        assert!(out.status.success(), "{scheme} {flush}: a member failed");
        let text = String::from_utf8_lossy(&out.stdout);
        // (The harness may print "test member_entry ... " on the same line.)
        let at = text.find("TALLY ").expect("a member's tally");
        let line = text[at + 6..].lines().next().unwrap();
        let v: Vec<u64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
        sent.merge(&Tally::from_words([v[0], v[1], v[2], v[3]]));
        got.merge(&Tally::from_words([v[4], v[5], v[6], v[7]]));
    }
    if let Err(e) = tally::verify(&sent, &got, items() * (N * T) as u64) {
        panic!("{scheme} {flush}: {e}");
    }
}

#[test]
fn checksums_across_processes_every_scheme() {
    for s in Scheme::ALL {
        across_processes(s, "explicit");
    }
}

#[test]
fn checksums_across_processes_idle_and_timeout() {
    for s in [Scheme::WW, Scheme::PP] {
        across_processes(s, "idle");
        across_processes(s, "timeout");
    }
}
