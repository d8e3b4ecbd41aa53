//! The statistics of `dbtap diff`: two-sample tests on what dbtap keeps (binned latency
//! histograms, counts over a time span, error counts) and multiple-testing adjustment. Pure
//! functions of numbers; every test returns a two-sided p-value in `[0, 1]`.
//!
//! - Latency distribution: Mann-Whitney U on the histogram buckets (midranks for ties, the tie
//!   correction of the variance, normal approximation with continuity correction).
//! - A latency quantile: the generalised Mood median test. The pooled sample's q-quantile bucket
//!   splits each side into "at or below" and "above"; under the null hypothesis (one
//!   distribution) the 2x2 table is hypergeometric given its margins, so Fisher's exact test
//!   applies however coarse the bins.
//! - Rates: the conditional binomial test for two Poisson rates (given `n = c1 + c2`,
//!   `c2 ~ Bin(n, t2 / (t1 + t2))`), exact up to [`EXACT_LIMIT`] events.
//! - Error proportions: Fisher's exact test, a pooled z-test beyond [`EXACT_LIMIT`] terms.
//! - Holm (family-wise error) and Benjamini-Hochberg (false discovery rate) adjustments.

/// Above this many terms the exact tests switch to their normal approximations (which are then
/// accurate to far better than any threshold a user sets).
pub const EXACT_LIMIT: u64 = 100_000;

/// `ln Γ(x)` for `x > 0` (Lanczos, g = 7, 9 terms: about 15 significant digits).
pub fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x)Γ(1-x) = π / sin(πx).
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).abs().ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// `ln C(n, k)`.
pub fn ln_choose(n: u64, k: u64) -> f64 {
    if k > n {
        return f64::NEG_INFINITY;
    }
    ln_gamma(n as f64 + 1.0) - ln_gamma(k as f64 + 1.0) - ln_gamma((n - k) as f64 + 1.0)
}

/// The complementary error function (W. J. Cody's rational approximations via the
/// Numerical Recipes Chebyshev fit: relative error below 1.2e-7 everywhere).
pub fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

/// Two-sided p-value of a standard normal statistic.
pub fn normal_two_sided(z: f64) -> f64 {
    if !z.is_finite() {
        return if z.is_nan() { 1.0 } else { 0.0 };
    }
    erfc(z.abs() / std::f64::consts::SQRT_2).clamp(0.0, 1.0)
}

