//! The global array: blocks of elements owned by the members of a job, reached by
//! global index.

use crate::{AccumulateOp, ElemType, Element, GlobalError};
use smelt_mesh::world::{Region, World, WorldKind};
use smelt_transport::shm::ShmMember;
use smelt_transport::{Backoff, WaitPolicy};
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Words at the start of a node's memory kept for the array's own use (the barrier's
/// arrival count and generation, each on a cache line of its own).
pub(crate) const CTRL_WORDS: usize = 16;
const ARRIVALS: usize = 0;
const GENERATION: usize = 8;

/// Largest number of elements of one array (2^40: 8 TiB of words).
pub const MAX_LEN: u64 = 1 << 40;

/// How an array waits. The default: the shared [`LinkConfig`](smelt_mesh::LinkConfig)
/// defaults, no cache.
#[derive(Debug, Clone, Default)]
pub struct GlobalConfig {
    /// The shared link settings: `timeout` is the longest wait in a barrier (default
    /// 30 s): [`GlobalError::Timeout`], never a hang; `wait` is how a barrier waits:
    /// spin, then yield, then sleep (default `None`: the transport's oversubscribed
    /// policy, so 16 members on 2 CPUs make progress). An array has no rings of its
    /// own: `capacity` is not used.
    pub link: smelt_mesh::LinkConfig,
    /// Lines of [`CACHE_LINE`](crate::CACHE_LINE) elements of other nodes' blocks a
    /// member keeps after reading them, until its next invalidate fence or barrier
    /// (default 0: no cache, every read of another node's element goes to its owner).
    /// Only arrays across nodes (MPI) have a cache.
    pub cache_lines: usize,
}

/// How an array's elements are spread: member `m` owns the block
/// `m*b .. min((m+1)*b, len)` with `b = ceil(len / members)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    len: u64,
    members: usize,
    block: u64,
}

impl Layout {
    /// The layout of `len` elements (1 to [`MAX_LEN`]) over `members` members (at
    /// least 1).
    pub fn new(len: u64, members: usize) -> Result<Layout, GlobalError> {
        if len == 0 || len > MAX_LEN {
            return Err(GlobalError::Invalid(format!(
                "an array of {len} elements (1 to {MAX_LEN})"
            )));
        }
        if members == 0 || members > 1 << 20 {
            return Err(GlobalError::Invalid(format!(
                "an array over {members} members (1 to {})",
                1 << 20
            )));
        }
        Ok(Layout {
            len,
            members,
            block: len.div_ceil(members as u64),
        })
    }

    /// Elements of the array.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Always false: an array has at least one element.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Members the elements are spread over.
    pub fn members(&self) -> usize {
        self.members
    }

    /// The member that owns element `index` (`index < len`).
    pub fn owner(&self, index: u64) -> usize {
        (index / self.block) as usize
    }

    /// The indices member `member` owns (empty for members past the last block).
    pub fn block(&self, member: usize) -> Range<u64> {
        let s = (member as u64).saturating_mul(self.block).min(self.len);
        let e = (member as u64 + 1).saturating_mul(self.block).min(self.len);
        s..e
    }

    /// Ok if `index..index+count` lies inside the array.
    pub fn check(&self, index: u64, count: usize) -> Result<(), GlobalError> {
        match index.checked_add(count as u64) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(GlobalError::OutOfRange {
                index,
                count,
                len: self.len,
            }),
        }
    }

    /// The pieces of `index..index+count` (checked) by owner: `(owner, offset in the
    /// owner's block, elements)`, in index order.
    pub fn pieces(&self, index: u64, count: usize) -> impl Iterator<Item = (usize, u64, usize)> {
        let block = self.block;
        let end = index + count as u64;
        let mut at = index;
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let owner = at / block;
            let stop = ((owner + 1) * block).min(end);
            let piece = (owner as usize, at - owner * block, (stop - at) as usize);
            at = stop;
            Some(piece)
        })
    }
}

/// The memory of the array's elements on this member's node.
pub(crate) enum Memory {
    /// A region of a world ([`World::region`]): process memory between threads, the
    /// job's segment between processes (whose liveness `job` tells).
    World {
        region: Region,
        job: Option<Arc<ShmMember>>,
    },
}

