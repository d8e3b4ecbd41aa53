//! Turns a query event into its group: fingerprint text, 64-bit group hash and display Query ID.
//!
//! Statement commands other than plain queries (prepared-statement executions, PostgreSQL
//! Parse/Bind/Execute) repeat the same SQL text over and over; the fingerprint of each
//! (text, command) is computed once and cached by the text's content, so the dominant case of a
//! sysbench or pgbench workload costs a hash of the text and a lookup instead of a
//! normalization. Plain queries carry their literals and rarely repeat byte for byte: they are
//! not cached.

use std::collections::HashMap;
use std::sync::Arc;

use aggregate::{Dim, DimSet, Filter, Scope};
use proto::{Protocol, QueryEvent, registry};

use crate::cli::FingerprintMode;

/// The group an event belongs to.
pub struct Group<'a> {
    pub hash: u64,
    pub text: &'a str,
    /// The command the group is filed under ([`proto::registry::CommandFacts::group_under`]).
    pub command: &'static str,
}

struct Cached {
    /// The raw statement text, compared on a hit so a hash collision cannot misfile a query.
    text: Arc<str>,
    hash: u64,
    fingerprint: Box<str>,
}

/// Files events under their groups: the fingerprint rules, the `--group-by` dimensions and the
/// `--where` filter.
pub struct Fingerprinter {
    norm: Normalizer,
    /// `--group-by`: the dimensions groups are keyed by.
    dims: DimSet,
    /// `--where`: the events counted.
    filter: Filter,
    /// What aggregates are told (set when not the default).
    scope: Option<Arc<Scope>>,
}

/// The command of groups keyed by dimensions without the fingerprint (or command).
pub const ALL_COMMANDS: &str = "all";

impl Fingerprinter {
    /// The fingerprinter of the command line's grouping options (`--group-by` and `--where`
    /// were checked when the command line was parsed, see [`crate::cli::GroupingArgs::scope`]).
    pub fn from_args(g: &crate::cli::GroupingArgs) -> Self {
        let mut f = Self::new(g.fingerprint, g.key_patterns, g.keep_key_order);
        if let Ok((dims, filter)) = g.scope() {
            f.set_scope(dims, filter);
        }
        f
    }

    pub fn new(mode: FingerprintMode, key_patterns: bool, keep_key_order: bool) -> Self {
        Fingerprinter {
            norm: Normalizer::new(mode, key_patterns, keep_key_order),
            dims: DimSet::default(),
            filter: Filter::default(),
            scope: None,
        }
    }

    /// Groups by `dims` and counts only the events `filter` admits.
    pub fn set_scope(&mut self, dims: DimSet, filter: Filter) {
        let scope = Scope {
            group_by: dims,
            filter: filter.describe(),
        };
        self.scope = (!scope.is_default()).then(|| Arc::new(scope));
        self.dims = dims;
        self.filter = filter;
    }

    /// Adds the server to the grouping (for /metrics, whose group series carry a `server`
    /// label).
    pub fn group_by_server(&mut self) {
        if !self.dims.contains(Dim::Server) {
            let filter = std::mem::take(&mut self.filter);
            self.set_scope(self.dims.with(Dim::Server), filter);
        }
    }

    /// The dimensions groups are keyed by.
    pub fn dims(&self) -> DimSet {
        self.dims
    }

    pub fn mode(&self) -> FingerprintMode {
        self.norm.mode
    }

    /// Files `ev` under its group in `agg`, or counts it as filtered out; returns whether it
    /// passed the `--where` filter. The fingerprint text is copied and the Query ID computed
    /// only when the group is new.
    #[inline]
    pub fn add_to(&mut self, agg: &mut aggregate::Aggregator, ev: &QueryEvent) -> bool {
        self.add_to_then(agg, ev, |_, _| {})
    }

