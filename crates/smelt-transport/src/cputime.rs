//! CPU time used, for benchmarks that report what offloading costs in cores.

use std::time::Duration;

#[cfg(target_os = "linux")]
fn clock(id: libc::clockid_t) -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call, and clock_gettime writes nothing else.
    let r = unsafe { libc::clock_gettime(id, &mut ts) };
    (r == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// CPU time the calling thread has used (user + system), if the OS says.
pub fn thread_cpu_time() -> Option<Duration> {
    #[cfg(target_os = "linux")]
    return clock(libc::CLOCK_THREAD_CPUTIME_ID);
    #[cfg(not(target_os = "linux"))]
    None
}

/// CPU time all threads of this process have used (user + system), if the OS says.
pub fn process_cpu_time() -> Option<Duration> {
    #[cfg(target_os = "linux")]
    return clock(libc::CLOCK_PROCESS_CPUTIME_ID);
    #[cfg(not(target_os = "linux"))]
    None
}
