//! Event-based simulator: the predicted time of broadcast, atomic broadcast with
//! acknowledgement ("AB"), reduce, barrier and two-phase commit over a tree, under
//! the Smelt machine model (§3.1 of the paper).
//!
//! # The model and its assumptions
//! - A member sending to `c` is blocked for `t_send(p, c)`; sends of one member are
//!   sequential, in the tree's send order. Members run in parallel.
//! - A message is available to its receiver as soon as the send ends (propagation
//!   time is 0, as in the paper). Taking it blocks the receiver for `t_receive(p, c)`;
//!   only then does the receiver hold the message and may forward it.
//! - Broadcast (the paper's `lat(T)`): child `c` of `p`, the k-th in send order,
//!   holds the message at `lat(p) + Σ_{i≤k} t_send(p, c_i) + t_receive(p, c)`; the
//!   broadcast time is the latest such time. A pure tree walk, O(n).
//! - AB (as the original Smelt Simulator): broadcast, then the member that received
//!   last sends a completion message back to the root: `+ t_send(last, root) +
//!   t_receive(last, root)`.
//! - Reduce (loosely synchronized, as it runs back to back and as the machine
//!   database measures it): leaves start at 0 and send to their parent. A parent
//!   polls its children's channels in send order (what the runtime does). A child's
//!   message that is not there yet is waited for and taken at `t_receive(c, p)`; a run
//!   of consecutive children whose messages have all arrived by the time the parent
//!   gets to them is taken together at the cost of the dearest one (their cache-line
//!   misses are independent loads the core overlaps: memory-level parallelism). After
//!   its last child the parent sends upward (`t_send(p, parent)`). The reduce time is
//!   when the root has taken its last child's message. O(n).
//! - Strict reduce (inside barrier and 2PC, where nobody runs ahead: every channel
//!   holds one message, written just before it is read): the original Simulator's
//!   rule — a parent takes its children's messages in order of arrival (ties: send
//!   order), each costing `t_receive(c, p)` one after the other ([`reduce_time`]).
//! - Barrier: as it runs in a program, after the previous barrier (or broadcast):
//!   member `v` enters once the previous release reached it and it forwarded it to its
//!   children; the clock starts when the root leaves the previous barrier (has sent
//!   its last release). Strict reduce, then a broadcast from the root; the time is
//!   when the last member is released. With exactly two members the runtime's
//!   shortcut: both send at once and take the other's message (one latency).
//! - Two-phase commit: broadcast `prepare`; each member votes (joins a strict reduce)
//!   once it has forwarded `prepare` to all its children; the root broadcasts `commit`
//!   when the vote reduce ends; the time is when the last member holds `commit`.
//! - Payload: a message of `lines` cache lines costs `1 + (lines − 1) ×
//!   extra_line_factor` times the measured one-line costs, on both the send and the
//!   receive side. The default factor 1.0 assumes every extra line is another full
//!   coherence transfer (no pipelining or prefetching): an upper bound; measure and
//!   pass a smaller factor where lines overlap.
//! - No contention on the interconnect, no write-buffer effects (the paper's
//!   assumptions); the only interference modelled is the overlap of a parent's reads
//!   of channels that are already filled (loose reduce).

use crate::costs::Costs;
use crate::tree::{Tree, TreeError};
use serde::Serialize;
use smelt_model::Model;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Size of the messages of an operation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Payload {
    /// Cache lines per message (≥ 1; 0 is treated as 1).
    pub lines: u32,
    /// Cost of each extra line as a fraction of the one-line cost.
    pub extra_line_factor: f64,
}

impl Default for Payload {
    fn default() -> Self {
        Payload {
            lines: 1,
            extra_line_factor: 1.0,
        }
    }
}

impl Payload {
    /// A payload of `lines` cache lines with the default per-line factor (1.0).
    pub fn lines(lines: u32) -> Payload {
        Payload {
            lines,
            ..Default::default()
        }
    }

    /// The factor every send and receive cost is multiplied with.
    pub fn scale(&self) -> f64 {
        1.0 + (self.lines.max(1) - 1) as f64 * self.extra_line_factor.max(0.0)
    }
}

pub use crate::op::Op;

