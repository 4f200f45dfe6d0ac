//! This crate's generators as [`smelt_plan::Shape`]s: what a service that keeps a tree
//! over its members (the store, `smelt_kvs::TreeSpec`) is handed, so that the service
//! depends on `smelt-plan` only and rebuilds the tree over the members that are left
//! with the same generator.
//!
//! - a [`Topology`] alone builds over a uniform machine (every two members equally
//!   far apart; member `i` is CPU `i`);
//! - a [`ModelShape`] builds over a machine model, member `i` on the model's CPU
//!   `cpus[i]`;
//! - [`from_description`] rebuilds either from [`Shape::describe`]'s text (in another
//!   process of the same program: the store's replica processes).

use crate::topology::Topology;
use crate::tree::{Tree, TreeError};
use crate::Error;
use serde::{Deserialize, Serialize};
use smelt_model::Model;
use smelt_plan::shape::{self, Shape};
use std::sync::Arc;

/// A topology over a uniform machine of `size` CPUs.
impl Shape for Topology {
    fn name(&self) -> String {
        self.to_string()
    }

    fn build(
        &self,
        size: usize,
        members: &[usize],
        root: Option<usize>,
    ) -> Result<Tree, TreeError> {
        shape::check_members(size, members, root)?;
        let m = smelt_model::synthetic(1, size, 1.0, 1.0, 1.0);
        self.generate(&m, members, root)
    }

    fn describe(&self) -> Option<String> {
        Some(shape::description(&self.to_string()))
    }
}

/// A topology over a machine model: member `i` of the group runs on the model's CPU
/// `cpus[i]` (OS id).
#[derive(Debug, Clone)]
pub struct ModelShape {
    /// The tree shape.
    pub topology: Topology,
    /// The machine.
    pub model: Arc<Model>,
    /// OS CPU id of each member of the group.
    pub cpus: Vec<u32>,
}

impl Shape for ModelShape {
    fn name(&self) -> String {
        self.topology.to_string()
    }

    fn build(
        &self,
        size: usize,
        members: &[usize],
        root: Option<usize>,
    ) -> Result<Tree, TreeError> {
        if self.cpus.len() != size {
            return Err(TreeError::Invalid(format!(
                "{} CPUs given for {size} members",
                self.cpus.len()
            )));
        }
        shape::check_members(size, members, root)?;
        let bad = |e: smelt_model::ModelError| TreeError::Invalid(e.to_string());
        let mine: Vec<u32> = members.iter().map(|&r| self.cpus[r]).collect();
        let pos = self.model.positions(&mine).map_err(bad)?;
        let root = match root {
            Some(r) => Some(self.model.positions(&[self.cpus[r]]).map_err(bad)?[0]),
            None => None,
        };
        self.topology.generate(&self.model, &pos, root)
    }

    fn describe(&self) -> Option<String> {
        serde_json::to_string(&Description {
            shape: self.topology.to_string(),
            model: Some(Box::new((*self.model).clone())),
            cpus: Some(self.cpus.clone()),
        })
        .ok()
    }
}

/// [`Shape::describe`]'s text of this crate's shapes.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Description {
    shape: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model: Option<Box<Model>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cpus: Option<Vec<u32>>,
}

/// The shape [`Shape::describe`] described: a [`Topology`] (over a uniform machine),
/// a [`ModelShape`], or `smelt-plan`'s rank-based shapes (which are topologies too).
/// Errors ([`Error::Shape`]) say what is wrong with the text.
pub fn from_description(text: &str) -> Result<Arc<dyn Shape>, Error> {
    from_description_why(text).map_err(Error::Shape)
}

fn from_description_why(text: &str) -> Result<Arc<dyn Shape>, String> {
    let d: Description =
        serde_json::from_str(text).map_err(|e| format!("not a tree shape's description: {e}"))?;
    let topology: Topology = d.shape.parse()?;
    match (d.model, d.cpus) {
        (None, None) => Ok(Arc::new(topology)),
        (Some(model), Some(cpus)) => {
            model.positions(&cpus).map_err(|e| e.to_string())?;
            Ok(Arc::new(ModelShape {
                topology,
                model: Arc::new(*model),
                cpus,
            }))
        }
        _ => Err("a tree shape's description with a model needs its CPUs, and CPUs a model".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smelt_plan::shape::Ranked;

    /// The rank-based shapes of `smelt-plan` are this crate's topologies of the same
    /// names: the same name, the same trees.
    #[test]
    fn ranked_shapes_are_the_topologies_of_their_names() {
        for r in [
            Ranked::Sequential,
            Ranked::Binary,
            Ranked::Knomial(1),
            Ranked::Knomial(2),
            Ranked::Knomial(5),
        ] {
            let t: Topology = r.name().parse().unwrap();
            assert_eq!(t.to_string(), r.name());
            for (members, root) in [
                (vec![0, 1, 2, 3, 4, 5, 6], None),
                (vec![6, 2, 4, 0], Some(4)),
            ] {
                assert_eq!(
                    Shape::build(&t, 7, &members, root).unwrap(),
                    r.build(7, &members, root).unwrap(),
                    "{r:?}"
                );
            }
        }
    }

    #[test]
    fn descriptions_round_trip() {
        let m = Arc::new(smelt_model::synthetic(2, 4, 10.0, 20.0, 3.0));
        let ms = ModelShape {
            topology: Topology::AdaptiveShuffled,
            model: m.clone(),
            cpus: vec![7, 0, 4, 3],
        };
        for s in [
            Arc::new(Topology::AdaptiveShuffled) as Arc<dyn Shape>,
            Arc::new(Topology::Knomial(3)),
            Arc::new(ms),
        ] {
            let back = from_description(&s.describe().unwrap()).unwrap();
            assert_eq!(back.name(), s.name());
            assert_eq!(
                back.build(4, &[3, 1, 2], Some(1)).unwrap(),
                s.build(4, &[3, 1, 2], Some(1)).unwrap()
            );
        }
        for (text, want) in [
            ("", "not a tree shape"),
            (r#"{"shape":"gossip"}"#, "unknown topology"),
            (r#"{"shape":"binary","cpus":[0]}"#, "needs"),
            (r#"{"shape":"binary","colour":1}"#, "unknown field"),
        ] {
            let e = from_description(text).unwrap_err();
            assert!(e.to_string().contains(want), "{text}: {e}");
        }
        let e = ModelShape {
            topology: Topology::Binary,
            model: m,
            cpus: vec![0, 99],
        }
        .build(2, &[0, 1], None)
        .unwrap_err();
        assert!(e.to_string().contains("99"), "{e}");
    }
}
