//! Building the endpoints of a job.

use crate::endpoint::{AmConfig, Dest, Endpoint, Name, Route};
use crate::error::AmError;
use smelt_mesh::world::World;
use smelt_mesh::Rank;
use std::hash::{BuildHasher, Hasher};

/// A fresh random 64-bit tag (from the standard library's per-process random
/// hashing keys, mixed with a counter and the clock: unpredictable enough to catch
/// misdirected messages, which is what tags are for).
pub fn random_tag() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// The description of a job every endpoint needs: each endpoint's name, tag and node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Table {
    pub(crate) names: Vec<Name>,
    pub(crate) tags: Vec<u64>,
}

impl Table {
    /// Endpoint `me`'s destination table and the global index of each local mesh
    /// rank: the endpoints chosen by `local` are reached over the mesh (mesh rank =
    /// their order among them), the others over the slow channel (a world of threads
    /// or processes reaches every member over its mesh, whatever nodes it declares; a
    /// world of MPI ranks the members of its node).
    pub(crate) fn dests_by(
        &self,
        me: usize,
        local: impl Fn(usize) -> bool,
    ) -> (Vec<Dest>, Vec<usize>) {
        let local: Vec<usize> = (0..self.names.len()).filter(|&i| local(i)).collect();
        let dests = self
            .names
            .iter()
            .zip(&self.tags)
            .enumerate()
            .map(|(i, (&name, &key))| Dest {
                name,
                key,
                route: if i == me {
                    crate::endpoint::Route::Me
                } else {
                    match local.iter().position(|&l| l == i) {
                        Some(r) => Route::Local(Rank(r)),
                        None => Route::Remote,
                    }
                },
                gone: false,
            })
            .collect();
        (dests, local)
    }
}

/// `n` endpoints between the threads of this process: the endpoints of a world of
/// `n` threads ([`World::threads`], [`Endpoint::from_world`]) made at once, for a
/// program that wants nothing else from a world. Endpoint `i` is named `0.0.i` and
/// gets state `state(i)` and a random tag, which every other endpoint knows; links
/// hold `AmConfig::link.capacity` slots. Move each into its thread.
pub fn threads<S>(
    n: usize,
    cfg: AmConfig,
    mut state: impl FnMut(usize) -> S,
) -> Result<Vec<Endpoint<S>>, AmError> {
    cfg.validate()?;
    if n == 0 {
        return Err(AmError::Invalid("a job of no endpoints".into()));
    }
    // Between threads, making a service is not a meeting: one thread may make every
    // member's part in turn.
    World::threads(n)?
        .iter()
        .enumerate()
        .map(|(i, w)| Endpoint::from_world(w, state(i), cfg.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_route() {
        let names = vec![
            Name {
                node: 0,
                process: 0,
                endpoint: 0,
            },
            Name {
                node: 0,
                process: 1,
                endpoint: 0,
            },
            Name {
                node: 1,
                process: 0,
                endpoint: 0,
            },
            Name {
                node: 0,
                process: 2,
                endpoint: 0,
            },
        ];
        let t = Table {
            tags: (0..4).map(|_| random_tag()).collect(),
            names,
        };
        let (d, local) = t.dests_by(3, |i| t.names[i].node == t.names[3].node);
        assert_eq!(local, vec![0, 1, 3]);
        assert_eq!(d[0].route, Route::Local(Rank(0)));
        assert_eq!(d[1].route, Route::Local(Rank(1)));
        assert_eq!(d[2].route, Route::Remote);
        assert_eq!(d[3].route, Route::Me);
        let tags: std::collections::BTreeSet<u64> = (0..1000).map(|_| random_tag()).collect();
        assert_eq!(tags.len(), 1000);
    }
}
