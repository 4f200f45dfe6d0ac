//! Tasks across the processes (and nodes) of a job, stolen through active messages.
//!
//! A task that may leave its process is a **registered function id and a byte payload**
//! ([`Functions`]): no pointers, no closures. Each member (a process, or a thread standing
//! for one) has `workers` threads and one communication thread that owns the member's
//! active-message endpoint (`smelt-am`). A task spawned with [`TaskCtx::spawn`] goes on its
//! member's queue: the member's own workers take the newest one (LIFO, the spawner
//! usually runs its own child), another member steals the oldest one (FIFO, the biggest
//! piece of a divide-and-conquer) when one of its workers is idle and its queue is empty:
//! its communication thread asks a victim (a member on its own node first, in random
//! order, then the others), the victim's communication thread answers with a task or
//! with nothing, and the result of a stolen task travels back to the spawner's member in
//! a result message. Victim choice is inside the process first: a member's workers share
//! its queue, and a member only asks others once that queue is empty.
//!
//! Nothing is stolen while it runs: a stolen task starts on the thief (child stealing,
//! help-first), and a worker waiting for a child ([`Handle::wait`]) runs other tasks of
//! its member meanwhile. A task's children not waited for are waited for when the task
//! returns (an implicit sync, as in Cilk).
//!
//! **Termination**: member 0 runs the root task; when it returns, every task has ended
//! (all children are waited for), so member 0 tells the others (`DONE`, acknowledged,
//! then `FIN`), and every member returns. **Failure**: a task that panics or returns an
//! error fails the computation on every member (an `ABORT` message with its text to every
//! other member, which each relays to the others before it leaves, so that no member
//! sees another leave before it knows why); a member that dies (its process killed) is
//! noticed by the others' endpoints, and every member returns [`TaskError::PeerGone`] or
//! [`TaskError::Remote`] within milliseconds; no wait is unbounded.
//!
//! Members come from a world ([`Member::from_world`], a collective call: threads of this
//! process, processes of `smelt launch`); [`Member::threads`] makes those of a world of
//! threads at once:
//!
//! ```
//! use smelt_tasks::dist::{Functions, Member, TaskConfig, TaskCtx};
//! use smelt_tasks::TaskError;
//! const FIB: u32 = 1;
//! fn fib(ctx: &TaskCtx, p: &[u8]) -> Result<Vec<u8>, TaskError> {
//!     let n = u32::from_le_bytes(p.try_into().unwrap());
//!     if n < 15 {
//!         return Ok(smelt_tasks::apps::fib_seq(n).to_le_bytes().to_vec());
//!     }
//!     let h = ctx.spawn(FIB, &(n - 1).to_le_bytes());
//!     let b = u64::from_le_bytes(fib(ctx, &(n - 2).to_le_bytes())?.try_into().unwrap());
//!     let a = u64::from_le_bytes(h.wait(ctx)?.try_into().unwrap());
//!     Ok((a + b).to_le_bytes().to_vec())
//! }
//! let mut f = Functions::new();
//! f.register(FIB, fib)?;
//! let members = Member::threads(3, smelt_am::AmConfig::default())?;
//! let out = std::thread::scope(|s| {
//!     let hs: Vec<_> = members.into_iter().map(|mut m| {
//!         let f = &f;
//!         s.spawn(move || {
//!             let root = (m.rank() == 0).then(|| (FIB, 20u32.to_le_bytes().to_vec()));
//!             m.run(f, &TaskConfig::new(1), root)
//!         })
//!     }).collect();
//!     hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
//! });
//! assert_eq!(out[0].as_ref().unwrap().result.as_deref(), Some(&6765u64.to_le_bytes()[..]));
//! # Ok::<(), TaskError>(())
//! ```

use crate::checkout::Fence;
use crate::error::{panic_message, TaskError};
use smelt_am::{AmError, Endpoint};
use smelt_mesh::world::{World, WorldLink};
use smelt_transport::{Backoff, Link, WaitPolicy};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// A task function: gets its context and payload, returns its result bytes.
pub type TaskFn = fn(&TaskCtx, &[u8]) -> Result<Vec<u8>, TaskError>;

/// The functions tasks may name: the same ids must mean the same functions in every
/// member (register them in the same order in each process).
#[derive(Debug, Clone, Default)]
pub struct Functions {
    map: HashMap<u32, TaskFn>,
}

impl Functions {
    /// No functions yet.
    pub fn new() -> Functions {
        Functions::default()
    }
    /// Registers `f` under `id` (an id registered twice is an error).
    pub fn register(&mut self, id: u32, f: TaskFn) -> Result<(), TaskError> {
        if self.map.insert(id, f).is_some() {
            return Err(TaskError::Invalid(format!(
                "task function id {id} registered twice"
            )));
        }
        Ok(())
    }
    fn get(&self, id: u32) -> Option<TaskFn> {
        self.map.get(&id).copied()
    }
}

