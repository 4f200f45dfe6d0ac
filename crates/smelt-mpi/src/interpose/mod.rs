//! The interposer: `MPI_Bcast`, `MPI_Reduce`, `MPI_Allreduce`, `MPI_Barrier`,
//! `MPI_Gather`, `MPI_Scatter` and `MPI_Finalize` defined here, and those of [`more`]
//! (`MPI_Allgather`, `MPI_Scan`, ...), (C symbols) take precedence over the MPI library's when
//! `libsmelt_mpi.so` is preloaded; what smelt does not take goes to `PMPI_*`, the MPI
//! profiling interface, unchanged.

mod comm;
mod config;
mod ffi;
mod fortran;
mod model;
mod more;
mod nonblocking;
mod route;
mod stats;

use crate::ops::{self, Elem};
use comm::{Fail, Reduction, Takeover};
use config::config;
use ffi::{MPI_Comm, MPI_Datatype, MPI_Op};
use stats::{Call, Why};
use std::cell::UnsafeCell;
use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// The attribute key under which each communicator's state is cached; created on
/// first use, freed at MPI_Finalize.
static KEYVAL: AtomicI32 = AtomicI32::new(i32::MIN);
/// Every live state (as addresses), so MPI_Finalize can release them all.
static LIVE: Mutex<Vec<usize>> = Mutex::new(Vec::new());
/// Held while a state is made and stored for a communicator that has none, so two
/// threads (MPI_THREAD_MULTIPLE) cannot both make one.
static MAKING: Mutex<()> = Mutex::new(());
/// The communicator looked up last and its state. Programs mostly call collectives on
/// one communicator, and MPI's attribute lookup is a hash-table probe on every call;
/// this skips it. Cleared when that state is freed. Calls are serialized below
/// MPI_THREAD_MULTIPLE (the user's contract), so plain loads and stores suffice;
/// under MPI_THREAD_MULTIPLE it is not used.
static LAST_COMM: AtomicUsize = AtomicUsize::new(0);
static LAST_STATE: AtomicPtr<CommState> = AtomicPtr::new(std::ptr::null_mut());
/// States freed so far. Under MPI_THREAD_MULTIPLE each thread remembers the
/// communicator it looked up last ([`MINE`]) with this count: a state freed since
/// (its handle possibly reused by a new communicator) makes every such memory stale.
/// MPI forbids freeing a communicator while a collective runs on it, so a count that
/// still matches means a live state.
static FREED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Under MPI_THREAD_MULTIPLE: this thread's last communicator, its state and
    /// [`FREED`] when it was looked up.
    static MINE: std::cell::Cell<(usize, *mut CommState, u64)> =
        const { std::cell::Cell::new((0, std::ptr::null_mut(), u64::MAX)) };
}

/// One communicator's state, cached as its attribute.
pub struct CommState {
    /// The communicator this state belongs to.
    pub comm: MPI_Comm,
    /// Under MPI_THREAD_MULTIPLE: set while a thread runs a collective on this
    /// communicator through the state (below it, calls are serialized and it is not
    /// used).
    busy: AtomicBool,
    /// Used only by the thread that set `busy` (or, below MPI_THREAD_MULTIPLE, by the
    /// one thread calling MPI at a time).
    mode: UnsafeCell<Takeover>,
}

/// A communicator handle as a number (a pointer in Open MPI, an int in MPICH).
#[inline(always)]
fn comm_key(c: MPI_Comm) -> usize {
    c.0 as usize
}

/// True unless MPI runs with MPI_THREAD_MULTIPLE (asked once; the counts become atomic
/// if not).
fn serialized() -> bool {
    static S: OnceLock<bool> = OnceLock::new();
    *S.get_or_init(|| {
        let s = ffi::thread_level().is_ok_and(|l| l != ffi::thread_multiple());
        if !s {
            stats::threaded();
        }
        s
    })
}

/// Runs `f`, turning a panic into a clear message and `PMPI_Abort`: nothing unwinds
/// into MPI or the application.
fn guard(call: &str, f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(rc) => rc,
        Err(p) => {
            let msg = smelt_runtime::panic_message(p.as_ref());
            ffi::abort(
                ffi::comm_world(),
                &format!("internal error in {call}: {msg}"),
            )
        }
    }
}

/// Runs an intercepted call: `pmpi` (MPI alone) when smelt is off, else `run` under
/// [`guard`] (`name` the call's MPI name).
fn take_over(name: &str, pmpi: impl FnOnce() -> c_int, run: impl FnOnce() -> c_int) -> c_int {
    if config().off {
        return pmpi();
    }
    guard(name, run)
}

/// Attribute copy callback: a duplicated communicator does not inherit the state (it
/// gets its own on first use).
unsafe extern "C" fn copy_state(
    _old: MPI_Comm,
    _keyval: c_int,
    _extra: *mut c_void,
    _in: *mut c_void,
    _out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: MPI passes a valid pointer to the flag it reads back.
    unsafe { *flag = 0 };
    ffi::success()
}

/// Attribute delete callback (MPI_Comm_free, MPI_Comm_delete_attr at MPI_Finalize):
/// releases the state: its trees' shared memory and its communicators.
unsafe extern "C" fn delete_state(
    _comm: MPI_Comm,
    _keyval: c_int,
    attr: *mut c_void,
    _extra: *mut c_void,
) -> c_int {
    guard("MPI_Comm_free", || {
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|&p| p != attr as usize);
        nonblocking::before_free(attr.cast());
        if LAST_STATE.load(Ordering::Relaxed) == attr.cast::<CommState>() {
            LAST_STATE.store(std::ptr::null_mut(), Ordering::Relaxed);
        }
        FREED.fetch_add(1, Ordering::AcqRel);
        // `attr` is the pointer `state` stored with this keyval: a Box
        // leaked by it, released exactly once, here.
        // SAFETY: as argued in the lines above.
        drop(unsafe { Box::from_raw(attr.cast::<CommState>()) });
        ffi::success()
    })
}

fn keyval() -> Result<c_int, ffi::MpiErr> {
    let k = KEYVAL.load(Ordering::Acquire);
    if k != i32::MIN {
        return Ok(k);
    }
    let _making = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    let k = KEYVAL.load(Ordering::Acquire);
    if k != i32::MIN {
        return Ok(k);
    }
    let mut k = ffi::keyval_invalid();
    // SAFETY: valid callbacks of the signatures MPI expects and a valid out-pointer.
    ffi::check(unsafe {
        mpi_sys::PMPI_Comm_create_keyval(
            Some(copy_state),
            Some(delete_state),
            &mut k,
            std::ptr::null_mut(),
        )
    })?;
    KEYVAL.store(k, Ordering::Release);
    Ok(k)
}

/// The state of `comm`, made (not yet set up) on first use.
#[inline(always)]
fn state(comm: MPI_Comm) -> Result<*mut CommState, ffi::MpiErr> {
    let key = comm_key(comm);
    let last = LAST_STATE.load(Ordering::Relaxed);
    if !last.is_null() && LAST_COMM.load(Ordering::Relaxed) == key {
        return Ok(last);
    }
    state_looked_up(comm, key)
}

/// [`state`] of a communicator other than the last one.
#[inline(never)]
fn state_looked_up(comm: MPI_Comm, key: usize) -> Result<*mut CommState, ffi::MpiErr> {
    let freed = FREED.load(Ordering::Acquire);
    let st = lookup(comm)?;
    if serialized() {
        LAST_COMM.store(key, Ordering::Relaxed);
        LAST_STATE.store(st, Ordering::Relaxed);
    } else {
        MINE.with(|m| m.set((key, st, freed)));
    }
    Ok(st)
}

/// The state stored as `comm`'s attribute, if any.
fn stored(comm: MPI_Comm, kv: c_int) -> Result<Option<*mut CommState>, ffi::MpiErr> {
    let mut ptr: *mut c_void = std::ptr::null_mut();
    let mut flag: c_int = 0;
    // SAFETY: MPI writes the stored pointer to `ptr` and sets `flag`.
    ffi::check(unsafe {
        mpi_sys::PMPI_Comm_get_attr(comm, kv, (&mut ptr as *mut *mut c_void).cast(), &mut flag)
    })?;
    Ok((flag != 0 && !ptr.is_null()).then_some(ptr.cast()))
}

