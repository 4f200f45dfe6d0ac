//! Beyond the paper: the `optimized` generator, an iterated local search over each
//! member's parent, with the send order of every member always re-sorted by
//! receiving-subtree cost (optimal for a fixed shape, see [`sort_sends`]).
//!
//! It starts from the best of several seeds (adaptive-shuffled, adaptive-sorted,
//! adaptive, cluster, the static shapes, all re-sorted) and only ever replaces its
//! best tree by a strictly faster one, so its broadcast is never slower than any
//! seed's, in particular the adaptive trees'. Deterministic: a fixed-seed PRNG and
//! an evaluation budget instead of a clock.

use crate::costs::Costs;
use crate::sim::{self, Op, Payload};
use crate::topology::{adaptive, shuffle, sort_sends, subtree_mask, Topology};
use smelt_ids::rng::SplitMix64;

/// Knobs of the search.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// PRNG seed (the result is a pure function of the costs, root and options).
    pub seed: u64,
    /// Maximum number of candidate trees to evaluate; `None` scales with the group
    /// size (about 4·10⁶ / n, between 200 and 50 000). The search also stops after
    /// a fifth of the budget (at least 1000 evaluations) without a new best tree.
    pub max_evals: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seed: 0x5eed_5e17,
            max_evals: None,
        }
    }
}

/// The workspace's one seeded RNG (SplitMix64: small, fast, deterministic), with a
/// `usize` range.
struct Rng(SplitMix64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0.below(n as u64) as usize
    }
}

struct Eval<'a> {
    c: &'a Costs,
    root: usize,
    op: Op,
    evals: usize,
    stack: Vec<usize>,
    at: Vec<f64>,
}

impl Eval<'_> {
    /// (broadcast latency, sum of arrival times) after re-sorting every send list.
    /// The objective of a tree as it is: for the broadcast (latency, sum of arrival
    /// times); for another operation (its time, broadcast latency).
    fn objective(&mut self, ch: &[Vec<usize>]) -> (f64, f64) {
        self.evals += 1;
        let lat = sim::broadcast_latency_with(self.c, self.root, ch, &mut self.stack, &mut self.at);
        match self.op {
            Op::Broadcast => (lat, self.at.iter().sum()),
            op => (
                sim::simulate(self.c, self.root, ch, op, Payload::default()),
                lat,
            ),
        }
    }

    /// Re-sorts every send list (optimal for the broadcast part), then scores.
    fn score(&mut self, ch: &mut [Vec<usize>]) -> (f64, f64) {
        sort_sends(self.c, self.root, ch);
        self.objective(ch)
    }
}

fn better(a: (f64, f64), b: (f64, f64)) -> bool {
    let eps = 1e-9 * b.0.abs().max(1.0);
    a.0 < b.0 - eps || (a.0 <= b.0 + eps && a.1 < b.1 - eps * a.1.abs().max(1.0))
}

fn parents(ch: &[Vec<usize>]) -> Vec<usize> {
    let mut p = vec![usize::MAX; ch.len()];
    for (v, kids) in ch.iter().enumerate() {
        for &k in kids {
            p[k] = v;
        }
    }
    p
}

/// The members `x` can be moved under (all but its subtree and its parent `px`), in
/// index order.
fn new_parents(ch: &[Vec<usize>], x: usize, px: usize) -> Vec<usize> {
    let mask = subtree_mask(ch, x);
    (0..ch.len()).filter(|&v| !mask[v] && v != px).collect()
}

/// [`new_parents`] of `x`, cheapest first by `cost` (ties by index).
fn cheapest_parents(
    ch: &[Vec<usize>],
    x: usize,
    px: usize,
    cost: impl Fn(usize) -> f64,
) -> Vec<usize> {
    let mut cands: Vec<(f64, usize)> = new_parents(ch, x, px)
        .into_iter()
        .map(|v| (cost(v), v))
        .collect();
    cands.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    cands.into_iter().map(|(_, v)| v).collect()
}

/// Moves `x` (child of `px`) under each of `targets` in turn and keeps the first
/// move that scores better than `score`: `Some(true)`. `Some(false)` when the budget
/// ran out first, `None` when no move helped.
fn first_better_move(
    ev: &mut Eval,
    cur: &mut Vec<Vec<usize>>,
    score: &mut (f64, f64),
    budget: usize,
    (x, px): (usize, usize),
    targets: impl IntoIterator<Item = usize>,
) -> Option<bool> {
    for to in targets {
        if ev.evals >= budget {
            return Some(false);
        }
        let mut next = moved(cur, x, px, to);
        let sc = ev.score(&mut next);
        if better(sc, *score) {
            *cur = next;
            *score = sc;
            return Some(true);
        }
    }
    None
}

fn moved(ch: &[Vec<usize>], x: usize, from: usize, to: usize) -> Vec<Vec<usize>> {
    let mut next = ch.to_vec();
    next[from].retain(|&k| k != x);
    next[to].push(x);
    next
}

/// The `optimized` tree over `c` rooted at `root` (local indices, send order).
pub fn optimized(c: &Costs, root: usize, opts: &Options) -> Vec<Vec<usize>> {
    optimized_for(c, root, Op::Broadcast, opts)
}

