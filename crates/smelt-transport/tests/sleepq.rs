//! Stress of the sleep-bit queue: 10^6 × `SMELT_STRESS` items pushed by 8 producers in
//! bursts into 4 queues whose consumers sleep as soon as they find nothing, on however
//! few CPUs (16 threads on 2 CPUs here). Every item must arrive exactly once, and no
//! consumer may sleep to its timeout while items wait for it (a lost wake-up).
#![cfg(not(loom))]

use smelt_transport::{stress_scale, SleepOutcome, SleepQueue};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PRODUCERS: u64 = 8;
const QUEUES: usize = 4;
/// Long enough that a timeout means nobody woke the consumer.
const SLEEP_LIMIT: Duration = Duration::from_secs(5);

#[test]
fn million_items_against_sleeping_consumers_arrive_exactly_once() {
    let total = 1_000_000 * stress_scale();
    let per = total / PRODUCERS;
    let queues: Arc<Vec<SleepQueue<u64>>> =
        Arc::new((0..QUEUES).map(|_| SleepQueue::new(64).unwrap()).collect());
    let seen: Arc<Vec<AtomicU8>> =
        Arc::new((0..per * PRODUCERS).map(|_| AtomicU8::new(0)).collect());
    let done = Arc::new(AtomicBool::new(false));
    let lost = Arc::new(AtomicU64::new(0));
    let sleeps = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let consumers: Vec<_> = (0..QUEUES)
        .map(|c| {
            let (queues, seen, done, lost, sleeps) = (
                queues.clone(),
                seen.clone(),
                done.clone(),
                lost.clone(),
                sleeps.clone(),
            );
            std::thread::spawn(move || {
                let q = &queues[c];
                let mut idle = 0u32;
                loop {
                    let obs = q.observe();
                    if let Some(v) = q.pop() {
                        seen[v as usize].fetch_add(1, Ordering::Relaxed);
                        idle = 0;
                        continue;
                    }
                    if done.load(Ordering::Acquire) && q.is_empty() {
                        break;
                    }
                    idle += 1;
                    if idle < 8 {
                        std::hint::spin_loop();
                        continue;
                    }
                    sleeps.fetch_add(1, Ordering::Relaxed);
                    if q.sleep(obs, SLEEP_LIMIT) == SleepOutcome::TimedOut && !q.is_empty() {
                        lost.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let queues = queues.clone();
            std::thread::spawn(move || {
                let mut x = p.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                let mut i = 0;
                while i < per {
                    // A burst of 1..32 items to one queue, then a pause: consumers keep
                    // running dry and going to sleep.
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let burst = 1 + (x % 32);
                    let q = &queues[(x >> 8) as usize % QUEUES];
                    for _ in 0..burst.min(per - i) {
                        let mut v = p * per + i;
                        while let Err(back) = q.push(v) {
                            v = back;
                            std::thread::yield_now();
                        }
                        i += 1;
                    }
                    std::thread::yield_now();
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    done.store(true, Ordering::Release);
    for q in queues.iter() {
        q.wake();
    }
    for c in consumers {
        c.join().unwrap();
    }
    let wakes: u64 = queues.iter().map(|q| q.wakes()).sum();
    eprintln!(
        "{} items in {:?}: {} sleeps announced, {} wake-ups by producers",
        per * PRODUCERS,
        t0.elapsed(),
        sleeps.load(Ordering::Relaxed),
        wakes
    );
    assert_eq!(
        lost.load(Ordering::Relaxed),
        0,
        "a consumer slept to its timeout with items queued"
    );
    let bad: Vec<_> = seen
        .iter()
        .enumerate()
        .filter(|(_, n)| n.load(Ordering::Relaxed) != 1)
        .take(5)
        .map(|(i, n)| (i, n.load(Ordering::Relaxed)))
        .collect();
    assert!(
        bad.is_empty(),
        "items not received exactly once (index, times): {bad:?}"
    );
    assert!(
        wakes > 0,
        "the consumers never slept against a producer: the test tested nothing"
    );
    assert_eq!(
        queues.iter().map(|q| q.published()).sum::<u64>(),
        per * PRODUCERS
    );
}

#[test]
fn bad_capacity_is_refused_and_full_queue_gives_the_item_back() {
    assert!(SleepQueue::<u8>::new(0).is_err());
    assert!(SleepQueue::<u8>::new(usize::MAX).is_err());
    let q = SleepQueue::new(3).unwrap();
    assert_eq!(q.capacity(), 4);
    for i in 0..4 {
        q.push(i).unwrap();
    }
    assert_eq!(q.push(9), Err(9));
    assert_eq!(q.len(), 4);
    assert_eq!(q.pop(), Some(0));
    q.push(4).unwrap();
    let got: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
    assert_eq!(got, vec![1, 2, 3, 4]);
    // A sleep with a stale observation races; one with a fresh one times out.
    let stale = q.observe();
    q.push(5).unwrap();
    assert_eq!(
        q.sleep(stale, Duration::from_millis(1)),
        SleepOutcome::Raced
    );
    assert_eq!(q.pop(), Some(5));
    let fresh = q.observe();
    assert_eq!(
        q.sleep(fresh, Duration::from_millis(1)),
        SleepOutcome::TimedOut
    );
    assert!(!q.is_sleeping());
}

#[test]
fn dropping_a_queue_drops_its_items() {
    let item = Arc::new(());
    {
        let q = SleepQueue::new(4).unwrap();
        q.push(item.clone()).unwrap();
        q.push(item.clone()).unwrap();
        assert_eq!(Arc::strong_count(&item), 3);
    }
    assert_eq!(Arc::strong_count(&item), 1);
}
