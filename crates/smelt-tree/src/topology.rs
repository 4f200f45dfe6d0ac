//! Tree generators behind one interface, [`Topology`].
//!
//! Every generator is a pure, deterministic function of the costs among the
//! members, the root and (for the machine-aware ones) the members' nodes. Static
//! trees lay the members out in the order given with the root moved to the front
//! (rank 0), as MPI libraries do.

use crate::costs::Costs;
use crate::optimize;
use crate::sim::{self, Op};
use crate::tree::{Tree, TreeError};
use crate::Error;
use smelt_model::Model;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt;
use std::str::FromStr;

/// The non-tree algorithms' registry lives in `smelt-plan` (the runtime runs them
/// without this crate); re-exported here beside the trees'.
pub use smelt_plan::algorithm::{non_tree_help, non_tree_names, NonTree, NonTreeEntry, NON_TREE};
/// The rank-based layouts (star, binary, k-nomial) live in `smelt-plan`, where a
/// service that needs a tree without a machine model builds them.
use smelt_plan::shape::{ranked, Ranked};

/// A tree shape. The names are those of the CLI (`--algo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Topology {
    /// Star: the root sends to every member in turn.
    Sequential,
    /// Binary tree in rank order: rank `i` sends to `2i+1`, then `2i+2`.
    Binary,
    /// Fibonacci tree (larger left subtrees), filled in breadth-first order.
    Fibonacci,
    /// k-nomial tree of radix `k` (1 = chain, 2 = binomial); larger subtrees first.
    Knomial(u32),
    /// Prim's minimum spanning tree on `t_send + t_receive`, at most two children
    /// per member, children in the order Prim added them (as the Smelt Simulator).
    Mst,
    /// HMPI-style: binary tree between node leaders, sequential sends inside a node.
    Cluster,
    /// The paper's bad tree: the same MST on inverted costs.
    Bad,
    /// Smelt's adaptive tree (Algorithm 1).
    Adaptive,
    /// Adaptive tree, sends reordered by the cost of the receiving subtree (§3.3.1).
    AdaptiveSorted,
    /// Adaptive tree with shuffling and re-sorting (§3.3.2).
    AdaptiveShuffled,
    /// Beyond the paper: local search seeded with the adaptive trees (never worse
    /// than `adaptive-shuffled` for the broadcast).
    Optimized,
    /// Beyond the paper: the same search scored by another operation's predicted
    /// time (`optimized:reduce`, `optimized:barrier`, ...); never slower for it than
    /// any other topology. `OptimizedFor(Op::Broadcast)` is `Optimized`.
    OptimizedFor(Op),
    /// The tuned choice ([`crate::tuning::resolve_auto`]): `SMELT_TUNE`, else this
    /// host's tuning file, else the simulator's best candidate. [`Topology::generate`]
    /// resolves it for a one-line broadcast; callers that know the operation and
    /// message size call [`resolve_auto`](crate::tuning::resolve_auto) themselves.
    /// Over costs alone ([`Topology::children`]) it is the predicted choice.
    Auto,
}

impl Topology {
    /// The topologies `smelt evaluate` compares, static ones first.
    pub const EVALUATED: [Topology; 12] = [
        Topology::Sequential,
        Topology::Binary,
        Topology::Fibonacci,
        Topology::Knomial(2),
        Topology::Knomial(4),
        Topology::Mst,
        Topology::Cluster,
        Topology::Bad,
        Topology::Adaptive,
        Topology::AdaptiveSorted,
        Topology::AdaptiveShuffled,
        Topology::Optimized,
    ];

    /// [`Topology::EVALUATED`] plus the trees optimized for reduce and barrier.
    pub const EVALUATED_EXTENDED: [Topology; 14] = {
        const N: usize = Topology::EVALUATED.len();
        let mut all = [Topology::OptimizedFor(Op::Reduce); N + 2];
        let mut i = 0;
        while i < N {
            all[i] = Topology::EVALUATED[i];
            i += 1;
        }
        all[N + 1] = Topology::OptimizedFor(Op::Barrier);
        all
    };

