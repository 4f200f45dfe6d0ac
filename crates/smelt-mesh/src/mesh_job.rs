//! A [`Mesh`] whose members are processes of one host: the links are queuepairs in a
//! shared-memory segment ([`smelt_transport::shm`]), one per linked pair.
//!
//! Member processes started by a launcher make their meshes from a world instead
//! ([`World::from_env`](crate::World::from_env), then
//! [`world.mesh(..)`](crate::World::mesh)): one segment per job, one environment
//! encoding. A `MeshJob` is for a segment handed out by other means (over MPI, say):
//! the creator calls [`MeshJob::create`] with the number of members, the linked pairs
//! and a description of its own (`blob`, read back by every member), gives each member
//! the segment's [`path`](MeshJob::path) and [`key`](MeshJob::key), and may itself take
//! ranks with [`MeshJob::join`]. Each member process calls [`join`] and gets its
//! [`Mesh`] and the blob. Messages, ordering, flow control and errors are those of
//! every mesh (see [`crate::mesh`]).
//!
//! **Failures.** A member that drops its mesh closes its links, as between threads. A
//! member *process* that dies however it dies (even by `SIGKILL`, when nothing of it
//! runs any more) is found by its peers through its liveness lock
//! ([`ShmMember::is_alive`]): a receive or a send that finds the link empty (full)
//! checks the peer at most every [`LIVENESS_EVERY`], and reports
//! [`MeshError::PeerGone`] once the peer is dead and everything it sent has been
//! received. Waiters park (they are not woken by the other process), so a peer's
//! death is seen within about a millisecond.
//!
//! **Nothing left behind.** The segment's name is removed once every member joined
//! (the mappings stay valid) and when the creator's [`MeshJob`] is dropped.
//!
//! ```no_run
//! use smelt_mesh::mesh_job::{join, MeshJob};
//! use smelt_mesh::{Rank, WaitPolicy};
//! use std::time::Duration;
//! // The creator: members 0 (here) and 1 (another process), linked.
//! let job = MeshJob::create(2, &[(Rank(0), Rank(1))], 64, b"hello")?;
//! let (path, key) = (job.path().to_path_buf(), job.key()); // handed to member 1
//! let mut me = job.join(Rank(0), WaitPolicy::OVERSUBSCRIBED, None)?;
//! let mut buf = [0u8; 64];
//! let (from, tag, n) = me.recv_any(&mut buf, Duration::from_secs(5))?;
//! // In member 1:
//! let (mut mesh, blob) = join(&path, &key, Rank(1), None, None)?;
//! mesh.send(Rank(0), 1, &blob, Duration::from_secs(5))?;
//! # Ok::<(), smelt_mesh::mesh::MeshError>(())
//! ```

use crate::mesh::{Mesh, MeshError};
use crate::shm_job_accessors;
use crate::world::Watch;
use smelt_ids::Rank;
use smelt_transport::shm::{RingSpec, ShmJob, ShmMember};
use smelt_transport::{allowed_cpus, Abort, Link, QueuePairEnd, TransportError, WaitPolicy};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How often, at most, an idle link checks that its peer's process lives.
pub const LIVENESS_EVERY: Duration = Duration::from_millis(1);

