//! Groups, members (threads of a group, or processes of a `smelt launch` job joined
//! with `smelt_job_join`) and collectives of the C API, over `smelt_runtime`.
//!
//! # Failing together
//! Every collective (barrier, broadcast, reduce, allreduce) starts with the same
//! agreement step: every member learns whether all members' `(collective, len)` words
//! are equal, in a step that runs as the group's barrier does (a word reduction to the
//! root and a word broadcast, or dissemination where the group's algorithm table picks
//! it for the barrier: `smelt_barrier` is that step alone). When they differ, a word
//! broadcast tells every member what the root called. Data moves only after
//! every member knows that everyone called the same collective with the root's `len`,
//! so a member's bad argument can fail the collective on every member, none having
//! returned success:
//! - an argument a member can check alone (a NULL buffer or operator, an impossible
//!   length) fails the group at once on that member's behalf ([`Member::fail`]: the
//!   group's abort flag wakes every member);
//! - a `len` (or collective) that differs from the root's is noticed by that member
//!   when the root's word arrives; it fails the group naming itself, while the members that
//!   match the root wait for that failure (in a barrier the offender never joins).
//!
//! Each member then returns the group's *first* failure, the same code and message on
//! every member (`member R (CPU C) failed: smelt_broadcast: len 16 differs from the
//! root's len 8`): the code of a failure the C API recorded is kept next to the group
//! (before the runtime's abort flag is raised, so every woken member finds it).

use crate::handle::{self, Kind, Object, Wait};
use crate::{
    err, guard, id, new_handle, out, panic_message, slice_mut, smelt_status, smelt_tree, tree_of,
    Error, Res, SMELT_ERR_BUSY, SMELT_ERR_INVALID_ARGUMENT, SMELT_ERR_INVALID_HANDLE,
    SMELT_ERR_PANIC, SMELT_ERR_RUNTIME, SMELT_ERR_TIMEOUT,
};
use smelt_runtime::combine::combine_bytes;
use smelt_runtime::{Group, GroupConfig, GroupError, Member, Rank, ReduceOp};
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The members not held by a thread, by rank; `freed` once the group's handle is freed.
struct Members {
    idle: Vec<Option<Member>>,
    freed: bool,
}

/// What a group handle refers to (shared with its attached or running members).
pub(crate) struct GroupInner {
    members: Mutex<Members>,
    pin: bool,
    size: usize,
    /// Codes of the failures the C API recorded on the group: (rank, what, code).
    codes: Mutex<Vec<(Rank, String, smelt_status)>>,
}

impl GroupInner {
    /// Takes member `index` for a thread.
    fn take(&self, index: usize) -> Res<Member> {
        let mut ms = lock(&self.members);
        if ms.freed {
            return err(SMELT_ERR_INVALID_HANDLE, "the group was freed");
        }
        match ms.idle.get_mut(index) {
            None => err(
                SMELT_ERR_INVALID_ARGUMENT,
                format!("member {index} out of range (the group has {})", self.size),
            ),
            Some(slot) => slot.take().ok_or_else(|| {
                Error(
                    SMELT_ERR_BUSY,
                    format!("member {index} is already attached or running"),
                )
            }),
        }
    }

    /// Takes every member (for smelt_group_run), or none.
    fn take_all(&self) -> Res<Vec<Member>> {
        let mut ms = lock(&self.members);
        if ms.freed {
            return err(SMELT_ERR_INVALID_HANDLE, "the group was freed");
        }
        if let Some(i) = ms.idle.iter().position(|m| m.is_none()) {
            return err(
                SMELT_ERR_BUSY,
                format!("member {i} is attached (smelt_group_attach) or running"),
            );
        }
        Ok(ms
            .idle
            .iter_mut()
            .map(|m| m.take().expect("checked"))
            .collect())
    }

    /// Gives a member back.
    fn put(&self, m: Member) {
        let r = m.rank();
        if let Some(slot) = lock(&self.members).idle.get_mut(r.index()) {
            *slot = Some(m);
        }
    }

    /// Marks the group freed, unless a member is attached or running.
    fn release(&self) -> Res<()> {
        let mut ms = lock(&self.members);
        let out = ms.idle.iter().filter(|m| m.is_none()).count();
        if out > 0 {
            return err(
                SMELT_ERR_BUSY,
                format!(
                    "{out} of the group's {} members are still attached or running: detach them (or let smelt_group_run return) first",
                    self.size
                ),
            );
        }
        ms.freed = true;
        Ok(())
    }

    /// The C API error for the group's first failure `first` (a `PeerFailed`, as
    /// [`Member::fail`] returns it). `timed_out_here`: this member's own timeout message.
    fn error(&self, first: GroupError, timed_out_here: Option<String>) -> Error {
        let code = match &first {
            GroupError::PeerFailed { rank, what, .. } => lock(&self.codes)
                .iter()
                .find(|(r, w, _)| r == rank && w == what)
                .map(|&(_, _, c)| c)
                .unwrap_or_else(|| {
                    if is_capi_arg_failure(what) {
                        // Recorded by the C API of another process of the job (its
                        // code is kept in that process): the message tells.
                        SMELT_ERR_INVALID_ARGUMENT
                    } else if what.starts_with("internal error: ") {
                        SMELT_ERR_PANIC
                    } else if timed_out_here.as_deref() == Some(what.as_str())
                        || what.contains(" timed out after ")
                    {
                        SMELT_ERR_TIMEOUT
                    } else {
                        SMELT_ERR_RUNTIME
                    }
                }),
            GroupError::Timeout { .. } => SMELT_ERR_TIMEOUT,
            _ => SMELT_ERR_RUNTIME,
        };
        Error(code, first.to_string())
    }
}

impl GroupInner {
    /// The minimal group of a member that joined a job of processes (smelt_job_join):
    /// no idle members (the process holds its only one), no handle of its own, not
    /// pinned by the library (`smelt launch` pins the process).
    pub(crate) fn for_job(size: usize) -> GroupInner {
        GroupInner {
            members: Mutex::new(Members {
                idle: Vec::new(),
                freed: true,
            }),
            pin: false,
            size,
            codes: Mutex::new(Vec::new()),
        }
    }
}

/// True for a failure the C API records for a member's wrong arguments (the messages
/// of [`agree`]: they start with the collective's name).
fn is_capi_arg_failure(what: &str) -> bool {
    [
        Coll::Barrier,
        Coll::Broadcast,
        Coll::Reduce,
        Coll::Allreduce,
    ]
    .iter()
    .any(|c| {
        what.strip_prefix(c.name())
            .is_some_and(|rest| rest.starts_with(": ") || rest.starts_with(" called while "))
    })
}

/// A group. Opaque to C: a `smelt_group *` is a handle (an id), never an address.
#[repr(C)]
pub struct smelt_group {
    _opaque: [u8; 0],
}

/// One member's handle (opaque to C, as [`smelt_group`]).
#[repr(C)]
pub struct smelt_member {
    _opaque: [u8; 0],
}

/// Where a member handle comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// smelt_group_run: expires when the body returns; not released by the caller.
    Run,
    /// smelt_group_attach: released with smelt_member_detach.
    Attach,
    /// smelt_job_join: released with smelt_job_leave.
    Job,
    /// smelt_world_collectives: released with smelt_member_free.
    World,
}

impl Origin {
    /// Why a member of this origin is not released by `call`.
    fn refuse(self, call: &str) -> Res<()> {
        let how = match self {
            Origin::Run => "it is released when its smelt_group_run body returns",
            Origin::Attach => "release it with smelt_member_detach",
            Origin::Job => "release it with smelt_job_leave",
            Origin::World => "release it with smelt_member_free",
        };
        let from = match self {
            Origin::Run => "smelt_group_run",
            Origin::Attach => "smelt_group_attach",
            Origin::Job => "smelt_job_join",
            Origin::World => "smelt_world_collectives",
        };
        err(
            SMELT_ERR_INVALID_ARGUMENT,
            format!("{call}: member comes from {from}: {how}"),
        )
    }
}

/// The collectives behind a member handle.
pub(crate) enum Body {
    /// A group over one tree of members that share memory (threads, processes, the
    /// MPI ranks of one node).
    Tree(Member),
    /// A world of MPI ranks on several nodes: a tree in each node, MPI between them
    /// (`smelt_world_collectives` on such a world).
    #[cfg(feature = "mpi")]
    Mpi(Box<crate::world::MpiMember>),
}

impl Body {
    fn rank(&self) -> Rank {
        match self {
            Body::Tree(m) => m.rank(),
            #[cfg(feature = "mpi")]
            Body::Mpi(m) => m.rank(),
        }
    }

    fn size(&self) -> usize {
        match self {
            Body::Tree(m) => m.size(),
            #[cfg(feature = "mpi")]
            Body::Mpi(m) => m.size(),
        }
    }