/// The state of `comm` from its attribute, made (and stored) on first use: `Off` where
/// smelt can never take the communicator, else not set up yet (set-up waits for
/// `SMELT_MPI_SETUP_AFTER` calls; it needs communication, making the state does not).
fn lookup(comm: MPI_Comm) -> Result<*mut CommState, ffi::MpiErr> {
    let kv = keyval()?;
    if let Some(st) = stored(comm, kv)? {
        return Ok(st);
    }
    let _making = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(st) = stored(comm, kv)? {
        return Ok(st);
    }
    let mode = match comm::never(comm)? {
        Some(why) => Takeover::Off(why),
        None => Takeover::Warming(0),
    };
    let st = Box::into_raw(Box::new(CommState {
        comm,
        busy: AtomicBool::new(false),
        mode: UnsafeCell::new(mode),
    }));
    // SAFETY: stores the leaked box as the attribute; `delete_state` frees it.
    if let Err(e) = ffi::check(unsafe { mpi_sys::PMPI_Comm_set_attr(comm, kv, st.cast()) }) {
        // SAFETY: not stored anywhere: this is its only owner.
        drop(unsafe { Box::from_raw(st) });
        return Err(e);
    }
    LIVE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(st as usize);
    Ok(st)
}

/// Releases every state (their shared memory and communicators) and the keyval.
fn release_all() {
    let live = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|e| e.into_inner()));
    let kv = KEYVAL.load(Ordering::Acquire);
    if kv == i32::MIN {
        return;
    }
    for p in live {
        // SAFETY: `p` is a live state (states leave LIVE when freed); reading its communicator handle only.
        let comm = unsafe { (*(p as *const CommState)).comm };
        // SAFETY: deletes the attribute `state` set; MPI calls `delete_state`.
        unsafe { mpi_sys::PMPI_Comm_delete_attr(comm, kv) };
    }
    let mut k = kv;
    // SAFETY: the keyval this crate created; no attribute uses it any more.
    unsafe { mpi_sys::PMPI_Comm_free_keyval(&mut k) };
    KEYVAL.store(i32::MIN, Ordering::Release);
}

/// A communicator's hierarchy, held for one collective call: under
/// MPI_THREAD_MULTIPLE the state's `busy` flag is set until it is dropped.
pub struct Held {
    h: NonNull<comm::Hier>,
    busy: Option<NonNull<AtomicBool>>,
}

impl std::ops::Deref for Held {
    type Target = comm::Hier;
    fn deref(&self) -> &comm::Hier {
        // SAFETY: a live state's hierarchy, used by this call alone (see `hier`).
        unsafe { self.h.as_ref() }
    }
}

impl std::ops::DerefMut for Held {
    fn deref_mut(&mut self) -> &mut comm::Hier {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference.
        unsafe { self.h.as_mut() }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(b) = self.busy {
            // SAFETY: the flag of a live state (a communicator is not freed while a collective runs on it).
            unsafe { b.as_ref() }.store(false, Ordering::Release);
        }
    }
}

/// Said once per process: two threads called collectives on one communicator at once.
fn say_concurrent(comm: MPI_Comm) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if config().verbose && !SAID.swap(true, Ordering::Relaxed) {
        let rank = smelt_mesh::mpi::rank_size::<ffi::P>(comm).map_or(-1, |(r, _)| r as i64);
        stats::say(&format!(
            "rank {rank}: two threads called collectives on one communicator at the same time (MPI requires a program to order them); such calls go to MPI (counted in the summary)"
        ));
    }
}

/// The state's hierarchy, held for this call; `Err`: the call's return code without
/// smelt (an MPI error, or a fall-back, counted, that `pmpi` ran). Counts the call
/// towards the communicator's set-up and sets it up at the call after the first
/// `SMELT_MPI_SETUP_AFTER` (collective: every rank of `comm` makes the same calls on
/// it in the same order, so every rank sets up at the same one).
fn hier(comm: MPI_Comm, call: Call, pmpi: impl FnOnce() -> c_int) -> Result<Held, c_int> {
    hier_counting(comm, call, true, pmpi)
}

/// [`hier`]; `counts` false: the call does not count towards the communicator's
/// set-up (before it, it goes to MPI without being counted), so that a rank may pass
/// it to MPI without looking at the communicator at all where it can never be taken
/// ([`never_taken`]) and every rank still sets up at the same call.
fn hier_counting(
    comm: MPI_Comm,
    call: Call,
    counts: bool,
    pmpi: impl FnOnce() -> c_int,
) -> Result<Held, c_int> {
    let why = if comm == ffi::comm_null() {
        Why::BadArgs
    } else {
        let st = state(comm).map_err(|e| e.0)?;
        // `st` is a live state of `comm` (freed only by MPI_Comm_free, which
        // the program does not call while a collective runs on `comm`).
        // SAFETY: as argued in the lines above.
        let st = unsafe { &*st };
        let busy = if serialized() {
            None
        } else if !nonblocking::acquire(&st.busy) {
            say_concurrent(comm);
            stats::fell_back(call, Why::Concurrent);
            return Err(pmpi());
        } else {
            Some(NonNull::from(&st.busy))
        };
        let release = || {
            if busy.is_some() {
                st.busy.store(false, Ordering::Release);
            }
        };
        // SAFETY: this thread holds the state: `busy` set, or calls serialized.
        let mode = unsafe { &mut *st.mode.get() };
        if let Takeover::Warming(n) = mode {
            let after = config().setup_after;
            if !counts || *n < after {
                if counts {
                    *n += 1;
                }
                release();
                stats::fell_back(call, Why::Warmup);
                return Err(pmpi());
            }
            match comm::setup(comm, config()) {
                Ok(m) => *mode = m,
                Err(e) => {
                    release();
                    return Err(e.0);
                }
            }
        }
        match mode {
            Takeover::On(h) => {
                // Non-blocking operations pending on the communicator come first.
                nonblocking::settle(std::ptr::from_ref(st).cast_mut(), h);
                return Ok(Held {
                    h: NonNull::from(&mut **h),
                    busy,
                });
            }
            Takeover::Off(why) => {
                let why = *why;
                release();
                why
            }
            Takeover::Warming(_) => unreachable!("set up above"),
        }
    };
    stats::fell_back(call, why);
    Err(pmpi())
}

/// True where this process's own cut-off for a call (index `at` of
/// `SMELT_MPI_MAX_BYTES`) is 0: the communicator's (the smallest of its ranks') is 0
/// too, so the call goes to MPI on every rank, and this one need not look further.
/// Only for calls that do not count towards set-up ([`hier_counting`]).
fn never_taken(at: usize) -> bool {
    config().max_bytes[at] == 0
}

/// Runs a call smelt may take (its checks passed; `bytes` as its cut-off counts them)
/// the way `x`'s communicator's measurements send it ([`route`]): `smelt` through
/// smelt, `pmpi` through MPI, timing the trial calls. `hier` finds the communicator's
/// hierarchy in `x` (a held one, or a gather's or scatter's plan).
#[inline(always)]
pub(crate) fn routed<T>(
    x: &mut T,
    hier: fn(&mut T) -> &mut comm::Hier,
    call: Call,
    bytes: usize,
    pmpi: impl FnOnce() -> c_int,
    smelt: impl FnOnce(&mut T) -> c_int,
) -> c_int {
    let trial = match hier(x).routes.pick(call, bytes) {
        Ok(route::Go::Smelt(t)) => t,
        Ok(route::Go::Mpi(t)) => {
            let why = if t.is_some() {
                Why::Measuring
            } else {
                Why::MeasuredFaster
            };
            stats::fell_back(call, why);
            let rc = pmpi();
            hier(x).routes.done(t, true);
            return rc;
        }
        Err(e) => return e.0,
    };
    if trial.is_none() {
        return smelt(x);
    }
    let made = hier(x).trees_made();
    let rc = smelt(x);
    let h = hier(x);
    // A trial that made a tree for a new root timed the making too: not kept.
    let keep = h.trees_made() == made;
    h.routes.done(trial, keep);
    rc
}

/// [`routed`]'s `hier` for a held communicator.
pub(crate) fn held(h: &mut Held) -> &mut comm::Hier {
    h
}

