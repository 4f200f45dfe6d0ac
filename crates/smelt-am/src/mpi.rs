//! Endpoints across nodes over MPI (the `mpi` feature): one endpoint per MPI rank,
//! reaching the ranks of its own node over queuepairs in shared memory and the others
//! over MPI point-to-point messages ([`MpiRemote`]).
//!
//! A program started by `mpirun` makes a world of its ranks
//! (`smelt_mesh::World::from_mpi`) and its endpoints with
//! [`Endpoint::from_world`] (or [`endpoint_with`], to choose the window of MPI sends
//! in flight), every rank in the same order: a collective call. Every endpoint's tag
//! is exchanged (`MPI_Allgather` on the world's communicator); the members of a node
//! reach each other over links carved from the node's world segment. Endpoint `i` is
//! MPI rank `i` and is named `node.process.0` (the node's index, the rank's place on
//! its node).
//!
//! ```no_run
//! use smelt_am::{mpi, AmError, AmConfig, Endpoint};
//! use smelt_mesh::mpi::rsmpi;
//! use smelt_mesh::World;
//! use std::time::Duration;
//! let universe = rsmpi::initialize().expect("MPI");
//! let world = World::from_mpi(&universe.world())?;
//! let mut ep = Endpoint::from_world(&world, 0u64, AmConfig::default())?;
//! ep.register(1, |sum: &mut u64, ctx, m| {
//!     *sum += m.args[0];
//!     ctx.reply(2, &[]).unwrap()
//! })?;
//! ep.register(2, |_, _, _| {})?;
//! let me = world.rank().index();
//! ep.request((me + 1) % world.size(), 1, &[me as u64])?;
//! mpi::finish(&world, &mut ep, Duration::from_secs(30))?; // every rank's requests answered
//! drop(ep);
//! drop(world); // before `universe` finalises MPI
//! # Ok::<(), AmError>(())
//! ```
//!
//! **Nodes** ([`Nodes`]): the ranks that share memory (`MPI_Comm_split_type` with
//! `MPI_COMM_TYPE_SHARED`); or emulated nodes of `k` consecutive ranks of each host
//! (`SMELT_RANKS_PER_NODE=k`, as in smelt-mpi), so that the MPI paths run on one
//! machine; or every rank its own node (`SMELT_AM_TRANSPORT=mpi`: everything over
//! MPI). [`Options::from_env`] reads these variables.
//!
//! **Messages over MPI.** A link message is one `MPI_Isend` of its payload followed by
//! its 64-bit active-message tag (MPI tags are small integers; every message uses MPI
//! tag [`MPI_TAG`] on a communicator of its own, duplicated from `MPI_COMM_WORLD` for
//! each endpoint). At most [`Options::in_flight`] sends are in flight per endpoint;
//! past that, a send reports the channel full and the endpoint serves its own queues
//! while it waits, as for a full queuepair. Buffers are kept and reused. A receive is
//! `MPI_Improbe` from any source and `MPI_Mrecv`. MPI does not let messages between
//! two ranks on one communicator overtake each other, so messages from one endpoint to
//! another stay in order (per-pair FIFO), as on shared memory.
//!
//! **Ending.** [`finish`] waits until every rank's requests were answered (each
//! rank serves its endpoint meanwhile) so that no rank leaves while another still
//! needs it; then the endpoints and the world can be dropped. Dropping
//! an [`MpiRemote`] completes its sends in flight for up to [`Options::linger`], then
//! cancels the rest (their buffers are leaked rather than freed under MPI).
//!
//! **Failures.** MPI's default error handler aborts the job on a communication error,
//! and `mpirun` ends every rank when one dies: a dead rank is not reported as
//! [`AmError::PeerGone`] over MPI (it is between the ranks of a node). Every set-up
//! step waits at most [`Options::timeout`] for the other ranks (non-blocking
//! collectives, tested until then): a rank that never joins makes the others fail with
//! [`AmError::Timeout`] instead of hanging.
//!
//! **Threads.** MPI must be initialised with at least `MPI_THREAD_SERIALIZED` (an
//! endpoint may move to another thread; two endpoints of one process must not make MPI
//! calls at the same time unless MPI was initialised with `MPI_THREAD_MULTIPLE`).