    fn cpu(&self) -> u32 {
        match self {
            Body::Tree(m) => m.cpu().get(),
            #[cfg(feature = "mpi")]
            Body::Mpi(m) => m.cpu(),
        }
    }

    /// The tree member (every caller checked for the MPI body before).
    fn tree_mut(&mut self) -> &mut Member {
        match self {
            Body::Tree(m) => m,
            #[cfg(feature = "mpi")]
            Body::Mpi(_) => unreachable!("the MPI body is dispatched before"),
        }
    }

    /// The tree member, to give back to its group.
    fn into_tree(self) -> Option<Member> {
        match self {
            Body::Tree(m) => Some(m),
            #[cfg(feature = "mpi")]
            Body::Mpi(_) => None,
        }
    }

    fn is_root(&self) -> bool {
        match self {
            Body::Tree(m) => m.is_root(),
            #[cfg(feature = "mpi")]
            Body::Mpi(m) => m.rank().index() == 0,
        }
    }
}

/// What a member handle refers to.
pub(crate) struct MemberState {
    body: Body,
    inner: Arc<GroupInner>,
    /// First error a collective returned on this member (reported by smelt_group_run).
    first_error: Option<Error>,
    /// Where the handle comes from (and so how it is released).
    origin: Origin,
    /// Reused buffer of byte broadcasts.
    bytes: Vec<u8>,
}

impl MemberState {
    pub(crate) fn new(member: Member, inner: Arc<GroupInner>, origin: Origin) -> MemberState {
        MemberState::with_body(Body::Tree(member), inner, origin)
    }

    pub(crate) fn with_body(body: Body, inner: Arc<GroupInner>, origin: Origin) -> MemberState {
        MemberState {
            body,
            inner,
            first_error: None,
            origin,
            bytes: Vec::new(),
        }
    }

    /// Fails the group on this member's behalf with `what`, to be reported as `code`
    /// (unless the group failed before); returns the group's error.
    fn fail_with(&mut self, code: smelt_status, what: String) -> Error {
        // Nothing to fail on an MPI body: its collectives' every wait is bounded.
        #[cfg(feature = "mpi")]
        if let Body::Mpi(_) = self.body {
            return Error(code, what);
        }
        let member = self.body.tree_mut();
        // Recorded before the runtime raises the abort flag: every member woken by it
        // finds the code.
        lock(&self.inner.codes).push((member.rank(), what.clone(), code));
        let first = member.fail(&what);
        self.inner.error(first, None)
    }

    /// The tree member (every caller checked for the MPI body before).
    fn tree(&mut self) -> &mut Member {
        self.body.tree_mut()
    }

    /// The group's error after the runtime returned `e` to this member.
    fn group_error(&mut self, e: &GroupError) -> Error {
        // Records `e` if the runtime did not (and raises the abort flag); returns the
        // group's first failure either way.
        let first = self.tree().fail(&e.to_string());
        let here = matches!(e, GroupError::Timeout { .. }).then(|| e.to_string());
        self.inner.error(first, here)
    }
}

/// The group of a group handle.
fn group_of(p: *const smelt_group) -> Res<Arc<GroupInner>> {
    handle::shared(id(p), Kind::Group, "group", |o| match o {
        Object::Group(g) => g.clone(),
        _ => unreachable!("the handle table checked the kind"),
    })
}

pub(crate) fn group_err_code(e: &GroupError) -> smelt_status {
    match e {
        GroupError::Timeout { .. } => SMELT_ERR_TIMEOUT,
        _ => SMELT_ERR_RUNTIME,
    }
}

fn group_err(e: GroupError) -> Error {
    Error(group_err_code(&e), e.to_string())
}

/// Creates a group over a tree: one queuepair per tree edge (collectives wait at most
/// 30 s for a peer).
#[no_mangle]
pub extern "C" fn smelt_group_create(
    tree: *const smelt_tree,
    group: *mut *mut smelt_group,
) -> smelt_status {
    smelt_group_create_timeout(tree, 30_000, group)
}

/// As smelt_group_create, with collectives that wait at most `timeout_ms` (>= 1) for a
/// peer before failing with SMELT_ERR_TIMEOUT.
#[no_mangle]
pub extern "C" fn smelt_group_create_timeout(
    tree: *const smelt_tree,
    timeout_ms: u64,
    group: *mut *mut smelt_group,
) -> smelt_status {
    guard(|| {
        let t = tree_of(tree)?;
        if timeout_ms == 0 {
            return err(SMELT_ERR_INVALID_ARGUMENT, "timeout_ms must be at least 1");
        }
        if group.is_null() {
            return err(SMELT_ERR_INVALID_ARGUMENT, "group is NULL");
        }
        let cfg = GroupConfig {
            link: smelt_runtime::LinkConfig::default().timeout(Duration::from_millis(timeout_ms)),
            algorithms: t.algorithms.clone(),
            ..GroupConfig::default()
        };
        let g = Group::with_config(std::slice::from_ref(&t.tree), &cfg).map_err(group_err)?;
        let pin = g.placement().pinned;
        let size = g.len();
        let idle = g.into_members().into_iter().map(Some).collect();
        let inner = GroupInner {
            members: Mutex::new(Members { idle, freed: false }),
            pin,
            size,
            codes: Mutex::new(Vec::new()),
        };
        new_handle(group, Object::Group(Arc::new(inner)), "group")
    })
}

/// Number of members.
#[no_mangle]
pub extern "C" fn smelt_group_size(group: *const smelt_group, n: *mut usize) -> smelt_status {
    guard(|| out(n, group_of(group)?.size, "n"))
}

/// The body a member runs: `fn(member, arg)`.
pub type smelt_member_fn =
    Option<unsafe extern "C" fn(member: *mut smelt_member, arg: *mut c_void)>;

/// Runs `f(member, arg)` once per member, each on its own thread (pinned to the
/// member's CPU when the group is pinned), and returns when all have returned: the
/// first error a member's collective returned, else `SMELT_OK`. Each member handle
/// expires when its body returns.
#[no_mangle]
pub extern "C" fn smelt_group_run(
    group: *mut smelt_group,
    f: smelt_member_fn,
    arg: *mut c_void,
) -> smelt_status {
    guard(|| {
        let inner = group_of(group)?;
        let Some(f) = f else {
            return err(SMELT_ERR_INVALID_ARGUMENT, "fn is NULL");
        };
        let taken = inner.take_all()?;
        // The C argument travels to the member threads as an address; the C caller
        // keeps it valid until smelt_group_run returns (smelt.h).
        let arg_addr = arg.expose_provenance();
        let results: Vec<Option<Error>> = std::thread::scope(|s| {
            let handles: Vec<_> = taken
                .into_iter()
                .map(|member| {
                    let rank = member.rank();
                    let inner2 = inner.clone();
                    // The member goes back to the group if the thread cannot start.
                    let slot = Arc::new(Mutex::new(Some(member)));
                    let slot2 = slot.clone();
                    let spawned = std::thread::Builder::new()
                        .name(format!("smelt-capi-{rank}"))
                        .spawn_scoped(s, move || {
                            let member = lock(&slot2).take().expect("member given");
                            run_member(&inner2, member, f, arg_addr)
                        });
                    (slot, spawned)
                })
                .collect();
            handles
                .into_iter()
                .map(|(slot, h)| match h {
                    Ok(h) => h.join().unwrap_or_else(|p| {
                        Some(Error(
                            SMELT_ERR_PANIC,
                            format!("internal error: {}", panic_message(&*p)),
                        ))
                    }),
                    Err(e) => {
                        let m = lock(&slot).take().expect("the thread did not start");
                        let ge = m.fail(&format!("cannot start a member thread: {e}"));
                        inner.put(m);
                        Some(group_err(ge))
                    }
                })
                .collect()
        });
        match results.into_iter().flatten().next() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    })
}

