//! What can go wrong while probing: the crate's one error type.

use smelt_ids::CpuId;
use smelt_model::ModelError;
use std::fmt;

/// Why a probe did not give a model.
#[derive(Debug)]
pub enum ProbeError {
    /// A thread could not be pinned to its CPU.
    Pin {
        /// The CPU.
        cpu: CpuId,
        /// The OS's refusal.
        source: std::io::Error,
    },
    /// The probe's costs did not make a valid model.
    Model(ModelError),
    /// The probe could not run or finish: a CPU this process may not use, a probe
    /// thread that could not start or died, a pair that got stuck.
    Failed(String),
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeError::Pin { cpu, source } => {
                write!(f, "cannot pin a thread to CPU {cpu}: {source}")
            }
            ProbeError::Model(ModelError::Invalid { why, .. }) => {
                write!(f, "the probe produced an invalid model: {why}")
            }
            ProbeError::Model(e) => write!(f, "the probe produced an invalid model: {e}"),
            ProbeError::Failed(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for ProbeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProbeError::Pin { source, .. } => Some(source),
            ProbeError::Model(e) => Some(e),
            ProbeError::Failed(_) => None,
        }
    }
}

impl From<String> for ProbeError {
    fn from(why: String) -> Self {
        ProbeError::Failed(why)
    }
}
