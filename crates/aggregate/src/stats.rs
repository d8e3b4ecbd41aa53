//! The statistics kept for one group of events (and for all events): exact counters, summaries,
//! bounded per-dimension counts, error codes and the slowest example.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use proto::{Endpoint, Outcome, QueryEvent};

use crate::dims::Host;
use crate::latency::Latency;

/// Count, sum, min and max of a non-negative quantity. Exact and mergeable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub count: u64,
    pub sum: u128,
    min: u64,
    max: u64,
}

impl Default for Summary {
    fn default() -> Self {
        Summary {
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

impl Summary {
    pub fn record(&mut self, v: u64) {
        self.count += 1;
        self.sum += u128::from(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    pub fn merge(&mut self, o: &Summary) {
        if o.count == 0 {
            return;
        }
        self.count += o.count;
        self.sum += o.sum;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }

    /// Multiplies the count and the sum by `n` (min, max and mean are unchanged).
    pub fn scale(&mut self, n: u64) {
        self.count = self.count.saturating_mul(n);
        self.sum = self.sum.saturating_mul(u128::from(n));
    }

    pub fn min(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min)
    }

    pub fn max(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }
}

/// Distinct values counted exactly per dimension (database, user, client host) before later new
/// values go to `other`.
pub const DIM_CAP: usize = 64;
/// How many values per dimension reports show (the rest is summed as "other").
pub const DIM_SHOW: usize = 16;

/// Bounded exact counts per value. The first [`DIM_CAP`] distinct values are counted exactly;
/// events with a value first seen after that are counted in [`TopCounter::other`].
///
/// Consecutive events of a group mostly carry the same value (one client host, one user): the
/// value counted last and its slot are remembered, so a repeat costs a comparison instead of
/// hashing the value and probing the map.
#[derive(Clone, Debug)]
pub struct TopCounter<K: Hash + Eq> {
    /// Each value's slot in `counts`.
    map: HashMap<K, usize, foldhash::fast::RandomState>,
    counts: Vec<u64>,
    other: u64,
    /// The value counted last and its slot (`None`: it went to `other`).
    last: Option<(K, Option<usize>)>,
}

impl<K: Hash + Eq> Default for TopCounter<K> {
    fn default() -> Self {
        TopCounter {
            map: HashMap::default(),
            counts: Vec::new(),
            other: 0,
            last: None,
        }
    }
}

/// Equal when every value has the same count (whatever order they were first seen in).
impl<K: Hash + Eq> PartialEq for TopCounter<K> {
    fn eq(&self, o: &Self) -> bool {
        self.other == o.other
            && self.map.len() == o.map.len()
            && self
                .map
                .iter()
                .all(|(k, &i)| o.map.get(k).map(|&j| o.count_at(j)) == Some(self.count_at(i)))
    }
}

impl<K: Hash + Eq> Eq for TopCounter<K> {}

impl<K: Hash + Eq> TopCounter<K> {
    fn count_at(&self, i: usize) -> u64 {
        self.counts.get(i).copied().unwrap_or(0)
    }
}

impl<K: Hash + Eq + Clone + Ord> TopCounter<K> {
    /// Counts one occurrence (clones the key only the first time it is seen). The repeat of
    /// the last value is inlined into the caller; another value takes the out-of-line path.
    #[inline(always)]
    pub fn record(&mut self, k: &K) {
        if let Some((last, slot)) = &self.last
            && last == k
        {
            match slot.and_then(|i| self.counts.get_mut(i)) {
                Some(c) => *c += 1,
                None => self.other += 1,
            }
            return;
        }
        self.record_new(k);
    }

    /// [`record`](TopCounter::record) of a value other than the last one.
    #[inline(never)]
    fn record_new(&mut self, k: &K) {
        let slot = self.add(k, 1);
        self.last = Some((k.clone(), slot));
    }

    /// Adds `n` occurrences of `k`; returns its slot (`None`: counted in `other`).
    fn add(&mut self, k: &K, n: u64) -> Option<usize> {
        if let Some(&i) = self.map.get(k) {
            if let Some(c) = self.counts.get_mut(i) {
                *c += n;
            }
            Some(i)
        } else if self.map.len() < DIM_CAP {
            let i = self.counts.len();
            self.map.insert(k.clone(), i);
            self.counts.push(n);
            Some(i)
        } else {
            self.other += n;
            None
        }
    }

    pub fn merge(&mut self, o: &TopCounter<K>) {
        // Deterministic: insert the other side's values in (count desc, key) order.
        for (k, n) in o.sorted() {
            self.add(k, n);
        }
        self.other += o.other;
    }

    /// All counted values, by count descending then value ascending.
    pub fn sorted(&self) -> Vec<(&K, u64)> {
        let mut v: Vec<(&K, u64)> = self
            .map
            .iter()
            .map(|(k, &i)| (k, self.count_at(i)))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        v
    }

    /// The `n` most frequent values and the count of everything else (including
    /// [`TopCounter::other`]).
    pub fn top(&self, n: usize) -> (Vec<(&K, u64)>, u64) {
        let mut v = self.sorted();
        let rest: u64 = v.iter().skip(n).map(|x| x.1).sum::<u64>() + self.other;
        v.truncate(n);
        (v, rest)
    }

    /// Events whose value was first seen after [`DIM_CAP`] distinct values.
    pub fn other(&self) -> u64 {
        self.other
    }

    /// Multiplies every count by `n`.
    pub fn scale(&mut self, n: u64) {
        for c in &mut self.counts {
            *c = c.saturating_mul(n);
        }
        self.other = self.other.saturating_mul(n);
    }

    /// Distinct values counted exactly.
    pub fn distinct(&self) -> usize {
        self.map.len()
    }
}

/// Distinct error (code, state) pairs kept per group; later new pairs are counted in `other`.
pub const ERROR_CAP: usize = 32;

/// Errors of one (code, state) pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorStat {
    pub code: u32,
    pub state: Option<Box<str>>,
    pub count: u64,
    /// The first message seen for this code (in merge order).
    pub message: Box<str>,
    /// Start time of the event that carried `message`.
    pub first_ns: u64,
}

/// Errors by code, bounded at [`ERROR_CAP`] pairs.
#[derive(Clone, Debug, Default)]
pub struct ErrorCounts {
    stats: Vec<ErrorStat>,
    other: u64,
}

impl ErrorCounts {
    fn add(&mut self, code: u32, state: Option<&str>, n: u64, message: &str, first_ns: u64) {
        if let Some(s) = self
            .stats
            .iter_mut()
            .find(|s| s.code == code && s.state.as_deref() == state)
        {
            s.count += n;
            // Keep the message of the earliest event so that merging is order independent.
            if first_ns < s.first_ns {
                s.first_ns = first_ns;
                s.message = message.into();
            }
        } else if self.stats.len() < ERROR_CAP {
            self.stats.push(ErrorStat {
                code,
                state: state.map(Into::into),
                count: n,
                message: message.into(),
                first_ns,
            });
        } else {
            self.other += n;
        }
    }

    pub fn record(&mut self, e: &proto::DbError, ts_ns: u64) {
        self.add(e.code, e.state.as_deref(), 1, &e.message, ts_ns);
    }

    pub fn merge(&mut self, o: &ErrorCounts) {
        for s in o.sorted() {
            self.add(s.code, s.state.as_deref(), s.count, &s.message, s.first_ns);
        }
        self.other += o.other;
    }

    /// By count descending, then code, then state.
    pub fn sorted(&self) -> Vec<&ErrorStat> {
        let mut v: Vec<&ErrorStat> = self.stats.iter().collect();
        v.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then(a.code.cmp(&b.code))
                .then_with(|| a.state.cmp(&b.state))
        });
        v
    }

    /// Errors whose (code, state) was first seen after [`ERROR_CAP`] distinct pairs.
    pub fn other(&self) -> u64 {
        self.other
    }

    /// Multiplies every count by `n`.
    pub fn scale(&mut self, n: u64) {
        for s in &mut self.stats {
            s.count = s.count.saturating_mul(n);
        }
        self.other = self.other.saturating_mul(n);
    }
}

impl PartialEq for ErrorCounts {
    /// Equal when they hold the same pairs, whatever the order they were first seen in.
    fn eq(&self, o: &Self) -> bool {
        self.other == o.other && self.sorted() == o.sorted()
    }
}

/// The slowest event of a group, kept when [`crate::AggConfig::keep_examples`] is set. Cheap to
/// keep: text and names are shared `Arc`s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Example {
    pub text: Option<Arc<str>>,
    pub text_truncated: bool,
    pub start_ns: u64,
    pub latency_ns: Option<u64>,
    /// Its service time ([`QueryEvent::service_ns`]).
    pub service_ns: Option<u64>,
    pub client: Endpoint,
    pub server: Endpoint,
    /// The client process, where known.
    pub peer: Option<Arc<proto::Process>>,
    pub database: Option<Arc<str>>,
    pub user: Option<Arc<str>>,
    pub statement_id: Option<u32>,
    /// The bound values of a prepared statement's execution, raw: decoded only when a report
    /// asks ([`proto::params::BoundParams::literals`]).
    pub params: Option<Arc<proto::params::BoundParams>>,
}

