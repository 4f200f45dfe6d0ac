//! Where communication threads go, from the machine model: the lanes of an offload
//! pool (`smelt_offload::OffloadConfig::cpus`), or any threads that serve the other CPUs of
//! their node. A query of the model like [`Model::node_ids`]; it lives here so that the
//! offload crate, made from a world, compiles no model crate (a world knows the nodes
//! of its members, not the NUMA nodes and costs inside one host).

use crate::{Model, ModelError};

/// The default number of lanes (communication threads): one per node of the model
/// (its NUMA nodes, else packages; see [`Model::node_ids`]).
pub fn default_lanes(model: &Model) -> usize {
    let ids = model.node_ids();
    ids.iter().copied().max().map_or(1, |m| m + 1)
}

/// CPUs for `lanes` communication threads: node by node in turn (lane 0 on node 0,
/// lane 1 on node 1, ...), and within a node the CPUs cheapest for the node's other
/// CPUs to reach first (the smallest mean of `send[j][i] + receive[j][i]` over the
/// other CPUs `j` of the node). Skips CPUs not in `allowed` (if given). Errors if there
/// are fewer usable CPUs than lanes, or no lanes.
pub fn default_cpus(
    model: &Model,
    lanes: usize,
    allowed: Option<&[u32]>,
) -> Result<Vec<u32>, ModelError> {
    if lanes == 0 {
        return Err(ModelError::Other("no lanes to place".into()));
    }
    let ids = model.node_ids();
    let nodes = ids.iter().copied().max().map_or(0, |m| m + 1);
    let ok = |c: u32| allowed.is_none_or(|a| a.contains(&c));
    // Per node: positions ordered by how cheap they are to reach from the node.
    let mut ranked: Vec<Vec<usize>> = (0..nodes)
        .map(|n| {
            let members: Vec<usize> = (0..model.len())
                .filter(|&p| ids[p] == n && ok(model.cpus[p]))
                .collect();
            let cost = |i: usize| -> f64 {
                let others: Vec<usize> = members.iter().copied().filter(|&j| j != i).collect();
                if others.is_empty() {
                    return 0.0;
                }
                others
                    .iter()
                    .map(|&j| model.send(j, i) + model.receive(j, i))
                    .sum::<f64>()
                    / others.len() as f64
            };
            let mut m: Vec<(f64, usize)> = members.iter().map(|&p| (cost(p), p)).collect();
            m.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            m.into_iter().map(|(_, p)| p).collect()
        })
        .filter(|v: &Vec<usize>| !v.is_empty())
        .collect();
    let usable: usize = ranked.iter().map(Vec::len).sum();
    if usable < lanes {
        return Err(ModelError::Other(format!(
            "{lanes} communication threads but only {usable} usable CPUs in the model"
        )));
    }
    for r in &mut ranked {
        r.reverse(); // pop() takes the cheapest
    }
    let mut out = Vec::with_capacity(lanes);
    let mut n = 0;
    let k = ranked.len();
    while out.len() < lanes {
        if let Some(p) = ranked[n % k].pop() {
            out.push(model.cpus[p]);
        }
        n += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Hierarchy, Level};

    /// 4 CPUs in 2 NUMA nodes; CPU 1 and CPU 2 are the cheap ones of their nodes.
    fn model() -> Model {
        let c = |i: usize, j: usize| -> f64 {
            if i == j {
                0.0
            } else if i / 2 != j / 2 {
                500.0
            } else if j == 1 || j == 2 {
                50.0
            } else {
                90.0
            }
        };
        let m: Vec<Vec<f64>> = (0..4).map(|i| (0..4).map(|j| c(i, j)).collect()).collect();
        let mut model = Model::new(vec![0, 1, 2, 3], m.clone(), m);
        model.hierarchy = Hierarchy {
            source: "test".into(),
            levels: vec![Level {
                name: "NUMANode".into(),
                groups: vec![vec![0, 1], vec![2, 3]],
            }],
        };
        model
    }

    #[test]
    fn one_lane_per_node_on_the_cheapest_cpu() {
        let m = model();
        assert_eq!(default_lanes(&m), 2);
        assert_eq!(default_cpus(&m, 2, None).unwrap(), vec![1, 2]);
        assert_eq!(default_cpus(&m, 4, None).unwrap(), vec![1, 2, 0, 3]);
        assert_eq!(default_cpus(&m, 2, Some(&[0, 3])).unwrap(), vec![0, 3]);
        assert!(default_cpus(&m, 5, None)
            .unwrap_err()
            .to_string()
            .contains("only 4 usable"));
        assert!(default_cpus(&m, 0, None).is_err());
    }
}
