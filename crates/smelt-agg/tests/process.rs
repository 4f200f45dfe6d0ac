//! Aggregation between processes of this host: a world of 4 member processes (the
//! test binary started again) of 4 worker threads each, 16 workers on this machine's
//! CPUs, every scheme; each process reports the checksums of what its workers sent and
//! received, and the sums over all processes must match.

use smelt_agg::{from_world, AggConfig, FlushPolicy, Out, Scheme, Worker};
use smelt_mesh::world::WorldBuilder;
use smelt_mesh::{Rank, World};
use std::process::{Command, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);
const ROLE: &str = "TEST_SMELT_AGG_ROLE";
const N: usize = 4;
const T: usize = 4;

use smelt_ids::rng::mix;

/// Items, the sum and xor of their mixes, items at the wrong worker.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Tally([u64; 4]);

impl Tally {
    fn add(&mut self, x: u64) {
        self.0[0] += 1;
        self.0[1] = self.0[1].wrapping_add(mix(x));
        self.0[2] ^= mix(x.rotate_left(17));
    }
    fn merge(&mut self, o: &Tally) {
        self.0[0] += o.0[0];
        self.0[1] = self.0[1].wrapping_add(o.0[1]);
        self.0[2] ^= o.0[2];
        self.0[3] += o.0[3];
    }
}

fn dest_of(x: u64, workers: usize) -> usize {
    (mix(x ^ 0x5555) % workers as u64) as usize
}

fn cfg(scheme: Scheme, flush: FlushPolicy) -> AggConfig {
    let mut c = AggConfig::new(scheme, 8).buffer_items(64).flush(flush);
    c.am.link.timeout = LIMIT;
    c
}

fn handler(s: &mut Tally, item: &[u8], out: &mut Out<'_>) {
    let x = u64::from_le_bytes(item.try_into().unwrap());
    if dest_of(x, out.size()) != out.me() {
        s.0[3] += 1;
    }
    s.add(x);
}

/// Runs this process's workers: (sent, received) over them.
fn run<L: smelt_transport::Link + 'static>(workers: Vec<Worker<Tally, L>>) -> (Tally, Tally) {
    let z = 1000 * smelt_transport::stress_scale();
    std::thread::scope(|s| {
        let hs: Vec<_> = workers
            .into_iter()
            .map(|mut w| {
                s.spawn(move || {
                    let mut sent = Tally::default();
                    let me = w.id() as u64;
                    for i in 0..z {
                        let x = (me << 40) | i;
                        w.insert_u64(x, dest_of(x, w.size())).unwrap();
                        sent.add(x);
                    }
                    w.terminate(LIMIT).unwrap();
                    (sent, *w.state())
                })
            })
            .collect();
        let mut sent = Tally::default();
        let mut got = Tally::default();
        for h in hs {
            let (s, g) = h.join().unwrap();
            sent.merge(&s);
            got.merge(&g);
        }
        (sent, got)
    })
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
        handler,
    )
    .unwrap();
    let (sent, got) = run(ws);
    println!(
        "TALLY {} {} {} {} {} {} {} {}",
        sent.0[0], sent.0[1], sent.0[2], sent.0[3], got.0[0], got.0[1], got.0[2], got.0[3]
    );
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
    let ws = from_world(&world, T, c, |_| Tally::default(), handler).unwrap();
    assert_eq!(ws[5 % T].size(), N * T);
    let (mut sent, mut got) = run(ws);
    for ch in children {
        let out = ch.wait_with_output().unwrap();
        assert!(out.status.success(), "{scheme} {flush}: a member failed");
        let text = String::from_utf8_lossy(&out.stdout);
        // (The harness may print "test member_entry ... " on the same line.)
        let at = text.find("TALLY ").expect("a member's tally");
        let line = text[at + 6..].lines().next().unwrap();
        let v: Vec<u64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
        sent.merge(&Tally([v[0], v[1], v[2], v[3]]));
        got.merge(&Tally([v[4], v[5], v[6], v[7]]));
    }
    assert_eq!(
        sent.0[0],
        1000 * smelt_transport::stress_scale() * (N * T) as u64
    );
    assert_eq!(got.0[3], 0, "{scheme} {flush}: items at the wrong worker");
    assert_eq!(got, sent, "{scheme} {flush}: items lost or duplicated");
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
