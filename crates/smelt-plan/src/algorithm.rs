//! The collective algorithms that are not trees ([`NonTree`], with their registry
//! [`NON_TREE`] beside the tree crate's registry of tree generators) and the two
//! synchronization [`SyncMode`]s a tuning distinguishes: names only, what the runtime
//! runs and the tree crate's tuning chooses.

use crate::op::Op;
use std::fmt;
use std::str::FromStr;

/// A collective algorithm that is not a tree: it runs between all members of a group
/// over links that are not tree edges (the runtime builds them when a group may run
/// it: `GroupConfig::algorithms`). The names are in [`NON_TREE`], beside the tree
/// crate's registry of generators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NonTree {
    /// Dissemination barrier (Hensgen, Finkel and Manber): in round `k` member `i`
    /// signals member `i + 2^k` (mod n) and waits for member `i − 2^k`;
    /// ⌈log2 n⌉ rounds, any group size.
    Dissemination,
    /// Recursive-doubling allreduce: in step `k` member `i` exchanges its partial
    /// result with member `i XOR 2^k` and both combine (the lower rank's value first,
    /// so every member computes the same bits). With n not a power of two, the ranks
    /// from the largest power of two p ≤ n on first fold their value into rank
    /// `i − p` and get the result back from it at the end.
    RecursiveDoubling,
    /// Rabenseifner's allreduce for long vectors: a reduce-scatter by recursive
    /// halving (in step `k` member `i` sends the half of its current block that
    /// member `i XOR 2^k` keeps and combines the other half with what that member
    /// sends), then an allgather by recursive doubling over the same pairs in
    /// reverse; each member sends and receives about 2·(p−1)/p of the vector instead
    /// of log2 p whole vectors. Ranks from p on fold in first and get the result back,
    /// as in recursive doubling; the values are grouped as recursive doubling groups
    /// them, so both give the same bits.
    Rabenseifner,
    /// Ring allreduce for long vectors (Patarasuk and Yuan): the vector cut into n
    /// blocks; a reduce-scatter of n − 1 steps in which member `i` sends a block to
    /// member `i + 1` (mod n) and combines the one member `i − 1` sends, then an
    /// allgather of n − 1 steps passing the reduced blocks on round the ring. Each
    /// member sends and receives 2·(n−1)/n of the vector, only ever to its
    /// neighbours, for any n (no fold to a power of two). A block is combined along
    /// the ring starting at the member of its index, so the operation must be
    /// commutative (as the predefined ones are); an allreduce whose combine may not
    /// be runs Rabenseifner instead.
    Ring,
}

/// One non-tree algorithm of the registry: its name, aliases, the operations it
/// implements and a one-line description.
#[derive(Debug)]
pub struct NonTreeEntry {
    /// Canonical name (tuning files, `SMELT_TUNE`, `--candidates`, `smelt bench`).
    pub name: &'static str,
    /// Other names accepted on input.
    pub aliases: &'static [&'static str],
    /// The operations it implements.
    pub ops: &'static [Op],
    /// One line for `--help`.
    pub description: &'static str,
    /// The algorithm.
    pub algorithm: NonTree,
}

/// Every non-tree algorithm, in display order.
pub static NON_TREE: &[NonTreeEntry] = &[
    NonTreeEntry {
        name: "dissemination",
        aliases: &["dissemination-barrier"],
        ops: &[Op::Barrier],
        description: "barrier only: in round k member i signals i+2^k and waits for i-2^k \
                      (ceil(log2 n) rounds, links beyond the tree)",
        algorithm: NonTree::Dissemination,
    },
    NonTreeEntry {
        name: "recursive-doubling",
        aliases: &["recursive_doubling", "rd"],
        ops: &[Op::Allreduce],
        description: "allreduce only: member i exchanges with i XOR 2^k and combines; ranks \
                      beyond a power of two fold in first (links beyond the tree)",
        algorithm: NonTree::RecursiveDoubling,
    },
    NonTreeEntry {
        name: "rabenseifner",
        aliases: &["reduce-scatter-allgather", "rsag"],
        ops: &[Op::Allreduce],
        description: "allreduce only, for long vectors: reduce-scatter by recursive halving \
                      then allgather by recursive doubling over the pairs i XOR 2^k (links \
                      beyond the tree)",
        algorithm: NonTree::Rabenseifner,
    },
    NonTreeEntry {
        name: "ring",
        aliases: &["ring-allreduce"],
        ops: &[Op::Allreduce],
        description: "allreduce only, for long vectors and commutative operations: \
                      reduce-scatter then allgather of n blocks round the ring i -> i+1 \
                      (2(n-1) steps, neighbours only; links beyond the tree)",
        algorithm: NonTree::Ring,
    },
];