/// One member's thread of smelt_group_run: pin, make the handle, run the body, expire
/// the handle, give the member back; returns the member's first error.
fn run_member(
    inner: &Arc<GroupInner>,
    mut member: Member,
    f: unsafe extern "C" fn(*mut smelt_member, *mut c_void),
    arg_addr: usize,
) -> Option<Error> {
    if inner.pin {
        if let Err(e) = member.pin_thread() {
            let msg = format!(
                "cannot pin member {} to CPU {}: {e}",
                member.rank(),
                member.cpu()
            );
            // The body will not run: fail the group so that the others do not wait.
            let ge = member.fail(&msg);
            inner.put(member);
            return Some(group_err(ge));
        }
    }
    let slot = match handle::reserve() {
        Ok(s) => s,
        Err(e) => {
            member.fail(&e.1);
            inner.put(member);
            return Some(e);
        }
    };
    let h = slot.fill(Object::Member(Box::new(MemberState::new(
        member,
        inner.clone(),
        Origin::Run,
    ))));
    let p: *mut smelt_member = std::ptr::without_provenance_mut(h);
    let arg: *mut c_void = std::ptr::with_exposed_provenance_mut(arg_addr);
    // Smelt.h requires `arg` to stay valid until smelt_group_run returns and forbids `f` to
    // unwind. `p` is a handle id the library checks on every use, never dereferenced.
    // SAFETY: `f` is the caller's smelt_member_fn.
    unsafe { f(p, arg) };
    // The handle expires now (after any other thread's call with it has finished).
    match handle::remove(h, Kind::Member, "member", Wait::Block, |_| Ok(())) {
        Ok(Object::Member(sm)) => {
            let MemberState {
                body, first_error, ..
            } = *sm;
            if let Some(member) = body.into_tree() {
                inner.put(member);
            }
            first_error
        }
        _ => Some(Error(
            SMELT_ERR_PANIC,
            "internal error: a smelt_group_run member handle vanished".into(),
        )),
    }
}

/// Attaches the calling thread as member `index` (pinning it when the group is
/// pinned). Release with smelt_member_detach.
#[no_mangle]
pub extern "C" fn smelt_group_attach(
    group: *mut smelt_group,
    index: usize,
    member: *mut *mut smelt_member,
) -> smelt_status {
    guard(|| {
        let inner = group_of(group)?;
        if member.is_null() {
            return err(SMELT_ERR_INVALID_ARGUMENT, "member is NULL");
        }
        let slot = handle::reserve()?;
        let mut m = inner.take(index)?;
        if inner.pin {
            if let Err(e) = m.pin_thread() {
                let msg = format!("cannot pin member {index} to CPU {}: {e}", m.cpu());
                inner.put(m);
                return err(SMELT_ERR_RUNTIME, msg);
            }
        }
        let h = slot.fill(Object::Member(Box::new(MemberState::new(
            m,
            inner.clone(),
            Origin::Attach,
        ))));
        out(member, std::ptr::without_provenance_mut(h), "member")
    })
}

/// Detaches a member attached with smelt_group_attach (NULL is ignored); the handle
/// is invalid afterwards.
#[no_mangle]
pub extern "C" fn smelt_member_detach(member: *mut smelt_member) -> smelt_status {
    guard(|| {
        if let Some(Object::Member(sm)) =
            release_member(member, Origin::Attach, "smelt_member_detach")?
        {
            let MemberState { body, inner, .. } = *sm;
            if let Some(member) = body.into_tree() {
                inner.put(member);
            }
        }
        Ok(())
    })
}

/// Takes the member handle out of the table if it came from `origin` (NULL is
/// ignored: `None`); a member of another origin is refused with the call to use.
fn release_member(member: *mut smelt_member, origin: Origin, call: &str) -> Res<Option<Object>> {
    if member.is_null() {
        return Ok(None);
    }
    handle::remove(
        id(member),
        Kind::Member,
        "member",
        Wait::Busy,
        |o| match o {
            Object::Member(sm) if sm.origin != origin => sm.origin.refuse(call),
            _ => Ok(()),
        },
    )
    .map(Some)
}

/// Joins the job of processes this process was started in by `smelt launch` (from the
/// environment: SMELT_JOB, SMELT_JOB_KEY, SMELT_RANK); the member handle works with
/// every member call and collective. Release it with smelt_job_leave.
#[no_mangle]
pub extern "C" fn smelt_job_join(member: *mut *mut smelt_member) -> smelt_status {
    guard(|| {
        if member.is_null() {
            return err(SMELT_ERR_INVALID_ARGUMENT, "member is NULL");
        }
        let slot = handle::reserve()?;
        let m = smelt_runtime::process::join_from_env()
            .map_err(|e| Error(group_err_code(&e), format!("smelt_job_join: {e}")))?;
        let inner = Arc::new(GroupInner::for_job(m.size()));
        let h = slot.fill(Object::Member(Box::new(MemberState::new(
            m,
            inner,
            Origin::Job,
        ))));
        out(member, std::ptr::without_provenance_mut(h), "member")
    })
}

/// Leaves the job joined with smelt_job_join (NULL is ignored); the handle is invalid
/// afterwards.
#[no_mangle]
pub extern "C" fn smelt_job_leave(member: *mut smelt_member) -> smelt_status {
    guard(|| {
        // The member leaves the job when the object drops here (outside the handle
        // table's locks).
        drop(release_member(member, Origin::Job, "smelt_job_leave")?);
        Ok(())
    })
}

/// Releases a member made by smelt_world_collectives (NULL is ignored); the handle
/// is invalid afterwards. Free it after the member's last collective (a member that
/// is gone fails its peers' later collectives, as after smelt_job_leave).
#[no_mangle]
pub extern "C" fn smelt_member_free(member: *mut smelt_member) -> smelt_status {
    guard(|| {
        // The member is dropped here, outside the handle table's locks.
        drop(release_member(member, Origin::World, "smelt_member_free")?);
        Ok(())
    })
}

/// Number of members of the member's group or job.
#[no_mangle]
pub extern "C" fn smelt_member_size(member: *const smelt_member, n: *mut usize) -> smelt_status {
    guard(|| out(n, handle::member(id(member), "member")?.body.size(), "n"))
}

/// Member index (rank: the index of its CPU in the first tree's member order).
#[no_mangle]
pub extern "C" fn smelt_member_index(
    member: *const smelt_member,
    index: *mut usize,
) -> smelt_status {
    guard(|| {
        out(
            index,
            handle::member(id(member), "member")?.body.rank().index(),
            "index",
        )
    })
}

/// OS CPU id of the member.
#[no_mangle]
pub extern "C" fn smelt_member_cpu(member: *const smelt_member, cpu: *mut u32) -> smelt_status {
    guard(|| out(cpu, handle::member(id(member), "member")?.body.cpu(), "cpu"))
}

/// 1 at the root, else 0.
#[no_mangle]
pub extern "C" fn smelt_member_is_root(
    member: *const smelt_member,
    is_root: *mut c_int,
) -> smelt_status {
    guard(|| {
        let r = handle::member(id(member), "member")?.body.is_root();
        out(is_root, r as c_int, "is_root")
    })
}

/// The collectives, as the agreement step tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Coll {
    Barrier = 1,
    Broadcast = 2,
    Reduce = 3,
    Allreduce = 4,
    ReduceTyped = 5,
    AllreduceTyped = 6,
}

impl Coll {
    fn from_tag(t: u64) -> Option<Coll> {
        Some(match t {
            1 => Coll::Barrier,
            2 => Coll::Broadcast,
            3 => Coll::Reduce,
            4 => Coll::Allreduce,
            5 => Coll::ReduceTyped,
            6 => Coll::AllreduceTyped,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Coll::Barrier => "smelt_barrier",
            Coll::Broadcast => "smelt_broadcast",
            Coll::Reduce => "smelt_reduce",
            Coll::Allreduce => "smelt_allreduce",
            Coll::ReduceTyped => "smelt_reduce_typed",
            Coll::AllreduceTyped => "smelt_allreduce_typed",
        }
    }
}

/// Why a collective failed on this member, before it becomes the group's error.
enum Fail {
    /// This member's arguments are wrong (the message names the function).
    Arg(String),
    /// The runtime failed (or the group had failed).
    Group(GroupError),
    /// The collective failed with this error, the same at every member (the MPI body:
    /// nothing to fail on the group's behalf).
    #[cfg(feature = "mpi")]
    Done(Error),
}

impl From<GroupError> for Fail {
    fn from(e: GroupError) -> Fail {
        Fail::Group(e)
    }
}

/// Runs collective `f` on a member handle. Handle errors (invalid, busy) are this
/// call's alone; every other error fails the group and is returned as the group's first
/// failure, the same on every member.
fn collective(
    h: *mut smelt_member,
    f: impl FnOnce(&mut MemberState) -> Result<(), Fail>,
) -> smelt_status {
    guard(|| {
        let mut g = handle::member(id(h), "member")?;
        let sm: &mut MemberState = &mut g;
        let e = match catch_unwind(AssertUnwindSafe(|| f(sm))) {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(Fail::Arg(what))) => sm.fail_with(SMELT_ERR_INVALID_ARGUMENT, what),
            Ok(Err(Fail::Group(e))) => sm.group_error(&e),
            #[cfg(feature = "mpi")]
            Ok(Err(Fail::Done(e))) => e,
            Err(p) => sm.fail_with(
                SMELT_ERR_PANIC,
                format!("internal error: {}", panic_message(&*p)),
            ),
        };
        sm.first_error.get_or_insert_with(|| e.clone());
        Err(e)
    })
}