/// The outcome of a hierarchical collective: success, an MPI error code for the
/// caller, or (smelt failed inside a node) the job aborted.
#[inline(always)]
fn finish(r: Result<(), Fail>, call: Call, comm: MPI_Comm, h: &comm::Hier) -> c_int {
    match r {
        Ok(()) => {
            stats::taken(call);
            ffi::success()
        }
        Err(e) => failed(e, call, comm, h),
    }
}

/// [`finish`] of a call that failed.
#[cold]
#[inline(never)]
fn failed(e: Fail, call: Call, comm: MPI_Comm, h: &comm::Hier) -> c_int {
    match e {
        Fail::Mpi(e) => e.0,
        Fail::Smelt(e) => {
            let e = e.to_string();
            let hint = if e.contains("timed out") {
                "; SMELT_MPI_TIMEOUT (seconds) raises the limit"
            } else {
                ""
            };
            ffi::abort(
                comm,
                &format!(
                    "rank {}: {} over smelt failed: {e} (smelt's members 0, 1, ... of this node are ranks {:?} of the communicator){hint}",
                    h.rank,
                    call.name(),
                    h.node_ranks()
                ),
            )
        }
    }
}

/// How a datatype's bytes lie in a buffer, for a broadcast.
enum Layout {
    /// `count × size` bytes starting this many bytes into the buffer.
    Contiguous(isize),
    /// Elsewhere: packed with MPI_Pack, unpacked with MPI_Unpack.
    Packed,
}

/// The last predefined datatype (and datatype and operation) a communicator's calls
/// used, with what [`layout`] (and [`kernel`]) made of them: programs repeat them call
/// after call, so the lookups run once, not on every call. Only MPI's predefined
/// handles are kept (they are never freed, so a handle always means the same type).
#[derive(Debug, Default)]
pub struct Kinds {
    /// A predefined datatype of numbers or bytes, and its size.
    ty: Option<(usize, usize)>,
    /// A predefined datatype and operation, and their kernel and element size.
    kernel: Option<(usize, usize, ops::Combine, usize)>,
}

impl Kinds {
    /// [`layout`] of `dt`, from the memo where it holds `dt`.
    #[inline(always)]
    fn layout(
        &mut self,
        dt: MPI_Datatype,
        buf: *const c_void,
    ) -> Result<Option<(usize, Layout)>, ffi::MpiErr> {
        let key = dt.0 as usize;
        if let Some((k, size)) = self.ty {
            if k == key {
                return Ok(Some((size, Layout::Contiguous(0))));
            }
        }
        let r = layout(dt, buf)?;
        if let Some((size, Layout::Contiguous(0))) = r {
            if ffi::type_class(dt).0 != ffi::T_DERIVED && ffi::type_class(dt).0 != ffi::T_OTHER {
                self.ty = Some((key, size));
            }
        }
        Ok(r)
    }

    /// The memo's element size for `dt` if it holds `dt` (a predefined type, laid out
    /// contiguously from the buffer's start); `None`: not looked up yet.
    #[inline(always)]
    fn known_size(&self, dt: MPI_Datatype) -> Option<usize> {
        self.ty.filter(|&(k, _)| k == dt.0 as usize).map(|(_, s)| s)
    }

    /// The memo's kernel for `dt` and `op` if it holds them, and the bytes of `count`
    /// (not negative) elements.
    #[inline(always)]
    fn known_reduction(
        &self,
        dt: MPI_Datatype,
        op: MPI_Op,
        count: c_int,
    ) -> Option<(ops::Combine, usize)> {
        let (d, o, f, size) = self.kernel?;
        if (d, o) != (dt.0 as usize, op.0 as usize) {
            return None;
        }
        Some((f, size.checked_mul(usize::try_from(count).ok()?)?))
    }

    /// [`kernel`] of `dt` and `op`, from the memo where it holds them.
    #[inline(always)]
    fn kernel(&mut self, dt: MPI_Datatype, op: MPI_Op) -> Result<(ops::Combine, usize), Why> {
        let key = (dt.0 as usize, op.0 as usize);
        if let Some((d, o, f, size)) = self.kernel {
            if (d, o) == key {
                return Ok((f, size));
            }
        }
        // Only predefined types and operations have kernels.
        let (f, size) = kernel(dt, op)?;
        self.kernel = Some((key.0, key.1, f, size));
        Ok((f, size))
    }
}

/// The bytes of one element of `dt` and how `count` of them lie in memory.
fn layout(dt: MPI_Datatype, buf: *const c_void) -> Result<Option<(usize, Layout)>, ffi::MpiErr> {
    let (class, size) = ffi::type_class(dt);
    match class {
        ffi::T_NULL => Ok(None),
        ffi::T_SIGNED
        | ffi::T_UNSIGNED
        | ffi::T_FLOAT
        | ffi::T_BOOL
        | ffi::T_BYTE
        | ffi::T_CHAR => Ok(Some((size, Layout::Contiguous(0)))),
        _ => {
            // Derived, or predefined with a layout of its own (pairs, long double):
            // contiguous when its data has no holes and elements follow each other.
            let size = ffi::type_size(dt)?;
            let e = ffi::extents(dt)?;
            let dense = size > 0
                && e.true_extent == size as mpi_sys::MPI_Aint
                && e.extent == size as mpi_sys::MPI_Aint;
            // MPI_Aint is isize with Open MPI on x86-64, another integer elsewhere.
            #[allow(clippy::useless_conversion)]
            let offset = isize::try_from(e.true_lb).ok();
            Ok(Some((
                size,
                match offset {
                    Some(off) if dense && !buf.is_null() => Layout::Contiguous(off),
                    _ => Layout::Packed,
                },
            )))
        }
    }
}

/// `MPI_Bcast` through smelt where it can; `pmpi` runs the call through MPI.
///
/// # Safety
/// MPI's contract for `MPI_Bcast`.
unsafe fn bcast(
    buf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    pmpi: impl Fn() -> c_int,
) -> c_int {
    let mut h = match hier(comm, Call::Bcast, &pmpi) {
        Ok(h) => h,
        Err(rc) => return rc,
    };
    if count < 0 || root < 0 || root as usize >= h.size {
        stats::fell_back(Call::Bcast, Why::BadArgs);
        return pmpi();
    }
    if h.max_bytes[0] == 0 && count > 0 {
        stats::fell_back(Call::Bcast, Why::MpiFaster);
        return pmpi();
    }
    let (size, lay) = match h.kinds.layout(dt, buf) {
        Ok(Some(x)) => x,
        Ok(None) => {
            stats::fell_back(Call::Bcast, Why::BadArgs);
            return pmpi();
        }
        Err(e) => return e.0,
    };
    let Some(len) = size
        .checked_mul(count as usize)
        .filter(|&l| l <= h.max_bytes[0])
    else {
        stats::fell_back(Call::Bcast, Why::TooLarge);
        return pmpi();
    };
    if len == 0 {
        stats::taken(Call::Bcast);
        return ffi::success();
    }
    routed(&mut h, held, Call::Bcast, len, &pmpi, |h| {
        bcast_smelt(h, buf, count, dt, root, comm, len, lay)
    })
}

/// The rest of [`bcast`]: through smelt.
///
/// # Safety
/// MPI's contract for `MPI_Bcast`; `len` and `lay` are the call's bytes and layout.
#[allow(clippy::too_many_arguments)]
unsafe fn bcast_smelt(
    h: &mut Held,
    buf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    len: usize,
    lay: Layout,
) -> c_int {
    let rank = h.rank;
    let r = match lay {
        Layout::Contiguous(off) => {
            let data = buf.cast::<u8>().wrapping_offset(off);
            // The buffer holds `count` elements of `dt`, whose bytes are the `len` bytes at
            // `data` (readable on the root, writable elsewhere).
            // SAFETY: MPI's contract.
            unsafe { h.bcast(data, len, root as usize) }
        }
        Layout::Packed => {
            let is_root = rank == root as usize;
            let packed = if is_root {
                // SAFETY: MPI's contract: the root's buffer holds `count` elements of `dt`.
                unsafe { pack(buf, count, dt, len, comm) }
            } else {
                Ok(vec![0u8; len])
            };
            packed.and_then(|mut packed| {
                // SAFETY: `packed` is this crate's buffer of `len` bytes.
                unsafe { h.bcast(packed.as_mut_ptr(), len, root as usize) }?;
                if !is_root {
                    // SAFETY: MPI's contract: the buffer has room for `count` elements.
                    unsafe { unpack(&packed, buf, count, dt, comm) }?;
                }
                Ok(())
            })
        }
    };
    finish(r, Call::Bcast, comm, h)
}

