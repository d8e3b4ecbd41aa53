//! Per-fingerprint statistics of query events: exact counters, mergeable latency histograms and a
//! bounded number of groups.
//!
//! The hot path ([`Aggregator::add`] for a group already seen) does not allocate: it hashes a small
//! [`GroupKey`], bumps counters and records the latency. The fingerprint text and display id are
//! asked for (through a closure) only when a group is created. Aggregators built over parts of a
//! capture (per thread, per time window) [`merge`](Aggregator::merge) exactly.

#![forbid(unsafe_code)]

pub mod dims;
pub mod filter;
pub mod fine;
pub mod latency;
pub mod stats;
pub mod txn;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

pub use dims::{Dim, DimSet, DimShares, DimValues, Host, Scope};
pub use filter::Filter;
pub use latency::{DECADE_LABELS, Latency, LatencyState, StateError};
pub use stats::{
    DIM_CAP, DIM_SHOW, ERROR_CAP, ErrorCounts, ErrorStat, Example, Stats, Summary, TopCounter,
};

/// What events are grouped by.
///
/// Equality compares the command by address first: it is a `&'static str` from the protocol's
/// command table, so equal commands almost always share it and a lookup costs no `memcmp`
/// (the text is compared when the addresses differ). Order is the derived one; the hash leaves
/// the command out.
#[derive(Clone, Copy, Debug, Eq, PartialOrd, Ord)]
pub struct GroupKey {
    pub protocol: proto::Protocol,
    /// The event's command kind ("query", "execute", ...).
    pub command: &'static str,
    /// Hash of the normalized statement (from the fingerprint crate); when grouping by more
    /// dimensions than the fingerprint, that hash combined with the dimension values
    /// ([`DimSet::group_hash`]).
    pub fingerprint_hash: u64,
}

impl PartialEq for GroupKey {
    #[inline]
    fn eq(&self, o: &Self) -> bool {
        self.fingerprint_hash == o.fingerprint_hash
            && self.protocol == o.protocol
            && same_str(self.command, o.command)
    }
}

impl std::hash::Hash for GroupKey {
    /// The protocol and the fingerprint hash: the command's text is left out (hashing it cost
    /// more than the rest of a lookup). Keys differing only in their command hash alike and
    /// are told apart by `eq`; equal keys hash alike, as `Hash` requires.
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.protocol.hash(h);
        self.fingerprint_hash.hash(h);
    }
}

/// `a == b`, answered without comparing bytes when both are the same slice (the common case
/// for `&'static str` command names).
#[inline]
pub fn same_str(a: &str, b: &str) -> bool {
    (a.as_ptr() == b.as_ptr() && a.len() == b.len()) || a == b
}

/// Aggregation limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AggConfig {
    /// Most groups tracked. Events of further new groups go to one overflow group named "other"
    /// (see [`Totals::overflow_events`]).
    pub max_groups: usize,
    /// Keep the slowest event of each group (its text, client, database...).
    pub keep_examples: bool,
}

impl Default for AggConfig {
    fn default() -> Self {
        AggConfig {
            max_groups: 10_000,
            keep_examples: true,
        }
    }
}

/// Name and id of the overflow group.
pub const OVERFLOW_NAME: &str = "other";

/// The events of one fingerprint (or the overflow group).
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    /// For the overflow group: the protocol of its first event, command "other", hash 0.
    pub key: GroupKey,
    /// Normalized statement text.
    pub fingerprint: String,
    /// Display Query ID.
    pub id: String,
    /// True for the overflow group that collects events beyond [`AggConfig::max_groups`].
    pub overflow: bool,
    pub stats: Stats,
    /// The values of the dimensions the group is keyed by, when grouping by more than the
    /// fingerprint (`--group-by`); `None` otherwise.
    pub dims: Option<Box<DimValues>>,
}

/// Statistics over all events.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub stats: Stats,
    /// Groups tracked (the overflow group not included).
    pub unique_groups: u64,
    /// Events counted in the overflow group.
    pub overflow_events: u64,
    /// How the load splits over servers, databases, users, client hosts and protocols.
    pub dims: DimShares,
    /// Events a `--where` filter left out (counted nowhere else).
    pub filtered_out: u64,
}

/// Per-fingerprint statistics over a stream of events.
#[derive(Clone, Debug)]
pub struct Aggregator {
    cfg: AggConfig,
    index: HashMap<GroupKey, usize, foldhash::fast::RandomState>,
    groups: Vec<Group>,
    /// The slot in `groups` of the last event's group: events come in runs of one group (a
    /// pipeline of one command, a prepared statement in a loop), and comparing the key with
    /// that group's skips hashing the key and probing `index`. Only a hint: a stale slot
    /// (after [`Aggregator::order_groups`]) fails the comparison.
    last: usize,
    overflow: Option<Group>,
    /// The totals as recorded: of their `stats`, only what
    /// [`Stats::record_bounded`] counts (bounded counters, errors by code, the example),
    /// whose merge depends on the order events came in. The rest sums exactly from the groups.
    totals: Totals,
    /// `totals` with the groups' sums added ([`Aggregator::totals`]): built when first read,
    /// dropped by every change. Recording each event into the totals' distributions and sums
    /// as well as its group's cost a second [`Stats::record`] per event.
    view: OnceLock<Totals>,
    scope: Option<Arc<Scope>>,
    /// Transaction tracking, when asked for ([`Aggregator::track_transactions`]).
    txns: Option<Box<txn::Transactions>>,
}

