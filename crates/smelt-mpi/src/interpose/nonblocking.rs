//! The non-blocking collectives over smelt: `MPI_Ibarrier`, `MPI_Ibcast` and
//! `MPI_Iallreduce`, where smelt would take the blocking call (the same set-up, cut-offs,
//! datatypes and operations), run as state machines over the communicator's node trees
//! (smelt-runtime's polled steps) and, between nodes, MPI's own non-blocking
//! collectives among the leaders. Progress is made only inside the calls that complete
//! requests, which are intercepted here: `MPI_Test`, `MPI_Testall`, `MPI_Testany`,
//! `MPI_Testsome`, `MPI_Request_get_status` poll without blocking; `MPI_Wait`,
//! `MPI_Waitall`, `MPI_Waitany`, `MPI_Waitsome` poll (smelt's operations, and MPI's
//! requests through `PMPI_Test*`) until done, spinning, then yielding, then waiting a
//! millisecond at a time on the link a stuck operation waits on. While an operation is
//! pending, the blocking `MPI_Recv`, `MPI_Send`, `MPI_Ssend` and `MPI_Probe` run as
//! their non-blocking forms waited on the same way, and `MPI_Iprobe` polls once (a
//! rank blocked on a peer that waits for the collective still forwards its part). A
//! blocking collective on a communicator first completes the operations pending on it
//! (they share its links, and MPI requires every rank to call a communicator's
//! collectives in one order, so every rank does the same).
//!
//! A smelt request is a real MPI request, a generalized one (`MPI_Grequest_start`),
//! completed (`MPI_Grequest_complete`) when its state machine finishes: MPI's own test,
//! wait, free and status calls then treat it as any other request, and arrays that mix
//! smelt's and MPI's requests need nothing special. Operations on one communicator run
//! one after another, in call order (a second one started while the first is pending
//! queues behind it on every rank alike).
//!
//! Nothing blocks at the call: a non-blocking call never sets a communicator up (set-up
//! is collective and blocking: the call counts towards `SMELT_MPI_SETUP_AFTER`, and the
//! next blocking collective sets up), never makes a tree for a new root (a broadcast
//! from a root without its own tree goes over the one link of a node of two, else to
//! the node's leader with `MPI_Isend` first), and sends only what the rings take at
//! once.