impl Example {
    fn from_event(ev: &QueryEvent) -> Self {
        Example {
            text: ev.text.clone(),
            text_truncated: ev.text_truncated,
            start_ns: ev.start_ns,
            latency_ns: ev.latency_ns(),
            service_ns: ev.service_ns(),
            client: ev.client.clone(),
            server: ev.server.clone(),
            peer: ev.peer.clone(),
            database: ev.database.clone(),
            user: ev.user.clone(),
            statement_id: ev.statement_id,
            params: ev.params.clone(),
        }
    }

    /// True when an event with `(latency_ns, start_ns, client)` should replace this example:
    /// slower wins; among equals the earlier one, then the lower client address.
    fn loses_to(&self, latency_ns: Option<u64>, start_ns: u64, client: &Endpoint) -> bool {
        latency_ns
            .cmp(&self.latency_ns)
            .then_with(|| self.start_ns.cmp(&start_ns))
            .then_with(|| self.client.cmp(client))
            .is_gt()
    }
}

/// Everything counted for a set of events.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Events.
    pub count: u64,
    /// Events with [`Outcome::Ok`].
    pub ok: u64,
    /// Events with [`Outcome::Error`] or carrying a [`proto::DbError`].
    pub errors: u64,
    /// Events with [`Outcome::NoResponse`] (never answered: no latency).
    pub no_response: u64,
    /// Events with [`Outcome::Incomplete`] (response partly lost in a capture gap).
    pub incomplete: u64,
    /// Events with [`Outcome::NoReplyExpected`].
    pub no_reply_expected: u64,
    pub errors_by_code: ErrorCounts,
    /// Response time (request start to last response byte) of events that have one, ns.
    /// Unanswered and count-only events ([`QueryEvent::timed`] false) have none: they count
    /// in `count` but add no sample here.
    pub latency: Latency,
    /// Service time (response time without queueing behind earlier requests on the same
    /// connection, [`QueryEvent::service_ns`]) of events that have one, ns. Unanswered and
    /// count-only events have none.
    pub service: Latency,
    /// Time to first response byte, ns (timed events only).
    pub ttfb: Summary,
    pub bytes_in: Summary,
    pub bytes_out: Summary,
    pub rows_sent: Summary,
    pub rows_affected: Summary,
    /// Warnings the server reported per event (MySQL/MariaDB).
    pub warnings: Summary,
    /// Events with at least one warning.
    pub with_warnings: u64,
    /// Requests that lost bytes of their own in a capture gap while their framing held
    /// ([`QueryEvent::text_partial`]): counted and timed, their text is what was seen.
    pub partial: u64,
    /// Earliest request start, ns since the epoch.
    pub first_seen_ns: Option<u64>,
    /// Latest event end (last response byte, or request start when unanswered), ns.
    pub last_seen_ns: Option<u64>,
    /// Events per database (schema); `None` when the session did not know it.
    pub databases: TopCounter<Option<Arc<str>>>,
    /// Events per user; `None` when unknown.
    pub users: TopCounter<Option<Arc<str>>>,
    /// Events per client host.
    pub clients: TopCounter<Host>,
    /// The slowest event (only with `keep_examples`).
    pub example: Option<Example>,
    /// Events the server flagged `SERVER_QUERY_NO_INDEX_USED` (MySQL/MariaDB).
    pub no_index_used: u64,
    /// Events the server flagged `SERVER_QUERY_NO_GOOD_INDEX_USED` (MySQL/MariaDB).
    pub no_good_index_used: u64,
}

