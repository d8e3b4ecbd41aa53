//! `--where` filters: expressions such as `db=shop`, `user!=monitor`, `server=10.0.0.5:3306` or
//! `fingerprint~^select`, parsed once and evaluated per event (all must hold).
//!
//! Evaluation is cheap and allocation-free on the hot path: equality tests compare in place, and
//! regular expressions on the fingerprint are evaluated once per fingerprint hash and cached
//! (the cache is bounded: it is cleared when full). Parsing never panics; a bad expression is a
//! one-line error.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use proto::{Protocol, QueryEvent};

use crate::dims::Dim;
use regex::Regex;

/// Fingerprint hashes whose verdict is cached; past it the cache starts over.
const FP_CACHE_MAX: usize = 1 << 16;
/// (predicate, address) verdicts cached; past it the cache starts over.
const ADDR_CACHE_MAX: usize = 1 << 14;
/// Longest compiled regular expression, bytes (a pathological pattern is refused, not run).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

#[derive(Clone, Debug)]
enum Test {
    /// `server=`: an exact endpoint, any port of an address, or a port on any address.
    Server(ServerPat),
    /// `client=`: a host address.
    Ip(IpAddr),
    /// `protocol=`.
    Protocol(Protocol),
    /// Exact text (db, user, command, fingerprint); for db and user the empty string matches an
    /// unknown value.
    Text(String),
    /// `~`: a regular expression on the field's text.
    Regex(Regex),
}

#[derive(Clone, Copy, Debug)]
enum ServerPat {
    Exact(SocketAddr),
    Ip(IpAddr),
    Port(u16),
}

impl ServerPat {
    fn matches(self, a: SocketAddr) -> bool {
        match self {
            ServerPat::Exact(e) => e == a,
            ServerPat::Ip(ip) => canon(ip) == canon(a.ip()),
            ServerPat::Port(p) => a.port() == p,
        }
    }
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
    addr_cache: HashMap<(usize, SocketAddr), bool>,
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
                        Dim::Server => ev.server,
                        _ => SocketAddr::new(ev.client.ip(), 0),
                    };
                    if let Some(&v) = self.addr_cache.get(&(i, a)) {
                        v
                    } else {
                        let v = p.eval(ev);
                        if self.addr_cache.len() >= ADDR_CACHE_MAX {
                            self.addr_cache.clear();
                        }
                        self.addr_cache.insert((i, a), v);
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
            (Test::Server(p), _) => p.matches(ev.server),
            (Test::Ip(ip), _) => canon(*ip) == canon(ev.client.ip()),
            (Test::Protocol(p), _) => *p == ev.protocol,
            (Test::Regex(r), Dim::Server) => r.is_match(&ev.server.to_string()),
            (Test::Regex(r), Dim::Client) => r.is_match(&ev.client.ip().to_string()),
            (Test::Regex(r), Dim::Protocol) => r.is_match(ev.protocol.name()),
            (_, Dim::Db) => return self.eval_text(ev.database.as_deref()),
            (_, Dim::User) => return self.eval_text(ev.user.as_deref()),
            (_, Dim::Command) => return self.eval_text(Some(ev.command)),
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
                "unknown field {other:?} (fields: server, db, user, client, protocol, command, \
                 fingerprint)"
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
            Dim::Client => Test::Ip(
                value
                    .parse()
                    .map_err(|_| format!("{value:?} is not an IP address"))?,
            ),
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

/// `10.0.0.5:3306`, `[::1]:5432`, a bare address (`10.0.0.5`, `::1`: any port) or `:3306` (any
/// address).
fn parse_server(v: &str) -> Result<ServerPat, String> {
    if let Ok(a) = v.parse::<SocketAddr>() {
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
        "{v:?} is not ADDRESS:PORT, ADDRESS or :PORT (e.g. 10.0.0.5:3306, 10.0.0.5, :3306)"
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
