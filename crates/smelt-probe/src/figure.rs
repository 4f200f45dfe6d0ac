//! One figure of a comparison run: what it measures, how many threads took part, and
//! its outcome. smelt's own measurements ([`crate::transport`], the collectives of
//! `smelt bench`) and the peers they are compared with (the `smelt-peers` crate) report
//! in this one type, so a report treats them alike.
//!
//! A missing toolchain makes a figure [`Status::Skipped`], a crash or timeout makes it
//! [`Status::Failed`]; neither is an error of the benchmark as a whole.

use crate::stats::Summary;
use serde::{Deserialize, Serialize};

/// What a figure measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// One-way latency of a message, ns.
    Latency,
    /// ns per message when streaming (inverse throughput).
    Throughput,
    /// ns per barrier.
    Barrier,
    /// ns per broadcast of one small message.
    Broadcast,
    /// ns per reduction of one integer.
    Reduce,
}

/// The outcome of one peer measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Status {
    /// Measured: ns per operation.
    Ok {
        /// Robust summary of ns per operation over the timed batches.
        ns: Summary,
    },
    /// Not run, with the reason (e.g. "no mpicc").
    Skipped {
        /// Why.
        reason: String,
    },
    /// Ran but failed (crash, timeout, unparsable output).
    Failed {
        /// What happened.
        reason: String,
    },
}

/// One figure: a peer's, or smelt's own measured the same way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerResult {
    /// Peer name, e.g. `pthread_barrier`, `omp_barrier(gcc)`, `mpi_bcast_1B`.
    pub name: String,
    /// What it measures.
    pub metric: Metric,
    /// Threads or ranks taking part.
    pub threads: usize,
    /// Outcome.
    #[serde(flatten)]
    pub status: Status,
}

impl PeerResult {
    /// A figure from a measurement's outcome: the summary, or why it failed (any error,
    /// kept as its text).
    pub fn measured<E: std::fmt::Display>(
        name: impl Into<String>,
        metric: Metric,
        threads: usize,
        r: Result<Summary, E>,
    ) -> PeerResult {
        PeerResult {
            name: name.into(),
            metric,
            threads,
            status: match r {
                Ok(ns) => Status::Ok { ns },
                Err(e) => Status::Failed {
                    reason: e.to_string(),
                },
            },
        }
    }

    /// The median ns per operation, if measured.
    pub fn median(&self) -> Option<f64> {
        match &self.status {
            Status::Ok { ns } => Some(ns.median),
            _ => None,
        }
    }
}
