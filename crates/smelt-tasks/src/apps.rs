//! The benchmark programs, each with its sequential version: fib, an unbalanced tree
//! search (UTS, T1-like geometric tree) and cilksort (parallel merge sort).

use crate::join;

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

    fn mix(mut z: u64) -> u64 {
        // splitmix64's finaliser
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The state of child `i` of a node.
    pub fn child(state: u64, i: u64) -> u64 {
        Self::mix(state ^ Self::mix(i.wrapping_add(0x9e37_79b9_7f4a_7c15)))
    }

    /// The number of children of a node at `depth` with `state`.
    pub fn children(&self, state: u64, depth: u32) -> u64 {
        if depth >= self.depth {
            return 0;
        }
        // Geometric with mean b: P(k) = p (1-p)^k, p = 1 / (1 + b).
        let u = ((Self::mix(state) >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        let p = 1.0 / (1.0 + self.branching);
        ((u.ln() / (1.0 - p).ln()).floor() as u64).min(1 << 20)
    }

    /// Nodes of the tree, counted sequentially.
    pub fn count_seq(&self) -> u64 {
        fn go(t: &Uts, s: u64, d: u32) -> u64 {
            let n = t.children(s, d);
            1 + (0..n).map(|i| go(t, Uts::child(s, i), d + 1)).sum::<u64>()
        }
        go(self, Self::mix(self.seed), 0)
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
        node(self, Self::mix(self.seed), 0)
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

fn merge_seq(a: &[u64], b: &[u64], out: &mut [u64]) {
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
        .map(|i| Uts::mix(seed ^ Uts::mix(i)))
        .collect()
}
