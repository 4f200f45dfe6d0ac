//! smelt's side of `smelt bench`: trees from the model, the simulator's predictions,
//! and the collectives measured with the runtime's helpers
//! (`smelt_runtime::measure`): paper-style for the topology table, back-to-back for
//! the comparison with the peers (which are measured back-to-back too).

use crate::BenchError;
use smelt_model::Model;
use smelt_probe::figure::{Metric, PeerResult};
use smelt_runtime::measure::{self, MeasureConfig};
use smelt_runtime::{GroupConfig, Pinning};
use smelt_tree::stats::Summary;
use smelt_tree::tuning::{resolve_auto_tree, AlgorithmTable, SyncMode};
use smelt_tree::{NonTree, Op, Payload, Prediction, Topology, Tree};
use std::sync::Arc;
use std::time::Duration;

/// What smelt's figures are measured with.
pub struct Smelt<'a> {
    /// The model the trees are built from (restricted to the selected CPUs).
    pub model: &'a Model,
    /// Paper-style rounds per figure.
    pub rounds: usize,
    /// Timed runs per back-to-back figure.
    pub runs: usize,
    /// Minimum length of one back-to-back run.
    pub batch: Duration,
    /// Longest a collective may wait before the figure fails.
    pub timeout: Duration,
}

/// A tree ready to measure.
pub struct Plan {
    /// The tree (members are the model's CPUs, or virtual ids when oversubscribed).
    pub tree: Tree,
    /// The simulator's prediction for it.
    pub prediction: Option<Prediction>,
    /// More members than CPUs: the group runs unpinned.
    pub oversubscribed: bool,
    /// Run with [`GroupConfig::flatten_oversubscribed`]: when oversubscribed, the
    /// tree runs flat (root to every other member in pre-order), what a user should
    /// do with more threads than CPUs.
    pub flatten: bool,
    /// The group's algorithm table (`GroupConfig::algorithms`): `auto`'s, or a
    /// non-tree algorithm's ([`Smelt::plan_non_tree`]).
    pub algorithms: Option<Arc<AlgorithmTable>>,
    /// The only operations the plan measures (a non-tree algorithm's), if limited.
    pub only: Option<Vec<Op>>,
}

impl Plan {
    /// True if the plan measures `op` (a non-tree plan only its operations).
    pub fn runs(&self, op: Op) -> bool {
        self.only.as_ref().is_none_or(|ops| ops.contains(&op))
    }
}

/// The runtime's name for an operation (the AB variant is not measured separately).
fn runtime_op(op: Op) -> Option<Op> {
    (op != Op::AtomicBroadcast).then_some(op)
}

/// A model of `members` members placed round-robin on the CPUs of `m`: member `i`
/// has the costs of CPU `i mod n`; two members on the same CPU get the cheapest cost
/// of the model. Member ids are `0..members` (the group runs unpinned).
pub fn oversubscribed_model(m: &Model, members: usize) -> Model {
    let n = m.len();
    let cheapest = |mat: &Vec<Vec<f64>>| {
        let mut best = f64::INFINITY;
        for (i, row) in mat.iter().enumerate() {
            for (j, &v) in row.iter().enumerate() {
                if i != j && v > 0.0 {
                    best = best.min(v);
                }
            }
        }
        if best.is_finite() {
            best
        } else {
            1.0
        }
    };
    let expand = |mat: &Vec<Vec<f64>>| -> Vec<Vec<f64>> {
        let local = cheapest(mat);
        (0..members)
            .map(|i| {
                (0..members)
                    .map(|j| {
                        if i == j {
                            0.0
                        } else if i % n == j % n {
                            local
                        } else {
                            mat[i % n][j % n]
                        }
                    })
                    .collect()
            })
            .collect()
    };
    let mut x = Model::new(
        (0..members as u32).collect(),
        expand(&m.send),
        expand(&m.receive),
    );
    x.provenance = m.provenance.clone();
    x.provenance
        .notes
        .push(format!("{members} members placed round-robin on {n} CPUs"));
    x
}