    /// True for the hardware-oblivious and classic machine-aware trees the paper
    /// compares against (everything but Smelt's adaptive trees and `optimized`).
    pub fn is_static(self) -> bool {
        self.generator().is_static
    }

    /// Builds the tree over `members` (positions in `model`) rooted at `root` (a
    /// position among `members`; default: the lowest average send cost). Tree
    /// member `i` is `members[i]`, identified by its OS CPU id.
    pub fn generate(
        self,
        model: &Model,
        members: &[usize],
        root: Option<usize>,
    ) -> Result<Tree, TreeError> {
        if self == Topology::Auto {
            let (t, _) = crate::tuning::resolve_auto_tree(
                Op::Broadcast,
                crate::tuning::LINE_BYTES,
                crate::tuning::SyncMode::Loose,
                model,
                members,
                root,
            )
            .map_err(|e| TreeError::Invalid(e.to_string()))?;
            return t.generate(model, members, root);
        }
        let c = Costs::new(model, members)?;
        let root = match root {
            None => c.default_root(),
            Some(r) => members.iter().position(|&m| m == r).ok_or_else(|| {
                TreeError::Invalid(format!(
                    "the root {} is not one of the members",
                    model
                        .cpus
                        .get(r)
                        .map(|c| format!("CPU {c}"))
                        .unwrap_or_else(|| format!("position {r}"))
                ))
            })?,
        };
        Ok(c.tree(root, self.children(&c, root)))
    }

    /// The child lists (local indices, send order) of this topology over `c`
    /// rooted at local index `root`. The fast path for rebuilding trees.
    pub fn children(self, c: &Costs, root: usize) -> Vec<Vec<usize>> {
        (self.generator().build)(self, c, root)
    }

    /// This topology's entry in the [`GENERATORS`] registry.
    pub fn generator(self) -> &'static Generator {
        let name = match self {
            Topology::Sequential => "sequential",
            Topology::Binary => "binary",
            Topology::Fibonacci => "fibonacci",
            Topology::Knomial(_) => "knomial",
            Topology::Mst => "mst",
            Topology::Cluster => "cluster",
            Topology::Bad => "bad",
            Topology::Adaptive => "adaptive",
            Topology::AdaptiveSorted => "adaptive-sorted",
            Topology::AdaptiveShuffled => "adaptive-shuffled",
            Topology::Optimized => "optimized",
            Topology::OptimizedFor(_) => "optimized",
            Topology::Auto => "auto",
        };
        GENERATORS
            .iter()
            .find(|g| g.name == name)
            .expect("every topology has a registry entry (checked by a test)")
    }

    /// The parameter's value in names (`knomial:4`, `optimized:reduce`), if any.
    fn param_text(self) -> Option<String> {
        match self {
            Topology::Knomial(k) => Some(k.to_string()),
            Topology::OptimizedFor(op) if op != Op::Broadcast => Some(op.name().to_string()),
            _ => None,
        }
    }
}

/// The parameter a tree generator takes after a colon in its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// None: the name alone.
    None,
    /// The k-nomial radix, an integer from 1 to [`MAX_RADIX`] (required).
    Radix,
    /// An operation to optimize for (optional; default broadcast).
    Op,
}

/// Largest k-nomial radix accepted by name.
pub const MAX_RADIX: u32 = 1024;

/// One tree generator of the registry: its name (as `--algo`, `--topologies`,
/// tuning files and the C API spell it), parameter, one-line description, whether it
/// is a static tree (hardware-oblivious or a classic machine-aware one) and its
/// builder. A new tree shape is a [`Topology`] variant plus one entry here.
pub struct Generator {
    /// Canonical name.
    pub name: &'static str,
    /// Other names accepted on input, each with the full name it stands for.
    pub aliases: &'static [(&'static str, &'static str)],
    /// What may follow `name:`.
    pub param: Param,
    /// One line for `--help` and `smelt tree --list`.
    pub description: &'static str,
    /// A static tree (compared against as "the best static tree").
    pub is_static: bool,
    /// The topology for a parameter value (radix, or the index of an [`Op`] in
    /// [`Op::ALL`]).
    make: fn(u32) -> Topology,
    /// The child lists (local indices, send order) over `c` from local root `root`.
    build: fn(Topology, &Costs, usize) -> Vec<Vec<usize>>,
}

