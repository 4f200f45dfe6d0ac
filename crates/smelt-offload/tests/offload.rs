//! Offload pools under load: 16 application threads (on however few CPUs) hand requests
//! to communication threads that start and stop; nothing is lost or duplicated. Bad
//! configurations are refused; shutdown with queued work is bounded and reports it.

use smelt_am::{threads, AmConfig, AmError};
use smelt_offload::{Offload, OffloadConfig, OffloadError, OffloadMode};
use smelt_transport::stress_scale;
use std::time::{Duration, Instant};

const ADD: u8 = 1;
const ACK: u8 = 2;

/// (messages, sum of their values)
type Tally = (u64, u64);

/// Two servers (endpoints 0 and 1, driven by their own threads) and two offloaded
/// clients (endpoints 2 and 3, one lane each). 16 application threads send requests
/// with distinct values through the lanes, flushing and pausing now and then so that
/// dynamic lanes keep going to sleep and waking up. Every request must reach its server
/// once (count and sum) and every acknowledgement its client once.
fn no_loss_no_duplicate(mode: OffloadMode) {
    let apps: u64 = 16;
    let per: u64 = 400 * stress_scale();
    let mut eps = threads(4, AmConfig::default(), |_| Tally::default()).unwrap();
    let clients: Vec<_> = eps.drain(2..).collect();
    // The servers answer until told to stop (after the pool's shutdown), so that no
    // client sees a server leave while others still work.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut servers = Vec::new();
    for mut ep in eps {
        ep.register(ADD, |t: &mut Tally, ctx, m| {
            t.0 += 1;
            t.1 += m.args[0];
            ctx.reply(ACK, &[m.args[0]]).unwrap();
        })
        .unwrap();
        let stop = stop.clone();
        servers.push(std::thread::spawn(move || {
            let t0 = Instant::now();
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                if ep.poll().unwrap() == 0 {
                    assert!(t0.elapsed() < Duration::from_secs(120), "server timed out");
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            *ep.state()
        }));
    }
    let mut clients = clients;
    for c in &mut clients {
        c.register(ACK, |t: &mut Tally, _, m| {
            t.0 += 1;
            t.1 += m.args[0];
        })
        .unwrap();
    }
    let mut cfg = OffloadConfig::new(mode);
    cfg.link.capacity = 64; // small: producers also meet a full queue
    cfg.idle_rounds = 16; // dynamic lanes fall asleep quickly
    cfg.max_sleep = Duration::from_millis(50); // and only a producer wakes them
    let pool = Offload::start(clients, cfg).unwrap();
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for a in 0..apps {
            let pool = &pool;
            s.spawn(move || {
                let lane = (a % 2) as usize;
                let dest = (a % 2) as usize; // server of the same parity
                for i in 0..per {
                    let v = a * per + i + 1;
                    pool.request(lane, dest, ADD, &[v]).unwrap();
                    if i % 50 == 49 {
                        pool.flush(lane).unwrap().wait().unwrap();
                        if i % 100 == 99 {
                            std::thread::sleep(Duration::from_millis(2));
                        }
                    }
                }
                pool.flush(lane).unwrap().wait().unwrap();
            });
        }
    });
    let stats: Vec<_> = (0..2).map(|l| pool.stats(l).unwrap()).collect();
    let ends = pool.shutdown(Duration::from_secs(10)).unwrap();
    stop.store(true, std::sync::atomic::Ordering::Release);
    let served: Vec<Tally> = servers.into_iter().map(|h| h.join().unwrap()).collect();
    let sum_of = |parity: u64| -> u64 {
        (0..apps)
            .filter(|a| a % 2 == parity)
            .flat_map(|a| (0..per).map(move |i| a * per + i + 1))
            .sum()
    };
    for p in 0..2 {
        let want = (apps / 2 * per, sum_of(p as u64));
        assert_eq!(served[p], want, "server {p} ({})", mode.name());
        assert_eq!(
            *ends[p].endpoint.state(),
            want,
            "client {p} acks ({})",
            mode.name()
        );
        assert_eq!(ends[p].dropped_commands, 0);
        assert_eq!(ends[p].unanswered, 0);
        assert!(ends[p].error.is_none(), "{:?}", ends[p].error);
    }
    eprintln!("{}: {:?} in {:?}", mode.name(), stats, t0.elapsed());
    if mode == OffloadMode::Dynamic {
        let sleeps: u64 = stats.iter().map(|s| s.sleeps).sum();
        let wakes: u64 = stats.iter().map(|s| s.wakes).sum();
        assert!(
            sleeps > 0 && wakes > 0,
            "the lanes never stopped and started again (sleeps {sleeps}, wakes {wakes})"
        );
    }
    if mode != OffloadMode::Direct {
        assert_eq!(
            stats.iter().map(|s| s.requests).sum::<u64>(),
            apps * per,
            "requests posted by the executors"
        );
    }
}

