//! Worlds of MPI ranks under `mpirun` (the `mpi` feature): a program written against
//! rsmpi's `mpi` crate makes a [`World`] from its communicator and runs smelt's
//! services on it, each checked against the sequential result.
//!
//! * `rsmpi_world_one_node`: 4 ranks on one node; tree collectives (checked against
//!   the sequential sums and against rsmpi's own `all_reduce_into`) and active
//!   messages (every rank asks every other one, 50 requests each).
//! * `one_world_emulated_nodes_of_2`: 4 ranks in emulated nodes of 2
//!   (`SMELT_RANKS_PER_NODE=2`): collectives (hierarchical: `smelt_world::mpi`),
//!   active messages, aggregation, a global array and distributed tasks in one world,
//!   across the nodes over MPI; one tree over every member is refused with a clear
//!   error; an array outlives its world.
//! * `one_world_uneven_nodes_one_of_a_single_rank`: the same on 5 ranks (nodes of 2,
//!   2 and 1).
//! * `a_world_per_half_of_the_ranks`: any communicator makes a world (the even and
//!   the odd ranks, each a world of its own, with collectives and active messages).
//! * `active_messages_all_over_mpi`: `SMELT_AM_TRANSPORT=mpi` sends between the ranks of
//!   one node over MPI too.
//! * `a_rank_that_stays_away_times_the_others_out`: the others' set-up ends with a
//!   timeout (1 s here), none hangs.
//! * `a_segment_that_cannot_be_made_fails_every_rank`: a node's leader that cannot
//!   make the node's segment gives every rank its reason (no hang, nothing left).
//!
//! This file is its own program (`harness = false`): run without
//! `MPIRUN_WORLD_MEMBER` it starts itself under `mpirun --oversubscribe -np 4` (or 5; one
//! job at a time, killed whole at a limit, its shared-memory directory checked empty
//! afterwards) and checks every rank's verdict; with it, it is one rank.
//! `cargo test -p smelt-world --features mpi --test mpirun_world`; without `mpirun`
//! it says it skips, except under `CI=true`, where it fails.

#[path = "../../../tests/support/mpirun_job.rs"]
mod mpirun_job;
#[path = "../../../tests/support/skip.rs"]
mod skip;

use mpi::collective::SystemOperation;
use mpi::topology::{Color, Communicator};
use mpi::traits::*;
use smelt_mesh::mpi::rsmpi as mpi;
use smelt_world::agg::{AggConfig, Scheme};
use smelt_world::am::{AmConfig, Endpoint};
use smelt_world::global::{AccumulateOp, GlobalArray, GlobalConfig as ArrayConfig};
use smelt_world::tasks::dist::{Functions, Member as TaskMember, TaskConfig, TaskCtx};
use smelt_world::tasks::TaskError;
use smelt_world::{Topology, World, WorldExt, WorldKind};
use std::time::Duration;

/// Which scenario a rank runs (set by the driver for the job).
const MEMBER: &str = "MPIRUN_WORLD_MEMBER";
const LIMIT: Duration = Duration::from_secs(150);
const T: Duration = Duration::from_secs(60);
type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() {
    match std::env::var(MEMBER) {
        Ok(s) => member(&s),
        Err(_) => driver(),
    }
}

fn ensure(ok: bool, what: impl FnOnce() -> String) -> Res<()> {
    if ok {
        Ok(())
    } else {
        Err(what().into())
    }
}

// ---------------------------------------------------------------- the ranks

const FIB: u32 = 1;
const FIB_N: u32 = 20;

fn fib_seq(n: u32) -> u64 {
    (0..n).fold((0u64, 1u64), |(a, b), _| (b, a + b)).0
}

