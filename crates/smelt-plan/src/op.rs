//! The one vocabulary of collective operations: the simulator predicts them, the
//! runtime measures them, `smelt bench`, `smelt evaluate`, tuning files, the C API and
//! the CLI name them, all with the names and the parser here.

use std::fmt;
use std::str::FromStr;

/// A collective operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// Broadcast from the root: time until the last member holds the message.
    Broadcast,
    /// "ab": the broadcast plus the last member's completion message back to the root
    /// (what the Smelt paper and its machine database measure).
    AtomicBroadcast,
    /// Children-to-parent combining up to the root.
    Reduce,
    /// Reduce, then broadcast of the result: every member holds it.
    Allreduce,
    /// Reduce of nothing, then broadcast of nothing.
    Barrier,
    /// Every member's part collected at the root, in rank order.
    Gather,
    /// The root's parts handed out, one per member.
    Scatter,
    /// Two-phase commit: broadcast "prepare", reduce the votes, broadcast the decision.
    TwoPhaseCommit,
}

/// Every name [`Op::from_str`] accepts, canonical ones first, for messages.
pub const NAMES: &str = "broadcast (bcast), ab, reduce (reduction), allreduce, barrier, gather, \
scatter, 2pc (two-phase-commit, agreement)";

impl Op {
    /// Every operation, in display order.
    pub const ALL: [Op; 8] = [
        Op::Broadcast,
        Op::AtomicBroadcast,
        Op::Reduce,
        Op::Allreduce,
        Op::Barrier,
        Op::Gather,
        Op::Scatter,
        Op::TwoPhaseCommit,
    ];

    /// The operations the simulator models in its own right (the others follow from
    /// them: the tree crate's `Prediction::get`); the columns of
    /// `smelt evaluate`.
    pub const SIMULATED: [Op; 5] = [
        Op::Broadcast,
        Op::AtomicBroadcast,
        Op::Reduce,
        Op::Barrier,
        Op::TwoPhaseCommit,
    ];

    /// The operations the runtime runs (and `smelt bench`, `smelt tune` measure);
    /// "ab" is the broadcast measured the paper's way.
    pub const RUN: [Op; 7] = [
        Op::Broadcast,
        Op::Reduce,
        Op::Allreduce,
        Op::Barrier,
        Op::Gather,
        Op::Scatter,
        Op::TwoPhaseCommit,
    ];

    /// Canonical name, as tables, JSON, tuning files and the C API write it.
    pub fn name(self) -> &'static str {
        match self {
            Op::Broadcast => "broadcast",
            Op::AtomicBroadcast => "ab",
            Op::Reduce => "reduce",
            Op::Allreduce => "allreduce",
            Op::Barrier => "barrier",
            Op::Gather => "gather",
            Op::Scatter => "scatter",
            Op::TwoPhaseCommit => "2pc",
        }
    }

    /// The operation named `name` (canonical names and aliases, any case), if any.
    pub fn from_name(name: &str) -> Option<Op> {
        name.parse().ok()
    }

    /// True for the operations that move data whose size matters (everything but
    /// the barrier and 2PC, whose messages are empty or one word).
    pub fn carries_data(self) -> bool {
        !matches!(self, Op::Barrier | Op::TwoPhaseCommit)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Op {
    type Err = String;
    fn from_str(s: &str) -> Result<Op, String> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "broadcast" | "bcast" => Op::Broadcast,
            "ab" | "atomic-broadcast" => Op::AtomicBroadcast,
            "reduce" | "reduction" => Op::Reduce,
            "allreduce" => Op::Allreduce,
            "barrier" | "barriers" => Op::Barrier,
            "gather" => Op::Gather,
            "scatter" => Op::Scatter,
            "2pc" | "two-phase-commit" | "agreement" => Op::TwoPhaseCommit,
            other => return Err(format!("unknown operation '{other}' (known: {NAMES})")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_aliases_parse() {
        for op in Op::ALL {
            assert_eq!(op.name().parse::<Op>(), Ok(op));
            assert_eq!(op.to_string().to_uppercase().parse::<Op>(), Ok(op));
            assert!(NAMES.contains(op.name()));
        }
        for op in Op::SIMULATED.iter().chain(&Op::RUN) {
            assert!(Op::ALL.contains(op));
        }
        assert_eq!("bcast".parse(), Ok(Op::Broadcast));
        assert_eq!("agreement".parse(), Ok(Op::TwoPhaseCommit));
        let e = "gossip".parse::<Op>().unwrap_err();
        assert!(e.contains("gossip") && e.contains("allreduce"), "{e}");
        assert_eq!(Op::from_name("scatter"), Some(Op::Scatter));
    }
}
