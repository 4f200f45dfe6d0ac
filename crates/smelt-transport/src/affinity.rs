//! Thread placement: pin the calling thread to one CPU, ask which CPUs it may use.

use smelt_ids::CpuId;
use std::io;

/// Pins the calling thread to OS CPU `cpu` (Linux `sched_setaffinity`).
///
/// Fails with the OS error if the CPU does not exist or is not in this process's
/// allowed set (cgroup/cpuset), and with `InvalidInput` if `cpu` is beyond
/// `CPU_SETSIZE`.
#[cfg(target_os = "linux")]
pub fn pin_current_thread(cpu: CpuId) -> io::Result<()> {
    let cpu = cpu.get() as usize;
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is beyond CPU_SETSIZE"),
        ));
    }
    // SAFETY: cpu_set_t is a plain bit array; all-zero is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu < CPU_SETSIZE` was checked above, so the bit is inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid, initialised cpu_set_t and the size passed is its size; pid 0 means the calling thread.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Pins the calling thread to OS CPU `cpu` (unsupported on this OS).
#[cfg(not(target_os = "linux"))]
pub fn pin_current_thread(_cpu: CpuId) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "thread pinning is only implemented on Linux",
    ))
}

/// The OS CPU ids the calling thread may run on (Linux `sched_getaffinity`), sorted.
/// Call it before pinning: a pinned thread reports only its own CPU.
#[cfg(target_os = "linux")]
pub fn allowed_cpus() -> io::Result<Vec<u32>> {
    // SAFETY: all-zero is a valid empty cpu_set_t.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is valid and writable and the size passed is its size; pid 0 is the calling thread.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    for cpu in 0..libc::CPU_SETSIZE as usize {
        // SAFETY: `cpu < CPU_SETSIZE`, so the bit is inside `set`.
        if unsafe { libc::CPU_ISSET(cpu, &set) } {
            out.push(cpu as u32);
        }
    }
    Ok(out)
}

/// The CPUs this thread may run on: every CPU `available_parallelism` reports
/// (no affinity query on this OS).
#[cfg(not(target_os = "linux"))]
pub fn allowed_cpus() -> io::Result<Vec<u32>> {
    let n = std::thread::available_parallelism()?.get();
    Ok((0..n as u32).collect())
}

/// The number of CPUs online on this machine (Linux `sysconf(_SC_NPROCESSORS_ONLN)`),
/// whatever this thread's affinity: more members than this cannot each have a CPU of
/// their own, whatever CPU ids they were given. At least 1.
#[cfg(target_os = "linux")]
pub fn online_cpus() -> usize {
    // SAFETY: sysconf takes an integer and only returns a value.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n >= 1 {
        n as usize
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// The number of CPUs of this machine (`available_parallelism`; no other query on
/// this OS). At least 1.
#[cfg(not(target_os = "linux"))]
pub fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The CPU the calling thread is running on right now, if the OS says.
#[cfg(target_os = "linux")]
pub fn current_cpu() -> Option<u32> {
    // SAFETY: sched_getcpu takes no arguments and only returns a value.
    let c = unsafe { libc::sched_getcpu() };
    (c >= 0).then_some(c as u32)
}

/// The CPU the calling thread is running on (unknown on this OS).
#[cfg(not(target_os = "linux"))]
pub fn current_cpu() -> Option<u32> {
    None
}

/// Sends signal `sig` to process `pid` (to forward a signal to the members of a job).
#[cfg(unix)]
pub fn signal_process(pid: u32, sig: i32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    if pid <= 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a single process",
        ));
    }
    // Kill takes plain integers; a positive pid names one process, so no
    // process group or broadcast is signalled by mistake.
    // SAFETY: as argued in the lines above.
    if unsafe { libc::kill(pid, sig) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