/// Settings of a member's part of a computation.
#[derive(Clone)]
pub struct TaskConfig {
    /// Worker threads of this member (at least 1).
    pub workers: usize,
    /// The shared link settings; a member's `timeout` is how long member 0 waits for
    /// the others to acknowledge the end (default 10 s, see [`TaskConfig::new`]). The
    /// members' messages travel over the active-message endpoint, whose rings and
    /// waits its own `AmConfig::link` sets: `capacity` and `wait` here are not used.
    pub link: smelt_mesh::LinkConfig,
    /// Global arrays (anything with `SD`/`SI` fences) the tasks use: fenced where tasks
    /// synchronise across members (see [`crate::checkout`]).
    pub fences: Vec<Arc<dyn Fence>>,
}

impl std::fmt::Debug for TaskConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskConfig")
            .field("workers", &self.workers)
            .field("link", &self.link)
            .field("fences", &self.fences.len())
            .finish()
    }
}

impl TaskConfig {
    /// `workers` workers per member.
    pub fn new(workers: usize) -> TaskConfig {
        TaskConfig {
            workers,
            // 10 s, not the shared 30 s: every member's work is done by then, and
            // only the end's acknowledgements are waited for.
            link: smelt_mesh::LinkConfig::default().timeout(Duration::from_secs(10)),
            fences: Vec::new(),
        }
    }
    /// Also fences `f` (a global array) at the synchronisation points.
    pub fn fence(mut self, f: Arc<dyn Fence>) -> TaskConfig {
        self.fences.push(f);
        self
    }
}

/// What a member's run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The root task's result (member 0 only).
    pub result: Option<Vec<u8>>,
    /// Tasks this member ran.
    pub tasks_run: u64,
    /// Tasks this member spawned.
    pub spawned: u64,
    /// Steal requests this member sent.
    pub steal_requests: u64,
    /// Tasks this member stole from others.
    pub steals: u64,
    /// Tasks others stole from this member.
    pub stolen_from: u64,
}

struct Task {
    func: u32,
    payload: Vec<u8>,
    origin: usize,
    id: u64,
}

struct Slot {
    result: Mutex<Option<Vec<u8>>>,
    ready: AtomicBool,
    /// The result came from another member (an acquire point).
    remote: AtomicBool,
    waiter: Mutex<Option<Thread>>,
}

impl Slot {
    fn new() -> Arc<Slot> {
        Arc::new(Slot {
            result: Mutex::new(None),
            ready: AtomicBool::new(false),
            remote: AtomicBool::new(false),
            waiter: Mutex::new(None),
        })
    }
    fn fill(&self, bytes: Vec<u8>) {
        *lock(&self.result) = Some(bytes);
        self.ready.store(true, Ordering::Release);
        if let Some(t) = lock(&self.waiter).as_ref() {
            t.unpark();
        }
    }
}

