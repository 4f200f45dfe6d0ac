//! Checkout/checkin of global arrays from tasks: concurrent writers of disjoint ranges
//! in a pool, read-modify-write, reads, misuse; and tasks across members that fill and
//! sum an array with the fences applied at steals and syncs.

use smelt_global::GlobalArray;
use smelt_tasks::checkout::{checkout, Access};
use smelt_tasks::dist::{Functions, Member, TaskConfig, TaskCtx};
use smelt_tasks::{parallel_for, reduce, Pool, PoolConfig, TaskError};
use std::sync::{Arc, OnceLock};

#[test]
fn concurrent_writers_of_disjoint_ranges_then_readers() {
    let len = 20_000u64;
    let arrays = smelt_global::threads::<u64>(len, 4, Default::default()).unwrap();
    let a = &arrays[1];
    let pool = Pool::new(PoolConfig::new(8)).unwrap();
    let chunk = 137u64; // not a divisor of the blocks: ranges cross owners
    let chunks = len.div_ceil(chunk) as usize;
    // Write: every element written by exactly one task.
    pool.install(|| {
        parallel_for(0..chunks, 1, |c| {
            let lo = c as u64 * chunk;
            let hi = (lo + chunk).min(len);
            let mut co = checkout(a, lo..hi, Access::Write).unwrap();
            assert!(co.iter().all(|&x| x == 0));
            for (k, x) in co.as_mut_slice().unwrap().iter_mut().enumerate() {
                *x = (lo + k as u64) * 3;
            }
            co.checkin().unwrap();
        })
    })
    .unwrap();
    // ReadWrite: add the index, in other (shifted) disjoint ranges.
    pool.install(|| {
        parallel_for(0..chunks + 1, 1, |c| {
            let lo = (c as u64 * chunk).saturating_sub(50).min(len);
            let hi = ((c as u64 + 1) * chunk).saturating_sub(50).min(len);
            let mut co = checkout(a, lo..hi, Access::ReadWrite).unwrap();
            for (k, x) in co.as_mut_slice().unwrap().iter_mut().enumerate() {
                assert_eq!(*x, (lo + k as u64) * 3);
                *x += lo + k as u64;
            }
            co.checkin().unwrap();
        })
    })
    .unwrap();
    // Read, through another member's handle.
    let b = &arrays[3];
    let sum = pool
        .install(|| {
            reduce(
                0..chunks,
                1,
                || 0u64,
                |c| {
                    let lo = c as u64 * chunk;
                    let co = checkout(b, lo..(lo + chunk).min(len), Access::Read).unwrap();
                    co.iter().sum::<u64>()
                },
                |x, y| x + y,
            )
        })
        .unwrap();
    assert_eq!(sum, 4 * (len - 1) * len / 2);
    let mut all = vec![0u64; len as usize];
    b.get(0, &mut all).unwrap();
    assert!(all.iter().enumerate().all(|(i, &x)| x == 4 * i as u64));
}

#[test]
fn checkout_misuse_is_an_error() {
    let arrays = smelt_global::threads::<i64>(100, 2, Default::default()).unwrap();
    let a = &arrays[0];
    assert!(matches!(
        checkout(a, 90..101, Access::Read),
        Err(TaskError::Global(_))
    ));
    assert!(matches!(
        checkout(a, std::ops::Range { start: 10, end: 5 }, Access::Read),
        Err(TaskError::Invalid(_))
    ));
    let mut r = checkout(a, 0..10, Access::Read).unwrap();
    let e = r.as_mut_slice().unwrap_err();
    assert!(
        e.to_string().contains("Read checkout cannot be written"),
        "{e}"
    );
    // Empty ranges are fine; a dropped Write checkout writes nothing.
    checkout(a, 100..100, Access::Write)
        .unwrap()
        .checkin()
        .unwrap();
    let mut w = checkout(a, 0..3, Access::Write).unwrap();
    w.as_mut_slice().unwrap().fill(7);
    drop(w);
    assert_eq!(a.get_one(1).unwrap(), 0);
    let mut w = checkout(a, 0..3, Access::Write).unwrap();
    w.as_mut_slice().unwrap().fill(7);
    assert_eq!((w.start(), w.mode()), (0, Access::Write));
    w.checkin().unwrap();
    assert_eq!(a.get_one(2).unwrap(), 7);
}

