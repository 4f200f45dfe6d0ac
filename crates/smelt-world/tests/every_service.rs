//! One world, every service in one job (issue 23's "Done when"): tree collectives,
//! active messages (all to all), aggregation (several workers per member, every
//! worker's items checked exactly), a global array, distributed tasks and an offload
//! pool, all made from the same `World` by every member in the same order, each checked
//! against a sequential computation. Over threads of this process (2 and 4, more than
//! this machine's CPUs) and over processes started by the launcher library
//! (`smelt_mesh::launch`, what `smelt launch` runs). `one_world.rs` runs the example
//! `world_member` (also under `smelt launch`: smelt-cli's tests/launch_world.rs);
//! the same under `mpirun`, with emulated nodes, is the MPI world's test.

// mix: SplitMix64's output (the workspace's one), the values every member and the
// sequential check agree on.
use smelt_ids::rng::mix;
use smelt_world::agg::{AggConfig, Scheme};
use smelt_world::am::{self, Endpoint};
use smelt_world::global::{AccumulateOp, GlobalArray};
use smelt_world::offload::{self, Offload, OffloadMode};
use smelt_world::tasks::dist::{Functions, Member as TaskMember, TaskConfig, TaskCtx};
use smelt_world::tasks::TaskError;
use smelt_world::{agg, launch, Rank, Topology, World, WorldBuilder, WorldExt, WorldKind};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

type Failure = Box<dyn std::error::Error + Send + Sync>;

/// The longest any wait of the test takes: an error, never a hang.
const T: Duration = Duration::from_secs(60);
/// Aggregation workers per member.
const WORKERS: usize = 2;
/// Items each aggregation worker inserts.
const ITEMS: u64 = 400;
/// Elements of the global array besides its counter.
const LEN: u64 = 1001;
/// Requests each member sends each other member through its offload lane.
const OFFLOADED: u64 = 10;

/// The value member `from` sends member `to` (active messages and offload).
fn value(from: usize, to: usize) -> u64 {
    mix((from as u64) << 32 | to as u64) >> 8
}

/// Aggregation: worker `g`'s item `i` goes to worker `dest(g, i)` and carries
/// `item(g, i)`.
fn dest(g: usize, i: u64, workers: usize) -> usize {
    ((g as u64 * 31 + i * 7) % workers as u64) as usize
}
fn item(g: usize, i: u64) -> u64 {
    mix(g as u64 * 1_000_003 + i)
}

const FIB: u32 = 1;
const FIB_N: u32 = 20;

fn fib_seq(n: u32) -> u64 {
    (0..n).fold((0u64, 1u64), |(a, b), _| (b, a + b)).0
}

fn fib(ctx: &TaskCtx, p: &[u8]) -> Result<Vec<u8>, TaskError> {
    let n = u32::from_le_bytes(
        p.try_into()
            .map_err(|_| TaskError::Invalid("a fib payload is 4 bytes".into()))?,
    );
    if n < 12 {
        return Ok(fib_seq(n).to_le_bytes().to_vec());
    }
    let word = |b: Vec<u8>| -> Result<u64, TaskError> {
        Ok(u64::from_le_bytes(b.try_into().map_err(|_| {
            TaskError::Invalid("a fib result is 8 bytes".into())
        })?))
    };
    let h = ctx.spawn(FIB, &(n - 1).to_le_bytes());
    let b = word(fib(ctx, &(n - 2).to_le_bytes())?)?;
    let a = word(h.wait(ctx)?)?;
    Ok((a + b).to_le_bytes().to_vec())
}

const ADD: u8 = 1;
const ACK: u8 = 2;

/// What a member's active-message endpoint (or offload lane) counts: requests
/// handled, the sum of their values, the sum of the acknowledgements' values.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Tally {
    handled: u64,
    sum: u64,
    acked: u64,
}

fn register(ep: &mut Endpoint<Tally>) -> Result<(), am::AmError> {
    ep.register(ADD, |t: &mut Tally, ctx, m| {
        t.handled += 1;
        t.sum = t.sum.wrapping_add(m.args[0]);
        // The requester may be gone only if the program is wrong: then say so here.
        ctx.reply(ACK, &[m.args[0]]).expect("reply");
    })?;
    ep.register(ACK, |t: &mut Tally, _, m| {
        t.acked = t.acked.wrapping_add(m.args[0]);
    })
}