enum Outgoing {
    Result {
        to: usize,
        id: u64,
        bytes: Vec<u8>,
    },
    /// The failure of member `origin` (this member's own, or one it relays).
    Abort {
        origin: usize,
        message: String,
    },
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a member's workers and communication thread share.
struct Shared {
    me: usize,
    functions: Functions,
    fences: Vec<Arc<dyn Fence>>,
    /// Tasks spawned here: this member's workers take the newest, thieves the oldest.
    queue: Mutex<VecDeque<Task>>,
    /// Tasks that stay here: the root, and tasks stolen from others (no task moves
    /// twice).
    local: Mutex<VecDeque<Task>>,
    slots: Mutex<HashMap<u64, Arc<Slot>>>,
    next_id: AtomicU64,
    outbox: Mutex<Vec<Outgoing>>,
    failure: Mutex<Option<TaskError>>,
    failed: AtomicBool,
    idle: AtomicUsize,
    stop: AtomicBool,
    finish: AtomicBool,
    comm: OnceLock<Thread>,
    workers: Mutex<Vec<Thread>>,
    tasks_run: AtomicU64,
    spawned: AtomicU64,
    steal_requests: AtomicU64,
    steals: AtomicU64,
    stolen_from: AtomicU64,
}

impl Shared {
    fn wake_comm(&self) {
        if let Some(t) = self.comm.get() {
            t.unpark();
        }
    }
    fn wake_workers(&self) {
        for t in lock(&self.workers).iter() {
            t.unpark();
        }
    }
    fn push_local(&self, t: Task) {
        lock(&self.local).push_back(t);
        self.wake_workers();
    }
    /// The next task to run here: a local one, else the newest spawned here.
    fn pop(&self) -> Option<Task> {
        let t = lock(&self.local).pop_back();
        t.or_else(|| lock(&self.queue).pop_back())
    }
    fn push(&self, t: Task) {
        lock(&self.queue).push_back(t);
        self.wake_workers();
    }
    fn failure(&self) -> Option<TaskError> {
        if self.failed.load(Ordering::Acquire) {
            lock(&self.failure).clone()
        } else {
            None
        }
    }
    /// Fails the computation here; `tell`: also tell every other member. A member that
    /// learned of another's failure (an `ABORT`) tells the others too, naming the
    /// member it came from, before it leaves: a member that sees it leave (its link
    /// reports it gone after its last message) has got the failure from it first.
    fn fail(&self, e: TaskError, tell: bool) {
        {
            let mut g = lock(&self.failure);
            if g.is_some() {
                return;
            }
            *g = Some(e.clone());
        }
        if tell {
            // Queued before the flag is raised: the communication thread sends every
            // message queued when it sees the flag, then stops.
            let (origin, message) = match &e {
                TaskError::Panicked(m) => (self.me, m.clone()),
                TaskError::Remote { member, message } => (*member, message.clone()),
                e => (self.me, e.to_string()),
            };
            lock(&self.outbox).push(Outgoing::Abort { origin, message });
        }
        self.failed.store(true, Ordering::Release);
        self.wake_comm();
        self.wake_workers();
        for s in lock(&self.slots).values() {
            if let Some(t) = lock(&s.waiter).as_ref() {
                t.unpark();
            }
        }
    }
    fn deliver(&self, origin: usize, id: u64, bytes: Vec<u8>, remote: bool) {
        if origin == self.me {
            if let Some(s) = lock(&self.slots).remove(&id) {
                s.remote.store(remote, Ordering::Relaxed);
                s.fill(bytes);
            }
        } else {
            lock(&self.outbox).push(Outgoing::Result {
                to: origin,
                id,
                bytes,
            });
            self.wake_comm();
        }
    }
    fn acquire(&self) -> Result<(), TaskError> {
        self.fences.iter().try_for_each(|f| f.acquire())
    }
    fn release(&self) -> Result<(), TaskError> {
        self.fences.iter().try_for_each(|f| f.release())
    }
    fn run_task(self: &Arc<Self>, t: Task) {
        self.tasks_run.fetch_add(1, Ordering::Relaxed);
        let Some(f) = self.functions.get(t.func) else {
            self.fail(TaskError::UnknownFunction(t.func), true);
            return;
        };
        let ctx = TaskCtx {
            shared: Arc::clone(self),
            children: RefCell::new(Vec::new()),
        };
        // A stolen task starts with an acquire and ends with a release.
        let stolen = t.origin != self.me;
        let r = if stolen { self.acquire() } else { Ok(()) };
        let r =
            r.and_then(
                |()| match panic::catch_unwind(AssertUnwindSafe(|| f(&ctx, &t.payload))) {
                    Ok(Ok(v)) => ctx.sync_all().map(|()| v),
                    Ok(Err(e)) => Err(e),
                    Err(p) => Err(TaskError::Panicked(panic_message(&*p))),
                },
            );
        let r = match r {
            Ok(v) if stolen => self.release().map(|()| v),
            r => r,
        };
        match r {
            Ok(v) => self.deliver(t.origin, t.id, v, false),
            // A failure seen here (not caused here) is already being reported.
            Err(e) => {
                if !self.failed.load(Ordering::Acquire) {
                    self.fail(e, true);
                }
            }
        }
    }
}

/// What a running task function gets: spawn children and wait for them.
pub struct TaskCtx {
    shared: Arc<Shared>,
    children: RefCell<Vec<Arc<Slot>>>,
}

impl std::fmt::Debug for TaskCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskCtx")
            .field("member", &self.shared.me)
            .finish()
    }
}

/// A spawned task's result, to [`wait`](Handle::wait) for.
#[must_use = "a child is waited for when its parent returns; wait to get its result"]
pub struct Handle {
    slot: Arc<Slot>,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("ready", &self.slot.ready.load(Ordering::Relaxed))
            .finish()
    }
}

impl TaskCtx {
    /// The member this task runs on.
    pub fn member(&self) -> usize {
        self.shared.me
    }

    /// Spawns the task `func(payload)`: it may run here or on any member.
    pub fn spawn(&self, func: u32, payload: &[u8]) -> Handle {
        let sh = &self.shared;
        sh.spawned.fetch_add(1, Ordering::Relaxed);
        let id = sh.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = Slot::new();
        lock(&sh.slots).insert(id, Arc::clone(&slot));
        self.children.borrow_mut().push(Arc::clone(&slot));
        sh.push(Task {
            func,
            payload: payload.to_vec(),
            origin: sh.me,
            id,
        });
        Handle { slot }
    }

    fn sync_all(&self) -> Result<(), TaskError> {
        let kids: Vec<Arc<Slot>> = std::mem::take(&mut *self.children.borrow_mut());
        for s in kids {
            wait_slot(&self.shared, &s)?;
        }
        Ok(())
    }
}

impl Handle {
    /// Waits for the task's result, running other tasks of this member meanwhile. Fails
    /// as soon as the computation failed anywhere.
    pub fn wait(self, ctx: &TaskCtx) -> Result<Vec<u8>, TaskError> {
        let r = wait_slot(&ctx.shared, &self.slot);
        ctx.children
            .borrow_mut()
            .retain(|s| !Arc::ptr_eq(s, &self.slot));
        r
    }
}

