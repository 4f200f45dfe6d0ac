//! The inside-a-node figures of the global-arrays benchmark: a get of 8 bytes and a
//! round trip through an array against a smelt queuepair round trip between the same
//! two threads. `cargo run --release -p smelt-bench --example global_bench [-- --quick]`.

fn main() -> Result<(), smelt_global::GlobalError> {
    let quick = std::env::args().any(|a| a == "--quick");
    let opts = if quick {
        smelt_bench::global::Opts::quick()
    } else {
        smelt_bench::global::Opts::full()
    };
    let r = smelt_bench::global::measure(&opts)?;
    println!("cpus                 {:?}", r.cpus);
    println!("queuepair round trip {:8.1} ns", r.queuepair_rtt_ns);
    println!("get of 8 bytes       {:8.1} ns", r.get_8b_ns);
    println!("array round trip     {:8.1} ns", r.array_rtt_ns);
    println!(
        "get / queuepair rtt  {:8.3}   (target <= 1.5)",
        r.get_over_queuepair()
    );
    println!("array rtt / qp rtt   {:8.3}", r.array_rtt_over_queuepair());
    Ok(())
}