impl Stats {
    /// Counts one event.
    pub fn record(&mut self, ev: &QueryEvent, keep_example: bool) {
        self.record_host(ev, &Host::of(&ev.client), keep_example);
    }

    /// [`record`](Stats::record) of an event whose client host the caller has already taken
    /// (`client` is `Host::of(&ev.client)`): the aggregator takes it once per event for the
    /// totals, the load shares and the group.
    #[inline(always)]
    pub(crate) fn record_host(&mut self, ev: &QueryEvent, client: &Host, keep_example: bool) {
        self.record_sums(ev);
        self.record_bounded(ev, client, keep_example);
    }

    /// The part of [`record`](Stats::record) whose [`merge`](Stats::merge) is exact whatever
    /// the order: counts, outcomes, time distributions, sums and first/last seen. An
    /// aggregator's totals sum these from its groups when read instead of recording each event
    /// twice ([`crate::Aggregator::totals`]).
    #[inline(always)]
    pub(crate) fn record_sums(&mut self, ev: &QueryEvent) {
        self.count += 1;
        match ev.outcome {
            Outcome::Ok => self.ok += 1,
            Outcome::Error => {}
            Outcome::NoResponse => self.no_response += 1,
            Outcome::Incomplete => self.incomplete += 1,
            Outcome::NoReplyExpected => self.no_reply_expected += 1,
        }
        if ev.outcome == Outcome::Error || ev.error.is_some() {
            self.errors += 1;
        }
        // A count-only event (`timed` false) has no latency and adds no time sample.
        if let Some(l) = ev.latency_ns() {
            self.latency.record(l);
        }
        if let Some(s) = ev.service_ns() {
            self.service.record(s);
        }
        if let Some(f) = ev.first_response_ns.filter(|_| ev.timed) {
            self.ttfb.record(f.saturating_sub(ev.start_ns));
        }
        self.bytes_in.record(ev.bytes_in);
        self.bytes_out.record(ev.bytes_out);
        self.rows_sent.record(ev.rows_sent);
        self.rows_affected.record(ev.rows_affected);
        self.warnings.record(ev.warnings);
        self.with_warnings += u64::from(ev.warnings > 0);
        self.partial += u64::from(ev.text_partial);
        self.no_index_used += u64::from(ev.index.no_index_used);
        self.no_good_index_used += u64::from(ev.index.no_good_index_used);
        let end = ev.end_ns.unwrap_or(ev.start_ns).max(ev.start_ns);
        self.first_seen_ns = Some(
            self.first_seen_ns
                .map_or(ev.start_ns, |f| f.min(ev.start_ns)),
        );
        self.last_seen_ns = Some(self.last_seen_ns.map_or(end, |l| l.max(end)));
    }