/// Bits of an agreement word: the collective's tag above, `len` below.
const LEN_BITS: u32 = 56;
const LEN_MAX: usize = (1 << LEN_BITS) - 1;
/// The tag of a member whose arguments are wrong on their own.
const BAD_ARGS: u64 = 0x7f;
/// Combined agreement words that differ.
const DIFFER: u64 = u64::MAX;

/// The agreement step that starts every collective (see the module's documentation).
/// `args` is this member's own check of its arguments. Returns the checked arguments
/// once every member is known to have called `c` with the root's `len` and valid
/// arguments; otherwise the collective fails on every member, and only after all of
/// them entered it (so no earlier collective still in flight is cut short).
fn agree<T>(m: &mut Member, c: Coll, len: usize, args: Res<T>) -> Result<T, Fail> {
    let args = args.and_then(|a| {
        if len > LEN_MAX {
            return err(
                SMELT_ERR_INVALID_ARGUMENT,
                format!("len {len} is too large (at most {LEN_MAX})"),
            );
        }
        Ok(a)
    });
    let mine = match args {
        Ok(_) => ((c as u64) << LEN_BITS) | len as u64,
        Err(_) => BAD_ARGS << LEN_BITS,
    };
    // Every member gets the combination of every member's word; the step runs as the
    // group's barrier does (by dissemination where its algorithm table picks that).
    let all = m.barrier_agree(mine, |a, b| if a == b { a } else { DIFFER })?;
    let args = match args {
        Ok(a) if all == mine => return Ok(a),
        other => other,
    };
    // Somebody differs (every member sees the same `all`, so all of them are here):
    // the root's word names what it called, for the message.
    let root = m.broadcast_word(mine)?;
    if let Err(Error(_, msg)) = args {
        // Every member has entered this collective: fail the group on our behalf.
        return Err(Fail::Arg(format!("{}: {msg}", c.name())));
    }
    let root_len = root & LEN_MAX as u64;
    match Coll::from_tag(root >> LEN_BITS) {
        _ if root == mine => {}
        Some(rc) if rc == c => {
            return Err(Fail::Arg(format!(
                "{}: len {len} differs from the root's len {root_len}",
                c.name()
            )))
        }
        Some(rc) => {
            return Err(Fail::Arg(format!(
                "{} called while the root called {}",
                c.name(),
                rc.name()
            )))
        }
        None if root >> LEN_BITS == BAD_ARGS => {} // the root fails the group
        None => {
            return Err(Fail::Arg(format!(
                "{}: malformed agreement from the root",
                c.name()
            )))
        }
    }
    // This member called what the root did; one that did not (or whose arguments are
    // wrong) is failing the group right now and never joins this barrier, which
    // therefore ends with that failure.
    match m.barrier() {
        Err(e) => Err(Fail::Group(e)),
        Ok(()) => Err(Fail::Arg(format!(
            "{}: the members' arguments differ",
            c.name()
        ))),
    }
}

/// Barrier over the group.
#[no_mangle]
pub extern "C" fn smelt_barrier(member: *mut smelt_member) -> smelt_status {
    collective(member, |sm| {
        #[cfg(feature = "mpi")]
        if let Body::Mpi(m) = &mut sm.body {
            return m.barrier().map_err(Fail::Done);
        }
        agree(sm.tree(), Coll::Barrier, 0, Ok(()))
    })
}

/// Broadcast of `len` bytes from the root's `buf` into every member's `buf`.
#[no_mangle]
pub extern "C" fn smelt_broadcast(
    member: *mut smelt_member,
    buf: *mut c_void,
    len: usize,
) -> smelt_status {
    collective(member, |sm| {
        let b = slice_mut(buf.cast(), len, "buf");
        #[cfg(feature = "mpi")]
        if let Body::Mpi(m) = &mut sm.body {
            return m.broadcast(len, b).map_err(Fail::Done);
        }
        let b = agree(sm.tree(), Coll::Broadcast, len, b)?;
        broadcast_data(sm, b)
    })
}

/// The root's `b` into every member's `b` (the same length everywhere, agreed before).
fn broadcast_data(sm: &mut MemberState, b: &mut [u8]) -> Result<(), Fail> {
    let m = sm.body.tree_mut();
    let root = m.is_root();
    if b.len() <= 8 {
        let mut w = [0u8; 8];
        w[..b.len()].copy_from_slice(b);
        let got = m.broadcast_word(u64::from_le_bytes(w))?;
        if !root {
            b.copy_from_slice(&got.to_le_bytes()[..b.len()]);
        }
        return Ok(());
    }
    let v = &mut sm.bytes;
    v.clear();
    if root {
        v.extend_from_slice(b);
    }
    m.broadcast(v)?;
    if v.len() != b.len() {
        return Err(Fail::Group(m.fail(&format!(
            "smelt_broadcast: received {} bytes instead of {}",
            v.len(),
            b.len()
        ))));
    }
    if !root {
        b.copy_from_slice(v);
    }
    Ok(())
}

/// A C reduction operator: combine `in` into `inout` (`len` bytes each).
pub type smelt_reduce_op = Option<
    unsafe extern "C" fn(inout: *mut c_void, input: *const c_void, len: usize, arg: *mut c_void),
>;

/// Reduce of `len` bytes per member with the C operator `op`; the result is in the
/// root's `buf`.
#[no_mangle]
pub extern "C" fn smelt_reduce(
    member: *mut smelt_member,
    buf: *mut c_void,
    len: usize,
    op: smelt_reduce_op,
    arg: *mut c_void,
) -> smelt_status {
    collective(member, |sm| {
        #[cfg(feature = "mpi")]
        if let Body::Mpi(m) = &mut sm.body {
            return m
                .reduce(len, reduce_args(buf, len, op), arg, false)
                .map_err(Fail::Done);
        }
        let (b, op) = agree(sm.tree(), Coll::Reduce, len, reduce_args(buf, len, op))?;
        reduce_data(sm.tree(), b, op, arg)
    })
}

/// Allreduce: reduce, then broadcast of the root's result.
#[no_mangle]
pub extern "C" fn smelt_allreduce(
    member: *mut smelt_member,
    buf: *mut c_void,
    len: usize,
    op: smelt_reduce_op,
    arg: *mut c_void,
) -> smelt_status {
    collective(member, |sm| {
        let args = reduce_args(buf, len, op);
        #[cfg(feature = "mpi")]
        if let Body::Mpi(m) = &mut sm.body {
            return m.reduce(len, args, arg, true).map_err(Fail::Done);
        }
        let (b, op) = agree(sm.tree(), Coll::Allreduce, len, args)?;
        // A group over an `auto` tree whose table picks recursive doubling for this
        // size runs it (the arguments were agreed on above, as for every collective).
        if sm
            .tree()
            .context(0)?
            .non_tree_for(::smelt_tree::Op::Allreduce, len)
            .is_some()
        {
            return Ok(sm
                .tree()
                .allreduce_bytes(b, |acc, other| apply(op, acc, other, arg))?);
        }
        reduce_data(sm.tree(), b, op, arg)?;
        broadcast_data(sm, b)
    })
}