/// `count` elements of `dt` at `buf`, packed into `k` bytes (their signature's size).
///
/// # Safety
/// `buf` holds `count` elements of `dt` (MPI's contract).
unsafe fn pack(
    buf: *const c_void,
    count: c_int,
    dt: MPI_Datatype,
    k: usize,
    comm: MPI_Comm,
) -> Result<Vec<u8>, Fail> {
    let mut out = vec![0u8; k];
    let mut pos: c_int = 0;
    // SAFETY: packs from the caller's buffer into `out` (`k` bytes).
    ffi::check(unsafe {
        mpi_sys::PMPI_Pack(
            buf,
            count,
            dt,
            out.as_mut_ptr().cast(),
            k as c_int,
            &mut pos,
            comm,
        )
    })?;
    if pos as usize != k {
        ffi::abort(
            comm,
            &format!("MPI_Pack gave {pos} bytes for a {k}-byte datatype signature (a heterogeneous MPI?)"),
        );
    }
    Ok(out)
}

/// Unpacks `bytes` into `count` elements of `dt` at `buf`.
///
/// # Safety
/// `buf` has room for `count` elements of `dt` (MPI's contract).
unsafe fn unpack(
    bytes: &[u8],
    buf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    comm: MPI_Comm,
) -> Result<(), Fail> {
    let mut pos: c_int = 0;
    // SAFETY: unpacks `bytes` into the caller's buffer.
    ffi::check(unsafe {
        mpi_sys::PMPI_Unpack(
            bytes.as_ptr().cast(),
            bytes.len() as c_int,
            &mut pos,
            buf,
            count,
            dt,
            comm,
        )
    })?;
    Ok(())
}

/// One side of a gather or scatter: blocks of `count` elements of `dt` at `buf`, one
/// on a rank's own side, one per rank on the root's.
#[derive(Clone, Copy)]
struct Side {
    buf: *const c_void,
    count: c_int,
    dt: MPI_Datatype,
}

impl Side {
    /// Size of one element, and whether a block's data lies as plain bytes (then: from
    /// this offset in the block); `None` for MPI_DATATYPE_NULL.
    fn blocks(&self) -> Result<Option<(usize, Option<isize>)>, ffi::MpiErr> {
        Ok(layout(self.dt, self.buf)?.map(|(size, lay)| match lay {
            Layout::Contiguous(off) => (size, Some(off)),
            Layout::Packed => (size, None),
        }))
    }

    /// Address of block `i`.
    fn block(&self, i: usize) -> Result<*const c_void, ffi::MpiErr> {
        // MPI_Aint is isize with Open MPI on x86-64, another integer elsewhere.
        #[allow(clippy::unnecessary_cast)]
        let extent = ffi::extents(self.dt)?.extent as isize;
        let step = (i as isize)
            .wrapping_mul(self.count as isize)
            .wrapping_mul(extent);
        Ok(self.buf.cast::<u8>().wrapping_offset(step).cast())
    }

    /// The `k` bytes of data of the block at `at`: copied from offset `off` in it where
    /// they lie as plain bytes, else packed.
    ///
    /// # Safety
    /// `at` holds a block (MPI's contract), `k` bytes of data.
    unsafe fn read(
        &self,
        at: *const c_void,
        off: Option<isize>,
        k: usize,
        comm: MPI_Comm,
    ) -> Result<Vec<u8>, Fail> {
        match off {
            // SAFETY: the caller's contract: `k` bytes of data from `o` in the block.
            Some(o) => Ok(unsafe { bytes_at(at, o, k) }.to_vec()),
            // SAFETY: the caller's contract: `at` holds `count` elements of `dt`.
            None => unsafe { pack(at, self.count, self.dt, k, comm) },
        }
    }

    /// Unpacks `data` into the block at `at`.
    ///
    /// # Safety
    /// `at` has room for a block (MPI's contract).
    unsafe fn write(&self, at: *mut c_void, data: &[u8], comm: MPI_Comm) -> Result<(), Fail> {
        // SAFETY: the caller's contract: room for `count` elements of `dt` at `at`.
        unsafe { unpack(data, at, self.count, self.dt, comm) }
    }
}

/// `len` bytes from `off` bytes into `at`.
///
/// # Safety
/// They are readable, and not written while the slice lives.
unsafe fn bytes_at<'a>(at: *const c_void, off: isize, len: usize) -> &'a [u8] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(at.cast::<u8>().wrapping_offset(off), len) }
}

/// `len` bytes from `off` bytes into `at`, to write.
///
/// # Safety
/// They are writable, and not otherwise used while the slice lives.
unsafe fn bytes_at_mut<'a>(at: *mut c_void, off: isize, len: usize) -> &'a mut [u8] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(at.cast::<u8>().wrapping_offset(off), len) }
}

/// The root of a gather or scatter, or why it falls back (out of range).
fn checked_root(h: &comm::Hier, root: c_int) -> Result<usize, Why> {
    if root < 0 || root as usize >= h.size {
        return Err(Why::BadArgs);
    }
    Ok(root as usize)
}

/// `PMPI_Gather` or `PMPI_Scatter` (the same arguments).
type RootedPmpi = unsafe extern "C" fn(
    *const c_void,
    c_int,
    MPI_Datatype,
    *mut c_void,
    c_int,
    MPI_Datatype,
    c_int,
    MPI_Comm,
) -> c_int;

/// The arguments of one `MPI_Gather` or `MPI_Scatter` call (made only by
/// `rooted_call!`'s functions, under MPI's contract for them), and the steps both calls take.
#[derive(Clone, Copy)]
struct Rooted {
    call: Call,
    pmpi: RootedPmpi,
    send: Side,
    /// `buf` is the caller's `*mut` receive buffer.
    recv: Side,
    root: c_int,
    comm: MPI_Comm,
}

/// A gather or scatter that smelt runs, its arguments checked.
struct Plan {
    h: Held,
    root: usize,
    /// Ranks.
    n: usize,
    is_root: bool,
    in_place: bool,
    /// Bytes of data per rank.
    k: usize,
    /// Where this rank's per-rank side has its data as plain bytes.
    off: Option<isize>,
    /// Where the root's receive blocks (where checked) have their data as plain bytes.
    roff: Option<isize>,
}

impl Rooted {
    /// Runs the call through MPI alone: smelt off, else `run` under [`guard`] (`name`
    /// the call's MPI name).
    fn take_over(self, name: &str, run: fn(Rooted) -> c_int) -> c_int {
        take_over(name, || self.pmpi(), || run(self))
    }

    /// MPI runs the call.
    fn pmpi(&self) -> c_int {
        let (s, r) = (self.send, self.recv);
        // SAFETY: the caller's arguments, passed on unchanged (`rooted_call!`).
        unsafe {
            (self.pmpi)(
                s.buf,
                s.count,
                s.dt,
                r.buf.cast_mut(),
                r.count,
                r.dt,
                self.root,
                self.comm,
            )
        }
    }

    /// Counts a fall-back for `why`; MPI runs the call.
    fn fell(&self, why: Why) -> c_int {
        stats::fell_back(self.call, why);
        self.pmpi()
    }

