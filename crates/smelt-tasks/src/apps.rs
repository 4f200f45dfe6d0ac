//! The benchmark programs, each with its sequential version: fib, an unbalanced tree
//! search (UTS, T1-like geometric tree) and cilksort (parallel merge sort).

use crate::join;
use smelt_ids::rng::{finalize, mix};

/// Fibonacci by plain recursion (the sequential baseline).
pub fn fib_seq(n: u32) -> u64 {
    if n < 2 {
        n as u64
    } else {
        fib_seq(n - 1) + fib_seq(n - 2)
    }
}

/// Fibonacci with a `join` at every call (the paper's task benchmark: one task per call).
pub fn fib(n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    let (a, b) = join(|| fib(n - 1), || fib(n - 2));
    a + b
}

/// Number of `join`s `fib(n)` makes (the tasks it spawns): fib(n+1) - 1.
pub fn fib_tasks(n: u32) -> u64 {
    fib_seq(n + 1) - 1
}

/// An unbalanced tree of the UTS benchmark's geometric kind (T1-like: fixed shape, a
/// node below `depth` has a geometrically distributed number of children of mean
/// `branching`; below that none). Each node's children follow from its 64-bit state, so
/// the tree is a pure function of the root seed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Uts {
    /// The root's seed.
    pub seed: u64,
    /// Mean number of children.
    pub branching: f64,
    /// Depth below which nodes have no children.
    pub depth: u32,
}

impl Uts {
    /// UTS's T1 shape (geometric, fixed, mean 4) at `depth` (T1 itself is depth 10).
    pub fn t1_like(depth: u32) -> Uts {
        Uts {
            seed: 19,
            branching: 4.0,
            depth,
        }
    }

    /// The state of child `i` of a node (SplitMix64's output function, the
    /// workspace's one: [`smelt_ids::rng`]).
    pub fn child(state: u64, i: u64) -> u64 {
        finalize(state ^ mix(i))
    }