impl fmt::Debug for Generator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Generator")
            .field("name", &self.name)
            .field("param", &self.param)
            .finish_non_exhaustive()
    }
}

impl Generator {
    /// The name as written with its parameter placeholder (`knomial:K`).
    pub fn usage(&self) -> String {
        match self.param {
            Param::None => self.name.to_string(),
            Param::Radix => format!("{}:K", self.name),
            Param::Op => format!("{}[:OP]", self.name),
        }
    }
}

/// Every tree generator, in display order.
pub static GENERATORS: &[Generator] = &[
    Generator {
        name: "sequential",
        aliases: &[("star", "sequential"), ("flat", "sequential")],
        param: Param::None,
        description: "star: the root sends to every member in turn",
        is_static: true,
        make: |_| Topology::Sequential,
        build: |_, c, root| Ranked::Sequential.children(c.len(), root),
    },
    Generator {
        name: "binary",
        aliases: &[("bintree", "binary")],
        param: Param::None,
        description: "binary tree in rank order: rank i sends to 2i+1, then 2i+2",
        is_static: true,
        make: |_| Topology::Binary,
        build: |_, c, root| Ranked::Binary.children(c.len(), root),
    },
    Generator {
        name: "fibonacci",
        aliases: &[],
        param: Param::None,
        description: "Fibonacci tree (larger left subtrees), filled breadth first",
        is_static: true,
        make: |_| Topology::Fibonacci,
        build: |_, c, root| fibonacci(c.len(), root),
    },
    Generator {
        name: "knomial",
        aliases: &[("chain", "knomial:1"), ("binomial", "knomial:2")],
        param: Param::Radix,
        description: "k-nomial tree of radix K (1 = chain, 2 = binomial), larger subtrees first",
        is_static: true,
        make: Topology::Knomial,
        build: |t, c, root| {
            let k = match t {
                Topology::Knomial(k) => k,
                _ => 2,
            };
            Ranked::Knomial(k).children(c.len(), root)
        },
    },
    Generator {
        name: "mst",
        aliases: &[],
        param: Param::None,
        description:
            "Prim's minimum spanning tree on send + receive cost, at most two children each",
        is_static: true,
        make: |_| Topology::Mst,
        build: |_, c, root| prim2(c, root, false),
    },
    Generator {
        name: "cluster",
        aliases: &[],
        param: Param::None,
        description: "HMPI-style: binary tree between NUMA-node leaders, sequential inside a node",
        is_static: true,
        make: |_| Topology::Cluster,
        build: |_, c, root| cluster(c, root),
    },
    Generator {
        name: "bad",
        aliases: &[("badtree", "bad")],
        param: Param::None,
        description: "the paper's bad tree: the same spanning tree on inverted costs",
        is_static: true,
        make: |_| Topology::Bad,
        build: |_, c, root| prim2(c, root, true),
    },
    Generator {
        name: "adaptive",
        aliases: &[("adaptivetree", "adaptive")],
        param: Param::None,
        description: "Smelt's adaptive tree (the paper's Algorithm 1)",
        is_static: false,
        make: |_| Topology::Adaptive,
        build: |_, c, root| adaptive(c, root),
    },
    Generator {
        name: "adaptive-sorted",
        aliases: &[("adaptivetree-sort", "adaptive-sorted")],
        param: Param::None,
        description: "adaptive tree, sends reordered by the cost of the receiving subtree",
        is_static: false,
        make: |_| Topology::AdaptiveSorted,
        build: |_, c, root| {
            let mut ch = adaptive(c, root);
            sort_sends(c, root, &mut ch);
            ch
        },
    },
    Generator {
        name: "adaptive-shuffled",
        aliases: &[("adaptivetree-shuffle-sort", "adaptive-shuffled")],
        param: Param::None,
        description: "adaptive tree with shuffling and re-sorting (smelt's default)",
        is_static: false,
        make: |_| Topology::AdaptiveShuffled,
        build: |_, c, root| {
            let mut ch = adaptive(c, root);
            sort_sends(c, root, &mut ch);
            shuffle(c, root, &mut ch);
            ch
        },
    },
    Generator {
        name: "optimized",
        aliases: &[],
        param: Param::Op,
        description: "local search seeded with the adaptive trees, scored by OP's predicted time \
                      (default broadcast; OP = any operation name)",
        is_static: false,
        make: |i| match Op::ALL.get(i as usize).copied() {
            None | Some(Op::Broadcast) => Topology::Optimized,
            Some(op) => Topology::OptimizedFor(op),
        },
        build: |t, c, root| match t {
            Topology::OptimizedFor(op) if op != Op::Broadcast => {
                optimize::optimized_for(c, root, op, &optimize::Options::default())
            }
            _ => optimize::optimized(c, root, &optimize::Options::default()),
        },
    },
    Generator {
        name: "auto",
        aliases: &[("tuned", "auto")],
        param: Param::None,
        description: "the tuned choice: SMELT_TUNE, else this host's tuning file (smelt tune), \
                      else the simulator's best candidate (the default)",
        is_static: false,
        make: |_| Topology::Auto,
        build: |_, c, root| crate::tuning::auto_children(c, root),
    },
];