impl Smelt<'_> {
    /// The tree of `t` over `members` members and its predicted times.
    pub fn plan(&self, t: Topology, members: usize) -> Result<Plan, BenchError> {
        let n = self.model.len();
        let oversubscribed = members > n;
        let expanded;
        let model = if oversubscribed {
            expanded = oversubscribed_model(self.model, members);
            &expanded
        } else {
            self.model
        };
        let pos: Vec<usize> = (0..members).collect();
        let tree = t.generate(model, &pos, None)?;
        let prediction = smelt_tree::predict(model, &tree, Payload::default()).ok();
        // `auto` also picks the barrier's and the allreduce's algorithm.
        let algorithms = if t == Topology::Auto {
            Some(Arc::new(smelt_tree::tuning::auto_table(model, &pos)?.0))
        } else {
            None
        };
        Ok(Plan {
            tree,
            prediction,
            oversubscribed,
            flatten: false,
            algorithms,
            only: None,
        })
    }

    /// A non-tree algorithm over `members` members (beside smelt's tree, which the
    /// measurement's completion messages use), measured for its operations only,
    /// with its predicted time.
    pub fn plan_non_tree(&self, a: NonTree, members: usize) -> Result<Plan, BenchError> {
        let mut p = self.plan(super::SMELT_TREE, members)?;
        let ops = a.entry().ops.to_vec();
        let rules: Vec<String> = ops.iter().map(|o| format!("{o}={a}")).collect();
        let table = AlgorithmTable::parse(&rules.join(";"))?;
        // The simulator's time of the algorithm, in the slot of its operation.
        p.prediction = p.prediction.map(|mut pr| {
            let model = if p.oversubscribed {
                oversubscribed_model(self.model, members)
            } else {
                self.model.clone()
            };
            let pos: Vec<usize> = (0..members).collect();
            if let Ok(c) = smelt_tree::Costs::new(&model, &pos) {
                let t = smelt_tree::sim::simulate_non_tree(&c, a, 1.0);
                if ops.contains(&Op::Barrier) {
                    pr.barrier = t;
                }
                if ops.contains(&Op::Allreduce) {
                    // Prediction::get gives reduce + broadcast for the allreduce.
                    pr.reduce = t;
                    pr.broadcast = 0.0;
                }
            }
            pr
        });
        p.algorithms = Some(Arc::new(table));
        p.only = Some(ops);
        Ok(p)
    }

    /// The non-tree rows of `smelt bench` for `ops`: each non-tree algorithm that runs
    /// one of them, as (row name, plan).
    pub fn non_tree_plans(
        &self,
        ops: &[Op],
        members: usize,
    ) -> Vec<(String, Result<Plan, BenchError>)> {
        NonTree::ALL
            .iter()
            .filter(|a| ops.iter().any(|&o| a.applies_to(o)))
            .map(|&a| (a.to_string(), self.plan_non_tree(a, members)))
            .collect()
    }

    /// A given tree (a `--tree` file) over its own CPUs, and its predicted times.
    pub fn plan_tree(&self, tree: Tree) -> Plan {
        let prediction = smelt_tree::predict(self.model, &tree, Payload::default()).ok();
        Plan {
            tree,
            prediction,
            oversubscribed: false,
            flatten: false,
            algorithms: None,
            only: None,
        }
    }

    fn config(&self, p: &Plan, rounds: usize) -> MeasureConfig {
        MeasureConfig {
            rounds,
            warmup: (rounds / 10).clamp(1, 50),
            batch: self.batch,
            group: GroupConfig {
                link: smelt_runtime::LinkConfig::default().timeout(self.timeout),
                pinning: if p.oversubscribed {
                    Pinning::Never
                } else {
                    Pinning::Auto
                },
                flatten_oversubscribed: p.flatten,
                algorithms: p.algorithms.clone(),
                ..GroupConfig::default()
            },
        }
    }

    /// Measures `op` over the plan's tree the paper's way (completion messages from
    /// each leaf in turn to the root, max over leaves, median over rounds). Also says
    /// whether the group ran flattened.
    pub fn measure(&self, p: &Plan, op: Op) -> Result<(Summary, bool), BenchError> {
        let rop = runtime_op(op).ok_or_else(|| format!("{} is not measured", op.name()))?;
        let m = measure::measure(&p.tree, rop, &self.config(p, self.rounds))?;
        Ok((m.stats, m.placement.flattened))
    }

    /// What a program gets by default for `op` (one word, or the barrier) over
    /// `members` members: `auto` resolved over this machine's tuning file (else the
    /// prediction) for that operation and size, the group built with `auto`'s
    /// algorithm table (so a barrier or allreduce picked non-tree runs so). With more
    /// members than CPUs the model is [`oversubscribed_model`]'s, which no tuning
    /// file describes (the file's groups are at most the machine), so `auto` is the
    /// prediction there, and the group runs flat with its barrier on the flat tree
    /// (`AlgorithmTable::for_flat_oversubscribed`).
    pub fn plan_auto(&self, op: Op, members: usize) -> Result<(Plan, AutoPick), BenchError> {
        let n = self.model.len();
        let oversubscribed = members > n;
        let expanded;
        let model = if oversubscribed {
            let mut x = oversubscribed_model(self.model, members);
            // No host file is about this group: keep `auto` from refusing one.
            x.provenance.host = format!("{} ({members} members on {n} CPUs)", x.provenance.host);
            expanded = x;
            &expanded
        } else {
            self.model
        };
        let pos: Vec<usize> = (0..members).collect();
        let rop = runtime_op(op).unwrap_or(Op::Broadcast);
        let bytes = if rop.carries_data() { 8 } else { 0 };
        let (topo, resolved) = resolve_auto_tree(rop, bytes, SyncMode::Loose, model, &pos, None)?;
        let tree = topo.generate(model, &pos, None)?;
        let prediction = smelt_tree::predict(model, &tree, Payload::default()).ok();
        let (mut table, refused) = smelt_tree::tuning::auto_table(model, &pos)?;
        let mut pick = AutoPick {
            algorithm: resolved.choice.algorithm.to_string(),
            origin: resolved.origin.to_string(),
            warning: resolved.warning.or(refused),
        };
        if oversubscribed {
            // Run flat (as `smelt launch` does there), and so the barrier on the flat
            // tree unless SMELT_TUNE says otherwise (what the runtime does too).
            table = table.for_flat_oversubscribed();
            if rop == Op::Barrier {
                if let Some(a) = table.lookup(SyncMode::Loose, Op::Barrier, 0) {
                    if a.to_string() != pick.algorithm {
                        pick.algorithm = a.to_string();
                        pick.origin = "the flat tree: more members than CPUs".into();
                    }
                }
            }
        }
        let plan = Plan {
            tree,
            prediction,
            oversubscribed,
            flatten: false,
            algorithms: Some(Arc::new(table)),
            only: None,
        };
        Ok((plan, pick))
    }

    /// smelt's figure for the peer comparison: `op` with `threads` members as a program
    /// gets it by default ([`plan_auto`](Smelt::plan_auto)), measured back-to-back like
    /// the peers; flattened when there are more members than CPUs (what `smelt launch`
    /// does there). Returns the figure, whether it ran flattened (the name says so
    /// too) and what `auto` picked (the name says it: `smelt (auto: dissemination)`).
    pub fn peer_figure(&self, threads: usize, op: Op) -> (PeerResult, bool, Option<AutoPick>) {
        let metric = match op {
            Op::Broadcast | Op::AtomicBroadcast => Metric::Broadcast,
            Op::Reduce => Metric::Reduce,
            _ => Metric::Barrier,
        };
        let mut flattened = false;
        let mut pick = None;
        let r = self.plan_auto(op, threads).and_then(|(mut p, a)| {
            pick = Some(a);
            p.flatten = p.oversubscribed;
            flattened = p.flatten;
            let rop = runtime_op(op).ok_or_else(|| format!("{} is not measured", op.name()))?;
            let m = measure::measure_back_to_back(&p.tree, rop, &self.config(&p, self.runs))?;
            flattened = m.placement.flattened;
            Ok(m.stats)
        });
        let name = auto_name("smelt", pick.as_ref(), flattened);
        (
            PeerResult::measured(name, metric, threads, r),
            flattened,
            pick,
        )
    }
}

