//! Worlds from C: `smelt_world_*` in `smelt.h`.
//!
//! A `smelt_world` handle is one member's [`World`]: made from the environment of a
//! process started by `smelt launch` ([`smelt_world_from_env`]), as the `n` members
//! of a job of threads ([`smelt_world_threads`], [`smelt_world_run`]), or from an MPI
//! communicator (`smelt_world_from_mpi`, the `mpi` feature). Every service's C
//! constructor takes a world: [`smelt_world_collectives`] (a `smelt_member`),
//! `smelt_world_endpoint` (active messages, `am.rs`; offload lanes are endpoints
//! handed to `smelt_offload_start`), `smelt_world_agg` (aggregation, `agg.rs`) and
//! `smelt_world_global` (global arrays, `global.rs`). Each is a collective call: every
//! member makes the same services in the same order with the same arguments.
//!
//! A world handle is shared (an `Arc`): its accessors may be called from any thread,
//! and freeing it leaves the services made from it working.

use crate::group::{group_err_code, Body, GroupInner, MemberState, Origin};
use crate::handle::{self, Kind, Object, Wait};
use crate::{
    cstr, err, guard, id, out, smelt_member, smelt_status, Error, Res, SMELT_ERR_INVALID_ARGUMENT,
    SMELT_ERR_IO, SMELT_ERR_MODEL, SMELT_ERR_RUNTIME, SMELT_ERR_TREE,
};
use ::smelt_world::{Topology, WorldExt};
use smelt_model::ModelError;
use smelt_runtime::world::WorldBuilder;
use smelt_runtime::{CpuId, World, WorldError};
use std::ffi::{c_char, c_void};
use std::sync::Arc;

/// One member's world (opaque to C: a handle, never an address).
#[repr(C)]
pub struct smelt_world {
    _opaque: [u8; 0],
}

/// The body [`smelt_world_run`] runs on each member's thread.
pub type smelt_world_fn = Option<extern "C" fn(world: *mut smelt_world, arg: *mut c_void)>;

/// The status code of a world error.
pub(crate) fn world_error(e: WorldError) -> Error {
    let code = match &e {
        // Other MPI ranks that did not come in time (MPI errors are `Invalid`).
        WorldError::Invalid(w) if w.starts_with("MPI: timed out") => crate::SMELT_ERR_TIMEOUT,
        WorldError::Invalid(_) | WorldError::Mismatch(_) => SMELT_ERR_INVALID_ARGUMENT,
        _ => SMELT_ERR_RUNTIME,
    };
    Error(code, e.to_string())
}

/// The world of a world handle.
pub(crate) fn world_of(p: *const smelt_world) -> Res<Arc<World>> {
    handle::shared(id(p), Kind::World, "world", |o| match o {
        Object::World(w) => w.clone(),
        _ => unreachable!("the handle table checked the kind"),
    })
}

/// Stores the handles of `objs` in `outs[0..objs.len()]`, or none of them (the ones
/// stored already are removed again) when the table is full.
pub(crate) fn insert_all<T>(
    objs: Vec<Object>,
    kind: Kind,
    outs: *mut *mut T,
    what: &str,
) -> Res<()> {
    if outs.is_null() {
        return err(SMELT_ERR_INVALID_ARGUMENT, format!("{what} is NULL"));
    }
    let mut made: Vec<usize> = Vec::with_capacity(objs.len());
    for o in objs {
        match handle::insert(o) {
            Ok(h) => made.push(h),
            Err(e) => {
                for h in made {
                    let _ = handle::remove(h, kind, what, Wait::Block, |_| Ok(()));
                }
                return Err(e);
            }
        }
    }
    for (i, h) in made.into_iter().enumerate() {
        // The pointer arithmetic stays inside the array of objs.len() the caller gave.
        out(
            outs.wrapping_add(i),
            std::ptr::without_provenance_mut(h),
            what,
        )?;
    }
    Ok(())
}