    /// Checks the call for smelt. `sides(is_root)` says whether the call is in place,
    /// the side holding this rank's data per rank (its signature gives the bytes per
    /// rank), and whether the root's receive side must hold blocks of as many bytes.
    /// `Err`: the call's return code without smelt (MPI ran it, an MPI error, or
    /// nothing to move); fall-backs are counted.
    fn plan(
        &self,
        max_bytes_at: usize,
        sides: impl FnOnce(bool) -> (bool, Side, bool),
    ) -> Result<Plan, c_int> {
        let h = hier(self.comm, self.call, || self.pmpi())?;
        let root = checked_root(&h, self.root).map_err(|why| self.fell(why))?;
        let (n, is_root) = (h.size, h.rank == root);
        let (in_place, mine, check_recv) = sides(is_root);
        let (sz, off) = match mine.blocks() {
            Ok(Some(x)) => x,
            Ok(None) => return Err(self.fell(Why::BadArgs)),
            Err(e) => return Err(e.0),
        };
        if mine.count < 0 || (check_recv && self.recv.count < 0) {
            return Err(self.fell(Why::BadArgs));
        }
        let k = sz * mine.count as usize;
        // The root's receive blocks: `k` bytes of data each (else the arguments are
        // wrong: MPI says how).
        let mut roff = None;
        if check_recv {
            match self.recv.blocks() {
                Ok(Some((rsz, o))) if rsz * self.recv.count as usize == k => roff = o,
                Ok(_) => return Err(self.fell(Why::BadArgs)),
                Err(e) => return Err(e.0),
            }
        }
        // The leaders' MPI_Gatherv/MPI_Scatterv count bytes in C ints.
        let fits = k.checked_mul(n).is_some_and(|t| t <= c_int::MAX as usize);
        if k > h.max_bytes[max_bytes_at] || !fits {
            return Err(self.fell(Why::TooLarge));
        }
        if k == 0 {
            stats::taken(self.call);
            return Err(ffi::success());
        }
        Ok(Plan {
            h,
            root,
            n,
            is_root,
            in_place,
            k,
            off,
            roff,
        })
    }

    /// Runs the call: through smelt with `body` where [`Rooted::plan`] (given
    /// `max_bytes_at` and `sides`) allows, else through MPI. `body` returns
    /// `Ok(false)` where there is no tree for this root: MPI runs the call.
    fn run(
        &self,
        max_bytes_at: usize,
        sides: impl FnOnce(bool) -> (bool, Side, bool),
        body: impl FnOnce(&mut Plan) -> Result<bool, Fail>,
    ) -> c_int {
        let mut p = match self.plan(max_bytes_at, sides) {
            Ok(p) => p,
            Err(rc) => return rc,
        };
        let k = p.k;
        routed(
            &mut p,
            |p| &mut p.h,
            self.call,
            k,
            || self.pmpi(),
            |p| match body(p) {
                Ok(true) => finish(Ok(()), self.call, self.comm, &p.h),
                Ok(false) => self.fell(Why::NoTree),
                Err(e) => finish(Err(e), self.call, self.comm, &p.h),
            },
        )
    }
}

fn gather(c: Rooted) -> c_int {
    let sides = |is_root| {
        let in_place = is_root && c.send.buf == ffi::in_place().cast_const();
        // Bytes per rank: the send signature (the receive one on an in-place root);
        // the root receives as many from each rank.
        (in_place, if in_place { c.recv } else { c.send }, is_root)
    };
    c.run(3, sides, |p| {
        let (root, n, k) = (p.root, p.n, p.k);
        // This rank's part.
        let (side, at) = if p.in_place {
            (c.recv, c.recv.block(root)?)
        } else {
            (c.send, c.send.buf)
        };
        // MPI's contract: the send buffer (the root's block of the receive
        // buffer, in place) holds a block: `k` bytes of data.
        // SAFETY: as argued in the lines above.
        let mine = unsafe { side.read(at, p.off, k, c.comm) }?;
        if !p.is_root {
            return p.h.gather(&mine, &mut [], root);
        }
        match p.roff {
            Some(o) => {
                // SAFETY: MPI's contract: room for n blocks of `k` bytes, back to back (a dense datatype), from `o`.
                let out = unsafe { bytes_at_mut(c.recv.buf.cast_mut(), o, n * k) };
                p.h.gather(&mine, out, root)
            }
            None => {
                let mut all = vec![0u8; n * k];
                if !p.h.gather(&mine, &mut all, root)? {
                    return Ok(false);
                }
                for i in (0..n).filter(|&i| !(p.in_place && i == root)) {
                    let at = c.recv.block(i)?.cast_mut();
                    // SAFETY: MPI's contract: block `i` has room for `rcount` elements.
                    unsafe { c.recv.write(at, &all[i * k..(i + 1) * k], c.comm) }?;
                }
                Ok(true)
            }
        }
    })
}

fn scatter(c: Rooted) -> c_int {
    let sides = |is_root| {
        let in_place = is_root && c.recv.buf == ffi::in_place().cast_const();
        // Bytes per rank: the receive signature (the send one on the root); the root's
        // own part goes to its receive buffer unless in place.
        let mine = if is_root { c.send } else { c.recv };
        (in_place, mine, is_root && !in_place)
    };
    c.run(4, sides, |p| {
        let (root, n, k) = (p.root, p.n, p.k);
        // The root's parts, by rank.
        let packed;
        let all: &[u8] = if !p.is_root {
            &[]
        } else if let Some(o) = p.off {
            // MPI's contract: n blocks of `k` bytes back to back (a dense
            // datatype) from `o` in the send buffer.
            // SAFETY: as argued in the lines above.
            unsafe { bytes_at(c.send.buf, o, n * k) }
        } else {
            let mut v = Vec::with_capacity(n * k);
            for i in 0..n {
                let at = c.send.block(i)?;
                // SAFETY: MPI's contract: block `i` holds `scount` elements.
                v.extend(unsafe { c.send.read(at, None, k, c.comm) }?);
            }
            packed = v;
            &packed
        };
        // This rank's part.
        let direct = if p.is_root { p.roff } else { p.off };
        let recv = c.recv.buf.cast_mut();
        match direct {
            Some(o) => {
                // SAFETY: MPI's contract: room for `k` bytes of data at `o`.
                let mine = unsafe { bytes_at_mut(recv, o, k) };
                p.h.scatter(all, mine, root)
            }
            None => {
                let mut mine = vec![0u8; k];
                if !p.h.scatter(all, &mut mine, root)? {
                    return Ok(false);
                }
                if !p.in_place {
                    // SAFETY: MPI's contract: room for `rcount` elements of `rtype`.
                    unsafe { c.recv.write(recv, &mine, c.comm) }?;
                }
                Ok(true)
            }
        }
    })
}

/// The kernel for a reduction, or why MPI does it.
fn kernel(dt: MPI_Datatype, op: MPI_Op) -> Result<(ops::Combine, usize), Why> {
    let op = match ffi::op_class(op) {
        c @ 1..=10 => ops::MpiOp::ALL[c as usize - 1],
        0 => return Err(Why::UserOp),
        11 => return Err(Why::LocOp),
        _ => return Err(Why::OtherOp),
    };
    let (class, size) = ffi::type_class(dt);
    let elem = match class {
        ffi::T_SIGNED | ffi::T_FINT => Elem::signed(size),
        ffi::T_UNSIGNED => Elem::unsigned(size),
        ffi::T_FLOAT => Elem::float(size),
        ffi::T_BOOL if size == 1 => Some(Elem::Bool),
        ffi::T_BYTE => Some(Elem::Byte),
        ffi::T_DERIVED => return Err(Why::Derived),
        ffi::T_NULL => return Err(Why::BadArgs),
        // MPI_CHAR (a character, not a number), pairs, long double, complex, ...
        ffi::T_CHAR | ffi::T_OTHER => None,
        _ => None,
    }
    .ok_or(Why::TypeNotSupported)?;
    // Fortran INTEGER has no logical operations in MPI (LOGICAL has them).
    let logical = matches!(op, ops::MpiOp::Land | ops::MpiOp::Lor | ops::MpiOp::Lxor);
    if class == ffi::T_FINT && logical {
        return Err(Why::OpNotForType);
    }
    let f = ops::combiner(elem, op).ok_or(Why::OpNotForType)?;
    Ok((f, elem.size()))
}

/// The reduction a reduce or allreduce (`call`) of `count` (not negative) elements of
/// `dt` under `op` runs through smelt, and its size in bytes (at most `max`); `Err`: the
/// call's return code without smelt (a fall-back, counted, runs `pmpi`; or nothing to
/// move).
#[allow(clippy::too_many_arguments)]
fn reduction(
    kinds: &mut Kinds,
    call: Call,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    max: usize,
    pmpi: impl Fn() -> c_int,
) -> Result<(Reduction, usize), c_int> {
    let fell = |why| {
        stats::fell_back(call, why);
        pmpi()
    };
    let (combine, esize) = kinds.kernel(dt, op).map_err(fell)?;
    let Some(len) = esize.checked_mul(count as usize).filter(|&l| l <= max) else {
        return Err(fell(Why::TooLarge));
    };
    if len == 0 {
        stats::taken(call);
        return Err(ffi::success());
    }
    let red = Reduction {
        count,
        dt,
        op,
        combine,
    };
    Ok((red, len))
}