/// The standard normal quantile (P. J. Acklam's rational approximation, refined by one
/// Halley step: about 1e-15 relative error).
pub fn normal_quantile(p: f64) -> f64 {
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    const A: [f64; 6] = [
        -3.969683028665376e1,
        2.209460984245205e2,
        -2.759285104469687e2,
        1.383_577_518_672_69e2,
        -3.066479806614716e1,
        2.506628277459239,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e1,
        1.615858368580409e2,
        -1.556989798598866e2,
        6.680131188771972e1,
        -1.328068155288572e1,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-3,
        -3.223964580411365e-1,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-3,
        3.224671290700398e-1,
        2.445134137142996,
        3.754408661907416,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// A two-sided p-value recomputed for a variance `deff` times larger than the test assumed
/// (the design effect of correlated samples): its normal score shrinks by `sqrt(deff)`.
pub fn deflate(p: f64, deff: f64) -> f64 {
    if deff.is_nan() || deff <= 1.0 || p.is_nan() || p <= 0.0 || p >= 1.0 {
        return p;
    }
    // Upper-tail score of p / 2, through the lower tail for accuracy at small p.
    let z = -normal_quantile(p / 2.0);
    normal_two_sided(z / deff.sqrt())
}

/// The design effect of a difference between two means with `n1` and `n2` samples whose own
/// design effects are `d1` and `d2`: the ratio of `d1/n1 + d2/n2` to `1/n1 + 1/n2`.
pub fn combined_design_effect(d1: f64, n1: u64, d2: f64, n2: u64) -> f64 {
    if n1 == 0 || n2 == 0 {
        return d1.max(d2).max(1.0);
    }
    let (a, b) = (1.0 / n1 as f64, 1.0 / n2 as f64);
    ((d1 * a + d2 * b) / (a + b)).max(1.0)
}

/// Sums the probabilities `pmf(x)` for `x` in `lo..=hi` that are at most `pmf(obs)` (the
/// two-sided exact p-value of R's `binom.test` and `fisher.test`), with their relative tolerance.
fn exact_two_sided(lo: u64, hi: u64, obs: u64, ln_pmf: impl Fn(u64) -> f64) -> f64 {
    let cut = ln_pmf(obs) + (1e-7f64).ln_1p();
    let p: f64 = (lo..=hi)
        .map(&ln_pmf)
        .filter(|&l| l <= cut)
        .map(f64::exp)
        .sum();
    p.clamp(0.0, 1.0)
}

/// Two-sided binomial test of `k` successes in `n` trials against success probability `p`.
pub fn binomial_test(k: u64, n: u64, p: f64) -> f64 {
    if n == 0 || k > n || !(0.0..=1.0).contains(&p) {
        return 1.0;
    }
    if p == 0.0 || p == 1.0 {
        let expected = if p == 0.0 { 0 } else { n };
        return if k == expected { 1.0 } else { 0.0 };
    }
    if n <= EXACT_LIMIT {
        let (lp, lq) = (p.ln(), (1.0 - p).ln());
        // `ln Γ(j + 1)` for every j in 0..=n, each computed once: `ln_choose(n, x)` over all x
        // called `ln_gamma` 3 (n + 1) times for these n + 1 values (the report's rate tests
        // were a tenth of a replay's instructions). The same calls on the same arguments in
        // the same order of operations: the p-values are bit for bit what they were. At most
        // EXACT_LIMIT + 1 values (800 KB) while the test runs.
        let lg: Vec<f64> = (0..=n).map(|j| ln_gamma(j as f64 + 1.0)).collect();
        let at = |j: u64| lg.get(j as usize).copied().unwrap_or(f64::NAN);
        let top = at(n);
        return exact_two_sided(0, n, k, |x| {
            top - at(x) - at(n - x) + x as f64 * lp + (n - x) as f64 * lq
        });
    }
    let (nf, kf) = (n as f64, k as f64);
    let sd = (nf * p * (1.0 - p)).sqrt();
    let d = ((kf - nf * p).abs() - 0.5).max(0.0);
    normal_two_sided(d / sd)
}

/// Two Poisson rates: `c1` events over `t1` against `c2` over `t2` (any unit of time), by the
/// conditional binomial test.
pub fn poisson_rates(c1: u64, t1: f64, c2: u64, t2: f64) -> f64 {
    if !(t1 > 0.0 && t2 > 0.0 && t1.is_finite() && t2.is_finite()) {
        return 1.0;
    }
    binomial_test(c2, c1 + c2, t2 / (t1 + t2))
}

/// Two proportions `a / n1` against `b / n2`: Fisher's exact test (a pooled z-test when the
/// table has more than [`EXACT_LIMIT`] possible values).
pub fn two_proportions(a: u64, n1: u64, b: u64, n2: u64) -> f64 {
    if a > n1 || b > n2 || n1 == 0 || n2 == 0 {
        return 1.0;
    }
    let (n, k) = (n1 + n2, a + b);
    let lo = k.saturating_sub(n2);
    let hi = k.min(n1);
    if hi - lo <= EXACT_LIMIT {
        let denom = ln_choose(n, k);
        return exact_two_sided(lo, hi, a, |x| {
            ln_choose(n1, x) + ln_choose(n2, k - x) - denom
        });
    }
    let (p1, p2) = (a as f64 / n1 as f64, b as f64 / n2 as f64);
    let p = k as f64 / n as f64;
    let se = (p * (1.0 - p) * (1.0 / n1 as f64 + 1.0 / n2 as f64)).sqrt();
    if se == 0.0 {
        return 1.0;
    }
    normal_two_sided((p1 - p2) / se)
}

/// Result of [`mann_whitney`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MannWhitney {
    pub p: f64,
    /// `U / (n1 n2)`: the probability that an "after" value exceeds a "before" value (ties
    /// count one half). 0.5 when the distributions are the same.
    pub auc: f64,
}

/// Merges two bucket lists (`(index, count)` in index order) into `(index, before, after)`.
fn merge_bins(before: &[(u32, u64)], after: &[(u32, u64)]) -> Vec<(u32, u64, u64)> {
    let mut out = Vec::with_capacity(before.len() + after.len());
    let (mut i, mut j) = (0, 0);
    loop {
        match (before.get(i), after.get(j)) {
            (Some(&(bi, bc)), Some(&(ai, ac))) if bi == ai => {
                out.push((bi, bc, ac));
                i += 1;
                j += 1;
            }
            (Some(&(bi, bc)), Some(&(ai, _))) if bi < ai => {
                out.push((bi, bc, 0));
                i += 1;
            }
            (Some(&(bi, bc)), None) => {
                out.push((bi, bc, 0));
                i += 1;
            }
            (_, Some(&(ai, ac))) => {
                out.push((ai, 0, ac));
                j += 1;
            }
            (None, None) => return out,
        }
    }
}

/// Mann-Whitney U test of binned samples: each side a list of `(bucket index, count)` in index
/// order, values in one bucket tied. `None` when a side is empty.
pub fn mann_whitney(before: &[(u32, u64)], after: &[(u32, u64)]) -> Option<MannWhitney> {
    let bins = merge_bins(before, after);
    let n1: f64 = bins.iter().map(|b| b.1 as f64).sum();
    let n2: f64 = bins.iter().map(|b| b.2 as f64).sum();
    if n1 == 0.0 || n2 == 0.0 {
        return None;
    }
    let n = n1 + n2;
    let (mut below, mut rank_sum, mut ties) = (0.0f64, 0.0f64, 0.0f64);
    for &(_, b, a) in &bins {
        let t = (b + a) as f64;
        rank_sum += a as f64 * (below + (t + 1.0) / 2.0);
        ties += t * t * t - t;
        below += t;
    }
    let u = rank_sum - n2 * (n2 + 1.0) / 2.0;
    let mean = n1 * n2 / 2.0;
    let var = n1 * n2 / 12.0 * ((n + 1.0) - ties / (n * (n - 1.0)).max(1.0));
    let auc = u / (n1 * n2);
    if var <= 0.0 {
        return Some(MannWhitney { p: 1.0, auc });
    }
    let d = ((u - mean).abs() - 0.5).max(0.0);
    Some(MannWhitney {
        p: normal_two_sided(d / var.sqrt()),
        auc,
    })
}

/// The Hodges-Lehmann estimate of the ratio after/before: the median, over every pair of one
/// "before" and one "after" value, of their ratio (the shift that [`mann_whitney`] tests, on a
/// log scale). Binned values are taken at `value(bucket)`. `None` when a side is empty.
pub fn hodges_lehmann_ratio(
    before: &[(u32, u64)],
    after: &[(u32, u64)],
    value: impl Fn(u32) -> f64,
) -> Option<f64> {
    let logs = |bins: &[(u32, u64)]| -> Vec<(f64, f64)> {
        let mut v: Vec<(f64, f64)> = bins
            .iter()
            .map(|&(i, c)| (value(i).max(0.5).ln(), c as f64))
            .collect();
        v.sort_by(|x, y| x.0.total_cmp(&y.0));
        v
    };
    let (b, a) = (logs(before), logs(after));
    let wb: f64 = b.iter().map(|x| x.1).sum();
    let wa: f64 = a.iter().map(|x| x.1).sum();
    let (Some(b0), Some(b1), Some(a0), Some(a1)) = (b.first(), b.last(), a.first(), a.last())
    else {
        return None;
    };
    if wb <= 0.0 || wa <= 0.0 {
        return None;
    }
    // Weight of the pairs whose log ratio is at most t, in O(|b| + |a|): as the after value
    // grows, the before values it exceeds by at most t start further along `b`.
    let weight_le = |t: f64| {
        let (mut i, mut below, mut total) = (0usize, 0.0f64, 0.0f64);
        for &(la, w) in &a {
            while i < b.len() && b[i].0 < la - t {
                below += b[i].1;
                i += 1;
            }
            total += w * (wb - below);
        }
        total
    };
    // Bisection for the weighted median of the pairwise log ratios.
    let (mut lo, mut hi) = (a0.0 - b1.0, a1.0 - b0.0);
    for _ in 0..100 {
        let mid = (lo + hi) / 2.0;
        if weight_le(mid) >= wb * wa / 2.0 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi.exp())
}

/// Result of [`quantile_test`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuantileTest {
    pub p: f64,
    /// Share of each side at or below the pooled quantile's bucket.
    pub below_before: f64,
    pub below_after: f64,
}

