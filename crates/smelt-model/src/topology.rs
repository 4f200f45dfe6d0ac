//! Topology discovery through hwloc (feature `hwloc`, on by default).
//!
//! [`discover`] asks the system hwloc library which CPUs (PUs) exist and how they
//! group, restricted to the CPUs this process may run on (hwloc's allowed cpuset
//! intersected with the process's CPU binding, i.e. `sched_getaffinity`) and to an
//! optional user-given set. [`skeleton`] turns the result into a [`Model`] whose cost
//! matrices are still empty (zeros), for a probe to fill in.

use crate::host::{cpu_model_from_proc, host_name, now_rfc3339};
use crate::{format_cpu_list, Hierarchy, Level, Model, ModelError};
use hwlocality::cpu::binding::CpuBindingFlags;
use hwlocality::cpu::cpuset::CpuSet;
use hwlocality::object::types::ObjectType;
use hwlocality::object::TopologyObject;
use hwlocality::Topology;

/// What [`discover`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct Discovered {
    /// Selected CPUs (hwloc PU `os_index`), ascending.
    pub cpus: Vec<u32>,
    /// Every CPU this process may use (before the user's selection), ascending.
    pub allowed: Vec<u32>,
    /// Host name.
    pub host: String,
    /// CPU model string (hwloc's `CPUModel` info, else `/proc/cpuinfo`), or `unknown`.
    pub cpu_model: String,
    /// Hierarchy over [`Discovered::cpus`]: source `hwloc`, levels among `Package`,
    /// `NUMANode`, `Die`, `L3Cache`, `L2Cache`, `Core` (outermost first), only those
    /// the machine has; each partitions the selected CPUs.
    pub hierarchy: Hierarchy,
    /// NUMA distances (hwloc/SLIT, relative units, 10 = local) between the groups of
    /// the `NUMANode` level, in that level's order, if the OS gives them.
    pub numa_distances: Option<Vec<Vec<f64>>>,
}

fn hwloc_err(what: &str, e: impl std::fmt::Display) -> ModelError {
    ModelError::Other(format!("hwloc: {what}: {e}"))
}

fn cpus_of(set: &CpuSet) -> Vec<u32> {
    set.iter_set()
        .map(|i| usize::from(i) as u32)
        .collect::<Vec<u32>>()
}

/// Discovers this machine's topology with hwloc. `requested` restricts the result
/// to those OS CPU ids; each must exist and be allowed to this process, else the
/// error reads `CPU 9 is not available: this process may use CPUs 0-1`.
pub fn discover(requested: Option<&[u32]>) -> Result<Discovered, ModelError> {
    let topo = Topology::new().map_err(|e| hwloc_err("cannot load the topology", e))?;
    // hwloc's allowed set reflects cgroups/cpusets; the binding reflects taskset /
    // sched_setaffinity. A process may use what is in both.
    let mut allowed_set: CpuSet = topo.allowed_cpuset().clone_target();
    if let Ok(bound) = topo.cpu_binding(CpuBindingFlags::PROCESS) {
        if bound.intersects(&allowed_set) {
            allowed_set &= &bound;
        }
    }
    let allowed = cpus_of(&allowed_set);
    if allowed.is_empty() {
        return Err(ModelError::Other(
            "hwloc reports no CPU this process may use".into(),
        ));
    }
    let cpus: Vec<u32> = match requested {
        None => allowed.clone(),
        Some(req) => {
            if req.is_empty() {
                return Err(ModelError::Other("the requested CPU set is empty".into()));
            }
            for &c in req {
                if !allowed.contains(&c) {
                    return Err(ModelError::UnknownCpu {
                        cpu: c,
                        where_: format!(
                            "available: this process may use CPUs {}",
                            format_cpu_list(&allowed)
                        ),
                    });
                }
            }
            let mut v = req.to_vec();
            v.sort_unstable();
            v.dedup();
            v
        }
    };

    let mut levels = Vec::new();
    let mut numa_objs: Vec<&TopologyObject> = Vec::new();
    for (ty, name) in [
        (ObjectType::Package, "Package"),
        (ObjectType::NUMANode, "NUMANode"),
        (ObjectType::Die, "Die"),
        (ObjectType::L3Cache, "L3Cache"),
        (ObjectType::L2Cache, "L2Cache"),
        (ObjectType::Core, "Core"),
    ] {
        let mut groups = Vec::new();
        let mut objs = Vec::new();
        for obj in topo.objects_with_type(ty) {
            let Some(set) = obj.cpuset() else { continue };
            let members: Vec<u32> = cpus_of(&set)
                .into_iter()
                .filter(|c| cpus.contains(c))
                .collect();
            if !members.is_empty() {
                groups.push(members);
                objs.push(obj);
            }
        }
        if groups.is_empty() {
            continue;
        }
        // Only keep levels that partition the selection (hwloc guarantees it for
        // these types on sane machines; a CPU-less or overlapping oddity is dropped).
        let covered: usize = groups.iter().map(Vec::len).sum();
        let mut all: Vec<u32> = groups.iter().flatten().copied().collect();
        all.sort_unstable();
        all.dedup();
        if covered != cpus.len() || all.len() != cpus.len() {
            continue;
        }
        if ty == ObjectType::NUMANode {
            numa_objs = objs;
        }
        levels.push(Level {
            name: name.into(),
            groups,
        });
    }

    let numa_distances = numa_distances(&topo, &numa_objs);
    let cpu_model = topo
        .objects_with_type(ObjectType::Package)
        .find_map(|p| {
            p.info("CPUModel")
                .map(|s| s.to_string_lossy().trim().to_string())
        })
        .filter(|s| !s.is_empty())
        .or_else(cpu_model_from_proc)
        .unwrap_or_else(|| "unknown".into());
    Ok(Discovered {
        cpus,
        allowed,
        host: host_name(),
        cpu_model,
        hierarchy: Hierarchy {
            source: "hwloc".into(),
            levels,
        },
        numa_distances,
    })
}

