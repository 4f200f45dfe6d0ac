//! With more members than CPUs a group lends from `OVERSUBSCRIBED_LEND_FROM` (32 KiB)
//! by default (issue 28): the lender and its borrowers wait with the oversubscribed
//! policy (yield, then park), and one copy from the lender's buffer beats two through
//! the rings (`examples/oversub_reduce`). Observable: a loan is a rendezvous, so with
//! the default a leaf's 64 KiB reduction waits for its parent and the root's 128 KiB
//! broadcast waits for its children; with lending turned off (`usize::MAX`) the rings
//! hold the message and both return while the other member is still away.

use smelt_runtime::{
    Group, GroupConfig, GroupError, LinkConfig, Member, ReduceOp, LEND_FROM,
    OVERSUBSCRIBED_LEND_FROM,
};
use smelt_tree::Tree;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A flat group of more members than this process may use CPUs (at least 3), with
/// rings of 4096 slots (192 KiB).
fn flat_oversubscribed(lend_from: usize) -> Group {
    let cpus = smelt_transport::allowed_cpus().map_or(1, |c| c.len());
    let n = (cpus + 1).max(3);
    let tree = Tree::from_raw(
        (0..n as u32).collect(),
        0,
        (0..n)
            .map(|i| if i == 0 { (1..n).collect() } else { vec![] })
            .collect(),
    )
    .unwrap();
    let cfg = GroupConfig {
        link: LinkConfig::default()
            .capacity(4096)
            .timeout(Duration::from_secs(30)),
        lend_from,
        ..GroupConfig::default()
    };
    let g = Group::with_config(&[tree], &cfg).unwrap();
    assert!(g.placement().oversubscribed);
    g
}

/// Runs `op` on every member of [`flat_oversubscribed`]`(lend_from)`, member `away`
/// first sleeping 500 ms: whether member `watch`'s `op` returned before `away` woke.
fn returns_before(
    lend_from: usize,
    away: usize,
    watch: usize,
    op: impl Fn(&mut Member) -> Result<(), GroupError> + Sync,
) -> bool {
    let g = flat_oversubscribed(lend_from);
    let woke = AtomicBool::new(false);
    let early = AtomicBool::new(false);
    g.run(|m| {
        let me = m.rank().index();
        if me == away {
            std::thread::sleep(Duration::from_millis(500));
            woke.store(true, Ordering::SeqCst);
        }
        op(m)?;
        if me == watch && !woke.load(Ordering::SeqCst) {
            early.store(true, Ordering::SeqCst);
        }
        m.barrier()
    })
    .unwrap()
    .into_iter()
    .for_each(|r| r.unwrap());
    early.load(Ordering::SeqCst)
}

/// Whether a leaf's 64 KiB reduction returned before the root, away 500 ms, took part.
fn leaf_returns_before_the_root_took_part(lend_from: usize) -> bool {
    returns_before(lend_from, 0, 1, |m| {
        let n = m.size();
        let mut v = vec![1.0f64; 8192];
        if m.reduce_slice_op(&mut v, ReduceOp::Sum)? {
            assert!(v.iter().all(|&x| x == n as f64));
        }
        Ok(())
    })
}

#[test]
fn an_oversubscribed_group_lends_reductions_by_default() {
    const { assert!(OVERSUBSCRIBED_LEND_FROM <= 64 << 10 && OVERSUBSCRIBED_LEND_FROM < LEND_FROM) };
    // The default (64 KiB is lent there): the leaf's loan waits for the root.
    assert!(!leaf_returns_before_the_root_took_part(LEND_FROM));
    // Lending off: through the rings, which hold it.
    assert!(leaf_returns_before_the_root_took_part(usize::MAX));
    // A threshold set otherwise applies as given.
    assert!(leaf_returns_before_the_root_took_part(128 << 10));
}

/// Whether the root's broadcast of 128 KiB returned before member 1, away 500 ms,
/// took part (every member gets the root's bytes either way).
fn root_returns_before_a_leaf_took_part(lend_from: usize) -> bool {
    let bytes = 128 << 10;
    let byte = |i: usize| (i * 7 % 251) as u8;
    returns_before(lend_from, 1, 0, |m| {
        let mut v: Vec<u8> = if m.is_root() {
            (0..bytes).map(byte).collect()
        } else {
            vec![0; bytes]
        };
        m.broadcast_into(&mut v)?;
        assert!(v.iter().enumerate().all(|(i, &b)| b == byte(i)));
        Ok(())
    })
}

#[test]
fn an_oversubscribed_group_lends_broadcasts_by_default() {
    // The default: the root waits for its borrowers.
    assert!(!root_returns_before_a_leaf_took_part(LEND_FROM));
    // Lending off: through the rings (they hold it), the root does not wait.
    assert!(root_returns_before_a_leaf_took_part(usize::MAX));
}
