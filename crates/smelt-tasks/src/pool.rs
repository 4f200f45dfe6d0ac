//! The pool: worker threads, each with a Chase–Lev deque (`crossbeam-deque`), stealing
//! from each other when their own deque is empty, and sleeping when there is no work.

use crate::error::{panic_message, TaskError};
use crate::job::{JobRef, JobResult, StackJob};
use crate::latch::{CoreLatch, LockLatch, SpinLatch};
use crossbeam_deque::{Injector, Steal, Stealer, Worker};
use crossbeam_utils::CachePadded;
use smelt_ids::CpuId;
use smelt_transport::{Backoff, WaitPolicy};
use std::any::Any;
use std::cell::{Cell, OnceCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::{self, JoinHandle, Thread};
use std::time::Duration;

/// Settings of a [`Pool`].
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Worker threads (at least 1).
    pub workers: usize,
    /// CPUs to pin the workers to, worker `i` on `cpus[i % cpus.len()]` (none: not pinned).
    pub cpus: Option<Vec<CpuId>>,
    /// How idle workers back off before they sleep (default: dedicated when the workers fit
    /// the CPUs this process may use, else oversubscribed).
    pub wait: Option<WaitPolicy>,
    /// The longest an idle worker sleeps before it looks for work again (default 50 ms; a
    /// wake-up is sent when work appears, this only bounds a missed one).
    pub max_sleep: Duration,
    /// Worker threads are named `{name}-{index}` (default `smelt-task`; Linux shows the
    /// first 15 bytes).
    pub name: String,
}

impl PoolConfig {
    /// `workers` unpinned workers.
    pub fn new(workers: usize) -> PoolConfig {
        PoolConfig {
            workers,
            cpus: None,
            wait: None,
            max_sleep: Duration::from_millis(50),
            name: "smelt-task".into(),
        }
    }
    /// Pins worker `i` to `cpus[i % cpus.len()]`.
    pub fn pinned(mut self, cpus: Vec<CpuId>) -> PoolConfig {
        self.cpus = Some(cpus);
        self
    }
}

/// Counters of a pool (sums over its workers since it started).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Tasks made stealable: the second closure of each `join` and each scope spawn.
    pub spawned: u64,
    /// Tasks taken from another worker's deque.
    pub steals: u64,
    /// Times a worker went to sleep for lack of work.
    pub sleeps: u64,
}

#[derive(Default)]
struct WorkerStats {
    spawned: AtomicU64,
    steals: AtomicU64,
    sleeps: AtomicU64,
}

fn bump(c: &AtomicU64) {
    // Only the owning worker writes its counters: no read-modify-write needed.
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// A panic payload that says "cancelled because another task panicked".
pub(crate) struct Cancelled;

const SLEEPING_ONE: u64 = 1;
const AWAKE_IDLE_ONE: u64 = 1 << 32;

/// How idle workers sleep: a count of sleeping workers and of idle workers still
/// searching (one word), and a condition variable to sleep on. A push wakes a sleeper only
/// if some sleep and none is searching (the searcher will find the work). A worker
/// announces its sleep, looks at every deque once more and only then waits, so work
/// injected from outside (pushed, then a `SeqCst` fence, then the count read) is never
/// missed; work pushed on a worker's own deque may be (the count is read without a fence,
/// to keep `join` cheap), which costs no progress: its owner runs it. Sleeps are bounded
/// ([`PoolConfig::max_sleep`]).
struct Sleep {
    lock: Mutex<()>,
    cv: Condvar,
    counts: AtomicU64,
}

impl Sleep {
    fn wake_one(&self) {
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.cv.notify_one();
    }
    #[inline]
    fn new_local_work(&self) {
        let c = self.counts.load(Ordering::Relaxed);
        if c & 0xffff_ffff != 0 && c >> 32 == 0 {
            self.wake_one();
        }
    }
    fn new_injected_work(&self) {
        fence(Ordering::SeqCst);
        if self.counts.load(Ordering::SeqCst) & 0xffff_ffff != 0 {
            self.wake_one();
        }
    }
}

/// What the workers of one pool share.
pub(crate) struct Registry {
    stealers: Vec<Stealer<JobRef>>,
    injector: Injector<JobRef>,
    threads: OnceLock<Vec<Thread>>,
    sleep: Sleep,
    terminate: AtomicBool,
    stats: Vec<CachePadded<WorkerStats>>,
    poisoned: AtomicBool,
    first_panic: Mutex<Option<String>>,
    wait: WaitPolicy,
    max_sleep: Duration,
}

impl Registry {
    /// Wakes worker `owner` parked on one of its latches.
    pub(crate) fn unpark(&self, owner: usize) {
        if let Some(t) = self.threads.get().and_then(|t| t.get(owner)) {
            t.unpark();
        }
    }

    fn inject(&self, job: JobRef) {
        self.injector.push(job);
        self.sleep.new_injected_work();
    }

    fn has_work(&self) -> bool {
        !self.injector.is_empty() || self.stealers.iter().any(|s| !s.is_empty())
    }

    /// Remembers the first real panic of the computation and cancels the rest.
    pub(crate) fn record_panic(&self, p: &(dyn Any + Send)) {
        if p.is::<Cancelled>() {
            return;
        }
        let mut g = self.first_panic.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            *g = Some(panic_message(p));
        }
        self.poisoned.store(true, Ordering::Release);
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Relaxed)
    }

    fn panic_error(&self, p: &(dyn Any + Send)) -> TaskError {
        let first = self
            .first_panic
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        TaskError::Panicked(first.unwrap_or_else(|| panic_message(p)))
    }
}

