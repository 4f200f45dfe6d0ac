//! Groups, members and collectives of the C API, over `smelt_runtime`.

use crate::{
    err, guard, obj, obj_mut, out, slice_mut, smelt_status, smelt_tree, Error, Res,
    SMELT_ERR_INVALID_ARGUMENT, SMELT_ERR_RUNTIME, SMELT_ERR_TIMEOUT,
};
use smelt_runtime::{Group, GroupConfig, GroupError, Member};
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Members not currently held by a thread, by rank.
struct Inner {
    members: Mutex<Vec<Option<Member>>>,
    pin: bool,
    size: usize,
}

impl Inner {
    fn take(&self, index: usize) -> Res<Member> {
        let mut v = self.members.lock().unwrap_or_else(|e| e.into_inner());
        match v.get_mut(index) {
            None => err(
                SMELT_ERR_INVALID_ARGUMENT,
                format!("member {index} out of range (the group has {})", self.size),
            ),
            Some(slot) => slot.take().ok_or_else(|| {
                Error(
                    SMELT_ERR_INVALID_ARGUMENT,
                    format!("member {index} is already attached or running"),
                )
            }),
        }
    }

    fn put(&self, m: Member) {
        let mut v = self.members.lock().unwrap_or_else(|e| e.into_inner());
        let r = m.rank();
        if let Some(slot) = v.get_mut(r) {
            *slot = Some(m);
        }
    }
}

/// A group (opaque to C).
pub struct smelt_group {
    inner: Arc<Inner>,
}

/// One member's handle (opaque to C), used by one thread.
pub struct smelt_member {
    member: Member,
    inner: Arc<Inner>,
    /// First error a collective returned on this member (reported by smelt_group_run).
    first_error: Option<(smelt_status, String)>,
}

fn group_err(e: GroupError) -> Error {
    let code = match e {
        GroupError::Timeout { .. } => SMELT_ERR_TIMEOUT,
        _ => SMELT_ERR_RUNTIME,
    };
    Error(code, e.to_string())
}

/// Runs a collective on a member, remembering its first error.
fn with_member(m: *mut smelt_member, f: impl FnOnce(&mut smelt_member) -> Res<()>) -> smelt_status {
    let mut first: Option<(smelt_status, String)> = None;
    let code = guard(|| {
        let sm = obj_mut(m, "member")?;
        let r = f(sm);
        if let Err(Error(code, msg)) = &r {
            if sm.first_error.is_none() {
                first = Some((*code, msg.clone()));
            }
        }
        r
    });
    if let Some(e) = first {
        if let Ok(sm) = obj_mut(m, "member") {
            sm.first_error.get_or_insert(e);
        }
    }
    code
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
        let t = obj(tree, "tree")?;
        if timeout_ms == 0 {
            return err(SMELT_ERR_INVALID_ARGUMENT, "timeout_ms must be at least 1");
        }
        let cfg = GroupConfig {
            timeout: Duration::from_millis(timeout_ms),
            ..GroupConfig::default()
        };
        let g = Group::with_config(std::slice::from_ref(&t.tree), &cfg).map_err(group_err)?;
        let pin = g.placement().pinned;
        let size = g.len();
        let members = g.into_members().into_iter().map(Some).collect();
        let inner = Arc::new(Inner {
            members: Mutex::new(members),
            pin,
            size,
        });
        out(
            group,
            Box::into_raw(Box::new(smelt_group { inner })),
            "group",
        )
    })
}

/// Number of members.
#[no_mangle]
pub extern "C" fn smelt_group_size(group: *const smelt_group, n: *mut usize) -> smelt_status {
    guard(|| out(n, obj(group, "group")?.inner.size, "n"))
}

/// The body a member runs: `fn(member, arg)`.
pub type smelt_member_fn =
    Option<unsafe extern "C" fn(member: *mut smelt_member, arg: *mut c_void)>;