/// Everything one member does, every check against the sequential result inside.
fn member(w: &World) -> Result<String, Failure> {
    let (n, me) = (w.size(), w.rank().index());
    let others = || (0..n).filter(move |&p| p != me);
    let am_cfg = am::AmConfig {
        link: am::AmConfig::default().link.timeout(T),
        ..am::AmConfig::default()
    };

    // Every member makes the same services, in the same order.
    let mut coll = w.collectives(Topology::Auto)?;
    let mut ep = Endpoint::from_world(w, Tally::default(), am_cfg.clone())?;
    let mut agg_cfg = AggConfig::new(Scheme::WPs, 8).buffer_items(16);
    agg_cfg.am.link.timeout = T;
    let workers = agg::from_world(
        w,
        WORKERS,
        agg_cfg,
        |_| (0u64, 0u64),
        |s: &mut (u64, u64), it: &[u8], _| {
            s.0 += 1;
            s.1 =
                s.1.wrapping_add(u64::from_le_bytes(it.try_into().expect("8 bytes")));
        },
    )?;
    let arr_cfg = smelt_world::global::GlobalConfig {
        link: smelt_world::global::LinkConfig::default().timeout(T),
        ..Default::default()
    };
    let arr = GlobalArray::<u64>::from_world(w, LEN + 1, arr_cfg)?;
    let mut tasks = TaskMember::from_world(w, am_cfg.clone())?;
    let mut off_cfg = offload::OffloadConfig::new(OffloadMode::Dynamic);
    off_cfg.link.timeout = T;
    let pool = Offload::from_world(
        w,
        1,
        am_cfg,
        off_cfg,
        |_| Tally::default(),
        |_, ep| register(ep),
    )?;
    register(&mut ep)?;
    assert_eq!(coll.rank(), w.rank());

    // Collectives.
    let s = coll.allreduce(me as u64 + 1, |a, b| a + b)?;
    assert_eq!(s, (n * (n + 1) / 2) as u64);
    let b = coll.broadcast_word(if coll.is_root() { 77 } else { 0 })?;
    assert_eq!(b, 77);

    // Active messages: a request to every other member, each answered. The barrier:
    // every member's handlers are registered before the first request.
    coll.barrier()?;
    for p in others() {
        ep.request(p, ADD, &[value(me, p)])?;
    }
    ep.run_until(T, |t| t.handled == (n - 1) as u64)?;
    ep.quiesce(T)?;
    let t = *ep.state();
    let got: u64 = others().map(|p| value(p, me)).fold(0, u64::wrapping_add);
    let acked: u64 = others().map(|p| value(me, p)).fold(0, u64::wrapping_add);
    assert_eq!(
        t,
        Tally {
            handled: (n - 1) as u64,
            sum: got,
            acked
        }
    );
    let all = coll.allreduce(t.sum, u64::wrapping_add)?;
    let seq: u64 = (0..n)
        .flat_map(|a| (0..n).filter(move |&b| b != a).map(move |b| value(a, b)))
        .fold(0, u64::wrapping_add);
    assert_eq!(all, seq);

    // Aggregation: every worker sends items round the job's workers.
    let total = n * WORKERS;
    let tallies: Vec<(usize, (u64, u64))> = std::thread::scope(|s| {
        let hs: Vec<_> = workers
            .into_iter()
            .map(|mut wk| {
                s.spawn(move || -> Result<(usize, (u64, u64)), agg::AggError> {
                    let g = wk.id();
                    for i in 0..ITEMS {
                        wk.insert_u64(item(g, i), dest(g, i, total))?;
                    }
                    wk.terminate(T)?;
                    Ok((g, *wk.state()))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("worker thread"))
            .collect::<Result<_, _>>()
    })?;
    let mut mine = 0u64;
    for (g, (count, sum)) in tallies {
        assert_eq!(g / WORKERS, me, "worker {g} is member {me}'s");
        let expect = (0..total)
            .flat_map(|s| (0..ITEMS).map(move |i| (s, i)))
            .filter(|&(s, i)| dest(s, i, total) == g)
            .fold((0u64, 0u64), |(c, x), (s, i)| {
                (c + 1, x.wrapping_add(item(s, i)))
            });
        assert_eq!((count, sum), expect, "aggregation worker {g}");
        mine += count;
    }
    assert_eq!(coll.allreduce(mine, |a, b| a + b)?, total as u64 * ITEMS);

    // The global array: each member writes its block, counts itself in the last
    // element; after the barrier every member reads what all wrote.
    let block = arr.local_range();
    let data: Vec<u64> = (block.start..block.end.min(LEN)).map(mix).collect();
    if !data.is_empty() {
        arr.put(block.start, &data)?;
    }
    arr.accumulate(LEN, &[me as u64 + 1], AccumulateOp::Sum)?;
    arr.barrier()?;
    let mut all = vec![0u64; LEN as usize];
    arr.get(0, &mut all)?;
    assert!(all.iter().enumerate().all(|(i, &v)| v == mix(i as u64)));
    assert_eq!(arr.get_one(LEN)?, (n * (n + 1) / 2) as u64);
    let part = data.iter().fold(0, |a: u64, &v| a.wrapping_add(v));
    let whole = (0..LEN).map(mix).fold(0, u64::wrapping_add);
    assert_eq!(coll.allreduce(part, u64::wrapping_add)?, whole);

    // Tasks: member 0 runs fib, every member runs and steals its tasks.
    let mut f = Functions::new();
    f.register(FIB, fib)?;
    let root = (me == 0).then(|| (FIB, FIB_N.to_le_bytes().to_vec()));
    let report = tasks.run(&f, &TaskConfig::new(1), root)?;
    if me == 0 {
        let r = report.result.expect("the root's result");
        assert_eq!(r, fib_seq(FIB_N).to_le_bytes());
    }

    // Offload: requests through this member's lane to every other member's lane.
    coll.barrier()?;
    for _ in 0..OFFLOADED {
        for p in others() {
            pool.request(0, p, ADD, &[value(me, p)])?;
        }
    }
    pool.flush(0)?.wait()?;
    // Every member's requests were answered: the lanes may stop.
    coll.barrier()?;
    let ends = pool.shutdown(T)?;
    let lane = *ends[0].endpoint.state();
    assert_eq!(lane.handled, OFFLOADED * (n - 1) as u64);
    assert_eq!(lane.sum, got.wrapping_mul(OFFLOADED));
    assert_eq!(lane.acked, acked.wrapping_mul(OFFLOADED));

    coll.barrier()?;
    Ok(format!("member {me} of {n} ok"))
}

#[test]
fn every_service_in_one_world_of_threads() {
    for n in [2, 4] {
        let out = World::run(World::threads(n).unwrap(), |w| {
            assert_eq!(w.kind(), WorldKind::Threads);
            member(&w).map_err(|e| e.to_string())
        })
        .unwrap();
        for (r, o) in out.iter().enumerate() {
            assert_eq!(o.as_deref(), Ok(&*format!("member {r} of {n} ok")));
        }
    }
}

const ROLE: &str = "TEST_SMELT_EVERY_SERVICE_ROLE";

#[test]
fn every_service_in_one_world_of_launched_processes() {
    let n = 3;
    let job = WorldBuilder::new(n).create_job(true).unwrap();
    let mut members = launch::Members::new();
    for r in 0..n {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["member_process", "--exact", "--ignored", "--nocapture"])
            .args(["--test-threads=1"])
            .envs(job.env(Rank(r)))
            .env(ROLE, "member")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        members.spawn(&mut cmd, None).unwrap();
    }
    let start = Instant::now();
    let mut children: Vec<_> = (0..n).map(|r| members.take(Rank(r)).unwrap()).collect();
    let mut ended = vec![false; n];
    while ended.iter().any(|e| !e) {
        for (c, e) in children.iter_mut().zip(&mut ended) {
            *e = *e || c.try_wait().unwrap().is_some();
        }
        if start.elapsed() > T * 2 {
            for c in &mut children {
                let _ = c.kill();
            }
            panic!("a member hangs (ended: {ended:?})");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    for (r, c) in children.into_iter().enumerate() {
        let o = c.wait_with_output().unwrap();
        let text =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success() && text.contains(&format!("member {r} of {n} ok")),
            "member {r}: {text}"
        );
    }
}

/// A member process of the test above (not a test on its own).
#[test]
#[ignore = "a member process of every_service_in_one_world_of_launched_processes"]
fn member_process() {
    assert_eq!(std::env::var(ROLE).as_deref(), Ok("member"));
    let w = World::from_env().unwrap();
    assert_eq!(w.kind(), WorldKind::Processes);
    match member(&w) {
        Ok(line) => println!("{line}"),
        Err(e) => panic!("member {}: {e}", w.rank()),
    }
}