/// The worlds of a job of `n` threads: member `r` on the `r`-th CPU this process may
/// use when there are `n` of them, unpinned otherwise.
fn thread_worlds(n: usize) -> Res<Vec<World>> {
    if n == 0 || n > 4096 {
        return err(
            SMELT_ERR_INVALID_ARGUMENT,
            format!("{n} members (1 to 4096)"),
        );
    }
    let mut b = WorldBuilder::new(n);
    let cpus = smelt_transport::allowed_cpus().unwrap_or_default();
    if cpus.len() >= n {
        b = b.cpus(&cpus[..n].iter().map(|&c| CpuId(c)).collect::<Vec<_>>());
    }
    b.threads().map_err(world_error)
}

/// Joins the job this process was started in by `smelt launch` (or by a launcher of
/// its own that set `SMELT_JOB`, `SMELT_JOB_KEY`, `SMELT_RANK`).
#[no_mangle]
pub extern "C" fn smelt_world_from_env(world: *mut *mut smelt_world) -> smelt_status {
    guard(|| {
        if world.is_null() {
            return err(SMELT_ERR_INVALID_ARGUMENT, "world is NULL");
        }
        let slot = handle::reserve()?;
        let w = World::from_env()
            .map_err(|e| Error(SMELT_ERR_RUNTIME, format!("smelt_world_from_env: {e}")))?;
        let h = slot.fill(Object::World(Arc::new(w)));
        out(world, std::ptr::without_provenance_mut(h), "world")
    })
}

/// The `n` worlds of a job of threads of this process, in `worlds[0..n]`: world `r`
/// is member `r`; give each to one thread.
#[no_mangle]
pub extern "C" fn smelt_world_threads(n: usize, worlds: *mut *mut smelt_world) -> smelt_status {
    guard(|| {
        if worlds.is_null() {
            return err(SMELT_ERR_INVALID_ARGUMENT, "worlds is NULL");
        }
        let objs = thread_worlds(n)?
            .into_iter()
            .map(|w| Object::World(Arc::new(w)))
            .collect();
        insert_all(objs, Kind::World, worlds, "worlds")
    })
}

/// A user pointer carried to the member threads (smelt never dereferences it).
#[derive(Clone, Copy)]
struct Arg(usize);

/// Runs `f(world, arg)` on `n` threads, one per member of a new job of threads, each
/// pinned to its member's CPU where it has one; returns when every body returned.
/// The world handle expires when its body returns.
#[no_mangle]
pub extern "C" fn smelt_world_run(n: usize, f: smelt_world_fn, arg: *mut c_void) -> smelt_status {
    guard(|| {
        let Some(f) = f else {
            return err(SMELT_ERR_INVALID_ARGUMENT, "fn is NULL");
        };
        let worlds = thread_worlds(n)?;
        let arg = Arg(arg.expose_provenance());
        let results = World::run(worlds, move |w| -> Res<()> {
            let arg = arg;
            let h = handle::insert(Object::World(Arc::new(w)))?;
            // The C body given to smelt_world_run (smelt.h: it must not unwind).
            f(
                std::ptr::without_provenance_mut(h),
                std::ptr::with_exposed_provenance_mut(arg.0),
            );
            // The body may have freed its world already: nothing left to do then.
            let _ = handle::remove(h, Kind::World, "world", Wait::Block, |_| Ok(()));
            Ok(())
        })
        .map_err(world_error)?;
        results.into_iter().collect()
    })
}

/// This member's rank (0..size).
#[no_mangle]
pub extern "C" fn smelt_world_rank(world: *const smelt_world, rank: *mut usize) -> smelt_status {
    guard(|| out(rank, world_of(world)?.rank().index(), "rank"))
}

/// The number of members.
#[no_mangle]
pub extern "C" fn smelt_world_size(world: *const smelt_world, size: *mut usize) -> smelt_status {
    guard(|| out(size, world_of(world)?.size(), "size"))
}

/// This member's node and the number of nodes (`nodes` may be NULL).
#[no_mangle]
pub extern "C" fn smelt_world_node(
    world: *const smelt_world,
    node: *mut usize,
    nodes: *mut usize,
) -> smelt_status {
    guard(|| {
        let w = world_of(world)?;
        out(node, w.node(), "node")?;
        if !nodes.is_null() {
            out(nodes, w.nodes(), "nodes")?;
        }
        Ok(())
    })
}

