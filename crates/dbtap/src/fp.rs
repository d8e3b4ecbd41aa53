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

use proto::{Protocol, QueryEvent};

use crate::cli::FingerprintMode;

/// The group an event belongs to.
pub struct Group<'a> {
    pub hash: u64,
    pub text: &'a str,
    /// The command the group is filed under (see [`group_command`]).
    pub command: &'static str,
}

/// The command a group is filed under. PostgreSQL's simple-protocol queries and extended-protocol
/// executions of the same statement share one group, `query`, as pg_stat_statements counts them.
/// MySQL keeps `execute` apart from `query`, as pt-query-digest does.
pub fn group_command(protocol: Protocol, command: &'static str) -> &'static str {
    match (protocol, command) {
        (Protocol::Postgres, "execute") => "query",
        _ => command,
    }
}

struct Cached {
    /// The raw statement text, compared on a hit so a hash collision cannot misfile a query.
    text: Arc<str>,
    hash: u64,
    fingerprint: Box<str>,
}

/// A fixed-seed hasher for raw statement texts (cache keys only; never persisted).
fn text_key(text: &str) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0x64_62_74_61_70).hash_one(text)
}

/// Most entries are a few dozen statements per connection; a capture with millions of
/// short-lived connections must not grow the cache without bound.
const CACHE_MAX: usize = 1 << 14;

pub struct Fingerprinter {
    mode: FingerprintMode,
    key_patterns: bool,
    keep_key_order: bool,
    buf: String,
    scratch: String,
    cache: HashMap<(u64, &'static str), Cached, foldhash::fast::RandomState>,
}

impl Fingerprinter {
    pub fn from_args(g: &crate::cli::GroupingArgs) -> Self {
        Self::new(g.fingerprint, g.key_patterns, g.keep_key_order)
    }

    pub fn new(mode: FingerprintMode, key_patterns: bool, keep_key_order: bool) -> Self {
        Fingerprinter {
            mode,
            key_patterns,
            keep_key_order,
            buf: String::with_capacity(1024),
            scratch: String::new(),
            cache: HashMap::default(),
        }
    }

    /// Files `ev` under its group in `agg`. The fingerprint text is copied and the Query ID
    /// computed only when the group is new.
    pub fn add_to(&mut self, agg: &mut aggregate::Aggregator, ev: &QueryEvent) {
        let mode = self.mode;
        let group = self.group(ev);
        let key = aggregate::GroupKey {
            protocol: ev.protocol,
            command: group.command,
            fingerprint_hash: group.hash,
        };
        let (text, hash) = (group.text, group.hash);
        agg.add(ev, key, || {
            let id = query_id(mode, ev.protocol, key.command, text, hash);
            (text.to_string(), id)
        });
    }

    /// The group of `ev`. The returned text borrows an internal buffer.
    pub fn group(&mut self, ev: &QueryEvent) -> Group<'_> {
        let command = group_command(ev.protocol, ev.command);
        let text = match &ev.text {
            Some(t) if carries_statement(ev.protocol, ev.command) => t,
            _ => {
                self.buf.clear();
                self.buf.push_str(&no_text_fingerprint(ev));
                return Group {
                    hash: fingerprint::hash64(&self.buf),
                    text: &self.buf,
                    command,
                };
            }
        };
        if ev.command == "query" {
            // Plain text queries rarely repeat byte for byte (literals differ): no cache.
            let hash = self.normalize(ev.protocol, ev.command, text);
            return Group {
                hash,
                text: &self.buf,
                command,
            };
        }
        let key = (text_key(text), ev.command);
        let hit = self
            .cache
            .get(&key)
            .is_some_and(|c| Arc::ptr_eq(&c.text, text) || c.text == *text);
        if !hit {
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
            }
            self.cache.insert(
                key,
                Cached {
                    text: Arc::clone(text),
                    hash,
                    fingerprint: self.buf.as_str().into(),
                },
            );
        }
        match self.cache.get(&key) {
            Some(c) => Group {
                hash: c.hash,
                text: &c.fingerprint,
                command,
            },
            None => unreachable_group(&mut self.buf),
        }
    }

    pub fn mode(&self) -> FingerprintMode {
        self.mode
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
    match (protocol, mode) {
        (Protocol::Mysql, FingerprintMode::Pt) => fingerprint::query_id(fingerprint_text),
        (Protocol::Mysql, FingerprintMode::Dbtap) => {
            if command == "query" || fingerprint_text.starts_with("administrator command") {
                fingerprint::query_id(fingerprint_text)
            } else {
                // An execute of a statement and a plain query of the same SQL are
                // separate groups; their IDs must differ too.
                fingerprint::query_id(&format!("{command} {fingerprint_text}"))
            }
        }
        // The display text of these keeps the first-seen spelling; the group hash is of the
        // canonical form, so the ID is derived from the hash.
        (p, _) => fingerprint::query_id(&format!("{} {command} {hash:016x}", p.name())),
    }
}

impl Fingerprinter {
    /// Writes the fingerprint of `text` into `self.buf` and returns its group hash.
    fn normalize(&mut self, protocol: Protocol, command: &str, text: &str) -> u64 {
        match protocol {
            Protocol::Mysql => {}
            Protocol::Postgres => return fingerprint::postgres::fingerprint(text, &mut self.buf),
            Protocol::Redis => {
                fingerprint::redis::fingerprint(text, self.key_patterns, &mut self.buf);
                return fingerprint::hash64(&self.buf);
            }
            Protocol::Mongodb => {
                return fingerprint::mongodb::fingerprint(text, self.keep_key_order, &mut self.buf);
            }
        }
        self.normalize_mysql(command, text);
        fingerprint::hash64(&self.buf)
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

/// Commands whose text is a statement (others, like MySQL's `init_db`, carry an argument).
fn carries_statement(protocol: Protocol, command: &str) -> bool {
    protocol != Protocol::Mysql
        || matches!(
            command,
            "query"
                | "execute"
                | "prepare"
                | "close"
                | "reset"
                | "fetch"
                | "send_long_data"
                | "bulk_execute"
        )
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

/// What a command without statement text is called: MySQL commands as pt-query-digest names
/// them, others by their command name.
fn no_text_fingerprint(ev: &QueryEvent) -> String {
    if ev.protocol != Protocol::Mysql {
        return ev.command.to_string();
    }
    let name = match ev.command {
        "execute" => return "execute <statement not captured>".to_string(),
        "prepare" => return "prepare <statement not captured>".to_string(),
        "ping" => "Ping",
        "quit" => "Quit",
        "init_db" => "Init DB",
        "change_user" => "Change user",
        "statistics" => "Statistics",
        "field_list" => "Field List",
        "process_kill" => "Kill",
        "set_option" => "Set option",
        "reset_connection" => "Reset connection",
        "reset" => "Reset stmt",
        "fetch" => "Fetch",
        "send_long_data" => "Long Data",
        "close" => "Close stmt",
        "binlog_dump" => "Binlog Dump",
        "bulk_execute" => "Bulk execute",
        "connect" => "Connect",
        other => other,
    };
    format!("administrator command: {name}")
}
