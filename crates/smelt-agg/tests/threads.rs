//! Aggregation between groups of threads (each group one "process" with its own
//! endpoint): checksums for every scheme and flush policy, exact message counts,
//! partial buffers delivered by idle and timeout flushes, termination never early,
//! bad input.

use smelt_agg::tally::{self, destination as dest_of, Tally};
use smelt_agg::{messages_for, threads, AggConfig, AggError, FlushPolicy, Scheme, Worker};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(60);

use smelt_ids::rng::mix;

/// Runs `body` on every worker in its own thread; their results in worker order.
fn run<S: Send, R: Send>(
    workers: Vec<Worker<S>>,
    body: impl Fn(&mut Worker<S>) -> R + Sync,
) -> Vec<(R, Worker<S>)> {
    std::thread::scope(|s| {
        let hs: Vec<_> = workers
            .into_iter()
            .map(|mut w| {
                let body = &body;
                s.spawn(move || (body(&mut w), w))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn items_per_worker() -> u64 {
    1500 * smelt_transport::stress_scale()
}

/// Every item inserted by 16 workers (4 processes of 4) arrives once, at its worker.
fn checksums(scheme: Scheme, flush: FlushPolicy) {
    let (n, t) = (4, 4);
    let w = n * t;
    let z = items_per_worker();
    let cfg = AggConfig::new(scheme, 8).buffer_items(64).flush(flush);
    let workers = threads(n, t, cfg, |_| Tally::default(), tally::receive).unwrap();
    let res = run(workers, |wk| {
        let mut sent = Tally::default();
        for i in 0..z {
            let x = tally::item(wk.id(), i);
            wk.insert_u64(x, dest_of(x, w)).unwrap();
            sent.add(x);
            if i % 500 == 0 {
                wk.poll().unwrap();
            }
        }
        wk.terminate(LIMIT).unwrap();
        sent
    });
    let mut sent = Tally::default();
    let mut got = Tally::default();
    for (s, wk) in &res {
        sent.merge(s);
        got.merge(wk.state());
        assert_eq!(wk.stats().handled, wk.state().items);
        assert_eq!(wk.malformed(), 0);
    }
    if let Err(e) = tally::verify(&sent, &got, z * w as u64) {
        panic!("{scheme} {flush:?}: {e}");
    }
    let shipped: u64 = res.iter().map(|(_, wk)| wk.stats().items_shipped).sum();
    assert_eq!(shipped, sent.items, "{scheme} {flush:?}: items shipped");
}

#[test]
fn checksums_every_scheme_explicit() {
    for s in Scheme::ALL {
        checksums(s, FlushPolicy::EXPLICIT);
    }
}

#[test]
fn checksums_every_scheme_idle() {
    for s in Scheme::ALL {
        checksums(s, FlushPolicy::IDLE);
    }
}

#[test]
fn checksums_every_scheme_timeout() {
    for s in Scheme::ALL {
        checksums(s, FlushPolicy::after(Duration::from_micros(200)));
    }
}

/// Handlers insert too: every request is answered by a reply inserted by the
/// request's handler (index-gather), with 16-byte items, for every scheme.
#[test]
fn handlers_insert_replies() {
    let (n, t) = (4, 4);
    let w = n * t;
    let z = 800 * smelt_transport::stress_scale();
    for scheme in Scheme::ALL {
        let cfg = AggConfig::new(scheme, 16).buffer_items(32);
        // State: (replies received, replies with a wrong value).
        let workers = threads(
            n,
            t,
            cfg,
            |_| (0u64, 0u64),
            move |s: &mut (u64, u64), item: &[u8], out| {
                let a = u64::from_le_bytes(item[..8].try_into().unwrap());
                let b = u64::from_le_bytes(item[8..].try_into().unwrap());
                if a >> 63 == 0 {
                    // A request (requester, index): reply with the value at index.
                    let mut r = [0u8; 16];
                    r[..8].copy_from_slice(&(a | 1 << 63).to_le_bytes());
                    r[8..].copy_from_slice(&mix(b ^ out.me() as u64).to_le_bytes());
                    out.insert(&r, a as usize).unwrap();
                } else {
                    let _ = b;
                    s.0 += 1;
                }
            },
        )
        .unwrap();
        let res = run(workers, |wk| {
            let me = wk.id() as u64;
            for i in 0..z {
                let mut r = [0u8; 16];
                r[..8].copy_from_slice(&me.to_le_bytes());
                r[8..].copy_from_slice(&i.to_le_bytes());
                wk.insert(&r, dest_of(me << 32 | i, w)).unwrap();
            }
            wk.terminate(LIMIT).unwrap();
            // Recorded as termination returned: nothing may arrive later.
            wk.state().0
        });
        for (at_end, wk) in &res {
            assert_eq!(*at_end, z, "{scheme}: replies at worker {}", wk.id());
            assert_eq!(wk.state().1, 0);
        }
    }
}

/// Items hop from worker to worker (each handler forwards until the hop count is
/// spent), some handlers sleep: when termination returns anywhere, every hop of every
/// item has been handled.
#[test]
fn termination_is_never_early() {
    let (n, t) = (4, 4);
    let w = n * t;
    let z = 200u64;
    let hops = 5u64;
    for scheme in [Scheme::WW, Scheme::WPs, Scheme::WsP, Scheme::PP] {
        for flush in [FlushPolicy::EXPLICIT, FlushPolicy::IDLE] {
            let cfg = AggConfig::new(scheme, 8).buffer_items(16).flush(flush);
            let workers = threads(
                n,
                t,
                cfg,
                |_| 0u64,
                move |s: &mut u64, item: &[u8], out| {
                    let x = u64::from_le_bytes(item.try_into().unwrap());
                    *s += 1;
                    if x % 97 == 0 {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    if x & 0xF > 0 {
                        let next = x - 1;
                        out.insert(&next.to_le_bytes(), dest_of(next ^ 7, out.size()))
                            .unwrap();
                    }
                },
            )
            .unwrap();
            let res = run(workers, |wk| {
                let me = wk.id() as u64;
                for i in 0..z {
                    let x = (me << 32) | (i << 4) | hops;
                    wk.insert_u64(x, dest_of(x, w)).unwrap();
                }
                wk.terminate(LIMIT).unwrap();
                let at_end = *wk.state();
                // A second phase: nothing is inserted, and termination still agrees.
                wk.terminate(LIMIT).unwrap();
                (at_end, *wk.state())
            });
            let at_end: u64 = res.iter().map(|((a, _), _)| a).sum();
            let later: u64 = res.iter().map(|((_, b), _)| b).sum();
            assert_eq!(at_end, z * w as u64 * (hops + 1), "{scheme} {flush:?}");
            assert_eq!(later, at_end);
        }
    }
}

/// A barrier that keeps its worker polling while it waits (the other processes may
/// need this one's endpoint to make room), and gives up (panics) after a while
/// instead of hanging when a thread panicked before reaching it.
struct Meet {
    n: usize,
    at: AtomicUsize,
}

impl Meet {
    fn new(n: usize) -> Meet {
        Meet {
            n,
            at: AtomicUsize::new(0),
        }
    }
    fn wait<S>(&self, wk: &mut Worker<S>) {
        self.at.fetch_add(1, Ordering::SeqCst);
        let start = Instant::now();
        while self.at.load(Ordering::SeqCst) < self.n {
            assert!(
                start.elapsed() < LIMIT,
                "a worker never reached the barrier"
            );
            wk.poll().unwrap();
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// The paper's message counts, exactly: with one final flush each worker (for PP,
/// each process) sends `sum(ceil(items to buffer / g))` messages, which is one less
/// than the bound `ceil(z/g) + B` (B = N·t for WW, N otherwise) when every buffer ends
/// with one item over a multiple of `g`: the most a final flush can add.
#[test]
fn message_counts_meet_the_bounds() {
    let (n, t, g) = (2usize, 3usize, 8u64);
    let w = n * t;
    let per = 2 * g + 1; // items from each worker to each worker
    let z = per * w as u64;
    for scheme in [
        Scheme::WW,
        Scheme::WPs,
        Scheme::WsP,
        Scheme::PP,
        Scheme::Direct,
    ] {
        let cfg = AggConfig::new(scheme, 8).buffer_items(g as usize);
        let workers = threads(n, t, cfg, |_| 0u64, |s: &mut u64, _: &[u8], _| *s += 1).unwrap();
        let barrier = Meet::new(w);
        let res = run(workers, |wk| {
            for i in 0..per {
                for d in 0..w {
                    wk.insert_u64(i, d).unwrap();
                }
            }
            // Everyone inserted before the one final flush (PP's buffers are shared).
            barrier.wait(wk);
            wk.flush().unwrap();
            wk.terminate(LIMIT).unwrap();
            wk.stats()
        });
        let bound = z.div_ceil(g);
        match scheme {
            Scheme::WW => {
                for (st, _) in &res {
                    let exact = messages_for(&vec![per; w], g);
                    assert_eq!(st.messages, exact);
                    assert_eq!(exact, bound + (n * t) as u64 - 1);
                    assert!(st.messages <= bound + (n * t) as u64);
                }
            }
            Scheme::WPs | Scheme::WsP => {
                for (st, _) in &res {
                    let exact = messages_for(&vec![per * t as u64; n], g);
                    assert_eq!(st.messages, exact, "{scheme}");
                    assert_eq!(exact, bound + n as u64 - 1);
                }
            }
            Scheme::PP => {
                for p in 0..n {
                    let total: u64 = res[p * t..(p + 1) * t]
                        .iter()
                        .map(|(s, _)| s.messages)
                        .sum();
                    let exact = messages_for(&vec![per * (t * t) as u64; n], g);
                    assert_eq!(total, exact, "PP, process {p}");
                    let zp = z * t as u64;
                    assert_eq!(exact, zp.div_ceil(g) + n as u64 - 1);
                    // Per worker, on average, within the bound of the other schemes.
                    assert!(total <= t as u64 * (bound + n as u64));
                }
            }
            Scheme::Direct => {
                for (st, _) in &res {
                    assert_eq!(st.messages, z);
                }
            }
        }
        let handled: u64 = res.iter().map(|(_, wk)| *wk.state()).sum();
        assert_eq!(handled, z * w as u64);
    }
}

/// A partial buffer stays until a flush policy ships it; idle and timeout flushes
/// deliver it without an explicit flush.
#[test]
fn idle_and_timeout_flush_partial_buffers() {
    for scheme in [Scheme::WW, Scheme::WPs, Scheme::WsP, Scheme::PP] {
        for flush in [
            FlushPolicy::EXPLICIT,
            FlushPolicy::IDLE,
            FlushPolicy::after(Duration::from_millis(5)),
        ] {
            let cfg = AggConfig::new(scheme, 8).flush(flush);
            let mut ws = threads(2, 1, cfg, |_| 0u64, |s: &mut u64, _: &[u8], _| *s += 1).unwrap();
            let mut b = ws.pop().unwrap();
            let mut a = ws.pop().unwrap();
            for i in 0..10u64 {
                a.insert_u64(i, 1).unwrap();
            }
            let start = Instant::now();
            let mut rounds = 0;
            while *b.state() < 10 && start.elapsed() < Duration::from_secs(20) {
                a.poll().unwrap();
                b.poll().unwrap();
                rounds += 1;
                if flush == FlushPolicy::EXPLICIT && rounds == 200 {
                    break;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            if flush == FlushPolicy::EXPLICIT {
                assert_eq!(*b.state(), 0, "{scheme}: a partial buffer went out unasked");
                assert_eq!(a.stats().messages, 0);
                a.flush().unwrap();
                let start = Instant::now();
                while *b.state() < 10 && start.elapsed() < Duration::from_secs(20) {
                    a.poll().unwrap();
                    b.poll().unwrap();
                }
            }
            assert_eq!(*b.state(), 10, "{scheme} {flush:?}");
            // One message with the filled part only.
            assert_eq!(a.stats().messages, 1, "{scheme} {flush:?}");
            assert_eq!(a.stats().items_shipped, 10);
            std::thread::scope(|s| {
                s.spawn(|| a.terminate(LIMIT).unwrap());
                s.spawn(|| b.terminate(LIMIT).unwrap());
            });
        }
    }
}

/// Termination waits for a worker that has not come yet, and times out with a clear
/// error when one never comes.
#[test]
fn termination_waits_for_everyone_and_is_bounded() {
    let cfg = AggConfig::new(Scheme::WPs, 8);
    let mut ws = threads(2, 1, cfg, |_| 0u64, |s: &mut u64, _: &[u8], _| *s += 1).unwrap();
    let b = ws.pop().unwrap();
    let mut a = ws.pop().unwrap();
    a.insert_u64(1, 1).unwrap();
    let e = a.terminate(Duration::from_millis(300)).unwrap_err();
    assert!(matches!(e, AggError::Timeout { .. }), "{e}");
    assert!(e.to_string().contains("delivered"), "{e}");
    drop(b);
}

#[test]
fn bad_input_is_an_error() {
    let h = |_: &mut (), _: &[u8], _: &mut smelt_agg::Out<'_>| {};
    assert!(matches!(
        threads(2, 2, AggConfig::new(Scheme::WW, 0), |_| (), h),
        Err(AggError::Invalid(_))
    ));
    assert!(matches!(
        threads(
            2,
            2,
            AggConfig::new(Scheme::WW, 8).buffer_items(0),
            |_| (),
            h
        ),
        Err(AggError::Invalid(_))
    ));
    assert!(matches!(
        threads(0, 2, AggConfig::new(Scheme::PP, 8), |_| (), h),
        Err(AggError::Invalid(_))
    ));
    assert!(matches!(
        threads(2, 0, AggConfig::new(Scheme::PP, 8), |_| (), h),
        Err(AggError::Invalid(_))
    ));
    assert!(matches!(
        threads(
            2,
            2,
            AggConfig::new(Scheme::PP, 8).buffer_items(1 << 30),
            |_| (),
            h
        ),
        Err(AggError::Invalid(_))
    ));
    assert!(matches!(
        threads(
            2,
            2,
            AggConfig::new(Scheme::PP, 8).flush(FlushPolicy::after(Duration::ZERO)),
            |_| (),
            h
        ),
        Err(AggError::Invalid(_))
    ));
    assert!("XY".parse::<Scheme>().is_err());
    assert_eq!("wsp".parse::<Scheme>().unwrap(), Scheme::WsP);
    assert_eq!("none".parse::<Scheme>().unwrap(), Scheme::Direct);
    let mut ws = threads(2, 2, AggConfig::new(Scheme::WW, 8), |_| (), h).unwrap();
    let w0 = &mut ws[0];
    assert_eq!(
        w0.insert(&[1, 2, 3], 1),
        Err(AggError::ItemSize {
            got: 3,
            expected: 8
        })
    );
    assert_eq!(
        w0.insert_u64(1, 4),
        Err(AggError::NoSuchWorker { dest: 4, size: 4 })
    );
    // Nothing was counted for the refused items.
    assert_eq!(w0.stats().inserted, 0);
    let _ = Arc::new(());
}