/// Fibonacci as tasks: `n - 1` spawned (stolen by any member), `n - 2` run here.
fn fib(ctx: &TaskCtx, p: &[u8]) -> Result<Vec<u8>, TaskError> {
    let bad = |what: &str| TaskError::Invalid(what.into());
    let n = u32::from_le_bytes(p.try_into().map_err(|_| bad("a 4-byte payload"))?);
    if n < 12 {
        return Ok(fib_seq(n).to_le_bytes().to_vec());
    }
    let word = |b: Vec<u8>| -> Result<u64, TaskError> {
        Ok(u64::from_le_bytes(
            b.try_into().map_err(|_| bad("an 8-byte result"))?,
        ))
    };
    let h = ctx.spawn(FIB, &(n - 1).to_le_bytes());
    let b = word(fib(ctx, &(n - 2).to_le_bytes())?)?;
    let a = word(h.wait(ctx)?)?;
    Ok((a + b).to_le_bytes().to_vec())
}

fn member(scenario: &str) {
    let (universe, _) =
        mpi::initialize_with_threading(mpi::Threading::Serialized).expect("MPI initialises once");
    let comm = universe.world();
    let r = match scenario {
        "rsmpi" => rsmpi_world(&comm),
        "one-world" => one_world(&comm),
        "halves" => halves(&comm),
        "no-segment" => no_segment(&comm),
        "am-over-mpi" => am_over_mpi(&comm),
        "late-rank" => late_rank(&comm),
        s => Err(format!("no scenario {s:?}").into()),
    };
    match r {
        Ok(line) => println!("rank {}: ok {line}", comm.rank()),
        Err(e) => {
            println!("rank {}: FAILED {e}", comm.rank());
            std::process::exit(1);
        }
    }
}

/// Every rank asks every other `k` times to add two numbers; checks the sum of the
/// answers this rank got against the sequential one, and that exactly `remote` other
/// ranks are reached over MPI (then that messages came that way).
fn am_exchange(world: &World, k: u64, remote: usize) -> Res<u64> {
    const ADD: u8 = 1;
    const SUM: u8 = 2;
    #[derive(Default)]
    struct St {
        served: u64,
        got: u64,
        sum: u64,
    }
    let (me, n) = (world.rank().index() as u64, world.size() as u64);
    let mut ep = Endpoint::from_world(world, St::default(), AmConfig::default())?;
    ep.register(ADD, |s: &mut St, ctx, m| {
        s.served += 1;
        ctx.reply(SUM, &[m.args[0] + m.args[1]]).expect("reply")
    })?;
    ep.register(SUM, |s: &mut St, _, m| {
        s.got += 1;
        s.sum += m.args[0];
    })?;
    for i in 0..k {
        for d in (0..n).filter(|&d| d != me) {
            ep.request(d as usize, ADD, &[me, i])?;
        }
    }
    let each = k * (n - 1);
    ep.run_until(T, |s| s.served == each && s.got == each)?;
    let want = (n - 1) * (k * me + k * (k - 1) / 2);
    let st = ep.state();
    ensure(st.sum == want, || {
        format!("active messages: answers add up to {}, not {want}", st.sum)
    })?;
    let sum = st.sum;
    let over_mpi = (0..n as usize).filter(|&d| ep.is_remote(d)).count();
    let hits = ep.stats().remote_hits;
    ensure(over_mpi == remote && (remote == 0) == (hits == 0), || {
        format!(
            "{over_mpi} ranks reached over MPI (expected {remote}), {hits} messages came that way"
        )
    })?;
    // Every rank got its answers and answered every request: only then may the
    // endpoints go (a peer that leaves first is an error for the one still waiting).
    let m = world.mpi().ok_or("no MPI side")?;
    smelt_mesh::mpi::barrier::<smelt_mesh::mpi::MpiCalls>(m.comm(), Some(T))?;
    drop(ep);
    Ok(sum)
}