/// Predicted time of every operation, in the model's unit (ns for model files).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Prediction {
    /// [`Op::Broadcast`].
    pub broadcast: f64,
    /// [`Op::AtomicBroadcast`].
    pub ab: f64,
    /// [`Op::Reduce`].
    pub reduce: f64,
    /// [`Op::Barrier`].
    pub barrier: f64,
    /// [`Op::TwoPhaseCommit`].
    #[serde(rename = "2pc")]
    pub two_pc: f64,
}

impl Prediction {
    /// The time of one operation. The simulator models the operations of
    /// [`Op::SIMULATED`]; the others follow from them as the runtime runs them:
    /// allreduce = reduce then broadcast, gather ≈ reduce and scatter ≈ broadcast
    /// (one-line messages; the growing payloads of gather and scatter are not
    /// modelled).
    pub fn get(&self, op: Op) -> f64 {
        match op {
            Op::Broadcast => self.broadcast,
            Op::AtomicBroadcast => self.ab,
            Op::Reduce => self.reduce,
            Op::Allreduce => self.reduce + self.broadcast,
            Op::Barrier => self.barrier,
            Op::Gather => self.reduce,
            Op::Scatter => self.broadcast,
            Op::TwoPhaseCommit => self.two_pc,
        }
    }
}

/// Time at which every member holds a message broadcast from `root`, which holds
/// it at `t0`. `children` are local indices into `c`.
pub fn broadcast_arrivals(
    c: &Costs,
    root: usize,
    children: &[Vec<usize>],
    scale: f64,
    t0: f64,
) -> Vec<f64> {
    let mut at = vec![f64::NAN; c.len()];
    at[root] = t0;
    let mut stack = Vec::with_capacity(c.len());
    stack.push(root);
    while let Some(p) = stack.pop() {
        let mut t = at[p];
        for &ch in &children[p] {
            t += c.s(p, ch) * scale;
            at[ch] = t + c.r(p, ch) * scale;
            stack.push(ch);
        }
    }
    at
}

/// `lat(T)` for a one-line message: the broadcast time. Allocation-light, for search
/// loops. `stack` and `at` are scratch buffers.
pub fn broadcast_latency_with(
    c: &Costs,
    root: usize,
    children: &[Vec<usize>],
    stack: &mut Vec<usize>,
    at: &mut Vec<f64>,
) -> f64 {
    at.clear();
    at.resize(c.len(), 0.0);
    stack.clear();
    stack.push(root);
    let mut max = 0.0f64;
    while let Some(p) = stack.pop() {
        let mut t = at[p];
        for &ch in &children[p] {
            t += c.s(p, ch);
            let a = t + c.r(p, ch);
            at[ch] = a;
            if a > max {
                max = a;
            }
            stack.push(ch);
        }
    }
    max
}

/// `lat(T)` for a one-line message.
pub fn broadcast_latency(c: &Costs, root: usize, children: &[Vec<usize>]) -> f64 {
    broadcast_latency_with(c, root, children, &mut Vec::new(), &mut Vec::new())
}

