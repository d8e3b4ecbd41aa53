//! The diff itself: for every group on either side, the change in load, rate, latency
//! quantiles, mean and error rate, each with a verdict from [`crate::stats`], adjusted over all
//! the tests of the diff and held to a practical effect size (`min_change`).

use aggregate::Latency;
use serde::Serialize;

use crate::side::{GroupData, Key, Side};
use crate::stats::{self, Adjust};

/// How changes are judged.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Settings {
    /// Significance level, after adjustment.
    pub alpha: f64,
    /// `holm`, `bh` (Benjamini-Hochberg) or `none`, over every test of the diff.
    #[serde(serialize_with = "adjust_name")]
    pub adjust: Adjust,
    /// Smallest relative change called a change (0.1 = 10%), however significant.
    pub min_change: f64,
    /// Latency tests need at least this many timed events on each side.
    pub min_samples: u64,
}

fn adjust_name<S: serde::Serializer>(a: &Adjust, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(match a {
        Adjust::Holm => "holm",
        Adjust::Bh => "bh",
        Adjust::None => "none",
    })
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            alpha: 0.05,
            adjust: Adjust::Bh,
            min_change: 0.10,
            min_samples: 10,
        }
    }
}

/// The verdict on one metric of one group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Latency or error rate up: significant and at least `min_change`.
    Regressed,
    /// Latency or error rate down: significant and at least `min_change`.
    Improved,
    /// Rate up (neither good nor bad): significant and at least `min_change`.
    Increased,
    /// Rate down.
    Decreased,
    /// Significant but smaller than `min_change`.
    Small,
    /// Not significant.
    NoChange,
    /// Too few events to test, or nothing to compare.
    NotTested,
}

/// A group's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// A latency or error metric regressed.
    Regressed,
    /// A latency or error metric improved and none regressed.
    Improved,
    Unchanged,
    /// Only after.
    New,
    /// Only before.
    Gone,
}

/// One metric of one group.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Metric {
    /// `rate`, `shift` (the typical request's change: Hodges-Lehmann, tested by Mann-Whitney;
    /// no before/after values, only `change_pct`), `p50`, `p95`, `p99` or `error_rate`.
    pub name: &'static str,
    /// `per_s`, `ms` or `pct`.
    pub unit: &'static str,
    pub before: Option<f64>,
    pub after: Option<f64>,
    /// Relative change, percent (null when `before` is 0 or unknown).
    pub change_pct: Option<f64>,
    pub p_value: Option<f64>,
    /// After the multiple-testing adjustment.
    pub p_adjusted: Option<f64>,
    /// The test: `poisson_conditional_binomial`, `mann_whitney`, `quantile_fisher` or
    /// `fisher_exact`.
    pub test: &'static str,
    pub verdict: Verdict,
    /// Which way is worse: latency and errors up are a regression; rate has no bad side.
    #[serde(skip)]
    up_is_bad: bool,
}

/// One group's comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupDiff {
    /// 1-based, by the size of the group's change in load.
    pub rank: u64,
    pub id: String,
    pub protocol: String,
    pub command: String,
    pub fingerprint: String,
    pub status: Status,
    pub count_before: u64,
    pub count_after: u64,
    /// Service time per second of span (average active sessions), before and after.
    pub load_before: Option<f64>,
    pub load_after: Option<f64>,
    /// `load_after - load_before`: this group's contribution to the change in total load.
    pub load_change: Option<f64>,
    pub metrics: Vec<Metric>,
}

/// One side in the report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SideSummary {
    pub label: String,
    pub span_s: Option<f64>,
    pub queries: u64,
    pub qps: Option<f64>,
    pub load: Option<f64>,
    /// False when a source reported losses.
    pub complete: bool,
    /// How much more the mean log service time varies between the side's time blocks than
    /// independent requests would make it (1: independent); latency tests are deflated by it.
    pub design_effect: f64,
    /// Variance over mean of the requests per time block (1: Poisson); the rate test is
    /// deflated by it.
    pub count_dispersion: f64,
}

/// The counts behind the one-line summary.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// The line printed at the top of the text report.
    pub line: String,
    pub regressed: u64,
    pub improved: u64,
    pub new: u64,
    pub gone: u64,
    pub unchanged: u64,
    /// Relative change of the total load, percent.
    pub load_change_pct: Option<f64>,
    /// Id of the group that contributed most to the change in load (same direction).
    pub mostly_from: Option<String>,
}

/// The whole comparison (also the JSON document of `dbtap diff --format json`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Diff {
    pub version: u32,
    pub settings: Settings,
    pub before: SideSummary,
    pub after: SideSummary,
    pub summary: Summary,
    /// Number of tests in the adjusted family.
    pub tests: u64,
    pub groups: Vec<GroupDiff>,
}

fn secs(span_ns: Option<u64>) -> Option<f64> {
    span_ns.filter(|&s| s > 0).map(|s| s as f64 / 1e9)
}

