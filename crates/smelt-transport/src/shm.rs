//! Rings in memory shared by the processes of one job (one host).
//!
//! A job's creator (a launcher such as `smelt launch`, or any program) makes one
//! segment holding every ring of the job, then starts the members; each member
//! attaches with the segment's path, the job's key and its rank, and opens its ends
//! of the rings. The same ring protocol runs as between threads ([`crate::channel`]);
//! only parking (a futex on the shared word) and failure detection differ.
//!
//! What users and admins can rely on:
//! * **Never the wrong memory.** A segment is created exclusively (`O_CREAT|O_EXCL`,
//!   `O_NOFOLLOW`) under an unguessable name (128 random bits, drawn apart from the
//!   key: listing the directory reveals no key), mode 0600. Attaching
//!   checks that the file is a regular file owned by this user with no group or other
//!   permissions, that it starts with smelt's magic and this build's layout version,
//!   and that it carries the job's 128-bit key (given to members with the path): a
//!   stale segment of a crashed job, a file planted under the name, or a member built
//!   from another smelt version each fail with a clear [`ShmError`].
//! * **Nothing left behind.** The path is unlinked as soon as every member attached
//!   (the mappings stay valid), and by the creator's handle when it is dropped, so a
//!   crash after start-up leaves nothing in `/dev/shm`. A guarded job
//!   ([`ShmJob::create_guarded`], for launchers) also loses its name when its creator
//!   dies before every member attached, even by SIGKILL.
//! * **No SIGBUS later.** Free space is checked before creating, and the file's pages
//!   are allocated at once (`posix_fallocate`): too little space is an error naming the
//!   size needed.
//! * **Dead peers are errors, not hangs.** Each member holds an open-file-description
//!   lock on a byte named by its rank for as long as its process lives; the kernel
//!   drops it when the process dies however it dies. A waiter that parks checks its
//!   peer's lock at every park timeout (at most [`WaitPolicy::park_max`], 1 ms by
//!   default) and fails with [`TransportError::PeerDied`](crate::TransportError::PeerDied).
//! * **Offsets, never pointers.** Every process maps the segment where its kernel
//!   likes; the segment holds only offsets and plain words.
//!
//! Besides rings, a segment may carry shared 64-bit words
//! ([`ShmJob::create_with_words`], [`ShmMember::words`]): memory every member reads and
//! writes directly with atomic operations (smelt-global's arrays live there).
//! A world segment's arena also holds **stages** ([`ShmMember::arena_stage`],
//! [`Stage`]): a few large buffers per direction of a link, through which long
//! messages cross in one copy instead of through a ring's 48-byte slots.
//!
//! Trust model: the processes of one job trust each other (any member can write any
//! ring of the job); nothing else is trusted, and no other user can open the segment.
//!
//! [`WaitPolicy::park_max`]: crate::WaitPolicy::park_max

mod stage;

use crate::channel::{ring_bytes, shared_ring, wake_ring, Remote, Shared};
use crate::{Abort, Consumer, Producer, QueuePairEnd, TransportError, MAX_CAPACITY};
pub use stage::{arena_stage_bytes, Stage, MAX_STAGE_BYTES, MAX_STAGE_SLOTS, STAGED_TAG};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// First bytes of every segment.
const MAGIC: [u8; 8] = *b"SMELTSHM";
/// Version of the segment layout; a member of another layout refuses to attach.
pub const LAYOUT_VERSION: u32 = 4;
/// Bytes reserved for the segment header.
const HEADER_BYTES: usize = 4096;
/// Alignment of every ring in the segment (a pair of cache lines).
const RING_ALIGN: usize = 128;
/// Alignment of the arena and of every part carved from it (a pair of cache lines).
pub const ARENA_ALIGN: usize = 128;
/// Longest failure message kept in the segment.
const FAILURE_BYTES: usize = 512;
/// Byte offset (beyond any segment's size) of member 0's liveness lock.
const LOCK_BASE: i64 = 1 << 40;
/// Largest number of members of one job.
pub const MAX_MEMBERS: u32 = 1 << 16;

/// Why a job's shared memory could not be created or attached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShmError {
    /// A system call failed.
    #[error("{what} {path}: {reason}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The segment's path.
        path: String,
        /// The OS's reason.
        reason: String,
    },
    /// Not enough free space where segments are made.
    #[error("shared memory: the job needs {needed} bytes in {dir} but only {available} are free (enlarge the tmpfs, e.g. docker --shm-size, or use fewer members / smaller rings)")]
    NoSpace {
        /// Bytes the segment needs.
        needed: u64,
        /// Bytes free.
        available: u64,
        /// The directory.
        dir: String,
    },
    /// The file is not a segment this job may use.
    #[error("{path} is not a smelt job segment this process may attach: {why}")]
    NotOurs {
        /// The path.
        path: String,
        /// Why not.
        why: String,
    },
    /// The segment was made by a smelt build with another layout.
    #[error("{path} was created by smelt {theirs} (segment layout {their_layout}); this is smelt {ours} (layout {LAYOUT_VERSION}): run every member with the same smelt")]
    Version {
        /// The path.
        path: String,
        /// The creator's smelt version.
        theirs: String,
        /// The creator's layout version.
        their_layout: u32,
        /// This build's smelt version.
        ours: &'static str,
    },
    /// A job description that cannot be laid out, or a rank or ring that does not exist.
    #[error("shared memory: {0}")]
    Invalid(String),
}

/// One ring of a job: messages flow from member `producer` to member `consumer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingSpec {
    /// Rank of the sending member.
    pub producer: u32,
    /// Rank of the receiving member.
    pub consumer: u32,
    /// Slots of the ring (1..=[`MAX_CAPACITY`]).
    pub capacity: u32,
}

impl RingSpec {
    /// The two rings of a link between ranks `a` and `b`: `a` to `b`, then `b` to `a`.
    pub fn both_ways(a: u32, b: u32, capacity: u32) -> [RingSpec; 2] {
        [
            RingSpec {
                producer: a,
                consumer: b,
                capacity,
            },
            RingSpec {
                producer: b,
                consumer: a,
                capacity,
            },
        ]
    }
}

