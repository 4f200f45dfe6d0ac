//! Which CPUs this process may use, and pinning the calling thread to one of them.

/// OS CPU ids this process may run on (its `sched_getaffinity` mask), sorted.
pub fn allowed_cpus() -> Vec<u32> {
    let mut v: Vec<u32> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id as u32)
        .collect();
    v.sort_unstable();
    v
}

/// Pins the calling thread to OS CPU `cpu`; an error names the CPU.
pub fn pin_current_thread(cpu: u32) -> Result<(), String> {
    if core_affinity::set_for_current(core_affinity::CoreId { id: cpu as usize }) {
        Ok(())
    } else {
        Err(format!("cannot pin a thread to CPU {cpu}"))
    }
}