/// The NUMA distance matrix for `nodes` (in that order), if hwloc has one covering
/// all of them.
fn numa_distances(topo: &Topology, nodes: &[&TopologyObject]) -> Option<Vec<Vec<f64>>> {
    if nodes.is_empty() {
        return None;
    }
    let all = topo.distances_with_type(None, ObjectType::NUMANode).ok()?;
    for d in all {
        let objs: Vec<Option<&TopologyObject>> = d.objects().collect();
        let idx: Option<Vec<usize>> = nodes
            .iter()
            .map(|n| {
                objs.iter()
                    .position(|o| o.is_some_and(|o| o.logical_index() == n.logical_index()))
            })
            .collect();
        let Some(idx) = idx else { continue };
        let k = objs.len();
        let values = d.distances();
        return Some(
            idx.iter()
                .map(|&a| idx.iter().map(|&b| values[a * k + b] as f64).collect())
                .collect(),
        );
    }
    None
}

/// A model skeleton for the discovered CPUs: provenance (host, CPU model, date,
/// tool, units) and hierarchy filled, NUMA distances copied, `send` and `receive`
/// all zeros (to be measured), `method` empty (the caller sets it, e.g. `probe`).
pub fn skeleton(d: &Discovered) -> Model {
    let n = d.cpus.len();
    let zeros = vec![vec![0.0; n]; n];
    let mut m = Model::new(d.cpus.clone(), zeros.clone(), zeros);
    m.provenance.host = d.host.clone();
    m.provenance.cpu_model = d.cpu_model.clone();
    m.provenance.date = now_rfc3339();
    m.hierarchy = d.hierarchy.clone();
    m.numa_distances = d.numa_distances.clone();
    m
}

impl Discovered {
    /// Same as [`skeleton`].
    pub fn to_model_skeleton(&self) -> Model {
        skeleton(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovers_this_machine() {
        let d = discover(None).unwrap();
        eprintln!("{d:?}");
        assert!(!d.cpus.is_empty());
        assert_eq!(d.cpus, d.allowed);
        assert_eq!(d.hierarchy.source, "hwloc");
        assert!(d.hierarchy.level("Core").is_some(), "{:?}", d.hierarchy);
        let m = skeleton(&d);
        m.validate().unwrap();
        assert_eq!(m.provenance.units, "ns");
        assert!(!m.provenance.date.is_empty());
    }

    #[test]
    fn restricts_to_the_requested_cpus() {
        let d = discover(None).unwrap();
        let first = d.cpus[0];
        let one = discover(Some(&[first])).unwrap();
        assert_eq!(one.cpus, vec![first]);
        for l in &one.hierarchy.levels {
            assert_eq!(l.groups, vec![vec![first]]);
        }
        skeleton(&one).validate().unwrap();
    }

    #[test]
    fn rejects_unavailable_cpus() {
        let d = discover(None).unwrap();
        let bad = d.allowed.iter().max().unwrap() + 1000;
        let e = discover(Some(&[bad])).unwrap_err().to_string();
        let want = format!(
            "CPU {bad} is not available: this process may use CPUs {}",
            format_cpu_list(&d.allowed)
        );
        assert_eq!(e, want);
        assert!(discover(Some(&[])).is_err());
    }
}