/// `MPI_Reduce` through smelt where it can; `pmpi` runs the call through MPI.
///
/// # Safety
/// MPI's contract for `MPI_Reduce`.
#[allow(clippy::too_many_arguments)]
unsafe fn reduce(
    send: *const c_void,
    recv: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    comm: MPI_Comm,
    pmpi: impl Fn() -> c_int,
) -> c_int {
    let mut h = match hier(comm, Call::Reduce, &pmpi) {
        Ok(h) => h,
        Err(rc) => return rc,
    };
    let is_root = root >= 0 && root as usize == h.rank;
    let in_place = send == ffi::in_place().cast_const();
    if count < 0 || root < 0 || root as usize >= h.size || (in_place && !is_root) {
        stats::fell_back(Call::Reduce, Why::BadArgs);
        return pmpi();
    }
    let max = h.max_bytes[1];
    let (red, len) = match reduction(&mut h.kinds, Call::Reduce, count, dt, op, max, &pmpi) {
        Ok(x) => x,
        Err(rc) => return rc,
    };
    let input = if in_place { recv.cast_const() } else { send };
    routed(&mut h, held, Call::Reduce, len, &pmpi, |h| {
        // MPI's contract: `input` holds `count` elements of `dt` (`len` bytes);
        // the root's `recv` has room for as many.
        // SAFETY: as argued in the lines above.
        let r = unsafe { h.reduce(input.cast(), recv.cast(), len, red, root as usize) };
        finish(r, Call::Reduce, comm, h)
    })
}

/// `MPI_Allreduce` through smelt where it can; `pmpi` runs the call through MPI.
///
/// # Safety
/// MPI's contract for `MPI_Allreduce`.
unsafe fn allreduce(
    send: *const c_void,
    recv: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    pmpi: impl Fn() -> c_int,
) -> c_int {
    let mut h = match hier(comm, Call::Allreduce, &pmpi) {
        Ok(h) => h,
        Err(rc) => return rc,
    };
    if count < 0 {
        stats::fell_back(Call::Allreduce, Why::BadArgs);
        return pmpi();
    }
    let max = h.max_bytes[2];
    let (red, len) = match reduction(&mut h.kinds, Call::Allreduce, count, dt, op, max, &pmpi) {
        Ok(x) => x,
        Err(rc) => return rc,
    };
    routed(&mut h, held, Call::Allreduce, len, &pmpi, |h| {
        if send != ffi::in_place().cast_const() {
            // MPI's contract: both buffers hold `count` elements of `dt`; `copy`
            // tolerates the (erroneous but common) case of equal buffers.
            // SAFETY: as argued in the lines above.
            unsafe { std::ptr::copy(send.cast::<u8>(), recv.cast::<u8>(), len) };
        }
        // SAFETY: `recv` holds `len` bytes this call may read and write.
        let acc = unsafe { std::slice::from_raw_parts_mut(recv.cast::<u8>(), len) };
        let r = h.allreduce(acc, red);
        finish(r, Call::Allreduce, comm, h)
    })
}

/// `MPI_Barrier` through smelt where it can; `pmpi` runs the call through MPI.
fn barrier(comm: MPI_Comm, pmpi: impl Fn() -> c_int) -> c_int {
    let mut h = match hier(comm, Call::Barrier, &pmpi) {
        Ok(h) => h,
        Err(rc) => return rc,
    };
    routed(&mut h, held, Call::Barrier, 0, &pmpi, |h| {
        let r = h.barrier();
        finish(r, Call::Barrier, comm, h)
    })
}

/// The express lane: `f` on the hierarchy of `comm` when `comm` is the communicator
/// looked up last (`LAST_*`, while calls are serialized; this thread's, under
/// MPI_THREAD_MULTIPLE: [`express_threaded`]), smelt runs it and no non-blocking
/// operation is pending anywhere (those come first: the general
/// path settles them). `f` returns `None` where the call needs the general path (a
/// datatype or size not seen on this communicator's last calls, a class still
/// measuring, a tree not made yet, several nodes); the express lane then did nothing.
/// Calls its checks send to MPI (the cut-off, the measurements) go there from it. Every rank reaches the same trees either way, so ranks may take
/// different lanes for one call.
///
/// Small collectives called back to back spend about half their time in the general
/// path's layers (state, checks, routing, staging: ~300 instructions of ~500 for an
/// 8-byte MPI_Reduce on the root, counted by callgrind); the lane skips them.
#[inline(always)]
fn express(comm: MPI_Comm, f: impl FnOnce(&mut comm::Hier) -> Option<c_int>) -> Option<c_int> {
    let key = comm_key(comm);
    let last = LAST_STATE.load(Ordering::Relaxed);
    if !last.is_null() && LAST_COMM.load(Ordering::Relaxed) == key {
        if nonblocking::pending() {
            return None;
        }
        // SAFETY: `LAST_STATE` is live (cleared when freed) and set only while calls are serialized.
        let st = unsafe { &*last };
        // SAFETY: calls are serialized: this thread is the only one using the state.
        return unsafe { if_set_up(st, f) };
    }
    express_threaded(key, f)
}

/// `f` on `st`'s hierarchy if smelt runs its communicator, else `None`.
///
/// # Safety
/// The calling thread is the only one using `st`'s mode now (calls serialized, or the
/// state's busy flag held).
#[inline(always)]
unsafe fn if_set_up(
    st: &CommState,
    f: impl FnOnce(&mut comm::Hier) -> Option<c_int>,
) -> Option<c_int> {
    // SAFETY: the caller's guarantee: no other reference to the mode exists.
    match unsafe { &mut *st.mode.get() } {
        Takeover::On(h) => f(h),
        _ => None,
    }
}

/// [`express`] under MPI_THREAD_MULTIPLE: the state from this thread's memory of its
/// last communicator ([`MINE`], valid while no state was freed since), held for the
/// call by its busy flag as the general path holds it (another thread in a collective
/// on it: the general path, which says so and goes to MPI). The attribute lookup
/// this skips is MPI's hash table under its lock: 245 of the 690 instructions an
/// 8-byte MPI_Bcast took on the root that way (callgrind).
#[inline(never)]
fn express_threaded(key: usize, f: impl FnOnce(&mut comm::Hier) -> Option<c_int>) -> Option<c_int> {
    let (k, st, freed) = MINE.with(|m| m.get());
    if k != key || st.is_null() || freed != FREED.load(Ordering::Acquire) {
        return None;
    }
    if nonblocking::pending() {
        return None;
    }
    // Looked up by this thread for this handle, no state freed since (the count), and
    // MPI forbids freeing it during this call.
    // SAFETY: a live state, as argued above.
    let st = unsafe { &*st };
    if !nonblocking::acquire(&st.busy) {
        return None;
    }
    // SAFETY: this thread holds the state's busy flag: the only one using its mode.
    let r = unsafe { if_set_up(st, f) };
    st.busy.store(false, Ordering::Release);
    r
}

/// The express lane's way for a call of `bytes` that smelt may take by its cut-off
/// (`max`): `Some(true)` smelt's, `Some(false)` MPI's (counted as the general path
/// counts it), `None` a class still measuring (the general path times it).
#[inline(always)]
fn express_way(h: &comm::Hier, call: Call, bytes: usize, max: usize) -> Option<bool> {
    if bytes > max {
        stats::fell_back(call, Why::TooLarge);
        return Some(false);
    }
    let way = h.routes.decided(call, bytes)?;
    if !way {
        stats::fell_back(call, Why::MeasuredFaster);
    }
    Some(way)
}