/// Typed reduction: `count` values of `type` (`SMELT_INT8` ... `SMELT_DOUBLE`) in
/// `buf`, combined with a predefined operation (`SMELT_OP_SUM` ... `SMELT_OP_LXOR`) by
/// the runtime's vectorised kernels, along the tree (lent between threads); the result
/// is in the root's `buf`.
#[no_mangle]
pub extern "C" fn smelt_reduce_typed(
    member: *mut smelt_member,
    buf: *mut c_void,
    count: usize,
    r#type: c_int,
    op: c_int,
) -> smelt_status {
    typed(member, buf, count, r#type, op, false)
}

/// Typed allreduce: as [`smelt_reduce_typed`], every member's `buf` gets the result
/// (the algorithm the group's table picks for the size: the tree, recursive doubling,
/// Rabenseifner or the ring).
#[no_mangle]
pub extern "C" fn smelt_allreduce_typed(
    member: *mut smelt_member,
    buf: *mut c_void,
    count: usize,
    r#type: c_int,
    op: c_int,
) -> smelt_status {
    typed(member, buf, count, r#type, op, true)
}

/// Bytes per value of a `SMELT_*` element type, or `None`.
fn type_size(t: c_int) -> Option<usize> {
    Some(match t {
        1 | 2 => 1,
        3 | 4 => 2,
        5 | 6 | 9 => 4,
        7 | 8 | 10 => 8,
        _ => return None,
    })
}

/// The `SMELT_OP_*` operation, or `None`.
fn reduce_op(op: c_int) -> Option<ReduceOp> {
    usize::try_from(op)
        .ok()
        .and_then(|i| i.checked_sub(1))
        .and_then(|i| ReduceOp::ALL.get(i).copied())
}

fn typed(
    member: *mut smelt_member,
    buf: *mut c_void,
    count: usize,
    ty: c_int,
    op: c_int,
    all: bool,
) -> smelt_status {
    let name = if all {
        "smelt_allreduce_typed"
    } else {
        "smelt_reduce_typed"
    };
    let coll = if all {
        Coll::AllreduceTyped
    } else {
        Coll::ReduceTyped
    };
    collective(member, |sm| {
        let args = (|| {
            let Some(size) = type_size(ty) else {
                return err(
                    SMELT_ERR_INVALID_ARGUMENT,
                    format!("{name}: unknown type {ty} (SMELT_INT8 .. SMELT_DOUBLE)"),
                );
            };
            let Some(rop) = reduce_op(op) else {
                return err(
                    SMELT_ERR_INVALID_ARGUMENT,
                    format!("{name}: unknown op {op} (SMELT_OP_SUM .. SMELT_OP_LXOR)"),
                );
            };
            if ty >= 9 && rop.integer_only() {
                return err(
                    SMELT_ERR_INVALID_ARGUMENT,
                    format!("{name}: op {} is not defined on floating point", rop.name()),
                );
            }
            let Some(len) = count.checked_mul(size).filter(|l| *l < 1 << 48) else {
                return err(
                    SMELT_ERR_INVALID_ARGUMENT,
                    format!("{name}: count {count} is too large"),
                );
            };
            Ok((slice_mut(buf.cast(), len, "buf")?, rop))
        })();
        let len = count
            .saturating_mul(type_size(ty).unwrap_or(1))
            .min(1 << 48);
        // Every member agrees on the length, the type and the operation at once.
        let word = len | ((ty.clamp(0, 15) as usize) << 48) | ((op.clamp(0, 15) as usize) << 52);
        #[cfg(feature = "mpi")]
        if let Body::Mpi(m) = &mut sm.body {
            return m.typed(word, args, ty, all).map_err(Fail::Done);
        }
        let (b, rop) = agree(sm.tree(), coll, word, args)?;
        run_typed(sm.tree(), b, ty, rop, all)?;
        Ok(())
    })
}

/// The typed reduction proper, on bytes (any alignment), with `T`'s kernel.
fn run_typed(
    m: &mut Member,
    b: &mut [u8],
    ty: c_int,
    op: ReduceOp,
    all: bool,
) -> Result<(), GroupError> {
    macro_rules! go {
        ($t:ty) => {
            if all {
                m.allreduce_bytes_op::<$t>(b, op)
            } else {
                m.reduce_bytes(b, |a, o| combine_bytes::<$t>(op, a, o))
                    .map(|_| ())
            }
        };
    }
    by_type!(ty, go)
}

/// `$go!(T)` for the Rust type `T` of the C element type `$ty` (`SMELT_INT8` = 1 ..
/// `SMELT_FLOAT` = 9; any other code, checked before, is `SMELT_DOUBLE`).
macro_rules! by_type {
    ($ty:expr, $go:ident) => {
        match $ty {
            1 => $go!(i8),
            2 => $go!(u8),
            3 => $go!(i16),
            4 => $go!(u16),
            5 => $go!(i32),
            6 => $go!(u32),
            7 => $go!(i64),
            8 => $go!(u64),
            9 => $go!(f32),
            _ => $go!(f64),
        }
    };
}
pub(crate) use by_type;

pub(crate) type OpFn = unsafe extern "C" fn(*mut c_void, *const c_void, usize, *mut c_void);

/// The checked arguments of a reduction.
fn reduce_args<'a>(buf: *mut c_void, len: usize, op: smelt_reduce_op) -> Res<(&'a mut [u8], OpFn)> {
    let Some(op) = op else {
        return err(SMELT_ERR_INVALID_ARGUMENT, "op is NULL");
    };
    Ok((slice_mut(buf.cast(), len, "buf")?, op))
}

/// Applies the C operator to two byte buffers of equal length.
pub(crate) fn apply(op: OpFn, acc: &mut [u8], other: &[u8], arg: *mut c_void) {
    let n = acc.len().min(other.len());
    // `op` is the caller's operator (smelt.h: it reads `len` bytes of `in` and updates
    // `len` bytes of `inout`); both buffers are live Rust buffers of at least `n` bytes for
    // the duration of the call, and `arg` is passed through untouched.
    // SAFETY: as argued in the lines above.
    unsafe {
        op(
            acc.as_mut_ptr() as *mut c_void,
            other.as_ptr() as *const c_void,
            n,
            arg,
        )
    }
}

/// The reduction proper (every member's `b` has the same length, agreed before).
fn reduce_data(m: &mut Member, b: &mut [u8], op: OpFn, arg: *mut c_void) -> Result<(), Fail> {
    let len = b.len();
    if len <= 8 {
        // One word: a true tree reduction, combined at every inner member.
        let mut w = [0u8; 8];
        w[..len].copy_from_slice(b);
        let r = m.reduce(u64::from_le_bytes(w), |x: u64, y: u64| {
            let mut a = x.to_le_bytes();
            let c = y.to_le_bytes();
            apply(op, &mut a[..len], &c[..len], arg);
            u64::from_le_bytes(a)
        })?;
        if let Some(r) = r {
            b.copy_from_slice(&r.to_le_bytes()[..len]);
        }
        return Ok(());
    }
    // Longer buffers: gather every member's buffer along the tree word by word, then
    // combine at the root in rank order (the operator must be associative and
    // commutative, as for MPI_Reduce with a user op).
    let words = len.div_ceil(8);
    let me = m.rank().index();
    let mut all: Option<Vec<Vec<u8>>> = None;
    for k in 0..words {
        let mut w = [0u8; 8];
        let part = &b[k * 8..len.min(k * 8 + 8)];
        w[..part.len()].copy_from_slice(part);
        if let Some(vals) = m.gather_word(u64::from_le_bytes(w))? {
            let bufs = all.get_or_insert_with(|| vec![vec![0u8; words * 8]; vals.len()]);
            for (r, v) in vals.iter().enumerate() {
                bufs[r][k * 8..k * 8 + 8].copy_from_slice(&v.to_le_bytes());
            }
        }
    }
    if let Some(bufs) = all {
        let mut acc = b.to_vec();
        for (r, other) in bufs.iter().enumerate() {
            if r != me {
                apply(op, &mut acc, &other[..len], arg);
            }
        }
        b.copy_from_slice(&acc);
    }
    Ok(())
}

/// Releases a group (NULL is ignored): `SMELT_ERR_BUSY` (and the group stays) while a
/// member is attached or running; `SMELT_ERR_INVALID_HANDLE` if it was freed already.
#[no_mangle]
pub extern "C" fn smelt_group_free(group: *mut smelt_group) -> smelt_status {
    guard(|| {
        if group.is_null() {
            return Ok(());
        }
        let obj = handle::remove(id(group), Kind::Group, "group", Wait::Block, |o| match o {
            Object::Group(g) => g.release(),
            _ => unreachable!("the handle table checked the kind"),
        })?;
        drop(obj);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::last;
    use crate::*;
    use std::ptr;
    use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
    use std::time::Instant;

    /// A synthetic model of `sockets` x `cores` CPUs (send 50 ns, receive 60 ns, remote
    /// costs times `remote`) and a tree of `algo` (None: the default) over all of it.
    fn model_and_tree(
        sockets: u32,
        cores: u32,
        remote: f64,
        algo: Option<&str>,
    ) -> (*mut smelt_model, *mut smelt_tree) {
        let mut m = ptr::null_mut();
        assert_eq!(
            smelt_model_synthetic(sockets, cores, 50.0, 60.0, remote, &mut m),
            SMELT_OK
        );
        let algo = algo.map(|a| std::ffi::CString::new(a).unwrap());
        let algo_ptr = algo.as_ref().map_or(ptr::null(), |a| a.as_ptr());
        let mut t = ptr::null_mut();
        assert_eq!(
            smelt_tree_build(m, algo_ptr, ptr::null(), 0, -1, &mut t),
            SMELT_OK
        );
        (m, t)
    }

    /// Element-wise sum of i64 values.
    unsafe extern "C" fn sum_i64(
        inout: *mut c_void,
        input: *const c_void,
        len: usize,
        _arg: *mut c_void,
    ) {
        let n = len / 8;
        // SAFETY: the library passes two live buffers of `len` bytes.
        let (a, b) = unsafe {
            (
                std::slice::from_raw_parts_mut(inout as *mut u8, len),
                std::slice::from_raw_parts(input as *const u8, len),
            )
        };
        for k in 0..n {
            let x = i64::from_le_bytes(a[k * 8..k * 8 + 8].try_into().unwrap());
            let y = i64::from_le_bytes(b[k * 8..k * 8 + 8].try_into().unwrap());
            a[k * 8..k * 8 + 8].copy_from_slice(&(x + y).to_le_bytes());
        }
    }

    /// `x` summed over the group with `sum_i64` (one word), at every member.
    fn allreduce_sum(m: *mut smelt_member, x: i64) -> i64 {
        let mut w = [x];
        assert_eq!(
            smelt_allreduce(
                m,
                w.as_mut_ptr() as *mut c_void,
                8,
                Some(sum_i64),
                ptr::null_mut()
            ),
            SMELT_OK,
            "{}",
            last()
        );
        w[0]
    }

    #[derive(Default)]
    struct Shared {
        ok: AtomicUsize,
        root_sum: AtomicI64,
    }

    unsafe extern "C" fn body(m: *mut smelt_member, arg: *mut c_void) {
        // SAFETY: arg is the &Shared passed to smelt_group_run below.
        let sh = unsafe { &*(arg as *const Shared) };
        let mut rank = 0usize;
        assert_eq!(smelt_member_index(m, &mut rank), SMELT_OK);
        let mut root = 0;
        assert_eq!(smelt_member_is_root(m, &mut root), SMELT_OK);
        assert_eq!(smelt_barrier(m), SMELT_OK);
        // Broadcast 100 bytes (several channel messages).
        let mut msg = [0u8; 100];
        if root == 1 {
            for (i, b) in msg.iter_mut().enumerate() {
                *b = i as u8;
            }
        }
        assert_eq!(
            smelt_broadcast(m, msg.as_mut_ptr() as *mut c_void, 100),
            SMELT_OK
        );
        let bcast_ok = msg.iter().enumerate().all(|(i, &b)| b == i as u8);
        // Reduce 3 x i64 (the gather path) and allreduce 1 x i64 (the word path).
        let mut v = [rank as i64 + 1, 10, -1];
        assert_eq!(
            smelt_reduce(
                m,
                v.as_mut_ptr() as *mut c_void,
                24,
                Some(sum_i64),
                ptr::null_mut()
            ),
            SMELT_OK
        );
        if root == 1 {
            sh.root_sum
                .store(v[0] * 1_000_000 + v[1] * 1000 - v[2], Ordering::SeqCst);
        }
        let sum = allreduce_sum(m, rank as i64 + 1);
        if bcast_ok && sum == 10 {
            sh.ok.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Many runs of an oversubscribed group (5 members on whatever CPUs exist);
    /// `SMELT_STRESS=<factor>` scales the number of runs.
    #[test]
    fn repeated_runs_stay_consistent() {
        let factor = smelt_settings::count(smelt_settings::STRESS)
            .unwrap()
            .unwrap_or(1) as usize;
        let (m, t) = model_and_tree(1, 5, 1.0, Some("binary"));
        let mut g = ptr::null_mut();
        assert_eq!(smelt_group_create(t, &mut g), SMELT_OK);
        let sh = Shared::default();
        unsafe extern "C" fn body5(m: *mut smelt_member, arg: *mut c_void) {
            // SAFETY: arg is the &Shared passed to smelt_group_run below.
            let sh = unsafe { &*(arg as *const Shared) };
            let mut rank = 0usize;
            assert_eq!(smelt_member_index(m, &mut rank), SMELT_OK);
            for _ in 0..20 {
                assert_eq!(smelt_barrier(m), SMELT_OK);
                if allreduce_sum(m, rank as i64) == 10 {
                    sh.ok.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        let runs = 10 * factor;
        for _ in 0..runs {
            assert_eq!(
                smelt_group_run(g, Some(body5), &sh as *const Shared as *mut c_void),
                SMELT_OK
            );
        }
        assert_eq!(sh.ok.load(Ordering::SeqCst), runs * 5 * 20);
        smelt_group_free(g);
        smelt_tree_free(t);
        smelt_model_free(m);
    }

    /// Member 0 leaves without taking part in the barrier: the others fail within the
    /// group timeout instead of hanging, and smelt_group_run reports it.
    unsafe extern "C" fn one_leaves(m: *mut smelt_member, _arg: *mut c_void) {
        let mut rank = 0usize;
        assert_eq!(smelt_member_index(m, &mut rank), SMELT_OK);
        if rank != 0 {
            let rc = smelt_barrier(m);
            assert!(rc == SMELT_ERR_TIMEOUT || rc == SMELT_ERR_RUNTIME, "{rc}");
        }
    }

    #[test]
    fn a_member_that_leaves_makes_the_others_fail_not_hang() {
        let (m, t) = model_and_tree(1, 3, 1.0, None);
        let mut g = ptr::null_mut();
        assert_eq!(
            smelt_group_create_timeout(t, 0, &mut g),
            SMELT_ERR_INVALID_ARGUMENT
        );
        assert_eq!(smelt_group_create_timeout(t, 300, &mut g), SMELT_OK);
        let rc = smelt_group_run(g, Some(one_leaves), ptr::null_mut());
        assert!(rc == SMELT_ERR_TIMEOUT || rc == SMELT_ERR_RUNTIME, "{rc}");
        // SAFETY: smelt_last_error returns a valid NUL-terminated string.
        let msg = unsafe { std::ffi::CStr::from_ptr(smelt_last_error()) }
            .to_string_lossy()
            .into_owned();
        assert!(!msg.is_empty());
        smelt_group_free(g);
        smelt_tree_free(t);
        smelt_model_free(m);
    }

    #[test]
    fn collectives_from_c_callbacks() {
        let (m, t) = model_and_tree(2, 2, 2.0, None);
        let mut g = ptr::null_mut();
        assert_eq!(smelt_group_create(t, &mut g), SMELT_OK);
        let mut n = 0;
        assert_eq!(smelt_group_size(g, &mut n), SMELT_OK);
        assert_eq!(n, 4);
        let sh = Shared::default();
        for _ in 0..2 {
            sh.ok.store(0, Ordering::SeqCst);
            let rc = smelt_group_run(g, Some(body), &sh as *const Shared as *mut c_void);
            assert_eq!(rc, SMELT_OK);
            assert_eq!(sh.ok.load(Ordering::SeqCst), 4);
            // sums: ranks 1+2+3+4 = 10, 4 x 10 = 40, 4 x -1 = -4
            assert_eq!(sh.root_sum.load(Ordering::SeqCst), 10_000_000 + 40_000 + 4);
        }
        // Attach: a member can be attached once at a time.
        let mut a = ptr::null_mut();
        assert_eq!(smelt_group_attach(g, 0, &mut a), SMELT_OK);
        let mut b = ptr::null_mut();
        assert_eq!(smelt_group_attach(g, 0, &mut b), SMELT_ERR_BUSY);
        assert_eq!(smelt_group_attach(g, 9, &mut b), SMELT_ERR_INVALID_ARGUMENT);
        assert_eq!(
            smelt_group_run(g, Some(body), ptr::null_mut()),
            SMELT_ERR_BUSY
        );
        // Not freed while a member is attached.
        assert_eq!(smelt_group_free(g), SMELT_ERR_BUSY);
        assert!(last().contains("1 of the group's 4 members"), "{}", last());
        assert_eq!(smelt_member_detach(a), SMELT_OK);
        assert_eq!(
            smelt_group_run(g, None, ptr::null_mut()),
            SMELT_ERR_INVALID_ARGUMENT
        );
        smelt_group_free(g);
        smelt_tree_free(t);
        smelt_model_free(m);
    }

    /// The typed reductions: every member's result against the sequential one (f64
    /// sum past the loan threshold, odd i32 bxor, u8 max to the root); an operation a
    /// type lacks is an invalid argument on every member (the group then fails).
    #[test]
    fn typed_reductions() {
        unsafe extern "C" fn typed_body(m: *mut smelt_member, arg: *mut c_void) {
            // SAFETY: arg is the &Shared passed to smelt_group_run below.
            let sh = unsafe { &*(arg as *const Shared) };
            let mut rank = 0usize;
            assert_eq!(smelt_member_index(m, &mut rank), SMELT_OK);
            let mut root = 0;
            assert_eq!(smelt_member_is_root(m, &mut root), SMELT_OK);
            let n = 100_003;
            let mut v: Vec<f64> = (0..n).map(|i| (i % 7 + rank) as f64).collect();
            let rc = smelt_allreduce_typed(m, v.as_mut_ptr().cast(), n, 10, 1);
            let f_ok = rc == SMELT_OK
                && v.iter()
                    .enumerate()
                    .all(|(i, &x)| x == (4 * (i % 7) + 6) as f64);
            let mut w: Vec<i32> = (0..333).map(|i| (i * 31 + rank as i32 * 7) ^ 5).collect();
            let rc = smelt_allreduce_typed(m, w.as_mut_ptr().cast(), 333, 5, 7);
            let i_ok = rc == SMELT_OK
                && w.iter()
                    .enumerate()
                    .all(|(i, &x)| x == (0..4).fold(0, |a, r| a ^ ((i as i32 * 31 + r * 7) ^ 5)));
            let mut u: Vec<u8> = (0..77).map(|i| (i + rank * 50) as u8).collect();
            let rc = smelt_reduce_typed(m, u.as_mut_ptr().cast(), 77, 2, 4);
            let u_ok = rc == SMELT_OK
                && (root != 1 || u.iter().enumerate().all(|(i, &x)| x == (i + 150) as u8));
            if f_ok && i_ok && u_ok {
                sh.ok.fetch_add(1, Ordering::SeqCst);
            }
            // Bitwise on doubles: refused, on every member.
            let rc = smelt_allreduce_typed(m, v.as_mut_ptr().cast(), 4, 10, 7);
            if rc == SMELT_ERR_INVALID_ARGUMENT {
                sh.root_sum.fetch_add(1, Ordering::SeqCst);
            }
        }
        let (m, t) = model_and_tree(2, 2, 2.0, None);
        let mut g = ptr::null_mut();
        assert_eq!(smelt_group_create(t, &mut g), SMELT_OK);
        let sh = Shared::default();
        let rc = smelt_group_run(g, Some(typed_body), &sh as *const Shared as *mut c_void);
        assert_eq!(sh.ok.load(Ordering::SeqCst), 4, "{rc} {}", last());
        assert_eq!(sh.root_sum.load(Ordering::SeqCst), 4, "{}", last());
        assert!(
            last().contains("not defined on floating point"),
            "{}",
            last()
        );
        smelt_group_free(g);
        smelt_tree_free(t);
        smelt_model_free(m);
    }

    /// Frees everything a test made.
    fn free_all(g: *mut smelt_group, t: *mut smelt_tree, m: *mut smelt_model) {
        assert_eq!(smelt_group_free(g), SMELT_OK, "{}", last());
        assert_eq!(smelt_tree_free(t), SMELT_OK);
        assert_eq!(smelt_model_free(m), SMELT_OK);
    }

    /// smelt_job_join outside a job is an error code with a one-line message; a group's
    /// member is not released by smelt_job_leave (nor a job's by smelt_member_detach).
    #[test]
    fn job_calls_outside_a_job_and_on_group_members() {
        if !smelt_settings::is_set(smelt_runtime::process::ENV_JOB) {
            let mut j = ptr::null_mut();
            assert_eq!(smelt_job_join(&mut j), SMELT_ERR_RUNTIME);
            let msg = last();
            assert!(msg.contains("SMELT_JOB is not set"), "{msg}");
            assert!(msg.contains("smelt launch") && !msg.contains('\n'), "{msg}");
        }
        assert_eq!(smelt_job_join(ptr::null_mut()), SMELT_ERR_INVALID_ARGUMENT);
        assert_eq!(smelt_job_leave(ptr::null_mut()), SMELT_OK);
        let (m, t) = model_and_tree(1, 3, 1.0, None);
        let mut g = ptr::null_mut();
        assert_eq!(smelt_group_create(t, &mut g), SMELT_OK);
        let mut a = ptr::null_mut();
        assert_eq!(smelt_group_attach(g, 1, &mut a), SMELT_OK);
        let mut n = 0;
        assert_eq!(smelt_member_size(a, &mut n), SMELT_OK);
        assert_eq!(n, 3);
        assert_eq!(smelt_job_leave(a), SMELT_ERR_INVALID_ARGUMENT);
        assert!(last().contains("smelt_member_detach"), "{}", last());
        // Refused: the member is still attached and usable.
        assert_eq!(smelt_member_size(a, &mut n), SMELT_OK);
        assert_eq!(smelt_member_detach(a), SMELT_OK);
        assert_eq!(smelt_job_leave(a), SMELT_ERR_INVALID_HANDLE);
        assert_eq!(smelt_member_size(a, &mut n), SMELT_ERR_INVALID_HANDLE);
        free_all(g, t, m);
    }

    #[test]
    fn argument_failures_are_told_from_runtime_failures() {
        for yes in [
            "smelt_broadcast: len 16 differs from the root's len 8",
            "smelt_reduce: op is NULL",
            "smelt_barrier called while the root called smelt_allreduce",
        ] {
            assert!(is_capi_arg_failure(yes), "{yes}");
        }
        for no in [
            "timed out after 30s",
            "smelt_broadcastx: y",
            "internal error: smelt_barrier: x",
        ] {
            assert!(!is_capi_arg_failure(no), "{no}");
        }
    }

    #[test]
    fn double_free_and_use_after_free_are_errors() {
        let (m, t) = model_and_tree(1, 2, 1.0, None);
        let mut g = ptr::null_mut();
        assert_eq!(smelt_group_create(t, &mut g), SMELT_OK);
        let mut a = ptr::null_mut();
        assert_eq!(smelt_group_attach(g, 0, &mut a), SMELT_OK);
        assert_eq!(smelt_member_detach(a), SMELT_OK);
        // A detached member handle: every use and a second detach are errors.
        assert_eq!(smelt_member_detach(a), SMELT_ERR_INVALID_HANDLE);
        assert!(last().contains("not a live member handle"), "{}", last());
        assert_eq!(smelt_barrier(a), SMELT_ERR_INVALID_HANDLE);
        let mut idx = 0;
        assert_eq!(smelt_member_index(a, &mut idx), SMELT_ERR_INVALID_HANDLE);
        // The same member attached again gets a new handle; the old one stays dead.
        let mut a2 = ptr::null_mut();
        assert_eq!(smelt_group_attach(g, 0, &mut a2), SMELT_OK);
        assert_ne!(a2, a);
        assert_eq!(smelt_member_index(a, &mut idx), SMELT_ERR_INVALID_HANDLE);
        assert_eq!(smelt_member_index(a2, &mut idx), SMELT_OK);
        assert_eq!(smelt_member_detach(a2), SMELT_OK);
        free_all(g, t, m);
        // Freed objects: a second free and every use are errors, with a message.
        assert_eq!(smelt_group_free(g), SMELT_ERR_INVALID_HANDLE);
        assert!(
            last().contains("not a live group handle (already freed)"),
            "{}",
            last()
        );
        assert_eq!(smelt_tree_free(t), SMELT_ERR_INVALID_HANDLE);
        assert_eq!(smelt_model_free(m), SMELT_ERR_INVALID_HANDLE);
        let mut n = 0;
        assert_eq!(smelt_group_size(g, &mut n), SMELT_ERR_INVALID_HANDLE);
        assert_eq!(smelt_tree_size(t, &mut n), SMELT_ERR_INVALID_HANDLE);
        assert_eq!(smelt_model_ncpus(m, &mut n), SMELT_ERR_INVALID_HANDLE);
        assert_eq!(smelt_group_attach(g, 0, &mut a), SMELT_ERR_INVALID_HANDLE);
        assert_eq!(smelt_group_create(t, &mut g), SMELT_ERR_INVALID_HANDLE);
        // A handle of another kind, and a made-up one.
        let (m, t) = model_and_tree(1, 2, 1.0, None);
        assert_eq!(
            smelt_model_ncpus(t as *const smelt_model, &mut n),
            SMELT_ERR_INVALID_HANDLE
        );
        assert!(
            last().contains("a tree handle, not a model handle"),
            "{}",
            last()
        );
        assert_eq!(
            smelt_tree_free(std::ptr::without_provenance_mut(0x1234_5678)),
            SMELT_ERR_INVALID_HANDLE
        );
        assert_eq!(smelt_tree_free(t), SMELT_OK);
        assert_eq!(smelt_model_free(m), SMELT_OK);
        // NULL stays "ignored" for the frees.
        assert_eq!(smelt_group_free(ptr::null_mut()), SMELT_OK);
        assert_eq!(smelt_member_detach(ptr::null_mut()), SMELT_OK);
    }

    /// Handles that smelt_group_run gave its bodies, kept after the bodies returned.
    #[derive(Default)]
    struct Kept(Mutex<Vec<usize>>);

    unsafe extern "C" fn keep_handle(m: *mut smelt_member, arg: *mut c_void) {
        // SAFETY: arg is the &Kept passed to smelt_group_run below.
        let kept = unsafe { &*(arg as *const Kept) };
        assert_eq!(smelt_barrier(m), SMELT_OK);
        // Not detachable: it belongs to smelt_group_run.
        assert_eq!(smelt_member_detach(m), SMELT_ERR_INVALID_ARGUMENT);
        kept.0.lock().unwrap().push(m.addr());
    }

    #[test]
    fn run_handles_expire_when_the_body_returns() {
        let (m, t) = model_and_tree(1, 3, 1.0, None);
        let mut g = ptr::null_mut();
        assert_eq!(smelt_group_create(t, &mut g), SMELT_OK);
        let kept = Kept::default();
        let arg = &kept as *const Kept as *mut c_void;
        assert_eq!(smelt_group_run(g, Some(keep_handle), arg), SMELT_OK);
        let handles = kept.0.lock().unwrap().clone();
        assert_eq!(handles.len(), 3);
        for &h in &handles {
            let h: *mut smelt_member = std::ptr::without_provenance_mut(h);
            assert_eq!(smelt_barrier(h), SMELT_ERR_INVALID_HANDLE);
            assert!(
                last().contains("its smelt_group_run body returned"),
                "{}",
                last()
            );
            let mut idx = 0;
            assert_eq!(smelt_member_index(h, &mut idx), SMELT_ERR_INVALID_HANDLE);
            assert_eq!(smelt_member_detach(h), SMELT_ERR_INVALID_HANDLE);
        }
        // The group still works: a second run gets new handles.
        assert_eq!(smelt_group_run(g, Some(keep_handle), arg), SMELT_OK);
        let again = kept.0.lock().unwrap().clone();
        assert!(again[3..].iter().all(|h| !handles.contains(h)));
        free_all(g, t, m);
    }

    #[test]
    fn one_member_handle_on_two_threads_is_busy_not_a_race() {
        let (m, t) = model_and_tree(1, 2, 1.0, None);
        let mut g = ptr::null_mut();
        assert_eq!(smelt_group_create(t, &mut g), SMELT_OK);
        let mut a = ptr::null_mut();
        assert_eq!(smelt_group_attach(g, 0, &mut a), SMELT_OK);
        let a_addr = a.addr();
        std::thread::scope(|s| {
            // Thread 1 waits in a barrier with handle `a` (member 1 is not there yet).
            let waiting = s.spawn(move || smelt_barrier(std::ptr::without_provenance_mut(a_addr)));
            // Meanwhile every use of `a` from this thread is refused with BUSY.
            let start = Instant::now();
            let mut idx = 0;
            loop {
                let rc = smelt_member_index(a, &mut idx);
                if rc == SMELT_ERR_BUSY {
                    break;
                }
                assert_eq!(rc, SMELT_OK);
                // Generous: on a loaded machine (2 CPUs, many jobs) thread 1 may wait long for a CPU.
                assert!(start.elapsed() < Duration::from_secs(20), "never busy");
                std::thread::yield_now();
            }
            assert!(last().contains("in use by another thread"), "{}", last());
            assert_eq!(smelt_barrier(a), SMELT_ERR_BUSY);
            assert_eq!(smelt_member_detach(a), SMELT_ERR_BUSY);
            assert_eq!(smelt_group_free(g), SMELT_ERR_BUSY);
            // Member 1 arrives: thread 1's barrier completes normally.
            let mut b = ptr::null_mut();
            assert_eq!(smelt_group_attach(g, 1, &mut b), SMELT_OK);
            assert_eq!(smelt_barrier(b), SMELT_OK);
            assert_eq!(waiting.join().unwrap(), SMELT_OK);
            assert_eq!(smelt_member_detach(b), SMELT_OK);
        });
        // Used one thread after the other, the handle is fine.
        let mut idx = 9;
        assert_eq!(smelt_member_index(a, &mut idx), SMELT_OK);
        assert_eq!(idx, 0);
        assert_eq!(smelt_member_detach(a), SMELT_OK);
        free_all(g, t, m);
    }

    /// How member `bad` misbehaves in [`misuse_body`].
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    enum Misuse {
        BroadcastLen,
        ReduceLen,
        AllreduceLen,
        NullBuf,
        NullOp,
        OtherCollective,
        RootLen,
    }

    struct MisuseRun {
        how: Misuse,
        bad: usize,
        results: Mutex<Vec<(usize, c_int, String, Duration)>>,
    }

    unsafe extern "C" fn misuse_body(m: *mut smelt_member, arg: *mut c_void) {
        // SAFETY: arg is the &MisuseRun passed to smelt_group_run below.
        let run = unsafe { &*(arg as *const MisuseRun) };
        let mut rank = 0;
        assert_eq!(smelt_member_index(m, &mut rank), SMELT_OK);
        let mut root = 0;
        assert_eq!(smelt_member_is_root(m, &mut root), SMELT_OK);
        // A collective that works first.
        assert_eq!(allreduce_sum(m, 1), 4);
        let bad = rank == run.bad;
        let mut buf = [7i64; 4];
        let p = buf.as_mut_ptr() as *mut c_void;
        let start = Instant::now();
        let rc = match run.how {
            Misuse::BroadcastLen => smelt_broadcast(m, p, if bad { 16 } else { 8 }),
            Misuse::RootLen => smelt_broadcast(m, p, if root == 1 { 24 } else { 32 }),
            Misuse::ReduceLen => smelt_reduce(
                m,
                p,
                if bad { 8 } else { 24 },
                Some(sum_i64),
                ptr::null_mut(),
            ),
            Misuse::AllreduceLen => smelt_allreduce(
                m,
                p,
                if bad { 4 } else { 8 },
                Some(sum_i64),
                ptr::null_mut(),
            ),
            Misuse::NullBuf => smelt_broadcast(m, if bad { ptr::null_mut() } else { p }, 32),
            Misuse::NullOp => smelt_allreduce(
                m,
                p,
                8,
                if bad { None } else { Some(sum_i64) },
                ptr::null_mut(),
            ),
            Misuse::OtherCollective if bad => smelt_barrier(m),
            Misuse::OtherCollective => smelt_broadcast(m, p, 8),
        };
        let took = start.elapsed();
        // Later collectives fail at once with the same error.
        let again = smelt_barrier(m);
        assert_eq!(again, rc);
        run.results.lock().unwrap().push((rank, rc, last(), took));
    }

    /// One member's bad argument fails the collective on every member, promptly (well
    /// within the default 30 s timeout), with the same code and message everywhere.
    #[test]
    fn a_bad_argument_fails_every_member_at_once_with_one_error() {
        let (m, t) = model_and_tree(2, 2, 2.0, None);
        let mut root = 0;
        assert_eq!(smelt_tree_root(t, &mut root), SMELT_OK);
        let cases = [
            (
                Misuse::BroadcastLen,
                "smelt_broadcast: len 16 differs from the root's len 8",
            ),
            (
                Misuse::ReduceLen,
                "smelt_reduce: len 8 differs from the root's len 24",
            ),
            (
                Misuse::AllreduceLen,
                "smelt_allreduce: len 4 differs from the root's len 8",
            ),
            (Misuse::NullBuf, "smelt_broadcast: buf is NULL"),
            (Misuse::NullOp, "smelt_allreduce: op is NULL"),
            (
                Misuse::OtherCollective,
                "smelt_barrier called while the root called smelt_broadcast",
            ),
            (Misuse::RootLen, "len 32 differs from the root's len 24"),
        ];
        for (how, expect) in cases {
            // The offender: a leaf or inner member other than the root, or (for NullOp)
            // the root itself.
            let bad = if how == Misuse::NullOp {
                root
            } else {
                (root + 3) % 4
            };
            let mut g = ptr::null_mut();
            assert_eq!(smelt_group_create(t, &mut g), SMELT_OK);
            let run = MisuseRun {
                how,
                bad,
                results: Mutex::new(Vec::new()),
            };
            let start = Instant::now();
            let rc = smelt_group_run(g, Some(misuse_body), &run as *const _ as *mut c_void);
            let took = start.elapsed();
            let run_msg = last();
            assert!(took < Duration::from_secs(5), "{how:?}: {took:?}");
            let results = run.results.lock().unwrap();
            assert_eq!(results.len(), 4, "{how:?}");
            let (_, rc0, msg0, _) = &results[0];
            assert_eq!(*rc0, SMELT_ERR_INVALID_ARGUMENT, "{how:?}: {msg0}");
            assert!(msg0.contains(expect), "{how:?}: {msg0}");
            if how != Misuse::RootLen {
                let cpu_bad = bad; // synthetic model: CPU ids are 0..4 in member order
                assert!(
                    msg0.starts_with(&format!("member {bad} (CPU {cpu_bad}) failed: ")),
                    "{how:?}: {msg0}"
                );
            }
            for (rank, rc, msg, took) in results.iter() {
                assert_eq!((rc, msg), (rc0, msg0), "{how:?}: member {rank}");
                assert!(
                    *took < Duration::from_secs(5),
                    "{how:?}: member {rank}: {took:?}"
                );
            }
            assert_eq!(rc, *rc0, "{how:?}");
            assert_eq!(&run_msg, msg0, "{how:?}");
            drop(results);
            assert_eq!(smelt_group_free(g), SMELT_OK);
        }
        assert_eq!(smelt_tree_free(t), SMELT_OK);
        assert_eq!(smelt_model_free(m), SMELT_OK);
    }
}
