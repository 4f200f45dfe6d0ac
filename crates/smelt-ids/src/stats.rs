//! Small statistics helpers: Spearman rank correlation, and robust statistics over
//! repeated measurements (median, MAD-based outlier rejection, percentiles) —
//! [`Summary`], the one statistics type of smelt's measurements, and [`median`], the
//! one median. They live in this lowest crate so that the model, the probe, the
//! runtime, the services' tests and the benchmarks (`smelt-bench`, which re-exports
//! this module) share one of each; `smelt_tree::stats` re-exports it too. Timings on a
//! shared machine have a long right tail (preemption, interrupts, the hypervisor);
//! the median and the median absolute deviation ignore it.

use serde::{Deserialize, Serialize};

/// Ranks (1-based) with ties given their average rank.
pub fn ranks(x: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..x.len()).collect();
    idx.sort_by(|&a, &b| x[a].total_cmp(&x[b]));
    let mut r = vec![0.0; x.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && x[idx[j + 1]] == x[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            r[k] = avg;
        }
        i = j + 1;
    }
    r
}

/// Spearman's rank correlation of two equally long samples: the Pearson
/// correlation of their ranks (ties averaged). `None` if there are fewer than two
/// pairs, the lengths differ, or one sample is constant.
pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    if x.len() != y.len() || x.len() < 2 {
        return None;
    }
    let (rx, ry) = (ranks(x), ranks(y));
    let n = x.len() as f64;
    let (mx, my) = (rx.iter().sum::<f64>() / n, ry.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for i in 0..x.len() {
        let (dx, dy) = (rx[i] - mx, ry[i] - my);
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    if sxx == 0.0 || syy == 0.0 {
        return None;
    }
    Some(sxy / (sxx * syy).sqrt())
}

/// Summary of a set of samples after outlier rejection: the one statistics type of
/// smelt's measurements (the probe, the peers, the runtime's `measure`). The
/// default (all zero, `n = 0`) stands for "no samples".
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Median of the kept samples.
    pub median: f64,
    /// Robust spread: the median absolute deviation scaled by 1.4826 (an estimate of
    /// the standard deviation for normally distributed samples).
    pub mad: f64,
    /// 10th percentile of the kept samples.
    pub p10: f64,
    /// 90th percentile of the kept samples.
    pub p90: f64,
    /// Smallest kept sample.
    pub min: f64,
    /// Largest kept sample.
    pub max: f64,
    /// Number of samples kept.
    pub n: usize,
    /// Number of samples rejected as outliers.
    pub rejected: usize,
}

impl Summary {
    /// Standard error of the median estimated from the robust spread
    /// (`1.2533 · σ / √n`), used where a tool expects a "stderr" column.
    pub fn stderr(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            1.2533 * self.mad / (self.n as f64).sqrt()
        }
    }
}

/// Median of a sorted slice (`NaN` when empty).
pub fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if !n.is_multiple_of(2) {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// The median of `v` (unsorted; the mean of the two middle values for an even count),
/// `NaN` when `v` is empty. No outlier rejection: see [`summarize`] for that.
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    median_sorted(&v)
}

/// Percentile `p` in `[0, 1]` of a sorted slice, by linear interpolation.
pub fn percentile_sorted(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let x = p.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let lo = x.floor() as usize;
    let hi = x.ceil() as usize;
    v[lo] + (v[hi] - v[lo]) * (x - lo as f64)
}

/// Scaled median absolute deviation of a slice around `med`.
pub fn mad(v: &[f64], med: f64) -> f64 {
    let mut d: Vec<f64> = v.iter().map(|x| (x - med).abs()).collect();
    d.sort_by(f64::total_cmp);
    1.4826 * median_sorted(&d)
}

/// Summarises `samples`: drops non-finite values, rejects outliers farther than
/// `k` scaled MADs from the median (`k = 3.5` is customary), and reports the rest.
/// Nothing is rejected when the MAD is 0 or when rejection would drop more than half
/// of the samples. Returns `None` when there is no finite sample.
pub fn summarize_k(samples: &[f64], k: f64) -> Option<Summary> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let med = median_sorted(&v);
    let spread = mad(&v, med);
    let total = v.len();
    let kept: Vec<f64> = if spread > 0.0 {
        v.iter()
            .copied()
            .filter(|x| (x - med).abs() <= k * spread)
            .collect()
    } else {
        v.clone()
    };
    let kept = if kept.len() * 2 < total { v } else { kept };
    let m = median_sorted(&kept);
    Some(Summary {
        median: m,
        mad: mad(&kept, m),
        p10: percentile_sorted(&kept, 0.10),
        p90: percentile_sorted(&kept, 0.90),
        min: kept[0],
        max: kept[kept.len() - 1],
        n: kept.len(),
        rejected: total - kept.len(),
    })
}

/// [`summarize_k`] with the customary `k = 3.5`.
pub fn summarize(samples: &[f64]) -> Option<Summary> {
    summarize_k(samples, 3.5)
}

/// A summary of round trips turned into one-way figures.
pub fn halve(s: Summary) -> Summary {
    Summary {
        median: s.median / 2.0,
        mad: s.mad / 2.0,
        p10: s.p10 / 2.0,
        p90: s.p90 / 2.0,
        min: s.min / 2.0,
        max: s.max / 2.0,
        ..s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spearman_basics() {
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]), Some(1.0));
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), Some(-1.0));
        assert_eq!(spearman(&[1.0, 1.0], &[1.0, 2.0]), None);
        assert_eq!(ranks(&[5.0, 1.0, 5.0]), vec![2.5, 1.0, 2.5]);
        let r = spearman(&[1.0, 2.0, 3.0, 4.0], &[1.0, 3.0, 2.0, 4.0]).unwrap();
        assert!((r - 0.8).abs() < 1e-12);
    }

    #[test]
    fn median_and_percentiles() {
        assert_eq!(median_sorted(&[1.0, 2.0, 3.0]), 2.0);
        assert_eq!(median_sorted(&[1.0, 2.0, 3.0, 4.0]), 2.5);
        assert!(median_sorted(&[]).is_nan());
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(percentile_sorted(&[0.0, 10.0], 0.5), 5.0);
        assert_eq!(percentile_sorted(&[0.0, 10.0, 20.0], 1.0), 20.0);
    }

    #[test]
    fn rejects_far_outliers() {
        let mut v = vec![100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8];
        v.push(10_000.0);
        let s = summarize(&v).unwrap();
        assert_eq!(s.rejected, 1);
        assert_eq!(s.n, 7);
        assert!((s.median - 100.0).abs() < 0.5);
        assert!(s.max < 200.0);
        assert!(s.mad > 0.0 && s.mad < 2.0);
        assert!(s.stderr() > 0.0);
    }

    #[test]
    fn constant_samples_and_nan() {
        let s = summarize(&[5.0, 5.0, f64::NAN, 5.0]).unwrap();
        assert_eq!((s.median, s.mad, s.n, s.rejected), (5.0, 0.0, 3, 0));
        assert!(summarize(&[f64::INFINITY]).is_none());
        assert!(summarize(&[]).is_none());
    }

    #[test]
    fn never_rejects_the_majority() {
        // Bimodal: half at 10, half at 1000 — nothing is an "outlier".
        let v = [10.0, 10.0, 10.0, 1000.0, 1000.0, 1000.0];
        let s = summarize(&v).unwrap();
        assert_eq!(s.n + s.rejected, 6);
        assert!(s.n >= 3);
    }
}
