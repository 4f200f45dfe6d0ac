//! smelt's side of `smelt bench`: trees from the model, the simulator's predictions,
//! and the collectives measured with the runtime.

use smelt_model::Model;
use smelt_probe::peers::{Metric, PeerResult, Status};
use smelt_probe::Summary;
use smelt_tree::{Op, Payload, Prediction, Topology, Tree};
use std::time::Duration;

/// What smelt's figures are measured with.
pub struct Smelt<'a> {
    pub model: &'a Model,
    pub rounds: usize,
    pub timeout: Duration,
}

/// A tree ready to measure.
pub struct Plan {
    pub topology: Topology,
    pub tree: Tree,
    pub prediction: Option<Prediction>,
}

impl Smelt<'_> {
    /// The tree of `t` over `members` members and its predicted times.
    pub fn plan(&self, t: Topology, members: usize) -> Result<Plan, String> {
        let n = self.model.len();
        if members > n {
            return Err(format!(
                "{members} members on {n} CPUs is not supported yet"
            ));
        }
        let pos: Vec<usize> = (0..members).collect();
        let tree = t
            .generate(self.model, &pos, None)
            .map_err(|e| e.to_string())?;
        let prediction = smelt_tree::predict(self.model, &tree, Payload::default()).ok();
        Ok(Plan {
            topology: t,
            tree,
            prediction,
        })
    }

    /// Measures `op` over the plan's tree.
    pub fn measure(&self, _p: &Plan, _op: Op) -> Result<Summary, String> {
        Err("the runtime is not available yet".into())
    }

    /// smelt's figure for the peer comparison: `op` over `t` with `threads` members.
    pub fn peer_figure(&self, t: Topology, threads: usize, op: Op) -> PeerResult {
        let metric = match op {
            Op::Broadcast | Op::AtomicBroadcast => Metric::Broadcast,
            Op::Reduce => Metric::Reduce,
            _ => Metric::Barrier,
        };
        let r = self.plan(t, threads).and_then(|p| self.measure(&p, op));
        PeerResult {
            name: format!("smelt ({t})"),
            metric,
            threads,
            status: match r {
                Ok(ns) => Status::Ok { ns },
                Err(reason) => Status::Failed { reason },
            },
        }
    }
}
