//! Exhaustive search for the optimal broadcast tree of a small group (§3.4): every
//! tree shape × every send order (the space of Equation 1) for a fixed root, by
//! branch and bound.
//!
//! The search follows the broadcast in event order: at each step the informed member
//! that becomes free first either sends to one of the uninformed members or stops
//! sending for good. Every (tree, send order) pair corresponds to exactly one path,
//! so the enumeration is complete. A branch is cut when a lower bound — the
//! latest arrival so far, and for every uninformed member its earliest possible
//! arrival (shortest `t_send + t_receive` path from any member still able to send,
//! starting when that member is free) — reaches the best latency known.

use crate::costs::Costs;
use crate::tree::TreeError;
use std::time::{Duration, Instant};

/// Largest group the exhaustive search accepts.
pub const MAX_MEMBERS: usize = 12;

/// Result of [`optimum`].
#[derive(Debug, Clone)]
pub struct Optimum {
    /// Best tree found (local indices, send order).
    pub children: Vec<Vec<usize>>,
    /// Its broadcast latency.
    pub latency: f64,
    /// True if the search finished: no tree with this root is faster.
    pub proven: bool,
    /// Search nodes visited.
    pub visited: u64,
    /// Wall time spent.
    pub elapsed: Duration,
}

struct Search<'a> {
    c: &'a Costs,
    n: usize,
    informed: Vec<bool>,
    stopped: Vec<bool>,
    free: Vec<f64>,
    ch: Vec<Vec<usize>>,
    best: f64,
    best_ch: Vec<Vec<usize>>,
    visited: u64,
    start: Instant,
    limit: Duration,
    timed_out: bool,
    dist: Vec<f64>,
    fixed: Vec<bool>,
}

impl Search<'_> {
    fn lower_bound(&mut self, cur_max: f64) -> f64 {
        // Dijkstra from the active senders over the uninformed members.
        let n = self.n;
        let mut any_active = false;
        for v in 0..n {
            self.fixed[v] = false;
            self.dist[v] = f64::INFINITY;
        }
        for p in 0..n {
            if self.informed[p] && !self.stopped[p] {
                any_active = true;
                for u in 0..n {
                    if !self.informed[u] {
                        let d = self.free[p] + self.c.sr(p, u);
                        if d < self.dist[u] {
                            self.dist[u] = d;
                        }
                    }
                }
            }
        }
        if !any_active {
            return f64::INFINITY;
        }
        let mut lb = cur_max;
        loop {
            let mut m = None;
            for u in 0..n {
                if !self.informed[u]
                    && !self.fixed[u]
                    && m.is_none_or(|b: usize| self.dist[u] < self.dist[b])
                {
                    m = Some(u);
                }
            }
            let Some(q) = m else { break };
            self.fixed[q] = true;
            lb = lb.max(self.dist[q]);
            for u in 0..n {
                if !self.informed[u] && !self.fixed[u] {
                    let d = self.dist[q] + self.c.sr(q, u);
                    if d < self.dist[u] {
                        self.dist[u] = d;
                    }
                }
            }
        }
        lb
    }

    fn dfs(&mut self, cur_max: f64, left: usize) {
        self.visited += 1;
        if self.visited & 1023 == 0 && self.start.elapsed() > self.limit {
            self.timed_out = true;
        }
        if self.timed_out {
            return;
        }
        if left == 0 {
            if cur_max < self.best {
                self.best = cur_max;
                self.best_ch = self.ch.clone();
            }
            return;
        }
        if self.lower_bound(cur_max) >= self.best * (1.0 - 1e-12) {
            return;
        }
        let mut v = usize::MAX;
        for p in 0..self.n {
            if self.informed[p]
                && !self.stopped[p]
                && (v == usize::MAX || self.free[p] < self.free[v])
            {
                v = p;
            }
        }
        let t = self.free[v];
        let mut order: Vec<usize> = (0..self.n).filter(|&u| !self.informed[u]).collect();
        order.sort_by(|&a, &b| self.c.sr(v, b).total_cmp(&self.c.sr(v, a)));
        for u in order {
            let s = self.c.s(v, u);
            let arr = t + s + self.c.r(v, u);
            self.informed[u] = true;
            self.free[u] = arr;
            self.free[v] = t + s;
            self.ch[v].push(u);
            self.dfs(cur_max.max(arr), left - 1);
            self.ch[v].pop();
            self.free[v] = t;
            self.informed[u] = false;
        }
        self.stopped[v] = true;
        self.dfs(cur_max, left);
        self.stopped[v] = false;
    }
}

/// The optimal broadcast tree rooted at `root` (local index) under the model, or
/// the best found within `limit`. `incumbent`, if given, is a known tree (e.g. the
/// `optimized` one) whose latency seeds the bound; it is returned if nothing faster
/// exists. Errors for more than [`MAX_MEMBERS`] members.
pub fn optimum(
    c: &Costs,
    root: usize,
    limit: Duration,
    incumbent: Option<&[Vec<usize>]>,
) -> Result<Optimum, TreeError> {
    let n = c.len();
    if n > MAX_MEMBERS {
        return Err(TreeError::Invalid(format!(
            "exhaustive search is limited to {MAX_MEMBERS} members, the group has {n}"
        )));
    }
    if root >= n {
        return Err(TreeError::Invalid(format!(
            "root index {root} out of range"
        )));
    }
    let (best, best_ch) = match incumbent {
        Some(ch) => (crate::sim::broadcast_latency(c, root, ch), ch.to_vec()),
        None => (f64::INFINITY, vec![Vec::new(); n]),
    };
    let mut s = Search {
        c,
        n,
        informed: vec![false; n],
        stopped: vec![false; n],
        free: vec![0.0; n],
        ch: vec![Vec::new(); n],
        best,
        best_ch,
        visited: 0,
        start: Instant::now(),
        limit,
        timed_out: false,
        dist: vec![0.0; n],
        fixed: vec![false; n],
    };
    s.informed[root] = true;
    s.dfs(0.0, n - 1);
    Ok(Optimum {
        latency: if n == 1 { 0.0 } else { s.best },
        children: s.best_ch,
        proven: !s.timed_out,
        visited: s.visited,
        elapsed: s.start.elapsed(),
    })
}