// Tasks across members: a global array the task functions reach through a static.
static ARRAY: OnceLock<Vec<GlobalArray<u64>>> = OnceLock::new();
const FILL: u32 = 1;
const SUM: u32 = 2;

fn range(p: &[u8]) -> (u64, u64) {
    let lo = u64::from_le_bytes(p[..8].try_into().unwrap());
    let hi = u64::from_le_bytes(p[8..16].try_into().unwrap());
    (lo, hi)
}

fn payload(lo: u64, hi: u64) -> Vec<u8> {
    [lo.to_le_bytes(), hi.to_le_bytes()].concat()
}

/// Fills [lo, hi) with i * 5 in pieces of at most 500 (each piece a task), then sums
/// the range in tasks again (they read what other members' tasks wrote).
fn fill(ctx: &TaskCtx, p: &[u8]) -> Result<Vec<u8>, TaskError> {
    let (lo, hi) = range(p);
    let a = &ARRAY.get().unwrap()[ctx.member()];
    if hi - lo <= 500 {
        let mut co = checkout(a, lo..hi, Access::Write)?;
        for (k, x) in co.as_mut_slice()?.iter_mut().enumerate() {
            *x = (lo + k as u64) * 5;
        }
        co.checkin()?;
        return Ok(vec![]);
    }
    let mid = lo + (hi - lo) / 2;
    let h = ctx.spawn(FILL, &payload(lo, mid));
    fill(ctx, &payload(mid, hi))?;
    h.wait(ctx)?;
    if lo == 0 {
        // The root: every piece was written (synced); now sum it in tasks.
        let s = ctx.spawn(SUM, &payload(lo, hi));
        return s.wait(ctx);
    }
    Ok(vec![])
}

fn sum(ctx: &TaskCtx, p: &[u8]) -> Result<Vec<u8>, TaskError> {
    let (lo, hi) = range(p);
    let a = &ARRAY.get().unwrap()[ctx.member()];
    if hi - lo <= 500 {
        let co = checkout(a, lo..hi, Access::Read)?;
        return Ok(co.iter().sum::<u64>().to_le_bytes().to_vec());
    }
    let mid = lo + (hi - lo) / 2;
    let h = ctx.spawn(SUM, &payload(lo, mid));
    let b = u64::from_le_bytes(sum(ctx, &payload(mid, hi))?.try_into().unwrap());
    let a = u64::from_le_bytes(h.wait(ctx)?.try_into().unwrap());
    Ok((a + b).to_le_bytes().to_vec())
}

#[test]
fn tasks_across_members_write_and_read_a_global_array() {
    let n = 3;
    let len = 30_000u64;
    ARRAY
        .set(smelt_global::threads::<u64>(len, n, Default::default()).unwrap())
        .unwrap();
    let mut f = Functions::new();
    f.register(FILL, fill).unwrap();
    f.register(SUM, sum).unwrap();
    let members = Member::threads(n, smelt_am::AmConfig::default()).unwrap();
    let out: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = members
            .into_iter()
            .map(|mut m| {
                let f = &f;
                s.spawn(move || {
                    let a: Arc<dyn smelt_tasks::checkout::Fence> =
                        Arc::new(&ARRAY.get().unwrap()[m.rank()]);
                    let cfg = TaskConfig::new(2).fence(a);
                    let root = (m.rank() == 0).then(|| (FILL, payload(0, len)));
                    m.run(f, &cfg, root)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let r0 = out[0].as_ref().unwrap();
    let total = u64::from_le_bytes(r0.result.clone().unwrap().try_into().unwrap());
    assert_eq!(total, 5 * (len - 1) * len / 2);
    assert!(out.iter().all(|r| r.is_ok()), "{out:?}");
}