    /// The rest of [`record`](Stats::record): the bounded counters (which values go to
    /// "other" depends on the order they come in) and the slowest example (ties go to the
    /// earlier event), recorded per event for the totals too. `client` is
    /// `Host::of(&ev.client)`.
    #[inline(always)]
    pub(crate) fn record_bounded(&mut self, ev: &QueryEvent, client: &Host, keep_example: bool) {
        if let Some(e) = &ev.error {
            self.errors_by_code.record(e, ev.start_ns);
        }
        self.databases.record(&ev.database);
        self.users.record(&ev.user);
        self.clients.record(client);
        if keep_example {
            match &self.example {
                Some(ex) if !ex.loses_to(ev.latency_ns(), ev.start_ns, &ev.client) => {}
                _ => self.example = Some(Example::from_event(ev)),
            }
        }
    }

    /// Multiplies every count by `n`, as if each event had been seen `n` times: for estimates
    /// from a sample of 1 connection in `n`. Latency percentiles, means, min and max are
    /// unchanged; the example stays.
    pub fn scale(&mut self, n: u64) {
        if n <= 1 {
            return;
        }
        let Stats {
            count,
            ok,
            errors,
            no_response,
            incomplete,
            no_reply_expected,
            errors_by_code,
            latency,
            service,
            ttfb,
            bytes_in,
            bytes_out,
            rows_sent,
            rows_affected,
            warnings,
            with_warnings,
            partial,
            first_seen_ns: _,
            last_seen_ns: _,
            databases,
            users,
            clients,
            example: _,
            no_index_used,
            no_good_index_used,
        } = self;
        for c in [
            count,
            ok,
            errors,
            no_response,
            incomplete,
            no_reply_expected,
            with_warnings,
            partial,
            no_index_used,
            no_good_index_used,
        ] {
            *c = c.saturating_mul(n);
        }
        errors_by_code.scale(n);
        *latency = scaled_latency(latency, n);
        *service = scaled_latency(service, n);
        for s in [
            ttfb,
            bytes_in,
            bytes_out,
            rows_sent,
            rows_affected,
            warnings,
        ] {
            s.scale(n);
        }
        databases.scale(n);
        users.scale(n);
        clients.scale(n);
    }