#[derive(PartialEq)]
struct Ev {
    t: f64,
    /// Tie-break: the sender's position in its parent's send order.
    rank: usize,
    from: usize,
}
impl Eq for Ev {}
impl Ord for Ev {
    fn cmp(&self, o: &Self) -> Ordering {
        // Min-heap on (t, rank, from).
        o.t.total_cmp(&self.t)
            .then(o.rank.cmp(&self.rank))
            .then(o.from.cmp(&self.from))
    }
}
impl PartialOrd for Ev {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// Strict reduce up the tree (the original Simulator's reduce; barrier and 2PC use
/// it): member `v` may start taking its children's messages (or, for a leaf, sending
/// its own) at `ready[v]`; a parent takes them in order of arrival, one after the
/// other, each at `t_receive`. Returns when the root has taken the last message.
/// Event-driven: arrivals are processed in global time order.
pub fn reduce_time(
    c: &Costs,
    root: usize,
    children: &[Vec<usize>],
    ready: &[f64],
    scale: f64,
) -> f64 {
    let n = c.len();
    let mut parent = vec![usize::MAX; n];
    let mut rank = vec![0usize; n];
    for (p, cs) in children.iter().enumerate() {
        for (k, &ch) in cs.iter().enumerate() {
            parent[ch] = p;
            rank[ch] = k;
        }
    }
    let mut pending: Vec<usize> = children.iter().map(Vec::len).collect();
    let mut cur: Vec<f64> = ready.to_vec();
    let mut heap = BinaryHeap::with_capacity(n);
    for v in 0..n {
        if pending[v] == 0 && v != root && parent[v] != usize::MAX {
            heap.push(Ev {
                t: cur[v] + c.s(v, parent[v]) * scale,
                rank: rank[v],
                from: v,
            });
        }
    }
    if pending[root] == 0 {
        return ready[root];
    }
    while let Some(ev) = heap.pop() {
        let v = ev.from;
        let p = parent[v];
        cur[p] = cur[p].max(ev.t) + c.r(v, p) * scale;
        pending[p] -= 1;
        if pending[p] == 0 {
            if p == root {
                return cur[p];
            }
            heap.push(Ev {
                t: cur[p] + c.s(p, parent[p]) * scale,
                rank: rank[p],
                from: p,
            });
        }
    }
    // Unreachable for a valid tree: the root always completes.
    cur[root]
}

/// Loosely synchronized reduce (the model of [`Op::Reduce`]): every member may start
/// at `ready[v]`; a parent polls its children in send order, waits for a message that
/// has not arrived (then takes it at `t_receive`), and takes a run of consecutive
/// children whose messages are already there together, at the largest `t_receive` of
/// the run (overlapped misses). Returns when the root has taken its last message.
pub fn reduce_time_overlapped(
    c: &Costs,
    root: usize,
    children: &[Vec<usize>],
    ready: &[f64],
    scale: f64,
) -> f64 {
    // Post-order: every child is done before its parent.
    let order = crate::topology::postorder(root, children);
    let mut done = vec![0.0f64; c.len()];
    for v in order {
        let cs = &children[v];
        let mut t = ready[v];
        let mut i = 0;
        while i < cs.len() {
            let arrival = |ch: usize| done[ch] + c.s(ch, v) * scale;
            let a = arrival(cs[i]);
            if a > t {
                t = a + c.r(cs[i], v) * scale;
                i += 1;
                continue;
            }
            let mut run = 0.0f64;
            while i < cs.len() && arrival(cs[i]) <= t {
                run = run.max(c.r(cs[i], v) * scale);
                i += 1;
            }
            t += run;
        }
        done[v] = t;
    }
    done[root]
}

/// Time each member has forwarded a broadcast from `root` (holding it at `t0`) to all
/// its children: when it holds the message plus its sends.
fn forwarded(c: &Costs, root: usize, children: &[Vec<usize>], scale: f64, t0: f64) -> Vec<f64> {
    let at = broadcast_arrivals(c, root, children, scale, t0);
    (0..c.len())
        .map(|v| {
            at[v]
                + children[v]
                    .iter()
                    .map(|&ch| c.s(v, ch) * scale)
                    .sum::<f64>()
        })
        .collect()
}

/// Barrier time (see the module documentation): after the previous barrier's release,
/// a strict reduce and a broadcast; the runtime's one-latency exchange for two members.
fn barrier_time(c: &Costs, root: usize, children: &[Vec<usize>], scale: f64) -> f64 {
    if c.len() == 1 {
        return 0.0;
    }
    if c.len() == 2 {
        let other = 1 - root;
        let (sr, sc) = (c.s(root, other) * scale, c.s(other, root) * scale);
        let root_done = sr.max(sc) + c.r(other, root) * scale;
        let other_done = sc.max(sr) + c.r(root, other) * scale;
        return root_done.max(other_done);
    }
    let fw = forwarded(c, root, children, scale, 0.0);
    let ready: Vec<f64> = fw.iter().map(|&x| x - fw[root]).collect();
    let r = reduce_time(c, root, children, &ready, scale);
    max_of(&broadcast_arrivals(c, root, children, scale, r)).1
}

fn max_of(v: &[f64]) -> (usize, f64) {
    let mut best = (0, f64::NEG_INFINITY);
    for (i, &x) in v.iter().enumerate() {
        if x > best.1 {
            best = (i, x);
        }
    }
    best
}

/// Predicts one operation over a tree given as local child lists.
pub fn simulate(c: &Costs, root: usize, children: &[Vec<usize>], op: Op, pl: Payload) -> f64 {
    let k = pl.scale();
    let n = c.len();
    match op {
        Op::Broadcast => max_of(&broadcast_arrivals(c, root, children, k, 0.0)).1,
        Op::AtomicBroadcast => {
            let (last, t) = max_of(&broadcast_arrivals(c, root, children, k, 0.0));
            if last == root {
                t
            } else {
                t + c.sr(last, root) * k
            }
        }
        Op::Reduce | Op::Gather => reduce_time_overlapped(c, root, children, &vec![0.0; n], k),
        Op::Allreduce => {
            simulate(c, root, children, Op::Reduce, pl)
                + simulate(c, root, children, Op::Broadcast, pl)
        }
        Op::Scatter => simulate(c, root, children, Op::Broadcast, pl),
        Op::Barrier => barrier_time(c, root, children, k),
        Op::TwoPhaseCommit => {
            let ready = forwarded(c, root, children, k, 0.0);
            let r = reduce_time(c, root, children, &ready, k);
            max_of(&broadcast_arrivals(c, root, children, k, r)).1
        }
    }
}

/// Predicts every operation over a tree given as local child lists.
pub fn predict_local(c: &Costs, root: usize, children: &[Vec<usize>], pl: Payload) -> Prediction {
    Prediction {
        broadcast: simulate(c, root, children, Op::Broadcast, pl),
        ab: simulate(c, root, children, Op::AtomicBroadcast, pl),
        reduce: simulate(c, root, children, Op::Reduce, pl),
        barrier: simulate(c, root, children, Op::Barrier, pl),
        two_pc: simulate(c, root, children, Op::TwoPhaseCommit, pl),
    }
}

/// Predicts every operation over `tree` (validated first) under `model`.
pub fn predict(model: &Model, tree: &Tree, pl: Payload) -> Result<Prediction, TreeError> {
    tree.validate()?;
    let c = Costs::for_tree(model, tree)?;
    Ok(predict_local(
        &c,
        tree.root.index(),
        &tree.child_indices(),
        pl,
    ))
}

/// Predicted time of a non-tree algorithm ([`NonTree`](crate::NonTree)) over all
/// members of `c` (local index = group rank), under the same model as the trees: a
/// member's sends are sequential and block it for `t_send`, a message is there when
/// its send ends, taking it blocks the receiver for `t_receive`; messages of `scale`
/// times the one-line costs.
///
/// - Dissemination barrier: every member starts at 0; in round `k` member `i` sends to
///   `i + 2^k` (mod n), then takes the message of `i − 2^k`; the time is when the
///   last member has taken its last round's message.
/// - Recursive doubling: ranks `p..n` (p the largest power of two ≤ n) first send to
///   rank `i − p`, which takes it; then in step `k` member `i < p` sends to `i XOR 2^k`
///   and takes its partner's message; at the end rank `i − p` sends the result to
///   `i`. Rabenseifner: the same folds and pairs, each step of the reduce-scatter
///   with half the previous step's message, then the steps in reverse (allgather)
///   doubling it back; a message is never less than one line (so on one-line
///   payloads it costs twice recursive doubling's rounds, as on a machine). Ring:
///   2(n − 1) rounds in which member `i` sends a block of 1/n of the message (never
///   less than one line) to `i + 1` (mod n) and takes the one of `i − 1`. The time is
///   when the last member holds the result. (Combining costs nothing, as in the tree
///   simulations.)
pub fn simulate_non_tree(c: &Costs, alg: crate::NonTree, scale: f64) -> f64 {
    let n = c.len();
    if n <= 1 {
        return 0.0;
    }
    let s = |i: usize, j: usize| c.s(i, j) * scale;
    let r = |i: usize, j: usize| c.r(i, j) * scale;
    let mut ready = vec![0.0f64; n];
    match alg {
        crate::NonTree::Dissemination => {
            let mut d = 1;
            while d < n {
                let sent: Vec<f64> = (0..n).map(|i| ready[i] + s(i, (i + d) % n)).collect();
                for j in 0..n {
                    let from = (j + n - d) % n;
                    ready[j] = sent[j].max(sent[from]) + r(from, j);
                }
                d *= 2;
            }
        }
        crate::NonTree::RecursiveDoubling => {
            let p = 1usize << (usize::BITS - 1 - n.leading_zeros());
            for e in p..n {
                let sent = s(e, e - p);
                ready[e] = sent;
                ready[e - p] = ready[e - p].max(sent) + r(e, e - p);
            }
            let mut d = 1;
            while d < p {
                let sent: Vec<f64> = (0..p).map(|i| ready[i] + s(i, i ^ d)).collect();
                for j in 0..p {
                    let from = j ^ d;
                    ready[j] = sent[j].max(sent[from]) + r(from, j);
                }
                d *= 2;
            }
            for e in p..n {
                let h = e - p;
                let sent = ready[h] + s(h, e);
                ready[h] = sent;
                ready[e] = ready[e].max(sent) + r(h, e);
            }
        }
        crate::NonTree::Rabenseifner => {
            // As recursive doubling, with the message halved at every step of the
            // reduce-scatter and doubled back at every step of the allgather.
            let p = 1usize << (usize::BITS - 1 - n.leading_zeros());
            for e in p..n {
                let sent = s(e, e - p);
                ready[e] = sent;
                ready[e - p] = ready[e - p].max(sent) + r(e, e - p);
            }
            let mut steps = Vec::new();
            let mut d = 1;
            while d < p {
                steps.push(d);
                d *= 2;
            }
            let mut part = 1.0f64;
            let round = |ready: &mut Vec<f64>, d: usize, part: f64| {
                let sent: Vec<f64> = (0..p).map(|i| ready[i] + s(i, i ^ d) * part).collect();
                for j in 0..p {
                    let from = j ^ d;
                    ready[j] = sent[j].max(sent[from]) + r(from, j) * part;
                }
            };
            // A message carries at least one line.
            let least = 1.0 / scale.max(1.0);
            for &d in &steps {
                part /= 2.0;
                round(&mut ready, d, part.max(least));
            }
            for &d in steps.iter().rev() {
                round(&mut ready, d, part.max(least));
                part *= 2.0;
            }
            for e in p..n {
                let h = e - p;
                let sent = ready[h] + s(h, e);
                ready[h] = sent;
                ready[e] = ready[e].max(sent) + r(h, e);
            }
        }
        crate::NonTree::Ring => {
            // 2(n − 1) rounds, each a block of 1/n of the vector (at least a line) to
            // the next member round the ring and one taken from the previous.
            let part = (1.0 / n as f64).max(1.0 / scale.max(1.0));
            for _ in 0..2 * (n - 1) {
                let sent: Vec<f64> = (0..n)
                    .map(|i| ready[i] + s(i, (i + 1) % n) * part)
                    .collect();
                for j in 0..n {
                    let from = (j + n - 1) % n;
                    ready[j] = sent[j].max(sent[from]) + r(from, j) * part;
                }
            }
        }
    }
    max_of(&ready).1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NonTree;

    #[test]
    fn non_tree_times_count_rounds_and_folds() {
        let uniform =
            |n: usize| Costs::from_matrices(vec![1.0; n * n], vec![1.0; n * n], n).unwrap();
        // One round = one send + one receive = 2 units; recursive doubling of 5 = 4 + 1:
        // fold in (2), two steps (4), hand back (2); the payload scales every cost.
        use NonTree::{Dissemination as D, Rabenseifner as B, RecursiveDoubling as R, Ring as G};
        for (n, algo, payload, want) in [
            (1, D, 1.0, 0.0),
            (2, D, 1.0, 2.0),
            (4, D, 1.0, 4.0),
            (5, D, 1.0, 6.0),
            (16, D, 1.0, 8.0),
            (4, R, 1.0, 4.0),
            (5, R, 1.0, 8.0),
            (4, D, 3.0, 12.0),
            // Rabenseifner: rounds of halves, quarters, ... and back (2 members: two
            // rounds of half the payload), never less than a line per message.
            (2, B, 1.0, 4.0),
            (4, B, 1.0, 8.0),
            (5, B, 1.0, 12.0),
            (2, B, 8.0, 16.0),
            (4, B, 8.0, 24.0),
            (4, R, 8.0, 32.0),
            (4, B, 2.0, 8.0),
            // Ring: 2(n - 1) rounds of 1/n of the payload, at least a line each (so
            // it ties Rabenseifner on long messages of a power of two members and
            // needs no fold for the others).
            (2, G, 1.0, 4.0),
            (4, G, 1.0, 12.0),
            (4, G, 8.0, 24.0),
            (5, G, 10.0, 32.0),
        ] {
            assert_eq!(
                simulate_non_tree(&uniform(n), algo, payload),
                want,
                "{algo:?} of {n} members, payload {payload}"
            );
        }
    }
}
