//! An application: a work-stealing task counter over global arrays.
//!
//! Tasks `0..tasks` are spread over the members in blocks. Each member's block has a
//! counter (element `m` of a `u64` array of one element per member, owned by member
//! `m`): a member takes its next task with a fetch-and-add on its own counter, and
//! when its block is used up it steals from the others' counters the same way. Every
//! task adds its value to element `t` of a results array (an accumulate, so a task
//! run twice would show); the tasks of member 0's block cost more, so the others
//! steal. At the end every member checks the whole results array against a
//! sequential recomputation. The same code runs over threads, processes and MPI
//! ranks on emulated nodes.

use smelt_global::{AccumulateOp, GlobalArray, GlobalError, Layout};

/// What to run.
#[derive(Debug, Clone, Copy)]
pub struct Opts {
    /// Number of tasks.
    pub tasks: u64,
    /// Work per task (rounds of a hash), multiplied for member 0's block.
    pub work: u32,
    /// Seed of the task values.
    pub seed: u64,
}

/// What one member saw.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    /// Tasks of its own block it ran.
    pub own: u64,
    /// Tasks it stole from other members' blocks.
    pub stolen: u64,
    /// Elements of the results array that differ from the sequential recomputation.
    pub mismatches: u64,
}

use smelt_ids::rng::mix;

/// Task `t`'s value: never 0, computed with `rounds` rounds of a hash.
pub fn task_value(t: u64, seed: u64, rounds: u32) -> u64 {
    let mut x = t ^ seed;
    for _ in 0..rounds.max(1) {
        x = mix(x);
    }
    x | 1
}

/// Runs the tasks as one member: `counters` has one element per member, `results`
/// one per task, both zero at the start, both over the same members. Every member
/// must call it.
pub fn run(
    counters: &GlobalArray<u64>,
    results: &GlobalArray<u64>,
    opts: &Opts,
) -> Result<Report, GlobalError> {
    let m = counters.members();
    if counters.len() != m as u64 || results.len() != opts.tasks || results.members() != m {
        return Err(GlobalError::Invalid(format!(
            "work stealing needs a counter per member ({m}) and a result per task ({})",
            opts.tasks
        )));
    }
    let me = counters.rank();
    let tasks = Layout::new(opts.tasks, m)?;
    counters.barrier()?;
    let (mut own, mut stolen) = (0, 0);
    for k in 0..m {
        let victim = (me + k) % m;
        let block = tasks.block(victim);
        loop {
            let claim = counters.fetch_accumulate(victim as u64, 1, AccumulateOp::Sum)?;
            if claim >= block.end - block.start {
                break;
            }
            let t = block.start + claim;
            let rounds = if victim == 0 {
                opts.work * 8
            } else {
                opts.work
            };
            results.accumulate(t, &[task_value(t, opts.seed, rounds)], AccumulateOp::Sum)?;
            if k == 0 {
                own += 1;
            } else {
                stolen += 1;
            }
        }
    }
    results.barrier()?;
    let mut mismatches = 0;
    let mut buf = vec![0u64; 1024];
    let mut at = 0;
    while at < opts.tasks {
        let n = (opts.tasks - at).min(buf.len() as u64) as usize;
        results.get(at, &mut buf[..n])?;
        for (i, v) in buf[..n].iter().enumerate() {
            let t = at + i as u64;
            let rounds = if tasks.owner(t) == 0 {
                opts.work * 8
            } else {
                opts.work
            };
            if *v != task_value(t, opts.seed, rounds) {
                mismatches += 1;
            }
        }
        at += n as u64;
    }
    results.barrier()?;
    Ok(Report {
        own,
        stolen,
        mismatches,
    })
}
