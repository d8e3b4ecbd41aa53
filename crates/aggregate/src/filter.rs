//! `--where` filters: expressions such as `db=shop`, `user!=monitor`, `server=10.0.0.5:3306`,
//! `server=/run/mysqld/mysqld.sock`, `process=php-fpm` or `fingerprint~^select`, parsed once and evaluated per event (all must hold).
//!
//! Evaluation is cheap and allocation-free on the hot path: equality tests compare in place, and
//! regular expressions on the fingerprint are evaluated once per fingerprint hash and cached
//! (the cache is bounded: it is cleared when full). Parsing never panics; a bad expression is a
//! one-line error.

use std::collections::HashMap;
use std::net::IpAddr;

use proto::{Endpoint, Protocol, QueryEvent};

use crate::dims::{Dim, Host};
use regex::Regex;

/// Fingerprint hashes whose verdict is cached; past it the cache starts over.
const FP_CACHE_MAX: usize = 1 << 16;
/// (predicate, address) verdicts cached; past it the cache starts over.
const ADDR_CACHE_MAX: usize = 1 << 14;
/// Longest compiled regular expression, bytes (a pathological pattern is refused, not run).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

#[derive(Clone, Debug)]
enum Test {
    /// `server=`: an exact endpoint (address and port, or a Unix socket path), any port of an
    /// address, or a port on any address.
    Server(ServerPat),
    /// `client=`: a host address, or `local` (Unix-socket clients).
    Host(Host),
    /// `protocol=`.
    Protocol(Protocol),
    /// Exact text (db, user, command, process, fingerprint); for db, user and process the empty
    /// string matches an unknown value.
    Text(String),
    /// `~`: a regular expression on the field's text.
    Regex(Regex),
}

#[derive(Clone, Debug)]
enum ServerPat {
    Exact(Endpoint),
    Ip(IpAddr),
    Port(u16),
}

impl ServerPat {
    fn matches(&self, a: &Endpoint) -> bool {
        match self {
            ServerPat::Exact(e) => e == a,
            ServerPat::Ip(ip) => a.ip().is_some_and(|a| canon(*ip) == canon(a)),
            ServerPat::Port(p) => a.port() == Some(*p),
        }
    }
}

/// Compares client hosts with IPv4-mapped IPv6 addresses as their IPv4 form.
fn canon_host(h: Host) -> Host {
    match h {
        Host::Ip(ip) => Host::Ip(canon(ip)),
        local => local,
    }
}

/// What a cached verdict on an address is keyed by (with the predicate's index).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum AddrKey {
    Server(Endpoint),
    Client(Host),
}