#[test]
fn dynamic_lanes_start_and_stop_under_load_and_lose_nothing() {
    no_loss_no_duplicate(OffloadMode::Dynamic);
}

#[test]
fn static_lanes_lose_nothing() {
    no_loss_no_duplicate(OffloadMode::Static);
}

#[test]
fn direct_mode_loses_nothing() {
    no_loss_no_duplicate(OffloadMode::Direct);
}

#[test]
fn bad_configurations_and_arguments_are_refused() {
    let mk = || threads(2, AmConfig::default(), |_| ()).unwrap();
    let err = |cfg: OffloadConfig, n: usize| {
        let eps: Vec<_> = mk().into_iter().take(n).collect();
        Offload::start(eps, cfg).err().expect("refused")
    };
    assert!(
        matches!(err(OffloadConfig::new(OffloadMode::Static), 0), OffloadError::Invalid(m) if m.contains("no endpoints"))
    );
    let mut c = OffloadConfig::new(OffloadMode::Static);
    c.link.capacity = 0;
    assert!(matches!(err(c, 1), OffloadError::Invalid(m) if m.contains("queue of 0")));
    let mut c = OffloadConfig::new(OffloadMode::Dynamic);
    c.cpus = vec![0, 0, 0];
    assert!(matches!(err(c, 2), OffloadError::Invalid(m) if m.contains("3 CPUs for 2")));
    let mut c = OffloadConfig::new(OffloadMode::Dynamic);
    c.cpus = vec![100_000];
    assert!(matches!(err(c, 1), OffloadError::Invalid(m) if m.contains("CPU 100000")));
    let mut c = OffloadConfig::new(OffloadMode::Direct);
    c.cpus = vec![0];
    assert!(matches!(err(c, 1), OffloadError::Invalid(m) if m.contains("direct")));

    let pool = Offload::start(
        mk().into_iter().take(1).collect(),
        OffloadConfig::new(OffloadMode::Dynamic),
    )
    .unwrap();
    assert_eq!(
        pool.request(3, 1, ADD, &[]).unwrap_err(),
        OffloadError::NoSuchLane { lane: 3, lanes: 1 }
    );
    assert_eq!(
        pool.request(0, 1, 0, &[]).unwrap_err(),
        OffloadError::Am(AmError::ReservedHandler)
    );
    assert_eq!(
        pool.request(0, 1, ADD, &[0; 9]).unwrap_err(),
        OffloadError::Am(AmError::TooManyArgs { n: 9 })
    );
    // An error on the communication thread is reported by the lane's next ticket, once.
    pool.request(0, 7, ADD, &[1]).unwrap();
    assert!(matches!(
        pool.flush(0).unwrap().wait(),
        Err(OffloadError::Am(AmError::NoSuchDestination { dest: 7, .. }))
    ));
    pool.run(0, |ep| {
        assert_eq!(ep.me(), 0);
        Ok(())
    })
    .unwrap();
    pool.flush(0).unwrap().wait().unwrap();
    assert_eq!(pool.stats(0).unwrap().errors, 1);
    let ends = pool.shutdown(Duration::from_secs(5)).unwrap();
    assert_eq!(ends[0].stats.commands, 4);
}