/// Bytes of the arena a link of `capacity` slots per ring takes
/// ([`ShmMember::arena_link`]): a line recording the pair, then two rings, each
/// rounded up to [`ARENA_ALIGN`].
pub const fn arena_link_bytes(capacity: usize) -> usize {
    ARENA_ALIGN + 2 * ring_bytes(capacity).next_multiple_of(RING_ALIGN)
}

#[repr(C)]
struct Header {
    magic: [u8; 8],
    layout: u32,
    members: u32,
    version: [u8; 32],
    key: [u64; 2],
    total_bytes: u64,
    rings: u32,
    creator_pid: u32,
    ring_table: u64,
    member_table: u64,
    blob_offset: u64,
    blob_len: u64,
    abort: AtomicU32,
    attached: AtomicU32,
    /// 0: no failure; 1: being written; 2: written.
    failure_state: AtomicU32,
    failure_rank: u32,
    failure_len: u32,
    failure: [u8; FAILURE_BYTES],
    /// Offset of the job's shared words (0 and `words_len` 0: none).
    words_offset: u64,
    /// Number of shared 64-bit words.
    words_len: u64,
    /// Offset of the job's arena (page-aligned; 0 and `arena_len` 0: none).
    arena_offset: u64,
    /// Bytes of the arena: sparse, its pages allocated as members carve them.
    arena_len: u64,
}

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_BYTES);

#[repr(C)]
#[derive(Clone, Copy)]
struct RingEntry {
    offset: u64,
    producer: u32,
    consumer: u32,
    capacity: u32,
    _pad: u32,
}

#[repr(C)]
struct MemberEntry {
    /// 0: not joined, 1: joined, 2: left.
    state: AtomicU32,
    pid: AtomicU32,
}

/// A mapping of a segment and the file description that holds this process's lock.
struct Mapping {
    base: *mut u8,
    len: usize,
    fd: OwnedFd,
    path: PathBuf,
}

// SAFETY: the mapping is plain shared memory; every access to it goes through atomics
// or through the ring protocol (see channel.rs), and `base` stays valid until Drop.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // Base/len are exactly what mmap returned; nothing borrows the mapping
        // any more (every ring end holds an Arc to the Mapping's owner).
        // SAFETY: as argued in the lines above.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
        }
    }
}

impl Mapping {
    #[inline]
    fn header(&self) -> &Header {
        // Every mapping is at least HEADER_BYTES long (checked at create and
        // attach) and page-aligned; Header is plain data and atomics.
        // SAFETY: as argued in the lines above.
        unsafe { &*(self.base as *const Header) }
    }

    fn members(&self) -> &[MemberEntry] {
        let h = self.header();
        // The member table lies inside the mapping (checked by `validate`),
        // 8-byte aligned, and holds `members` entries of atomics.
        // SAFETY: as argued in the lines above.
        unsafe {
            std::slice::from_raw_parts(
                self.base.add(h.member_table as usize) as *const MemberEntry,
                h.members as usize,
            )
        }
    }

    fn rings(&self) -> &[RingEntry] {
        let h = self.header();
        // As for `members`; the ring table is written once by the creator before
        // any member attaches and never changes.
        // SAFETY: as argued in the lines above.
        unsafe {
            std::slice::from_raw_parts(
                self.base.add(h.ring_table as usize) as *const RingEntry,
                h.rings as usize,
            )
        }
    }

    fn blob(&self) -> &[u8] {
        let h = self.header();
        // SAFETY: inside the mapping (checked by `validate`); written once by the creator before any member attaches.
        unsafe {
            std::slice::from_raw_parts(self.base.add(h.blob_offset as usize), h.blob_len as usize)
        }
    }

    /// Checks that every table the header names lies inside the mapping.
    fn validate(&self) -> Result<(), String> {
        let h = self.header();
        let len = self.len as u64;
        let fits = |off: u64, n: u64| off.checked_add(n).is_some_and(|end| end <= len);
        if h.total_bytes != len {
            return Err(format!(
                "its header says {} bytes, the file has {len}",
                h.total_bytes
            ));
        }
        if h.members == 0 || h.members > MAX_MEMBERS {
            return Err(format!("{} members", h.members));
        }
        if !h.member_table.is_multiple_of(8)
            || !h.ring_table.is_multiple_of(8)
            || !fits(h.member_table, h.members as u64 * 8)
            || !fits(h.ring_table, h.rings as u64 * 24)
            || !fits(h.blob_offset, h.blob_len)
            || !h.words_offset.is_multiple_of(RING_ALIGN as u64)
            || h.words_len
                .checked_mul(8)
                .is_none_or(|b| !fits(h.words_offset, b))
            || !h.arena_offset.is_multiple_of(ARENA_ALIGN as u64)
            || !fits(h.arena_offset, h.arena_len)
        {
            return Err("its tables lie outside the file".into());
        }
        for r in self.rings() {
            if r.producer >= h.members
                || r.consumer >= h.members
                || r.capacity == 0
                || r.capacity as usize > MAX_CAPACITY
                || r.offset % RING_ALIGN as u64 != 0
                || !fits(r.offset, ring_bytes(r.capacity as usize) as u64)
            {
                return Err("a ring lies outside the file".into());
            }
        }
        Ok(())
    }

    fn abort(&self) {
        self.header().abort.store(1, Ordering::SeqCst);
        for r in self.rings() {
            // SAFETY: the ring table was validated to lie inside the mapping.
            unsafe { wake_ring(self.base.add(r.offset as usize)) };
        }
    }

    /// True while member `rank`'s process holds its liveness lock (or has not joined).
    fn alive(&self, rank: u32) -> bool {
        let Some(m) = self.members().get(rank as usize) else {
            return false;
        };
        if m.state.load(Ordering::Acquire) == 0 {
            return true;
        }
        // SAFETY: flock is plain data; all-zero is a valid value to fill in.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_WRLCK as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = LOCK_BASE + rank as i64;
        fl.l_len = 1;
        // SAFETY: fd is open for the Mapping's lifetime and `fl` is a valid flock.
        let r = unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
        r != 0 || fl.l_type != libc::F_UNLCK as libc::c_short
    }