/// The linked pairs of a job, each once, smaller rank first, in order.
fn normalize(size: usize, pairs: &[(Rank, Rank)]) -> Result<Vec<(u32, u32)>, MeshError> {
    let mut v = Vec::with_capacity(pairs.len());
    for &(a, b) in pairs {
        if a == b {
            return Err(MeshError::Invalid(format!(
                "a link from member {a} to itself"
            )));
        }
        if a.index() >= size || b.index() >= size {
            return Err(MeshError::Invalid(format!(
                "a link between members {a} and {b} in a set of {size} members"
            )));
        }
        let (x, y) = (a.index().min(b.index()), a.index().max(b.index()));
        v.push((x as u32, y as u32));
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// The creator's handle on a mesh of member processes. Dropping it removes the
/// segment's name (members that joined keep their links).
#[derive(Debug)]
pub struct MeshJob {
    shm: ShmJob,
    size: usize,
}

impl MeshJob {
    /// Creates the shared memory for a mesh of `size` members with a link between each
    /// of `pairs` (asking twice gives one link), `capacity` slots per ring (each way),
    /// and `blob`, a description every member reads back.
    pub fn create(
        size: usize,
        pairs: &[(Rank, Rank)],
        capacity: usize,
        blob: &[u8],
    ) -> Result<MeshJob, MeshError> {
        if size == 0 || size > smelt_transport::shm::MAX_MEMBERS as usize {
            return Err(MeshError::Invalid(format!(
                "a mesh job needs 1 to {} members, not {size}",
                smelt_transport::shm::MAX_MEMBERS
            )));
        }
        if capacity == 0 || capacity > smelt_transport::MAX_CAPACITY {
            return Err(MeshError::Invalid(format!(
                "capacity {capacity} (1 to {} slots)",
                smelt_transport::MAX_CAPACITY
            )));
        }
        let rings: Vec<RingSpec> = normalize(size, pairs)?
            .into_iter()
            .flat_map(|(a, b)| RingSpec::both_ways(a, b, capacity as u32))
            .collect();
        let shm = ShmJob::create(size as u32, &rings, blob)
            .map_err(|e| MeshError::Invalid(e.to_string()))?;
        Ok(MeshJob { shm, size })
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.size
    }

    shm_job_accessors!();

    /// Joins as member `rank` from the creator's process (a process may hold several
    /// ranks, each with its own mesh).
    pub fn join(
        &self,
        rank: Rank,
        wait: WaitPolicy,
        abort: Option<Abort>,
    ) -> Result<Mesh<ShmLink>, MeshError> {
        join(self.path(), &self.key(), rank, Some(wait), abort).map(|(m, _)| m)
    }

    /// Removes the segment's name now (it is removed anyway once every member joined,
    /// and when the `MeshJob` is dropped).
    pub fn unlink(&self) {
        self.shm.unlink();
    }
}

/// Joins the mesh job whose segment is at `path` as member `rank`: its mesh and the
/// creator's blob.
pub fn join(
    path: &Path,
    key: &str,
    rank: Rank,
    wait: Option<WaitPolicy>,
    abort: Option<Abort>,
) -> Result<(Mesh<ShmLink>, Vec<u8>), MeshError> {
    let bad = |e: &dyn std::fmt::Display| MeshError::Invalid(e.to_string());
    let rank32 = u32::try_from(rank.index()).map_err(|_| bad(&format!("rank {rank}")))?;
    let mut shm = ShmMember::attach(path, key, rank32).map_err(|e| bad(&e))?;
    let size = shm.members() as usize;
    let wait = wait.unwrap_or_else(|| {
        if allowed_cpus().map(|c| c.len()).unwrap_or(1) >= size {
            WaitPolicy::DEDICATED
        } else {
            WaitPolicy::OVERSUBSCRIBED
        }
    });
    let abort = abort.unwrap_or_default();
    shm.set_abort(abort.clone());
    let rings = shm.rings();
    if rings.len() % 2 != 0 {
        return Err(bad(&"the job's rings are not in pairs: not a mesh job"));
    }
    let blob = shm.blob().to_vec();
    let shm = Arc::new(shm);
    let mut links = Vec::new();
    for k in 0..rings.len() / 2 {
        let (ab, ba) = (rings[2 * k], rings[2 * k + 1]);
        if ab.producer != ba.consumer || ab.consumer != ba.producer {
            return Err(bad(&"the job's rings are not in pairs: not a mesh job"));
        }
        let (tx, rx, peer) = if ab.producer == rank32 {
            (2 * k, 2 * k + 1, ab.consumer)
        } else if ab.consumer == rank32 {
            (2 * k + 1, 2 * k, ab.producer)
        } else {
            continue;
        };
        let transport = |e: TransportError| bad(&format!("link to member {peer}: {e}"));
        let mut ep = QueuePairEnd {
            tx: shm.producer(tx).map_err(transport)?,
            rx: shm.consumer(rx).map_err(transport)?,
        };
        ep.set_wait_policy(wait);
        links.push((
            Rank(peer as usize),
            ShmLink {
                ep,
                watch: Watch::new(shm.clone(), peer),
            },
        ));
    }
    let mesh = Mesh::with_links(rank, size, links, Some(abort), wait)?;
    Ok((mesh, blob))
}

/// One end of a link between two member processes: a shared-memory queuepair that
/// also reports its peer's death ([`TransportError::PeerDied`]) when the peer's
/// process is gone, however it ended.
#[derive(Debug)]
pub struct ShmLink {
    ep: QueuePairEnd,
    /// The peer process's liveness check.
    watch: Watch,
}

impl Link for ShmLink {
    fn max_message_len(&self) -> usize {
        Link::max_message_len(&self.ep)
    }

    fn try_send(&mut self, tag: u64, msg: &[u8]) -> Result<(), TransportError> {
        self.watch.try_send(&mut self.ep, tag, msg)
    }

    fn send(
        &mut self,
        tag: u64,
        msg: &[u8],
        timeout: Option<Duration>,
    ) -> Result<(), TransportError> {
        // The ring's own wait checks the peer's liveness at every park.
        Link::send(&mut self.ep, tag, msg, timeout)
    }

    fn try_recv(&mut self, buf: &mut [u8]) -> Result<(u64, usize), TransportError> {
        self.watch.try_recv(&mut self.ep, buf)
    }

    fn recv(
        &mut self,
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> Result<(u64, usize), TransportError> {
        Link::recv(&mut self.ep, buf, timeout)
    }

    fn is_ready(&self) -> bool {
        Link::is_ready(&self.ep)
    }

    fn is_disconnected(&self) -> bool {
        self.watch.dead || Link::is_disconnected(&self.ep)
    }
}
