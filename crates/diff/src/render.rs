//! The text and JSON forms of a [`Diff`].

use std::io::{self, Write};

use report::fmt::{duration, sanitize, shorten};

use crate::compare::{Diff, GroupDiff, Metric, SideSummary, Status, Verdict};
use crate::stats::Adjust;

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".to_string(), f)
}

fn value(m: &Metric, v: Option<f64>) -> String {
    match m.unit {
        "ms" => opt(v, |x| duration(x * 1e6)),
        "per_s" => opt(v, |x| format!("{x:.2}/s")),
        _ => opt(v, |x| format!("{x:.2}%")),
    }
}

fn verdict(v: Verdict) -> &'static str {
    match v {
        Verdict::Regressed => "REGRESSED",
        Verdict::Improved => "improved",
        Verdict::Increased => "increased",
        Verdict::Decreased => "decreased",
        Verdict::Small => "small change",
        Verdict::NoChange => "not significant",
        Verdict::NotTested => "not tested",
    }
}

fn status(s: Status) -> &'static str {
    match s {
        Status::Regressed => "REGRESSED",
        Status::Improved => "improved",
        Status::Unchanged => "unchanged",
        Status::New => "NEW",
        Status::Gone => "gone",
    }
}

fn pvalue(p: Option<f64>) -> String {
    match p {
        None => String::new(),
        Some(p) if p < 1e-6 => "p<1e-6".to_string(),
        Some(p) => format!("p={p:.2e}").replace("e0", "").replace("e-0", "e-"),
    }
}

fn side_line(out: &mut impl Write, name: &str, s: &SideSummary) -> io::Result<()> {
    writeln!(
        out,
        "{name}: {}: {}, {} queries{}, load {} AAS, design effect {:.1}, count dispersion {:.1}{}",
        s.label,
        opt(s.span_s, |x| format!("{x:.1} s")),
        s.queries,
        opt(s.qps, |x| format!(" ({x:.1}/s)")).replace('-', ""),
        opt(s.load, |x| format!("{x:.3}")),
        s.design_effect,
        s.count_dispersion,
        if s.complete {
            ""
        } else {
            " (INCOMPLETE: losses)"
        }
    )
}

fn group(out: &mut impl Write, g: &GroupDiff) -> io::Result<()> {
    let load = match (g.load_before, g.load_after, g.load_change) {
        (Some(b), Some(a), Some(d)) => format!("load {d:+.4} AAS ({b:.4} -> {a:.4})"),
        _ => "load unknown".to_string(),
    };
    writeln!(
        out,
        "# {:<3} {:<10} {}  {} {}  {load}  count {} -> {}",
        g.rank,
        status(g.status),
        g.id,
        g.protocol,
        g.command,
        g.count_before,
        g.count_after
    )?;
    writeln!(
        out,
        "      {}",
        shorten(&sanitize(&g.fingerprint, false), 120)
    )?;
    for m in &g.metrics {
        if m.name == "shift" {
            // No before/after values: the typical request's change (Hodges-Lehmann), and what
            // it comes to at the median before.
            let p50 = g
                .metrics
                .iter()
                .find(|x| x.name == "p50")
                .and_then(|x| x.before);
            let typical = match (p50, m.change_pct) {
                (Some(ms), Some(c)) => {
                    let d = ms * c / 100.0 * 1e6;
                    let sign = if d < 0.0 { "-" } else { "+" };
                    format!("typical request {sign}{}", report::fmt::duration(d.abs()))
                }
                _ => "typical request".to_string(),
            };
            let row = format!(
                "      {:<10} {:>26} {:>8}  {:<15} {}",
                m.name,
                typical,
                opt(m.change_pct, |c| format!("{c:+.1}%")),
                verdict(m.verdict),
                pvalue(m.p_adjusted)
            );
            writeln!(out, "{}", row.trim_end())?;
            continue;
        }
        let (before, after) = (value(m, m.before), value(m, m.after));
        let row = format!(
            "      {:<10} {:>11} -> {:<11} {:>8}  {:<15} {}",
            m.name,
            before,
            after,
            opt(m.change_pct, |c| format!("{c:+.1}%")),
            verdict(m.verdict),
            pvalue(m.p_adjusted)
        );
        writeln!(out, "{}", row.trim_end())?;
    }
    Ok(())
}

/// The text report: the summary line, both sides, how verdicts are made, then the groups
/// ranked by their change in load (the first `limit`, and every group that is not unchanged).
pub fn text(d: &Diff, limit: usize, out: &mut impl Write) -> io::Result<()> {
    writeln!(out, "dbtap diff: {}", d.summary.line)?;
    side_line(out, "Before", &d.before)?;
    side_line(out, "After ", &d.after)?;
    let adjust = match d.settings.adjust {
        Adjust::Holm => "Holm",
        Adjust::Bh => "Benjamini-Hochberg",
        Adjust::None => "no",
    };
    writeln!(
        out,
        "Verdicts: {} tests, {adjust} adjustment at {}%, changes under {}% not called; \
         latency is service time (p-values shown adjusted)",
        d.tests,
        d.settings.alpha * 100.0,
        d.settings.min_change * 100.0
    )?;
    writeln!(
        out,
        "Design effect: how much the requests of one moment resemble each other (1: not at all); \
         each latency test counts the requests as that many times fewer (count dispersion: the \
         same for the rate test)"
    )?;
    let shown: Vec<&GroupDiff> = d
        .groups
        .iter()
        .filter(|g| g.rank as usize <= limit || g.status != Status::Unchanged)
        .collect();
    for g in &shown {
        writeln!(out)?;
        group(out, g)?;
    }
    if shown.len() < d.groups.len() {
        writeln!(
            out,
            "\n{} unchanged groups not shown (--limit 0 shows all)",
            d.groups.len() - shown.len()
        )?;
    }
    Ok(())
}

/// The JSON document (pretty-printed, ending with a newline).
pub fn json(d: &Diff, out: &mut impl Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, d)?;
    out.write_all(b"\n")
}