use super::comm::{Fail, Hier, Reduction};
use super::ffi::{self, MPI_Comm, MPI_Datatype, MPI_Op};
use super::stats::{self, Call, Why};
use super::{config, hier_counting, kernel, layout, pack, unpack, CommState, Layout};
use mpi_sys::{MPI_Request, MPI_Status};
use smelt_runtime::polled::{Neighbour, PolledColl, PolledTag};
use smelt_runtime::{Context, GroupError, Member};
use std::cell::Cell;
use std::collections::VecDeque;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Tag of a broadcast root's data handed to its node's leader (on the node's
/// communicator, which only this crate uses).
const FORWARD_TAG: c_int = 0x5e18;
/// How long a wait polls before it waits on a stuck operation's link (a millisecond
/// at a time), and how often a test loop looks for dead peers.
const PATIENT_AFTER: Duration = Duration::from_millis(1);
const LIVENESS_EVERY: Duration = Duration::from_millis(100);

/// Largest non-blocking broadcast or allreduce smelt takes (bytes), whatever the
/// cut-offs: the polled path copies through the rings' 48-byte slots (the blocking
/// calls' staging buffers are not used), and past this MPI's own is faster (measured
/// on 2 ranks: 1.1x Open MPI at 1-4 KiB, 0.3x at 16 KiB, 0.1x from 256 KiB;
/// docs/mpi.md).
const MAX_POLLED: usize = 4096;

/// Operations started and not yet complete, on every communicator.
static PENDING: AtomicUsize = AtomicUsize::new(0);
/// Operations completed so far (a wait tests MPI's requests at once after one did).
static COMPLETED: AtomicUsize = AtomicUsize::new(0);
/// Threads polling operations while holding a communicator's `busy` flag.
static POLLING: AtomicUsize = AtomicUsize::new(0);
/// The pending operations, per communicator state, in call order.
static QUEUES: Mutex<Vec<Queue>> = Mutex::new(Vec::new());

thread_local! {
    /// Set while this thread starts a non-blocking operation (its communicator's
    /// pending operations are queued behind, not completed first).
    static STARTING: Cell<bool> = const { Cell::new(false) };
    /// When this thread last polled with a look for dead peers.
    static LAST_LOOK: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// One communicator's pending operations (kept, empty, until the communicator is
/// freed: no allocation per call).
struct Queue {
    /// The communicator's state (`*mut CommState` as a number).
    st: usize,
    ops: VecDeque<Op>,
    /// Where fragments are received (the operations run one at a time).
    tmp: Vec<u8>,
}

/// What an operation computes.
enum Kind {
    Barrier,
    /// A broadcast from a rank of node `rnode`.
    Bcast {
        rnode: usize,
    },
    Allreduce(Reduction),
}

/// Where the result goes at completion.
enum Out {
    Nothing,
    /// The data's bytes, to this address.
    Bytes(*mut u8),
    /// Unpacked into `count` elements of `dt` at `buf`.
    Unpack {
        buf: *mut c_void,
        count: c_int,
        dt: MPI_Datatype,
    },
}

/// One step of an operation.
enum Stage {
    /// Up node tree `tree` (by local root): the children's parts combined into the
    /// data (a reduction) in pre-order, then the result to the parent.
    Up {
        tree: usize,
        t: Option<PolledTag>,
        child: usize,
        frag: usize,
        sent: usize,
    },
    /// Down node tree `tree` from its root: the data from the parent, on to the children.
    Down {
        tree: usize,
        t: Option<PolledTag>,
        frag: usize,
        have: bool,
        child: usize,
    },
    /// A node of two ranks: each sends its data to the other and combines, the
    /// leader's first on both (identical bytes). Everything is sent at the start, so
    /// completing needs nothing more of the other rank than to have started.
    Exchange {
        t: Option<PolledTag>,
        sent: usize,
        got: usize,
        other: Vec<u8>,
    },
    /// A node of two ranks, a broadcast from the one that is not the root of the
    /// node's tree: the data over the tree's one link, up (`send`: this rank is the
    /// broadcast's root) or down.
    Pair {
        send: bool,
        t: Option<PolledTag>,
        frag: usize,
    },
    /// A broadcast root hands its data to its node's leader (`send`), or the leader
    /// receives it from local rank `peer`.
    Forward {
        peer: usize,
        send: bool,
        req: Option<MPI_Request>,
    },
    /// The leaders' MPI step (`MPI_Ibarrier`, `MPI_Ibcast`, `MPI_Iallreduce`).
    Leaders { req: Option<MPI_Request> },
}

/// One started operation.
struct Op {
    /// The caller's (generalized) request.
    req: MPI_Request,
    call: Call,
    comm: MPI_Comm,
    kind: Kind,
    data: Vec<u8>,
    stages: Vec<Stage>,
    at: usize,
    out: Out,
}

// SAFETY: an operation's raw handles and pointers are the caller's, valid until the
// request completes (MPI's contract); MPI lets any thread complete a request, and the
// operation is only used under the queues' lock.
unsafe impl Send for Op {}

/// Fragments of `len` bytes in pieces of `f` (at least one: an empty message for no data).
fn frags(len: usize, f: usize) -> usize {
    len.div_ceil(f).max(1)
}

/// Bytes of fragment `k`.
fn piece(len: usize, f: usize, k: usize) -> std::ops::Range<usize> {
    (k * f).min(len)..((k + 1) * f).min(len)
}

/// Context 0 of a node tree (the interposer's jobs have one tree each).
fn ctx(m: &mut Member) -> Result<&mut Context, GroupError> {
    m.context(0)
}

/// The tag of a stage, taken at its first poll.
fn tag_of(
    c: &mut Context,
    t: &mut Option<PolledTag>,
    coll: PolledColl,
) -> Result<PolledTag, GroupError> {
    match *t {
        Some(t) => Ok(t),
        None => {
            let n = c.begin_polled(coll)?;
            *t = Some(n);
            Ok(n)
        }
    }
}

/// Makes `tmp` hold the longest fragment a call of `len` bytes receives (fragments of
/// `f` bytes): a message longer than that is another collective's, and the transport
/// reports it (`BufferTooSmall`) as a mismatch.
fn fit(tmp: &mut Vec<u8>, f: usize, len: usize) {
    let want = f.min(len);
    if tmp.len() < want {
        tmp.resize(want, 0);
    }
}

/// A received fragment of another length than every member computes: a mismatch.
fn wrong_len(c: &Context, got: usize, want: usize) -> GroupError {
    c.polled_mismatch(format!(
        "a non-blocking collective received a fragment of {got} bytes where {want} were due: ranks called different collectives"
    ))
}

impl Op {
    /// Advances the operation as far as it goes without waiting (`patience`: one wait
    /// of that long, on the first link it is stuck on; used up by it). `Ok(true)`: done.
    fn poll(
        &mut self,
        h: &mut Hier,
        tmp: &mut Vec<u8>,
        patience: &mut Option<Duration>,
    ) -> Result<bool, Fail> {
        let Op {
            kind,
            data,
            stages,
            at,
            ..
        } = self;
        let v = h.node_view();
        while *at < stages.len() {
            let combine = match &*kind {
                Kind::Allreduce(r) => Some(r.combine),
                _ => None,
            };
            let done = match &mut stages[*at] {
                Stage::Up {
                    tree,
                    t,
                    child,
                    frag,
                    sent,
                } => {
                    let c = ctx(tree_of(h, *tree)?)?;
                    let t = tag_of(c, t, PolledColl::Reduce)?;
                    let f = c.polled_fragment();
                    fit(tmp, f, data.len());
                    let n = frags(data.len(), f);
                    let mut done = true;
                    'up: {
                        while *child < c.num_children() {
                            while *frag < n {
                                let r = piece(data.len(), f, *frag);
                                match c.poll_recv(Neighbour::Child(*child), t, tmp, *patience)? {
                                    None => {
                                        *patience = None;
                                        done = false;
                                        break 'up;
                                    }
                                    Some(got) if got != r.len() => {
                                        return Err(wrong_len(c, got, r.len()).into())
                                    }
                                    Some(got) => {
                                        if let Some(comb) = combine {
                                            comb(&mut data[r], &tmp[..got]);
                                        }
                                        *frag += 1;
                                    }
                                }
                            }
                            *child += 1;
                            *frag = 0;
                        }
                        while *sent < n {
                            let r = piece(data.len(), f, *sent);
                            if !c.poll_send(Neighbour::Parent, t, &data[r], *patience)? {
                                *patience = None;
                                done = false;
                                break 'up;
                            }
                            *sent += 1;
                        }
                    }
                    done
                }
                Stage::Down {
                    tree,
                    t,
                    frag,
                    have,
                    child,
                } => {
                    let c = ctx(tree_of(h, *tree)?)?;
                    let t = tag_of(c, t, PolledColl::Broadcast)?;
                    let f = c.polled_fragment();
                    fit(tmp, f, data.len());
                    let n = frags(data.len(), f);
                    let mut done = true;
                    'down: while *frag < n {
                        let r = piece(data.len(), f, *frag);
                        if !*have {
                            if !c.is_root() {
                                match c.poll_recv(Neighbour::Parent, t, tmp, *patience)? {
                                    None => {
                                        *patience = None;
                                        done = false;
                                        break 'down;
                                    }
                                    Some(got) if got != r.len() => {
                                        return Err(wrong_len(c, got, r.len()).into())
                                    }
                                    Some(got) => data[r.clone()].copy_from_slice(&tmp[..got]),
                                }
                            }
                            *have = true;
                        }
                        while *child < c.num_children() {
                            let to = Neighbour::Child(*child);
                            if !c.poll_send(to, t, &data[r.clone()], *patience)? {
                                *patience = None;
                                done = false;
                                break 'down;
                            }
                            *child += 1;
                        }
                        *frag += 1;
                        *child = 0;
                        *have = false;
                    }
                    done
                }
                Stage::Exchange {
                    t,
                    sent,
                    got,
                    other,
                } => {
                    let c = ctx(tree_of(h, 0)?)?;
                    let t = tag_of(c, t, PolledColl::Barrier)?;
                    let root = c.is_root();
                    let peer = if root {
                        Neighbour::Child(0)
                    } else {
                        Neighbour::Parent
                    };
                    let f = c.polled_fragment();
                    fit(tmp, f, data.len());
                    other.resize(data.len(), 0);
                    let len = data.len();
                    let n = frags(len, f);
                    loop {
                        let mut moved = false;
                        // Sends never wait here: both ranks send first, and a wait
                        // belongs on the receive.
                        if *sent < n && c.poll_send(peer, t, &data[piece(len, f, *sent)], None)? {
                            *sent += 1;
                            moved = true;
                        }
                        if *got < n {
                            let wait = if moved || *sent < n { None } else { *patience };
                            match c.poll_recv(peer, t, tmp, wait)? {
                                Some(k) => {
                                    let r = piece(len, f, *got);
                                    if k != r.len() {
                                        return Err(wrong_len(c, k, r.len()).into());
                                    }
                                    other[r].copy_from_slice(&tmp[..k]);
                                    *got += 1;
                                    moved = true;
                                }
                                None if wait.is_some() => *patience = None,
                                None => {}
                            }
                        }
                        if *sent == n && *got == n {
                            if let Some(comb) = combine {
                                if root {
                                    comb(data, other);
                                } else {
                                    comb(other, data);
                                    data.copy_from_slice(other);
                                }
                            }
                            break true;
                        }
                        if !moved {
                            break false;
                        }
                    }
                }
                Stage::Pair { send, t, frag } => {
                    let c = ctx(tree_of(h, 0)?)?;
                    let t = tag_of(c, t, PolledColl::Broadcast)?;
                    let peer = if c.is_root() {
                        Neighbour::Child(0)
                    } else {
                        Neighbour::Parent
                    };
                    let f = c.polled_fragment();
                    fit(tmp, f, data.len());
                    let n = frags(data.len(), f);
                    let mut done = true;
                    while *frag < n {
                        let r = piece(data.len(), f, *frag);
                        if *send {
                            if !c.poll_send(peer, t, &data[r], *patience)? {
                                *patience = None;
                                done = false;
                                break;
                            }
                        } else {
                            match c.poll_recv(peer, t, tmp, *patience)? {
                                None => {
                                    *patience = None;
                                    done = false;
                                    break;
                                }
                                Some(got) if got != r.len() => {
                                    return Err(wrong_len(c, got, r.len()).into())
                                }
                                Some(got) => data[r].copy_from_slice(&tmp[..got]),
                            }
                        }
                        *frag += 1;
                    }
                    done
                }
                Stage::Forward { peer, send, req } => {
                    if req.is_none() {
                        let mut r = request_null();
                        let (p, n) = (data.as_mut_ptr().cast::<c_void>(), data.len() as c_int);
                        // `data` lives in the operation, unmoved (a Vec's heap
                        // buffer) until the request completes; `n` is its length.
                        // SAFETY: as argued in the lines above.
                        ffi::check(unsafe {
                            if *send {
                                mpi_sys::PMPI_Isend(
                                    p,
                                    n,
                                    ffi::byte(),
                                    *peer as c_int,
                                    FORWARD_TAG,
                                    v.node,
                                    &mut r,
                                )
                            } else {
                                mpi_sys::PMPI_Irecv(
                                    p,
                                    n,
                                    ffi::byte(),
                                    *peer as c_int,
                                    FORWARD_TAG,
                                    v.node,
                                    &mut r,
                                )
                            }
                        })?;
                        *req = Some(r);
                    }
                    test_internal(req)?
                }
                Stage::Leaders { req } => {
                    if req.is_none() {
                        let mut r = request_null();
                        let p = data.as_mut_ptr().cast::<c_void>();
                        // `data` lives in the operation, unmoved until the request
                        // completes; it holds `count` elements of `dt` (the reduction's) or
                        // the broadcast's `len` bytes; the leaders' communicator is this
                        // crate's.
                        // SAFETY: as argued in the lines above.
                        ffi::check(unsafe {
                            match &*kind {
                                Kind::Barrier => mpi_sys::PMPI_Ibarrier(v.leaders, &mut r),
                                Kind::Bcast { rnode } => mpi_sys::PMPI_Ibcast(
                                    p,
                                    data.len() as c_int,
                                    ffi::byte(),
                                    *rnode as c_int,
                                    v.leaders,
                                    &mut r,
                                ),
                                Kind::Allreduce(red) => mpi_sys::PMPI_Iallreduce(
                                    ffi::in_place(),
                                    p,
                                    red.count,
                                    red.dt,
                                    red.op,
                                    v.leaders,
                                    &mut r,
                                ),
                            }
                        })?;
                        *req = Some(r);
                    }
                    test_internal(req)?
                }
            };
            if !done {
                return Ok(false);
            }
            *at += 1;
        }
        Ok(true)
    }

    /// Puts the result where the caller wants it (at completion).
    fn deliver(&self) -> Result<(), Fail> {
        match self.out {
            Out::Nothing => {}
            Out::Bytes(p) => {
                // The caller's buffer has room for the result's bytes and is not used until
                // the request completes; `data` is this operation's own.
                // SAFETY: MPI's contract.
                unsafe { std::ptr::copy_nonoverlapping(self.data.as_ptr(), p, self.data.len()) };
            }
            Out::Unpack { buf, count, dt } => {
                // SAFETY: MPI's contract: room for `count` elements of `dt` at `buf`.
                unsafe { unpack(&self.data, buf, count, dt, self.comm) }?;
            }
        }
        Ok(())
    }
}