fn wait_slot(sh: &Arc<Shared>, slot: &Slot) -> Result<Vec<u8>, TaskError> {
    let mut turns = Turns::new(sh, Duration::from_millis(1));
    loop {
        if slot.ready.load(Ordering::Acquire) {
            if slot.remote.load(Ordering::Relaxed) {
                sh.acquire()?;
            }
            return Ok(lock(&slot.result).take().unwrap_or_default());
        }
        if let Some(e) = sh.failure() {
            return Err(e);
        }
        if let Some(nap) = turns.turn() {
            *lock(&slot.waiter) = Some(thread::current());
            if !slot.ready.load(Ordering::Acquire) {
                thread::park_timeout(nap);
            }
        }
    }
}

/// The turns of a thread that runs its member's tasks while it waits (a worker, or a
/// task waiting for a child): run a queued task, else count idle and back off
/// (spin, yield), then sleep for a nap that doubles up to `cap`.
struct Turns<'a> {
    sh: &'a Arc<Shared>,
    idle: Idle<'a>,
    backoff: Backoff,
    nap: Duration,
    cap: Duration,
}

impl<'a> Turns<'a> {
    const FIRST_NAP: Duration = Duration::from_micros(20);

    fn new(sh: &'a Arc<Shared>, cap: Duration) -> Self {
        Turns {
            sh,
            idle: Idle::new(sh),
            backoff: Backoff::with_policy(&WaitPolicy::OVERSUBSCRIBED),
            nap: Self::FIRST_NAP,
            cap,
        }
    }

    /// One turn: `Some(nap)` when the thread should sleep that long now.
    fn turn(&mut self) -> Option<Duration> {
        if let Some(t) = self.sh.pop() {
            self.idle.set(false);
            self.sh.run_task(t);
            self.backoff.reset();
            self.nap = Self::FIRST_NAP;
            return None;
        }
        // Counted idle (so the communication thread steals) from the first look that
        // finds nothing to run, not only once asleep: with more threads than CPUs,
        // spinning and yielding can last long.
        self.idle.set(true);
        if !self.backoff.is_completed() {
            self.backoff.snooze();
            return None;
        }
        let nap = self.nap;
        self.nap = (nap * 2).min(self.cap);
        Some(nap)
    }
}

/// Whether a thread of a member counts as idle (it has nothing to run: the
/// communication thread steals for it).
struct Idle<'a> {
    sh: &'a Shared,
    on: bool,
}

impl<'a> Idle<'a> {
    fn new(sh: &'a Shared) -> Self {
        Idle { sh, on: false }
    }
    fn set(&mut self, on: bool) {
        if on != self.on {
            self.on = on;
            if on {
                self.sh.idle.fetch_add(1, Ordering::SeqCst);
                self.sh.wake_comm();
            } else {
                self.sh.idle.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

impl Drop for Idle<'_> {
    fn drop(&mut self) {
        self.set(false);
    }
}

fn worker_loop(sh: Arc<Shared>) {
    let mut turns = Turns::new(&sh, Duration::from_millis(2));
    loop {
        if sh.stop.load(Ordering::Acquire) || sh.failed.load(Ordering::Acquire) {
            return;
        }
        if let Some(nap) = turns.turn() {
            thread::park_timeout(nap);
        }
    }
}

// Handler indices.
const STEAL: u8 = 1;
const STEAL_REPLY: u8 = 2;
const RESULT: u8 = 3;
const ABORT: u8 = 4;
const DONE: u8 = 5;
const DONE_ACK: u8 = 6;
const FIN: u8 = 7;

/// A member's handler state (opaque; endpoints for [`Member`] are made with
/// `State::default()`).
#[derive(Default)]
pub struct State {
    shared: Option<Arc<Shared>>,
    /// The computation this member is in (1 for the first).
    epoch: u64,
    /// Control messages of a later computation: (epoch, kind, from, data).
    deferred: Vec<(u64, u8, usize, Vec<u8>)>,
    steal_outstanding: bool,
    steal_found: bool,
    steal_answered: bool,
    done: bool,
    fin: bool,
    acks: usize,
    /// A reply a handler could not send (the communication thread handles it).
    reply_error: Option<AmError>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("done", &self.done)
            .field("fin", &self.fin)
            .finish()
    }
}

/// One member of a task job: an active-message endpoint and, while it runs, its workers.
/// A member may run any number of computations one after the other (every member runs
/// the same number); after a failed one it cannot be used again.
pub struct Member<L: Link = WorldLink> {
    /// None: lost with a failed run's communication thread.
    ep: Option<Endpoint<State, L>>,
    me: usize,
    size: usize,
    broken: Option<TaskError>,
}

impl<L: Link + 'static> std::fmt::Debug for Member<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("rank", &self.me)
            .field("size", &self.size)
            .finish()
    }
}