impl Memory {
    #[inline]
    pub(crate) fn words(&self) -> &[AtomicU64] {
        match self {
            Memory::World { region, .. } => region.words(),
        }
    }

    /// The segment of the members' processes (None between threads).
    fn job(&self) -> Option<&ShmMember> {
        match self {
            Memory::World { job, .. } => job.as_deref(),
        }
    }
}

/// The part of an array on other nodes (MPI one-sided communication). Offsets are
/// in elements from the start of the owner's block.
pub(crate) trait Net: Send + Sync {
    fn get(&self, owner: usize, offset: u64, out: &mut [u64]) -> Result<(), GlobalError>;
    fn put(&self, owner: usize, offset: u64, words: &[u64]) -> Result<(), GlobalError>;
    fn accumulate(
        &self,
        owner: usize,
        offset: u64,
        words: &[u64],
        ty: ElemType,
        op: AccumulateOp,
    ) -> Result<(), GlobalError>;
    fn fetch_op(
        &self,
        owner: usize,
        offset: u64,
        word: u64,
        ty: ElemType,
        op: AccumulateOp,
    ) -> Result<u64, GlobalError>;
    /// True when accumulates to this node's elements must go through the network too
    /// (so that they are atomic with the other nodes' accumulates).
    fn atomics_over_net(&self) -> bool;
    fn cache_stats(&self) -> crate::CacheStats;
    fn fence_writeback(&self) -> Result<(), GlobalError>;
    fn fence_invalidate(&self) -> Result<(), GlobalError>;
    fn barrier(&self, timeout: Duration) -> Result<(), GlobalError>;
}

/// A member's handle on a global array of `T` (see the crate's documentation).
///
/// Every operation takes `&self`: the handle is `Send` and `Sync`, and threads of a
/// member may share it.
pub struct GlobalArray<T: Element> {
    /// First, so that it is dropped (the window freed) before the memory it exposes.
    pub(crate) net: Option<Box<dyn Net>>,
    pub(crate) mem: Memory,
    pub(crate) layout: Layout,
    pub(crate) rank: usize,
    /// Members meeting at the node barrier (arrays without a network part).
    pub(crate) node_members: u64,
    /// Per owner: the word where its block starts in this node's memory, or `None`
    /// for an owner on another node.
    pub(crate) base: Vec<Option<usize>>,
    pub(crate) cfg: GlobalConfig,
    pub(crate) _t: PhantomData<fn() -> T>,
}

impl<T: Element> GlobalArray<T> {
    /// Member `rank`'s array when every member shares `mem` (threads of a process, the
    /// processes of a host): every block is in it, after the control words.
    pub(crate) fn on_one_node(mem: Memory, layout: Layout, rank: usize, cfg: GlobalConfig) -> Self {
        let members = layout.members();
        GlobalArray {
            mem,
            layout,
            rank,
            node_members: members as u64,
            base: (0..members)
                .map(|m| Some(CTRL_WORDS + layout.block(m).start as usize))
                .collect(),
            net: None,
            cfg,
            _t: PhantomData,
        }
    }
}

impl<T: Element> std::fmt::Debug for GlobalArray<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlobalArray")
            .field("type", &T::TYPE)
            .field("len", &self.layout.len)
            .field("members", &self.layout.members)
            .field("rank", &self.rank)
            .field("over_mpi", &self.net.is_some())
            .finish()
    }
}

/// Makes an array of `len` elements spread over `members` threads of this process:
/// the arrays of a world of `members` threads ([`GlobalArray::from_world`]) made at
/// once, one handle per member (member `i` at index `i`), sharing the process's
/// memory.
pub fn threads<T: Element>(
    len: u64,
    members: usize,
    cfg: GlobalConfig,
) -> Result<Vec<GlobalArray<T>>, GlobalError> {
    Layout::new(len, members)?;
    // Between threads, making a service is not a meeting: this thread makes every
    // member's handle in turn.
    World::threads(members)?
        .iter()
        .map(|w| GlobalArray::from_world(w, len, cfg.clone()))
        .collect()
}

