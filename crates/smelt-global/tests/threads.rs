//! Global arrays over threads of one process: 16 members (on however few CPUs),
//! data-race-free programs that see every write after barriers and fences,
//! accumulates that lose nothing, and clear errors. (The work-stealing example is
//! smelt-bench's `global_stealing` test.)

use smelt_global::{
    threads, AccumulateOp, ElemType, Element, GlobalArray, GlobalConfig, GlobalError, Layout,
};
use std::time::Duration;

const MEMBERS: usize = 16;

fn cfg() -> GlobalConfig {
    GlobalConfig {
        link: smelt_global::LinkConfig::default().timeout(Duration::from_secs(60)),
        ..GlobalConfig::default()
    }
}

fn scale() -> u64 {
    smelt_transport::stress_scale()
}

/// The value round `round` writes at `index`.
fn value<T: Element>(round: u64, index: u64) -> T {
    let v = round * 1_000_003 + index;
    match T::TYPE {
        ElemType::U64 | ElemType::I64 | ElemType::F64 => T::from_word(match T::TYPE {
            ElemType::F64 => (v as f64).to_bits(),
            ElemType::I64 => (-(v as i64)) as u64,
            _ => v,
        }),
        ElemType::U32 => T::from_word(v & 0xFFFF_FFFF),
        ElemType::I32 => T::from_word((-((v & 0x7FFF_FFFF) as i32)) as u32 as u64),
    }
}

/// Each round, every member writes the block of another member (so writes cross
/// owners), then after a barrier every member reads the whole array.
fn drf_rounds<T: Element>(len: u64) {
    let arrays = threads::<T>(len, MEMBERS, cfg()).unwrap();
    let rounds = 4 * scale();
    std::thread::scope(|s| {
        for a in &arrays {
            s.spawn(move || {
                let m = a.members();
                let layout = a.layout();
                let mut all: Vec<T> = vec![T::from_word(0); len as usize];
                for round in 0..rounds {
                    let target = layout.block((a.rank() + round as usize) % m);
                    let data: Vec<T> = target.clone().map(|i| value::<T>(round, i)).collect();
                    a.put(target.start, &data).unwrap();
                    a.barrier().unwrap();
                    a.get(0, &mut all).unwrap();
                    for (i, v) in all.iter().enumerate() {
                        assert_eq!(*v, value::<T>(round, i as u64), "round {round} index {i}");
                    }
                    a.barrier().unwrap();
                }
            });
        }
    });
}

#[test]
fn every_write_is_seen_after_a_barrier_for_every_element_type() {
    drf_rounds::<u64>(1000);
    drf_rounds::<i64>(777);
    drf_rounds::<f64>(1024);
    drf_rounds::<u32>(333);
    drf_rounds::<i32>(17);
}

#[test]
fn writes_fenced_then_flagged_are_seen_after_the_invalidate_fence() {
    // Pairs (2k, 2k+1): the even member writes a range owned by others, fences
    // (write-back), raises a flag with an atomic accumulate; the odd member waits for
    // the flag with fetch_accumulate, fences (invalidate) and reads.
    let len = 4096u64;
    let arrays = threads::<u64>(len + MEMBERS as u64, MEMBERS, cfg()).unwrap();
    let rounds = 50 * scale();
    std::thread::scope(|s| {
        for a in &arrays {
            s.spawn(move || {
                let me = a.rank() as u64;
                let pair = me / 2;
                let flag = len + pair;
                let chunk = len / (MEMBERS as u64 / 2);
                let start = ((pair + 3) % (MEMBERS as u64 / 2)) * chunk;
                for round in 1..=rounds {
                    if me.is_multiple_of(2) {
                        let data: Vec<u64> = (0..chunk).map(|i| round << 32 | i).collect();
                        a.put(start, &data).unwrap();
                        a.fence_writeback().unwrap();
                        a.accumulate(flag, &[1], AccumulateOp::Sum).unwrap();
                        // Wait for the reader to finish before writing again.
                        let mut b = smelt_transport::Backoff::new();
                        while a.fetch_accumulate(flag, 0, AccumulateOp::Sum).unwrap() != 2 * round {
                            if b.is_completed() {
                                std::thread::sleep(Duration::from_micros(50));
                            } else {
                                b.snooze();
                            }
                        }
                    } else {
                        let mut b = smelt_transport::Backoff::new();
                        while a.fetch_accumulate(flag, 0, AccumulateOp::Sum).unwrap()
                            != 2 * round - 1
                        {
                            if b.is_completed() {
                                std::thread::sleep(Duration::from_micros(50));
                            } else {
                                b.snooze();
                            }
                        }
                        a.fence_invalidate().unwrap();
                        let mut got = vec![0u64; chunk as usize];
                        a.get(start, &mut got).unwrap();
                        for (i, v) in got.iter().enumerate() {
                            assert_eq!(*v, round << 32 | i as u64, "round {round}");
                        }
                        a.accumulate(flag, &[1], AccumulateOp::Sum).unwrap();
                    }
                }
            });
        }
    });
}