/// Runs `f(member, arg)` once per member, each on its own thread (pinned to the
/// member's CPU when the group is pinned), and returns when all have returned: the
/// first error a member's collective returned, else `SMELT_OK`.
#[no_mangle]
pub extern "C" fn smelt_group_run(
    group: *mut smelt_group,
    f: smelt_member_fn,
    arg: *mut c_void,
) -> smelt_status {
    guard(|| {
        let g = obj(group, "group")?;
        let Some(f) = f else {
            return err(SMELT_ERR_INVALID_ARGUMENT, "fn is NULL");
        };
        let inner = g.inner.clone();
        let mut taken = Vec::with_capacity(inner.size);
        for i in 0..inner.size {
            match inner.take(i) {
                Ok(m) => taken.push(m),
                Err(e) => {
                    for m in taken {
                        inner.put(m);
                    }
                    return Err(e);
                }
            }
        }
        // The C argument travels to the member threads as an address; the C caller
        // keeps it valid until smelt_group_run returns (smelt.h).
        let arg_addr = arg as usize;
        let results: Vec<Option<(smelt_status, String)>> = std::thread::scope(|s| {
            let handles: Vec<_> = taken
                .into_iter()
                .map(|member| {
                    let inner = inner.clone();
                    s.spawn(move || {
                        let mut member = member;
                        if inner.pin {
                            if let Err(e) = member.pin_thread() {
                                let msg = format!(
                                    "cannot pin member {} to CPU {}: {e}",
                                    member.rank(),
                                    member.cpu()
                                );
                                inner.put(member);
                                return Some((SMELT_ERR_RUNTIME, msg));
                            }
                        }
                        let mut sm = smelt_member {
                            member,
                            inner: inner.clone(),
                            first_error: None,
                        };
                        let p: *mut smelt_member = &mut sm;
                        // SAFETY: `f` is the caller's smelt_member_fn; `p` points to a live
                        // smelt_member this thread owns for the whole call; `arg` is the
                        // caller's pointer, valid until smelt_group_run returns (smelt.h).
                        unsafe { f(p, arg_addr as *mut c_void) };
                        let smelt_member {
                            member,
                            first_error,
                            ..
                        } = sm;
                        inner.put(member);
                        first_error
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or(Some((SMELT_ERR_RUNTIME, "a member thread panicked".into())))
                })
                .collect()
        });
        match results.into_iter().flatten().next() {
            Some((code, msg)) => err(code, msg),
            None => Ok(()),
        }
    })
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
        let g = obj(group, "group")?;
        if member.is_null() {
            return err(SMELT_ERR_INVALID_ARGUMENT, "member is NULL");
        }
        let mut m = g.inner.take(index)?;
        if g.inner.pin {
            if let Err(e) = m.pin_thread() {
                let msg = format!("cannot pin member {index} to CPU {}: {e}", m.cpu());
                g.inner.put(m);
                return err(SMELT_ERR_RUNTIME, msg);
            }
        }
        let sm = smelt_member {
            member: m,
            inner: g.inner.clone(),
            first_error: None,
        };
        out(member, Box::into_raw(Box::new(sm)), "member")
    })
}

/// Detaches a member attached with smelt_group_attach (NULL is ignored).
#[no_mangle]
pub extern "C" fn smelt_member_detach(member: *mut smelt_member) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if let Some(sm) = crate::take_box(member) {
            let smelt_member { member, inner, .. } = *sm;
            inner.put(member);
        }
    }));
}

/// Member index (rank, = tree member index).
#[no_mangle]
pub extern "C" fn smelt_member_index(
    member: *const smelt_member,
    index: *mut usize,
) -> smelt_status {
    guard(|| out(index, obj(member, "member")?.member.rank(), "index"))
}

/// OS CPU id of the member.
#[no_mangle]
pub extern "C" fn smelt_member_cpu(member: *const smelt_member, cpu: *mut u32) -> smelt_status {
    guard(|| out(cpu, obj(member, "member")?.member.cpu(), "cpu"))
}

/// 1 at the root, else 0.
#[no_mangle]
pub extern "C" fn smelt_member_is_root(
    member: *const smelt_member,
    is_root: *mut std::ffi::c_int,
) -> smelt_status {
    guard(|| {
        out(
            is_root,
            obj(member, "member")?.member.is_root() as std::ffi::c_int,
            "is_root",
        )
    })
}

/// Barrier over the group.
#[no_mangle]
pub extern "C" fn smelt_barrier(member: *mut smelt_member) -> smelt_status {
    with_member(member, |sm| sm.member.barrier().map_err(group_err))
}

/// Broadcast of `len` bytes from the root's `buf` into every member's `buf`.
#[no_mangle]
pub extern "C" fn smelt_broadcast(
    member: *mut smelt_member,
    buf: *mut c_void,
    len: usize,
) -> smelt_status {
    with_member(member, |sm| broadcast(sm, buf, len))
}