    /// Adds another set's statistics. Exact: equals recording both event sets (except that
    /// bounded counters may put different values in "other" once their bound is reached).
    pub fn merge(&mut self, o: &Stats) {
        self.merge_sums(o);
        self.merge_bounded(o);
    }

    /// [`merge`](Stats::merge) of what [`record_sums`](Stats::record_sums) counts.
    pub(crate) fn merge_sums(&mut self, o: &Stats) {
        self.count += o.count;
        self.ok += o.ok;
        self.errors += o.errors;
        self.no_response += o.no_response;
        self.incomplete += o.incomplete;
        self.no_reply_expected += o.no_reply_expected;
        self.latency.merge(&o.latency);
        self.service.merge(&o.service);
        self.ttfb.merge(&o.ttfb);
        self.bytes_in.merge(&o.bytes_in);
        self.bytes_out.merge(&o.bytes_out);
        self.rows_sent.merge(&o.rows_sent);
        self.rows_affected.merge(&o.rows_affected);
        self.warnings.merge(&o.warnings);
        self.with_warnings += o.with_warnings;
        self.partial += o.partial;
        self.no_index_used += o.no_index_used;
        self.no_good_index_used += o.no_good_index_used;
        self.first_seen_ns = min_opt(self.first_seen_ns, o.first_seen_ns);
        self.last_seen_ns = self.last_seen_ns.max(o.last_seen_ns);
    }

    /// [`merge`](Stats::merge) of what [`record_bounded`](Stats::record_bounded) counts.
    pub(crate) fn merge_bounded(&mut self, o: &Stats) {
        self.errors_by_code.merge(&o.errors_by_code);
        self.databases.merge(&o.databases);
        self.users.merge(&o.users);
        self.clients.merge(&o.clients);
        if let Some(oe) = &o.example {
            match &self.example {
                Some(ex) if !ex.loses_to(oe.latency_ns, oe.start_ns, &oe.client) => {}
                _ => self.example = Some(oe.clone()),
            }
        }
    }
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// `l` merged with itself to `n` times its weight (by doubling: log2(n) merges).
fn scaled_latency(l: &Latency, mut n: u64) -> Latency {
    let mut out = Latency::default();
    let mut power = l.clone();
    while n > 0 {
        if n & 1 == 1 {
            out.merge(&power);
        }
        n >>= 1;
        if n > 0 {
            let p = power.clone();
            power.merge(&p);
        }
    }
    out
}