/// A worker thread's own part: its deque and where it belongs.
pub(crate) struct WorkerThread {
    pub(crate) index: usize,
    deque: Worker<JobRef>,
    pub(crate) registry: Arc<Registry>,
    rng: Cell<u64>,
}

thread_local! {
    static CURRENT: OnceCell<WorkerThread> = const { OnceCell::new() };
}

/// Runs `f` with this thread's worker, if it is one.
#[inline]
pub(crate) fn with_current<R>(f: impl FnOnce(Option<&WorkerThread>) -> R) -> R {
    CURRENT.with(|c| f(c.get()))
}

impl WorkerThread {
    pub(crate) fn workers(&self) -> usize {
        self.registry.stealers.len()
    }

    #[inline]
    pub(crate) fn push(&self, job: JobRef) {
        bump(&self.registry.stats[self.index].spawned);
        self.deque.push(job);
        self.registry.sleep.new_local_work();
    }

    /// Pushes on this worker's deque if it belongs to `registry`, else injects.
    pub(crate) fn push_or_inject(me: Option<&WorkerThread>, registry: &Registry, job: JobRef) {
        match me {
            Some(w) if std::ptr::eq(&*w.registry, registry) => w.push(job),
            _ => registry.inject(job),
        }
    }

    fn next_random(&self) -> u64 {
        // xorshift64*
        let mut x = self.rng.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Work from this worker's deque, the injector, or another worker (a random victim
    /// first, then the others in order).
    fn find_work(&self) -> Option<JobRef> {
        if let Some(j) = self.deque.pop() {
            return Some(j);
        }
        let reg = &*self.registry;
        loop {
            match reg.injector.steal_batch_and_pop(&self.deque) {
                Steal::Success(j) => return Some(j),
                Steal::Empty => break,
                Steal::Retry => {}
            }
        }
        let n = reg.stealers.len();
        if n > 1 {
            let start = (self.next_random() % n as u64) as usize;
            let mut retry = true;
            while retry {
                retry = false;
                for k in 0..n {
                    let v = (start + k) % n;
                    if v == self.index {
                        continue;
                    }
                    match reg.stealers[v].steal() {
                        Steal::Success(j) => {
                            bump(&reg.stats[self.index].steals);
                            return Some(j);
                        }
                        Steal::Empty => {}
                        Steal::Retry => retry = true,
                    }
                }
            }
        }
        None
    }

    #[inline]
    fn execute(&self, job: JobRef) {
        job.execute();
    }

    /// Runs other work until `latch` is set: spins, yields, then parks (woken by the
    /// setter), never for longer than 1 ms at a time.
    pub(crate) fn wait_until(&self, latch: &CoreLatch) {
        let mut backoff = Backoff::with_policy(&self.registry.wait);
        let mut nap = Duration::from_micros(20);
        while !latch.probe() {
            if let Some(j) = self.find_work() {
                self.execute(j);
                backoff.reset();
                nap = Duration::from_micros(20);
                continue;
            }
            if !backoff.is_completed() {
                backoff.snooze();
                continue;
            }
            if latch.get_sleepy() {
                thread::park_timeout(nap);
                latch.wake_up();
                nap = (nap * 2).min(Duration::from_millis(1));
            }
        }
    }

    /// Runs other work while `busy()` holds: spins, yields, then parks for at most 1 ms
    /// at a time (whoever makes `busy` false may unpark this worker).
    pub(crate) fn wait_while(&self, busy: impl Fn() -> bool) {
        let mut backoff = Backoff::with_policy(&self.registry.wait);
        let mut nap = Duration::from_micros(20);
        while busy() {
            if let Some(j) = self.find_work() {
                self.execute(j);
                backoff.reset();
                nap = Duration::from_micros(20);
                continue;
            }
            if !backoff.is_completed() {
                backoff.snooze();
                continue;
            }
            thread::park_timeout(nap);
            nap = (nap * 2).min(Duration::from_millis(1));
        }
    }

    /// `join` on a worker: `b` goes on the deque for thieves, `a` runs here; then `b` is
    /// popped back and run here, or (stolen) waited for while this worker runs other work.
    pub(crate) fn join<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send,
    {
        if self.registry.is_poisoned() {
            panic::resume_unwind(Box::new(Cancelled));
        }
        let job_b = StackJob::new(|_| b(), SpinLatch::new(&self.registry, self.index));
        let job_ref = job_b.as_job_ref();
        self.push(job_ref);
        let ra = panic::catch_unwind(AssertUnwindSafe(a));
        if let Err(p) = &ra {
            self.registry.record_panic(&**p);
        }
        while !job_b.latch.core.probe() {
            match self.deque.pop() {
                Some(j) if j == job_ref => {
                    // Not stolen: run it here (unless `a` failed: then drop it unrun).
                    let ra = ra.unwrap_or_else(|p| panic::resume_unwind(p));
                    let rb = job_b.run_inline();
                    return (ra, rb);
                }
                Some(j) => self.execute(j),
                None => {
                    self.wait_until(&job_b.latch.core);
                    break;
                }
            }
        }
        let rb = match job_b.into_job_result() {
            JobResult::Ok(v) => v,
            JobResult::Panic(p) => {
                self.registry.record_panic(&*p);
                panic::resume_unwind(ra.err().unwrap_or(p))
            }
            JobResult::None => unreachable!("a set latch has a result"),
        };
        (ra.unwrap_or_else(|p| panic::resume_unwind(p)), rb)
    }

    fn main_loop(&self) {
        let reg = &*self.registry;
        loop {
            if let Some(j) = self.find_work() {
                self.execute(j);
                continue;
            }
            if reg.terminate.load(Ordering::Acquire) {
                return;
            }
            // Idle: spin, yield, then sleep.
            reg.sleep.counts.fetch_add(AWAKE_IDLE_ONE, Ordering::SeqCst);
            let mut backoff = Backoff::with_policy(&reg.wait);
            let found = loop {
                if let Some(j) = self.find_work() {
                    break Some(j);
                }
                if reg.terminate.load(Ordering::Acquire) {
                    break None;
                }
                if !backoff.is_completed() {
                    backoff.snooze();
                    continue;
                }
                let g = reg.sleep.lock.lock().unwrap_or_else(|e| e.into_inner());
                reg.sleep
                    .counts
                    .fetch_add(SLEEPING_ONE.wrapping_sub(AWAKE_IDLE_ONE), Ordering::SeqCst);
                // Woken by a push (or work seen): spin and yield again before the next
                // sleep. Woken by the timeout: look once, then sleep again at once (no
                // spinning every `max_sleep` while the pool stays idle).
                let mut notified = true;
                if !reg.has_work() && !reg.terminate.load(Ordering::SeqCst) {
                    bump(&reg.stats[self.index].sleeps);
                    let (_g, t) = reg
                        .sleep
                        .cv
                        .wait_timeout(g, reg.max_sleep)
                        .unwrap_or_else(|e| e.into_inner());
                    notified = !t.timed_out();
                } else {
                    drop(g);
                }
                reg.sleep
                    .counts
                    .fetch_add(AWAKE_IDLE_ONE.wrapping_sub(SLEEPING_ONE), Ordering::SeqCst);
                if notified {
                    backoff.reset();
                }
            };
            reg.sleep.counts.fetch_sub(AWAKE_IDLE_ONE, Ordering::SeqCst);
            match found {
                Some(j) => self.execute(j),
                None => return,
            }
        }
    }
}

/// A pool of worker threads that run fork-join computations.
///
/// ```
/// let pool = smelt_tasks::Pool::new(smelt_tasks::PoolConfig::new(4))?;
/// fn fib(n: u64) -> u64 {
///     if n < 2 { return n; }
///     let (a, b) = smelt_tasks::join(|| fib(n - 1), || fib(n - 2));
///     a + b
/// }
/// assert_eq!(pool.install(|| fib(20))?, 6765);
/// # Ok::<(), smelt_tasks::TaskError>(())
/// ```
pub struct Pool {
    registry: Arc<Registry>,
    handles: Vec<JoinHandle<()>>,
    running: Mutex<()>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("workers", &self.handles.len())
            .finish()
    }
}