impl NonTree {
    /// Every non-tree algorithm.
    pub const ALL: [NonTree; 4] = [
        NonTree::Dissemination,
        NonTree::RecursiveDoubling,
        NonTree::Rabenseifner,
        NonTree::Ring,
    ];

    /// This algorithm's entry in [`NON_TREE`].
    pub fn entry(self) -> &'static NonTreeEntry {
        NON_TREE
            .iter()
            .find(|e| e.algorithm == self)
            .expect("every non-tree algorithm has a registry entry (checked by a test)")
    }

    /// Canonical name.
    pub fn name(self) -> &'static str {
        self.entry().name
    }

    /// True if it implements `op`.
    pub fn applies_to(self, op: Op) -> bool {
        self.entry().ops.contains(&op)
    }
}

impl fmt::Display for NonTree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for NonTree {
    type Err = String;
    fn from_str(s: &str) -> Result<NonTree, String> {
        let lower = s.trim().to_ascii_lowercase();
        NON_TREE
            .iter()
            .find(|e| e.name == lower || e.aliases.contains(&lower.as_str()))
            .map(|e| e.algorithm)
            .ok_or_else(|| {
                format!(
                    "unknown non-tree algorithm '{s}' (known: {})",
                    non_tree_names()
                )
            })
    }
}

/// The non-tree names with their aliases and operations, for messages.
pub fn non_tree_names() -> String {
    NON_TREE
        .iter()
        .map(|e| {
            let ops: Vec<&str> = e.ops.iter().map(|o| o.name()).collect();
            let mut s = format!("{} ({}", e.name, ops.join(", "));
            for a in e.aliases {
                s.push_str(&format!("; {a}"));
            }
            s + ")"
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One line per non-tree algorithm (`name  description`), for `--help` texts.
pub fn non_tree_help() -> String {
    let w = NON_TREE.iter().map(|e| e.name.len()).max().unwrap_or(0);
    NON_TREE
        .iter()
        .map(|e| format!("  {:w$}  {}\n", e.name, e.description))
        .collect()
}

/// How a collective synchronizes its members (seed 001, §3); a tuning tells the two
/// apart, and a group runs one (`smelt_runtime::SyncMode` is this type).
///
/// * **Loose** (the default): members enter and leave a collective freely; a member
///   leaves as soon as its own part is done, so back-to-back collectives pipeline (the
///   root may start the next broadcast while the leaves still receive the last one).
/// * **Strict**: data starts moving only after every member entered, and the collective
///   ends everywhere before the first member leaves: a barrier before and after it.
///   What benchmarks that time single collectives measure, and what a program needs
///   when it reuses buffers that other members may still be reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum SyncMode {
    /// Members enter and leave freely; back-to-back collectives pipeline.
    #[default]
    Loose,
    /// A barrier before and after every collective.
    Strict,
}

impl SyncMode {
    /// Both modes.
    pub const ALL: [SyncMode; 2] = [SyncMode::Loose, SyncMode::Strict];

    /// `loose` or `strict`.
    pub fn name(self) -> &'static str {
        match self {
            SyncMode::Loose => "loose",
            SyncMode::Strict => "strict",
        }
    }
}

impl fmt::Display for SyncMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SyncMode {
    type Err = String;
    fn from_str(s: &str) -> Result<SyncMode, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "loose" => Ok(SyncMode::Loose),
            "strict" => Ok(SyncMode::Strict),
            o => Err(format!(
                "unknown synchronization mode '{o}' (known: loose, strict)"
            )),
        }
    }
}
