//! One side of a diff: per-group counts and exact latency distributions over a known span,
//! built from an aggregator (captures, or a time range of one) or loaded from a JSON digest
//! written with `--mergeable`. Sides built either way from the same traffic are equal.

use std::collections::BTreeMap;

use aggregate::{Aggregator, Latency, Stats};

use crate::blocks::Blocks;
use report::json::{Report, StatsJson};

/// What identifies a group across sides: the names every output shows.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub protocol: String,
    pub command: String,
    pub id: String,
}

/// One group (or all events) on one side.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupData {
    pub fingerprint: String,
    pub count: u64,
    pub errors: u64,
    /// Service time (what the diff tests and ranks by).
    pub service: Latency,
    /// Response time.
    pub response: Latency,
}

impl GroupData {
    fn of(fingerprint: &str, s: &Stats) -> GroupData {
        GroupData {
            fingerprint: fingerprint.to_string(),
            count: s.count,
            errors: s.errors,
            service: s.service.clone(),
            response: s.latency.clone(),
        }
    }

    fn merge(&mut self, o: &GroupData) {
        self.count += o.count;
        self.errors += o.errors;
        self.service.merge(&o.service);
        self.response.merge(&o.response);
    }
}

/// One side: its groups, its totals and the span its rates are over.
#[derive(Clone, Debug, PartialEq)]
pub struct Side {
    /// What the side was made of (file names, a time range), for the report.
    pub label: String,
    /// Nanoseconds the side covers (several digests: the sum of their spans).
    pub span_ns: Option<u64>,
    /// False when any source reported losses (its counts undercount).
    pub complete: bool,
    pub groups: BTreeMap<Key, GroupData>,
    pub totals: GroupData,
    /// The side's requests in time blocks (empty when unknown: no design effect).
    pub blocks: Blocks,
}

/// Why a JSON digest cannot be a side.
#[derive(Debug)]
pub enum LoadError {
    Json(serde_json::Error),
    /// Written without `--mergeable`: the distributions cannot be rebuilt.
    NotMergeable,
    /// Written with a `--limit`: groups are missing, so "new" and "gone" would be wrong.
    Omitted(u64),
    State(aggregate::StateError),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = "write it with: dbtap digest --format json --mergeable --limit 0";
        match self {
            LoadError::Json(e) => write!(f, "not a dbtap JSON digest: {e}"),
            LoadError::NotMergeable => {
                write!(f, "the digest has no mergeable distributions; {how}")
            }
            LoadError::Omitted(n) => write!(f, "the digest leaves out {n} groups; {how}"),
            LoadError::State(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for LoadError {}

fn stats_of(fingerprint: &str, s: &StatsJson, count: u64) -> Result<GroupData, LoadError> {
    let m = s.mergeable.as_ref().ok_or(LoadError::NotMergeable)?;
    Ok(GroupData {
        fingerprint: fingerprint.to_string(),
        count,
        errors: s.errors,
        service: m.service.to_latency().map_err(LoadError::State)?,
        response: m.response.to_latency().map_err(LoadError::State)?,
    })
}

impl Side {
    /// The side of an aggregate over `span_ns` (`report::span_ns` of the capture).
    pub fn from_aggregator(
        label: &str,
        agg: &Aggregator,
        span_ns: Option<u64>,
        complete: bool,
        blocks: Blocks,
    ) -> Side {
        let groups = agg
            .groups()
            .map(|g| {
                let key = Key {
                    protocol: g.key.protocol.name().to_string(),
                    command: g.key.command.to_string(),
                    id: g.id.clone(),
                };
                (key, GroupData::of(&g.fingerprint, &g.stats))
            })
            .collect();
        Side {
            label: label.to_string(),
            span_ns,
            complete,
            groups,
            totals: GroupData::of("", &agg.totals().stats),
            blocks,
        }
    }

    /// The side of a JSON digest written with `--mergeable --limit 0`.
    pub fn from_json(label: &str, text: &str) -> Result<Side, LoadError> {
        let r: Report = serde_json::from_str(text).map_err(LoadError::Json)?;
        if r.groups_omitted > 0 {
            return Err(LoadError::Omitted(r.groups_omitted));
        }
        let mut groups = BTreeMap::new();
        for q in &r.queries {
            let key = Key {
                protocol: q.protocol.clone(),
                command: q.command.clone(),
                id: q.id.clone(),
            };
            groups.insert(key, stats_of(&q.fingerprint, &q.stats, q.count)?);
        }
        let span_ns = r
            .capture
            .health
            .span_ns()
            .or_else(|| r.totals.time_span_s.map(|s| (s * 1e9).round() as u64));
        Ok(Side {
            label: label.to_string(),
            span_ns,
            complete: r.capture.complete,
            groups,
            totals: stats_of("", &r.totals.stats, r.totals.queries)?,
            blocks: r
                .totals
                .stats
                .mergeable
                .as_ref()
                .and_then(|m| m.blocks.as_ref())
                .map(Blocks::from)
                .unwrap_or_default(),
        })
    }

    /// Adds another side's traffic to this one (several digests on one side): counts and
    /// distributions merge exactly, spans add.
    pub fn merge(&mut self, o: &Side) {
        self.label = format!("{} + {}", self.label, o.label);
        self.span_ns = match (self.span_ns, o.span_ns) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        self.complete &= o.complete;
        self.blocks.merge(&o.blocks);
        self.totals.merge(&o.totals);
        for (k, g) in &o.groups {
            match self.groups.get_mut(k) {
                Some(mine) => mine.merge(g),
                None => {
                    self.groups.insert(k.clone(), g.clone());
                }
            }
        }
    }
}