    /// The group `ev` is filed under (its key under the `--group-by` dimensions and its
    /// fingerprint text, borrowed from an internal buffer), or `None` when the `--where` filter
    /// leaves it out.
    pub fn classify(&mut self, ev: &QueryEvent) -> Option<Classified<'_>> {
        let dims = self.dims;
        let group = self.norm.group(ev);
        if !self.filter.is_empty() && !self.filter.admits(ev, group.hash, group.text) {
            return None;
        }
        let command = if dims.contains(Dim::Fingerprint) || dims.contains(Dim::Command) {
            group.command
        } else {
            ALL_COMMANDS
        };
        Some(Classified {
            key: aggregate::GroupKey {
                protocol: ev.protocol,
                command,
                fingerprint_hash: dims.group_hash(ev, group.hash),
            },
            text: group.text,
            fp_hash: group.hash,
            fp_command: group.command,
        })
    }

    /// [`add_to`](Fingerprinter::add_to) that also hands an admitted event's group to `then`
    /// (the history store's bins, [`crate::storefeed::MinuteBins::event_in`]), so the event is
    /// fingerprinted once.
    #[inline]
    pub fn add_to_then(
        &mut self,
        agg: &mut aggregate::Aggregator,
        ev: &QueryEvent,
        then: impl FnOnce(FingerprintMode, &Classified<'_>),
    ) -> bool {
        if self.scope.is_some() && agg.scope().is_none() {
            agg.set_scope(self.scope.clone());
        }
        let (mode, dims) = (self.norm.mode, self.dims);
        match self.classify(ev) {
            Some(c) => {
                agg.add_with_dims(ev, c.key, || describe(mode, dims, ev, &c));
                then(mode, &c);
                true
            }
            None => {
                agg.filtered_out();
                false
            }
        }
    }
}

/// An admitted event's group.
pub struct Classified<'a> {
    pub key: aggregate::GroupKey,
    /// The fingerprint text.
    pub text: &'a str,
    /// The fingerprint's own hash (the key's hash folds the dimension values in).
    pub fp_hash: u64,
    /// The command the fingerprint is filed under (the key's is `all` when grouping by neither
    /// the fingerprint nor the command).
    pub fp_command: &'static str,
}

/// A new group's (display text, Query ID, dimension values). Grouped by the fingerprint
/// alone, exactly as before `--group-by` existed. With more dimensions, the Query ID is
/// derived from the fingerprint's ID and the dimension values (so each group has its own);
/// without the fingerprint, the display text is the dimension values (`server=10.0.0.5:3306`).
pub fn describe(
    mode: FingerprintMode,
    dims: DimSet,
    ev: &QueryEvent,
    c: &Classified<'_>,
) -> (String, String, Option<Box<aggregate::DimValues>>) {
    let fp_id = || query_id(mode, ev.protocol, c.key.command, c.text, c.fp_hash);
    if !dims.has_extra() {
        return (c.text.to_string(), fp_id(), None);
    }
    let values = dims.values(ev);
    let label = values.label();
    if dims.contains(Dim::Fingerprint) {
        let id = fingerprint::query_id(&format!("{} {label}", fp_id()));
        (c.text.to_string(), id, Some(Box::new(values)))
    } else {
        let id = fingerprint::query_id(&format!("{} {label}", ev.protocol.name()));
        (label, id, Some(Box::new(values)))
    }
}

/// A fixed-seed hasher for raw statement texts (cache keys only; never persisted).
fn text_key(text: &str) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0x64_62_74_61_70).hash_one(text)
}

/// Most entries are a few dozen statements per connection; a capture with millions of
/// short-lived connections must not grow the cache without bound.
const CACHE_MAX: usize = 1 << 14;

/// The fingerprint rules and the cache of prepared-statement fingerprints.
struct Normalizer {
    mode: FingerprintMode,
    key_patterns: bool,
    keep_key_order: bool,
    buf: String,
    scratch: String,
    /// Each cached (text, command)'s slot in `entries`.
    cache: HashMap<(u64, Command), usize, foldhash::fast::RandomState>,
    entries: Vec<Cached>,
    /// The slot and command of the last cache hit or insertion: events come in runs of one
    /// statement (a pipeline of one Redis command, a prepared statement executed in a loop),
    /// so comparing the text with that entry's first skips the hash of the text and the
    /// lookup.
    last: Option<(usize, Command)>,
    /// Texts the sessions share by allocation (a MySQL prepared statement's, a PostgreSQL
    /// statement re-parsed from a connection's recent texts), found by address before any hash
    /// of the bytes ([`Normalizer::shared_slot`]).
    shared: Vec<Option<Shared>>,
    /// Redis without key patterns: the fingerprints of command names ([`NameFingerprints`]).
    names: NameFingerprints,
}

/// The fingerprint and hash of each Redis command name seen, for grouping without key
/// patterns, where a command's fingerprint is its name alone
/// ([`fingerprint::redis::command_name`]). Redis texts carry their key, so they rarely repeat
/// byte for byte and the text cache would miss and fill with every key; names repeat.
#[derive(Default)]
struct NameFingerprints {
    /// Each name's slot in `entries`, by [`text_key`].
    index: HashMap<u64, usize, foldhash::fast::RandomState>,
    entries: Vec<NameFingerprint>,
    /// The slot of the last name found: pipelines send runs of one command.
    last: usize,
}