/// Tree collectives and active messages on the world of an rsmpi communicator.
fn rsmpi_world(comm: &mpi::topology::SimpleCommunicator) -> Res<String> {
    let (r, n) = (comm.rank() as u64, comm.size() as u64);
    let world = World::from_mpi(comm)?;
    ensure(
        world.rank().index() as u64 == r && world.size() as u64 == n,
        || format!("world rank {} of {}", world.rank(), world.size()),
    )?;
    ensure(world.kind() == WorldKind::Mpi, || {
        format!("a world of {:?}", world.kind())
    })?;
    let mut coll = world.collectives(Topology::Auto)?;
    for round in 0..20u64 {
        let s = coll.allreduce(r * round + 1, |a, b| a + b)?;
        let want = round * n * (n - 1) / 2 + n;
        ensure(s == want, || {
            format!("allreduce round {round}: {s}, not {want}")
        })?;
    }
    // smelt's allreduce against rsmpi's own and the sequential sum.
    let mut by_mpi = 0u64;
    comm.all_reduce_into(&(r * r), &mut by_mpi, SystemOperation::sum());
    let by_smelt = coll.allreduce(r * r, |a, b| a + b)?;
    let want: u64 = (0..n).map(|k| k * k).sum();
    ensure(by_smelt == want && by_mpi == want, || {
        format!("sum of squares: smelt {by_smelt}, MPI {by_mpi}, sequential {want}")
    })?;
    let mut v: Vec<u64> = (0..64).map(|i| i * (r + 1)).collect();
    coll.allreduce_slice(&mut v, |a, b| a.max(b))?;
    ensure(
        v.iter().enumerate().all(|(i, &x)| x == i as u64 * n),
        || "allreduce_slice(max)".into(),
    )?;
    let b = coll.broadcast_word(if r == 0 { 0xfeed } else { 0 })?;
    ensure(b == 0xfeed, || format!("broadcast gave {b:#x}"))?;
    if let Some(g) = coll.gather_word(r + 7)? {
        ensure(g == (0..n).map(|k| k + 7).collect::<Vec<_>>(), || {
            format!("gather gave {g:?}")
        })?;
    }
    coll.barrier()?;
    let sum = am_exchange(&world, 50, 0)?;
    // Nobody leaves while another still waits for it.
    coll.barrier()?;
    Ok(format!(
        "nodes={} kind={:?} collectives am_sum={sum}",
        world.nodes(),
        world.kind()
    ))
}