use crate::endpoint::{AmConfig, Endpoint, Name};
use crate::error::AmError;
use crate::poll::PollPolicy;
use crate::remote::Remote;
use crate::setup::{random_tag, Table};
use smelt_mesh::mesh::Mesh;
use smelt_mesh::mpi::{self, check, error_string, ffi, MpiCalls, MpiError};
use smelt_mesh::world::{World, WorldLink};
use smelt_mesh::Rank;
use smelt_transport::{Abort, Link, TransportError, WaitPolicy};
use std::os::raw::{c_int, c_void};
use std::time::{Duration, Instant};

pub use smelt_mesh::mpi::Nodes;

/// The MPI tag of every active-message link message (on the endpoint's own
/// communicator).
pub const MPI_TAG: c_int = 0x5A3;

/// Environment variable: `mpi` sends every message over MPI (each rank its own
/// node); `shm` or unset: nodes of ranks that share memory (or emulated ones).
pub const ENV_TRANSPORT: &str = smelt_settings::AM_TRANSPORT;
/// Environment variable: emulated nodes of this many consecutive ranks of each host
/// (the variable smelt-mpi reads too); unset or 0: real nodes.
pub const ENV_RANKS_PER_NODE: &str = smelt_settings::RANKS_PER_NODE;
/// Environment variable: most MPI sends in flight per endpoint.
pub const ENV_IN_FLIGHT: &str = smelt_settings::AM_MPI_IN_FLIGHT;

/// How endpoints over MPI reach other nodes ([`Options::from_env`]: what
/// [`Endpoint::from_world`] reads over a world of MPI ranks).
#[derive(Debug, Clone)]
pub struct Options {
    /// How ranks are grouped into nodes.
    pub nodes: Nodes,
    /// Most MPI sends in flight per endpoint (default 64; at least 1).
    pub in_flight: usize,
    /// Largest link message over MPI, in bytes (default 64 KiB; bulk data is sent in
    /// chunks of [`AmConfig::bulk_chunk`] anyway).
    pub max_message: usize,
    /// How long a dropped [`MpiRemote`] waits for its sends in flight before it
    /// cancels them (default 1 s).
    pub linger: Duration,
    /// Longest wait for the other ranks in a collective step (set-up; the world's own
    /// timeout over a world of MPI ranks);
    /// default 60 s.
    pub timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            nodes: Nodes::Shared,
            in_flight: 64,
            max_message: 64 << 10,
            linger: Duration::from_secs(1),
            timeout: Duration::from_secs(60),
        }
    }
}