/// The node tree rooted at local rank `tree` (made before the operation was planned).
fn tree_of(h: &mut Hier, tree: usize) -> Result<&mut Member, Fail> {
    h.ready_tree(tree)
        .ok_or(Fail::Mpi(ffi::MpiErr(mpi_sys::MPI_ERR_INTERN as c_int)))
}

fn request_null() -> MPI_Request {
    // SAFETY: a constant of rsmpi's C shim, initialized before any code runs.
    unsafe { mpi_sys::RSMPI_REQUEST_NULL }
}

/// Tests an internal request (started, never null): true once it completed.
fn test_internal(req: &mut Option<MPI_Request>) -> Result<bool, Fail> {
    let Some(r) = req.as_mut() else {
        return Ok(false);
    };
    let mut flag: c_int = 0;
    // SAFETY: a request this crate started; MPI writes the flag.
    ffi::check(unsafe { mpi_sys::PMPI_Test(r, &mut flag, ffi::status_ignore()) })?;
    Ok(flag != 0)
}

/// Generalized request callbacks: the status of a completed collective (no data
/// counted, not cancelled); nothing to free (the operation is this crate's); a
/// collective cannot be cancelled (MPI calls cancelling one erroneous): it completes.
unsafe extern "C" fn query(_extra: *mut c_void, status: *mut MPI_Status) -> c_int {
    if !status.is_null() {
        // SAFETY: MPI hands the status to fill.
        unsafe {
            mpi_sys::PMPI_Status_set_elements(status, ffi::byte(), 0);
            mpi_sys::PMPI_Status_set_cancelled(status, 0);
        }
    }
    ffi::success()
}