/// The names `FromStr` accepts, with their aliases, for error messages.
pub fn names() -> String {
    GENERATORS
        .iter()
        .map(|g| {
            let mut s = g.usage();
            if !g.aliases.is_empty() {
                let a: Vec<String> = g
                    .aliases
                    .iter()
                    .map(|(a, full)| format!("{a} = {full}"))
                    .collect();
                s.push_str(&format!(" ({})", a.join(", ")));
            }
            s
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One line per generator (`name  description`), for `--help` texts.
pub fn help() -> String {
    let w = GENERATORS
        .iter()
        .map(|g| g.usage().len())
        .max()
        .unwrap_or(0);
    GENERATORS
        .iter()
        .map(|g| format!("  {:w$}  {}\n", g.usage(), g.description))
        .collect()
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.generator().name)?;
        match self.param_text() {
            Some(p) => write!(f, ":{p}"),
            None => Ok(()),
        }
    }
}

impl FromStr for Topology {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.trim().to_ascii_lowercase();
        let (name, param) = match lower.split_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (lower.as_str(), None),
        };
        let alias = GENERATORS
            .iter()
            .flat_map(|g| g.aliases.iter())
            .find(|(a, _)| *a == lower);
        if let Some((_, full)) = alias {
            return full.parse();
        }
        let g = GENERATORS
            .iter()
            .find(|g| g.name == name)
            .ok_or_else(|| format!("unknown topology '{s}' (known: {})", names()))?;
        let value = match (g.param, param) {
            (Param::None, None) => 0,
            (Param::None, Some(_)) => {
                return Err(format!("'{s}': the topology {} takes no parameter", g.name))
            }
            (Param::Radix, p) => match p.map(|k| k.parse::<u32>()) {
                Some(Ok(k)) if (1..=MAX_RADIX).contains(&k) => k,
                _ => {
                    return Err(format!(
                        "bad radix '{}' in '{s}': expected {}:K with K from 1 to {MAX_RADIX}",
                        p.unwrap_or(""),
                        g.name
                    ))
                }
            },
            (Param::Op, None) => 0,
            (Param::Op, Some(o)) => match Op::ALL.iter().position(|op| op.name() == o) {
                Some(i) => i as u32,
                None => {
                    return Err(format!(
                        "unknown operation '{o}' in '{s}': expected {}:OP with OP one of {}",
                        g.name,
                        Op::ALL.map(|o| o.name()).join(", ")
                    ))
                }
            },
        };
        Ok((g.make)(value))
    }
}

/// What runs a collective: a tree of the [`GENERATORS`] registry, or a [`NonTree`]
/// algorithm (for the operations it implements). Tuning files, `SMELT_TUNE` and
/// `smelt tune --candidates` name either; [`FromStr`] parses both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// A tree (every operation).
    Tree(Topology),
    /// A non-tree algorithm (only its operations).
    NonTree(NonTree),
}

impl Algorithm {
    /// The tree, if this is one.
    pub fn tree(self) -> Option<Topology> {
        match self {
            Algorithm::Tree(t) => Some(t),
            Algorithm::NonTree(_) => None,
        }
    }