/// The control word holding the array's element type (its id + 1; 0: not set yet).
const TYPE_WORD: usize = 1;

impl<T: Element> GlobalArray<T> {
    /// A collective call: this member's handle on a new array of `len` elements of `T`
    /// spread over every member of `world` (member `m` owns block `m`, see [`Layout`]).
    /// The elements live in a region of the world ([`World::region`]): process memory
    /// between threads, the job's one segment between processes, read and written
    /// directly by every member. Every member makes the array with the same `len`
    /// (else [`GlobalError::World`]) and `T` (else [`GlobalError::WrongType`]), in the
    /// same order relative to the other services it makes from the world. A member
    /// process that dies is reported to the others' barriers as
    /// [`GlobalError::PeerGone`].
    pub fn from_world(world: &World, len: u64, cfg: GlobalConfig) -> Result<Self, GlobalError> {
        match world.kind() {
            #[cfg(feature = "mpi")]
            WorldKind::Mpi => return crate::mpi::array_from_world(world, len, cfg),
            WorldKind::Threads | WorldKind::Processes => {}
            // A world of MPI ranks in a build without the `mpi` feature.
            #[allow(unreachable_patterns)]
            other => {
                return Err(GlobalError::Invalid(format!(
                    "global arrays over a world of {other:?} need smelt-global's `mpi` feature"
                )))
            }
        }
        let layout = Layout::new(len, world.size())?;
        let words = CTRL_WORDS + len as usize;
        let region = world.region(words.checked_mul(8).ok_or_else(|| {
            GlobalError::Invalid(format!("an array of {len} elements is too large"))
        })?)?;
        let ty = T::TYPE as u64 + 1;
        match region.words()[TYPE_WORD].compare_exchange(0, ty, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {}
            Err(t) if t == ty => {}
            Err(t) => {
                return Err(match ElemType::from_id((t - 1) as u32) {
                    Some(array) => GlobalError::WrongType {
                        array,
                        requested: T::TYPE,
                    },
                    None => GlobalError::Invalid(format!(
                        "the array's region holds an unknown element type ({t})"
                    )),
                })
            }
        }
        let mem = Memory::World {
            region,
            job: world.shm_member().cloned(),
        };
        Ok(GlobalArray::on_one_node(
            mem,
            layout,
            world.rank().index(),
            cfg,
        ))
    }
}

#[inline]
fn combine_word<T: Element>(w: &AtomicU64, v: T, op: AccumulateOp) -> T {
    if op == AccumulateOp::Sum && matches!(T::TYPE, ElemType::U64 | ElemType::I64) {
        // Two's-complement wrapping sums are the same on the bits.
        return T::from_word(w.fetch_add(v.to_word(), Ordering::SeqCst));
    }
    if op == AccumulateOp::Replace {
        return T::from_word(w.swap(v.to_word(), Ordering::SeqCst));
    }
    let mut cur = w.load(Ordering::Relaxed);
    loop {
        let new = T::from_word(cur).combine(v, op).to_word();
        match w.compare_exchange_weak(cur, new, Ordering::SeqCst, Ordering::Relaxed) {
            Ok(_) => return T::from_word(cur),
            Err(now) => cur = now,
        }
    }
}

/// Elements moved through the network per call at most (a buffer on the stack).
const NET_CHUNK: usize = 256;

impl<T: Element> GlobalArray<T> {
    /// The element type.
    pub fn elem_type(&self) -> ElemType {
        T::TYPE
    }

    /// Elements of the array.
    pub fn len(&self) -> u64 {
        self.layout.len
    }

    /// Always false: an array has at least one element.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// This member's index.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Members the array is spread over.
    pub fn members(&self) -> usize {
        self.layout.members
    }

    /// How the elements are spread.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The indices this member owns.
    pub fn local_range(&self) -> Range<u64> {
        self.layout.block(self.rank)
    }

    /// True when element `index` lies in this member's node's memory (reached by
    /// loads and stores rather than over the network).
    pub fn is_on_node(&self, index: u64) -> bool {
        index < self.layout.len && self.base[self.layout.owner(index)].is_some()
    }