/// IPv4-mapped IPv6 addresses compare equal to their IPv4 form.
fn canon(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[derive(Clone, Debug)]
struct Pred {
    field: Dim,
    negate: bool,
    test: Test,
}

/// All `--where` expressions of a run (AND).
#[derive(Clone, Debug, Default)]
pub struct Filter {
    preds: Vec<Pred>,
    /// The expressions as given, for report headers.
    text: Vec<String>,
    /// Verdict of the fingerprint predicates per fingerprint hash.
    fp_cache: HashMap<u64, bool>,
    /// Verdict of a regular expression on an address, per (predicate, address): the address
    /// is formatted once, not per event.
    addr_cache: HashMap<(usize, AddrKey), bool>,
}

impl Filter {
    /// Parses `exprs` (each one expression). Errors are one line naming the expression.
    pub fn parse<S: AsRef<str>>(exprs: &[S]) -> Result<Filter, String> {
        let mut f = Filter::default();
        for e in exprs {
            let e = e.as_ref();
            f.preds
                .push(parse_expr(e).map_err(|m| format!("bad --where {e:?}: {m}"))?);
            f.text.push(e.trim().to_string());
        }
        Ok(f)
    }

    /// True when there is no expression (every event passes).
    pub fn is_empty(&self) -> bool {
        self.preds.is_empty()
    }

    /// The expressions joined by ` AND ` (empty when none).
    pub fn describe(&self) -> String {
        self.text.join(" AND ")
    }

    /// Whether `ev`, whose fingerprint has hash `fp_hash` and text `fp_text`, passes every
    /// expression.
    pub fn admits(&mut self, ev: &QueryEvent, fp_hash: u64, fp_text: &str) -> bool {
        let mut has_fp = false;
        for (i, p) in self.preds.iter().enumerate() {
            let pass = match (&p.test, p.field) {
                (_, Dim::Fingerprint) => {
                    has_fp = true;
                    true
                }
                (Test::Regex(_), Dim::Server | Dim::Client) => {
                    let a = match p.field {
                        Dim::Server => AddrKey::Server(ev.server.clone()),
                        _ => AddrKey::Client(Host::of(&ev.client)),
                    };
                    let key = (i, a);
                    if let Some(&v) = self.addr_cache.get(&key) {
                        v
                    } else {
                        let v = p.eval(ev);
                        if self.addr_cache.len() >= ADDR_CACHE_MAX {
                            self.addr_cache.clear();
                        }
                        self.addr_cache.insert(key, v);
                        v
                    }
                }
                _ => p.eval(ev),
            };
            if !pass {
                return false;
            }
        }
        if !has_fp {
            return true;
        }
        if let Some(&v) = self.fp_cache.get(&fp_hash) {
            return v;
        }
        let v = self
            .preds
            .iter()
            .filter(|p| p.field == Dim::Fingerprint)
            .all(|p| p.eval_text(Some(fp_text)));
        if self.fp_cache.len() >= FP_CACHE_MAX {
            self.fp_cache.clear();
        }
        self.fp_cache.insert(fp_hash, v);
        v
    }
}

impl Pred {
    fn eval(&self, ev: &QueryEvent) -> bool {
        let hit = match (&self.test, self.field) {
            (Test::Server(p), _) => p.matches(&ev.server),
            (Test::Host(h), _) => canon_host(*h) == canon_host(Host::of(&ev.client)),
            (Test::Protocol(p), _) => *p == ev.protocol,
            (Test::Regex(r), Dim::Server) => r.is_match(&ev.server.to_string()),
            (Test::Regex(r), Dim::Client) => r.is_match(&Host::of(&ev.client).to_string()),
            (Test::Regex(r), Dim::Protocol) => r.is_match(ev.protocol.name()),
            (_, Dim::Db) => return self.eval_text(ev.database.as_deref()),
            (_, Dim::User) => return self.eval_text(ev.user.as_deref()),
            (_, Dim::Command) => return self.eval_text(Some(ev.command)),
            (_, Dim::Process) => {
                return self.eval_text(ev.peer.as_deref().map(|p| &*p.comm));
            }
            _ => false,
        };
        hit != self.negate
    }

    /// A text test on a value that may be unknown (`None`): `=` with an empty value matches
    /// unknown; a regular expression never matches unknown.
    fn eval_text(&self, v: Option<&str>) -> bool {
        let hit = match (&self.test, v) {
            (Test::Text(t), Some(v)) => t == v,
            (Test::Text(t), None) => t.is_empty(),
            (Test::Regex(r), Some(v)) => r.is_match(v),
            _ => false,
        };
        hit != self.negate
    }
}

fn parse_expr(e: &str) -> Result<Pred, String> {
    let Some(at) = e.find(['=', '!', '~']) else {
        return Err("expected FIELD=VALUE, FIELD!=VALUE, FIELD~REGEX or FIELD!~REGEX".into());
    };
    let (name, rest) = e.split_at(at);
    // The same names (and aliases) as `--group-by`: one list of dimensions.
    let field = match (name.trim(), Dim::parse(name)) {
        ("", _) => return Err("missing field name".into()),
        (_, Some(d)) => d,
        (other, None) => {
            return Err(format!(
                "unknown field {other:?} (fields: server, db, user, client, process, protocol, \
                 command, fingerprint)"
            ));
        }
    };
    let (negate, regex, value) = if let Some(v) = rest.strip_prefix("!=") {
        (true, false, v)
    } else if let Some(v) = rest.strip_prefix("!~") {
        (true, true, v)
    } else if let Some(v) = rest.strip_prefix('=') {
        (false, false, v)
    } else if let Some(v) = rest.strip_prefix('~') {
        (false, true, v)
    } else {
        return Err("expected an operator: =, !=, ~ or !~".into());
    };
    let value = value.trim();
    let test = if regex {
        Test::Regex(
            regex::RegexBuilder::new(value)
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(|e| one_line(&e.to_string()))?,
        )
    } else {
        match field {
            Dim::Server => Test::Server(parse_server(value)?),
            Dim::Client if value.eq_ignore_ascii_case("local") => Test::Host(Host::Local),
            Dim::Client => {
                Test::Host(Host::Ip(value.parse().map_err(|_| {
                    format!("{value:?} is not an IP address (or local)")
                })?))
            }
            Dim::Protocol => Test::Protocol(parse_protocol(value)?),
            _ => Test::Text(value.to_string()),
        }
    };
    Ok(Pred {
        field,
        negate,
        test,
    })
}

/// `10.0.0.5:3306`, `[::1]:5432`, a Unix socket path (`/run/mysqld/mysqld.sock`, `@name`), a
/// bare address (`10.0.0.5`, `::1`: any port) or `:3306` (any address).
fn parse_server(v: &str) -> Result<ServerPat, String> {
    if let Ok(a) = v.parse::<Endpoint>() {
        return Ok(ServerPat::Exact(a));
    }
    if let Ok(ip) = v.parse::<IpAddr>() {
        return Ok(ServerPat::Ip(ip));
    }
    if let Some(p) = v.strip_prefix(':')
        && let Ok(port) = p.parse::<u16>()
    {
        return Ok(ServerPat::Port(port));
    }
    Err(format!(
        "{v:?} is not ADDRESS:PORT, ADDRESS, :PORT or a socket path (e.g. 10.0.0.5:3306, \
         10.0.0.5, :3306, /run/mysqld/mysqld.sock)"
    ))
}

fn parse_protocol(v: &str) -> Result<Protocol, String> {
    match v.to_ascii_lowercase().as_str() {
        "mysql" | "mariadb" => Ok(Protocol::Mysql),
        "postgres" | "postgresql" | "pg" => Ok(Protocol::Postgres),
        "mongodb" | "mongo" => Ok(Protocol::Mongodb),
        "redis" => Ok(Protocol::Redis),
        _ => Err(format!(
            "unknown protocol {v:?} (mysql, postgres, mongodb, redis)"
        )),
    }
}

/// The regex crate's errors span several lines (pattern, caret, message): keep them on one.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