impl Options {
    /// The defaults, with [`ENV_TRANSPORT`], [`ENV_RANKS_PER_NODE`] and
    /// [`ENV_IN_FLIGHT`] applied. A value that does not parse is an error.
    pub fn from_env() -> Result<Options, AmError> {
        Self::from_vars(|k| smelt_settings::raw(k).map(|v| v.to_string_lossy().into_owned()))
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Options, AmError> {
        let mut o = Options::default();
        let count = |k: &str| -> Result<Option<usize>, AmError> {
            match var(k) {
                None => Ok(None),
                Some(v) if v.trim().is_empty() => Ok(None),
                Some(v) => v
                    .trim()
                    .parse::<usize>()
                    .map(Some)
                    .map_err(|_| AmError::Invalid(format!("{k}={v:?} is not a count"))),
            }
        };
        let per_node = count(ENV_RANKS_PER_NODE)?.unwrap_or(0);
        o.nodes = match var(ENV_TRANSPORT).as_deref().map(str::trim) {
            None | Some("") | Some("shm") | Some("auto") => Nodes::per_node(per_node),
            Some("mpi") => Nodes::MpiOnly,
            Some(v) => {
                return Err(AmError::Invalid(format!(
                    "{ENV_TRANSPORT}={v:?} (mpi, shm or auto)"
                )))
            }
        };
        if let Some(n) = count(ENV_IN_FLIGHT)? {
            o.in_flight = n;
        }
        o.validate()?;
        Ok(o)
    }

    fn validate(&self) -> Result<(), AmError> {
        if self.in_flight == 0 || self.in_flight > 1 << 16 {
            return Err(AmError::Invalid(format!(
                "{} MPI sends in flight (1 to 65536)",
                self.in_flight
            )));
        }
        if self.max_message < 64 || self.max_message > (i32::MAX as usize) - 8 {
            return Err(AmError::Invalid(format!(
                "MPI messages of at most {} bytes (64 bytes to 2 GiB)",
                self.max_message
            )));
        }
        if self.nodes == Nodes::Emulated(0) {
            return Err(AmError::Invalid("emulated nodes of 0 ranks".into()));
        }
        Ok(())
    }
}

fn transport_error(what: &str, rc: c_int) -> TransportError {
    TransportError::NotYours(format!("{what} failed: {}", error_string(rc)))
}

/// An MPI failure as this crate's error: a timeout stays one, anything else is an
/// invalid set-up naming the call.
pub(crate) fn am_error(e: MpiError) -> AmError {
    match e {
        MpiError::Timeout { call, after } => AmError::Timeout {
            what: format!("in {call} (waiting for the other MPI ranks)"),
            after,
        },
        e => AmError::Invalid(e.to_string()),
    }
}

/// Ends a phase of active messages over a world of MPI ranks (`World::from_mpi`):
/// waits until this endpoint's requests are all answered, then serves it until every
/// rank got there too (`MPI_Ibarrier` on the world's communicator), so that no rank's
/// endpoint leaves while another still sends to it. A collective call; at most
/// `timeout`. Departures of the node's endpoints seen meanwhile are not errors.
pub fn finish<S, L: Link + 'static>(
    world: &World,
    ep: &mut Endpoint<S, L>,
    timeout: Duration,
) -> Result<(), AmError> {
    let m = world
        .mpi()
        .ok_or_else(|| AmError::Invalid("not a world of MPI ranks".into()))?;
    let end = Instant::now() + timeout;
    loop {
        match ep.quiesce(end.saturating_duration_since(Instant::now())) {
            Err(AmError::PeerGone { .. }) => continue,
            r => break r?,
        }
    }
    // SAFETY: a placeholder written over by MPI_Ibarrier.
    let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: the world's communicator is valid while the world lives; `req` a valid out-pointer.
    check("MPI_Ibarrier", unsafe {
        ffi::MPI_Ibarrier(m.comm(), &mut req)
    })
    .map_err(am_error)?;
    let mut idle = 0u32;
    loop {
        let mut flag: c_int = 0;
        // SAFETY: `req` is the barrier's active request.
        check("MPI_Test", unsafe {
            ffi::MPI_Test(&mut req, &mut flag, ffi::RSMPI_STATUS_IGNORE)
        })
        .map_err(am_error)?;
        if flag != 0 {
            return Ok(());
        }
        match ep.poll() {
            Ok(0) => idle += 1,
            Ok(_) => idle = 0,
            Err(AmError::PeerGone { .. }) => {}
            Err(e) => return Err(e),
        }
        if Instant::now() >= end {
            // The barrier stays active (its request holds no buffer of ours).
            return Err(AmError::Timeout {
                what: "waiting for every rank to finish".into(),
                after: timeout,
            });
        }
        if idle > 64 {
            // Nothing to serve lately: sleep, longer the longer it stays quiet (a
            // message that arrives starts over from polling).
            let us = 20u64 << ((idle - 64) / 64).min(6);
            std::thread::sleep(Duration::from_micros(us));
        }
    }
}

