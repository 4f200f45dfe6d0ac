//! What can go wrong while measuring a peer: the crate's one error type.

use smelt_probe::ProbeError;
use std::fmt;

/// Why a peer's figure could not be taken.
#[derive(Debug)]
pub enum PeerError {
    /// The shared harness failed: a thread that could not be pinned, a measurement
    /// past its deadline ([`smelt_probe::harness::run_team`]).
    Probe(ProbeError),
    /// A program the peer needs could not be started, or a port for it found (what
    /// was being done, and the OS's error).
    Io {
        /// What was being done, e.g. "cannot start ucx_perftest".
        what: String,
        /// The OS's error.
        source: std::io::Error,
    },
    /// The peer's program failed, timed out, or printed what cannot be read (the
    /// message says which, with the end of its output).
    Failed(String),
}

impl fmt::Display for PeerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerError::Probe(e) => e.fmt(f),
            PeerError::Io { what, source } => write!(f, "{what}: {source}"),
            PeerError::Failed(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for PeerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PeerError::Probe(e) => e.source(),
            PeerError::Io { source, .. } => Some(source),
            PeerError::Failed(_) => None,
        }
    }
}

impl From<ProbeError> for PeerError {
    fn from(e: ProbeError) -> Self {
        PeerError::Probe(e)
    }
}
