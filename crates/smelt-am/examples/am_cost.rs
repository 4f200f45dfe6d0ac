//! The per-message cost of active messages, for profiling the fast path.
//!
//! ```sh
//! cargo run --release -p smelt-am --example am_cost -- stream 200000   # ns per request+reply, 2 pinned threads
//! cargo run --release -p smelt-am --example am_cost -- rtt 20000       # ns per round trip
//! # Instructions per message, repeatable whatever the machine's load (one thread
//! # drives both endpoints: bursts of 32 requests, then their replies):
//! valgrind --tool=callgrind target/release/examples/am_cost burst 20000
//! valgrind --tool=callgrind target/release/examples/am_cost burst 20000 1   # bursts of 1
//! # Time of the same loop (ns per request and its reply, nothing to wait for): two
//! # builds compared by running each alternately several times (their minimum):
//! target/release/examples/am_cost burst 2000000 1
//! ```

use smelt_am::{threads, AmConfig, Endpoint};
use std::time::{Duration, Instant};

const PING: u8 = 1;
const PONG: u8 = 2;
const T: Duration = Duration::from_secs(30);

#[derive(Default)]
struct State {
    pongs: u64,
    stop: bool,
}

fn endpoints() -> (Endpoint<State>, Endpoint<State>) {
    let mut eps = threads(2, AmConfig::default(), |_| State::default()).expect("endpoints");
    for ep in &mut eps {
        ep.register(PING, |s: &mut State, ctx, m| {
            if m.args.first() == Some(&u64::MAX) {
                s.stop = true;
            }
            ctx.reply(PONG, &[]).expect("reply");
        })
        .expect("register");
        ep.register(PONG, |s: &mut State, _, _| s.pongs += 1)
            .expect("register");
    }
    let b = eps.pop().expect("two");
    let a = eps.pop().expect("two");
    (a, b)
}

fn pin(cpu: u32) {
    let _ = smelt_transport::pin_current_thread(smelt_mesh::CpuId(cpu));
}

/// Runs `f` (messages sent) on one thread while the peer serves, 5 samples: the
/// median ns per message.
fn timed(n: u64, f: impl Fn(&mut Endpoint<State>, u64) + Send + Sync) -> f64 {
    let (mut a, mut b) = endpoints();
    let mut samples = std::thread::scope(|s| {
        let server = s.spawn(move || {
            pin(1);
            b.run_until(T, |s| s.stop).expect("serve");
            b.stats().clone()
        });
        pin(0);
        f(&mut a, 1000);
        let mut v = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            f(&mut a, n);
            v.push(t.elapsed().as_nanos() as f64 / n as f64);
        }
        a.request(1, PING, &[u64::MAX]).expect("stop");
        a.quiesce(T).expect("quiesce");
        let st = server.join().expect("server");
        eprintln!(
            "server: {} replies in {} batches and {} alone",
            st.replies_sent,
            st.reply_batches,
            st.replies_sent.saturating_sub(st.reply_batches)
        );
        v
    });
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("stream");
    let n: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    match mode {
        "stream" => {
            let ns = timed(n, |a, n| {
                for i in 0..n {
                    a.request(1, PING, &[i]).expect("request");
                }
                a.quiesce(T).expect("quiesce");
            });
            println!("stream: {ns:.1} ns per request+reply ({:.2} M/s)", 1e3 / ns);
        }
        "rtt" => {
            let ns = timed(n, |a, n| {
                for i in 0..n {
                    a.request(1, PING, &[i]).expect("request");
                    while a.outstanding(1) > 0 {
                        a.poll().expect("poll");
                    }
                }
            });
            println!("rtt: {ns:.1} ns per round trip");
        }
        "burst" => {
            // One thread drives both ends: no waiting, the same work on every run.
            let (mut a, mut b) = endpoints();
            // Requests per burst (third argument; 1: no reply is ever batched).
            let burst: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(32);
            let mut sent = 0;
            let t = Instant::now();
            while sent < n {
                for i in 0..burst {
                    a.request(1, PING, &[i]).expect("request");
                }
                sent += burst;
                let mut served = 0;
                while served < burst {
                    served += b.poll().expect("poll") as u64;
                }
                while a.outstanding(1) > 0 {
                    a.poll().expect("poll");
                }
            }
            let ns = t.elapsed().as_nanos() as f64 / sent as f64;
            assert_eq!(a.state().pongs, sent);
            println!("burst: {sent} requests and replies, {ns:.1} ns each (one thread)");
        }
        other => {
            eprintln!("unknown mode {other:?}: stream, rtt or burst");
            std::process::exit(2);
        }
    }
}