/// How a member's communication thread waits for messages unless the endpoint's
/// configuration says otherwise: a few spins and yields, then it parks on the endpoint's
/// doorbell (a sender rings it) for 20 µs doubling to 200 µs. Few yields: with more
/// threads than CPUs a yield can cost a whole time slice of another thread, and a thief
/// that yields for long steals late.
pub const COMM_WAIT: WaitPolicy = WaitPolicy {
    spin_polls: 256,
    yield_polls: 4,
    park_initial: Duration::from_micros(20),
    park_max: Duration::from_micros(200),
};

/// `cfg` with [`COMM_WAIT`] unless it sets a wait policy: for endpoints made outside
/// this module (e.g. `Endpoint::from_world`) and given to [`Member::from_endpoint`].
pub fn comm_config(mut cfg: smelt_am::AmConfig) -> smelt_am::AmConfig {
    cfg.link.wait.get_or_insert(COMM_WAIT);
    cfg
}

impl Member {
    /// A collective call: this member of a task job over every member of `world`
    /// (threads of this process, processes of `smelt launch`), each to be run on a
    /// thread of its own with [`Member::run`]. Its endpoint is
    /// [`Endpoint::from_world`]'s; unless `cfg` sets one, it waits with
    /// [`COMM_WAIT`].
    pub fn from_world(world: &World, cfg: smelt_am::AmConfig) -> Result<Member, TaskError> {
        Ok(Member::new(Endpoint::from_world(
            world,
            State::default(),
            comm_config(cfg),
        )?))
    }

    /// `n` members over the threads of this process (each to be run on a thread of its
    /// own): the members of a world of `n` threads ([`Member::from_world`]) made at
    /// once, for tests and for measuring the protocol without processes.
    pub fn threads(n: usize, cfg: smelt_am::AmConfig) -> Result<Vec<Member>, TaskError> {
        World::threads(n)
            .map_err(AmError::from)?
            .iter()
            .map(|w| Member::from_world(w, cfg.clone()))
            .collect()
    }
}

impl<L: Link + Send + 'static> Member<L> {
    /// A member over an endpoint made with `State::default()` (any transport).
    pub fn from_endpoint(ep: Endpoint<State, L>) -> Self {
        Member::new(ep)
    }

    fn new(ep: Endpoint<State, L>) -> Self {
        Member {
            me: ep.me(),
            size: ep.size(),
            ep: Some(ep),
            broken: None,
        }
    }

    /// This member's rank.
    pub fn rank(&self) -> usize {
        self.me
    }

    /// Members in the job.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Runs this member's part of a computation: member 0 passes the root task (function
    /// id and payload) and gets its result in [`Report::result`]; the others pass `None`
    /// and serve (run and steal tasks) until member 0 says the computation ended.
    pub fn run(
        &mut self,
        functions: &Functions,
        cfg: &TaskConfig,
        root: Option<(u32, Vec<u8>)>,
    ) -> Result<Report, TaskError> {
        if cfg.workers == 0 {
            return Err(TaskError::Invalid("a member with 0 workers".into()));
        }
        let me = self.me;
        if (me == 0) != root.is_some() {
            return Err(TaskError::Invalid(if me == 0 {
                "member 0 runs the root task: give it one".into()
            } else {
                format!("only member 0 runs a root task (this is member {me})")
            }));
        }
        let sh = Arc::new(Shared {
            me,
            functions: functions.clone(),
            fences: cfg.fences.clone(),
            queue: Mutex::new(VecDeque::new()),
            local: Mutex::new(VecDeque::new()),
            slots: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            outbox: Mutex::new(Vec::new()),
            failure: Mutex::new(None),
            failed: AtomicBool::new(false),
            idle: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            finish: AtomicBool::new(false),
            comm: OnceLock::new(),
            workers: Mutex::new(Vec::new()),
            tasks_run: AtomicU64::new(0),
            spawned: AtomicU64::new(0),
            steal_requests: AtomicU64::new(0),
            steals: AtomicU64::new(0),
            stolen_from: AtomicU64::new(0),
        });
        if let Some(e) = &self.broken {
            return Err(TaskError::Invalid(format!(
                "this member cannot run again after a failed computation ({e})"
            )));
        }
        let Some(mut ep) = self.ep.take() else {
            return Err(TaskError::Invalid("this member lost its endpoint".into()));
        };
        let old = std::mem::take(ep.state_mut());
        let epoch = old.epoch + 1;
        *ep.state_mut() = State {
            shared: Some(Arc::clone(&sh)),
            epoch,
            ..State::default()
        };
        if let Err(e) = register_handlers(&mut ep) {
            self.ep = Some(ep);
            return Err(e);
        }
        // Control messages of this computation that came during the last one.
        for (e, kind, from, data) in old.deferred {
            if e > epoch {
                ep.state_mut().deferred.push((e, kind, from, data));
            } else if e == epoch {
                ep.state_mut().apply(kind, from, &data);
                if kind == DONE {
                    if let Err(err) = ep.request(from, DONE_ACK, &[epoch]) {
                        sh.fail(err.into(), true);
                    }
                }
            }
        }
        let timeout = cfg.link.timeout;
        let comm = {
            let sh = Arc::clone(&sh);
            thread::Builder::new()
                .name(format!("smelt-tasks-comm-{me}"))
                .spawn(move || comm_loop(ep, &sh, timeout))
                .map_err(|e| TaskError::Invalid(format!("could not start a thread: {e}")))?
        };
        let _ = sh.comm.set(comm.thread().clone());
        let mut workers = Vec::new();
        for w in 0..cfg.workers {
            let s = Arc::clone(&sh);
            match thread::Builder::new()
                .name(format!("smelt-tasks-{me}-{w}"))
                .spawn(move || worker_loop(s))
            {
                Ok(h) => {
                    lock(&sh.workers).push(h.thread().clone());
                    workers.push(h);
                }
                Err(e) => {
                    sh.fail(
                        TaskError::Invalid(format!("could not start a worker: {e}")),
                        true,
                    );
                    break;
                }
            }
        }
        let result = match root {
            Some((func, payload)) => {
                // A worker runs the root task; this thread only waits (so the member
                // computes on `workers` threads, no more).
                let slot = Slot::new();
                let id = 0;
                lock(&sh.slots).insert(id, Arc::clone(&slot));
                *lock(&slot.waiter) = Some(thread::current());
                sh.push_local(Task {
                    func,
                    payload,
                    origin: me,
                    id,
                });
                let r = loop {
                    if slot.ready.load(Ordering::Acquire) {
                        break Ok(lock(&slot.result).take().unwrap_or_default());
                    }
                    if let Some(e) = sh.failure() {
                        break Err(e);
                    }
                    thread::park_timeout(Duration::from_millis(1));
                };
                if r.is_ok() {
                    sh.finish.store(true, Ordering::Release);
                    sh.wake_comm();
                }
                Some(r)
            }
            None => None,
        };
        let comm_r = match comm.join() {
            Ok((ep, r)) => {
                self.ep = Some(ep);
                r
            }
            Err(p) => Err(TaskError::Panicked(panic_message(&*p))),
        };
        sh.stop.store(true, Ordering::Release);
        sh.wake_workers();
        for h in workers {
            let _ = h.join();
        }
        let failure = sh
            .failure()
            .or_else(|| result.as_ref().and_then(|r| r.as_ref().err().cloned()))
            .or(comm_r.err());
        if let Some(e) = failure {
            self.broken = Some(e.clone());
            return Err(e);
        }
        let result = result.map(|r| r.expect("checked above"));
        Ok(Report {
            result,
            tasks_run: sh.tasks_run.load(Ordering::Relaxed),
            spawned: sh.spawned.load(Ordering::Relaxed),
            steal_requests: sh.steal_requests.load(Ordering::Relaxed),
            steals: sh.steals.load(Ordering::Relaxed),
            stolen_from: sh.stolen_from.load(Ordering::Relaxed),
        })
    }
}