/// This member's OS CPU, or -1 when it has none (an unpinned member).
#[no_mangle]
pub extern "C" fn smelt_world_cpu(world: *const smelt_world, cpu: *mut i64) -> smelt_status {
    guard(|| {
        let c = world_of(world)?.cpu().map_or(-1, |c| i64::from(c.get()));
        out(cpu, c, "cpu")
    })
}

/// Pins the calling thread to this member's CPU; `*pinned` (may be NULL) is 1 if it
/// was pinned, 0 for a member without a CPU.
#[no_mangle]
pub extern "C" fn smelt_world_pin(
    world: *const smelt_world,
    pinned: *mut std::ffi::c_int,
) -> smelt_status {
    guard(|| {
        let w = world_of(world)?;
        let p = w.pin_current_thread().map_err(|e| {
            Error(
                SMELT_ERR_RUNTIME,
                format!("cannot pin member {} to its CPU: {e}", w.rank()),
            )
        })?;
        if !pinned.is_null() {
            out(pinned, std::ffi::c_int::from(p), "pinned")?;
        }
        Ok(())
    })
}

/// Releases a world (NULL is ignored); the services made from it stay valid.
#[no_mangle]
pub extern "C" fn smelt_world_free(world: *mut smelt_world) -> smelt_status {
    guard(|| {
        if !world.is_null() {
            drop(handle::remove(
                id(world),
                Kind::World,
                "world",
                Wait::Block,
                |_| Ok(()),
            )?);
        }
        Ok(())
    })
}

/// This member's member of a group over `tree` (see `smelt_world_collectives`): the
/// launcher's group, or the tree planned over the world's CPUs and model as
/// `smelt_world::WorldExt` plans it (ranks stay the world's).
fn world_member(w: &World, tree: Option<&str>) -> Res<Body> {
    let topo: Topology = tree
        .unwrap_or("auto")
        .parse()
        .map_err(|e: String| Error(SMELT_ERR_INVALID_ARGUMENT, e))?;
    #[cfg(feature = "mpi")]
    if w.nodes() > 1 && w.mpi().is_some() {
        // Several nodes of MPI ranks: a tree in each node, MPI between them.
        let coll = ::smelt_world::mpi::collectives(w, topo)
            .map_err(|e| mpi_err("smelt_world_collectives", e))?;
        let cpu = w.cpu().map_or(0, |c| c.get());
        return Ok(Body::Mpi(Box::new(MpiMember { coll, cpu })));
    }
    WorldExt::collectives(w, topo).map(Body::Tree).map_err(|e| {
        let code = match &e {
            ::smelt_world::Error::World(w) => world_error(w.clone()).0,
            ::smelt_world::Error::Group(g) => group_err_code(g),
            ::smelt_world::Error::Model(ModelError::Io { .. }) => SMELT_ERR_IO,
            ::smelt_world::Error::Model(_) => SMELT_ERR_MODEL,
            ::smelt_world::Error::Tree(_) => SMELT_ERR_TREE,
            _ => SMELT_ERR_RUNTIME,
        };
        Error(code, format!("smelt_world_collectives: {e}"))
    })
}

/// A collective call: this member's member of a group of tree collectives over every
/// member of the world (rank = the world's rank); `tree` names the tree (NULL:
/// "auto", which in a job `smelt launch` described is the launcher's group).
#[no_mangle]
pub extern "C" fn smelt_world_collectives(
    world: *mut smelt_world,
    tree: *const c_char,
    member: *mut *mut smelt_member,
) -> smelt_status {
    guard(|| {
        let w = world_of(world)?;
        let tree = if tree.is_null() {
            None
        } else {
            Some(cstr(tree, "tree")?)
        };
        if member.is_null() {
            return err(SMELT_ERR_INVALID_ARGUMENT, "member is NULL");
        }
        let slot = handle::reserve()?;
        let body = world_member(&w, tree)?;
        let inner = Arc::new(GroupInner::for_job(w.size()));
        let h = slot.fill(Object::Member(Box::new(MemberState::with_body(
            body,
            inner,
            Origin::World,
        ))));
        out(member, std::ptr::without_provenance_mut(h), "member")
    })
}

