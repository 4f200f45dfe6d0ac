//! Which CPUs this process may use, and pinning the calling thread to one of them
//! (thin wrappers over `smelt_transport`'s helpers, with messages naming the CPU).

/// OS CPU ids this process may run on (its `sched_getaffinity` mask), sorted. Empty if
/// the OS cannot say.
pub fn allowed_cpus() -> Vec<u32> {
    smelt_transport::allowed_cpus().unwrap_or_default()
}

use crate::ProbeError;
use smelt_ids::CpuId;

/// Pins the calling thread to OS CPU `cpu`; the error ([`ProbeError::Pin`]) names
/// the CPU.
pub fn pin_current_thread(cpu: CpuId) -> Result<(), ProbeError> {
    smelt_transport::pin_current_thread(cpu).map_err(|source| ProbeError::Pin { cpu, source })
}
