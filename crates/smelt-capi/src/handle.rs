//! The handle table: what C holds for a model, tree, group, member, key-value store or
//! store client is an opaque, generation-checked id, never the address of something
//! the library might free.
//!
//! A handle packs a kind tag, a slot index and the slot's generation into one
//! pointer-sized value (C sees it as an opaque pointer it never dereferences). Freeing
//! an object empties its slot and bumps the slot's generation, so a freed, detached or
//! expired handle, a handle of the wrong kind, or any made-up value is recognised and
//! answered with `SMELT_ERR_INVALID_HANDLE` — no lookup ever reads freed memory.
//!
//! Slots live in fixed-size segments that are allocated once and never freed, so a
//! lookup needs no global lock: it finds its slot through a `OnceLock` and locks that
//! slot's own mutex. Models, trees and groups are shared (`Arc`) and their slot is
//! locked only long enough to clone the `Arc`; a member's (or store client's) slot is
//! locked with `try_lock` for the whole call, which is its in-use flag: a second thread
//! using the same member or client handle at the same time gets `SMELT_ERR_BUSY`.
//!
//! Generations have 28 bits (12 on 32-bit targets) and freed slots are reused oldest
//! first, so a stale handle could only be mistaken for a new object after its slot was
//! reused 2^28 times.

use crate::group::{GroupInner, MemberState};
use crate::kvs::KvsObj;
use crate::{err, Res, TreeObj, SMELT_ERR_BUSY, SMELT_ERR_INVALID_ARGUMENT};
use crate::{Error, SMELT_ERR_INVALID_HANDLE};
use smelt_model::Model;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};

/// What a handle refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Model = 1,
    Tree = 2,
    Group = 3,
    Member = 4,
    Kvs = 5,
    KvsClient = 6,
    AmEndpoint = 7,
    Offload = 9,
    Global = 10,
    AggWorker = 11,
    World = 12,
}

impl Kind {
    fn from_tag(t: usize) -> Option<Kind> {
        Some(match t {
            1 => Kind::Model,
            2 => Kind::Tree,
            3 => Kind::Group,
            4 => Kind::Member,
            5 => Kind::Kvs,
            6 => Kind::KvsClient,
            7 => Kind::AmEndpoint,
            9 => Kind::Offload,
            10 => Kind::Global,
            11 => Kind::AggWorker,
            12 => Kind::World,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Model => "model",
            Kind::Tree => "tree",
            Kind::Group => "group",
            Kind::Member => "member",
            Kind::Kvs => "kvs",
            Kind::KvsClient => "kvs client",
            Kind::AmEndpoint => "active-message endpoint",
            Kind::Offload => "offload pool",
            Kind::Global => "global array",
            Kind::AggWorker => "aggregation worker",
            Kind::World => "world",
        }
    }
}

/// An object in the table.
pub(crate) enum Object {
    Model(Arc<Model>),
    Tree(Arc<TreeObj>),
    Group(Arc<GroupInner>),
    Member(Box<MemberState>),
    Kvs(Arc<KvsObj>),
    KvsClient(Box<::smelt_kvs::Client>),
    AmEndpoint(Box<crate::am::AmEndpoint>),
    Offload(Arc<crate::offload::OffloadObj>),
    Global(Arc<crate::global::GlobalObj>),
    AggWorker(Box<crate::agg::AggWorker>),
    World(Arc<smelt_runtime::World>),
}

impl Object {
    fn kind(&self) -> Kind {
        match self {
            Object::Model(_) => Kind::Model,
            Object::Tree(_) => Kind::Tree,
            Object::Group(_) => Kind::Group,
            Object::Member(_) => Kind::Member,
            Object::Kvs(_) => Kind::Kvs,
            Object::KvsClient(_) => Kind::KvsClient,
            Object::AmEndpoint(_) => Kind::AmEndpoint,
            Object::Offload(_) => Kind::Offload,
            Object::Global(_) => Kind::Global,
            Object::AggWorker(_) => Kind::AggWorker,
            Object::World(_) => Kind::World,
        }
    }
}

/// Bits of a handle: index (low), generation, kind tag (high 4 bits).
const INDEX_BITS: u32 = usize::BITS / 2;
const KIND_BITS: u32 = 4;
const GEN_BITS: u32 = usize::BITS - INDEX_BITS - KIND_BITS;
const GEN_MASK: u32 = (((1u64 << GEN_BITS) - 1) & u32::MAX as u64) as u32;
const SEGMENT: usize = 1024;
const SEGMENTS: usize = 1024;
/// Most objects alive at once.
const MAX_LIVE: usize = {
    let by_bits = 1usize << INDEX_BITS;
    if SEGMENT * SEGMENTS < by_bits {
        SEGMENT * SEGMENTS
    } else {
        by_bits
    }
};

/// One slot, on its own cache lines (member slots are locked on every collective by
/// their own threads).
#[repr(align(128))]
#[derive(Default)]
struct Slot {
    /// The generation of the slot's current (or next) object; changes only under `obj`'s
    /// lock, when the object is removed.
    generation: AtomicU32,
    obj: Mutex<Option<Object>>,
}

static SLOTS: [OnceLock<Box<[Slot]>>; SEGMENTS] = [const { OnceLock::new() }; SEGMENTS];

/// Slot allocation: indices never used so far start at `next`; freed ones are reused
/// oldest first (so a slot's generation advances as slowly as possible).
struct Alloc {
    next: usize,
    free: VecDeque<usize>,
}

static ALLOC: Mutex<Alloc> = Mutex::new(Alloc {
    next: 0,
    free: VecDeque::new(),
});

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn slot(index: usize) -> Option<&'static Slot> {
    SLOTS
        .get(index / SEGMENT)?
        .get()
        .map(|seg| &seg[index % SEGMENT])
}