/// A failed send, reply or wait. A member that left after the end was announced is no
/// failure. A member that left because of a failure relayed it to this one first (see
/// [`Shared::fail`]): a send that finds it gone may come before this member read what
/// it sent, and the failure's own ABORT may still be on its way on another link, so
/// look for them first (every message waiting now, then for a short while).
fn comm_failed<L: Link + 'static>(ep: &mut Endpoint<State, L>, sh: &Shared, e: AmError) {
    let AmError::PeerGone { dest } = e else {
        sh.fail(e.into(), true);
        return;
    };
    let grace = Instant::now() + Duration::from_millis(100);
    // The messages waiting now are all read, however late this thread runs (bounded:
    // thieves may keep asking).
    let mut busy = true;
    let mut rounds = 0;
    while !(ep.state().done || ep.state().fin || sh.failed.load(Ordering::Acquire))
        && ((busy && rounds < 1024) || Instant::now() < grace)
    {
        rounds += 1;
        busy = match ep.wait(Duration::from_millis(5)) {
            Ok(_) | Err(AmError::PeerGone { .. }) => true,
            Err(AmError::Timeout { .. }) => false,
            Err(_) => break,
        };
    }
    let st = ep.state();
    if !(st.done || st.fin) {
        sh.fail(TaskError::PeerGone { member: dest }, true);
    }
}