    fn record_failure(&self, rank: u32, what: &str) -> bool {
        let h = self.header();
        if h.failure_state
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        let bytes = what.as_bytes();
        let n = bytes.len().min(FAILURE_BYTES);
        let hp = self.base as *mut Header;
        // Winning the compare-exchange gives this process the only right to write the
        // failure fields until it stores 2 (Release); readers read them only after seeing 2
        // (Acquire). The fields lie inside the header.
        // SAFETY: as argued in the lines above.
        unsafe {
            std::ptr::addr_of_mut!((*hp).failure_rank).write(rank);
            std::ptr::addr_of_mut!((*hp).failure_len).write(n as u32);
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                std::ptr::addr_of_mut!((*hp).failure) as *mut u8,
                n,
            );
        }
        h.failure_state.store(2, Ordering::Release);
        true
    }

    fn failure(&self) -> Option<(u32, String)> {
        let h = self.header();
        if h.failure_state.load(Ordering::Acquire) != 2 {
            return None;
        }
        let hp = self.base as *const Header;
        // SAFETY: state 2 (Acquire) means the writer finished and never writes again.
        let (rank, msg) = unsafe {
            let len = std::ptr::addr_of!((*hp).failure_len).read() as usize;
            let msg = std::slice::from_raw_parts(
                std::ptr::addr_of!((*hp).failure) as *const u8,
                len.min(FAILURE_BYTES),
            );
            (std::ptr::addr_of!((*hp).failure_rank).read(), msg)
        };
        Some((rank, String::from_utf8_lossy(msg).into_owned()))
    }
}

impl Remote for Mapping {
    fn peer_alive(&self, rank: u32) -> bool {
        self.alive(rank)
    }
    #[inline]
    fn aborted(&self) -> bool {
        self.header().abort.load(Ordering::Acquire) != 0
    }
}

fn io_err(what: &'static str, path: &Path) -> ShmError {
    ShmError::Io {
        what,
        path: path.display().to_string(),
        reason: std::io::Error::last_os_error().to_string(),
    }
}

fn cpath(path: &Path) -> Result<CString, ShmError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| ShmError::Invalid(format!("path {} has a NUL byte", path.display())))
}

/// Where segments are made: `$SMELT_SHM_DIR`, else `/dev/shm` (an empty
/// `SMELT_SHM_DIR=` counts as unset, as an empty `PATH` entry would).
pub fn shm_dir() -> PathBuf {
    smelt_settings::path(smelt_settings::SHM_DIR).unwrap_or_else(|| PathBuf::from("/dev/shm"))
}

/// `$SMELT_SHM_LIMIT`: a cap on the free bytes the shared-memory check sees (to test
/// it without a small tmpfs). Unset or empty: none; anything but a number of bytes
/// is an error naming the variable.
fn shm_limit() -> Result<Option<u64>, ShmError> {
    smelt_settings::bytes(smelt_settings::SHM_LIMIT).map_err(|e| ShmError::Invalid(e.to_string()))
}

/// Free bytes in `dir` (`$SMELT_SHM_LIMIT` caps it, to test the check without a small
/// tmpfs).
fn free_bytes(dir: &Path) -> Result<u64, ShmError> {
    let c = cpath(dir)?;
    // SAFETY: statvfs is plain data; all-zero is valid to fill in.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a valid C string and st a valid out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io_err("cannot inspect", dir));
    }
    let mut free = st.f_bavail as u64 * st.f_frsize as u64;
    if let Some(limit) = shm_limit()? {
        free = free.min(limit);
    }
    Ok(free)
}