fn encode(kind: Kind, generation: u32, index: usize) -> usize {
    ((kind as usize) << (usize::BITS - KIND_BITS)) | ((generation as usize) << INDEX_BITS) | index
}

/// A slot taken for an object not made yet (returned to the free list if unused).
pub(crate) struct Reserved {
    index: usize,
    used: bool,
}

/// Takes a free slot.
pub(crate) fn reserve() -> Res<Reserved> {
    let mut a = lock(&ALLOC);
    let index = match a.free.pop_front() {
        Some(i) => i,
        None if a.next < MAX_LIVE => {
            let i = a.next;
            SLOTS[i / SEGMENT].get_or_init(|| (0..SEGMENT).map(|_| Slot::default()).collect());
            a.next += 1;
            i
        }
        None => {
            return err(
                SMELT_ERR_INVALID_ARGUMENT,
                format!("too many live smelt objects (at most {MAX_LIVE})"),
            )
        }
    };
    Ok(Reserved { index, used: false })
}

impl Reserved {
    /// Stores `obj` in the slot and returns its handle.
    pub(crate) fn fill(mut self, obj: Object) -> usize {
        self.used = true;
        let s = slot(self.index).expect("reserved slots exist");
        let kind = obj.kind();
        let mut o = lock(&s.obj);
        debug_assert!(o.is_none());
        *o = Some(obj);
        encode(kind, s.generation.load(Ordering::Relaxed), self.index)
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if !self.used {
            lock(&ALLOC).free.push_back(self.index);
        }
    }
}

/// Stores `obj` and returns its handle.
pub(crate) fn insert(obj: Object) -> Res<usize> {
    Ok(reserve()?.fill(obj))
}