unsafe extern "C" fn free_op(_extra: *mut c_void) -> c_int {
    ffi::success()
}

unsafe extern "C" fn cancel_op(_extra: *mut c_void, _complete: c_int) -> c_int {
    ffi::success()
}

fn queues() -> std::sync::MutexGuard<'static, Vec<Queue>> {
    QUEUES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Advances `q`'s operations in order with `h` (its communicator's hierarchy, held by
/// this thread), completing the requests of those that finish. A failure aborts the
/// job with a message (as the blocking collectives do).
fn drive(q: &mut Queue, h: &mut Hier, patience: &mut Option<Duration>) {
    let Queue { ops, tmp, .. } = q;
    while let Some(op) = ops.front_mut() {
        match op.poll(h, tmp, patience).and_then(|done| {
            if done {
                op.deliver()?;
            }
            Ok(done)
        }) {
            Ok(true) => {
                let op = ops.pop_front().expect("the front operation");
                PENDING.fetch_sub(1, Ordering::AcqRel);
                COMPLETED.fetch_add(1, Ordering::Relaxed);
                // The generalized request this operation started, not yet
                // completed (MPI keeps it valid until then, even if freed).
                // SAFETY: as argued in the lines above.
                let rc = unsafe { mpi_sys::PMPI_Grequest_complete(op.req) };
                if rc != ffi::success() {
                    ffi::abort(
                        op.comm,
                        &format!(
                            "rank {}: {} over smelt: MPI_Grequest_complete failed (error {rc})",
                            h.rank,
                            op.call.name()
                        ),
                    );
                }
            }
            Ok(false) => return,
            Err(Fail::Mpi(e)) => ffi::abort(
                op.comm,
                &format!(
                    "rank {}: {} over smelt: MPI error {} in its MPI step",
                    h.rank,
                    op.call.name(),
                    e.0
                ),
            ),
            Err(e) => {
                super::finish(Err(e), op.call, op.comm, h);
            }
        }
    }
}

/// Takes `busy` (a communicator state's flag) for a collective under
/// MPI_THREAD_MULTIPLE: waits while a thread only polls operations under it (a short
/// pass that never waits for another thread), so that a poll never makes a collective
/// fall back on one rank alone; false if another thread is inside a collective on it.
pub fn acquire(busy: &AtomicBool) -> bool {
    loop {
        if !busy.swap(true, Ordering::Acquire) {
            return true;
        }
        if POLLING.load(Ordering::Acquire) == 0 {
            return false;
        }
        std::hint::spin_loop();
    }
}