fn register_handlers<L: Link + 'static>(ep: &mut Endpoint<State, L>) -> Result<(), TaskError> {
    // Every message carries the epoch (the number of the computation) it belongs to:
    // a member still ending computation k may receive messages of k + 1 in the same poll
    // (after the FIN of k); those are kept for its next run, stale ones are dropped.
    ep.register(STEAL, |st: &mut State, ctx, m| {
        let e = m.args.first().copied().unwrap_or(0);
        let t = match &st.shared {
            Some(sh) if e == st.epoch && !st.done && !sh.failed.load(Ordering::Acquire) => {
                lock(&sh.queue).pop_front()
            }
            _ => None,
        };
        let r = match t {
            Some(t) => {
                if let Some(sh) = &st.shared {
                    sh.stolen_from.fetch_add(1, Ordering::Relaxed);
                }
                ctx.reply_bulk(
                    STEAL_REPLY,
                    &[e, 1, t.func as u64, t.origin as u64, t.id],
                    &t.payload,
                )
            }
            None => ctx.reply(STEAL_REPLY, &[e, 0]),
        };
        // The thief may have left because of a failure whose ABORT is still on its way
        // (or behind this request on its link): the communication thread looks first.
        if let Err(err) = r {
            if !(st.done || st.fin) {
                st.reply_error.get_or_insert(err);
            }
        }
    })?;
    ep.register(STEAL_REPLY, |st: &mut State, _ctx, m| {
        if m.args.first() != Some(&st.epoch) {
            return;
        }
        st.steal_outstanding = false;
        st.steal_answered = true;
        st.steal_found = m.args.get(1) == Some(&1);
        if let (true, 5, Some(sh)) = (st.steal_found, m.args.len(), &st.shared) {
            sh.steals.fetch_add(1, Ordering::Relaxed);
            sh.push_local(Task {
                func: m.args[2] as u32,
                origin: m.args[3] as usize,
                id: m.args[4],
                payload: m.data.to_vec(),
            });
        }
    })?;
    ep.register(RESULT, |st: &mut State, _ctx, m| {
        if let ([e, id], Some(sh)) = (m.args, &st.shared) {
            if *e == st.epoch {
                sh.deliver(sh.me, *id, m.data.to_vec(), true);
            }
        }
    })?;
    ep.register(ABORT, |st: &mut State, _ctx, m| {
        st.control(ABORT, m);
    })?;
    ep.register(DONE, |st: &mut State, ctx, m| {
        if st.control(DONE, m) {
            if let Err(e) = ctx.reply(DONE_ACK, &[st.epoch]) {
                if let Some(sh) = &st.shared {
                    sh.fail(e.into(), false);
                }
            }
        }
    })?;
    ep.register(DONE_ACK, |st: &mut State, _ctx, m| {
        if m.args.first() == Some(&st.epoch) {
            st.acks += 1;
        }
    })?;
    ep.register(FIN, |st: &mut State, _ctx, m| {
        st.control(FIN, m);
    })?;
    Ok(())
}

impl State {
    /// Applies a control message (ABORT, DONE, FIN) of this computation, keeps one of a
    /// later computation, drops a stale one: true if applied.
    fn control(&mut self, kind: u8, m: &smelt_am::Msg<'_>) -> bool {
        let e = m.args.first().copied().unwrap_or(0);
        // An ABORT names the member that failed (it may be relayed by another).
        let from = match (kind, m.args.get(1)) {
            (ABORT, Some(&origin)) => origin as usize,
            _ => m.from,
        };
        if e > self.epoch || self.shared.is_none() {
            self.deferred.push((e, kind, from, m.data.to_vec()));
            return false;
        }
        if e < self.epoch {
            return false;
        }
        self.apply(kind, from, m.data);
        true
    }

    fn apply(&mut self, kind: u8, from: usize, data: &[u8]) {
        match kind {
            ABORT => {
                if let Some(sh) = &self.shared {
                    // Relayed to the others before this member leaves (see `fail`).
                    sh.fail(
                        TaskError::Remote {
                            member: from,
                            message: String::from_utf8_lossy(data).into_owned(),
                        },
                        true,
                    );
                }
            }
            DONE => self.done = true,
            FIN => self.fin = true,
            _ => {}
        }
    }
}

/// The communication thread: sends results and aborts, steals when a worker is idle and
/// the queue is empty, runs the handlers, and ends the computation.
fn comm_loop<L: Link + 'static>(
    ep: Endpoint<State, L>,
    sh: &Arc<Shared>,
    finish_timeout: Duration,
) -> (Endpoint<State, L>, Result<(), TaskError>) {
    let mut ep = ep;
    let r = comm_loop_inner(&mut ep, sh, finish_timeout);
    // The next computation installs its own state.
    ep.state_mut().shared = None;
    (ep, r)
}