#[test]
fn accumulates_from_every_member_lose_nothing() {
    let len = 100u64; // ranges of 10 cross owners (block 7)
    let sums = threads::<u64>(len, MEMBERS, cfg()).unwrap();
    let fsums = threads::<f64>(len, MEMBERS, cfg()).unwrap();
    let small = threads::<i32>(len, MEMBERS, cfg()).unwrap();
    let n = 200 * scale();
    std::thread::scope(|s| {
        for ((a, f), i) in sums.iter().zip(&fsums).zip(&small) {
            s.spawn(move || {
                let me = a.rank();
                for k in 0..n {
                    let at = (k * 7 + me as u64) % (len - 10);
                    a.accumulate(at, &[1; 10], AccumulateOp::Sum).unwrap();
                    f.accumulate(at, &[0.5; 10], AccumulateOp::Sum).unwrap();
                    i.accumulate(at, &[-(me as i32) - (k as i32)], AccumulateOp::Min)
                        .unwrap();
                    i.accumulate(len - 1, &[me as i32], AccumulateOp::Max)
                        .unwrap();
                }
                a.barrier().unwrap();
            });
        }
    });
    let mut expect = vec![0u64; len as usize];
    for me in 0..MEMBERS as u64 {
        for k in 0..n {
            let at = (k * 7 + me) % (len - 10);
            for e in &mut expect[at as usize..at as usize + 10] {
                *e += 1;
            }
        }
    }
    let mut got = vec![0u64; len as usize];
    sums[0].get(0, &mut got).unwrap();
    assert_eq!(got, expect);
    let mut fgot = vec![0f64; len as usize];
    fsums[3].get(0, &mut fgot).unwrap();
    assert!(fgot.iter().zip(&expect).all(|(f, e)| *f == *e as f64 * 0.5));
    let lowest = -(MEMBERS as i32 - 1) - (n as i32 - 1);
    let mins = (0..len - 10)
        .map(|i| small[0].get_one(i).unwrap())
        .min()
        .unwrap();
    assert_eq!(mins, lowest);
    assert_eq!(small[0].get_one(len - 1).unwrap(), MEMBERS as i32 - 1);
    // fetch_accumulate with Replace returns the old element.
    assert_eq!(
        sums[1]
            .fetch_accumulate(0, 99, AccumulateOp::Replace)
            .unwrap(),
        expect[0]
    );
    assert_eq!(sums[2].get_one(0).unwrap(), 99);
}

#[test]
fn bad_indices_and_sizes_are_clear_errors() {
    let a = &threads::<u32>(10, 3, cfg()).unwrap()[0];
    let e = a.get_one(10).unwrap_err();
    assert_eq!(
        e,
        GlobalError::OutOfRange {
            index: 10,
            count: 1,
            len: 10
        }
    );
    assert!(e.to_string().contains("out of range"), "{e}");
    assert!(a.put(8, &[1, 2, 3]).is_err());
    assert!(a.accumulate(u64::MAX, &[1, 2], AccumulateOp::Sum).is_err()); // no overflow
    assert!(a.fetch_accumulate(10, 1, AccumulateOp::Sum).is_err());
    let mut none: [u32; 0] = [];
    a.get(10, &mut none).unwrap(); // an empty range at the end is fine
    assert!(threads::<u64>(0, 2, cfg()).is_err());
    assert!(threads::<u64>(10, 0, cfg()).is_err());
    // Blocks: 10 over 3 -> 4, 4, 2; over 4 members of 5 elements, the last owns none.
    let l = Layout::new(10, 3).unwrap();
    assert_eq!((l.block(0), l.block(1), l.block(2)), (0..4, 4..8, 8..10));
    let pieces: Vec<_> = l.pieces(3, 6).collect();
    assert_eq!(pieces, vec![(0, 3, 1), (1, 0, 4), (2, 0, 1)]);
    assert!(Layout::new(5, 4).unwrap().block(3).is_empty());
}

#[test]
fn a_barrier_that_a_member_never_reaches_times_out() {
    let arrays = threads::<u64>(
        4,
        2,
        GlobalConfig {
            link: smelt_global::LinkConfig::default().timeout(Duration::from_millis(200)),
            ..GlobalConfig::default()
        },
    )
    .unwrap();
    match arrays[0].barrier() {
        Err(GlobalError::Timeout { .. }) => {}
        r => panic!("{r:?}"),
    }
}

#[allow(dead_code)]
fn _assert_send_sync(a: GlobalArray<f64>) -> impl Send + Sync {
    a
}