fn random_u64s() -> Result<[u64; 2], ShmError> {
    let mut k = [0u64; 2];
    // SAFETY: writes at most 16 bytes into `k`, which is 16 bytes long.
    let n = unsafe { libc::getrandom(k.as_mut_ptr() as *mut libc::c_void, 16, 0) };
    if n != 16 {
        return Err(ShmError::Invalid(format!(
            "no randomness for the segment name: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(k)
}

fn map(fd: &OwnedFd, len: usize, path: &Path) -> Result<*mut u8, ShmError> {
    // SAFETY: a fresh shared mapping of an open file; the kernel picks the address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io_err("cannot map", path));
    }
    Ok(p as *mut u8)
}

fn version_bytes() -> [u8; 32] {
    let mut v = [0u8; 32];
    let s = env!("CARGO_PKG_VERSION").as_bytes();
    v[..s.len().min(32)].copy_from_slice(&s[..s.len().min(32)]);
    v
}

fn unlink(path: &Path) {
    if let Ok(c) = cpath(path) {
        // SAFETY: c is a valid C string; failure (already gone) is fine.
        unsafe { libc::unlink(c.as_ptr()) };
    }
}

/// The watcher process of a guarded segment name ([`ShmJob::create_guarded`]): it
/// waits on a pipe whose write end only the creator holds, and removes the name when
/// the pipe reports end-of-file, that is when the creator's process ended (the kernel
/// closes its descriptors however it dies). A byte on the pipe instead ends the
/// watcher without touching the name.
struct NameGuard {
    pid: libc::pid_t,
    tx: Option<OwnedFd>,
}

impl NameGuard {
    /// Forks the watcher of `path` (the name need not exist yet).
    fn start(path: &Path) -> Result<NameGuard, ShmError> {
        let c = cpath(path)?;
        let mut fds = [0 as libc::c_int; 2];
        // Fds is a valid array of two ints for pipe2 to fill. O_CLOEXEC keeps
        // the write end out of every program this process executes (the members).
        // SAFETY: as argued in the lines above.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io_err("cannot make the pipe guarding", path));
        }
        // SAFETY: pipe2 just opened both descriptors; nothing else owns them.
        let (rx, tx) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // Fork has no preconditions; the child runs only `watch`, which
        // calls async-signal-safe functions alone (this process may have threads).
        // SAFETY: as argued in the lines above.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io_err("cannot start the process guarding", path));
        }
        if pid == 0 {
            // This is the freshly forked child; the descriptors and the C
            // string were made before the fork and stay valid in its copy of memory.
            // SAFETY: as argued in the lines above.
            unsafe { watch(rx.as_raw_fd(), tx.as_raw_fd(), c.as_ptr()) }
        }
        drop(rx);
        Ok(NameGuard { pid, tx: Some(tx) })
    }

    /// Ends the watcher, leaving the name alone, and reaps it.
    fn cancel(&mut self) {
        let Some(tx) = self.tx.take() else { return };
        let b = 1u8;
        // Tx is open; writes one byte from a valid buffer. A watcher already
        // gone (EPIPE: SIGPIPE is ignored by Rust programs) changes nothing.
        // SAFETY: as argued in the lines above.
        unsafe { libc::write(tx.as_raw_fd(), &b as *const u8 as *const libc::c_void, 1) };
        drop(tx);
        // The watcher exits as soon as it reads; reap it, but never wait long (someone
        // may have stopped it, or reaped it with a wait for any child).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut nap = std::time::Duration::from_micros(20);
        loop {
            let mut status = 0;
            // SAFETY: plain waitpid on our own child, with a valid status pointer.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if r != 0 || std::time::Instant::now() > deadline {
                break;
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(std::time::Duration::from_millis(10));
        }
    }
}

impl Drop for NameGuard {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// The watcher's whole life (see [`NameGuard`]): never returns.
///
/// # Safety
///
/// Call only in a child just forked by [`NameGuard::start`], with the pipe's two
/// descriptors and a valid C string. It uses only async-signal-safe functions.
unsafe fn watch(rx: libc::c_int, tx: libc::c_int, path: *const libc::c_char) -> ! {
    // (the whole body) plain system calls on integers and the valid C
    // string `path`; nothing allocates, takes a lock or runs Rust destructors.
    // SAFETY: as argued in the lines above.
    unsafe {
        libc::close(tx);
        // Out of the terminal's foreground group: a Ctrl-C meant for the launcher
        // must not end its watcher; the launcher's own handlers do not apply here.
        libc::setpgid(0, 0);
        for sig in [
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGHUP,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
        // Hold nothing else open (pipes a caller waits on to close, the segment).
        let all_but = |lo: libc::c_uint, hi: libc::c_uint| {
            if lo <= hi && libc::syscall(libc::SYS_close_range, lo, hi, 0) != 0 {
                for fd in lo..hi.min(1024).saturating_add(1) {
                    libc::close(fd as libc::c_int);
                }
            }
        };
        let r = rx as libc::c_uint;
        if r > 0 {
            all_but(0, r - 1);
        }
        all_but(r + 1, libc::c_uint::MAX);
        let mut b = 0u8;
        let n = loop {
            let n = libc::read(rx, &mut b as *mut u8 as *mut libc::c_void, 1);
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            break n;
        };
        if n == 0 {
            libc::unlink(path);
        }
        libc::_exit(0)
    }
}

/// The creator's handle on a job's segment. Dropping it unlinks the path (members
/// that attached keep their mappings).
pub struct ShmJob {
    map: Arc<Mapping>,
    key: [u64; 2],
    /// The watcher of [`ShmJob::create_guarded`]; dropped after the name is removed.
    _guard: Option<NameGuard>,
}

impl std::fmt::Debug for ShmJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmJob")
            .field("path", &self.map.path)
            .finish()
    }
}

impl ShmJob {
    /// Creates the segment for `members` members and `rings`, carrying `blob` (the job
    /// description members read back with [`ShmMember::blob`]).
    pub fn create(members: u32, rings: &[RingSpec], blob: &[u8]) -> Result<ShmJob, ShmError> {
        Self::create_with_words(members, rings, blob, 0)
    }

    /// As [`create`](Self::create), with `words` zeroed 64-bit words besides the rings,
    /// shared by every member ([`ShmMember::words`]): memory the members read and write
    /// directly with atomic operations (global arrays, counters, barriers).
    pub fn create_with_words(
        members: u32,
        rings: &[RingSpec],
        blob: &[u8],
        words: usize,
    ) -> Result<ShmJob, ShmError> {
        Self::create_inner(members, rings, blob, words, 0, false)
    }

    /// As [`create_with_words`](Self::create_with_words), with the segment's name
    /// guarded: a small watcher process, forked before the file is made, removes the
    /// name when this process ends however it ends (even by `kill -9`), so a launcher
    /// killed before every member joined leaves nothing in `/dev/shm`. The watcher
    /// holds one end of a pipe whose other end only this process holds: the kernel
    /// closes it when the process dies. Dropping the job ends the watcher. For
    /// launchers: it costs a `fork` per job.
    pub fn create_guarded(
        members: u32,
        rings: &[RingSpec],
        blob: &[u8],
        words: usize,
    ) -> Result<ShmJob, ShmError> {
        Self::create_inner(members, rings, blob, words, 0, true)
    }

    /// The segment of a *world* ([`ShmMember::arena_link`]): `members` members,
    /// `blob` (the world's description), no rings of its own, and an arena of
    /// `arena_bytes` bytes from which the members carve the rings and regions of every
    /// service they make, each member the same parts at the same offsets, in the order
    /// the services are made. The arena is sparse: the file is that long, but only the
    /// pages of the parts carved so far take memory, allocated (`posix_fallocate`) as
    /// they are carved, so running out of space is an error then, never a SIGBUS.
    /// `guarded` as [`create_guarded`](Self::create_guarded).
    pub fn create_world(
        members: u32,
        blob: &[u8],
        arena_bytes: u64,
        guarded: bool,
    ) -> Result<ShmJob, ShmError> {
        Self::create_inner(members, &[], blob, 0, arena_bytes, guarded)
    }

    fn create_inner(
        members: u32,
        rings: &[RingSpec],
        blob: &[u8],
        words: usize,
        arena: u64,
        guarded: bool,
    ) -> Result<ShmJob, ShmError> {
        let arena = usize::try_from(arena)
            .ok()
            .filter(|a| *a <= isize::MAX as usize / 4)
            .ok_or_else(|| ShmError::Invalid(format!("an arena of {arena} bytes is too large")))?;
        let words_bytes = words
            .checked_mul(8)
            .filter(|b| *b <= isize::MAX as usize / 2)
            .ok_or_else(|| ShmError::Invalid(format!("{words} shared words is too many")))?;
        if members == 0 || members > MAX_MEMBERS {
            return Err(ShmError::Invalid(format!(
                "a job needs 1 to {MAX_MEMBERS} members, not {members}"
            )));
        }
        for (i, r) in rings.iter().enumerate() {
            if r.producer >= members || r.consumer >= members || r.producer == r.consumer {
                return Err(ShmError::Invalid(format!(
                    "ring {i} joins members {} and {} of a {members}-member job",
                    r.producer, r.consumer
                )));
            }
            if r.capacity == 0 || r.capacity as usize > MAX_CAPACITY {
                return Err(ShmError::Invalid(format!(
                    "ring {i} has {} slots (1 to {MAX_CAPACITY})",
                    r.capacity
                )));
            }
        }
        let member_table = HEADER_BYTES;
        let ring_table = member_table + members as usize * 8;
        let blob_offset = ring_table + rings.len() * std::mem::size_of::<RingEntry>();
        let mut off = (blob_offset + blob.len()).next_multiple_of(RING_ALIGN);
        let mut entries = Vec::with_capacity(rings.len());
        for r in rings {
            entries.push(RingEntry {
                offset: off as u64,
                producer: r.producer,
                consumer: r.consumer,
                capacity: r.capacity,
                _pad: 0,
            });
            off += ring_bytes(r.capacity as usize).next_multiple_of(RING_ALIGN);
        }
        let words_offset = off;
        off += words_bytes;
        // Allocated at once: everything before the arena.
        let fixed = off.next_multiple_of(ARENA_ALIGN);
        let (arena_offset, arena_len) = if arena == 0 { (0, 0) } else { (fixed, arena) };
        let total = (fixed + arena_len).next_multiple_of(4096);
        let dir = shm_dir();
        // A directory that is not there or not readable: name the setting that picks it.
        let available = free_bytes(&dir).map_err(|e| match e {
            ShmError::Io { path, reason, .. } => ShmError::Io {
                what: "cannot use the shared-memory directory (SMELT_SHM_DIR)",
                path,
                reason,
            },
            e => e,
        })?;
        if (fixed as u64) > available {
            return Err(ShmError::NoSpace {
                needed: fixed as u64,
                available,
                dir: dir.display().to_string(),
            });
        }
        // The name and the key are independent: anyone may list /dev/shm, and the key
        // must not be read off the name.
        let key = random_u64s()?;
        let name = random_u64s()?;
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::geteuid() };
        let path = dir.join(format!("smelt-{uid}-{:016x}{:016x}", name[0], name[1]));
        let c = cpath(&path)?;
        let mut guard = if guarded {
            Some(NameGuard::start(&path)?)
        } else {
            None
        };
        // SAFETY: c is a valid C string; the flags create a new file or fail.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        };
        if fd < 0 {
            let e = io_err("cannot create", &path);
            // Not ours: the watcher must leave the name alone.
            if let Some(g) = guard.as_mut() {
                g.cancel();
            }
            return Err(e);
        }
        // SAFETY: fd was just opened and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let fail = |e: ShmError| {
            unlink(&path);
            e
        };
        // SAFETY: fd is a valid open file. The file's full length (the arena sparse), then the pages before the arena.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), total as libc::off_t) } != 0 {
            return Err(fail(io_err("cannot size", &path)));
        }
        // SAFETY: fd is a valid open file.
        let r = unsafe { libc::posix_fallocate(fd.as_raw_fd(), 0, fixed as libc::off_t) };
        if r != 0 {
            let reason = std::io::Error::from_raw_os_error(r);
            return Err(fail(if r == libc::ENOSPC {
                ShmError::NoSpace {
                    needed: fixed as u64,
                    available,
                    dir: dir.display().to_string(),
                }
            } else {
                ShmError::Io {
                    what: "cannot allocate",
                    path: path.display().to_string(),
                    reason: reason.to_string(),
                }
            }));
        }
        let base = map(&fd, total, &path).map_err(fail)?;
        let map = Mapping {
            base,
            len: total,
            fd,
            path: path.clone(),
        };
        let hp = base as *mut Header;
        // The mapping is `total >= HEADER_BYTES` bytes of zeroed memory that no other
        // process can have opened yet (the name is new and unpublished); every write below
        // stays inside the tables computed above.
        // SAFETY: as argued in the lines above.
        unsafe {
            std::ptr::addr_of_mut!((*hp).layout).write(LAYOUT_VERSION);
            std::ptr::addr_of_mut!((*hp).members).write(members);
            std::ptr::addr_of_mut!((*hp).version).write(version_bytes());
            std::ptr::addr_of_mut!((*hp).key).write(key);
            std::ptr::addr_of_mut!((*hp).total_bytes).write(total as u64);
            std::ptr::addr_of_mut!((*hp).rings).write(entries.len() as u32);
            std::ptr::addr_of_mut!((*hp).creator_pid).write(std::process::id());
            std::ptr::addr_of_mut!((*hp).ring_table).write(ring_table as u64);
            std::ptr::addr_of_mut!((*hp).member_table).write(member_table as u64);
            std::ptr::addr_of_mut!((*hp).blob_offset).write(blob_offset as u64);
            std::ptr::addr_of_mut!((*hp).blob_len).write(blob.len() as u64);
            std::ptr::addr_of_mut!((*hp).words_offset).write(words_offset as u64);
            std::ptr::addr_of_mut!((*hp).words_len).write(words as u64);
            std::ptr::addr_of_mut!((*hp).arena_offset).write(arena_offset as u64);
            std::ptr::addr_of_mut!((*hp).arena_len).write(arena_len as u64);
            std::ptr::copy_nonoverlapping(
                entries.as_ptr() as *const u8,
                base.add(ring_table),
                entries.len() * std::mem::size_of::<RingEntry>(),
            );
            std::ptr::copy_nonoverlapping(blob.as_ptr(), base.add(blob_offset), blob.len());
            // The magic last: a half-written segment is never taken for one.
            std::sync::atomic::fence(Ordering::Release);
            std::ptr::addr_of_mut!((*hp).magic).write(MAGIC);
        }
        Ok(ShmJob {
            map: Arc::new(map),
            key,
            _guard: guard,
        })
    }

    /// The segment's path (give it to the members).
    pub fn path(&self) -> &Path {
        &self.map.path
    }

    /// The job's key as 32 hex digits (give it to the members).
    pub fn key(&self) -> String {
        format!("{:016x}{:016x}", self.key[0], self.key[1])
    }

    /// Members attached so far.
    pub fn attached(&self) -> u32 {
        self.map.header().attached.load(Ordering::Acquire)
    }

    /// True once member `rank` has attached (it may have left or died since).
    pub fn has_joined(&self, rank: u32) -> bool {
        self.map
            .members()
            .get(rank as usize)
            .is_some_and(|m| m.state.load(Ordering::Acquire) != 0)
    }

    /// Raises the job's abort flag: every member's waits end with
    /// [`TransportError::Aborted`] at once.
    pub fn abort(&self) {
        self.map.abort();
    }

    /// True once member `rank`'s process has died (after it joined).
    pub fn is_dead(&self, rank: u32) -> bool {
        !self.map.alive(rank)
    }

    /// The first failure a member recorded: its rank and what happened.
    pub fn failure(&self) -> Option<(u32, String)> {
        self.map.failure()
    }

    /// Records a failure on the job's behalf (first one wins) and aborts the job.
    pub fn fail(&self, rank: u32, what: &str) {
        self.map.record_failure(rank, what);
        self.map.abort();
    }

    /// Removes the segment's name now (members that attached keep their mappings).
    pub fn unlink(&self) {
        unlink(&self.map.path);
    }
}