/// What `auto` picked for a headline row.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AutoPick {
    /// The algorithm (a tree's name, or `dissemination`, `recursive-doubling`).
    pub algorithm: String,
    /// Where the choice came from (the tuning file, `SMELT_TUNE`, the prediction).
    pub origin: String,
    /// Why a tuning file was refused, if one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// A headline row's name: `smelt (auto: ALGO)`, `smelt processes (auto: ALGO,
/// flattened: oversubscribed)`.
pub fn auto_name(who: &str, pick: Option<&AutoPick>, flattened: bool) -> String {
    let algo = pick.map_or("auto".to_string(), |p| format!("auto: {}", p.algorithm));
    if flattened {
        format!("{who} ({algo}, flattened: oversubscribed)")
    } else {
        format!("{who} ({algo})")
    }
}

impl Smelt<'_> {
    /// As [`peer_figure`](Smelt::peer_figure), with every member a process of its own
    /// (`smelt bench processes`): the same default (`auto` and its algorithm table,
    /// handed to the member processes through the job as `smelt launch` does), flat
    /// when oversubscribed, the same back-to-back loop, members pinned to their CPUs
    /// (round-robin when oversubscribed).
    pub fn process_figure(&self, procs: usize, op: Op) -> (PeerResult, Option<AutoPick>) {
        let rop = runtime_op(op);
        let mut flattened = false;
        let mut pick = None;
        let r = self
            .plan_auto(op, procs)
            .map_err(|e| e.to_string())
            .and_then(|(p, a)| {
                pick = Some(a);
                let rop = rop.ok_or_else(|| format!("{} is not measured", op.name()))?;
                let cpus = &self.model.cpus;
                let (tree, pins): (Tree, Vec<Option<u32>>) = if p.oversubscribed {
                    flattened = true;
                    let mut children = vec![Vec::new(); p.tree.len()];
                    children[p.tree.root] = p.tree.preorder().into_iter().skip(1).collect();
                    let flat = Tree::new(p.tree.members.clone(), p.tree.root, children)
                        .map_err(|e| e.to_string())?;
                    let pins = (0..procs).map(|r| Some(cpus[r % cpus.len()])).collect();
                    (flat, pins)
                } else {
                    let pins = p.tree.members.iter().map(|c| Some(c.get())).collect();
                    (p.tree, pins)
                };
                let mut cfg = self.config(
                    &Plan {
                        tree: tree.clone(),
                        prediction: None,
                        oversubscribed: p.oversubscribed,
                        flatten: false,
                        algorithms: p.algorithms,
                        only: None,
                    },
                    self.runs,
                );
                cfg.group.flatten_oversubscribed = false;
                super::processes::measure_processes(&tree, &pins, rop, &cfg)
                    .map_err(|e| format!("{e:#}"))
            });
        let name = auto_name("smelt processes", pick.as_ref(), flattened);
        (
            super::processes::result(name, rop.unwrap_or(Op::Barrier), procs, r),
            pick,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversubscribed_model_repeats_the_costs() {
        let m = smelt_model::synthetic(1, 2, 10.0, 20.0, 1.0);
        let x = oversubscribed_model(&m, 5);
        x.validate().unwrap();
        assert_eq!(x.len(), 5);
        assert_eq!(x.send[0][1], 10.0);
        assert_eq!(x.send[0][2], 10.0); // members 0 and 2 share CPU 0: cheapest cost
        assert_eq!(x.receive[1][4], 20.0);
    }
}