fn broadcast(sm: &mut smelt_member, buf: *mut c_void, len: usize) -> Res<()> {
    let b = slice_mut(buf as *mut u8, len, "buf")?;
    let mut v = if sm.member.is_root() {
        b.to_vec()
    } else {
        Vec::new()
    };
    sm.member.broadcast(&mut v).map_err(group_err)?;
    if v.len() != len {
        return err(
            SMELT_ERR_INVALID_ARGUMENT,
            format!(
                "broadcast: the root sent {} bytes, this member expects {len}",
                v.len()
            ),
        );
    }
    b.copy_from_slice(&v);
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
    with_member(member, |sm| reduce(sm, buf, len, op, arg))
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
    with_member(member, |sm| {
        reduce(sm, buf, len, op, arg)?;
        broadcast(sm, buf, len)
    })
}

/// Applies the C operator to two byte buffers of equal length.
fn apply(
    op: unsafe extern "C" fn(*mut c_void, *const c_void, usize, *mut c_void),
    acc: &mut [u8],
    other: &[u8],
    arg: *mut c_void,
) {
    let n = acc.len().min(other.len());
    // SAFETY: `op` is the caller's operator (smelt.h: it reads `len` bytes of `in` and
    // updates `len` bytes of `inout`); both buffers are live Rust buffers of at least
    // `n` bytes for the duration of the call, and `arg` is passed through untouched.
    unsafe {
        op(
            acc.as_mut_ptr() as *mut c_void,
            other.as_ptr() as *const c_void,
            n,
            arg,
        )
    }
}

fn reduce(
    sm: &mut smelt_member,
    buf: *mut c_void,
    len: usize,
    op: smelt_reduce_op,
    arg: *mut c_void,
) -> Res<()> {
    let Some(op) = op else {
        return err(SMELT_ERR_INVALID_ARGUMENT, "op is NULL");
    };
    let b = slice_mut(buf as *mut u8, len, "buf")?;
    if len <= 8 {
        // One word: a true tree reduction, combined at every inner member.
        let mut w = [0u8; 8];
        w[..len].copy_from_slice(b);
        let r = sm
            .member
            .reduce(u64::from_le_bytes(w), |x: u64, y: u64| {
                let mut a = x.to_le_bytes();
                let c = y.to_le_bytes();
                apply(op, &mut a[..len], &c[..len], arg);
                u64::from_le_bytes(a)
            })
            .map_err(group_err)?;
        if let Some(r) = r {
            b.copy_from_slice(&r.to_le_bytes()[..len]);
        }
        return Ok(());
    }
    // Longer buffers: gather every member's buffer along the tree word by word, then
    // combine at the root in rank order (the operator must be associative and
    // commutative, as for MPI_Reduce with a user op).
    let words = len.div_ceil(8);
    let me = sm.member.rank();
    let mut all: Option<Vec<Vec<u8>>> = None;
    for k in 0..words {
        let mut w = [0u8; 8];
        let part = &b[k * 8..len.min(k * 8 + 8)];
        w[..part.len()].copy_from_slice(part);
        let got = sm
            .member
            .gather_word(u64::from_le_bytes(w))
            .map_err(group_err)?;
        if let Some(vals) = got {
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

/// Releases a group (NULL is ignored). Members still attached keep working memory
/// safely but can no longer be used for collectives with detached peers.
#[no_mangle]
pub extern "C" fn smelt_group_free(group: *mut smelt_group) {
    let _ = catch_unwind(AssertUnwindSafe(|| crate::free(group)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::*;
    use std::ptr;
    use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

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
            SMELT_OK
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
        let factor: usize = std::env::var("SMELT_STRESS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1)
            .max(1);
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
        assert_eq!(smelt_group_attach(g, 0, &mut b), SMELT_ERR_INVALID_ARGUMENT);
        assert_eq!(smelt_group_attach(g, 9, &mut b), SMELT_ERR_INVALID_ARGUMENT);
        assert_eq!(
            smelt_group_run(g, Some(body), ptr::null_mut()),
            SMELT_ERR_INVALID_ARGUMENT
        );
        smelt_member_detach(a);
        assert_eq!(
            smelt_group_run(g, None, ptr::null_mut()),
            SMELT_ERR_INVALID_ARGUMENT
        );
        smelt_group_free(g);
        smelt_tree_free(t);
        smelt_model_free(m);
    }
}