fn per_s(v: f64, span: Option<f64>) -> Option<f64> {
    span.map(|s| v / s)
}

fn load(l: &Latency, span: Option<f64>) -> Option<f64> {
    per_s(l.sum_ns() as f64 / 1e9, span)
}

fn change_pct(before: Option<f64>, after: Option<f64>) -> Option<f64> {
    match (before, after) {
        (Some(b), Some(a)) if b > 0.0 => Some((a - b) / b * 100.0),
        _ => None,
    }
}

fn metric(name: &'static str, unit: &'static str, test: &'static str, up_is_bad: bool) -> Metric {
    Metric {
        name,
        unit,
        before: None,
        after: None,
        change_pct: None,
        p_value: None,
        p_adjusted: None,
        test,
        verdict: Verdict::NotTested,
        up_is_bad,
    }
}

fn ms(ns: Option<u64>) -> Option<f64> {
    ns.map(|n| n as f64 / 1e6)
}

/// How much the requests of one moment resemble each other, per side: the design effect of
/// latency means and the dispersion of counts (see [`crate::blocks`]).
#[derive(Clone, Copy, Debug)]
struct Clustering {
    latency: (f64, f64),
    counts: (f64, f64),
}

/// The unadjusted metrics of a group present on both sides.
fn metrics(
    b: &GroupData,
    a: &GroupData,
    spans: (Option<f64>, Option<f64>),
    s: &Settings,
    c: Clustering,
) -> Vec<Metric> {
    let rate_deff = stats::combined_design_effect(c.counts.0, b.count, c.counts.1, a.count);
    let lat_deff = stats::combined_design_effect(
        c.latency.0,
        b.service.count(),
        c.latency.1,
        a.service.count(),
    );
    let mut out = Vec::with_capacity(6);
    let mut rate = metric("rate", "per_s", "poisson_conditional_binomial", false);
    rate.before = per_s(b.count as f64, spans.0);
    rate.after = per_s(a.count as f64, spans.1);
    if let (Some(t1), Some(t2)) = spans {
        rate.p_value = Some(stats::deflate(
            stats::poisson_rates(b.count, t1, a.count, t2),
            rate_deff,
        ));
    }
    out.push(rate);
    let (sb, sa) = (&b.service, &a.service);
    let enough = sb.count() >= s.min_samples && sa.count() >= s.min_samples;
    let (bins_b, bins_a) = if enough {
        (sb.bucket_counts(), sa.bucket_counts())
    } else {
        (Vec::new(), Vec::new())
    };
    // The typical request's change: the Hodges-Lehmann ratio (what the rank test tests), not
    // the mean, which a handful of outliers can move while the rank test says nothing of them.
    let mut shift = metric("shift", "pct", "mann_whitney", true);
    let mid = |i: u32| {
        aggregate::Latency::bucket_range(i).map_or(0.0, |(a, b)| (a as f64 + b as f64) / 2.0)
    };
    let hl = stats::hodges_lehmann_ratio(&bins_b, &bins_a, mid);
    shift.change_pct = hl.map(|r| (r - 1.0) * 100.0);
    if let (Some(mw), Some(r)) = (stats::mann_whitney(&bins_b, &bins_a), hl) {
        // A ratio moving against the ranks (possible with ties) is not called a change.
        let agrees = r == 1.0 || (r > 1.0) == (mw.auc > 0.5);
        shift.p_value = Some(if agrees {
            stats::deflate(mw.p, lat_deff)
        } else {
            1.0
        });
    }
    out.push(shift);
    let qb = sb.quantiles_ns([0.5, 0.95, 0.99]);
    let qa = sa.quantiles_ns([0.5, 0.95, 0.99]);
    for (i, (name, q)) in [("p50", 0.5), ("p95", 0.95), ("p99", 0.99)]
        .into_iter()
        .enumerate()
    {
        let mut m = metric(name, "ms", "quantile_fisher", true);
        m.before = ms(qb[i]);
        m.after = ms(qa[i]);
        m.p_value =
            stats::quantile_test(&bins_b, &bins_a, q).map(|t| stats::deflate(t.p, lat_deff));
        out.push(m);
    }
    let mut err = metric("error_rate", "pct", "fisher_exact", true);
    if b.count > 0 && a.count > 0 {
        err.before = Some(b.errors as f64 * 100.0 / b.count as f64);
        err.after = Some(a.errors as f64 * 100.0 / a.count as f64);
        if b.errors + a.errors > 0 {
            err.p_value = Some(stats::two_proportions(b.errors, b.count, a.errors, a.count));
        }
    }
    out.push(err);
    for m in out.iter_mut().filter(|m| m.name != "shift") {
        m.change_pct = change_pct(m.before, m.after);
    }
    out
}