/// Tests whether the `q`-quantile differs between two binned samples (the generalised median
/// test, see the module docs). `None` when a side is empty or `q` is outside `(0, 1)`.
pub fn quantile_test(before: &[(u32, u64)], after: &[(u32, u64)], q: f64) -> Option<QuantileTest> {
    if !(q > 0.0 && q < 1.0) {
        return None;
    }
    let bins = merge_bins(before, after);
    let n1: u64 = bins.iter().map(|b| b.1).sum();
    let n2: u64 = bins.iter().map(|b| b.2).sum();
    if n1 == 0 || n2 == 0 {
        return None;
    }
    // Split after the bucket whose pooled cumulative share is closest to q (never after the
    // last: that would put everything on one side). The split depends on the pooled sample only,
    // so the table's null distribution given its margins is still hypergeometric.
    let n = (n1 + n2) as f64;
    let (mut cum, mut a_cum, mut b_cum) = (0u64, 0u64, 0u64);
    let (mut a, mut b, mut best) = (n1, n2, f64::INFINITY);
    for &(_, bc, ac) in bins.iter().take(bins.len().saturating_sub(1)) {
        cum += bc + ac;
        a_cum += bc;
        b_cum += ac;
        let d = (cum as f64 / n - q).abs();
        if d < best {
            (a, b, best) = (a_cum, b_cum, d);
        }
    }
    Some(QuantileTest {
        p: two_proportions(a, n1, b, n2),
        below_before: a as f64 / n1 as f64,
        below_after: b as f64 / n2 as f64,
    })
}