impl Pool {
    /// Starts the workers (pinned if asked; an unknown or forbidden CPU is an error).
    pub fn new(cfg: PoolConfig) -> Result<Pool, TaskError> {
        if cfg.workers == 0 {
            return Err(TaskError::Invalid("a pool of 0 workers".into()));
        }
        if cfg.workers > 4096 {
            return Err(TaskError::Invalid(format!(
                "a pool of {} workers (at most 4096)",
                cfg.workers
            )));
        }
        if let Some(c) = &cfg.cpus {
            if c.is_empty() {
                return Err(TaskError::Invalid("an empty CPU list".into()));
            }
        }
        let cpus_here = smelt_transport::allowed_cpus()
            .map(|c| c.len())
            .unwrap_or(1);
        let wait = cfg.wait.unwrap_or(if cfg.workers > cpus_here {
            WaitPolicy::OVERSUBSCRIBED
        } else {
            WaitPolicy::DEDICATED
        });
        let deques: Vec<Worker<JobRef>> = (0..cfg.workers).map(|_| Worker::new_lifo()).collect();
        let registry = Arc::new(Registry {
            stealers: deques.iter().map(|d| d.stealer()).collect(),
            injector: Injector::new(),
            threads: OnceLock::new(),
            sleep: Sleep {
                lock: Mutex::new(()),
                cv: Condvar::new(),
                counts: AtomicU64::new(0),
            },
            terminate: AtomicBool::new(false),
            stats: (0..cfg.workers).map(|_| Default::default()).collect(),
            poisoned: AtomicBool::new(false),
            first_panic: Mutex::new(None),
            wait,
            max_sleep: cfg.max_sleep.max(Duration::from_micros(100)),
        });
        let (tx, rx) = std::sync::mpsc::channel::<Result<(), TaskError>>();
        let mut handles = Vec::with_capacity(cfg.workers);
        for (index, deque) in deques.into_iter().enumerate() {
            let reg = Arc::clone(&registry);
            let cpu = cfg.cpus.as_ref().map(|c| c[index % c.len()]);
            let tx = tx.clone();
            let h = thread::Builder::new()
                .name(format!("{}-{index}", cfg.name))
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        if let Err(e) = smelt_transport::pin_current_thread(cpu) {
                            let _ = tx.send(Err(TaskError::Pin {
                                worker: index,
                                cpu,
                                reason: e.to_string(),
                            }));
                            return;
                        }
                    }
                    let _ = tx.send(Ok(()));
                    drop(tx);
                    CURRENT.with(|c| {
                        let w = c.get_or_init(|| WorkerThread {
                            index,
                            deque,
                            registry: reg,
                            rng: Cell::new(
                                0x9e37_79b9_7f4a_7c15 ^ ((index as u64 + 1) * 0x1234_5677),
                            ),
                        });
                        w.main_loop();
                    });
                })
                .map_err(|e| TaskError::Invalid(format!("could not start a worker: {e}")))?;
            handles.push(h);
        }
        drop(tx);
        let threads = handles.iter().map(|h| h.thread().clone()).collect();
        let _ = registry.threads.set(threads);
        let mut pool = Pool {
            registry,
            handles,
            running: Mutex::new(()),
        };
        for _ in 0..cfg.workers {
            match rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    pool.shutdown();
                    return Err(e);
                }
                Err(_) => {
                    pool.shutdown();
                    return Err(TaskError::Invalid("a worker ended while starting".into()));
                }
            }
        }
        Ok(pool)
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.handles.len()
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        let mut s = Stats::default();
        for w in &self.registry.stats {
            s.spawned += w.spawned.load(Ordering::Relaxed);
            s.steals += w.steals.load(Ordering::Relaxed);
            s.sleeps += w.sleeps.load(Ordering::Relaxed);
        }
        s
    }

    /// Runs `f` on a worker of this pool and waits for it: [`join`](crate::join),
    /// [`scope`](crate::scope), [`parallel_for`](crate::parallel_for) and
    /// [`reduce`](crate::reduce) inside it run on the pool's workers. A task that panics
    /// fails the whole computation: the remaining tasks are cancelled (not run) and the
    /// first panic's message comes back as [`TaskError::Panicked`]. One computation runs
    /// at a time (concurrent calls queue).
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> Result<R, TaskError> {
        let inside =
            with_current(|w| w.is_some_and(|w| std::ptr::eq(&*w.registry, &*self.registry)));
        if inside {
            return panic::catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
                self.registry.record_panic(&*p);
                self.registry.panic_error(&*p)
            });
        }
        let _g = self.running.lock().unwrap_or_else(|e| e.into_inner());
        self.registry.poisoned.store(false, Ordering::Relaxed);
        *self
            .registry
            .first_panic
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        let job = StackJob::new(|_| f(), LockLatch::new());
        self.registry.inject(job.as_job_ref());
        job.latch.wait();
        match job.into_job_result() {
            JobResult::Ok(v) => Ok(v),
            JobResult::Panic(p) => {
                self.registry.record_panic(&*p);
                Err(self.registry.panic_error(&*p))
            }
            JobResult::None => unreachable!("a set latch has a result"),
        }
    }

    fn shutdown(&mut self) {
        self.registry.terminate.store(true, Ordering::SeqCst);
        {
            let _g = self
                .registry
                .sleep
                .lock
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.registry.sleep.cv.notify_all();
        }
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shutdown();
    }
}
