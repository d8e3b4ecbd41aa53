//! The overall errors-by-code section: every error code seen, with its count, SQLSTATE, a
//! message and the groups it came from, so that the header's error count is always explained
//! (even when the errors sit in groups beyond the profile's top N). Text and JSON.

use std::collections::BTreeMap;
use std::io::{self, Write};

use aggregate::Group;
use serde::{Deserialize, Serialize};

use crate::fmt::{sanitize, thousands};

/// Groups named per code in the text report.
const GROUPS_SHOWN: usize = 5;

/// One error code over all groups.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CodeJson {
    pub code: u32,
    pub state: Option<String>,
    pub count: u64,
    /// The message of the earliest event with this code.
    pub message: String,
    /// The groups with this code, most errors first.
    pub groups: Vec<GroupCount>,
}

/// A group's count of one error code.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupCount {
    pub id: String,
    pub count: u64,
}

/// Every code of every group (the per-group code bound applies), most frequent first; ties
/// by code. The errors no group could name a code for are the totals' `errors_uncoded`.
pub fn by_code(ranked: &[&Group]) -> Vec<CodeJson> {
    // Per (code, state): the earliest time seen, and the entry (its message from that time).
    let mut codes: BTreeMap<(u32, Option<String>), (u64, CodeJson)> = BTreeMap::new();
    for g in ranked {
        for e in g.stats.errors_by_code.sorted() {
            let state = e.state.as_deref().map(str::to_string);
            let (first, c) = codes.entry((e.code, state.clone())).or_insert_with(|| {
                let c = CodeJson {
                    code: e.code,
                    state,
                    count: 0,
                    message: e.message.to_string(),
                    groups: Vec::new(),
                };
                (e.first_ns, c)
            });
            c.count += e.count;
            if e.first_ns < *first {
                *first = e.first_ns;
                c.message = e.message.to_string();
            }
            c.groups.push(GroupCount {
                id: g.id.clone(),
                count: e.count,
            });
        }
    }
    let mut out: Vec<CodeJson> = codes.into_values().map(|(_, c)| c).collect();
    for c in &mut out {
        c.groups
            .sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.id.cmp(&b.id)));
    }
    out.sort_by(|a, b| b.count.cmp(&a.count).then(a.code.cmp(&b.code)));
    out
}

/// `# Errors by code` in the overall summary, when there are errors.
pub fn text(out: &mut impl Write, ranked: &[&Group], errors: u64) -> io::Result<()> {
    if errors == 0 {
        return Ok(());
    }
    let codes = by_code(ranked);
    writeln!(out, "# Errors by code")?;
    let mut coded = 0;
    for c in &codes {
        coded += c.count;
        let code = match &c.state {
            Some(st) => format!("{} ({})", c.code, sanitize(st, false)),
            None => c.code.to_string(),
        };
        let mut groups: Vec<String> = c
            .groups
            .iter()
            .take(GROUPS_SHOWN)
            .map(|g| format!("{} x{}", sanitize(&g.id, false), thousands(g.count)))
            .collect();
        if c.groups.len() > GROUPS_SHOWN {
            groups.push(format!("{} more", c.groups.len() - GROUPS_SHOWN));
        }
        writeln!(
            out,
            "#   {code} x{}: {} [in {}]",
            thousands(c.count),
            sanitize(&c.message, false),
            groups.join(", ")
        )?;
    }
    if errors > coded {
        writeln!(
            out,
            "#   no code known (or beyond the per-group code bound) x{}",
            thousands(errors - coded)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use aggregate::{AggConfig, Aggregator, GroupKey};
    use proto::{DbError, Outcome, Protocol, QueryEvent};

    fn ev(code: u32, msg: &str, ts: u64) -> QueryEvent {
        QueryEvent {
            client: "127.0.0.1:5000".parse().unwrap(),
            server: "127.0.0.1:3306".parse().unwrap(),
            outcome: if code == 0 {
                Outcome::Ok
            } else {
                Outcome::Error
            },
            error: (code != 0).then(|| DbError {
                code,
                state: Some("42S02".into()),
                message: msg.into(),
            }),
            ..proto::testing::event(Protocol::Mysql, "query", ts, Some(ts + 10))
        }
    }

    #[test]
    fn codes_over_all_groups_name_their_groups() {
        let mut agg = Aggregator::new(AggConfig::default());
        // 25 groups: the one with the error is last by time (beyond a top 20).
        for h in 0..25u64 {
            let key = GroupKey {
                protocol: Protocol::Mysql,
                command: "query",
                fingerprint_hash: h,
            };
            let n = if h == 24 { 1 } else { 30 - h };
            for i in 0..n {
                let code = if h >= 23 { 1146 } else { 0 };
                agg.add(&ev(code, &format!("m{h}"), 100 * h + i), key, || {
                    (format!("fp{h}"), format!("ID{h:02}"))
                });
            }
        }
        let ranked = crate::ranked(&agg, crate::OrderBy::Total);
        let codes = by_code(&ranked);
        assert_eq!(codes.len(), 1);
        let c = &codes[0];
        assert_eq!((c.code, c.count), (1146, 8));
        assert_eq!(c.message, "m23");
        let ids: Vec<(&str, u64)> = c.groups.iter().map(|g| (g.id.as_str(), g.count)).collect();
        assert_eq!(ids, [("ID23", 7), ("ID24", 1)]);
        let mut out = Vec::new();
        text(&mut out, &ranked, agg.totals().stats.errors).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert_eq!(
            s,
            "# Errors by code\n#   1146 (42S02) x8: m23 [in ID23 x7, ID24 x1]\n"
        );
        let mut none = Vec::new();
        text(&mut none, &ranked, 0).unwrap();
        assert!(none.is_empty());
    }
}