/// Polls every pending operation once (`own`: the state this thread holds already, and
/// its hierarchy). Operations of a communicator another thread is inside a collective
/// on are left to it (it completes them first).
fn progress(own: Option<(usize, &mut Hier)>, patience: Option<Duration>) {
    let mut patience = patience;
    let mut qs = queues();
    let mut own = own;
    for q in qs.iter_mut().filter(|q| !q.ops.is_empty()) {
        match &mut own {
            Some((st, h)) if *st == q.st => drive(q, h, &mut patience),
            _ => {
                let st = q.st as *mut CommState;
                POLLING.fetch_add(1, Ordering::AcqRel);
                // A live state: a queue lives as long as its communicator's
                // state (`before_free` completes its operations and removes it).
                // SAFETY: as argued in the lines above.
                let s = unsafe { &*st };
                let threaded = !super::serialized();
                if threaded && s.busy.swap(true, Ordering::Acquire) {
                    POLLING.fetch_sub(1, Ordering::AcqRel);
                    continue;
                }
                // SAFETY: this thread holds the state (its flag, or calls serialized).
                if let super::comm::Takeover::On(h) = unsafe { &mut *s.mode.get() } {
                    drive(q, h, &mut patience);
                }
                if threaded {
                    s.busy.store(false, Ordering::Release);
                }
                POLLING.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// True while operations are pending anywhere.
#[inline(always)]
pub(crate) fn pending() -> bool {
    PENDING.load(Ordering::Acquire) != 0
}

/// One non-blocking pass (the test calls): every 100 ms also a brief look for dead
/// peers on a stuck link.
fn poke() {
    if !pending() {
        return;
    }
    let now = Instant::now();
    let look = LAST_LOOK.with(|l| match l.get() {
        Some(t) if now.duration_since(t) < LIVENESS_EVERY => false,
        _ => {
            l.set(Some(now));
            true
        }
    });
    progress(None, look.then_some(Duration::from_micros(1)));
}

/// How long a wait has polled: the clock is read only once it has spun a while, and
/// then every 16th pass.
#[derive(Default)]
struct Waited {
    since: Option<Instant>,
    patient: bool,
}

impl Waited {
    /// True once the wait polled for [`PATIENT_AFTER`] (`spins`: passes so far).
    fn patient(&mut self, spins: u32) -> bool {
        if !self.patient && spins >= 64 && spins.is_multiple_of(16) {
            let since = *self.since.get_or_insert_with(Instant::now);
            self.patient = since.elapsed() >= PATIENT_AFTER;
        }
        self.patient
    }
}

/// The wait calls: polls smelt's operations and `test` (MPI's non-blocking test of the
/// caller's requests) until `test` says done; once no smelt operation is pending any
/// more, `block` (MPI's blocking call) finishes the job. Never blocks inside MPI while
/// an operation of smelt's is pending.
fn wait_until(
    mut test: impl FnMut() -> Result<bool, c_int>,
    block: impl FnOnce() -> c_int,
) -> c_int {
    if !pending() {
        return block();
    }
    let mut waited = Waited::default();
    let mut spins = 0u32;
    loop {
        let patient = waited.patient(spins);
        let before = COMPLETED.load(Ordering::Relaxed);
        progress(None, patient.then_some(PATIENT_AFTER));
        // MPI's test (its progress engine: a pass over every transport) right after one
        // of smelt's operations completed, else every 8th pass: the caller's requests
        // that are MPI's still move on, and a pass over smelt's alone stays short.
        let completed = COMPLETED.load(Ordering::Relaxed) != before;
        if completed || patient || spins.is_multiple_of(8) {
            match test() {
                Ok(true) => return ffi::success(),
                Err(rc) => return rc,
                Ok(false) => {}
            }
        }
        if !pending() {
            return block();
        }
        if !patient {
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
            spins += 1;
        }
    }
}

/// Completes the operations pending on `st` (held by this thread, its hierarchy `h`)
/// before a blocking collective on it: they share its links and come first in the
/// communicator's order. Other communicators' operations are polled meanwhile. Not
/// while this thread starts a non-blocking operation (that one queues behind).
#[inline(always)]
pub fn settle(st: *mut CommState, h: &mut Hier) {
    // Nothing pending (every blocking call when the program makes no non-blocking
    // one): one load, and the thread-local below is not touched (its address is
    // computed where it is used, out of line).
    if pending() {
        settle_pending(st, h);
    }
}

#[cold]
#[inline(never)]
fn settle_pending(st: *mut CommState, h: &mut Hier) {
    if STARTING.with(|s| s.get()) {
        return;
    }
    let key = st as usize;
    let mut waited = Waited::default();
    let mut spins = 0u32;
    loop {
        if !queues().iter().any(|q| q.st == key && !q.ops.is_empty()) {
            return;
        }
        let patient = waited.patient(spins);
        progress(Some((key, &mut *h)), patient.then_some(PATIENT_AFTER));
        if !patient {
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
            spins += 1;
        }
    }
}

/// Before a communicator's state is freed (`MPI_Comm_free`, `MPI_Finalize`): its
/// pending operations complete first (MPI lets a communicator be freed with operations
/// pending; they complete normally).
pub fn before_free(st: *mut CommState) {
    // The state being freed, used by this thread alone (no collective runs on
    // a communicator while it is freed).
    // SAFETY: as argued in the lines above.
    let mode = unsafe { &mut *(*st).mode.get() };
    let super::comm::Takeover::On(h) = mode else {
        // Never set up: no operation of smelt's ever ran on it.
        return;
    };
    if pending() {
        settle(st, h);
    }
    let key = st as usize;
    queues().retain(|q| q.st != key);
}

/// What an operation was planned as.
struct Plan {
    kind: Kind,
    data: Vec<u8>,
    stages: Vec<Stage>,
    out: Out,
}

/// The stages of a barrier or allreduce (the data's length alike on every rank).
fn reduce_stages(h: &Hier) -> Vec<Stage> {
    let v = h.node_view();
    let up = || Stage::Up {
        tree: 0,
        t: None,
        child: 0,
        frag: 0,
        sent: 0,
    };
    let down = || Stage::Down {
        tree: 0,
        t: None,
        frag: 0,
        have: false,
        child: 0,
    };
    if v.n_nodes == 1 {
        if v.node_size == 2 {
            return vec![Stage::Exchange {
                t: None,
                sent: 0,
                got: 0,
                other: Vec::new(),
            }];
        }
        return vec![up(), down()];
    }
    let mut s = Vec::new();
    if v.node_size > 1 {
        s.push(up());
    }
    if v.node_rank == 0 {
        s.push(Stage::Leaders { req: None });
    }
    if v.node_size > 1 {
        s.push(down());
    }
    s
}

/// Starts `call` on `comm` through smelt where `plan` (given the communicator's
/// hierarchy) allows; else MPI runs it (`pmpi`), the fall-back counted with its reason.
/// `Err(Err(rc))` from `plan`: return `rc` (an MPI error).
fn start(
    call: Call,
    comm: MPI_Comm,
    req: *mut MPI_Request,
    pmpi: impl Fn() -> c_int,
    plan: impl FnOnce(&mut Hier) -> Result<Plan, Result<Why, c_int>>,
) -> c_int {
    if req.is_null() {
        stats::fell_back(call, Why::BadArgs);
        return pmpi();
    }
    count_towards_setup(comm);
    STARTING.with(|s| s.set(true));
    let held = hier_counting(comm, call, false, &pmpi);
    STARTING.with(|s| s.set(false));
    let mut held = match held {
        Ok(h) => h,
        Err(rc) => return rc,
    };
    let p = match plan(&mut held) {
        Ok(p) => p,
        Err(Ok(why)) => {
            stats::fell_back(call, why);
            return pmpi();
        }
        Err(Err(rc)) => return rc,
    };
    let st = match super::state(comm) {
        Ok(st) => st,
        Err(e) => return e.0,
    };
    let mut r = request_null();
    // SAFETY: valid callbacks of the signatures MPI expects (they use no state) and a valid out-pointer.
    let rc = unsafe {
        mpi_sys::PMPI_Grequest_start(
            Some(query),
            Some(free_op),
            Some(cancel_op),
            std::ptr::null_mut(),
            &mut r,
        )
    };
    if rc != ffi::success() {
        return rc;
    }
    // SAFETY: MPI's contract: `req` (checked not null) points to the caller's request.
    unsafe { *req = r };
    stats::taken(call);
    PENDING.fetch_add(1, Ordering::AcqRel);
    let op = Op {
        req: r,
        call,
        comm,
        kind: p.kind,
        data: p.data,
        stages: p.stages,
        at: 0,
        out: p.out,
    };
    let key = st as usize;
    let mut qs = queues();
    let i = match qs.iter().position(|q| q.st == key) {
        Some(i) => i,
        None => {
            qs.push(Queue {
                st: key,
                ops: VecDeque::new(),
                tmp: Vec::new(),
            });
            qs.len() - 1
        }
    };
    qs[i].ops.push_back(op);
    // As far as it goes now: leaves send their part, a pair sends its data.
    drive(&mut qs[i], &mut held, &mut None);
    ffi::success()
}

/// A non-blocking call counts towards its communicator's set-up as a blocking one does,
/// but never sets it up (set-up is collective and blocking): the next blocking call
/// past `SMELT_MPI_SETUP_AFTER` does, on every rank alike (every rank makes the same
/// calls on a communicator in the same order).
fn count_towards_setup(comm: MPI_Comm) {
    if comm == ffi::comm_null() {
        return;
    }
    let Ok(st) = super::state(comm) else {
        return;
    };
    // A live state of `comm` (freed only by MPI_Comm_free, which the program
    // does not call while a collective runs on `comm`).
    // SAFETY: as argued in the lines above.
    let s = unsafe { &*st };
    let threaded = !super::serialized();
    if threaded && !acquire(&s.busy) {
        // Another thread is inside a collective on it: the call goes to MPI anyway.
        return;
    }
    // SAFETY: this thread holds the state (its flag, or calls serialized).
    if let super::comm::Takeover::Warming(n) = unsafe { &mut *s.mode.get() } {
        if *n < config().setup_after {
            *n += 1;
        }
    }
    if threaded {
        s.busy.store(false, Ordering::Release);
    }
}

/// `MPI_Ibarrier` through smelt where it can.
pub fn ibarrier(comm: MPI_Comm, req: *mut MPI_Request, pmpi: impl Fn() -> c_int) -> c_int {
    start(Call::Ibarrier, comm, req, pmpi, |h| {
        Ok(Plan {
            kind: Kind::Barrier,
            data: Vec::new(),
            stages: reduce_stages(h),
            out: Out::Nothing,
        })
    })
}

/// `MPI_Ibcast` through smelt where it can (the cut-off and datatypes of `MPI_Bcast`).
///
/// # Safety
/// MPI's contract for `MPI_Ibcast`.
pub unsafe fn ibcast(
    buf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    req: *mut MPI_Request,
    pmpi: impl Fn() -> c_int,
) -> c_int {
    start(Call::Ibcast, comm, req, pmpi, |h| {
        if count < 0 || root < 0 || root as usize >= h.size {
            return Err(Ok(Why::BadArgs));
        }
        if h.max_bytes[0] == 0 && count > 0 {
            return Err(Ok(Why::MpiFaster));
        }
        let (size, lay) = match layout(dt, buf) {
            Ok(Some(x)) => x,
            Ok(None) => return Err(Ok(Why::BadArgs)),
            Err(e) => return Err(Err(e.0)),
        };
        let Some(len) = size
            .checked_mul(count as usize)
            .filter(|&l| l <= h.max_bytes[0] && l <= c_int::MAX as usize)
        else {
            return Err(Ok(Why::TooLarge));
        };
        if len > MAX_POLLED {
            return Err(Ok(Why::NonBlockingLarge));
        }
        let root = root as usize;
        let is_root = h.rank == root;
        let [rnode, rlocal] = h.node_place(root);
        let (data, out) = if len == 0 {
            (Vec::new(), Out::Nothing)
        } else {
            match lay {
                Layout::Contiguous(off) => {
                    let at = buf.cast::<u8>().wrapping_offset(off);
                    if is_root {
                        (
                            // MPI's contract: the root's buffer holds `count`
                            // elements of `dt`, whose bytes are the `len` bytes at `at`.
                            // SAFETY: as argued in the lines above.
                            unsafe { std::slice::from_raw_parts(at, len) }.to_vec(),
                            Out::Nothing,
                        )
                    } else {
                        (vec![0u8; len], Out::Bytes(at))
                    }
                }
                Layout::Packed if is_root => {
                    // SAFETY: MPI's contract: the root's buffer holds `count` elements.
                    match unsafe { pack(buf, count, dt, len, comm) } {
                        Ok(v) => (v, Out::Nothing),
                        Err(Fail::Mpi(e)) => return Err(Err(e.0)),
                        Err(Fail::Smelt(_)) => return Err(Ok(Why::BadArgs)),
                    }
                }
                Layout::Packed => (vec![0u8; len], Out::Unpack { buf, count, dt }),
            }
        };
        let mut stages = Vec::new();
        if len > 0 {
            let v = h.node_view();
            let down = |tree| Stage::Down {
                tree,
                t: None,
                frag: 0,
                have: false,
                child: 0,
            };
            if v.my_node == rnode && v.node_size > 1 {
                if rlocal == 0 || h.ready_tree(rlocal).is_some() {
                    stages.push(down(rlocal));
                } else if v.node_size == 2 {
                    // One link between the two: the root sends over it.
                    stages.push(Stage::Pair {
                        send: v.node_rank == rlocal,
                        t: None,
                        frag: 0,
                    });
                } else {
                    // No tree of the root's own (it is made only by a blocking call):
                    // the root hands its data to the leader.
                    if v.node_rank == rlocal {
                        stages.push(Stage::Forward {
                            peer: 0,
                            send: true,
                            req: None,
                        });
                    } else if v.node_rank == 0 {
                        stages.push(Stage::Forward {
                            peer: rlocal,
                            send: false,
                            req: None,
                        });
                    }
                    stages.push(down(0));
                }
            }
            if v.n_nodes > 1 && v.node_rank == 0 {
                stages.push(Stage::Leaders { req: None });
            }
            if v.my_node != rnode && v.node_size > 1 {
                stages.push(down(0));
            }
        }
        Ok(Plan {
            kind: Kind::Bcast { rnode },
            data,
            stages,
            out,
        })
    })
}

/// `MPI_Iallreduce` through smelt where it can (the cut-off, datatypes and operations
/// of `MPI_Allreduce`).
///
/// # Safety
/// MPI's contract for `MPI_Iallreduce`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn iallreduce(
    send: *const c_void,
    recv: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    req: *mut MPI_Request,
    pmpi: impl Fn() -> c_int,
) -> c_int {
    start(Call::Iallreduce, comm, req, pmpi, |h| {
        if count < 0 {
            return Err(Ok(Why::BadArgs));
        }
        let (combine, esize) = kernel(dt, op).map_err(Ok)?;
        let Some(len) = esize
            .checked_mul(count as usize)
            .filter(|&l| l <= h.max_bytes[2])
        else {
            return Err(Ok(Why::TooLarge));
        };
        if len > MAX_POLLED {
            return Err(Ok(Why::NonBlockingLarge));
        }
        let input = if send == ffi::in_place().cast_const() {
            recv.cast_const()
        } else {
            send
        };
        let (data, out, stages) = if len == 0 {
            (Vec::new(), Out::Nothing, Vec::new())
        } else {
            // SAFETY: MPI's contract: the input holds `count` elements of `dt` (`len` bytes), readable at the call.
            let data = unsafe { std::slice::from_raw_parts(input.cast::<u8>(), len) }.to_vec();
            (data, Out::Bytes(recv.cast()), reduce_stages(h))
        };
        Ok(Plan {
            kind: Kind::Allreduce(Reduction {
                count,
                dt,
                op,
                combine,
            }),
            data,
            stages,
            out,
        })
    })
}

/// Runs a test or wait call: MPI alone when smelt is off, else `run` under the
/// interposer's guard.
fn completing(name: &str, pmpi: impl FnOnce() -> c_int, run: impl FnOnce() -> c_int) -> c_int {
    if config().off {
        return pmpi();
    }
    super::guard(name, run)
}

/// `MPI_Test`: smelt's pending operations polled, then MPI's test.
///
/// # Safety
/// MPI's contract for `MPI_Test`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Test(
    req: *mut MPI_Request,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Test(req, flag, status) };
    completing("MPI_Test", pmpi, || {
        poke();
        pmpi()
    })
}

/// `MPI_Testall`: smelt's pending operations polled, then MPI's test.
///
/// # Safety
/// MPI's contract for `MPI_Testall`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Testall(
    count: c_int,
    reqs: *mut MPI_Request,
    flag: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Testall(count, reqs, flag, statuses) };
    completing("MPI_Testall", pmpi, || {
        poke();
        pmpi()
    })
}