/// [`Endpoint::from_world`] over a world of MPI ranks with at most `in_flight` MPI
/// sends in flight to the ranks of other nodes (instead of [`Options::from_env`]'s
/// [`ENV_IN_FLIGHT`]): a collective call, as `from_world`.
pub fn endpoint_with<S>(
    world: &World,
    state: S,
    cfg: AmConfig,
    in_flight: usize,
) -> Result<Endpoint<S, WorldLink>, AmError> {
    world_endpoint_in(world, state, cfg, Some(in_flight))
}

/// [`Endpoint::from_world`] for a world of MPI ranks (`World::from_mpi`): a collective
/// call over the world's communicator. Endpoint `i` is rank `i`, named
/// `node.place.0`; the members of its node are reached over an all-to-all mesh of
/// `AmConfig::link.capacity` slots carved from the node's world segment, the others over an
/// [`MpiRemote`] on the world's communicator ([`Options::from_env`]'s window of sends
/// in flight; with `SMELT_AM_TRANSPORT=mpi`, every other endpoint). If any rank fails,
/// every rank gets an error.
pub(crate) fn world_endpoint<S>(
    world: &World,
    state: S,
    cfg: AmConfig,
) -> Result<Endpoint<S, WorldLink>, AmError> {
    world_endpoint_in(world, state, cfg, None)
}

/// [`world_endpoint`] with `in_flight` sends in flight, if given.
fn world_endpoint_in<S>(
    world: &World,
    state: S,
    cfg: AmConfig,
    in_flight: Option<usize>,
) -> Result<Endpoint<S, WorldLink>, AmError> {
    let m = world
        .mpi()
        .ok_or_else(|| AmError::Invalid("not a world of MPI ranks".into()))?;
    let env = Options::from_env()?;
    // `SMELT_AM_TRANSPORT=mpi`: every message over MPI, whatever the world's nodes.
    let only_mpi = env.nodes == Nodes::MpiOnly && world.size() > 1;
    let opts = Options {
        nodes: m.grouping(),
        timeout: m.timeout(),
        in_flight: in_flight.unwrap_or(env.in_flight),
        ..env
    };
    let t = Some(m.timeout());
    let (me, size) = (world.rank().index(), world.size());
    let valid = cfg.validate().and_then(|()| opts.validate());
    // Everybody's tag, whether its configuration is valid, and whether it sends every
    // message over MPI (every rank must, or none: they carve the node's links alike).
    let mine = [random_tag(), valid.is_ok() as u64, only_mpi as u64];
    let all = mpi::allgather_words::<MpiCalls>(m.comm(), &mine, t).map_err(am_error)?;
    valid?;
    if let Some(bad) = (0..size).find(|&r| all[3 * r + 1] == 0) {
        return Err(AmError::Invalid(format!(
            "rank {bad}'s endpoint configuration is invalid"
        )));
    }
    if let Some(other) = (0..size).find(|&r| all[3 * r + 2] != only_mpi as u64) {
        return Err(AmError::Invalid(format!(
            "rank {other} and rank {me} disagree on {ENV_TRANSPORT} (every rank sends over MPI, or none)"
        )));
    }
    let table = Table {
        names: m
            .layout()
            .place
            .iter()
            .map(|&[node, place]| Name {
                node: node as u32,
                process: place as u32,
                endpoint: 0,
            })
            .collect(),
        tags: (0..size).map(|r| all[3 * r]).collect(),
    };
    let wait = cfg.link.wait.unwrap_or_else(|| world.wait_policy());
    let mesh = if only_mpi {
        Mesh::with_links(Rank(0), 1, Vec::new(), None, wait)
            .map_err(|e| AmError::Invalid(e.to_string()))
    } else {
        node_mesh_of(world, cfg.link.capacity, wait)
    };
    // Every rank has its node's links (or fails alike).
    let ok = mpi::all::<MpiCalls>(m.comm(), mesh.is_ok(), t).map_err(am_error)?;
    let mesh = mesh?;
    if !ok {
        return Err(AmError::Invalid(
            "a rank on another node could not make its node's links".into(),
        ));
    }
    let node = world.node();
    let (dests, local) = table.dests_by(me, |i| {
        if only_mpi {
            i == me
        } else {
            world.node_of(Rank(i)) == Some(node)
        }
    });
    let remote: Option<Box<dyn Remote>> = if world.nodes() > 1 || only_mpi {
        Some(Box::new(MpiRemote::new(m.comm(), &opts)?))
    } else {
        None
    };
    let mut cfg = cfg;
    if local.len() == 1 {
        cfg.poll = PollPolicy::Always;
    }
    Endpoint::new(me, mesh, local, remote, dests, table.tags[me], state, cfg)
}

