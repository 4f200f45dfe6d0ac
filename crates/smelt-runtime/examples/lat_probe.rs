//! Latency probe: cache-line floor vs queuepair, interleaved (tuning aid).
use smelt_runtime::measure::{cacheline_pingpong, pingpong_latency, MeasureConfig};
fn main() {
    let cfg = MeasureConfig {
        rounds: 5,
        warmup: 1,
        batch: std::time::Duration::from_millis(20),
        ..Default::default()
    };
    let mut ratios = Vec::new();
    for _ in 0..8 {
        let f = cacheline_pingpong((0, 1), &cfg).stats.median_ns;
        let q = pingpong_latency((0, 1), &cfg).unwrap().stats.median_ns;
        println!("floor {f:.1} qp {q:.1} ratio {:.2}", q / f);
        ratios.push(q / f);
    }
    ratios.sort_by(|a, b| a.total_cmp(b));
    println!("median ratio {:.2}", ratios[ratios.len() / 2]);
}