/// Active messages, aggregation and a global array in one world of 2 nodes.
fn one_world(comm: &mpi::topology::SimpleCommunicator) -> Res<String> {
    let world = World::from_mpi(comm)?;
    let (me, n) = (world.rank().index() as u64, world.size() as u64);
    let nodes = world.nodes();
    let m = world.mpi().ok_or("no MPI side")?;
    // Emulated nodes of k consecutive ranks (the last one may be smaller).
    let k = smelt_mesh::mpi::Nodes::from_settings()?.k().max(1);
    let want_nodes = (n as usize).div_ceil(k);
    let node_size = k.min(n as usize - world.node() * k);
    ensure(nodes == want_nodes && m.node_size() == node_size, || {
        format!(
            "{} (expected {want_nodes} nodes of {k}, this one of {node_size})",
            m.describe()
        )
    })?;
    // One tree over every member needs one node: a clear error, at every rank.
    match world.collectives(Topology::Auto) {
        Err(e) if e.to_string().contains("different nodes") => {}
        Err(e) => return Err(format!("one tree across nodes: another error: {e}").into()),
        Ok(_) => return Err("one tree across nodes was made".into()),
    }
    // Hierarchical collectives: trees in the nodes, MPI between their leaders.
    let mut coll = smelt_world::mpi::collectives(&world, Topology::Auto)?;
    for round in 0..20u64 {
        let s = coll.allreduce(me * round + 1, |a, b| a + b)?;
        let want = round * n * (n - 1) / 2 + n;
        ensure(s == want, || {
            format!("allreduce round {round}: {s}, not {want}")
        })?;
    }
    let mut v: Vec<u64> = (0..64).map(|i| i * (me + 1)).collect();
    coll.allreduce_slice(&mut v, |a, b| a.max(b))?;
    ensure(
        v.iter().enumerate().all(|(i, &x)| x == i as u64 * n),
        || format!("allreduce_slice(max) gave {:?}", &v[..4]),
    )?;
    let b = coll.broadcast_word(if me == 0 { 0xfeed } else { 0 })?;
    ensure(b == 0xfeed, || format!("broadcast gave {b:#x}"))?;
    let mut bytes: Vec<u8> = (0..5000u32)
        .map(|i| if me == 0 { (i % 251) as u8 } else { 0 })
        .collect();
    coll.broadcast_into(&mut bytes)?;
    ensure(
        bytes.iter().enumerate().all(|(i, &x)| x == (i % 251) as u8),
        || "broadcast_into: not rank 0's bytes".into(),
    )?;
    let g = coll.gather_word(me * me)?;
    ensure(
        g == (me == 0).then(|| (0..n).map(|k| k * k).collect::<Vec<_>>()),
        || format!("gather gave {g:?}"),
    )?;
    // Bytes: an element-wise wrapping sum of 1000 bytes, and a gather of 12 per rank.
    let mut sum: Vec<u8> = (0..1000u64).map(|i| (i * (me + 1)) as u8).collect();
    coll.allreduce_bytes(&mut sum, |acc, x| {
        acc.iter_mut()
            .zip(x)
            .for_each(|(a, b)| *a = a.wrapping_add(*b))
    })?;
    let want: Vec<u8> = (0..1000u64)
        .map(|i| (0..n).fold(0u8, |a, r| a.wrapping_add((i * (r + 1)) as u8)))
        .collect();
    ensure(sum == want, || {
        "allreduce_bytes: not the sequential sum".into()
    })?;
    let mine: Vec<u8> = (0..12u64).map(|i| (me * 16 + i) as u8).collect();
    let mut all = vec![0u8; if me == 0 { 12 * n as usize } else { 0 }];
    let root = coll.gather_bytes(&mine, &mut all)?;
    ensure(root == (me == 0), || format!("gather_bytes: root {root}"))?;
    if me == 0 {
        let want: Vec<u8> = (0..n)
            .flat_map(|r| (0..12u64).map(move |i| (r * 16 + i) as u8))
            .collect();
        ensure(all == want, || format!("gather_bytes gave {all:?}"))?;
    }
    coll.barrier()?;
    // Active messages, to the rank on this node and the two on the other.
    let am_sum = am_exchange(&world, 50, n as usize - node_size)?;
    comm.barrier();

    // Aggregation: 2 workers per rank; every worker sends 0..200 round all workers.
    let workers = 2usize;
    let cfg = AggConfig::new(Scheme::WPs, 8).buffer_items(16);
    let ws = smelt_world::agg::from_world(
        &world,
        workers,
        cfg,
        |_| 0u64,
        |sum: &mut u64, item: &[u8], _| {
            *sum += u64::from_le_bytes(item.try_into().expect("8 bytes"));
        },
    )?;
    let total_workers = workers * n as usize;
    let got: u64 = std::thread::scope(|s| {
        let hs: Vec<_> = ws
            .into_iter()
            .map(|mut wk| {
                s.spawn(move || -> Result<u64, String> {
                    for i in 0..200u64 {
                        wk.insert(&i.to_le_bytes(), i as usize % total_workers)
                            .map_err(|e| e.to_string())?;
                    }
                    wk.terminate(T).map_err(|e| e.to_string())?;
                    Ok(*wk.state())
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("worker thread"))
            .sum::<Result<u64, String>>()
    })?;
    let mut agg_total = 0u64;
    comm.all_reduce_into(&got, &mut agg_total, SystemOperation::sum());
    let want = total_workers as u64 * (0..200u64).sum::<u64>();
    ensure(agg_total == want, || {
        format!("aggregation delivered {agg_total}, not {want}")
    })?;

    // A global array: rank r writes the elements it is given, everybody adds 1 to
    // every element, then everybody reads the whole array back.
    let len = 1000u64;
    let a = GlobalArray::<u64>::from_world(&world, len, ArrayConfig::default())?;
    let mine: Vec<u64> = (0..len).filter(|i| i % n == me).collect();
    for &i in &mine {
        a.put(i, &[i * 10])?;
    }
    a.barrier()?;
    let ones = vec![1u64; len as usize];
    a.accumulate(0, &ones, AccumulateOp::Sum)?;
    a.barrier()?;
    let mut all = vec![0u64; len as usize];
    a.get(0, &mut all)?;
    let bad = (0..len).find(|&i| all[i as usize] != i * 10 + n);
    ensure(bad.is_none(), || {
        let i = bad.unwrap_or(0);
        format!(
            "global array[{i}] = {}, not {}",
            all[i as usize],
            i * 10 + n
        )
    })?;
    a.barrier()?;
    drop(a);
    // Distributed tasks: rank 0 runs fib, every rank runs and steals its tasks.
    let mut tasks = TaskMember::from_world(&world, AmConfig::default())?;
    let mut f = Functions::new();
    f.register(FIB, fib)?;
    let root = (me == 0).then(|| (FIB, FIB_N.to_le_bytes().to_vec()));
    let report = tasks.run(&f, &TaskConfig::new(1), root)?;
    if me == 0 {
        let r = report.result.ok_or("no result at rank 0")?;
        ensure(r == fib_seq(FIB_N).to_le_bytes(), || {
            format!("fib gave {r:?}")
        })?;
    }
    comm.barrier();
    drop(tasks);
    // An array may outlive its world (it keeps its memory and its communicator).
    let b = GlobalArray::<u64>::from_world(&world, 8, ArrayConfig::default())?;
    drop(world);
    b.accumulate(0, &[1; 8], AccumulateOp::Sum)?;
    b.barrier()?;
    let mut got = [0u64; 8];
    b.get(0, &mut got)?;
    ensure(got == [n; 8], || {
        format!("an array without its world: {got:?}")
    })?;
    b.barrier()?;
    drop(b);
    comm.barrier();

    coll.barrier()?;
    Ok(format!(
        "nodes={nodes} collectives am_sum={am_sum} agg_total={agg_total} array=ok tasks=ok"
    ))
}

/// Any communicator makes a world: each half of the ranks (even, odd) its own, with
/// its own collectives and active messages.
fn halves(comm: &mpi::topology::SimpleCommunicator) -> Res<String> {
    let r = comm.rank() as u64;
    let half = comm
        .split_by_color(Color::with_value((r % 2) as i32))
        .ok_or("no half")?;
    let world = World::from_mpi(&half)?;
    ensure(
        world.rank().index() as i32 == half.rank() && world.size() as i32 == half.size(),
        || format!("world rank {} of {}", world.rank(), world.size()),
    )?;
    let mut coll = world.collectives(Topology::Auto)?;
    let s = coll.allreduce(r, |a, b| a + b)?;
    let n = comm.size() as u64;
    let want: u64 = (0..n).filter(|k| k % 2 == r % 2).sum();
    ensure(s == want, || {
        format!("the half's sum of ranks: {s}, not {want}")
    })?;
    let am_sum = am_exchange(&world, 20, 0)?;
    coll.barrier()?;
    // The hierarchical collectives on a world of one node: its tree alone.
    let mut h = smelt_world::mpi::collectives(&world, Topology::Auto)?;
    let s2 = h.allreduce(r, |a, b| a + b)?;
    ensure(s2 == want, || format!("one node's hierarchical sum: {s2}"))?;
    let me = world.rank().index();
    let mut all = vec![0u8; if me == 0 { 2 * world.size() } else { 0 }];
    if h.gather_bytes(&(r as u16).to_le_bytes(), &mut all)? {
        let got: Vec<u64> = all
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]) as u64)
            .collect();
        let ranks: Vec<u64> = (0..n).filter(|k| k % 2 == r % 2).collect();
        ensure(got == ranks, || format!("one node's gather_bytes: {got:?}"))?;
    }
    h.barrier()?;
    Ok(format!(
        "half={} size={} sum={s} am_sum={am_sum}",
        r % 2,
        world.size()
    ))
}