/// The hot lane: a call the express lane ran before on the same communicator, with
/// the same datatype, count, root and operation ([`comm::HotCall`]), runs again after
/// one compare of those, without the express lane's checks. The `MPI_*` functions try
/// it first, before [`take_over`]'s closures are built: on an 8-byte broadcast called
/// back to back, the checks and that setting-up were about 110 of the 285
/// instructions a call took on the root (callgrind). It runs outside [`guard`]: it
/// calls only smelt's collectives on a tree already made, which report failures as
/// errors (to [`finish`]); a panic there (a bug) aborts the process with its message,
/// as Rust does for a panic that would leave an `extern "C"` function.
///
/// # Safety
/// MPI's contract for `MPI_Bcast`.
#[inline(always)]
unsafe fn bcast_hot(
    h: &mut comm::Hier,
    buf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> Option<c_int> {
    if buf.is_null() {
        return None;
    }
    // The remembered call had this datatype and count (so this length), and this
    // root: MPI's contract for it holds for this buffer as in `bcast_express`.
    // SAFETY: as argued in the lines above.
    let r = unsafe { h.hot_bcast(comm::hot_key(dt, 0, count, root), buf.cast()) }?;
    stats::express(Call::Bcast);
    Some(finish(r, Call::Bcast, comm, h))
}

/// [`bcast_hot`] for `MPI_Reduce` (not in place, as in [`reduce_express`]).
///
/// # Safety
/// MPI's contract for `MPI_Reduce`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn reduce_hot(
    h: &mut comm::Hier,
    send: *const c_void,
    recv: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    comm: MPI_Comm,
) -> Option<c_int> {
    if send == ffi::in_place().cast_const() {
        return None;
    }
    let key = comm::hot_key(dt, op.0 as usize, count, root);
    // As in `bcast_hot`: the remembered call's length, the contract of `reduce_express`.
    // SAFETY: as argued in the lines above.
    let r = unsafe { h.hot_reduce(key, send.cast(), recv.cast()) }?;
    stats::express(Call::Reduce);
    Some(finish(r, Call::Reduce, comm, h))
}

/// [`bcast_hot`] for `MPI_Allreduce` (in place or not, as in [`allreduce_express`]).
///
/// # Safety
/// MPI's contract for `MPI_Allreduce`.
#[inline(always)]
unsafe fn allreduce_hot(
    h: &mut comm::Hier,
    send: *const c_void,
    recv: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> Option<c_int> {
    let (len, combine) = h.hot_allreduce(comm::hot_key(dt, op.0 as usize, count, 0))?;
    if send != ffi::in_place().cast_const() {
        // SAFETY: as in `allreduce` (`len` bytes: the remembered call's datatype and count).
        unsafe { std::ptr::copy(send.cast::<u8>(), recv.cast::<u8>(), len) };
    }
    // SAFETY: `recv` holds `len` bytes this call may read and write.
    let acc = unsafe { std::slice::from_raw_parts_mut(recv.cast::<u8>(), len) };
    let r = h.run_allreduce(acc, combine);
    stats::express(Call::Allreduce);
    Some(finish(r, Call::Allreduce, comm, h))
}

/// [`bcast_hot`] for `MPI_Barrier`.
#[inline(always)]
fn barrier_hot(h: &mut comm::Hier, comm: MPI_Comm) -> Option<c_int> {
    if !h.hot_barrier() {
        return None;
    }
    let r = h.barrier_one_node();
    stats::express(Call::Barrier);
    Some(finish(r, Call::Barrier, comm, h))
}

/// The hierarchy of `comm` where the serialized express lane would run (see
/// [`express`]): `comm` is the communicator looked up last, smelt runs it and nothing
/// non-blocking is pending.
///
/// # Safety
/// Only for the current MPI call (no other reference to the state is made meanwhile:
/// `LAST_STATE` is set only while calls are serialized).
#[inline(always)]
pub(crate) unsafe fn last_hier<'a>(comm: MPI_Comm) -> Option<&'a mut comm::Hier> {
    let last = LAST_STATE.load(Ordering::Relaxed);
    if last.is_null()
        || LAST_COMM.load(Ordering::Relaxed) != comm_key(comm)
        || nonblocking::pending()
    {
        return None;
    }
    // SAFETY: `LAST_STATE` is live (cleared when freed) and set only while calls are
    // serialized: this call is the only user of its mode.
    match unsafe { &mut *(*last).mode.get() } {
        Takeover::On(h) => Some(h),
        _ => None,
    }
}

/// [`express`] for `MPI_Reduce`: of at most [`comm::SMALL`] bytes through smelt
/// ([`comm::Hier::reduce_small`]), or to MPI (`pmpi`) where the cut-off or the
/// measurements send it.
///
/// # Safety
/// MPI's contract for `MPI_Reduce`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn reduce_express(
    send: *const c_void,
    recv: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    comm: MPI_Comm,
    pmpi: impl FnOnce() -> c_int,
) -> Option<c_int> {
    express(comm, |h| {
        // As in `bcast_express`.
        // SAFETY: the caller upholds MPI's contract.
        if let Some(rc) = unsafe { reduce_hot(h, send, recv, count, dt, op, root, comm) } {
            return Some(rc);
        }
        let (combine, len) = h.kinds.known_reduction(dt, op, count)?;
        let root = usize::try_from(root).ok().filter(|&r| r < h.size)?;
        if len == 0 || send == ffi::in_place().cast_const() {
            return None;
        }
        if !express_way(h, Call::Reduce, len, h.max_bytes[1])? {
            return Some(pmpi());
        }
        if len > comm::SMALL {
            return None;
        }
        // MPI's contract: `send` holds `count` elements of `dt` (`len` bytes);
        // the root's `recv` has room for as many.
        // SAFETY: as argued in the lines above.
        let key = comm::hot_key(dt, op.0 as usize, count, root as c_int);
        let r = unsafe { h.reduce_small(send.cast(), recv.cast(), len, combine, root, key) }?;
        stats::express(Call::Reduce);
        Some(finish(r, Call::Reduce, comm, h))
    })
}

/// [`express`] for `MPI_Bcast`: of at most [`comm::SMALL`] bytes through smelt
/// ([`comm::Hier::bcast_small`]), or to MPI as [`reduce_express`].
///
/// # Safety
/// MPI's contract for `MPI_Bcast`.
#[inline(always)]
unsafe fn bcast_express(
    buf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    pmpi: impl FnOnce() -> c_int,
) -> Option<c_int> {
    express(comm, |h| {
        // Under MPI_THREAD_MULTIPLE the hot lane is tried here (the express lane's
        // state is this thread's, held by its busy flag).
        // SAFETY: the caller upholds MPI's contract.
        if let Some(rc) = unsafe { bcast_hot(h, buf, count, dt, root, comm) } {
            return Some(rc);
        }
        // Broadcasts MPI runs faster here (more ranks than CPUs: the cut-off is 0) go
        // to it from here, as the general path sends them, without its layers.
        if h.max_bytes[0] == 0 && count > 0 && root >= 0 && (root as usize) < h.size {
            stats::fell_back(Call::Bcast, Why::MpiFaster);
            return Some(pmpi());
        }
        let size = h.kinds.known_size(dt)?;
        let len = size.checked_mul(usize::try_from(count).ok()?)?;
        let root = usize::try_from(root).ok().filter(|&r| r < h.size)?;
        if len == 0 || buf.is_null() || h.max_bytes[0] == 0 {
            return None;
        }
        if !express_way(h, Call::Bcast, len, h.max_bytes[0])? {
            return Some(pmpi());
        }
        if len > comm::SMALL {
            return None;
        }
        // MPI's contract: `buf` holds `count` elements of `dt`, the `len` bytes
        // at its start (a predefined type): readable on the root, writable elsewhere.
        // SAFETY: as argued in the lines above.
        let key = comm::hot_key(dt, 0, count, root as c_int);
        let r = unsafe { h.bcast_small(buf.cast(), len, root, key) }?;
        stats::express(Call::Bcast);
        Some(finish(r, Call::Bcast, comm, h))
    })
}

/// [`express`] for `MPI_Allreduce`: on one node through smelt
/// ([`comm::Hier::allreduce`]), or to MPI as [`reduce_express`].
///
/// # Safety
/// MPI's contract for `MPI_Allreduce`.
#[inline(always)]
unsafe fn allreduce_express(
    send: *const c_void,
    recv: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    pmpi: impl FnOnce() -> c_int,
) -> Option<c_int> {
    express(comm, |h| {
        // As in `bcast_express`.
        // SAFETY: the caller upholds MPI's contract.
        if let Some(rc) = unsafe { allreduce_hot(h, send, recv, count, dt, op, comm) } {
            return Some(rc);
        }
        let (combine, len) = h.kinds.known_reduction(dt, op, count)?;
        if len == 0 {
            return None;
        }
        if !express_way(h, Call::Allreduce, len, h.max_bytes[2])? {
            return Some(pmpi());
        }
        if !h.on_one_node() {
            return None;
        }
        if send != ffi::in_place().cast_const() {
            // SAFETY: as in `allreduce`.
            unsafe { std::ptr::copy(send.cast::<u8>(), recv.cast::<u8>(), len) };
        }
        // SAFETY: `recv` holds `len` bytes this call may read and write.
        let acc = unsafe { std::slice::from_raw_parts_mut(recv.cast::<u8>(), len) };
        let r = h.allreduce_one_node(acc, combine, comm::hot_key(dt, op.0 as usize, count, 0));
        stats::express(Call::Allreduce);
        Some(finish(r, Call::Allreduce, comm, h))
    })
}