impl Drop for ShmJob {
    fn drop(&mut self) {
        self.unlink();
    }
}

/// A member's handle on its job's segment: its rank, the job description, and its
/// ends of the rings. Dropping it marks the member as having left; its process's
/// liveness lock goes with its last ring end.
pub struct ShmMember {
    map: Arc<Mapping>,
    rank: u32,
    abort: Option<Abort>,
}

impl std::fmt::Debug for ShmMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmMember")
            .field("path", &self.map.path)
            .field("rank", &self.rank)
            .finish()
    }
}

/// Claims `me`'s end of the two-member part at `p` (arena offset `offset`), shared with
/// `peer`: the part's first line records the pair (the first opener writes it, every
/// later one must name the same two members) and one flag per side, so a second opening
/// of a side, or an opening by a third member, is [`TransportError::NotYours`]. `what`
/// names the part in the error ("link", "stage").
pub(crate) fn claim_pair_end(
    p: *mut u8,
    me: u32,
    peer: u32,
    offset: u64,
    what: &str,
) -> Result<(), TransportError> {
    let (lo, hi) = (me.min(peer), me.max(peer));
    let pair = ((lo as u64 + 1) << 32) | (hi as u64 + 1);
    // `p` is the start of an arena part (the caller's `arena_part`), whose first line (128
    // bytes, aligned) lies in the mapping; its words are accessed only atomically, by every
    // member.
    // SAFETY: as argued in the lines above.
    let (who, low, high) = unsafe {
        (
            &*(p.add(8) as *const AtomicU64),
            &*(p.add(16) as *const AtomicU32),
            &*(p.add(20) as *const AtomicU32),
        )
    };
    match who.compare_exchange(0, pair, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {}
        Err(w) if w == pair => {}
        Err(w) => {
            return Err(TransportError::NotYours(format!(
                "member {me}: the {what} at arena offset {offset} joins members {} and {}, not {lo} and {hi}",
                (w >> 32).wrapping_sub(1),
                (w & 0xffff_ffff).wrapping_sub(1)
            )))
        }
    }
    let side = if me == lo { low } else { high };
    if side
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return Err(TransportError::NotYours(format!(
            "member {me}'s end of the {what} to member {peer} at arena offset {offset} is already open"
        )));
    }
    Ok(())
}