/// A tree optimized for the predicted time of `op` (one-line messages): the same
/// search, scored by the simulator for that operation, seeded with every other
/// topology, so it is never slower for `op` than any of them.
pub fn optimized_for(c: &Costs, root: usize, op: Op, opts: &Options) -> Vec<Vec<usize>> {
    let n = c.len();
    if n <= 2 {
        return Topology::Sequential.children(c, root);
    }
    let budget = opts
        .max_evals
        .unwrap_or_else(|| (4_000_000 / n).clamp(200, 50_000));
    let mut ev = Eval {
        c,
        root,
        op,
        evals: 0,
        stack: Vec::with_capacity(n),
        at: Vec::with_capacity(n),
    };
    // Seeds, best first on ties: the adaptive-shuffled tree wins ties.
    let mut seeds: Vec<Vec<Vec<usize>>> = Vec::new();
    let mut a = adaptive(c, root);
    sort_sends(c, root, &mut a);
    let mut shuffled = a.clone();
    shuffle(c, root, &mut shuffled);
    seeds.push(shuffled);
    seeds.push(a);
    seeds.push(adaptive(c, root));
    for t in [
        Topology::Cluster,
        Topology::Fibonacci,
        Topology::Binary,
        Topology::Knomial(2),
        Topology::Knomial(4),
        Topology::Mst,
        Topology::Sequential,
    ] {
        seeds.push(t.children(c, root));
    }
    if op != Op::Broadcast {
        seeds.push(Topology::Fibonacci.children(c, root));
        seeds.push(Topology::Knomial(8).children(c, root));
        seeds.push(Topology::Bad.children(c, root));
        seeds.push(optimized_for(c, root, Op::Broadcast, opts));
    }
    let mut best = seeds[0].clone();
    let mut best_score = ev.objective(&best);
    for mut s in seeds {
        // Seeds are scored as they are (the plain adaptive tree is unsorted), then
        // re-sorted.
        let plain = ev.objective(&s);
        if better(plain, best_score) {
            best = s.clone();
            best_score = plain;
        }
        let sc = ev.score(&mut s);
        if better(sc, best_score) {
            best = s;
            best_score = sc;
        }
    }
    let mut rng = Rng(SplitMix64::new(
        opts.seed ^ (n as u64).wrapping_mul(0x100_0000_01b3) ^ root as u64,
    ));
    let mut cur = best.clone();
    let mut cur_score = best_score;
    // Give up after a long stretch without a new best tree.
    let stall = (budget / 5).max(1000);
    let mut last_best = ev.evals;
    while ev.evals < budget && ev.evals - last_best < stall {
        // Descent: move a member (on the critical path, for the broadcast) under
        // another parent.
        let improved = if op == Op::Broadcast {
            descend(&mut ev, &mut cur, &mut cur_score, budget)
        } else {
            descend_any(&mut ev, &mut cur, &mut cur_score, budget, &mut rng)
        };
        if better(cur_score, best_score) {
            best = cur.clone();
            best_score = cur_score;
            last_best = ev.evals;
        }
        if !improved {
            // Kick: a few random re-parentings from the best tree so far.
            cur = best.clone();
            for _ in 0..1 + rng.below(3) {
                let x = loop {
                    let x = rng.below(n);
                    if x != root {
                        break x;
                    }
                };
                let p = parents(&cur);
                let choices = new_parents(&cur, x, p[x]);
                if choices.is_empty() {
                    continue;
                }
                let to = choices[rng.below(choices.len())];
                cur = moved(&cur, x, p[x], to);
            }
            cur_score = ev.score(&mut cur);
        }
    }
    best
}

/// One first-improvement pass for any operation: members in a random rotation,
/// each tried under its 8 cheapest other parents; true if it improved.
fn descend_any(
    ev: &mut Eval,
    cur: &mut Vec<Vec<usize>>,
    score: &mut (f64, f64),
    budget: usize,
    rng: &mut Rng,
) -> bool {
    const TRIES: usize = 8;
    let c = ev.c;
    let n = c.len();
    let start = rng.below(n);
    let p = parents(cur);
    for i in 0..n {
        let x = (start + i) % n;
        if x == ev.root {
            continue;
        }
        let cands = cheapest_parents(cur, x, p[x], |v| c.sr(v, x) + c.sr(x, v));
        let targets = cands.into_iter().take(TRIES);
        if let Some(done) = first_better_move(ev, cur, score, budget, (x, p[x]), targets) {
            return done;
        }
    }
    false
}

/// One first-improvement pass over the critical path; true if it improved.
fn descend(
    ev: &mut Eval,
    cur: &mut Vec<Vec<usize>>,
    score: &mut (f64, f64),
    budget: usize,
) -> bool {
    let c = ev.c;
    let n = c.len();
    let at = sim::broadcast_arrivals(c, ev.root, cur, 1.0, 0.0);
    let mut e = ev.root;
    for v in 0..n {
        if at[v] > at[e] {
            e = v;
        }
    }
    let p = parents(cur);
    let mut x = e;
    while x != ev.root {
        let cands = cheapest_parents(cur, x, p[x], |v| at[v] + c.sr(v, x));
        if let Some(done) = first_better_move(ev, cur, score, budget, (x, p[x]), cands) {
            return done;
        }
        x = p[x];
    }
    false
}