/// [`express`] for `MPI_Barrier`: on one node through smelt, or to MPI as
/// [`reduce_express`].
#[inline(always)]
fn barrier_express(comm: MPI_Comm, pmpi: impl FnOnce() -> c_int) -> Option<c_int> {
    express(comm, |h| {
        if let Some(rc) = barrier_hot(h, comm) {
            return Some(rc);
        }
        if !h.routes.decided(Call::Barrier, 0)? {
            stats::fell_back(Call::Barrier, Why::MeasuredFaster);
            return Some(pmpi());
        }
        if !h.on_one_node() {
            return None;
        }
        let r = h.barrier_one_node();
        stats::express(Call::Barrier);
        Some(finish(r, Call::Barrier, comm, h))
    })
}

/// `MPI_Bcast`, taken over (see the crate documentation).
///
/// # Safety
/// MPI's contract for `MPI_Bcast`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Bcast(
    buf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    // SAFETY: used for this call only; the caller upholds MPI's contract.
    if let Some(h) = unsafe { last_hier(comm) } {
        // SAFETY: as above.
        if let Some(rc) = unsafe { bcast_hot(h, buf, count, dt, root, comm) } {
            return rc;
        }
    }
    // SAFETY: the caller upholds MPI's contract.
    unsafe { bcast_entry(buf, count, dt, root, comm) }
}

/// `MPI_Bcast` past the hot lane (out of line: the hot lane's caller then saves no
/// registers for it).
///
/// # Safety
/// MPI's contract for `MPI_Bcast`.
#[inline(never)]
unsafe fn bcast_entry(
    buf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Bcast(buf, count, dt, root, comm) };
    // SAFETY: the caller upholds MPI's contract.
    take_over("MPI_Bcast", pmpi, || unsafe {
        bcast_express(buf, count, dt, root, comm, pmpi)
            .unwrap_or_else(|| bcast(buf, count, dt, root, comm, pmpi))
    })
}

/// `MPI_Reduce`, taken over (see the crate documentation).
///
/// # Safety
/// MPI's contract for `MPI_Reduce`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce(
    send: *const c_void,
    recv: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    // SAFETY: used for this call only; the caller upholds MPI's contract.
    if let Some(h) = unsafe { last_hier(comm) } {
        // SAFETY: as above.
        if let Some(rc) = unsafe { reduce_hot(h, send, recv, count, dt, op, root, comm) } {
            return rc;
        }
    }
    // SAFETY: the caller upholds MPI's contract.
    unsafe { reduce_entry(send, recv, count, dt, op, root, comm) }
}

/// `MPI_Reduce` past the hot lane (as [`bcast_entry`]).
///
/// # Safety
/// MPI's contract for `MPI_Reduce`.
#[inline(never)]
unsafe fn reduce_entry(
    send: *const c_void,
    recv: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Reduce(send, recv, count, dt, op, root, comm) };
    // SAFETY: the caller upholds MPI's contract.
    take_over("MPI_Reduce", pmpi, || unsafe {
        reduce_express(send, recv, count, dt, op, root, comm, pmpi)
            .unwrap_or_else(|| reduce(send, recv, count, dt, op, root, comm, pmpi))
    })
}

/// `MPI_Allreduce`, taken over (see the crate documentation).
///
/// # Safety
/// MPI's contract for `MPI_Allreduce`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Allreduce(
    send: *const c_void,
    recv: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> c_int {
    // SAFETY: used for this call only; the caller upholds MPI's contract.
    if let Some(h) = unsafe { last_hier(comm) } {
        // SAFETY: as above.
        if let Some(rc) = unsafe { allreduce_hot(h, send, recv, count, dt, op, comm) } {
            return rc;
        }
    }
    // SAFETY: the caller upholds MPI's contract.
    unsafe { allreduce_entry(send, recv, count, dt, op, comm) }
}

/// `MPI_Allreduce` past the hot lane (as [`bcast_entry`]).
///
/// # Safety
/// MPI's contract for `MPI_Allreduce`.
#[inline(never)]
unsafe fn allreduce_entry(
    send: *const c_void,
    recv: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Allreduce(send, recv, count, dt, op, comm) };
    // SAFETY: the caller upholds MPI's contract.
    take_over("MPI_Allreduce", pmpi, || unsafe {
        allreduce_express(send, recv, count, dt, op, comm, pmpi)
            .unwrap_or_else(|| allreduce(send, recv, count, dt, op, comm, pmpi))
    })
}

/// `MPI_Barrier`, taken over (see the crate documentation).
///
/// # Safety
/// MPI's contract for `MPI_Barrier`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Barrier(comm: MPI_Comm) -> c_int {
    // SAFETY: used for this call only.
    if let Some(h) = unsafe { last_hier(comm) } {
        if let Some(rc) = barrier_hot(h, comm) {
            return rc;
        }
    }
    barrier_entry(comm)
}

/// `MPI_Barrier` past the hot lane (as [`bcast_entry`]).
#[inline(never)]
fn barrier_entry(comm: MPI_Comm) -> c_int {
    // SAFETY: the caller's argument, passed on unchanged.
    let pmpi = || unsafe { mpi_sys::PMPI_Barrier(comm) };
    take_over("MPI_Barrier", pmpi, || {
        barrier_express(comm, pmpi).unwrap_or_else(|| barrier(comm, pmpi))
    })
}

/// Defines `MPI_Gather` and `MPI_Scatter` (the same arguments): `$name` runs `$run` on
/// the call's [`Rooted`] arguments, with `PMPI_$call` as the fall-back.
macro_rules! rooted_call {
    ($(#[$doc:meta])* $name:ident, $pmpi:ident, $call:ident, $run:ident) => {
        $(#[$doc])*
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $name(
            send: *const c_void,
            scount: c_int,
            stype: MPI_Datatype,
            recv: *mut c_void,
            rcount: c_int,
            rtype: MPI_Datatype,
            root: c_int,
            comm: MPI_Comm,
        ) -> c_int {
            let c = Rooted {
                call: Call::$call,
                pmpi: mpi_sys::$pmpi,
                send: Side { buf: send, count: scount, dt: stype },
                recv: Side { buf: recv.cast_const(), count: rcount, dt: rtype },
                root,
                comm,
            };
            c.take_over(stringify!($name), $run)
        }
    };
}

rooted_call!(
    /// `MPI_Gather`, taken over (see the crate documentation).
    ///
    /// # Safety
    /// MPI's contract for `MPI_Gather`.
    MPI_Gather, PMPI_Gather, Gather, gather
);

rooted_call!(
    /// `MPI_Scatter`, taken over (see the crate documentation).
    ///
    /// # Safety
    /// MPI's contract for `MPI_Scatter`.
    MPI_Scatter, PMPI_Scatter, Scatter, scatter
);

/// `MPI_Finalize`: releases every communicator's smelt state (shared memory included),
/// reports under `SMELT_MPI_VERBOSE=1` (rank 0 of MPI_COMM_WORLD), then finalizes MPI.
///
/// # Safety
/// MPI's contract for `MPI_Finalize`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Finalize() -> c_int {
    let cfg = config();
    if !cfg.off {
        guard("MPI_Finalize", || {
            release_all();
            comm::drop_spares();
            if cfg.verbose
                && smelt_mesh::mpi::rank_size::<ffi::P>(ffi::comm_world())
                    .is_ok_and(|(r, _)| r == 0)
            {
                for line in stats::summary() {
                    stats::say(&line);
                }
            }
            ffi::success()
        });
    }
    // SAFETY: finalizing MPI as the application asked.
    unsafe { mpi_sys::PMPI_Finalize() }
}