/// `MPI_Testany`: smelt's pending operations polled, then MPI's test.
///
/// # Safety
/// MPI's contract for `MPI_Testany`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Testany(
    count: c_int,
    reqs: *mut MPI_Request,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Testany(count, reqs, index, flag, status) };
    completing("MPI_Testany", pmpi, || {
        poke();
        pmpi()
    })
}

/// `MPI_Testsome`: smelt's pending operations polled, then MPI's test.
///
/// # Safety
/// MPI's contract for `MPI_Testsome`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Testsome(
    incount: c_int,
    reqs: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Testsome(incount, reqs, outcount, indices, statuses) };
    completing("MPI_Testsome", pmpi, || {
        poke();
        pmpi()
    })
}

/// `MPI_Request_get_status`: smelt's pending operations polled, then MPI's.
///
/// # Safety
/// MPI's contract for `MPI_Request_get_status`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Request_get_status(
    req: MPI_Request,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Request_get_status(req, flag, status) };
    completing("MPI_Request_get_status", pmpi, || {
        poke();
        pmpi()
    })
}

/// `MPI_Wait`: with smelt's operations pending, they and MPI's test of the request are
/// polled until it completes; else MPI's wait.
///
/// # Safety
/// MPI's contract for `MPI_Wait`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Wait(req: *mut MPI_Request, status: *mut MPI_Status) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Wait(req, status) };
    completing("MPI_Wait", pmpi, || {
        let test = || {
            let mut flag: c_int = 0;
            // SAFETY: the caller's arguments; MPI writes the flag.
            ffi::check(unsafe { mpi_sys::PMPI_Test(req, &mut flag, status) })
                .map(|()| flag != 0)
                .map_err(|e| e.0)
        };
        wait_until(test, pmpi)
    })
}