struct NameFingerprint {
    name: Box<str>,
    hash: u64,
    fingerprint: Box<str>,
}

/// Names remembered at most (unknown commands can take any name); past it, a new name's
/// fingerprint is computed each time.
const NAMES_MAX: usize = 1024;
/// Longest name remembered (the table's longest is 20 bytes).
const NAME_MAX_LEN: usize = 64;

impl NameFingerprints {
    /// The slot of the command name of `text`, remembered now if new and there is room;
    /// `None` for a container command (its fingerprint is not its name alone) and for a new
    /// name past the bounds: the caller then fingerprints the text as before.
    fn slot(&mut self, text: &str, buf: &mut String) -> Option<usize> {
        if self
            .entries
            .get(self.last)
            .is_some_and(|e| fingerprint::redis::named(text, &e.name))
        {
            return Some(self.last);
        }
        let name = fingerprint::redis::command_name(text);
        let key = text_key(name);
        let found = self
            .index
            .get(&key)
            .copied()
            .filter(|&i| self.entries.get(i).is_some_and(|e| *e.name == *name));
        let slot = match found {
            Some(i) => i,
            None => {
                if self.entries.len() >= NAMES_MAX
                    || name.len() > NAME_MAX_LEN
                    || self.index.contains_key(&key)
                    || fingerprint::redis::is_container(name)
                {
                    return None;
                }
                fingerprint::redis::fingerprint(name, false, buf);
                self.index.insert(key, self.entries.len());
                self.entries.push(NameFingerprint {
                    name: name.into(),
                    hash: fingerprint::hash64(buf),
                    fingerprint: buf.as_str().into(),
                });
                self.entries.len() - 1
            }
        };
        self.last = slot;
        Some(slot)
    }
}

/// A text known by its allocation: the `Arc` is held here, so no other text can take its
/// address while it is, and an equal address is this very text (exact, no bytes compared).
struct Shared {
    text: Arc<str>,
    command: Command,
    /// Its entry in [`Normalizer::entries`].
    slot: usize,
}

/// Slots of the table of shared texts (direct-mapped by address; a power of two).
const SHARED_SLOTS: usize = 256;
/// Longest text the table holds, so it keeps at most `SHARED_SLOTS` times this alive.
const SHARED_MAX_LEN: usize = 16 << 10;

