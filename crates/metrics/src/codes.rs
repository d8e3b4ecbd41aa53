//! The `code` label of `dbtap_query_errors_total`: which error codes get a series of their own.
//!
//! A code is the protocol's number where it has one (MySQL `1064`, MongoDB `11000`), else its
//! state (PostgreSQL's SQLSTATE `42P01`, Redis's error prefix `WRONGTYPE`). At most
//! [`ERROR_CODES_TOP`] codes are named, chosen like the exported groups: free places go to the
//! codes with the most errors so far, and the named set only grows, so a code counted in
//! `code="other"` once every place is taken stays there and no series ever goes down. Errors
//! without a code are `code="none"`; every group series has that one (0 when the group has no
//! such error), so a group without errors still has its errors series.

use std::collections::{BTreeMap, HashMap, HashSet};

use aggregate::{Aggregator, ErrorStat, Stats};

/// Error codes named in labels; the rest are summed as `code="other"`.
pub const ERROR_CODES_TOP: usize = 20;

/// The label of errors that carried no code.
pub const NONE: &str = "none";

/// Longest code kept as a label (a longer one, or one with characters other than ASCII letters,
/// digits, `_`, `-` and `.`, is counted as "other").
const CODE_MAX_LEN: usize = 32;

/// The label of an error code, or `None` when it has none fit for a label.
pub fn code_label(e: &ErrorStat) -> Option<String> {
    if e.code != 0 {
        return Some(e.code.to_string());
    }
    let s = e.state.as_deref()?;
    let fit = !s.is_empty()
        && s.len() <= CODE_MAX_LEN
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && s != NONE
        && s != crate::prom::OTHER;
    fit.then(|| s.to_string())
}

/// The codes named so far.
#[derive(Debug)]
pub struct CodeSet {
    top_n: usize,
    named: HashSet<String>,
}

impl CodeSet {
    pub fn new(top_n: usize) -> CodeSet {
        CodeSet {
            top_n,
            named: HashSet::new(),
        }
    }

    /// Codes named so far.
    pub fn named(&self) -> usize {
        self.named.len()
    }

    /// Fills free places with the not-yet-named codes with the most errors over all groups
    /// (ties: the code's text).
    pub fn promote(&mut self, total: &Aggregator) {
        if self.named.len() >= self.top_n {
            return;
        }
        let mut counts: HashMap<String, u64> = HashMap::new();
        for g in total.groups() {
            for e in g.stats.errors_by_code.sorted() {
                if let Some(l) = code_label(e).filter(|l| !self.named.contains(l)) {
                    *counts.entry(l).or_default() += e.count;
                }
            }
        }
        let mut candidates: Vec<(String, u64)> = counts.into_iter().collect();
        candidates.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let free = self.top_n - self.named.len();
        self.named
            .extend(candidates.into_iter().take(free).map(|(l, _)| l));
    }

    /// A group's errors by label: its named codes, `other`, and always `none`.
    pub fn split(&self, s: &Stats) -> BTreeMap<String, u64> {
        let mut m: BTreeMap<String, u64> = BTreeMap::new();
        let mut coded = 0u64;
        for e in s.errors_by_code.sorted() {
            coded += e.count;
            let l = code_label(e)
                .filter(|l| self.named.contains(l))
                .unwrap_or_else(|| crate::prom::OTHER.to_string());
            *m.entry(l).or_default() += e.count;
        }
        let beyond = s.errors_by_code.other();
        if beyond > 0 {
            *m.entry(crate::prom::OTHER.to_string()).or_default() += beyond;
        }
        m.insert(
            NONE.to_string(),
            s.errors.saturating_sub(coded.saturating_add(beyond)),
        );
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(code: u32, state: Option<&str>) -> ErrorStat {
        ErrorStat {
            code,
            state: state.map(Into::into),
            count: 1,
            message: "m".into(),
            first_ns: 0,
        }
    }

    #[test]
    fn labels() {
        assert_eq!(
            code_label(&stat(1064, Some("42000"))).as_deref(),
            Some("1064")
        );
        assert_eq!(
            code_label(&stat(0, Some("42P01"))).as_deref(),
            Some("42P01")
        );
        assert_eq!(
            code_label(&stat(0, Some("WRONGTYPE"))).as_deref(),
            Some("WRONGTYPE")
        );
        assert_eq!(code_label(&stat(0, None)), None);
        assert_eq!(code_label(&stat(0, Some(""))), None);
        assert_eq!(code_label(&stat(0, Some("a b"))), None);
        assert_eq!(code_label(&stat(0, Some("none"))), None);
        assert_eq!(code_label(&stat(0, Some(&"X".repeat(33)))), None);
    }
}