/// `MPI_Waitall`, as [`MPI_Wait`] (`PMPI_Testall` polled).
///
/// # Safety
/// MPI's contract for `MPI_Waitall`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Waitall(
    count: c_int,
    reqs: *mut MPI_Request,
    statuses: *mut MPI_Status,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Waitall(count, reqs, statuses) };
    completing("MPI_Waitall", pmpi, || {
        let test = || {
            let mut flag: c_int = 0;
            // SAFETY: the caller's arguments; MPI writes the flag (and, once all completed, the statuses).
            ffi::check(unsafe { mpi_sys::PMPI_Testall(count, reqs, &mut flag, statuses) })
                .map(|()| flag != 0)
                .map_err(|e| e.0)
        };
        wait_until(test, pmpi)
    })
}

/// `MPI_Waitany`, as [`MPI_Wait`] (`PMPI_Testany` polled).
///
/// # Safety
/// MPI's contract for `MPI_Waitany`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Waitany(
    count: c_int,
    reqs: *mut MPI_Request,
    index: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Waitany(count, reqs, index, status) };
    completing("MPI_Waitany", pmpi, || {
        let test = || {
            let mut flag: c_int = 0;
            // SAFETY: the caller's arguments; MPI writes the index, flag and status.
            ffi::check(unsafe { mpi_sys::PMPI_Testany(count, reqs, index, &mut flag, status) })
                .map(|()| flag != 0)
                .map_err(|e| e.0)
        };
        wait_until(test, pmpi)
    })
}

