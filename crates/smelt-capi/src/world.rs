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

use crate::group::{group_err_code, GroupInner, MemberState, Origin};
use crate::handle::{self, Kind, Object, Wait};
use crate::{
    cstr, err, guard, id, out, smelt_member, smelt_status, Error, Res, SMELT_ERR_INVALID_ARGUMENT,
    SMELT_ERR_IO, SMELT_ERR_MODEL, SMELT_ERR_RUNTIME, SMELT_ERR_TREE,
};
use ::smelt_world::{Topology, WorldExt};
use smelt_model::ModelError;
use smelt_runtime::world::WorldBuilder;
use smelt_runtime::{CpuId, Member, World, WorldError};
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
        let arg = Arg(arg.addr());
        let results = World::run(worlds, move |w| -> Res<()> {
            let arg = arg;
            let h = handle::insert(Object::World(Arc::new(w)))?;
            // The C body given to smelt_world_run (smelt.h: it must not unwind).
            f(
                std::ptr::without_provenance_mut(h),
                std::ptr::without_provenance_mut(arg.0),
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
fn world_member(w: &World, tree: Option<&str>) -> Res<Member> {
    let topo: Topology = tree
        .unwrap_or("auto")
        .parse()
        .map_err(|e: String| Error(SMELT_ERR_INVALID_ARGUMENT, e))?;
    WorldExt::collectives(w, topo).map_err(|e| {
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
        let m = world_member(&w, tree)?;
        let inner = Arc::new(GroupInner::for_job(m.size()));
        let h = slot.fill(Object::Member(Box::new(MemberState::new(
            m,
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
    // SAFETY: smelt.h requires `comm` to be a valid intracommunicator handle of this
    // process with MPI initialised (checked above); the world keeps a duplicate.
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
                // SAFETY: MPI_Comm_f2c takes any integer and MPI is initialised
                // (from_mpi checked it before calling this). An integer that is no
                // communicator's handle gives MPI_COMM_NULL (refused by from_raw_mpi)
                // or a handle MPI itself reports as invalid, as for any MPI call.
                unsafe { smelt_mesh::mpi::ffi::MPI_Comm_f2c(comm) }
            },
            world,
        )
    })
}