    #[inline]
    fn node_words(&self, owner: usize, offset: u64, n: usize) -> Option<&[AtomicU64]> {
        let b = self.base[owner]? + offset as usize;
        Some(&self.mem.words()[b..b + n])
    }

    /// Reads `out.len()` elements from `index` on.
    pub fn get(&self, index: u64, out: &mut [T]) -> Result<(), GlobalError> {
        self.layout.check(index, out.len())?;
        let mut done = 0;
        for (owner, offset, n) in self.layout.pieces(index, out.len()) {
            let dst = &mut out[done..done + n];
            match self.node_words(owner, offset, n) {
                Some(src) => {
                    for (d, w) in dst.iter_mut().zip(src) {
                        *d = T::from_word(w.load(Ordering::Relaxed));
                    }
                }
                None => {
                    let net = self.net()?;
                    let mut buf = [0u64; NET_CHUNK];
                    for (k, chunk) in dst.chunks_mut(NET_CHUNK).enumerate() {
                        let b = &mut buf[..chunk.len()];
                        net.get(owner, offset + (k * NET_CHUNK) as u64, b)?;
                        for (d, w) in chunk.iter_mut().zip(b.iter()) {
                            *d = T::from_word(*w);
                        }
                    }
                }
            }
            done += n;
        }
        Ok(())
    }

    /// Reads one element.
    pub fn get_one(&self, index: u64) -> Result<T, GlobalError> {
        let mut v = [T::from_word(0)];
        self.get(index, &mut v)?;
        Ok(v[0])
    }

    /// Writes `data` from `index` on. Writes to other nodes are buffered until the
    /// next [`fence_writeback`](Self::fence_writeback) or barrier (this member's own
    /// later reads see them at once).
    pub fn put(&self, index: u64, data: &[T]) -> Result<(), GlobalError> {
        self.layout.check(index, data.len())?;
        let mut done = 0;
        for (owner, offset, n) in self.layout.pieces(index, data.len()) {
            let src = &data[done..done + n];
            match self.node_words(owner, offset, n) {
                Some(dst) => {
                    for (w, v) in dst.iter().zip(src) {
                        w.store(v.to_word(), Ordering::Relaxed);
                    }
                }
                None => self.net_words(owner, offset, src, |net, o, off, w| net.put(o, off, w))?,
            }
            done += n;
        }
        Ok(())
    }

    fn net(&self) -> Result<&dyn Net, GlobalError> {
        self.net
            .as_deref()
            .ok_or_else(|| GlobalError::Invalid("an element on another node without MPI".into()))
    }

    fn net_words(
        &self,
        owner: usize,
        offset: u64,
        src: &[T],
        f: impl Fn(&dyn Net, usize, u64, &[u64]) -> Result<(), GlobalError>,
    ) -> Result<(), GlobalError> {
        let net = self.net()?;
        let mut buf = [0u64; NET_CHUNK];
        for (k, chunk) in src.chunks(NET_CHUNK).enumerate() {
            for (b, v) in buf.iter_mut().zip(chunk) {
                *b = v.to_word();
            }
            f(
                net,
                owner,
                offset + (k * NET_CHUNK) as u64,
                &buf[..chunk.len()],
            )?;
        }
        Ok(())
    }

    /// Combines `data` into the elements from `index` on, each element atomically
    /// (`op`: sum, min, max, replace). Accumulates to one element from any members
    /// never lose an update.
    pub fn accumulate(&self, index: u64, data: &[T], op: AccumulateOp) -> Result<(), GlobalError> {
        self.layout.check(index, data.len())?;
        let over_net = self.net.as_ref().is_some_and(|n| n.atomics_over_net());
        let mut done = 0;
        for (owner, offset, n) in self.layout.pieces(index, data.len()) {
            let src = &data[done..done + n];
            match self.node_words(owner, offset, n).filter(|_| !over_net) {
                Some(dst) => {
                    for (w, v) in dst.iter().zip(src) {
                        combine_word(w, *v, op);
                    }
                }
                None => self.net_words(owner, offset, src, |net, o, off, w| {
                    net.accumulate(o, off, w, T::TYPE, op)
                })?,
            }
            done += n;
        }
        Ok(())
    }