/// Why a world cannot come from MPI in this build.
#[cfg(not(feature = "mpi"))]
fn no_mpi(call: &str) -> Res<()> {
    err(
        SMELT_ERR_INVALID_ARGUMENT,
        format!(
            "{call}: this libsmelt was built without MPI (build it with `cargo build -p smelt-capi --features mpi`)"
        ),
    )
}

/// A world of the members of an MPI communicator: not in this build (see
/// [`no_mpi`]). `comm` is an `MPI_Comm`, a pointer (Open MPI) or an `int` (MPICH):
/// either is passed in one register, and it is not looked at.
#[cfg(not(feature = "mpi"))]
#[no_mangle]
pub extern "C" fn smelt_world_from_mpi(
    _comm: *mut c_void,
    _world: *mut *mut smelt_world,
) -> smelt_status {
    guard(|| no_mpi("smelt_world_from_mpi"))
}

/// A world of the members of an MPI communicator given by its Fortran handle: not in
/// this build (see [`no_mpi`]).
#[cfg(not(feature = "mpi"))]
#[no_mangle]
pub extern "C" fn smelt_world_from_mpi_f(
    _comm: i32,
    _world: *mut *mut smelt_world,
) -> smelt_status {
    guard(|| no_mpi("smelt_world_from_mpi_f"))
}

/// `World::from_raw_mpi` over `comm` with the settings' nodes, into a new handle.
#[cfg(feature = "mpi")]
fn from_mpi(
    call: &str,
    comm: impl FnOnce() -> smelt_mesh::mpi::ffi::MPI_Comm,
    world: *mut *mut smelt_world,
) -> Res<()> {
    let fail = |e: WorldError| {
        let e = world_error(e);
        Error(e.0, format!("{call}: {}", e.1))
    };
    if world.is_null() {
        return err(SMELT_ERR_INVALID_ARGUMENT, "world is NULL");
    }
    smelt_mesh::mpi::require_active().map_err(|e| fail(e.into()))?;
    let nodes = smelt_mesh::mpi::Nodes::from_settings().map_err(|e| fail(e.into()))?;
    let slot = handle::reserve()?;
    let comm = comm();
    // Smelt.h requires `comm` to be a valid intracommunicator handle of this
    // process with MPI initialised (checked above); the world keeps a duplicate.
    // SAFETY: as argued in the lines above.
    let w = unsafe { World::from_raw_mpi(comm, nodes, smelt_mesh::world::MPI_TIMEOUT) }
        .map_err(fail)?;
    let h = slot.fill(Object::World(Arc::new(w)));
    out(world, std::ptr::without_provenance_mut(h), "world")
}

/// A collective call over `comm`: this rank's world of the communicator's ranks
/// (nodes: `MPI_COMM_TYPE_SHARED`, or `SMELT_RANKS_PER_NODE`).
#[cfg(feature = "mpi")]
#[no_mangle]
pub extern "C" fn smelt_world_from_mpi(
    comm: smelt_mesh::mpi::ffi::MPI_Comm,
    world: *mut *mut smelt_world,
) -> smelt_status {
    guard(|| from_mpi("smelt_world_from_mpi", || comm, world))
}

/// As [`smelt_world_from_mpi`], the communicator given by its Fortran handle.
#[cfg(feature = "mpi")]
#[no_mangle]
pub extern "C" fn smelt_world_from_mpi_f(comm: i32, world: *mut *mut smelt_world) -> smelt_status {
    guard(|| {
        from_mpi(
            "smelt_world_from_mpi_f",
            || {
                // MPI_Comm_f2c takes any integer and MPI is initialised (from_mpi checked
                // it before calling this). An integer that is no communicator's handle
                // gives MPI_COMM_NULL (refused by from_raw_mpi) or a handle MPI itself
                // reports as invalid, as for any MPI call.
                // SAFETY: as argued in the lines above.
                unsafe { smelt_mesh::mpi::ffi::MPI_Comm_f2c(comm) }
            },
            world,
        )
    })
}

