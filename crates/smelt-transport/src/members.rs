//! The system calls behind a launcher's member processes: a member is pinned to its
//! CPU, put in the job's process group and made to die with its launcher, all in the
//! child between `fork` and `exec`; signals reach the whole group.
//!
//! The safe launcher itself (spawning, supervising, escalating) is
//! `smelt_runtime::launch`; only what needs `unsafe` lives here.

use smelt_ids::CpuId;
use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Prepares `cmd` to start a member process of a job:
///
/// * pinned to OS CPU `cpu` when given (`sched_setaffinity` in the child; a CPU the
///   child may not use leaves it unpinned, as pinning a thread that fails does);
/// * in process group `group`: `Some(0)` makes the member lead a new group (its pid
///   becomes the group's id), `Some(g)` joins group `g`, `None` keeps the caller's;
/// * killed with SIGKILL when **the thread that spawns it** ends
///   (`PR_SET_PDEATHSIG`), however that thread's process ends (even by `kill -9`).
///   A child whose parent died before the death signal was set (the race the man
///   page warns about) sees another parent and fails to start instead of running
///   orphaned.
///
/// Spawn from a thread that outlives the members (the launcher's main thread): the
/// kernel sends the death signal when the spawning *thread* exits.
pub fn prepare_member(cmd: &mut Command, cpu: Option<CpuId>, group: Option<u32>) {
    if let Some(g) = group {
        cmd.process_group(i32::try_from(g).unwrap_or(0));
    }
    let set = cpu.and_then(|c| cpu_set(c.get()));
    // Getpid takes no arguments and cannot fail.
    // The launcher's pid, read before the fork: the child compares its parent with it.
    // SAFETY: as argued in the lines above.
    let launcher = unsafe { libc::getpid() };
    // It calls only async-signal-safe system calls (sched_setaffinity, prctl, getppid) on
    // values computed before the fork, and allocates nothing (a raw OS error needs no
    // heap).
    // SAFETY: the hook runs in the child between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(s) = &set {
                // As pinning a thread: an unusable CPU leaves the member unpinned.
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), s);
            }
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != launcher {
                // The launcher died before the death signal was armed.
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// The set holding only `cpu` (None beyond `CPU_SETSIZE`).
fn cpu_set(cpu: u32) -> Option<libc::cpu_set_t> {
    let cpu = cpu as usize;
    if cpu >= libc::CPU_SETSIZE as usize {
        return None;
    }
    // SAFETY: cpu_set_t is a plain bit array; all-zero is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu < CPU_SETSIZE`, so the bit is inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    Some(set)
}

/// Sends signal `sig` to every process of process group `group` (`killpg`). Groups 0
/// and 1 are refused: they would name the caller's own group or init's.
pub fn signal_group(group: u32, sig: i32) -> io::Result<()> {
    let g = libc::pid_t::try_from(group)
        .ok()
        .filter(|g| *g > 1)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a process group"))?;
    // Killpg takes plain integers; `g > 1` names one process group, never the
    // caller's own (0) or every process.
    // SAFETY: as argued in the lines above.
    if unsafe { libc::killpg(g, sig) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The process group of process `pid` (None if it does not exist any more).
pub fn process_group_of(pid: u32) -> Option<u32> {
    let p = libc::pid_t::try_from(pid).ok().filter(|p| *p > 0)?;
    // SAFETY: getpgid takes a plain pid and only returns a value.
    let g = unsafe { libc::getpgid(p) };
    u32::try_from(g).ok()
}