/// This rank's mesh over its node of an MPI world: a link to every other rank of the
/// node, carved from the node's segment; mesh rank = place on the node.
fn node_mesh_of(
    world: &World,
    capacity: usize,
    wait: WaitPolicy,
) -> Result<Mesh<WorldLink>, AmError> {
    let m = world.mpi().expect("checked by the caller");
    let ranks = m.node_ranks();
    let n = ranks.len();
    let pairs: Vec<(Rank, Rank)> = (0..n)
        .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
        .map(|(a, b)| (Rank(ranks[a]), Rank(ranks[b])))
        .collect();
    let abort = Abort::new();
    let ends = world.queuepairs(&pairs, capacity, Some(wait), Some(abort.clone()))?;
    let me = world.rank();
    let mut links = Vec::new();
    if let Some(job) = world.shm_member() {
        for (&(a, b), end) in pairs.iter().zip(ends) {
            if let Some(end) = end {
                let peer = if a == me { b } else { a };
                let place = Rank(m.place_of(peer).expect("a rank of the world"));
                links.push((place, WorldLink::watched(end, job.clone(), place)));
            }
        }
    }
    Mesh::with_links(Rank(m.node_rank()), n, links, Some(abort), wait)
        .map_err(|e| AmError::Invalid(e.to_string()))
}

/// The slow channel of an endpoint over MPI: point-to-point messages on a
/// communicator of its own; the global index of an endpoint is its MPI rank.
#[derive(Debug)]
pub struct MpiRemote {
    comm: ffi::MPI_Comm,
    rank: usize,
    size: usize,
    /// One request per send slot (`MPI_REQUEST_NULL` when free).
    reqs: Vec<ffi::MPI_Request>,
    /// Each slot's buffer: a message's payload then its tag. Never touched while its
    /// send is in flight.
    bufs: Vec<Vec<u8>>,
    free: Vec<usize>,
    /// Scratch for `MPI_Testsome`'s indices.
    done: Vec<c_int>,
    max_len: usize,
    linger: Duration,
}

// SAFETY: the communicator and request handles are process-wide MPI objects; the
// buffers are owned. MPI is initialised with at least MPI_THREAD_SERIALIZED by
// whoever made the world, so the endpoint may make its MPI calls from whichever thread owns it.
unsafe impl Send for MpiRemote {}

impl MpiRemote {
    /// A channel over a duplicate of `comm` (collective over `comm`), with `opts`'s
    /// window of sends in flight and largest message.
    pub fn new(comm: ffi::MPI_Comm, opts: &Options) -> Result<MpiRemote, AmError> {
        opts.validate()?;
        mpi::require_active().map_err(am_error)?;
        let mut comm = mpi::dup::<MpiCalls>(comm).map_err(am_error)?;
        let (rank, size) = match mpi::rank_size::<MpiCalls>(comm) {
            Ok(rs) => rs,
            Err(e) => {
                mpi::free::<MpiCalls>(&mut comm);
                return Err(am_error(e));
            }
        };
        let n = opts.in_flight;
        Ok(MpiRemote {
            comm,
            rank,
            size,
            // SAFETY: reading MPI's predefined null request.
            reqs: vec![unsafe { ffi::RSMPI_REQUEST_NULL }; n],
            bufs: (0..n).map(|_| Vec::new()).collect(),
            free: (0..n).rev().collect(),
            done: vec![0; n],
            max_len: opts.max_message,
            linger: opts.linger,
        })
    }