/// The slot of the table of shared texts that `text`'s address and the command's map to (one
/// text comes as a PostgreSQL Parse and then its execution: two entries, two slots).
#[inline]
fn shared_index(text: &Arc<str>, cmd: Command) -> usize {
    let addr = Arc::as_ptr(text).cast::<u8>() as usize as u64;
    let cmd = (cmd.0.as_ptr() as usize as u64).rotate_left(29);
    ((addr ^ cmd).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize & (SHARED_SLOTS - 1)
}

/// A command name as a cache key: equal names are almost always the same `&'static str`, so
/// the address is compared first ([`aggregate::same_str`]); hashed as the text.
#[derive(Clone, Copy, Eq)]
struct Command(&'static str);

impl std::hash::Hash for Command {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.hash(h);
    }
}

impl PartialEq for Command {
    #[inline]
    fn eq(&self, o: &Self) -> bool {
        aggregate::same_str(self.0, o.0)
    }
}

impl Normalizer {
    pub fn new(mode: FingerprintMode, key_patterns: bool, keep_key_order: bool) -> Self {
        Normalizer {
            mode,
            key_patterns,
            keep_key_order,
            buf: String::with_capacity(1024),
            scratch: String::new(),
            cache: HashMap::default(),
            entries: Vec::new(),
            last: None,
            shared: Vec::new(),
            names: NameFingerprints::default(),
        }
    }

    /// The entry of `text` when the table of shared texts holds this very allocation.
    #[inline]
    fn shared_slot(&self, text: &Arc<str>, cmd: Command) -> Option<usize> {
        self.shared
            .get(shared_index(text, cmd))?
            .as_ref()
            .filter(|s| Arc::ptr_eq(&s.text, text) && s.command == cmd)
            .map(|s| s.slot)
    }

    /// Remembers that `text` is filed in entry `slot`, when a session holds the text too (so
    /// it may come again by the same allocation: a text only the event holds never does).
    #[inline]
    fn share(&mut self, text: &Arc<str>, cmd: Command, slot: usize) {
        if Arc::strong_count(text) < 2 || text.len() > SHARED_MAX_LEN {
            return;
        }
        if self.shared.is_empty() {
            self.shared.resize_with(SHARED_SLOTS, || None);
        }
        if let Some(s) = self.shared.get_mut(shared_index(text, cmd)) {
            *s = Some(Shared {
                text: Arc::clone(text),
                command: cmd,
                slot,
            });
        }
    }

    /// The group of `ev`. The returned text borrows an internal buffer.
    pub fn group(&mut self, ev: &QueryEvent) -> Group<'_> {
        let facts = registry::command_facts(ev.protocol, ev.command);
        let command = facts.group_under;
        let text = match &ev.text {
            Some(t) if facts.text_is_statement => t,
            _ => {
                self.buf.clear();
                self.buf
                    .push_str(&registry::text_without_statement(ev.protocol, ev.command));
                return Group {
                    hash: fingerprint::hash64(&self.buf),
                    text: &self.buf,
                    command,
                };
            }
        };
        if ev.protocol == Protocol::Redis
            && !self.key_patterns
            && let Some(i) = self.names.slot(text, &mut self.buf)
        {
            return self.name_group(i, command);
        }
        if ev.command == "query" {
            // Plain text queries rarely repeat byte for byte (literals differ): no cache.
            let hash = self.normalize(ev.protocol, ev.command, text);
            return Group {
                hash,
                text: &self.buf,
                command,
            };
        }
        let holds = |c: &Cached| Arc::ptr_eq(&c.text, text) || c.text == *text;
        let cmd = Command(ev.command);
        if let Some(slot) = self.shared_slot(text, cmd) {
            self.last = Some((slot, cmd));
            return self.cached_group(slot, command);
        }
        let memo = self
            .last
            .filter(|&(i, c)| c == cmd && self.entries.get(i).is_some_and(holds))
            .map(|(i, _)| i);
        // Otherwise the entry's slot, when it holds this very text: one lookup on a hit.
        let mut looked_up = None;
        let hit = memo.or_else(|| {
            let key = (text_key(text), cmd);
            looked_up = Some(key);
            self.cache
                .get(&key)
                .copied()
                .filter(|&i| self.entries.get(i).is_some_and(holds))
        });
        let slot = match hit {
            Some(i) => i,
            None => {
                let key = looked_up.unwrap_or_else(|| (text_key(text), cmd));
                let hash = self.normalize(ev.protocol, ev.command, text);
                if self.cache.contains_key(&key) {
                    // A different text with the same key: answer without caching it.
                    return Group {
                        hash,
                        text: &self.buf,
                        command,
                    };
                }
                if self.cache.len() >= CACHE_MAX {
                    self.cache.clear();
                    self.entries.clear();
                    self.last = None;
                    self.shared.clear();
                }
                self.cache.insert(key, self.entries.len());
                self.entries.push(Cached {
                    text: Arc::clone(text),
                    hash,
                    fingerprint: self.buf.as_str().into(),
                });
                self.entries.len() - 1
            }
        };
        self.last = Some((slot, cmd));
        self.share(text, cmd, slot);
        self.cached_group(slot, command)
    }

    /// The group of remembered Redis command name `slot`.
    #[inline]
    fn name_group(&mut self, slot: usize, command: &'static str) -> Group<'_> {
        match self.names.entries.get(slot) {
            Some(e) => Group {
                hash: e.hash,
                text: &e.fingerprint,
                command,
            },
            None => unreachable_group(&mut self.buf),
        }
    }

    /// The group of cache entry `slot`.
    #[inline]
    fn cached_group(&mut self, slot: usize, command: &'static str) -> Group<'_> {
        match self.entries.get(slot) {
            Some(c) => Group {
                hash: c.hash,
                text: &c.fingerprint,
                command,
            },
            None => unreachable_group(&mut self.buf),
        }
    }
}

/// The display ID of a group, computed once per group.
pub fn query_id(
    mode: FingerprintMode,
    protocol: Protocol,
    command: &str,
    fingerprint_text: &str,
    hash: u64,
) -> String {
    (scheme(protocol).query_id)(mode, protocol, command, fingerprint_text, hash)
}

/// How one protocol's statement text becomes a group: its normalizer in the `fingerprint`
/// crate, and how its Query ID is derived.
#[derive(Clone, Copy)]
struct Scheme {
    /// Writes the fingerprint of `text` into `Normalizer::buf` and returns its group hash.
    normalize: fn(&mut Normalizer, command: &str, text: &str) -> u64,
    query_id: fn(FingerprintMode, Protocol, command: &str, fingerprint_text: &str, u64) -> String,
}

/// The fingerprint scheme of each protocol: the one place the binary names protocols.
/// `fingerprint` is a crate of pure functions that depends on no other (not even `proto`), and
/// `proto` must not depend on it, so pairing a protocol with its fingerprint rules belongs to
/// the crate that knows both. Every other protocol fact comes from `proto::registry`.
fn scheme(protocol: Protocol) -> Scheme {
    match protocol {
        Protocol::Mysql => Scheme {
            normalize: |f, command, text| {
                f.normalize_mysql(command, text);
                fingerprint::hash64(&f.buf)
            },
            query_id: mysql_query_id,
        },
        Protocol::Postgres => Scheme {
            normalize: |f, _, text| fingerprint::postgres::fingerprint(text, &mut f.buf),
            query_id: hashed_query_id,
        },
        Protocol::Redis => Scheme {
            normalize: |f, _, text| {
                fingerprint::redis::fingerprint(text, f.key_patterns, &mut f.buf);
                fingerprint::hash64(&f.buf)
            },
            query_id: hashed_query_id,
        },
        Protocol::Mongodb => Scheme {
            normalize: |f, _, text| {
                fingerprint::mongodb::fingerprint(text, f.keep_key_order, &mut f.buf)
            },
            query_id: hashed_query_id,
        },
    }
}

/// pt-query-digest's checksum of the fingerprint text (canonical for MySQL). In the default
/// mode, commands other than `query` that carry a statement prefix it with the command, so an
/// `execute` group and a `query` group of the same SQL differ; groups of commands without
/// statement text (`administrator command: ...`) keep pt's ID.
fn mysql_query_id(
    mode: FingerprintMode,
    _: Protocol,
    command: &str,
    fingerprint_text: &str,
    _: u64,
) -> String {
    match mode {
        FingerprintMode::Pt => fingerprint::query_id(fingerprint_text),
        FingerprintMode::Dbtap => {
            if command == "query" || fingerprint_text.starts_with("administrator command") {
                fingerprint::query_id(fingerprint_text)
            } else {
                fingerprint::query_id(&format!("{command} {fingerprint_text}"))
            }
        }
    }
}

/// The ID of a protocol whose display text keeps the first-seen spelling while the group hash
/// is of the canonical form: derived from the hash.
fn hashed_query_id(
    _: FingerprintMode,
    protocol: Protocol,
    command: &str,
    _: &str,
    hash: u64,
) -> String {
    fingerprint::query_id(&format!("{} {command} {hash:016x}", protocol.name()))
}

impl Normalizer {
    /// Writes the fingerprint of `text` into `self.buf` and returns its group hash.
    fn normalize(&mut self, protocol: Protocol, command: &str, text: &str) -> u64 {
        (scheme(protocol).normalize)(self, command, text)
    }

    fn normalize_mysql(&mut self, command: &str, text: &str) {
        match self.mode {
            FingerprintMode::Dbtap => fingerprint::mysql::fingerprint(text, &mut self.buf),
            FingerprintMode::Pt => {
                // pt-query-digest's tcpdump parser renders binary-protocol commands as text.
                let prefix = match command {
                    "execute" => "EXECUTE ",
                    "prepare" => "PREPARE ",
                    "close" => {
                        self.buf.clear();
                        self.buf.push_str("deallocate prepare ?");
                        return;
                    }
                    _ => "",
                };
                if prefix.is_empty() {
                    fingerprint::mysql::fingerprint_pt(text, &mut self.buf);
                } else {
                    self.scratch.clear();
                    self.scratch.push_str(prefix);
                    self.scratch.push_str(text);
                    fingerprint::mysql::fingerprint_pt(&self.scratch, &mut self.buf);
                }
            }
        }
    }
}

/// Unreachable in practice (the entry was inserted just above); kept total instead of panicking.
fn unreachable_group(buf: &mut String) -> Group<'_> {
    buf.clear();
    Group {
        hash: 0,
        text: buf,
        command: "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(command: &'static str, text: &Arc<str>) -> QueryEvent {
        QueryEvent {
            text: Some(Arc::clone(text)),
            ..proto::testing::event(Protocol::Postgres, command, 0, Some(1))
        }
    }

    /// A text a session holds comes back by address (as a Parse and as its execution, two
    /// entries); every answer equals a fresh normalizer's, also for equal texts in other
    /// allocations and after the address is freed and reused by another text.
    #[test]
    fn shared_texts_answer_as_their_bytes() {
        let mut n = Normalizer::new(FingerprintMode::Dbtap, false, false);
        let fresh = |e: &QueryEvent| {
            let mut f = Normalizer::new(FingerprintMode::Dbtap, false, false);
            let g = f.group(e);
            (g.hash, g.text.to_string(), g.command)
        };
        let mut check = |e: &QueryEvent| {
            let g = n.group(e);
            assert_eq!((g.hash, g.text.to_string(), g.command), fresh(e));
        };
        let a: Arc<str> = Arc::from("select * from t where id = $1");
        let b: Arc<str> = Arc::from("update t set v = $1 where id = $2");
        for _ in 0..3 {
            for t in [&a, &b] {
                check(&ev("prepare", t));
                check(&ev("execute", t));
            }
        }
        let a2: Arc<str> = Arc::from(&*a);
        check(&ev("execute", &a2));
        drop((a, a2));
        for i in 0..50 {
            let t: Arc<str> = Arc::from(format!("select {i} from t where id = $1").as_str());
            check(&ev("execute", &t));
            check(&ev("execute", &t));
        }
        assert!(n.shared.iter().flatten().count() > 2);
    }

    /// Redis groups found by their command name are the text's own fingerprint, with or
    /// without key patterns (which bypass the names), for containers, texts that need
    /// trimming, and past the bound on remembered names.
    #[test]
    fn redis_names_answer_as_the_text() {
        for key_patterns in [false, true] {
            let mut n = Normalizer::new(FingerprintMode::Dbtap, key_patterns, false);
            let mut texts: Vec<String> = [
                "GET user:1",
                "GET user:2",
                "SET user:1",
                "get x",
                " GET y",
                "\u{b}GET z",
                "CONFIG GET",
                "CONFIG SET",
                "config",
                "GET",
                "PING",
                "\u{85}PING",
                "",
            ]
            .iter()
            .map(|t| t.to_string())
            .collect();
            texts.push(format!("{} k", "X".repeat(NAME_MAX_LEN + 1)));
            texts.extend((0..NAMES_MAX + 10).map(|i| format!("CMD{i} key:{i}")));
            texts.extend(["GET user:3".to_string(), "CMD1 key:9".to_string()]);
            for t in &texts {
                let text: Arc<str> = Arc::from(t.as_str());
                let e = QueryEvent {
                    text: Some(Arc::clone(&text)),
                    ..proto::testing::event(Protocol::Redis, "get", 0, Some(1))
                };
                let mut want = String::new();
                fingerprint::redis::fingerprint(t, key_patterns, &mut want);
                let g = n.group(&e);
                assert_eq!(
                    (g.text, g.hash),
                    (want.as_str(), fingerprint::hash64(&want))
                );
            }
            let names = &n.names.entries;
            assert_eq!(names.len(), if key_patterns { 0 } else { NAMES_MAX });
            assert!(names.iter().all(|e| {
                !fingerprint::redis::is_container(&e.name) && e.name.len() <= NAME_MAX_LEN
            }));
        }
    }

    /// MySQL in pt mode fingerprints a Prepare and an Execute of one text differently: the
    /// table tells them apart by command.
    #[test]
    fn shared_texts_keep_their_command() {
        let mut n = Normalizer::new(FingerprintMode::Pt, false, false);
        let t: Arc<str> = Arc::from("select c from sbtest1 where id=?");
        let mut seen = Vec::new();
        for _ in 0..3 {
            for command in ["prepare", "execute"] {
                let e = QueryEvent {
                    text: Some(Arc::clone(&t)),
                    ..proto::testing::event(Protocol::Mysql, command, 0, Some(1))
                };
                let g = n.group(&e);
                seen.push((command, g.text.to_string()));
            }
        }
        assert_eq!(seen[0].1, "prepare select c from sbtest? where id=?");
        assert_eq!(seen[1].1, "execute select c from sbtest? where id=?");
        assert_eq!(
            seen[..2]
                .iter()
                .cycle()
                .take(6)
                .cloned()
                .collect::<Vec<_>>(),
            seen
        );
    }
}
