//! Round trips and a request stream between two threads, for profiling:
//! `cargo run --release -p smelt-bench --example am_pingpong -- [rounds]`.

use smelt_am::{threads, AmConfig};
use smelt_bench::am::logp::{self, State};
use std::time::{Duration, Instant};

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let mut eps = threads(2, AmConfig::default(), |_| State::default()).unwrap();
    for ep in &mut eps {
        logp::register(ep).unwrap();
    }
    let mut b = eps.pop().unwrap();
    let mut a = eps.pop().unwrap();
    let t = Duration::from_secs(60);
    std::thread::scope(|s| {
        s.spawn(move || {
            let _ = smelt_transport::pin_current_thread(smelt_mesh::CpuId(1));
            logp::respond(&mut b, t).unwrap()
        });
        let _ = smelt_transport::pin_current_thread(smelt_mesh::CpuId(0));
        let start = Instant::now();
        for i in 0..rounds {
            a.request(1, logp::PING, &[i as u64]).unwrap();
            while a.outstanding(1) > 0 {
                a.poll().unwrap();
            }
        }
        let rtt = start.elapsed().as_nanos() as f64 / rounds as f64;
        let start = Instant::now();
        for i in 0..rounds {
            a.request(1, logp::PING, &[i as u64]).unwrap();
        }
        a.quiesce(t).unwrap();
        let g = start.elapsed().as_nanos() as f64 / rounds as f64;
        println!("rtt {rtt:.1} ns, g {g:.1} ns");
        a.request(1, logp::STOP, &[]).unwrap();
        a.quiesce(t).unwrap();
    });
}