/// `MPI_Waitsome`, as [`MPI_Wait`] (`PMPI_Testsome` polled until it reports some, or
/// `MPI_UNDEFINED`).
///
/// # Safety
/// MPI's contract for `MPI_Waitsome`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Waitsome(
    incount: c_int,
    reqs: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Waitsome(incount, reqs, outcount, indices, statuses) };
    completing("MPI_Waitsome", pmpi, || {
        let test = || {
            // SAFETY: the caller's arguments; MPI writes the count, indices, statuses.
            ffi::check(unsafe {
                mpi_sys::PMPI_Testsome(incount, reqs, outcount, indices, statuses)
            })
            .map_err(|e| e.0)?;
            // SAFETY: MPI wrote the count (MPI's contract: a valid pointer).
            Ok(unsafe { *outcount } != 0)
        };
        wait_until(test, pmpi)
    })
}

/// Runs a blocking point-to-point call while smelt's operations are pending as its
/// non-blocking form (`start` makes the request) and a wait that polls them too, so
/// that a rank blocked in it still moves its pending collectives on (a peer may send
/// only after its own wait on one of them completed); with nothing pending, `pmpi`.
fn p2p_polling(
    name: &str,
    pmpi: impl FnOnce() -> c_int,
    start: impl FnOnce(&mut MPI_Request) -> c_int,
    status: *mut MPI_Status,
) -> c_int {
    if config().off || !pending() {
        return pmpi();
    }
    super::guard(name, || {
        let mut r = request_null();
        let rc = start(&mut r);
        if rc != ffi::success() {
            return rc;
        }
        let r = Cell::new(r);
        let test = || {
            let (mut x, mut flag) = (r.get(), 0);
            // SAFETY: the request just started; MPI writes the flag and the status (and, completing it, the handle).
            let rc = unsafe { mpi_sys::PMPI_Test(&mut x, &mut flag, status) };
            r.set(x);
            ffi::check(rc).map(|()| flag != 0).map_err(|e| e.0)
        };
        wait_until(test, || {
            let mut x = r.get();
            // SAFETY: the same request, not completed yet; MPI writes the status.
            unsafe { mpi_sys::PMPI_Wait(&mut x, status) }
        })
    })
}

/// `MPI_Recv`: with smelt's operations pending, `MPI_Irecv` and a wait that polls them.
///
/// # Safety
/// MPI's contract for `MPI_Recv`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Recv(
    buf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    src: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    p2p_polling(
        "MPI_Recv",
        // SAFETY: the caller's arguments, passed on unchanged.
        || unsafe { mpi_sys::PMPI_Recv(buf, count, dt, src, tag, comm, status) },
        // SAFETY: as above; `r` is a valid out-pointer.
        |r| unsafe { mpi_sys::PMPI_Irecv(buf, count, dt, src, tag, comm, r) },
        status,
    )
}

/// `MPI_Send`: with smelt's operations pending, `MPI_Isend` and a wait that polls them.
///
/// # Safety
/// MPI's contract for `MPI_Send`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Send(
    buf: *const c_void,
    count: c_int,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> c_int {
    p2p_polling(
        "MPI_Send",
        // SAFETY: the caller's arguments, passed on unchanged.
        || unsafe { mpi_sys::PMPI_Send(buf, count, dt, dest, tag, comm) },
        // SAFETY: as above; `r` is a valid out-pointer.
        |r| unsafe { mpi_sys::PMPI_Isend(buf, count, dt, dest, tag, comm, r) },
        ffi::status_ignore(),
    )
}

/// `MPI_Ssend`: with smelt's operations pending, `MPI_Issend` and a wait that polls them.
///
/// # Safety
/// MPI's contract for `MPI_Ssend`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Ssend(
    buf: *const c_void,
    count: c_int,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> c_int {
    p2p_polling(
        "MPI_Ssend",
        // SAFETY: the caller's arguments, passed on unchanged.
        || unsafe { mpi_sys::PMPI_Ssend(buf, count, dt, dest, tag, comm) },
        // SAFETY: as above; `r` is a valid out-pointer.
        |r| unsafe { mpi_sys::PMPI_Issend(buf, count, dt, dest, tag, comm, r) },
        ffi::status_ignore(),
    )
}

/// `MPI_Probe`: with smelt's operations pending, `MPI_Iprobe` polled with them.
///
/// # Safety
/// MPI's contract for `MPI_Probe`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Probe(
    src: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Probe(src, tag, comm, status) };
    if config().off || !pending() {
        return pmpi();
    }
    super::guard("MPI_Probe", || {
        let test = || {
            let mut flag: c_int = 0;
            // SAFETY: the caller's arguments; MPI writes the flag and the status.
            ffi::check(unsafe { mpi_sys::PMPI_Iprobe(src, tag, comm, &mut flag, status) })
                .map(|()| flag != 0)
                .map_err(|e| e.0)
        };
        wait_until(test, pmpi)
    })
}

/// `MPI_Iprobe`: smelt's pending operations polled, then MPI's.
///
/// # Safety
/// MPI's contract for `MPI_Iprobe`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Iprobe(
    src: c_int,
    tag: c_int,
    comm: MPI_Comm,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Iprobe(src, tag, comm, flag, status) };
    if config().off || !pending() {
        return pmpi();
    }
    super::guard("MPI_Iprobe", || {
        poke();
        pmpi()
    })
}