/// The slot of handle `h` of kind `kind` (`what` names the argument in messages), if
/// its generation is current; the caller locks it and checks again.
fn find(h: usize, kind: Kind, what: &str) -> Res<(&'static Slot, u32)> {
    if h == 0 {
        return err(SMELT_ERR_INVALID_ARGUMENT, format!("{what} is NULL"));
    }
    let tag = h >> (usize::BITS - KIND_BITS);
    let generation = ((h >> INDEX_BITS) as u32) & GEN_MASK;
    let index = h & ((1usize << INDEX_BITS) - 1);
    match Kind::from_tag(tag) {
        Some(k) if k == kind => {}
        Some(k) => {
            return err(
                SMELT_ERR_INVALID_HANDLE,
                format!(
                    "{what} is a {} handle, not a {} handle",
                    k.name(),
                    kind.name()
                ),
            )
        }
        None => {
            return err(
                SMELT_ERR_INVALID_HANDLE,
                format!("{what} is not a smelt {} handle", kind.name()),
            )
        }
    }
    match slot(index) {
        Some(s) if s.generation.load(Ordering::Acquire) == generation => Ok((s, generation)),
        _ => Err(stale(kind, what)),
    }
}

fn stale(kind: Kind, what: &str) -> Error {
    let how = match kind {
        Kind::Member => {
            "already released (detached, left or freed), or its smelt_group_run body returned"
        }
        Kind::Kvs => "already closed",
        Kind::KvsClient => "its store was closed",
        Kind::Model
        | Kind::Tree
        | Kind::Group
        | Kind::AmEndpoint
        | Kind::Global
        | Kind::AggWorker
        | Kind::World => "already freed",
        Kind::Offload => "already stopped",
    };
    Error(
        SMELT_ERR_INVALID_HANDLE,
        format!("{what} is not a live {} handle ({how})", kind.name()),
    )
}

/// The object of a live handle, locked: `generation` and the kind are checked under the
/// lock (they cannot change while it is held).
fn check<'a>(
    guard: MutexGuard<'a, Option<Object>>,
    s: &Slot,
    generation: u32,
    kind: Kind,
    what: &str,
) -> Res<MutexGuard<'a, Option<Object>>> {
    let live = s.generation.load(Ordering::Relaxed) == generation
        && guard.as_ref().is_some_and(|o| o.kind() == kind);
    if live {
        Ok(guard)
    } else {
        Err(stale(kind, what))
    }
}

/// Runs `f` on the shared object of handle `h` (locked briefly: `f` should only clone
/// what it needs).
pub(crate) fn shared<T>(h: usize, kind: Kind, what: &str, f: impl FnOnce(&Object) -> T) -> Res<T> {
    let (s, generation) = find(h, kind, what)?;
    let g = check(lock(&s.obj), s, generation, kind, what)?;
    Ok(f(g.as_ref().expect("checked")))
}

/// The member of handle `h`, locked for the caller: `SMELT_ERR_BUSY` if another thread
/// is using it right now.
pub(crate) fn member(h: usize, what: &str) -> Res<MemberGuard> {
    Ok(MemberGuard(exclusive(h, Kind::Member, what)?))
}

/// The store client of handle `h`, locked for the caller: `SMELT_ERR_BUSY` if another
/// thread is using it right now.
pub(crate) fn kvs_client(h: usize, what: &str) -> Res<KvsClientGuard> {
    Ok(KvsClientGuard(exclusive(h, Kind::KvsClient, what)?))
}

/// The active-message endpoint of handle `h`, locked for the caller: `SMELT_ERR_BUSY`
/// if another thread (or a handler of this endpoint) is using it right now.
pub(crate) fn am_endpoint(h: usize, what: &str) -> Res<AmGuard> {
    Ok(AmGuard(exclusive(h, Kind::AmEndpoint, what)?))
}