/// `SMELT_AM_TRANSPORT=mpi`: active messages between the ranks of one node go over
/// MPI too.
fn am_over_mpi(comm: &mpi::topology::SimpleCommunicator) -> Res<String> {
    let world = World::from_mpi(comm)?;
    ensure(world.nodes() == 1, || format!("{} nodes", world.nodes()))?;
    let am_sum = am_exchange(&world, 30, world.size() - 1)?;
    Ok(format!("over-mpi am_sum={am_sum}"))
}

/// A rank that never makes the world: the others time out (bounded), none hangs.
fn late_rank(comm: &mpi::topology::SimpleCommunicator) -> Res<String> {
    if comm.rank() == comm.size() - 1 {
        std::thread::sleep(Duration::from_secs(3));
        return Ok("refused: (the rank that stayed away)".into());
    }
    let t = Duration::from_secs(1);
    match World::from_mpi_with(comm, smelt_mesh::mpi::Nodes::Shared, t) {
        Ok(_) => Err("a world without one of its ranks".into()),
        Err(e) if e.to_string().contains("timed out") => Ok(format!("refused: {e}")),
        Err(e) => Err(format!("another error: {e}").into()),
    }
}

/// A node whose leader cannot make the segment (`SMELT_SHM_DIR` names no directory):
/// every rank gets the leader's reason, none hangs.
fn no_segment(comm: &mpi::topology::SimpleCommunicator) -> Res<String> {
    match World::from_mpi(comm) {
        Ok(_) => Err("a world without its segment".into()),
        Err(e) if e.to_string().contains("leader could not create") => Ok(format!("refused: {e}")),
        Err(e) => Err(format!("another error: {e}").into()),
    }
}