fn comm_loop_inner<L: Link + 'static>(
    ep: &mut Endpoint<State, L>,
    sh: &Arc<Shared>,
    finish_timeout: Duration,
) -> Result<(), TaskError> {
    let me = ep.me();
    let n = ep.size();
    let epoch = ep.state().epoch;
    // Victims: the members of this node first (random order), then the others.
    let my_node = ep.name(me).map(|x| x.node).unwrap_or(0);
    let mut seed = (me as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ smelt_am::random_tag();
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut near: Vec<usize> = (0..n)
        .filter(|&d| d != me && ep.name(d).map(|x| x.node) == Some(my_node))
        .collect();
    let mut far: Vec<usize> = (0..n)
        .filter(|&d| d != me && ep.name(d).map(|x| x.node) != Some(my_node))
        .collect();
    let mut shuffle = |v: &mut Vec<usize>| {
        for i in (1..v.len()).rev() {
            let j = (rnd() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
    };
    shuffle(&mut near);
    shuffle(&mut far);
    let victims: Vec<usize> = near.into_iter().chain(far).collect();
    let mut next_victim = 0;
    let mut misses = 0usize;
    let mut steal_after = Instant::now();
    let mut finishing: Option<Instant> = None;
    loop {
        // Out: results and aborts.
        let out = std::mem::take(&mut *lock(&sh.outbox));
        for o in out {
            match o {
                Outgoing::Result { to, id, bytes } => {
                    if let Err(e) = ep.request_bulk(to, RESULT, &[epoch, id], &bytes) {
                        comm_failed(ep, sh, e);
                    }
                }
                Outgoing::Abort { origin, message } => {
                    for d in (0..n).filter(|&d| d != me && d != origin) {
                        let _ =
                            ep.request_bulk(d, ABORT, &[epoch, origin as u64], message.as_bytes());
                    }
                }
            }
        }
        if sh.failed.load(Ordering::Acquire) {
            // Aborts went out above (those queued before the flag was seen go next round).
            if lock(&sh.outbox).is_empty() {
                return Ok(());
            }
            continue;
        }
        let st = ep.state();
        if st.fin {
            return Ok(());
        }
        // Member 0: the root returned; tell the others, wait for them, then release them.
        if me == 0 && sh.finish.load(Ordering::Acquire) {
            let started = *finishing.get_or_insert_with(|| {
                for d in 1..n {
                    if let Err(e) = ep.request(d, DONE, &[epoch]) {
                        comm_failed(ep, sh, e);
                    }
                }
                Instant::now()
            });
            if ep.state().acks + 1 >= n {
                for d in 1..n {
                    let _ = ep.request(d, FIN, &[epoch]);
                }
                return Ok(());
            }
            if started.elapsed() > finish_timeout {
                let e = TaskError::Timeout {
                    what: "waiting for the members to acknowledge the end".into(),
                    after: finish_timeout,
                };
                sh.fail(e.clone(), true);
                continue;
            }
        }
        // Steal when a worker is idle and nothing is queued here.
        let st = ep.state_mut();
        if st.steal_answered {
            st.steal_answered = false;
            if st.steal_found {
                misses = 0;
            } else {
                misses += 1;
                if misses >= victims.len().max(1) {
                    // A whole round found nothing: back off before the next one.
                    let exp = (misses / victims.len().max(1)).min(6) as u32;
                    steal_after = Instant::now() + Duration::from_micros(20u64 << exp);
                }
            }
        }
        let want = !st.done
            && !st.steal_outstanding
            && !victims.is_empty()
            && sh.idle.load(Ordering::SeqCst) > 0
            && lock(&sh.queue).is_empty()
            && lock(&sh.local).is_empty()
            && Instant::now() >= steal_after;
        if want {
            let v = victims[next_victim % victims.len()];
            next_victim += 1;
            sh.steal_requests.fetch_add(1, Ordering::Relaxed);
            ep.state_mut().steal_outstanding = true;
            if let Err(e) = ep.request(v, STEAL, &[epoch]) {
                comm_failed(ep, sh, e);
                continue;
            }
        }
        match ep.wait(Duration::from_micros(200)) {
            Ok(_) | Err(AmError::Timeout { .. }) => {}
            Err(e) => comm_failed(ep, sh, e),
        }
        if let Some(e) = ep.state_mut().reply_error.take() {
            comm_failed(ep, sh, e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member that leaves because of another's failure relays it first: here member
    /// 0 (a bare endpoint) tells only member 2 at first and the others only 300 ms
    /// later, after member 2 has left. Members 1 and 3 see member 2 leave, yet report
    /// member 0's failure, not member 2's departure.
    #[test]
    fn a_member_leaving_because_of_a_failure_relays_it_first() {
        let mut members = Member::threads(4, smelt_am::AmConfig::default()).unwrap();
        let mut ep0 = members.remove(0).ep.take().unwrap();
        let f = crate::apps::dist::functions();
        let out = thread::scope(|s| {
            let hs: Vec<_> = members
                .into_iter()
                .map(|mut m| {
                    let f = &f;
                    // The member (its endpoint) is dropped when its thread ends.
                    s.spawn(move || m.run(f, &TaskConfig::new(1), None))
                })
                .collect();
            // Epoch 1: the members' first computation.
            ep0.request_bulk(2, ABORT, &[1, 0], b"failed at 0").unwrap();
            thread::sleep(Duration::from_millis(300));
            for d in [1, 3] {
                let _ = ep0.request_bulk(d, ABORT, &[1, 0], b"failed at 0");
            }
            hs.into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        for (i, r) in out.iter().enumerate() {
            assert_eq!(
                r.as_ref().unwrap_err(),
                &TaskError::Remote {
                    member: 0,
                    message: "failed at 0".into()
                },
                "member {}",
                i + 1
            );
        }
    }
}