/// The collectives of a member of a world of MPI ranks on several nodes (a tree in
/// each node, MPI between the nodes' leaders: `smelt_world::mpi`), behind a
/// `smelt_member` handle. Each collective starts with an agreement (one allreduce of
/// the members' (collective, len) words, by maximum, of the word and of its
/// complement): data moves only when every member called the same collective with the
/// same length and valid arguments; otherwise every member returns
/// `SMELT_ERR_INVALID_ARGUMENT`. Every wait is bounded (the world's MPI timeout).
#[cfg(feature = "mpi")]
pub(crate) struct MpiMember {
    coll: ::smelt_world::mpi::MpiCollectives,
    cpu: u32,
}

// SAFETY: the collectives hold process-wide MPI handles (the leaders' communicator)
// and queuepairs of the node's segment; a member handle is used by one thread at a
// time (the handle table's lock, smelt.h), which makes the MPI calls as the program's
// MPI thread level allows (as for any of its MPI calls). The world's own MPI part is
// Send for the same reason (smelt_mesh's MpiWorld).
#[cfg(feature = "mpi")]
unsafe impl Send for MpiMember {}

/// Tags of the agreement words (as group.rs's).
#[cfg(feature = "mpi")]
mod tag {
    pub const BARRIER: u64 = 1;
    pub const BROADCAST: u64 = 2;
    pub const REDUCE: u64 = 3;
    pub const ALLREDUCE: u64 = 4;
    pub const REDUCE_TYPED: u64 = 5;
    pub const ALLREDUCE_TYPED: u64 = 6;
}

/// An agreement word as the call it stands for ("smelt_broadcast of 8 bytes").
#[cfg(feature = "mpi")]
fn described(w: u64) -> String {
    let len = w & ((1 << 56) - 1);
    match w >> 56 {
        tag::BARRIER => "smelt_barrier".into(),
        tag::BROADCAST => format!("smelt_broadcast of {len} bytes"),
        tag::REDUCE => format!("smelt_reduce of {len} bytes"),
        tag::ALLREDUCE => format!("smelt_allreduce of {len} bytes"),
        tag::REDUCE_TYPED | tag::ALLREDUCE_TYPED => {
            let name = if w >> 56 == tag::REDUCE_TYPED {
                "smelt_reduce_typed"
            } else {
                "smelt_allreduce_typed"
            };
            format!(
                "{name} of {} bytes (type {}, op {})",
                len & ((1 << 48) - 1),
                (len >> 48) & 15,
                (len >> 52) & 15
            )
        }
        _ => format!("an unknown call ({w:#x})"),
    }
}

#[cfg(feature = "mpi")]
fn mpi_err(call: &str, e: ::smelt_world::Error) -> Error {
    let code = match &e {
        ::smelt_world::Error::Group(smelt_runtime::GroupError::Timeout { .. }) => {
            crate::SMELT_ERR_TIMEOUT
        }
        ::smelt_world::Error::World(w) => world_error(w.clone()).0,
        _ => SMELT_ERR_RUNTIME,
    };
    Error(code, format!("{call}: {e}"))
}

#[cfg(feature = "mpi")]
impl MpiMember {
    pub(crate) fn rank(&self) -> smelt_runtime::Rank {
        self.coll.rank()
    }

    pub(crate) fn size(&self) -> usize {
        self.coll.size()
    }

    pub(crate) fn cpu(&self) -> u32 {
        self.cpu
    }

    /// The agreement on `word` (`args`: this member's own check of its arguments).
    fn agree<T>(&mut self, call: &str, tag: u64, word: u64, args: Res<T>) -> Res<T> {
        let word = (tag << 56) | (word & ((1 << 56) - 1));
        let mine = if args.is_ok() { word } else { u64::MAX };
        let mut v = [mine, !mine];
        self.coll
            .allreduce_slice(&mut v, |a, b| a.max(b))
            .map_err(|e| mpi_err(call, e))?;
        let (hi, lo) = (v[0], !v[1]);
        match args {
            Ok(a) if hi == mine && lo == mine => Ok(a),
            Err(Error(code, msg)) => Err(Error(code, format!("{call}: {msg}"))),
            Ok(_) if hi == u64::MAX => err(
                SMELT_ERR_INVALID_ARGUMENT,
                format!("{call}: another member's arguments are wrong"),
            ),
            Ok(_) => err(
                SMELT_ERR_INVALID_ARGUMENT,
                format!(
                    "{call}: the members' calls differ (from {} to {})",
                    described(lo),
                    described(hi)
                ),
            ),
        }
    }