    /// Combines `value` into element `index` atomically and returns the element's
    /// value before (a fetch-and-add with [`AccumulateOp::Sum`]: the work-stealing counter's
    /// step).
    pub fn fetch_accumulate(
        &self,
        index: u64,
        value: T,
        op: AccumulateOp,
    ) -> Result<T, GlobalError> {
        self.layout.check(index, 1)?;
        let over_net = self.net.as_ref().is_some_and(|n| n.atomics_over_net());
        let owner = self.layout.owner(index);
        let offset = index - self.layout.block(owner).start;
        match self.node_words(owner, offset, 1).filter(|_| !over_net) {
            Some(w) => Ok(combine_word(&w[0], value, op)),
            None => Ok(T::from_word(self.net()?.fetch_op(
                owner,
                offset,
                value.to_word(),
                T::TYPE,
                op,
            )?)),
        }
    }

    /// Hits and misses of this member's cache of other nodes' elements (zero without
    /// one: see [`GlobalConfig::cache_lines`]).
    pub fn cache_stats(&self) -> crate::CacheStats {
        self.net
            .as_ref()
            .map(|n| n.cache_stats())
            .unwrap_or_default()
    }

    /// The write-back fence (the slides' `SD_fence`): every write this member made
    /// before it (puts and accumulates, to any node) is complete at its owner when it
    /// returns, and ordered before this member's later operations.
    pub fn fence_writeback(&self) -> Result<(), GlobalError> {
        fence(Ordering::SeqCst);
        if let Some(net) = &self.net {
            net.fence_writeback()?;
        }
        Ok(())
    }

    /// The invalidate fence (the slides' `SI_fence`): reads after it see every write
    /// that was complete at its owner (written back) before the writer's
    /// synchronisation with this member that this member observed before the fence.
    /// It empties this member's cache of other nodes' elements.
    pub fn fence_invalidate(&self) -> Result<(), GlobalError> {
        if let Some(net) = &self.net {
            net.fence_invalidate()?;
        }
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// Waits until every member reached the barrier: a write-back fence, the meeting,
    /// an invalidate fence. At most the configuration's timeout.
    pub fn barrier(&self) -> Result<(), GlobalError> {
        self.fence_writeback()?;
        match &self.net {
            Some(net) => net.barrier(self.cfg.link.timeout)?,
            None => self.node_barrier()?,
        }
        self.fence_invalidate()
    }

    fn node_barrier(&self) -> Result<(), GlobalError> {
        let w = self.mem.words();
        let gen = w[GENERATION].load(Ordering::SeqCst);
        let arrived = w[ARRIVALS].fetch_add(1, Ordering::SeqCst) + 1;
        if arrived == self.node_members {
            w[ARRIVALS].store(0, Ordering::SeqCst);
            w[GENERATION].fetch_add(1, Ordering::SeqCst);
            return Ok(());
        }
        let start = Instant::now();
        let wait = self.cfg.link.wait_or(WaitPolicy::OVERSUBSCRIBED);
        let mut backoff = Backoff::with_policy(&wait);
        let mut park = wait.park_initial;
        while w[GENERATION].load(Ordering::SeqCst) == gen {
            if !backoff.is_completed() {
                backoff.snooze();
                continue;
            }
            if let Some(m) = self.mem.job() {
                if m.is_aborted() {
                    return Err(GlobalError::Aborted);
                }
                // (This process's own lock cannot be tested from its own file.)
                let dead = (0..m.members()).find(|r| *r != m.rank() && !m.is_alive(*r));
                if let Some(dead) = dead {
                    m.abort();
                    return Err(GlobalError::PeerGone {
                        member: dead as usize,
                    });
                }
            }
            if start.elapsed() >= self.cfg.link.timeout {
                return Err(GlobalError::Timeout {
                    what: format!(
                        "member {} waiting at the array's barrier (the array cannot be used any more)",
                        self.rank
                    ),
                    after: self.cfg.link.timeout,
                });
            }
            std::thread::sleep(park);
            park = (park * 2).min(wait.park_max);
        }
        Ok(())
    }
}