/// The verdict of a metric once its adjusted p-value is known.
fn judge(m: &mut Metric, s: &Settings) {
    let Some(p) = m.p_adjusted else {
        m.verdict = Verdict::NotTested;
        return;
    };
    if p > s.alpha {
        m.verdict = Verdict::NoChange;
        return;
    }
    // The size and direction of the change: its relative change, or from nothing to something.
    let (big, up) = match (m.change_pct, m.before, m.after) {
        (Some(c), _, _) => (c.abs() >= s.min_change * 100.0, c > 0.0),
        (None, Some(b), Some(a)) if b == 0.0 && a > 0.0 => (true, true),
        _ => {
            m.verdict = Verdict::NotTested;
            return;
        }
    };
    m.verdict = match (big, up, m.up_is_bad) {
        (false, _, _) => Verdict::Small,
        (true, true, true) => Verdict::Regressed,
        (true, false, true) => Verdict::Improved,
        (true, true, false) => Verdict::Increased,
        (true, false, false) => Verdict::Decreased,
    };
}

fn status(metrics: &[Metric]) -> Status {
    if metrics.iter().any(|m| m.verdict == Verdict::Regressed) {
        Status::Regressed
    } else if metrics.iter().any(|m| m.verdict == Verdict::Improved) {
        Status::Improved
    } else {
        Status::Unchanged
    }
}

fn side_summary(side: &Side) -> SideSummary {
    let span = secs(side.span_ns);
    SideSummary {
        label: side.label.clone(),
        span_s: span,
        queries: side.totals.count,
        qps: per_s(side.totals.count as f64, span),
        load: load(&side.totals.service, span),
        complete: side.complete,
        design_effect: side.blocks.design_effect(),
        count_dispersion: side.blocks.count_dispersion(),
    }
}

/// Every group of either side, unranked, with unadjusted p-values.
fn groups(before: &Side, after: &Side, s: &Settings) -> Vec<GroupDiff> {
    let spans = (secs(before.span_ns), secs(after.span_ns));
    let c = Clustering {
        latency: (before.blocks.design_effect(), after.blocks.design_effect()),
        counts: (
            before.blocks.count_dispersion(),
            after.blocks.count_dispersion(),
        ),
    };
    let mut keys: Vec<&Key> = before.groups.keys().chain(after.groups.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|k| {
            let (b, a) = (before.groups.get(k), after.groups.get(k));
            let any = b.or(a)?;
            let (status, metrics) = match (b, a) {
                (Some(b), Some(a)) => (Status::Unchanged, metrics(b, a, spans, s, c)),
                (Some(_), None) => (Status::Gone, Vec::new()),
                _ => (Status::New, Vec::new()),
            };
            let load_before = b
                .and_then(|g| load(&g.service, spans.0))
                .or(Some(0.0).filter(|_| spans.0.is_some()));
            let load_after = a
                .and_then(|g| load(&g.service, spans.1))
                .or(Some(0.0).filter(|_| spans.1.is_some()));
            Some(GroupDiff {
                rank: 0,
                id: k.id.clone(),
                protocol: k.protocol.clone(),
                command: k.command.clone(),
                fingerprint: any.fingerprint.clone(),
                status,
                count_before: b.map_or(0, |g| g.count),
                count_after: a.map_or(0, |g| g.count),
                load_before,
                load_after,
                load_change: load_after.zip(load_before).map(|(x, y)| x - y),
                metrics,
            })
        })
        .collect()
}

/// Compares two sides.
pub fn compare(before: &Side, after: &Side, s: &Settings) -> Diff {
    let mut groups = groups(before, after, s);
    let pvals: Vec<f64> = groups
        .iter()
        .flat_map(|g| g.metrics.iter().filter_map(|m| m.p_value))
        .collect();
    let adjusted = stats::adjust(&pvals, s.adjust);
    let mut next = adjusted.into_iter();
    for g in &mut groups {
        for m in &mut g.metrics {
            if m.p_value.is_some() {
                m.p_adjusted = next.next();
            }
            judge(m, s);
        }
        if !g.metrics.is_empty() {
            g.status = status(&g.metrics);
        }
    }
    groups.sort_by(|a, b| {
        let d = |g: &GroupDiff| g.load_change.unwrap_or(0.0).abs();
        d(b).total_cmp(&d(a))
            .then_with(|| {
                b.count_after
                    .max(b.count_before)
                    .cmp(&a.count_after.max(a.count_before))
            })
            .then_with(|| a.id.cmp(&b.id))
    });
    for (i, g) in groups.iter_mut().enumerate() {
        g.rank = i as u64 + 1;
    }
    let (bs, as_) = (side_summary(before), side_summary(after));
    let summary = crate::summary::summarize(&groups, &bs, &as_);
    Diff {
        version: 1,
        settings: s.clone(),
        before: bs,
        after: as_,
        summary,
        tests: pvals.len() as u64,
        groups,
    }
}