    pub(crate) fn barrier(&mut self) -> Res<()> {
        self.agree("smelt_barrier", tag::BARRIER, 0, Ok(()))
    }

    /// Member 0's bytes into every member's `b`, a word at a time.
    pub(crate) fn broadcast(&mut self, len: usize, b: Res<&mut [u8]>) -> Res<()> {
        const CALL: &str = "smelt_broadcast";
        let b = self.agree(CALL, tag::BROADCAST, len as u64, b)?;
        self.broadcast_words(CALL, b)
    }

    /// Member 0's `b` into every member's, a word at a time (`call` names the C
    /// function in an error).
    fn broadcast_words(&mut self, call: &str, b: &mut [u8]) -> Res<()> {
        for chunk in b.chunks_mut(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            let got = self
                .coll
                .broadcast_word(u64::from_le_bytes(w))
                .map_err(|e| mpi_err(call, e))?;
            chunk.copy_from_slice(&got.to_le_bytes()[..chunk.len()]);
        }
        Ok(())
    }

    /// Every member's buffer gathered at member 0 a word at a time, combined there in
    /// rank order with the C operator, and (`all`) sent back to every member.
    pub(crate) fn reduce(
        &mut self,
        len: usize,
        args: Res<(&mut [u8], crate::group::OpFn)>,
        arg: *mut c_void,
        all: bool,
    ) -> Res<()> {
        let (call, t) = if all {
            ("smelt_allreduce", tag::ALLREDUCE)
        } else {
            ("smelt_reduce", tag::REDUCE)
        };
        let (b, op) = self.agree(call, t, len as u64, args)?;
        let words = len.div_ceil(8);
        let mut bufs: Option<Vec<Vec<u8>>> = None;
        for k in 0..words {
            let mut w = [0u8; 8];
            let part = &b[k * 8..len.min(k * 8 + 8)];
            w[..part.len()].copy_from_slice(part);
            let got = self
                .coll
                .gather_word(u64::from_le_bytes(w))
                .map_err(|e| mpi_err(call, e))?;
            if let Some(vals) = got {
                let bs = bufs.get_or_insert_with(|| vec![vec![0u8; words * 8]; vals.len()]);
                for (r, v) in vals.iter().enumerate() {
                    bs[r][k * 8..k * 8 + 8].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        if let Some(bs) = bufs {
            // Member 0: the others' buffers combined into its own, in rank order.
            for other in bs.iter().skip(1) {
                crate::group::apply(op, b, &other[..len], arg);
            }
        }
        if all {
            self.broadcast_words(call, b)?;
        }
        Ok(())
    }

    /// A typed reduction: each value widened to a word, combined by the runtime's
    /// kernel of its type (`all` or not, every member gets the result).
    pub(crate) fn typed(
        &mut self,
        word: usize,
        args: Res<(&mut [u8], smelt_runtime::ReduceOp)>,
        ty: std::ffi::c_int,
        all: bool,
    ) -> Res<()> {
        use smelt_runtime::combine::combine_bytes;
        let (call, t) = if all {
            ("smelt_allreduce_typed", tag::ALLREDUCE_TYPED)
        } else {
            ("smelt_reduce_typed", tag::REDUCE_TYPED)
        };
        let (b, op) = self.agree(call, t, word as u64, args)?;
        macro_rules! go {
            ($t:ty) => {{
                let size = std::mem::size_of::<$t>();
                let mut words: Vec<u64> = b
                    .chunks(size)
                    .map(|c| {
                        let mut w = [0u8; 8];
                        w[..c.len()].copy_from_slice(c);
                        u64::from_le_bytes(w)
                    })
                    .collect();
                self.coll
                    .allreduce_slice(&mut words, |x: u64, y: u64| {
                        let mut a = x.to_le_bytes();
                        combine_bytes::<$t>(op, &mut a[..size], &y.to_le_bytes()[..size]);
                        u64::from_le_bytes(a)
                    })
                    .map_err(|e| mpi_err(call, e))?;
                for (c, w) in b.chunks_mut(size).zip(words) {
                    c.copy_from_slice(&w.to_le_bytes()[..c.len()]);
                }
            }};
        }
        crate::group::by_type!(ty, go);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::last;
    use crate::{
        smelt_allreduce_typed, smelt_member_free, smelt_member_index, SMELT_ERR_INVALID_HANDLE,
        SMELT_OK,
    };
    use std::ffi::CString;
    use std::ptr;
    use std::sync::atomic::{AtomicU64, Ordering};

    static SUMS: AtomicU64 = AtomicU64::new(0);
    static BAD: AtomicU64 = AtomicU64::new(0);

    /// A member body: collectives from its world, one sum; counts what went wrong.
    extern "C" fn body(w: *mut smelt_world, arg: *mut c_void) {
        let tree = arg as *const c_char;
        let mut m = ptr::null_mut();
        let mut rank = 0usize;
        let mut idx = 9usize;
        let ok = smelt_world_rank(w, &mut rank) == SMELT_OK
            && smelt_world_collectives(w, tree, &mut m) == SMELT_OK
            && smelt_member_index(m, &mut idx) == SMELT_OK
            && idx == rank;
        if !ok {
            BAD.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut x = rank as u64 + 1;
        if smelt_allreduce_typed(m, (&mut x as *mut u64).cast(), 1, 8, 1) != SMELT_OK {
            BAD.fetch_add(1, Ordering::Relaxed);
        }
        SUMS.fetch_add(x, Ordering::Relaxed);
        if smelt_member_free(m) != SMELT_OK {
            BAD.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn members_of_a_run_make_collectives_from_their_worlds() {
        // NULL ("auto") and a named tree; 3 members: every one gets 1 + 2 + 3.
        let binary = CString::new("binary").unwrap();
        for tree in [ptr::null(), binary.as_ptr()] {
            SUMS.store(0, Ordering::Relaxed);
            BAD.store(0, Ordering::Relaxed);
            assert_eq!(
                smelt_world_run(3, Some(body), tree as *mut c_void),
                SMELT_OK,
                "{}",
                last()
            );
            assert_eq!(BAD.load(Ordering::Relaxed), 0);
            assert_eq!(SUMS.load(Ordering::Relaxed), 3 * 6);
        }
    }

    #[test]
    fn thread_worlds_know_who_they_are_and_are_freed_once() {
        let mut ws = [ptr::null_mut(); 3];
        assert_eq!(smelt_world_threads(3, ws.as_mut_ptr()), SMELT_OK);
        for (r, &w) in ws.iter().enumerate() {
            let (mut rank, mut size, mut node, mut nodes, mut cpu) = (9, 9, 9, 9, -9i64);
            assert_eq!(smelt_world_rank(w, &mut rank), SMELT_OK);
            assert_eq!(smelt_world_size(w, &mut size), SMELT_OK);
            assert_eq!(smelt_world_node(w, &mut node, &mut nodes), SMELT_OK);
            assert_eq!(smelt_world_cpu(w, &mut cpu), SMELT_OK);
            assert_eq!((rank, size, node, nodes), (r, 3, 0, 1));
            assert!(cpu >= -1);
        }
        for w in ws {
            assert_eq!(smelt_world_free(w), SMELT_OK);
            assert_eq!(smelt_world_free(w), SMELT_ERR_INVALID_HANDLE);
        }
        let mut rank = 0;
        assert_eq!(smelt_world_rank(ws[0], &mut rank), SMELT_ERR_INVALID_HANDLE);
        assert!(last().contains("already freed"), "{}", last());
    }

    #[test]
    fn a_process_without_a_launcher_is_told_which_variable_is_missing() {
        if std::env::var_os(smelt_settings::JOB).is_some() {
            return; // run under a launcher: nothing to check here
        }
        let mut w = ptr::null_mut();
        assert_eq!(smelt_world_from_env(&mut w), SMELT_ERR_RUNTIME);
        assert!(last().contains("SMELT_JOB"), "{}", last());
        assert_eq!(
            smelt_world_run(0, Some(body), ptr::null_mut()),
            SMELT_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            smelt_world_run(2, None, ptr::null_mut()),
            SMELT_ERR_INVALID_ARGUMENT
        );
    }
}
