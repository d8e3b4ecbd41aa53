//! Dimensions in reports: the `--group-by`/`--where` header lines, the per-dimension shares
//! panel of the overall summary (like PMM's filter panel: each dimension's top values with their
//! share of the load and of the calls), a group's dimension values, and their JSON forms.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::{self, Write};

use aggregate::dims::DimShare;
use aggregate::{Aggregator, Dim, Group};
use serde::{Deserialize, Serialize};

use crate::fmt::{sanitize, thousands};

/// Dimensions of the shares panel, in display order.
pub const PANEL_DIMS: [Dim; 6] = [
    Dim::Server,
    Dim::Db,
    Dim::User,
    Dim::Client,
    Dim::Process,
    Dim::Protocol,
];
/// Values listed per dimension; the rest are summed in one line.
pub const PANEL_SHOW: usize = 5;

/// `# Group by:` and `# Where:` lines when the grouping or filter is not the default.
pub fn scope_lines(out: &mut impl Write, agg: &Aggregator) -> io::Result<()> {
    let Some(scope) = agg.scope() else {
        return Ok(());
    };
    if scope.group_by != aggregate::DimSet::FINGERPRINT {
        writeln!(out, "# Group by: {}", scope.group_by.names())?;
    }
    if !scope.filter.is_empty() {
        writeln!(
            out,
            "# Where: {} ({} events left out)",
            sanitize(&scope.filter, false),
            thousands(agg.totals().filtered_out)
        )?;
    }
    Ok(())
}

/// The dimensions with more than one value (or with events whose value is not known).
pub fn panel_shares(agg: &Aggregator) -> Vec<DimShare> {
    let d = &agg.totals().dims;
    PANEL_DIMS
        .iter()
        .filter_map(|&dim| d.of(dim))
        .filter(|s| s.values.len() > 1)
        .collect()
}

fn pct(part: u128, whole: u128) -> f64 {
    if whole > 0 {
        part as f64 * 100.0 / whole as f64
    } else {
        0.0
    }
}

/// The shares panel: for each dimension with more than one value, its top values with their
/// share of the service time and of the calls. Nothing when every dimension has one value.
pub fn panel(out: &mut impl Write, agg: &Aggregator) -> io::Result<()> {
    let shares = panel_shares(agg);
    if shares.is_empty() {
        return Ok(());
    }
    let t = agg.totals();
    let (time, calls) = (t.stats.service.sum_ns(), u128::from(t.stats.count));
    writeln!(out, "# Load by dimension (share of exec time, of calls)")?;
    for ds in &shares {
        let mut rows: Vec<(String, u128, u128)> = ds
            .values
            .iter()
            .take(PANEL_SHOW)
            .map(|(v, s)| (sanitize(v, false), s.service_ns, u128::from(s.count)))
            .collect();
        let rest = &ds.values[rows.len()..];
        if !rest.is_empty() || ds.other.count > 0 {
            let n = rest.len();
            let (rt, rc) = rest.iter().fold(
                (ds.other.service_ns, u128::from(ds.other.count)),
                |(a, b), (_, s)| (a + s.service_ns, b + u128::from(s.count)),
            );
            let what = if n > 0 {
                format!("({} other values)", thousands(n as u64))
            } else {
                "(values not tracked)".to_string()
            };
            rows.push((what, rt, rc));
        }
        for (v, st, sc) in rows {
            writeln!(
                out,
                "#   {:<9} {:>6.1}% {:>6.1}%  {v}",
                ds.dim.name(),
                pct(st, time),
                pct(sc, calls)
            )?;
        }
    }
    Ok(())
}

/// `# Group: server=… db=…` for a group keyed by dimensions.
pub fn group_line(out: &mut impl Write, g: &Group) -> io::Result<()> {
    if let Some(v) = &g.dims {
        writeln!(out, "# Group: {}", sanitize(&v.label(), false))?;
    }
    Ok(())
}

/// The profile's item text: the fingerprint, prefixed with the dimension values when the group
/// is keyed by them too.
pub fn item(g: &Group) -> Cow<'_, str> {
    match &g.dims {
        Some(v) if v.set.contains(Dim::Fingerprint) => {
            Cow::Owned(format!("[{}] {}", v.label(), g.fingerprint))
        }
        _ => Cow::Borrowed(&g.fingerprint),
    }
}

/// A group's dimension values in JSON: `{"server": "…", "db": "…"}`.
pub fn group_json(g: &Group) -> Option<BTreeMap<String, String>> {
    let v = g.dims.as_ref()?;
    Some(
        v.fields()
            .into_iter()
            .map(|(d, s)| (d.name().to_string(), s))
            .collect(),
    )
}

