//! The one-line summary at the top of a diff ("2 groups regressed, 1 new; load +38% mostly
//! from ...").

use crate::compare::{GroupDiff, SideSummary, Status, Summary};

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Counts the statuses and names the group that moved the load most.
pub fn summarize(groups: &[GroupDiff], before: &SideSummary, after: &SideSummary) -> Summary {
    let count = |s: Status| groups.iter().filter(|g| g.status == s).count() as u64;
    let (regressed, improved, new, gone, unchanged) = (
        count(Status::Regressed),
        count(Status::Improved),
        count(Status::New),
        count(Status::Gone),
        count(Status::Unchanged),
    );
    let load_change_pct = match (before.load, after.load) {
        (Some(b), Some(a)) if b > 0.0 => Some((a - b) / b * 100.0),
        _ => None,
    };
    let total = after
        .load
        .zip(before.load)
        .map(|(a, b)| a - b)
        .unwrap_or(0.0);
    // Groups are ranked by |load change|: the first moving the same way as the total.
    let mostly = groups.iter().find(|g| {
        g.load_change
            .is_some_and(|d| d != 0.0 && (d > 0.0) == (total > 0.0))
    });
    let changed = regressed + improved + new + gone > 0;
    let mut parts = Vec::new();
    parts.push(if !changed {
        "no significant change".to_string()
    } else if regressed == 0 {
        "no group regressed".to_string()
    } else {
        format!("{} regressed", plural(regressed, "group", "groups"))
    });
    for (n, what) in [(improved, "improved"), (new, "new"), (gone, "gone")] {
        if n > 0 {
            parts.push(format!("{n} {what}"));
        }
    }
    let mut line = parts.join(", ");
    if let Some(p) = load_change_pct {
        line.push_str(&format!("; load {p:+.0}%"));
        // Naming a group when nothing changed significantly would send a reader after noise.
        if let (Some(g), true) = (mostly, changed && p.abs() >= 0.5) {
            let text = report::fmt::shorten(&report::fmt::sanitize(&g.fingerprint, false), 50);
            line.push_str(&format!(" mostly from {} ({text})", g.id));
        }
    }
    Summary {
        line,
        regressed,
        improved,
        new,
        gone,
        unchanged,
        load_change_pct,
        mostly_from: mostly.map(|g| g.id.clone()),
    }
}