    /// The number of children of a node at `depth` with `state`.
    pub fn children(&self, state: u64, depth: u32) -> u64 {
        if depth >= self.depth {
            return 0;
        }
        // Geometric with mean b: P(k) = p (1-p)^k, p = 1 / (1 + b).
        let u = ((finalize(state) >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        let p = 1.0 / (1.0 + self.branching);
        ((u.ln() / (1.0 - p).ln()).floor() as u64).min(1 << 20)
    }

    /// The root's state.
    pub fn root_state(&self) -> u64 {
        finalize(self.seed)
    }

    /// Nodes of the tree, counted sequentially.
    pub fn count_seq(&self) -> u64 {
        self.count_from(self.root_state(), 0)
    }

    /// Nodes of the subtree of the node with `state` at `depth`, counted sequentially.
    pub fn count_from(&self, state: u64, depth: u32) -> u64 {
        let n = self.children(state, depth);
        1 + (0..n)
            .map(|i| self.count_from(Uts::child(state, i), depth + 1))
            .sum::<u64>()
    }

    /// Nodes of the tree, counted with a task per child (children split in halves with
    /// `join`).
    pub fn count(&self) -> u64 {
        fn node(t: &Uts, s: u64, d: u32) -> u64 {
            let n = t.children(s, d);
            1 + kids(t, s, d, 0, n)
        }
        fn kids(t: &Uts, s: u64, d: u32, lo: u64, hi: u64) -> u64 {
            match hi - lo {
                0 => 0,
                1 => node(t, Uts::child(s, lo), d + 1),
                n => {
                    let mid = lo + n / 2;
                    let (a, b) = join(|| kids(t, s, d, lo, mid), || kids(t, s, d, mid, hi));
                    a + b
                }
            }
        }
        node(self, self.root_state(), 0)
    }
}

/// Below this many elements cilksort sorts (or merges) sequentially.
pub const CILKSORT_CUTOFF: usize = 2048;

/// Cilksort: sorts `v` with a parallel merge sort (halves sorted in parallel, merged by a
/// parallel merge that splits at the median of the larger side). Sorts in place, using a
/// buffer of the same length.
pub fn cilksort(v: &mut [u64]) {
    let mut tmp = vec![0u64; v.len()];
    sort(v, &mut tmp);
}

fn sort(v: &mut [u64], tmp: &mut [u64]) {
    if v.len() <= CILKSORT_CUTOFF {
        v.sort_unstable();
        return;
    }
    let mid = v.len() / 2;
    {
        let (vl, vr) = v.split_at_mut(mid);
        let (tl, tr) = tmp.split_at_mut(mid);
        join(|| sort(vl, tl), || sort(vr, tr));
    }
    {
        let (a, b) = v.split_at(mid);
        merge(a, b, tmp);
    }
    // Copy back in parallel pieces.
    copy(tmp, v);
}

fn copy(from: &[u64], to: &mut [u64]) {
    if from.len() <= 4 * CILKSORT_CUTOFF {
        to.copy_from_slice(from);
    } else {
        let mid = from.len() / 2;
        let (fl, fr) = from.split_at(mid);
        let (tl, tr) = to.split_at_mut(mid);
        join(|| copy(fl, tl), || copy(fr, tr));
    }
}

/// Merges sorted `a` and `b` into `out` (of their total length), in parallel.
fn merge(a: &[u64], b: &[u64], out: &mut [u64]) {
    if a.len() + b.len() <= CILKSORT_CUTOFF {
        merge_seq(a, b, out);
        return;
    }
    let (a, b) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    let ma = a.len() / 2;
    let pivot = a[ma];
    let mb = b.partition_point(|&x| x < pivot);
    let (ol, or) = out.split_at_mut(ma + mb);
    join(
        || merge(&a[..ma], &b[..mb], ol),
        || merge(&a[ma..], &b[mb..], or),
    );
}

/// Merges sorted `a` and `b` into `out` (of their total length), sequentially.
pub fn merge_seq(a: &[u64], b: &[u64], out: &mut [u64]) {
    let (mut i, mut j) = (0, 0);
    for o in out.iter_mut() {
        if j >= b.len() || (i < a.len() && a[i] <= b[j]) {
            *o = a[i];
            i += 1;
        } else {
            *o = b[j];
            j += 1;
        }
    }
}

/// `n` pseudo-random keys from `seed` (the input of the cilksort benchmark).
pub fn random_keys(n: usize, seed: u64) -> Vec<u64> {
    (0..n as u64)
        .map(|i| finalize(seed ^ finalize(i)))
        .collect()
}

/// The benchmark programs as registered task functions, for [`crate::dist`]: tasks that
/// may run on any member of a job.
pub mod dist {
    use super::{fib_seq, Uts};
    use crate::dist::{Functions, TaskCtx};
    use crate::TaskError;

    /// `fib`: payload `[n: u32 LE, cutoff: u32 LE]`, result `u64 LE`; below `cutoff` the
    /// recursion runs sequentially in the task.
    pub const FIB: u32 = 1;
    /// UTS node count: payload `[seed: u64, branching: f64, depth: u32, cutoff: u32,
    /// state: u64, node depth: u32]` (LE), result `u64 LE`; nodes at `cutoff` depth or
    /// deeper count their subtree sequentially.
    pub const UTS: u32 = 2;
    /// A task that panics with the message in its payload (for failure tests).
    pub const PANIC: u32 = 3;
    /// A task that sleeps `payload` milliseconds (u64 LE) in steps of 1 ms, spawning one
    /// child per step (for failure tests: a computation that keeps every member busy).
    pub const SLOW: u32 = 4;

    /// Spawns `k` tasks that each sleep `ms` milliseconds: payload `[k: u32, ms: u32]`
    /// (LE), result the set of members that ran them (a `u64` bit mask, members 0..64).
    pub const FANOUT: u32 = 5;
    /// Sleeps `ms` milliseconds (payload `u32 LE`), result `1 << member` (`u64 LE`).
    pub const SLEEP: u32 = 6;

    fn bad(what: &str) -> TaskError {
        TaskError::Invalid(format!("malformed {what} payload"))
    }

    fn u32_at(p: &[u8], o: usize) -> Option<u32> {
        Some(u32::from_le_bytes(p.get(o..o + 4)?.try_into().ok()?))
    }
    fn u64_at(p: &[u8], o: usize) -> Option<u64> {
        Some(u64::from_le_bytes(p.get(o..o + 8)?.try_into().ok()?))
    }

    /// The payload of a `FIB` task.
    pub fn fib_payload(n: u32, cutoff: u32) -> Vec<u8> {
        [n.to_le_bytes(), cutoff.to_le_bytes()].concat()
    }

    /// A task result as a `u64`.
    pub fn result_u64(r: &[u8]) -> Result<u64, TaskError> {
        u64_at(r, 0)
            .filter(|_| r.len() == 8)
            .ok_or_else(|| bad("result"))
    }

    fn fib_task(ctx: &TaskCtx, p: &[u8]) -> Result<Vec<u8>, TaskError> {
        let (n, cutoff) = match (u32_at(p, 0), u32_at(p, 4)) {
            (Some(n), Some(c)) if p.len() == 8 => (n, c),
            _ => return Err(bad("fib")),
        };
        if n < 2 || n <= cutoff {
            return Ok(fib_seq(n).to_le_bytes().to_vec());
        }
        let h = ctx.spawn(FIB, &fib_payload(n - 1, cutoff));
        let b = result_u64(&fib_task(ctx, &fib_payload(n - 2, cutoff))?)?;
        let a = result_u64(&h.wait(ctx)?)?;
        Ok((a + b).to_le_bytes().to_vec())
    }

    /// The payload of the root `UTS` task for tree `t`, counting sequentially from
    /// depth `cutoff` on.
    pub fn uts_payload(t: &Uts, cutoff: u32) -> Vec<u8> {
        uts_node(t, cutoff, t.root_state(), 0)
    }

    fn uts_node(t: &Uts, cutoff: u32, state: u64, depth: u32) -> Vec<u8> {
        let mut v = Vec::with_capacity(36);
        v.extend_from_slice(&t.seed.to_le_bytes());
        v.extend_from_slice(&t.branching.to_le_bytes());
        v.extend_from_slice(&t.depth.to_le_bytes());
        v.extend_from_slice(&cutoff.to_le_bytes());
        v.extend_from_slice(&state.to_le_bytes());
        v.extend_from_slice(&depth.to_le_bytes());
        v
    }

    fn uts_task(ctx: &TaskCtx, p: &[u8]) -> Result<Vec<u8>, TaskError> {
        if p.len() != 36 {
            return Err(bad("uts"));
        }
        let t = Uts {
            seed: u64_at(p, 0).ok_or_else(|| bad("uts"))?,
            branching: f64::from_bits(u64_at(p, 8).ok_or_else(|| bad("uts"))?),
            depth: u32_at(p, 16).ok_or_else(|| bad("uts"))?,
        };
        let cutoff = u32_at(p, 20).ok_or_else(|| bad("uts"))?;
        let state = u64_at(p, 24).ok_or_else(|| bad("uts"))?;
        let depth = u32_at(p, 32).ok_or_else(|| bad("uts"))?;
        if depth >= cutoff {
            return Ok(t.count_from(state, depth).to_le_bytes().to_vec());
        }
        let kids = t.children(state, depth);
        let hs: Vec<_> = (0..kids)
            .map(|i| ctx.spawn(UTS, &uts_node(&t, cutoff, Uts::child(state, i), depth + 1)))
            .collect();
        let mut total = 1u64;
        for h in hs {
            total += result_u64(&h.wait(ctx)?)?;
        }
        Ok(total.to_le_bytes().to_vec())
    }

    fn panic_task(_ctx: &TaskCtx, p: &[u8]) -> Result<Vec<u8>, TaskError> {
        panic!("{}", String::from_utf8_lossy(p));
    }

    fn slow_task(ctx: &TaskCtx, p: &[u8]) -> Result<Vec<u8>, TaskError> {
        let ms = u64_at(p, 0).ok_or_else(|| bad("slow"))?;
        if ms == 0 {
            return Ok(0u64.to_le_bytes().to_vec());
        }
        let h = ctx.spawn(SLOW, &(ms - 1).to_le_bytes());
        std::thread::sleep(std::time::Duration::from_millis(1));
        h.wait(ctx)
    }

    fn fanout_task(ctx: &TaskCtx, p: &[u8]) -> Result<Vec<u8>, TaskError> {
        let (k, ms) = match (u32_at(p, 0), u32_at(p, 4)) {
            (Some(k), Some(ms)) if p.len() == 8 => (k, ms),
            _ => return Err(bad("fanout")),
        };
        let hs: Vec<_> = (0..k)
            .map(|_| ctx.spawn(SLEEP, &ms.to_le_bytes()))
            .collect();
        let mut mask = 0u64;
        for h in hs {
            mask |= result_u64(&h.wait(ctx)?)?;
        }
        Ok(mask.to_le_bytes().to_vec())
    }

    fn sleep_task(ctx: &TaskCtx, p: &[u8]) -> Result<Vec<u8>, TaskError> {
        let ms = u32_at(p, 0)
            .filter(|_| p.len() == 4)
            .ok_or_else(|| bad("sleep"))?;
        std::thread::sleep(std::time::Duration::from_millis(ms as u64));
        Ok((1u64 << (ctx.member() % 64)).to_le_bytes().to_vec())
    }

    /// The functions above, registered under their ids.
    pub fn functions() -> Functions {
        let mut f = Functions::new();
        for (id, func) in [
            (FIB, fib_task as crate::dist::TaskFn),
            (UTS, uts_task),
            (PANIC, panic_task),
            (SLOW, slow_task),
            (FANOUT, fanout_task),
            (SLEEP, sleep_task),
        ] {
            f.register(id, func).expect("distinct ids");
        }
        f
    }
}