    /// Sends in flight now.
    pub fn in_flight(&self) -> usize {
        self.reqs.len() - self.free.len()
    }

    /// This rank in the channel's communicator.
    pub fn rank(&self) -> usize {
        self.rank
    }

    fn test_some(&mut self) -> Result<(), TransportError> {
        if self.free.len() == self.reqs.len() {
            return Ok(());
        }
        let mut out: c_int = 0;
        // `reqs` holds `reqs.len()` requests (active ones, and null ones which MPI skips)
        // and `done` as many ints; completed requests are set to null by MPI and their
        // slots freed below; statuses are ignored.
        // SAFETY: as argued in the lines above.
        let rc = unsafe {
            ffi::MPI_Testsome(
                self.reqs.len() as c_int,
                self.reqs.as_mut_ptr(),
                &mut out,
                self.done.as_mut_ptr(),
                ffi::RSMPI_STATUSES_IGNORE,
            )
        };
        if rc != ffi::MPI_SUCCESS as c_int {
            return Err(transport_error("MPI_Testsome", rc));
        }
        // SAFETY: reading MPI's constant.
        if out == unsafe { ffi::RSMPI_UNDEFINED } || out <= 0 {
            return Ok(());
        }
        for &i in &self.done[..out as usize] {
            self.free.push(i as usize);
        }
        Ok(())
    }
}

impl Remote for MpiRemote {
    fn max_message_len(&self) -> usize {
        self.max_len
    }

    fn try_send(&mut self, to: usize, tag: u64, msg: &[u8]) -> Result<(), TransportError> {
        if to >= self.size || to == self.rank {
            return Err(TransportError::NotYours(format!(
                "no MPI rank {to} to send to (ranks 0 to {}, this is {})",
                self.size.saturating_sub(1),
                self.rank
            )));
        }
        if msg.len() > self.max_len {
            return Err(TransportError::MessageTooLarge {
                len: msg.len(),
                max: self.max_len,
            });
        }
        if self.free.is_empty() {
            self.test_some()?;
        }
        let Some(slot) = self.free.pop() else {
            return Err(TransportError::Full);
        };
        let buf = &mut self.bufs[slot];
        buf.clear();
        buf.extend_from_slice(msg);
        buf.extend_from_slice(&tag.to_le_bytes());
        // `reqs[slot]` is null (free) and becomes the send's request; `comm` is valid; `to`
        // its rank. The slot is off the free list until MPI_Testsome completes its send,
        // and drop waits for it or leaks it; a Vec's heap block does not move with the Vec.
        // SAFETY: `buf` is untouched by us until the send completes (above).
        let rc = unsafe {
            ffi::MPI_Isend(
                buf.as_ptr().cast::<c_void>(),
                buf.len() as c_int,
                ffi::RSMPI_UINT8_T,
                to as c_int,
                MPI_TAG,
                self.comm,
                &mut self.reqs[slot],
            )
        };
        if rc != ffi::MPI_SUCCESS as c_int {
            self.free.push(slot);
            return Err(transport_error("MPI_Isend", rc));
        }
        Ok(())
    }