impl Aggregator {
    pub fn new(cfg: AggConfig) -> Self {
        Aggregator {
            cfg,
            index: HashMap::default(),
            groups: Vec::new(),
            last: usize::MAX,
            overflow: None,
            totals: Totals::default(),
            view: OnceLock::new(),
            scope: None,
            txns: None,
        }
    }

    /// Tracks transactions and idle-in-transaction time from here on (see [`txn`]); the
    /// caller reports connection closes through [`Aggregator::close_conn`]. Off by default
    /// (a per-window aggregator could not follow a transaction across windows). Neither
    /// [`merge`](Aggregator::merge) nor [`scale`](Aggregator::scale) touches it.
    pub fn track_transactions(&mut self, cfg: txn::TxnConfig) {
        self.txns = Some(Box::new(txn::Transactions::new(cfg)));
    }

    /// The transaction tracker, when on.
    pub fn transactions(&self) -> Option<&txn::Transactions> {
        self.txns.as_deref()
    }

    /// Connection `conn` closed at `ts_ns` (for transaction tracking).
    pub fn close_conn(&mut self, conn: u64, ts_ns: u64) {
        if let Some(t) = self.txns.as_mut() {
            t.close(conn, ts_ns);
        }
    }

    pub fn config(&self) -> &AggConfig {
        &self.cfg
    }

    /// Adds one event. `describe` returns `(fingerprint, id)`; it is called only when the group
    /// is new (and not for events that go to the overflow group).
    pub fn add(
        &mut self,
        ev: &proto::QueryEvent,
        key: GroupKey,
        describe: impl FnOnce() -> (String, String),
    ) {
        self.add_with_dims(ev, key, || {
            let (fingerprint, id) = describe();
            (fingerprint, id, None)
        });
    }

    /// [`add`](Aggregator::add) for groups keyed by dimensions: `describe` also returns the
    /// group's dimension values.
    pub fn add_with_dims(
        &mut self,
        ev: &proto::QueryEvent,
        key: GroupKey,
        describe: impl FnOnce() -> (String, String, Option<Box<DimValues>>),
    ) {
        let keep = self.cfg.keep_examples;
        self.view.take();
        // Taken once for the totals, the load shares and the group.
        let client = Host::of(&ev.client);
        self.totals.stats.record_bounded(ev, &client, keep);
        self.totals.dims.record_host(ev, client);
        if let Some(t) = self.txns.as_mut() {
            t.record(ev, key);
        }
        let slot = match self.groups.get(self.last) {
            Some(g) if g.key == key => Some(self.last),
            _ => self.index.get(&key).copied(),
        };
        if let Some((i, g)) = slot.and_then(|i| Some((i, self.groups.get_mut(i)?))) {
            g.stats.record_host(ev, &client, keep);
            self.last = i;
            return;
        }
        if self.groups.len() < self.cfg.max_groups {
            let (fingerprint, id, dims) = describe();
            let mut g = Group {
                key,
                fingerprint,
                id,
                overflow: false,
                stats: Stats::default(),
                dims,
            };
            g.stats.record_host(ev, &client, keep);
            self.last = self.groups.len();
            self.index.insert(key, self.groups.len());
            self.groups.push(g);
            self.totals.unique_groups = self.groups.len() as u64;
        } else {
            let g = self.overflow_group(key.protocol);
            g.stats.record_host(ev, &client, keep);
            self.totals.overflow_events += 1;
        }
    }

    fn overflow_group(&mut self, protocol: proto::Protocol) -> &mut Group {
        self.overflow.get_or_insert_with(|| Group {
            key: GroupKey {
                protocol,
                command: OVERFLOW_NAME,
                fingerprint_hash: 0,
            },
            fingerprint: OVERFLOW_NAME.to_string(),
            id: OVERFLOW_NAME.to_string(),
            overflow: true,
            stats: Stats::default(),
            dims: None,
        })
    }

