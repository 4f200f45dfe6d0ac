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
use smelt_model::Model;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt;
use std::str::FromStr;

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
        !matches!(
            self,
            Topology::Adaptive
                | Topology::AdaptiveSorted
                | Topology::AdaptiveShuffled
                | Topology::Optimized
                | Topology::OptimizedFor(_)
        )
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
        let n = c.len();
        match self {
            Topology::Sequential => ranked(
                n,
                root,
                |r, n| if r == 0 { (1..n).collect() } else { vec![] },
            ),
            Topology::Binary => ranked(n, root, |r, n| {
                [2 * r + 1, 2 * r + 2]
                    .into_iter()
                    .filter(|&x| x < n)
                    .collect()
            }),
            Topology::Knomial(k) => {
                ranked(n, root, |r, n| knomial_children(r, n, k.max(1) as usize))
            }
            Topology::Fibonacci => fibonacci(n, root),
            Topology::Mst => prim2(c, root, false),
            Topology::Bad => prim2(c, root, true),
            Topology::Cluster => cluster(c, root),
            Topology::Adaptive => adaptive(c, root),
            Topology::AdaptiveSorted => {
                let mut ch = adaptive(c, root);
                sort_sends(c, root, &mut ch);
                ch
            }
            Topology::AdaptiveShuffled => {
                let mut ch = adaptive(c, root);
                sort_sends(c, root, &mut ch);
                shuffle(c, root, &mut ch);
                ch
            }
            Topology::Optimized | Topology::OptimizedFor(Op::Broadcast) => {
                optimize::optimized(c, root, &optimize::Options::default())
            }
            Topology::OptimizedFor(op) => {
                optimize::optimized_for(c, root, op, &optimize::Options::default())
            }
        }
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Topology::Sequential => f.write_str("sequential"),
            Topology::Binary => f.write_str("binary"),
            Topology::Fibonacci => f.write_str("fibonacci"),
            Topology::Knomial(k) => write!(f, "knomial:{k}"),
            Topology::Mst => f.write_str("mst"),
            Topology::Cluster => f.write_str("cluster"),
            Topology::Bad => f.write_str("bad"),
            Topology::Adaptive => f.write_str("adaptive"),
            Topology::AdaptiveSorted => f.write_str("adaptive-sorted"),
            Topology::AdaptiveShuffled => f.write_str("adaptive-shuffled"),
            Topology::Optimized => f.write_str("optimized"),
            Topology::OptimizedFor(op) => write!(f, "optimized:{}", op.name()),
        }
    }
}

/// The names `FromStr` accepts, for error messages and `--help`.
pub const NAMES: &str = "sequential (star), binary (bintree), fibonacci, knomial:K (chain = knomial:1, \
binomial = knomial:2), mst, cluster, bad (badtree), adaptive, adaptive-sorted, adaptive-shuffled, optimized, \
optimized:OP (OP = ab, reduce, barrier, 2pc)";

impl FromStr for Topology {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = match s.trim().to_ascii_lowercase().as_str() {
            "sequential" | "star" => Topology::Sequential,
            "binary" | "bintree" => Topology::Binary,
            "fibonacci" => Topology::Fibonacci,
            "chain" => Topology::Knomial(1),
            "binomial" => Topology::Knomial(2),
            "mst" => Topology::Mst,
            "cluster" => Topology::Cluster,
            "bad" | "badtree" => Topology::Bad,
            "adaptive" | "adaptivetree" => Topology::Adaptive,
            "adaptive-sorted" | "adaptivetree-sort" => Topology::AdaptiveSorted,
            "adaptive-shuffled" | "adaptivetree-shuffle-sort" => Topology::AdaptiveShuffled,
            "optimized" => Topology::Optimized,
            other => {
                if let Some(o) = other.strip_prefix("optimized:") {
                    return match Op::ALL.into_iter().find(|op| op.name() == o) {
                        Some(Op::Broadcast) => Ok(Topology::Optimized),
                        Some(op) => Ok(Topology::OptimizedFor(op)),
                        None => Err(format!(
                            "unknown operation '{o}' in '{s}': expected optimized:OP with OP one of broadcast, ab, reduce, barrier, 2pc"
                        )),
                    };
                }
                if let Some(k) = other.strip_prefix("knomial:") {
                    match k.parse::<u32>() {
                        Ok(k) if (1..=1024).contains(&k) => return Ok(Topology::Knomial(k)),
                        _ => {
                            return Err(format!(
                                "bad radix '{k}' in '{s}': expected knomial:K with K from 1 to 1024"
                            ))
                        }
                    }
                }
                return Err(format!("unknown topology '{s}' (known: {NAMES})"));
            }
        };
        Ok(t)
    }
}

/// Lays out a rank-based shape: rank 0 is `root`, ranks 1.. are the other members
/// in order; `kids(rank, n)` gives a rank's children in send order.
fn ranked(n: usize, root: usize, kids: impl Fn(usize, usize) -> Vec<usize>) -> Vec<Vec<usize>> {
    let mut seq = Vec::with_capacity(n);
    seq.push(root);
    seq.extend((0..n).filter(|&i| i != root));
    let mut ch = vec![Vec::new(); n];
    for r in 0..n {
        ch[seq[r]] = kids(r, n).into_iter().map(|x| seq[x]).collect();
    }
    ch
}

/// Children of rank `r` in a k-nomial tree of `n` ranks: at distance `k^s` for
/// every digit position `s` below `r`'s lowest non-zero base-k digit, largest
/// distance (largest subtree) first.
fn knomial_children(r: usize, n: usize, k: usize) -> Vec<usize> {
    if k == 1 {
        return if r + 1 < n { vec![r + 1] } else { vec![] };
    }
    let mut dists = Vec::new();
    let mut d = 1usize;
    while d < n && r.is_multiple_of(d.saturating_mul(k)) {
        dists.push(d);
        d = d.saturating_mul(k);
    }
    let mut out = Vec::new();
    for &d in dists.iter().rev() {
        for j in 1..k {
            let c = r + j * d;
            if c < n {
                out.push(c);
            }
        }
    }
    out
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
}
