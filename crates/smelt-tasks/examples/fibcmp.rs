//! Quick comparison: fib(n) sequential, smelt-tasks and rayon on 1 and 2 workers.
use smelt_tasks::apps::{fib, fib_seq};
use std::time::Instant;

fn rfib(n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    let (a, b) = rayon::join(|| rfib(n - 1), || rfib(n - 2));
    a + b
}

fn best<F: FnMut() -> u64>(reps: usize, mut f: F) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let seq = best(5, || fib_seq(std::hint::black_box(n)));
    println!("seq fib({n}) {:.2} ms", seq * 1e3);
    for w in [1, 2] {
        let pool = smelt_tasks::Pool::new(smelt_tasks::PoolConfig::new(w)).unwrap();
        let t = best(5, || pool.install(|| fib(n)).unwrap());
        let rp = rayon::ThreadPoolBuilder::new()
            .num_threads(w)
            .build()
            .unwrap();
        let r = best(5, || rp.install(|| rfib(n)));
        println!("{w} workers: smelt {:.2} ms, rayon {:.2} ms, smelt/rayon {:.2}, smelt/seq {:.1}, stats {:?}", t * 1e3, r * 1e3, t / r, t / seq, pool.stats());
    }
}