/// Multiple-testing adjustment over one family of p-values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Adjust {
    /// Holm's step-down: controls the family-wise error rate.
    Holm,
    /// Benjamini-Hochberg step-up: controls the false discovery rate (and the family-wise error
    /// rate when nothing changed at all).
    #[default]
    Bh,
    /// No adjustment.
    None,
}

/// Adjusted p-values, in the input's order (compare each with the level).
pub fn adjust(p: &[f64], how: Adjust) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut out = vec![1.0; m];
    match how {
        Adjust::None => return p.iter().map(|v| v.clamp(0.0, 1.0)).collect(),
        Adjust::Holm => {
            let mut run = 0.0f64;
            for (i, &k) in order.iter().enumerate() {
                run = run.max(((m - i) as f64 * p[k]).min(1.0));
                out[k] = run;
            }
        }
        Adjust::Bh => {
            let mut run = 1.0f64;
            for (i, &k) in order.iter().enumerate().rev() {
                run = run.min((m as f64 / (i + 1) as f64 * p[k]).min(1.0));
                out[k] = run;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs().max(1e-300)
    }

    #[test]
    fn special_functions() {
        assert!(ln_gamma(1.0).abs() < 1e-14 && ln_gamma(2.0).abs() < 1e-14);
        assert!(close(ln_gamma(10.0), 362_880f64.ln(), 1e-12));
        assert!(close(
            ln_gamma(0.5),
            std::f64::consts::PI.sqrt().ln(),
            1e-12
        ));
        assert!(close(ln_choose(10, 3), 120f64.ln(), 1e-12));
        assert!(close(normal_two_sided(1.959_963_985), 0.05, 1e-5));
        assert!(close(normal_two_sided(0.0), 1.0, 1e-6));
        assert!(close(normal_two_sided(-3.0), 0.002_699_796, 1e-5));
    }

    #[test]
    fn deflation() {
        assert!(close(normal_quantile(0.975), 1.959_963_985, 1e-7));
        assert!(close(normal_quantile(1e-10), -6.361_340_902, 1e-6));
        assert_eq!(deflate(0.01, 1.0), 0.01);
        // z = 1.96 over sqrt(4): z = 0.98, p = 0.327.
        assert!(close(deflate(0.05, 4.0), 0.327_086, 1e-4));
        // z = 11.46 over sqrt(100): z = 1.146, p = 0.25.
        assert!((0.2..0.3).contains(&deflate(1e-30, 100.0)));
        assert!(close(
            combined_design_effect(1.0, 100, 9.0, 100),
            5.0,
            1e-12
        ));
    }

    #[test]
    fn binomial_matches_r() {
        // R: binom.test(7, 20, 0.5)$p.value = 0.2631760
        assert!(close(binomial_test(7, 20, 0.5), 0.263_175_964_355_5, 1e-9));
        // Asymmetric, two-sided by density (exact sum in Python: 0.018775062714801206).
        assert!(close(binomial_test(2, 30, 0.25), 0.018_775_062_714_8, 1e-9));
        assert_eq!(binomial_test(0, 0, 0.5), 1.0);
        assert!(binomial_test(500_300, 1_000_000, 0.5) > 0.5);
        assert!(binomial_test(510_000, 1_000_000, 0.5) < 1e-9);
    }

    /// `binomial_test` as it was before its `ln Γ` table: `ln_choose` per term.
    fn binomial_reference(k: u64, n: u64, p: f64) -> f64 {
        let (lp, lq) = (p.ln(), (1.0 - p).ln());
        exact_two_sided(0, n, k, |x| {
            ln_choose(n, x) + x as f64 * lp + (n - x) as f64 * lq
        })
    }

    proptest::proptest! {
        /// The table of `ln Γ` gives the per-term `ln_choose` p-values bit for bit.
        #[test]
        fn binomial_table_is_bit_identical(
            n in 1u64..3_000, k in 0u64..3_000, p in 0.001f64..0.999
        ) {
            let k = k % (n + 1);
            proptest::prop_assert_eq!(
                binomial_test(k, n, p).to_bits(),
                binomial_reference(k, n, p).to_bits()
            );
        }
    }

    #[test]
    fn binomial_table_at_the_exact_limit() {
        for (k, n) in [(50_000, EXACT_LIMIT), (49_000, EXACT_LIMIT), (0, 1), (1, 1)] {
            assert_eq!(
                binomial_test(k, n, 0.5).to_bits(),
                binomial_reference(k, n, 0.5).to_bits()
            );
        }
    }

    #[test]
    fn fisher_matches_r() {
        // R: fisher.test(matrix(c(3, 1, 1, 3), 2))$p.value = 0.4857143
        assert!(close(two_proportions(3, 4, 1, 4), 0.485_714_3, 1e-6));
        // 10 of 100 against 25 of 100 (exact sum in Python: 0.008503571478623958).
        assert!(close(
            two_proportions(10, 100, 25, 100),
            0.008_503_571_478_6,
            1e-9
        ));
        assert_eq!(two_proportions(0, 10, 0, 10), 1.0);
        assert_eq!(two_proportions(1, 0, 0, 10), 1.0);
    }

    #[test]
    fn poisson_rates_symmetric_and_sensitive() {
        assert!(poisson_rates(100, 1.0, 100, 1.0) > 0.9);
        assert!(poisson_rates(100, 1.0, 200, 2.0) > 0.9);
        assert!(poisson_rates(100, 1.0, 160, 1.0) < 0.001);
        assert_eq!(poisson_rates(1, 0.0, 1, 1.0), 1.0);
    }

    #[test]
    fn mann_whitney_matches_a_direct_count() {
        let before = [(1, 3), (2, 2), (5, 1)];
        let after = [(2, 1), (4, 3), (6, 2)];
        let r = mann_whitney(&before, &after).unwrap();
        // U of after: pairs (after > before) + ties / 2, counted by hand.
        let mut u = 0.0;
        for &(ai, ac) in &after {
            for &(bi, bc) in &before {
                let w = if ai > bi {
                    1.0
                } else if ai == bi {
                    0.5
                } else {
                    0.0
                };
                u += w * (ac * bc) as f64;
            }
        }
        assert!(close(r.auc, u / 36.0, 1e-12));
        assert!(r.p > 0.0 && r.p < 0.2);
        let same = mann_whitney(&before, &before).unwrap();
        assert!(close(same.auc, 0.5, 1e-12) && same.p > 0.99);
        assert!(mann_whitney(&[], &after).is_none());
        let one_bin = mann_whitney(&[(3, 10)], &[(3, 7)]).unwrap();
        assert_eq!(one_bin.p, 1.0);
    }

    #[test]
    fn hodges_lehmann_finds_the_shift() {
        let v = |i: u32| f64::from(i);
        let before = [(100, 10), (110, 10), (120, 10)];
        let after: Vec<(u32, u64)> = before.iter().map(|&(i, c)| (i * 2, c)).collect();
        let r = hodges_lehmann_ratio(&before, &after, v).unwrap();
        assert!(close(r, 2.0, 0.01), "{r}");
        assert!(close(
            hodges_lehmann_ratio(&before, &before, v).unwrap(),
            1.0,
            1e-12
        ));
        assert!(hodges_lehmann_ratio(&[], &before, v).is_none());
    }

    #[test]
    fn quantile_test_splits_at_the_pooled_quantile() {
        let before = [(1, 50), (2, 50)];
        let after = [(1, 10), (2, 90)];
        let r = quantile_test(&before, &after, 0.5).unwrap();
        assert!(close(r.below_before, 0.5, 1e-12) && close(r.below_after, 0.1, 1e-12));
        assert!(r.p < 1e-6);
        assert!(quantile_test(&before, &before, 0.5).unwrap().p > 0.99);
        assert!(quantile_test(&before, &after, 1.0).is_none());
    }

    #[test]
    fn adjustments_match_r_p_adjust() {
        let p = [0.01, 0.04, 0.03, 0.5];
        // R: p.adjust(c(.01,.04,.03,.5), "holm") = 0.04 0.09 0.09 0.50
        let h = adjust(&p, Adjust::Holm);
        for (a, b) in h.iter().zip([0.04, 0.09, 0.09, 0.5]) {
            assert!(close(*a, b, 1e-12), "{h:?}");
        }
        // R: p.adjust(..., "BH") = 0.04 0.05333 0.05333 0.5
        let bh = adjust(&p, Adjust::Bh);
        for (a, b) in bh.iter().zip([0.04, 0.053_333_333, 0.053_333_333, 0.5]) {
            assert!(close(*a, b, 1e-6), "{bh:?}");
        }
        assert!(adjust(&[], Adjust::Bh).is_empty());
    }
}