    fn try_recv(&mut self, buf: &mut Vec<u8>) -> Result<Option<(usize, u64)>, TransportError> {
        loop {
            let mut flag: c_int = 0;
            // SAFETY: placeholders written over by MPI_Improbe when it finds a message.
            let mut msg: ffi::MPI_Message = unsafe { ffi::RSMPI_MESSAGE_NULL };
            // MPI_Status is a plain C struct of integers; all zeros is a valid
            // value, written over by MPI_Improbe.
            // SAFETY: as argued in the lines above.
            let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
            // SAFETY: `comm` is valid; out-pointers are valid.
            let rc = unsafe {
                ffi::MPI_Improbe(
                    ffi::RSMPI_ANY_SOURCE,
                    MPI_TAG,
                    self.comm,
                    &mut flag,
                    &mut msg,
                    &mut status,
                )
            };
            if rc != ffi::MPI_SUCCESS as c_int {
                return Err(transport_error("MPI_Improbe", rc));
            }
            if flag == 0 {
                return Ok(None);
            }
            let mut count: c_int = 0;
            // SAFETY: `status` was filled in by MPI_Improbe.
            let rc = unsafe { ffi::MPI_Get_count(&status, ffi::RSMPI_UINT8_T, &mut count) };
            if rc != ffi::MPI_SUCCESS as c_int {
                return Err(transport_error("MPI_Get_count", rc));
            }
            let n = count.max(0) as usize;
            buf.resize(n, 0);
            // SAFETY: `msg` is the matched message (received exactly once here); `buf` has room for its `n` bytes.
            let rc = unsafe {
                ffi::MPI_Mrecv(
                    buf.as_mut_ptr().cast(),
                    count.max(0),
                    ffi::RSMPI_UINT8_T,
                    &mut msg,
                    ffi::RSMPI_STATUS_IGNORE,
                )
            };
            if rc != ffi::MPI_SUCCESS as c_int {
                return Err(transport_error("MPI_Mrecv", rc));
            }
            if n < 8 || status.MPI_SOURCE < 0 {
                // Not one of ours (no tag): dropped.
                continue;
            }
            let tag = u64::from_le_bytes(buf[n - 8..].try_into().expect("8 bytes"));
            buf.truncate(n - 8);
            return Ok(Some((status.MPI_SOURCE as usize, tag)));
        }
    }

    fn progress(&mut self) {
        // An error here shows up at the next send.
        let _ = self.test_some();
    }
}

impl Drop for MpiRemote {
    fn drop(&mut self) {
        if !mpi::is_active() {
            // MPI is gone: nothing can be completed or cancelled, and the buffers of
            // sends still in flight must not be freed.
            if self.in_flight() > 0 {
                std::mem::forget(std::mem::take(&mut self.bufs));
            }
            return;
        }
        let end = Instant::now() + self.linger;
        while self.in_flight() > 0 && Instant::now() < end {
            if self.test_some().is_err() {
                break;
            }
            std::thread::yield_now();
        }
        if self.in_flight() > 0 {
            // SAFETY: reading MPI's predefined null request.
            let null = unsafe { ffi::RSMPI_REQUEST_NULL };
            for slot in 0..self.reqs.len() {
                if self.reqs[slot] == null {
                    continue;
                }
                // An active send request of this channel: cancelled, then
                // freed (MPI completes or drops the send on its own).
                // SAFETY: as argued in the lines above.
                unsafe {
                    ffi::MPI_Cancel(&mut self.reqs[slot]);
                    ffi::MPI_Request_free(&mut self.reqs[slot]);
                }
                // MPI may still read the buffer: never free it.
                std::mem::forget(std::mem::take(&mut self.bufs[slot]));
            }
        }
        mpi::free::<MpiCalls>(&mut self.comm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(vars: &[(&str, &str)]) -> Result<Options, AmError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Options::from_vars(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn options_from_the_environment() {
        assert_eq!(opts(&[]).unwrap().nodes, Nodes::Shared);
        assert_eq!(
            opts(&[(ENV_RANKS_PER_NODE, "2")]).unwrap().nodes,
            Nodes::Emulated(2)
        );
        assert_eq!(
            opts(&[(ENV_RANKS_PER_NODE, "0")]).unwrap().nodes,
            Nodes::Shared
        );
        assert_eq!(
            opts(&[(ENV_TRANSPORT, "mpi"), (ENV_RANKS_PER_NODE, "2")])
                .unwrap()
                .nodes,
            Nodes::MpiOnly
        );
        assert_eq!(opts(&[(ENV_IN_FLIGHT, "3")]).unwrap().in_flight, 3);
        assert!(opts(&[(ENV_TRANSPORT, "carrier-pigeon")]).is_err());
        assert!(opts(&[(ENV_RANKS_PER_NODE, "two")]).is_err());
        assert!(opts(&[(ENV_IN_FLIGHT, "0")]).is_err());
    }
}
