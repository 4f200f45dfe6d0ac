//! Aggregators made from a [`World`]: each member of the world is one process of the
//! aggregator (a thread, a process of `smelt launch`), with `workers` worker threads
//! sharing the member's active-message endpoint
//! ([`smelt_am::Endpoint::from_world`]).
//!
//! [`from_world`] is a **collective call**: every member calls it with the same
//! `workers` and configuration, in the same order relative to the other services it
//! makes from the world. Worker `w` of the job is worker `w % workers` of member
//! `w / workers`. Before it returns, each member has heard from every other (a hello
//! each way), so items never reach a member whose handlers are not ready.
//!
//! ```
//! use smelt_agg::{AggConfig, Scheme};
//! use smelt_mesh::World;
//! use std::time::Duration;
//! // 3 members of 2 workers each; every worker sends 0..100 round the workers, and
//! // each worker's state sums what it received.
//! let sums = World::run(World::threads(3)?, |w| {
//!     let cfg = AggConfig::new(Scheme::WPs, 8).buffer_items(16);
//!     let workers = smelt_agg::from_world(&w, 2, cfg, |_| 0u64, |sum: &mut u64, item: &[u8], _| {
//!         *sum += u64::from_le_bytes(item.try_into().unwrap());
//!     })
//!     .unwrap();
//!     std::thread::scope(|s| {
//!         let hs: Vec<_> = workers.into_iter().map(|mut wk| s.spawn(move || {
//!             for i in 0..100u64 {
//!                 wk.insert(&i.to_le_bytes(), (i % 6) as usize).unwrap();
//!             }
//!             wk.terminate(Duration::from_secs(30)).unwrap();
//!             *wk.state()
//!         })).collect();
//!         hs.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
//!     })
//! })?;
//! assert_eq!(sums.iter().sum::<u64>(), 6 * (0..100).sum::<u64>());
//! # Ok::<(), smelt_mesh::WorldError>(())
//! ```

use crate::shared::Shared;
use crate::worker::build;
use crate::{am_config, AggConfig, AggError, Out, Worker};
use smelt_am::Endpoint;
use smelt_mesh::world::{World, WorldLink};

/// A collective call: this member's `workers` workers of an aggregator over every
/// member of `world` (see the [module documentation](crate::world)). Each worker gets
/// state `state(w)` (`w` its index in the job); `handler` runs on each item delivered
/// to a worker, on that worker's thread, and may insert more items through its
/// [`Out`].
pub fn from_world<S, H>(
    world: &World,
    workers: usize,
    cfg: AggConfig,
    state: impl FnMut(usize) -> S,
    handler: H,
) -> Result<Vec<Worker<S, WorldLink>>, AggError>
where
    H: Fn(&mut S, &[u8], &mut Out<'_>) + Send + Sync + 'static,
{
    let n = world.size();
    cfg.validate(n, workers)?;
    let sh = Shared::new(world.rank().index(), n, workers, &cfg);
    let ep = Endpoint::from_world(world, sh.clone(), am_config(&cfg, sharing(world)))?;
    build(vec![ep], vec![sh], workers, cfg, true, state, handler)
}

/// How many members' endpoints share this member's links in memory: every member of
/// the world, or over MPI the ranks of this rank's node (the others are reached over
/// MPI).
fn sharing(world: &World) -> usize {
    #[cfg(feature = "mpi")]
    if let Some(m) = world.mpi() {
        return m.node_size();
    }
    world.size()
}