fn parse_key(key: &str) -> Option<[u64; 2]> {
    if key.len() != 32 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some([
        u64::from_str_radix(&key[..16], 16).ok()?,
        u64::from_str_radix(&key[16..], 16).ok()?,
    ])
}

impl ShmMember {
    /// Attaches to the segment at `path` as member `rank`, checking that it is this
    /// job's (`key`, from the creator) and of this build's layout.
    pub fn attach(path: &Path, key: &str, rank: u32) -> Result<ShmMember, ShmError> {
        let not_ours = |why: String| ShmError::NotOurs {
            path: path.display().to_string(),
            why,
        };
        let key =
            parse_key(key).ok_or_else(|| not_ours("the job key is not 32 hex digits".into()))?;
        let c = cpath(path)?;
        // SAFETY: c is a valid C string; no O_CREAT, so nothing is created.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io_err("cannot open", path));
        }
        // SAFETY: fd was just opened and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: stat is plain data; fstat fills it for a valid fd.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is open and st a valid out-pointer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io_err("cannot inspect", path));
        }
        // SAFETY: geteuid cannot fail.
        let uid = unsafe { libc::geteuid() };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(not_ours("it is not a regular file".into()));
        }
        if st.st_uid != uid {
            return Err(not_ours(format!(
                "it belongs to user {}, not to this user ({uid})",
                st.st_uid
            )));
        }
        if st.st_mode & 0o077 != 0 {
            return Err(not_ours(format!(
                "its mode is {:o}: other users could read or write it",
                st.st_mode & 0o777
            )));
        }
        let len = st.st_size as usize;
        if len < HEADER_BYTES {
            return Err(not_ours(format!("it has {len} bytes, less than a header")));
        }
        let base = map(&fd, len, path)?;
        let map = Mapping {
            base,
            len,
            fd,
            path: path.to_path_buf(),
        };
        let hp = base as *const Header;
        // SAFETY: the mapping holds at least HEADER_BYTES bytes; plain-data reads.
        let (magic, layout, version, their_key) = unsafe {
            (
                std::ptr::addr_of!((*hp).magic).read_volatile(),
                std::ptr::addr_of!((*hp).layout).read(),
                std::ptr::addr_of!((*hp).version).read(),
                std::ptr::addr_of!((*hp).key).read(),
            )
        };
        std::sync::atomic::fence(Ordering::Acquire);
        if magic != MAGIC {
            return Err(not_ours("it does not start with smelt's magic".into()));
        }
        if layout != LAYOUT_VERSION || version != version_bytes() {
            let end = version.iter().position(|&b| b == 0).unwrap_or(32);
            return Err(ShmError::Version {
                path: path.display().to_string(),
                theirs: String::from_utf8_lossy(&version[..end]).into_owned(),
                their_layout: layout,
                ours: env!("CARGO_PKG_VERSION"),
            });
        }
        if their_key != key {
            return Err(not_ours(
                "it belongs to another job (its key differs: a stale or planted segment)".into(),
            ));
        }
        map.validate().map_err(not_ours)?;
        let members = map.header().members;
        if rank >= members {
            return Err(ShmError::Invalid(format!(
                "rank {rank} does not exist in a job of {members} members"
            )));
        }
        // SAFETY: flock is plain data. The liveness lock first: a member seen as joined always holds it.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_WRLCK as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = LOCK_BASE + rank as i64;
        fl.l_len = 1;
        // SAFETY: fd is open and fl a valid flock.
        if unsafe { libc::fcntl(map.fd.as_raw_fd(), libc::F_OFD_SETLK, &fl) } != 0 {
            return Err(ShmError::Invalid(format!(
                "rank {rank} of this job is already taken by a live process"
            )));
        }
        let me = &map.members()[rank as usize];
        if me
            .state
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(ShmError::Invalid(format!(
                "rank {rank} of this job has already joined once"
            )));
        }
        me.pid.store(std::process::id(), Ordering::Release);
        let n = map.header().attached.fetch_add(1, Ordering::AcqRel) + 1;
        if n == members {
            unlink(path);
        }
        Ok(ShmMember {
            map: Arc::new(map),
            rank,
            abort: None,
        })
    }

    /// Guards every ring end opened from now on by `abort` too (besides the job's own
    /// abort flag).
    pub fn set_abort(&mut self, abort: Abort) {
        self.abort = Some(abort);
    }

    /// This member's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Members of the job.
    pub fn members(&self) -> u32 {
        self.map.header().members
    }

    /// The job description the creator stored.
    pub fn blob(&self) -> &[u8] {
        self.map.blob()
    }

    /// The job's shared words ([`ShmJob::create_with_words`]; empty if it has none),
    /// the same memory in every member. They stay mapped while this handle lives.
    pub fn words(&self) -> &[AtomicU64] {
        let h = self.map.header();
        if h.words_len == 0 {
            return &[];
        }
        // The mapping lives as long as `self.map`, which the borrow of `self` holds. The
        // creator zeroed the words; every process reaches them through atomics.
        // SAFETY: `validate` checked they lie inside the mapping, 128-byte aligned.
        unsafe {
            std::slice::from_raw_parts(
                self.map.base.add(h.words_offset as usize) as *const AtomicU64,
                h.words_len as usize,
            )
        }
    }

    /// The job's rings, in the creator's order.
    pub fn rings(&self) -> Vec<RingSpec> {
        self.map
            .rings()
            .iter()
            .map(|r| RingSpec {
                producer: r.producer,
                consumer: r.consumer,
                capacity: r.capacity,
            })
            .collect()
    }

    fn ring(&self, i: usize, producer: bool) -> Result<(Arc<Shared>, usize), TransportError> {
        let r = *self
            .map
            .rings()
            .get(i)
            .ok_or_else(|| TransportError::NotYours(format!("the job has no ring {i}")))?;
        let (mine, peer) = if producer {
            (r.producer, r.consumer)
        } else {
            (r.consumer, r.producer)
        };
        if mine != self.rank {
            return Err(TransportError::NotYours(format!(
                "ring {i}'s {} is member {mine}, not member {}",
                if producer { "producer" } else { "consumer" },
                self.rank
            )));
        }
        // The creator zeroed it; the mapping lives as long as the Arc passed as its Remote.
        // Only this rank opens this end: the rank's lock and joined state are exclusive.
        // SAFETY: `validate` checked the ring lies inside the mapping, aligned.
        let shared = unsafe {
            shared_ring(
                self.map.base.add(r.offset as usize),
                r.capacity as usize,
                self.map.clone(),
                peer,
                self.abort.clone(),
            )
        }?;
        Ok((shared, r.capacity as usize))
    }

    /// Opens the sending end of ring `i` (this member must be its producer).
    pub fn producer(&self, i: usize) -> Result<Producer, TransportError> {
        let (shared, capacity) = self.ring(i, true)?;
        Ok(Producer::resume(shared, capacity))
    }

    /// Opens the receiving end of ring `i` (this member must be its consumer).
    pub fn consumer(&self, i: usize) -> Result<Consumer, TransportError> {
        let (shared, capacity) = self.ring(i, false)?;
        Ok(Consumer::resume(shared, capacity))
    }

    /// Bytes of the job's arena ([`ShmJob::create_world`]; 0: none).
    pub fn arena_len(&self) -> u64 {
        self.map.header().arena_len
    }

    /// The arena's bytes `offset..offset + len` as a slice of the mapping, after
    /// checking that they lie inside the arena, aligned to [`ARENA_ALIGN`], and
    /// allocating their pages (`posix_fallocate`, a no-op for pages already
    /// allocated): touching them can never raise SIGBUS.
    fn arena_part(&self, offset: u64, len: u64) -> Result<*mut u8, ShmError> {
        let h = self.map.header();
        if len == 0
            || !offset.is_multiple_of(ARENA_ALIGN as u64)
            || offset.checked_add(len).is_none_or(|end| end > h.arena_len)
        {
            return Err(ShmError::Invalid(format!(
                "bytes {offset}..+{len} are not a part of this job's arena of {} bytes (raise SMELT_WORLD_ARENA for larger services)",
                h.arena_len
            )));
        }
        let start = h.arena_offset + offset;
        // The file descriptor is open for the mapping's lifetime; the range
        // lies inside the file (checked above and by `validate`).
        // SAFETY: as argued in the lines above.
        let r = unsafe {
            libc::posix_fallocate(
                self.map.fd.as_raw_fd(),
                start as libc::off_t,
                len as libc::off_t,
            )
        };
        if r != 0 {
            let dir = self
                .map
                .path
                .parent()
                .map(|d| d.display().to_string())
                .unwrap_or_default();
            return Err(if r == libc::ENOSPC {
                ShmError::NoSpace {
                    needed: len,
                    available: free_bytes(Path::new(&dir)).unwrap_or(0),
                    dir,
                }
            } else {
                ShmError::Io {
                    what: "cannot allocate arena pages of",
                    path: self.map.path.display().to_string(),
                    reason: std::io::Error::from_raw_os_error(r).to_string(),
                }
            });
        }
        // `start + len` lies inside the mapping (the arena lies inside the
        // file, checked by `validate`, and the mapping covers the whole file).
        // SAFETY: as argued in the lines above.
        Ok(unsafe { self.map.base.add(start as usize) })
    }

    /// Marks the arena part at `offset` (its first 8 bytes) as made for `tag`, a
    /// non-zero fingerprint of the service the members make there: the first member
    /// to arrive writes it, the others must find the same. A different tag means the
    /// members made their services in different orders or with different arguments:
    /// [`ShmError::Invalid`] naming both.
    pub fn arena_mark(&self, offset: u64, tag: u64) -> Result<(), ShmError> {
        let tag = tag.max(1);
        let p = self.arena_part(offset, ARENA_ALIGN as u64)?;
        // `arena_part` checked that 128 aligned bytes lie in the mapping; the
        // word is only ever accessed atomically (by every member, the same way).
        // SAFETY: as argued in the lines above.
        let word = unsafe { &*(p as *const AtomicU64) };
        match word.compare_exchange(0, tag, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Ok(()),
            Err(t) if t == tag => Ok(()),
            Err(t) => Err(ShmError::Invalid(format!(
                "member {} made a service (fingerprint {tag:016x}) where another member made a different one ({t:016x}) at arena offset {offset}: every member must make the same services in the same order",
                self.rank
            ))),
        }
    }

    /// This member's end of the queuepair at arena offset `offset` (which takes
    /// [`arena_link_bytes`]`(capacity)` bytes) to member `peer`. The lower rank of the
    /// two sends on the first ring, the higher on the second. Each end is opened once:
    /// the part's first line records the pair and claims each side, so a second
    /// opening of a side, or an opening by a third member, is refused
    /// ([`TransportError::NotYours`]). Waits on the link also end when `abort` is
    /// raised (besides the job's abort flag and the peer's death).
    pub fn arena_link(
        &self,
        offset: u64,
        capacity: usize,
        peer: u32,
        abort: Option<Abort>,
    ) -> Result<QueuePairEnd, TransportError> {
        let me = self.rank;
        if peer == me || peer >= self.members() {
            return Err(TransportError::NotYours(format!(
                "a link from member {me} to member {peer} in a job of {} members",
                self.members()
            )));
        }
        if capacity == 0 || capacity > MAX_CAPACITY {
            return Err(TransportError::InvalidCapacity(capacity));
        }
        let ring = ring_bytes(capacity).next_multiple_of(RING_ALIGN);
        let p = self
            .arena_part(offset, arena_link_bytes(capacity) as u64)
            .map_err(|e| TransportError::NotYours(e.to_string()))?;
        claim_pair_end(p, me, peer, offset, "link")?;
        // Both rings lie inside the part (`arena_link_bytes`), aligned to 128 bytes, zero
        // until first used (a fresh file's pages are zero); this member is the only
        // producer of its ring and the only consumer of the other (claimed above, once per
        // side); the mapping lives as long as the Arc given as Remote.
        // SAFETY: as argued in the lines above.
        let (low_to_high, high_to_low) = unsafe { (p.add(ARENA_ALIGN), p.add(ARENA_ALIGN + ring)) };
        let (tx, rx) = if me < peer {
            (low_to_high, high_to_low)
        } else {
            (high_to_low, low_to_high)
        };
        // SAFETY: as above.
        let (tx, rx) = unsafe {
            (
                shared_ring(tx, capacity, self.map.clone(), peer, abort.clone())?,
                shared_ring(rx, capacity, self.map.clone(), peer, abort)?,
            )
        };
        Ok(QueuePairEnd {
            tx: Producer::resume(tx, capacity),
            rx: Consumer::resume(rx, capacity),
        })
    }

    /// `words` zeroed 64-bit words at arena offset `offset` (their pages allocated),
    /// the same memory in every member that asks for the same part: a region every
    /// member reads and writes with atomic operations. The handle keeps the segment
    /// mapped.
    pub fn arena_words(&self, offset: u64, words: usize) -> Result<SharedWords, ShmError> {
        let bytes = (words as u64)
            .checked_mul(8)
            .ok_or_else(|| ShmError::Invalid(format!("{words} words is too many")))?;
        let p = self.arena_part(offset, bytes)?;
        Ok(SharedWords {
            _map: self.map.clone(),
            ptr: p as *const AtomicU64,
            len: words,
        })
    }

    /// Raises the job's abort flag (every member's waits end at once).
    pub fn abort(&self) {
        self.map.abort();
    }

    /// True once any member or the creator raised the job's abort flag. Inlined: a
    /// process member's collectives check it on every call (an out-of-line call here
    /// was 4-10 % of a broadcast's samples).
    #[inline]
    pub fn is_aborted(&self) -> bool {
        self.map.aborted()
    }

    /// Records the job's first failure (true if this was the first).
    pub fn record_failure(&self, rank: u32, what: &str) -> bool {
        self.map.record_failure(rank, what)
    }

    /// The job's first failure: rank and what happened.
    pub fn failure(&self) -> Option<(u32, String)> {
        self.map.failure()
    }

    /// True while member `rank`'s process lives (or has not joined yet).
    pub fn is_alive(&self, rank: u32) -> bool {
        self.map.alive(rank)
    }
}

/// Shared 64-bit words in a job's segment ([`ShmMember::arena_words`]): derefs to
/// `[AtomicU64]`, and keeps the segment mapped while it lives.
pub struct SharedWords {
    _map: Arc<Mapping>,
    ptr: *const AtomicU64,
    len: usize,
}

// SAFETY: the words are atomics in a mapping that `_map` keeps alive; any thread may
// reach them through shared references.
unsafe impl Send for SharedWords {}
// SAFETY: as above.
unsafe impl Sync for SharedWords {}

impl std::fmt::Debug for SharedWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedWords")
            .field("len", &self.len)
            .finish()
    }
}

impl std::ops::Deref for SharedWords {
    type Target = [AtomicU64];
    fn deref(&self) -> &[AtomicU64] {
        // `ptr..ptr + len` lies inside the mapping (checked by `arena_part`),
        // 128-byte aligned, initially zero; `_map` keeps it mapped for `self`'s life.
        // SAFETY: as argued in the lines above.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for ShmMember {
    fn drop(&mut self) {
        if let Some(m) = self.map.members().get(self.rank as usize) {
            m.state.store(2, Ordering::Release);
        }
    }
}