    /// The non-tree algorithm, if this is one.
    pub fn non_tree(self) -> Option<NonTree> {
        match self {
            Algorithm::NonTree(a) => Some(a),
            Algorithm::Tree(_) => None,
        }
    }

    /// True if it can run `op` (trees run every operation).
    pub fn applies_to(self, op: Op) -> bool {
        match self {
            Algorithm::Tree(_) => true,
            Algorithm::NonTree(a) => a.applies_to(op),
        }
    }

    /// `Ok` if it can run `op`, else an error naming what it runs.
    pub fn check_op(self, op: Op) -> Result<(), Error> {
        self.check_op_why(op).map_err(Error::Op)
    }

    fn check_op_why(self, op: Op) -> Result<(), String> {
        match self {
            Algorithm::NonTree(a) if !a.applies_to(op) => Err(format!(
                "'{a}' runs {} only, not {op}",
                a.entry()
                    .ops
                    .iter()
                    .map(|o| o.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            _ => Ok(()),
        }
    }
}

impl From<Topology> for Algorithm {
    fn from(t: Topology) -> Algorithm {
        Algorithm::Tree(t)
    }
}

impl From<NonTree> for Algorithm {
    fn from(a: NonTree) -> Algorithm {
        Algorithm::NonTree(a)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Algorithm::Tree(t) => t.fmt(f),
            Algorithm::NonTree(a) => a.fmt(f),
        }
    }
}

impl FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Algorithm, String> {
        if let Ok(a) = s.parse::<NonTree>() {
            return Ok(Algorithm::NonTree(a));
        }
        s.parse::<Topology>().map(Algorithm::Tree).map_err(|e| {
            if e.starts_with("unknown topology") {
                format!(
                    "unknown algorithm '{s}' (trees: {}; non-tree: {})",
                    names(),
                    non_tree_names()
                )
            } else {
                e // a tree's name with a bad parameter: the tree parser says what
            }
        })
    }
}

/// Fibonacci tree: a subtree of order `i` has a root, a left subtree of order
/// `i−1` and a right one of order `i−2`. The smallest order with at least `n`
/// nodes is laid out breadth first and cut after `n` nodes; ranks follow that
/// order, left (larger) subtree sent first.
fn fibonacci(n: usize, root: usize) -> Vec<Vec<usize>> {
    // (order) per BFS node; children created lazily.
    let mut order = Vec::with_capacity(n);
    let mut kids: Vec<Vec<usize>> = Vec::with_capacity(n);
    // Smallest order with >= n nodes: N(i) = 1 + N(i-1) + N(i-2).
    let (mut a, mut b, mut i) = (0usize, 1usize, 1usize); // N(i-1), N(i)
    while b < n {
        let c = 1 + a + b;
        a = b;
        b = c;
        i += 1;
    }
    order.push(i);
    kids.push(Vec::new());
    let mut head = 0;
    while order.len() < n && head < order.len() {
        let o = order[head];
        for co in [o.wrapping_sub(1), o.wrapping_sub(2)] {
            if o >= 2 && co >= 1 && co < o && order.len() < n {
                order.push(co);
                kids.push(Vec::new());
                let id = order.len() - 1;
                kids[head].push(id);
            }
        }
        head += 1;
    }
    ranked(n, root, |r, _| kids[r].clone())
}

/// Prim's algorithm from `root` on `t_send + t_receive` (negated when `invert`),
/// at most two children per member; ties go to the earlier-visited parent, then
/// the lower index. Every visited member keeps its candidates sorted by cost and a
/// cursor to the first one still unvisited, so a step scans the visited members
/// once: O(n² log n) time in cache-friendly sorts, O(n²) memory.
fn prim2(c: &Costs, root: usize, invert: bool) -> Vec<Vec<usize>> {
    const MAX_CHILDREN: usize = 2;
    let n = c.len();
    let w = |p: usize, x: usize| if invert { -c.sr(p, x) } else { c.sr(p, x) };
    let mut ch = vec![Vec::new(); n];
    let mut visited = vec![false; n];
    let mut order: Vec<usize> = Vec::with_capacity(n);
    let mut cands: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut cursor = vec![0usize; n];
    let visit =
        |p: usize, visited: &mut Vec<bool>, order: &mut Vec<usize>, cands: &mut Vec<Vec<u32>>| {
            visited[p] = true;
            order.push(p);
            let mut v: Vec<u32> = (0..n).filter(|&x| !visited[x]).map(|x| x as u32).collect();
            v.sort_by(|&a, &b| {
                w(p, a as usize)
                    .total_cmp(&w(p, b as usize))
                    .then(a.cmp(&b))
            });
            cands[p] = v;
        };
    visit(root, &mut visited, &mut order, &mut cands);
    for _ in 1..n {
        let mut best: Option<(f64, usize, usize)> = None;
        for &p in &order {
            if ch[p].len() >= MAX_CHILDREN {
                continue;
            }
            let list = &cands[p];
            let mut k = cursor[p];
            while k < list.len() && visited[list[k] as usize] {
                k += 1;
            }
            cursor[p] = k;
            if let Some(&x) = list.get(k) {
                let x = x as usize;
                let wx = w(p, x);
                if best.is_none_or(|(bw, _, _)| wx < bw) {
                    best = Some((wx, p, x));
                }
            }
        }
        // Every visited member saturated (only possible with MAX_CHILDREN < 1).
        let Some((_, p, x)) = best else { break };
        ch[p].push(x);
        if ch[p].len() >= MAX_CHILDREN {
            cands[p] = Vec::new();
        }
        visit(x, &mut visited, &mut order, &mut cands);
    }
    ch
}

/// HMPI-style cluster tree: one leader per node (the root for its own node, else
/// the node's first member), a binary tree between leaders (root's node first,
/// then nodes in order of first appearance), then sequential sends inside each node.
/// A leader sends to its child leaders first, then to its local members.
fn cluster(c: &Costs, root: usize) -> Vec<Vec<usize>> {
    let n = c.len();
    let mut groups: Vec<(usize, Vec<usize>)> = vec![(c.node[root], vec![root])];
    for i in 0..n {
        if i == root {
            continue;
        }
        match groups.iter_mut().find(|(g, _)| *g == c.node[i]) {
            Some((_, v)) => v.push(i),
            None => groups.push((c.node[i], vec![i])),
        }
    }
    let mut ch = vec![Vec::new(); n];
    let leaders: Vec<usize> = groups.iter().map(|(_, v)| v[0]).collect();
    for (gi, (_, members)) in groups.iter().enumerate() {
        let l = members[0];
        for k in [2 * gi + 1, 2 * gi + 2] {
            if k < leaders.len() {
                ch[l].push(leaders[k]);
            }
        }
        ch[l].extend_from_slice(&members[1..]);
    }
    ch
}

#[derive(PartialEq)]
struct Idle {
    t: f64,
    v: usize,
}
impl Eq for Idle {}
impl Ord for Idle {
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.total_cmp(&self.t).then(o.v.cmp(&self.v))
    }
}
impl PartialOrd for Idle {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// Smelt's adaptive tree (Algorithm 1), as an event-based simulation: the member
/// that becomes idle first picks, among the inactive members on its own node or
/// on a node nobody has sent to yet, the one with the highest `t_send + t_receive`
/// from it; if that one is remote it instead sends to the cheapest (`t_send`)
/// member of that node and marks the node active. A send keeps the sender busy
/// for `t_send`; the receiver becomes active `t_receive` later. O(n²).
pub fn adaptive(c: &Costs, root: usize) -> Vec<Vec<usize>> {
    let n = c.len();
    let nodes = c.node.iter().copied().max().unwrap_or(0) + 1;
    let mut core_active = vec![false; n];
    let mut node_active = vec![false; nodes];
    core_active[root] = true;
    node_active[c.node[root]] = true;
    let mut ch = vec![Vec::new(); n];
    let mut heap = BinaryHeap::with_capacity(n);
    heap.push(Idle { t: 0.0, v: root });
    let mut remaining = n - 1;
    while let Some(Idle { t, v: i }) = heap.pop() {
        if remaining == 0 {
            break;
        }
        let ni = c.node[i];
        let mut best: Option<(f64, usize)> = None;
        for x in 0..n {
            if core_active[x] || (c.node[x] != ni && node_active[c.node[x]]) {
                continue;
            }
            let w = c.sr(i, x);
            if best.is_none_or(|(bw, _)| w > bw) {
                best = Some((w, x));
            }
        }
        let Some((_, mut x)) = best else { continue };
        if c.node[x] != ni {
            let g = c.node[x];
            let mut cheap = (f64::INFINITY, x);
            for (y, &ny) in c.node.iter().enumerate() {
                if ny == g && !core_active[y] && c.s(i, y) < cheap.0 {
                    cheap = (c.s(i, y), y);
                }
            }
            x = cheap.1;
            node_active[g] = true;
        }
        core_active[x] = true;
        remaining -= 1;
        ch[i].push(x);
        let done = t + c.s(i, x);
        heap.push(Idle { t: done, v: i });
        heap.push(Idle {
            t: done + c.r(i, x),
            v: x,
        });
    }
    ch
}

/// Members in post-order (children before parents).
pub(crate) fn postorder(root: usize, ch: &[Vec<usize>]) -> Vec<usize> {
    let mut pre = Vec::with_capacity(ch.len());
    let mut stack = vec![root];
    while let Some(v) = stack.pop() {
        pre.push(v);
        stack.extend_from_slice(&ch[v]);
    }
    pre.reverse();
    pre
}

/// Reorders every member's sends by the cost of the receiving subtree, most
/// expensive first (§3.3.1): the key of child `c` of `p` is `t_receive(p, c)` plus
/// the broadcast latency of `c`'s subtree. For a fixed tree shape this order is
/// optimal for the broadcast (Jackson's rule: largest delivery tail first).
/// Returns the subtree latency of every member. O(n log n).
pub fn sort_sends(c: &Costs, root: usize, ch: &mut [Vec<usize>]) -> Vec<f64> {
    let mut sub = vec![0.0f64; c.len()];
    for v in postorder(root, ch) {
        let kids = &mut ch[v];
        kids.sort_by(|&a, &b| {
            let ta = c.r(v, a) + sub[a];
            let tb = c.r(v, b) + sub[b];
            tb.total_cmp(&ta)
        });
        let mut t = 0.0f64;
        let mut m = 0.0f64;
        for &k in kids.iter() {
            t += c.s(v, k);
            m = m.max(t + c.r(v, k) + sub[k]);
        }
        sub[v] = m;
    }
    sub
}

/// Shuffling (§3.3.2): the member that receives last (`v_e`) is moved, with its
/// subtree, under a member `v_s` that becomes idle (done with all its sends) early
/// enough that `t_send + t_receive < t_slack`; then all sends are re-sorted and the
/// change is kept if the broadcast got faster. The paper takes the member that is
/// idle first as `v_s`; when that move does not help we also try the next idle
/// ones, in order of idle time. Repeats until no move helps.
pub fn shuffle(c: &Costs, root: usize, ch: &mut Vec<Vec<usize>>) {
    let n = c.len();
    let mut cur = sim::broadcast_latency(c, root, ch);
    'outer: for _ in 0..n.max(1) * 4 {
        let at = sim::broadcast_arrivals(c, root, ch, 1.0, 0.0);
        let (mut e, mut te) = (root, f64::NEG_INFINITY);
        for (v, &t) in at.iter().enumerate() {
            if t > te {
                (e, te) = (v, t);
            }
        }
        if e == root {
            return;
        }
        let inside = subtree_mask(ch, e);
        let mut idle: Vec<(f64, usize)> = (0..n)
            .filter(|&v| !inside[v] && !ch[v].contains(&e))
            .map(|v| (at[v] + ch[v].iter().map(|&k| c.s(v, k)).sum::<f64>(), v))
            .collect();
        idle.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (ts, s) in idle {
            if c.sr(s, e) >= te - ts {
                continue;
            }
            let mut next = ch.clone();
            for kids in next.iter_mut() {
                kids.retain(|&k| k != e);
            }
            next[s].push(e);
            sort_sends(c, root, &mut next);
            let lat = sim::broadcast_latency(c, root, &next);
            if lat < cur {
                cur = lat;
                *ch = next;
                continue 'outer;
            }
        }
        return;
    }
}

