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
    let mut codes: BTreeMap<(u32, Option<String>), (u64, u64, String, Vec<GroupCount>)> =
        BTreeMap::new();
    for g in ranked {
        for e in g.stats.errors_by_code.sorted() {
            let k = (e.code, e.state.as_deref().map(str::to_string));
            let entry = codes
                .entry(k)
                .or_insert_with(|| (0, e.first_ns, e.message.to_string(), Vec::new()));
            entry.0 += e.count;
            if e.first_ns < entry.1 {
                entry.1 = e.first_ns;
                entry.2 = e.message.to_string();
            }
            entry.3.push(GroupCount {
                id: g.id.clone(),
                count: e.count,
            });
        }
    }
    let mut out: Vec<CodeJson> = codes
        .into_iter()
        .map(|((code, state), (count, _, message, mut groups))| {
            groups.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.id.cmp(&b.id)));
            CodeJson {
                code,
                state,
                count,
                message,
                groups,
            }
        })
        .collect();
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