    /// Adds everything `other` counted. Exact: merging aggregators built over two event sets gives
    /// the same statistics as adding all events to one (while [`AggConfig::max_groups`] is not
    /// reached; past it, which groups overflow depends on the order groups were first seen).
    /// `self`'s configuration applies.
    pub fn merge(&mut self, other: &Aggregator) {
        self.view.take();
        self.totals.stats.merge_bounded(&other.totals.stats);
        self.totals.dims.merge(&other.totals.dims);
        self.totals.filtered_out += other.totals.filtered_out;
        if self.scope.is_none() {
            self.scope.clone_from(&other.scope);
        }
        for og in &other.groups {
            if let Some(g) = self
                .index
                .get(&og.key)
                .and_then(|&i| self.groups.get_mut(i))
            {
                g.stats.merge(&og.stats);
            } else if self.groups.len() < self.cfg.max_groups {
                self.index.insert(og.key, self.groups.len());
                self.groups.push(og.clone());
            } else {
                self.overflow_group(og.key.protocol).stats.merge(&og.stats);
                self.totals.overflow_events += og.stats.count;
            }
        }
        if let Some(oo) = &other.overflow {
            self.overflow_group(oo.key.protocol).stats.merge(&oo.stats);
            self.totals.overflow_events += oo.stats.count;
        }
        self.totals.unique_groups = self.groups.len() as u64;
    }

    /// After [`Aggregator::merge`]: the groups of `other` that `pick` names (those `other`'s
    /// part of the stream saw first) take their text, id and dimension values from `other`,
    /// which one reader of the whole stream would have taken from their first event (a group
    /// keyed by dimensions is named after its first event's values).
    pub fn adopt_names(&mut self, other: &Aggregator, pick: impl Fn(&GroupKey) -> bool) {
        for og in other.groups.iter().filter(|og| pick(&og.key)) {
            if let Some(g) = self
                .index
                .get(&og.key)
                .and_then(|&i| self.groups.get_mut(i))
            {
                g.fingerprint.clone_from(&og.fingerprint);
                g.id.clone_from(&og.id);
                g.dims.clone_from(&og.dims);
            }
        }
    }

    /// Puts the groups in the order of `rank` (stable): after merging the parts of one event
    /// stream (the parallel digest), the order one reader would have seen them first in.
    pub fn order_groups<K: Ord>(&mut self, rank: impl Fn(&GroupKey) -> K) {
        self.groups.sort_by_cached_key(|g| rank(&g.key));
        self.index.clear();
        for (i, g) in self.groups.iter().enumerate() {
            self.index.insert(g.key, i);
        }
    }

    /// The transaction tracker, when on, to merge parts into ([`txn::Transactions::merge`]).
    pub fn transactions_mut(&mut self) -> Option<&mut txn::Transactions> {
        self.txns.as_deref_mut()
    }

    /// All groups in the order they were first seen, the overflow group (if any) last.
    pub fn groups(&self) -> impl Iterator<Item = &Group> {
        self.groups.iter().chain(self.overflow.iter())
    }

    /// The group of `key`, if tracked.
    pub fn group(&self, key: &GroupKey) -> Option<&Group> {
        self.index.get(key).and_then(|&i| self.groups.get(i))
    }

    /// The overflow group, if any event went there.
    pub fn overflow(&self) -> Option<&Group> {
        self.overflow.as_ref()
    }

    /// Statistics over all events: the recorded totals and the sum of every group's counts,
    /// distributions and sums (the overflow group's included), which [`Stats::merge`] adds
    /// exactly. Built on the first call after a change (a pass over the groups), then kept.
    pub fn totals(&self) -> &Totals {
        self.view.get_or_init(|| {
            let mut t = self.totals.clone();
            for g in self.groups() {
                t.stats.merge_sums(&g.stats);
            }
            t
        })
    }

    /// Groups tracked (the overflow group not included): [`Totals::unique_groups`] without
    /// building the totals.
    pub fn unique_groups(&self) -> u64 {
        self.totals.unique_groups
    }

    /// Multiplies every count by `n` (see [`Stats::scale`]): the estimate for all traffic when
    /// only one connection in `n` was captured.
    pub fn scale(&mut self, n: u64) {
        if n <= 1 {
            return;
        }
        self.view.take();
        self.totals.stats.scale(n);
        self.totals.dims.scale(n);
        self.totals.filtered_out = self.totals.filtered_out.saturating_mul(n);
        self.totals.overflow_events = self.totals.overflow_events.saturating_mul(n);
        for g in self.groups.iter_mut().chain(self.overflow.iter_mut()) {
            g.stats.scale(n);
        }
    }

    /// Counts an event a `--where` filter left out.
    pub fn filtered_out(&mut self) {
        self.view.take();
        self.totals.filtered_out += 1;
    }

    /// The grouping and filter that shaped this aggregate, when not the default.
    pub fn scope(&self) -> Option<&Scope> {
        self.scope.as_deref()
    }

    /// Records the grouping and filter (kept through [`merge`](Aggregator::merge) into an
    /// aggregator without one).
    pub fn set_scope(&mut self, scope: Option<Arc<Scope>>) {
        self.scope = scope;
    }
}
