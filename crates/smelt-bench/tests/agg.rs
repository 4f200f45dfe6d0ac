//! Aggregation's workloads (`smelt_bench::agg`, moved here from `smelt-agg`): the
//! Bale histogram and index-gather check their own results for every scheme.

use smelt_agg::Scheme;
use smelt_bench::agg;

/// The benchmarks' own checks pass for every scheme (small sizes).
#[test]
fn benchmarks_check_their_results() {
    for s in Scheme::ALL {
        let h = agg::histogram(s, 2, 3, 64, 3000).unwrap();
        assert!(h.items_per_s > 0.0 && h.messages_per_worker > 0.0);
        let ig = agg::index_gather(s, 2, 3, 64, 1000).unwrap();
        assert!(ig.latency_mean_ns.unwrap() > 0.0);
        assert!(ig.latency_median_ns.is_some());
    }
}
