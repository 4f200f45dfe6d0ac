//! Starting and ending a job's member processes: the one launcher behind
//! `smelt launch` and `smelt bench processes`, for your own launcher too.
//!
//! [`Members`] starts each member pinned to its CPU, in one process group of the job's
//! own (led by the first member, as `mpirun` does: a Ctrl-C reaches the launcher,
//! which forwards it), and bound to the launcher's life: a member is killed (SIGKILL)
//! when the thread that started it ends, even by `kill -9`. Signals go to the whole
//! group, so a member's own children get them too; dropping `Members` kills and reaps
//! every member still running. Pair it with a guarded job (a world's
//! [`WorldBuilder::create_job`](crate::world::WorldBuilder::create_job)`(true)`, which
//! [`Members::start`] starts every member of), whose segment name cannot outlive the
//! launcher either.
//!
//! ```no_run
//! use smelt_mesh::launch::Members;
//! use smelt_mesh::world::WorldBuilder;
//! # fn f() -> Result<(), Box<dyn std::error::Error>> {
//! // A world of 4 members on this process's CPUs; its name cannot outlive us.
//! let job = WorldBuilder::new(4).spread().create_job(true)?;
//! // Each member runs ./member, pinned, with what it needs to join (World::from_env).
//! let mut members = Members::start(&job, |_rank| std::process::Command::new("./member"))
//!     .map_err(|(rank, e)| format!("cannot start member {rank}: {e}"))?;
//! while members.running() > 0 {
//!     for (rank, status) in members.poll() {
//!         println!("member {rank}: {status}");
//!     }
//!     std::thread::sleep(std::time::Duration::from_millis(5));
//! }
//! # Ok(()) }
//! ```

use crate::{CpuId, Rank};
use smelt_transport::members::{prepare_member, process_group_of, signal_group};
use smelt_transport::signal_process;
use std::io;
use std::process::{Child, Command, ExitStatus};

/// SIGKILL.
const SIGKILL: i32 = 9;

/// Starts `cmd` as a member process: pinned to OS CPU `cpu` (when given), in process
/// group `group` (`Some(0)`: a new group it leads; `None`: the caller's), and killed
/// with SIGKILL when the calling thread ends (`PR_SET_PDEATHSIG`, armed before
/// `exec` and checked against the launcher dying first). Start members from a thread
/// that outlives them, such as the main thread.
pub fn spawn_member(
    cmd: &mut Command,
    cpu: Option<CpuId>,
    group: Option<u32>,
) -> io::Result<Child> {
    prepare_member(cmd, cpu, group);
    cmd.spawn()
}

/// The member processes of one job, by rank (the order they were started in).
#[derive(Debug, Default)]
pub struct Members {
    /// Each member's process until it is reaped (or taken).
    children: Vec<Option<Child>>,
    /// The members' process group: the first member's pid.
    group: Option<u32>,
}

impl Members {
    /// No members yet.
    pub fn new() -> Members {
        Members::default()
    }

    /// Starts `cmd` as the next member ([`spawn_member`]): the first member leads a
    /// new process group, the others join it. Returns the member's rank.
    pub fn spawn(&mut self, cmd: &mut Command, cpu: Option<CpuId>) -> io::Result<usize> {
        let child = spawn_member(cmd, cpu, Some(self.group.unwrap_or(0)))?;
        self.group.get_or_insert(child.id());
        self.children.push(Some(child));
        Ok(self.children.len() - 1)
    }

    /// Starts every member of `job`'s world: `command(rank)` (the program and its
    /// arguments), with the variables member `rank` needs to join
    /// ([`WorldJob::env`](crate::world::WorldJob::env)), pinned to the member's CPU
    /// when the world gives it one. If a member cannot be started, the members already
    /// started are killed and reaped, and the error names the member's rank.
    pub fn start(
        job: &crate::world::WorldJob,
        mut command: impl FnMut(crate::Rank) -> Command,
    ) -> Result<Members, (crate::Rank, io::Error)> {
        let mut members = Members::new();
        for (r, cpu) in job.cpus().into_iter().enumerate() {
            let rank = crate::Rank(r);
            let mut cmd = command(rank);
            cmd.envs(job.env(rank));
            if let Err(e) = members.spawn(&mut cmd, cpu) {
                return Err((rank, e)); // dropping `members` kills and reaps the others
            }
        }
        Ok(members)
    }

    /// Members started.
    pub fn len(&self) -> usize {
        self.children.len()
    }

    /// True before the first member started.
    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    /// Members not reaped yet.
    pub fn running(&self) -> usize {
        self.children.iter().flatten().count()
    }

    /// The members' process group (None before the first member started).
    pub fn group(&self) -> Option<u32> {
        self.group
    }

    /// The process id of member `rank` while it is running.
    pub fn pid(&self, rank: Rank) -> Option<u32> {
        self.children.get(rank.index())?.as_ref().map(Child::id)
    }

    /// Sends `sig` to every running member and to their own children: to the
    /// members' process group, and to each member that left it (a member that made a
    /// group or session of its own). Nothing is sent once every member was reaped,
    /// so a recycled process id is never signalled.
    pub fn signal(&self, sig: i32) {
        if self.running() == 0 {
            return;
        }
        if let Some(g) = self.group {
            let _ = signal_group(g, sig);
        }
        for c in self.children.iter().flatten() {
            if self.group.is_none() || process_group_of(c.id()) != self.group {
                let _ = signal_process(c.id(), sig);
            }
        }
    }

    /// Kills (SIGKILL) every running member and their children in the group.
    pub fn kill(&self) {
        self.signal(SIGKILL);
    }

    /// The members that ended since the last call, with their status; each is reaped.
    pub fn poll(&mut self) -> Vec<(usize, ExitStatus)> {
        let mut ended = Vec::new();
        for (rank, slot) in self.children.iter_mut().enumerate() {
            if let Some(c) = slot {
                if let Ok(Some(st)) = c.try_wait() {
                    *slot = None;
                    ended.push((rank, st));
                }
            }
        }
        ended
    }

    /// Hands member `rank`'s process to the caller (to wait for its output); it is
    /// then no longer signalled, killed or reaped here.
    pub fn take(&mut self, rank: Rank) -> Option<Child> {
        self.children.get_mut(rank.index())?.take()
    }
}

impl Drop for Members {
    /// Kills and reaps every member still running.
    fn drop(&mut self) {
        self.kill();
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