/// An active-message endpoint, locked by the calling thread.
pub(crate) struct AmGuard(MutexGuard<'static, Option<Object>>);

impl std::ops::Deref for AmGuard {
    type Target = crate::am::AmEndpoint;
    fn deref(&self) -> &crate::am::AmEndpoint {
        match self.0.as_ref() {
            Some(Object::AmEndpoint(e)) => e,
            _ => unreachable!("checked to be an endpoint"),
        }
    }
}

impl std::ops::DerefMut for AmGuard {
    fn deref_mut(&mut self) -> &mut crate::am::AmEndpoint {
        match self.0.as_mut() {
            Some(Object::AmEndpoint(e)) => e,
            _ => unreachable!("checked to be an endpoint"),
        }
    }
}

/// The aggregation worker of handle `h`, locked for the caller: `SMELT_ERR_BUSY` if
/// another thread is using it right now.
pub(crate) fn agg_worker(h: usize, what: &str) -> Res<AggGuard> {
    Ok(AggGuard(exclusive(h, Kind::AggWorker, what)?))
}

/// An aggregation worker, locked by the calling thread.
pub(crate) struct AggGuard(MutexGuard<'static, Option<Object>>);

impl std::ops::Deref for AggGuard {
    type Target = crate::agg::AggWorker;
    fn deref(&self) -> &crate::agg::AggWorker {
        match self.0.as_ref() {
            Some(Object::AggWorker(w)) => w,
            _ => unreachable!("checked to be an aggregation worker"),
        }
    }
}

impl std::ops::DerefMut for AggGuard {
    fn deref_mut(&mut self) -> &mut crate::agg::AggWorker {
        match self.0.as_mut() {
            Some(Object::AggWorker(w)) => w,
            _ => unreachable!("checked to be an aggregation worker"),
        }
    }
}

/// The object of handle `h` (a member or a store client), locked for the whole call:
/// `SMELT_ERR_BUSY` if another thread holds it right now.
fn exclusive(h: usize, kind: Kind, what: &str) -> Res<MutexGuard<'static, Option<Object>>> {
    let (s, generation) = find(h, kind, what)?;
    let g = match s.obj.try_lock() {
        Ok(g) => g,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => {
            // In use — or being reused for another object: tell them apart.
            if s.generation.load(Ordering::Acquire) != generation {
                return Err(stale(kind, what));
            }
            return err(
                SMELT_ERR_BUSY,
                format!(
                    "{what} is in use by another thread (a {} handle is used by one thread at a time)",
                    kind.name()
                ),
            );
        }
    };
    check(g, s, generation, kind, what)
}

/// A store client, locked by the calling thread.
pub(crate) struct KvsClientGuard(MutexGuard<'static, Option<Object>>);

impl std::ops::Deref for KvsClientGuard {
    type Target = ::smelt_kvs::Client;
    fn deref(&self) -> &::smelt_kvs::Client {
        match self.0.as_ref() {
            Some(Object::KvsClient(c)) => c,
            _ => unreachable!("checked to be a store client"),
        }
    }
}

impl std::ops::DerefMut for KvsClientGuard {
    fn deref_mut(&mut self) -> &mut ::smelt_kvs::Client {
        match self.0.as_mut() {
            Some(Object::KvsClient(c)) => c,
            _ => unreachable!("checked to be a store client"),
        }
    }
}

/// A member, locked by the calling thread.
pub(crate) struct MemberGuard(MutexGuard<'static, Option<Object>>);

impl std::ops::Deref for MemberGuard {
    type Target = MemberState;
    fn deref(&self) -> &MemberState {
        match self.0.as_ref() {
            Some(Object::Member(m)) => m,
            _ => unreachable!("checked to be a member"),
        }
    }
}

impl std::ops::DerefMut for MemberGuard {
    fn deref_mut(&mut self) -> &mut MemberState {
        match self.0.as_mut() {
            Some(Object::Member(m)) => m,
            _ => unreachable!("checked to be a member"),
        }
    }
}

/// How `remove` waits for a slot in use.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Wait until no other thread uses the object.
    Block,
    /// `SMELT_ERR_BUSY` while another thread uses it.
    Busy,
}

/// Removes the object of handle `h` after `allow` accepts it (under the slot's lock),
/// making `h` and every copy of it invalid. The object is returned (the caller drops it
/// outside any lock).
pub(crate) fn remove(
    h: usize,
    kind: Kind,
    what: &str,
    wait: Wait,
    allow: impl FnOnce(&Object) -> Res<()>,
) -> Res<Object> {
    let (s, generation) = find(h, kind, what)?;
    let g = match wait {
        Wait::Block => lock(&s.obj),
        Wait::Busy => match s.obj.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                return err(
                    SMELT_ERR_BUSY,
                    format!("{what} is in use by another thread"),
                )
            }
        },
    };
    let mut g = check(g, s, generation, kind, what)?;
    allow(g.as_ref().expect("checked"))?;
    let obj = g.take().expect("checked");
    s.generation
        .store(generation.wrapping_add(1) & GEN_MASK, Ordering::Release);
    drop(g);
    let index = h & ((1usize << INDEX_BITS) - 1);
    lock(&ALLOC).free.push_back(index);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> Object {
        Object::Model(Arc::new(smelt_model::synthetic(1, 1, 1.0, 1.0, 1.0)))
    }

    #[test]
    fn handles_are_checked() {
        let h = insert(model()).unwrap();
        assert_ne!(h, 0);
        assert!(shared(h, Kind::Model, "model", |_| ()).is_ok());
        // Wrong kind, made-up values, NULL.
        let e = shared(h, Kind::Tree, "tree", |_| ()).err().unwrap();
        assert_eq!(e.0, SMELT_ERR_INVALID_HANDLE);
        assert!(
            e.1.contains("is a model handle, not a tree handle"),
            "{}",
            e.1
        );
        for bogus in [1usize, 0xdead_beef, usize::MAX, h ^ (1 << INDEX_BITS)] {
            let e = shared(bogus, Kind::Model, "model", |_| ()).err().unwrap();
            assert_eq!(e.0, SMELT_ERR_INVALID_HANDLE, "{bogus:#x}: {}", e.1);
        }
        assert_eq!(
            shared(0, Kind::Model, "model", |_| ()).err().unwrap().0,
            SMELT_ERR_INVALID_ARGUMENT
        );
        // Removed once; the second removal and any later use are errors.
        assert!(remove(h, Kind::Model, "model", Wait::Block, |_| Ok(())).is_ok());
        let e = remove(h, Kind::Model, "model", Wait::Block, |_| Ok(()))
            .err()
            .unwrap();
        assert_eq!(e.0, SMELT_ERR_INVALID_HANDLE);
        assert!(e.1.contains("already freed"), "{}", e.1);
        assert_eq!(
            shared(h, Kind::Model, "model", |_| ()).err().unwrap().0,
            SMELT_ERR_INVALID_HANDLE
        );
        // A reused slot gets a new generation: the old handle stays invalid.
        let mut live = Vec::new();
        for _ in 0..4 {
            live.push(insert(model()).unwrap());
        }
        assert!(!live.contains(&h));
        assert_eq!(
            shared(h, Kind::Model, "model", |_| ()).err().unwrap().0,
            SMELT_ERR_INVALID_HANDLE
        );
        for x in live {
            remove(x, Kind::Model, "model", Wait::Block, |_| Ok(())).unwrap();
        }
    }

    #[test]
    fn a_refused_removal_keeps_the_object() {
        let h = insert(model()).unwrap();
        let e = remove(h, Kind::Model, "model", Wait::Block, |_| {
            err(SMELT_ERR_BUSY, "not now")
        })
        .err()
        .unwrap();
        assert_eq!(e.0, SMELT_ERR_BUSY);
        assert!(shared(h, Kind::Model, "model", |_| ()).is_ok());
        remove(h, Kind::Model, "model", Wait::Block, |_| Ok(())).unwrap();
    }
}