/// A lane busy in a long job when shutdown comes: the shutdown returns at its deadline
/// (not when the work would be done), drops the queued requests and counts them, and
/// the ticket queued behind them fails instead of hanging.
#[test]
fn shutdown_with_queued_work_is_bounded_and_reports_it() {
    let mut eps = threads(2, AmConfig::default(), |_| ()).unwrap();
    let _server = eps.pop().unwrap(); // never polled: requests stay unanswered
    let client = eps.pop().unwrap();
    let pool = Offload::start(vec![client], OffloadConfig::new(OffloadMode::Dynamic)).unwrap();
    pool.request(0, 1, ADD, &[1]).unwrap(); // sent, never answered
    pool.run(0, |_| {
        std::thread::sleep(Duration::from_millis(300));
        Ok(())
    })
    .unwrap();
    for i in 0..100 {
        pool.request(0, 1, ADD, &[i]).unwrap();
    }
    let ticket_thread = {
        let t = pool.flush(0).unwrap();
        std::thread::spawn(move || t.wait_for(Duration::from_secs(10)))
    };
    std::thread::sleep(Duration::from_millis(50)); // the job is running
    let t0 = Instant::now();
    let ends = pool.shutdown(Duration::from_millis(20)).unwrap();
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(5), "shutdown took {took:?}");
    assert_eq!(ends[0].dropped_commands, 101, "100 requests and the flush");
    assert_eq!(ends[0].unanswered, 1);
    assert_eq!(ticket_thread.join().unwrap(), Err(OffloadError::Stopped(0)));
}

/// Pools started and stopped again and again over the same endpoints while requests
/// are still queued and in flight: a stop with no time left drops what is queued (and
/// counts it), the requests posted are answered through the next pool. Every request
/// is posted at most once, and each one pushed is either posted or counted as dropped.
#[test]
fn pools_stopped_under_load_account_for_every_request() {
    let mut eps = threads(2, AmConfig::default(), |_| Tally::default()).unwrap();
    let mut client = eps.pop().unwrap();
    let mut server = eps.pop().unwrap();
    server
        .register(ADD, |t: &mut Tally, ctx, m| {
            t.0 += 1;
            t.1 += m.args[0];
            ctx.reply(ACK, &[m.args[0]]).unwrap();
        })
        .unwrap();
    client
        .register(ACK, |t: &mut Tally, _, m| {
            t.0 += 1;
            t.1 += m.args[0];
        })
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let srv = std::thread::spawn(move || {
        while !stop2.load(std::sync::atomic::Ordering::Acquire) {
            match server.wait(Duration::from_millis(5)) {
                Ok(_) | Err(AmError::Timeout { .. }) => {}
                Err(e) => panic!("server: {e}"),
            }
        }
        *server.state()
    });
    let (mut pushed, mut posted, mut dropped) = (0u64, 0u64, 0u64);
    let phases = 6;
    for phase in 0..phases {
        let mode = if phase % 2 == 0 {
            OffloadMode::Dynamic
        } else {
            OffloadMode::Static
        };
        let mut cfg = OffloadConfig::new(mode);
        cfg.idle_rounds = 4;
        let pool = Offload::start(vec![client], cfg).unwrap();
        std::thread::scope(|s| {
            for _ in 0..8 {
                let pool = &pool;
                s.spawn(move || {
                    for _ in 0..300 {
                        pool.request(0, 0, ADD, &[1]).unwrap();
                    }
                });
            }
        });
        pushed += 8 * 300;
        // The last phase drains; the others stop at once.
        let limit = if phase == phases - 1 {
            Duration::from_secs(10)
        } else {
            Duration::ZERO
        };
        let mut ends = pool.shutdown(limit).unwrap();
        let end = ends.pop().unwrap();
        posted += end.stats.requests;
        dropped += end.dropped_commands;
        client = end.endpoint;
    }
    client.quiesce(Duration::from_secs(10)).unwrap();
    stop.store(true, std::sync::atomic::Ordering::Release);
    let served = srv.join().unwrap();
    assert_eq!(
        posted + dropped,
        pushed,
        "posted {posted} + dropped {dropped}"
    );
    assert_eq!(served, (posted, posted), "each posted request served once");
    assert_eq!(
        *client.state(),
        (posted, posted),
        "each answer received once"
    );
    eprintln!("{pushed} pushed: {posted} posted, {dropped} dropped at a stop");
}