/// `mask[v]` is true for `v` and every member below it.
pub(crate) fn subtree_mask(ch: &[Vec<usize>], top: usize) -> Vec<bool> {
    let mut mask = vec![false; ch.len()];
    let mut stack = vec![top];
    while let Some(v) = stack.pop() {
        mask[v] = true;
        stack.extend_from_slice(&ch[v]);
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extended_list_is_the_evaluated_one_plus_reduce_and_barrier() {
        let (head, tail) = Topology::EVALUATED_EXTENDED.split_at(Topology::EVALUATED.len());
        assert_eq!(head, Topology::EVALUATED);
        assert_eq!(
            tail,
            [
                Topology::OptimizedFor(Op::Reduce),
                Topology::OptimizedFor(Op::Barrier)
            ]
        );
    }

    /// The registry is the one list of names: every topology prints as a name that
    /// parses back to it, every entry is reachable, aliases resolve.
    #[test]
    fn registry_round_trips() {
        let mut all: Vec<Topology> = Topology::EVALUATED_EXTENDED.to_vec();
        all.extend([1, 3, 16, MAX_RADIX].map(Topology::Knomial));
        all.push(Topology::OptimizedFor(Op::AtomicBroadcast));
        all.push(Topology::OptimizedFor(Op::TwoPhaseCommit));
        for t in all {
            assert_eq!(t.to_string().parse::<Topology>(), Ok(t), "{t}");
            assert_eq!(t.generator().is_static, t.is_static());
        }
        for g in GENERATORS {
            let probe = match g.param {
                Param::Radix => format!("{}:2", g.name),
                _ => g.name.to_string(),
            };
            let t: Topology = probe.parse().unwrap();
            assert_eq!(t.generator().name, g.name);
            for (a, full) in g.aliases {
                assert_eq!(a.parse::<Topology>(), full.parse::<Topology>());
            }
            assert!(help().contains(g.description));
        }
        assert_eq!("chain".parse(), Ok(Topology::Knomial(1)));
        assert_eq!("optimized:broadcast".parse(), Ok(Topology::Optimized));
        for bad in [
            "knomial",
            "knomial:0",
            "knomial:1025",
            "binary:2",
            "optimized:x",
            "nope",
        ] {
            let e = bad.parse::<Topology>().unwrap_err();
            assert!(e.contains(bad.split(':').next_back().unwrap()), "{e}");
        }
    }

    /// Non-tree algorithms parse by name and alias next to the trees, print back to
    /// their names, and are refused for operations they do not implement.
    #[test]
    fn non_tree_algorithms_parse_beside_the_trees() {
        for a in NonTree::ALL {
            assert_eq!(a.entry().algorithm, a);
            let alg = Algorithm::NonTree(a);
            assert_eq!(alg.to_string().parse::<Algorithm>(), Ok(alg));
            for al in a.entry().aliases {
                assert_eq!(al.parse::<Algorithm>(), Ok(alg));
            }
            assert!(non_tree_help().contains(a.entry().description));
            // Not a tree: the tree parser does not take it.
            assert!(a.name().parse::<Topology>().is_err());
        }
        assert_eq!(
            "recursive_doubling".parse(),
            Ok(Algorithm::NonTree(NonTree::RecursiveDoubling))
        );
        assert_eq!("binary".parse(), Ok(Algorithm::Tree(Topology::Binary)));
        let d = Algorithm::NonTree(NonTree::Dissemination);
        assert!(d.applies_to(Op::Barrier) && !d.applies_to(Op::Allreduce));
        let e = d.check_op(Op::Reduce).unwrap_err().to_string();
        assert!(e.contains("barrier") && e.contains("reduce"), "{e}");
        assert!(Algorithm::Tree(Topology::Binary)
            .check_op(Op::Gather)
            .is_ok());
        let e = "gossip".parse::<Algorithm>().unwrap_err();
        assert!(
            e.contains("gossip") && e.contains("dissemination") && e.contains("binary"),
            "{e}"
        );
    }
}