// ---------------------------------------------------------------- the driver

/// A test: its ranks, its name, the scenario they run, their environment, and the
/// word every rank's verdict must hold.
type Scenario = (
    usize,
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static str,
);

fn driver() {
    println!();
    let scenarios: [Scenario; 7] = [
        (4, "rsmpi_world_one_node", "rsmpi", &[], "nodes=1"),
        (
            4,
            "one_world_emulated_nodes_of_2",
            "one-world",
            &[("SMELT_RANKS_PER_NODE", "2")],
            "tasks=ok",
        ),
        (
            5,
            "one_world_uneven_nodes_one_of_a_single_rank",
            "one-world",
            &[("SMELT_RANKS_PER_NODE", "2")],
            "tasks=ok",
        ),
        (4, "a_world_per_half_of_the_ranks", "halves", &[], "half="),
        (
            4,
            "active_messages_all_over_mpi",
            "am-over-mpi",
            &[("SMELT_AM_TRANSPORT", "mpi")],
            "over-mpi",
        ),
        (
            4,
            "a_rank_that_stays_away_times_the_others_out",
            "late-rank",
            &[],
            "refused",
        ),
        (
            4,
            "a_segment_that_cannot_be_made_fails_every_rank",
            "no-segment",
            &[("SMELT_SHM_DIR", "/nonexistent/smelt-shm")],
            "refused",
        ),
    ];
    println!("running {} tests", scenarios.len());
    if !mpirun_job::have_mpirun("mpirun_world") {
        println!(
            "test result: ok. 0 passed; 0 failed; {} ignored",
            scenarios.len()
        );
        return;
    }
    let exe = std::env::current_exe().expect("this test's path");
    let mut failed = Vec::new();
    for (np, name, scenario, env, mark) in scenarios {
        let mut vars = mpirun_job::vars(env);
        vars.push((MEMBER.to_string(), scenario.to_string()));
        let run = mpirun_job::run(mpirun_job::Job {
            np,
            mpirun_args: &[],
            prog: &exe,
            args: &[],
            vars,
            clear: mpirun_job::LAYOUT_VARS,
            shm_prefix: "smelt-world-mpi",
            limit: LIMIT,
        });
        let oks: Vec<&str> = run
            .stdout
            .lines()
            .filter(|l| l.contains(": ok ") && l.contains(mark))
            .collect();
        let verdict = if !run.ok() {
            Some("the job failed")
        } else if oks.len() != np {
            Some("not every rank said ok")
        } else if !run.leftovers.is_empty() {
            Some("shared memory was left behind")
        } else {
            None
        };
        match verdict {
            None => println!("test {name} ... ok ({:.1} s)", run.took.as_secs_f64()),
            Some(why) => {
                println!("test {name} ... FAILED: {why}");
                println!("{}", run.show());
                println!("left in shared memory: {:?}", run.leftovers);
                failed.push(name);
            }
        }
    }
    println!();
    println!(
        "test result: {}. {} passed; {} failed; 0 ignored",
        if failed.is_empty() { "ok" } else { "FAILED" },
        scenarios.len() - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        std::process::exit(1);
    }
}