/// One dimension's shares in JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DimensionShares {
    /// "server", "db", "user", "client", "process" or "protocol".
    pub dimension: String,
    pub values: Vec<ValueShare>,
    /// Events whose combination of values was first seen past the tracking bound.
    pub untracked: u64,
}

/// One value's share of the load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ValueShare {
    /// The value; "(unknown)" for a database, user or process not known.
    pub value: String,
    pub count: u64,
    /// Sum of service times, microseconds.
    pub service_us: f64,
    /// Share of the total service time, percent.
    pub service_time_pct: f64,
    /// Share of the calls, percent.
    pub count_pct: f64,
}

/// The shares of every dimension with more than one value (`None` when there is none).
pub fn shares_json(agg: &Aggregator) -> Option<Vec<DimensionShares>> {
    let shares = panel_shares(agg);
    if shares.is_empty() {
        return None;
    }
    let t = &agg.totals();
    let (time, calls) = (t.stats.service.sum_ns(), u128::from(t.stats.count));
    let round3 = |v: f64| (v * 1e3).round() / 1e3;
    Some(
        shares
            .into_iter()
            .map(|ds| DimensionShares {
                dimension: ds.dim.name().to_string(),
                values: ds
                    .values
                    .iter()
                    .map(|(v, s)| ValueShare {
                        value: v.clone(),
                        count: s.count,
                        service_us: round3(s.service_ns as f64 / 1e3),
                        service_time_pct: round3(pct(s.service_ns, time)),
                        count_pct: round3(pct(u128::from(s.count), calls)),
                    })
                    .collect(),
                untracked: ds.other.count,
            })
            .collect(),
    )
}

/// The grouping and filter of the report in JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScopeJson {
    /// `--group-by`, e.g. "fingerprint,server".
    pub group_by: String,
    /// `--where` expressions joined by " AND "; null when none.
    #[serde(rename = "where")]
    pub filter: Option<String>,
    /// Events the filter left out.
    pub filtered_out: u64,
}

/// `None` for the default grouping without filter.
pub fn scope_json(agg: &Aggregator) -> Option<ScopeJson> {
    let s = agg.scope()?;
    Some(ScopeJson {
        group_by: s.group_by.names(),
        filter: (!s.filter.is_empty()).then(|| s.filter.clone()),
        filtered_out: agg.totals().filtered_out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use aggregate::{AggConfig, GroupKey};
    use proto::{Protocol, QueryEvent};
    use std::net::SocketAddr;

    fn event(client: u8, service_ns: u64) -> QueryEvent {
        QueryEvent {
            conn: u64::from(client),
            client: SocketAddr::from(([10, 0, 0, client], 5000)).into(),
            server: SocketAddr::from(([10, 0, 0, 1], 6379)).into(),
            bytes_in: 1,
            bytes_out: 1,
            ..proto::testing::event(Protocol::Redis, "get", 1_000, Some(1_000 + service_ns))
        }
    }

    fn aggregate(clients: u8) -> Aggregator {
        let mut agg = Aggregator::new(AggConfig::default());
        let key = GroupKey {
            protocol: Protocol::Redis,
            command: "get",
            fingerprint_hash: 1,
        };
        for c in 1..=clients {
            // client c: c events of c µs each
            for _ in 0..c {
                agg.add(&event(c, u64::from(c) * 1_000), key, || {
                    ("GET".into(), "ID".into())
                });
            }
        }
        agg
    }

    #[test]
    fn panel_lists_top_values_then_the_rest() {
        let mut out = Vec::new();
        panel(&mut out, &aggregate(7)).unwrap();
        let text = String::from_utf8(out).unwrap();
        // 1+4+...+49 = 140 µs in all; client 7: 49 µs (35.0%), 7 of 28 calls (25.0%)
        let want = "\
# Load by dimension (share of exec time, of calls)
#   client      35.0%   25.0%  10.0.0.7
#   client      25.7%   21.4%  10.0.0.6
#   client      17.9%   17.9%  10.0.0.5
#   client      11.4%   14.3%  10.0.0.4
#   client       6.4%   10.7%  10.0.0.3
#   client       3.6%   10.7%  (2 other values)
";
        assert_eq!(text, want);
        let j = shares_json(&aggregate(7)).unwrap();
        assert_eq!(j.len(), 1);
        assert_eq!(j[0].values.len(), 7);
        assert_eq!(j[0].values.iter().map(|v| v.count).sum::<u64>(), 28);
    }

    #[test]
    fn no_panel_for_one_value() {
        let mut out = Vec::new();
        panel(&mut out, &aggregate(1)).unwrap();
        assert!(out.is_empty());
        assert!(shares_json(&aggregate(1)).is_none());
    }
}
