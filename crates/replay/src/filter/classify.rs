//! Which captured requests can write and which set the connection's state, from the command
//! kind and text the pipeline gave their event. Conservative: what is not known to be
//! read-only counts as a write (`--read-only` leaves it out).

use proto::Protocol;

/// Whether the request of an event (protocol, command kind, text) can write. SQL is judged by
/// its first keyword (`SELECT`, `SHOW`, `EXPLAIN`, ... are reads; `SELECT ... INTO`, a `WITH`
/// holding `INSERT`/`UPDATE`/`DELETE`, `EXPLAIN ANALYZE` of a write and `SET GLOBAL` are
/// writes); an unknown text is a write. A function called by a `SELECT` that writes is beyond
/// what the wire tells.
pub fn writes(p: Protocol, command: &str, text: Option<&str>) -> bool {
    match p {
        Protocol::Mysql => match command {
            "query" | "execute" | "bulk_execute" => text.is_none_or(sql_writes),
            "prepare" | "close" | "reset" | "send_long_data" | "fetch" | "init_db" | "ping"
            | "quit" | "set_option" | "field_list" | "statistics" | "reset_connection"
            | "change_user" | "process_info" | "connect" => false,
            _ => true,
        },
        Protocol::Postgres => match command {
            "query" | "execute" => text.is_none_or(sql_writes),
            "fetch" | "prepare" | "describe" | "bind" | "close" | "cancel" | "terminate" => false,
            _ => true,
        },
        Protocol::Redis => redis_writes(command, text.unwrap_or_default()),
        Protocol::Mongodb => mongo_writes(command, text.unwrap_or_default()),
    }
}

/// Whether the request sets the connection's state (database, session variables, login,
/// transaction boundaries): kept in a session whose other requests a filter leaves out.
pub fn sets_state(p: Protocol, command: &str, text: Option<&str>) -> bool {
    match p {
        Protocol::Mysql => match command {
            "init_db" | "set_option" | "reset_connection" | "change_user" => true,
            // A prepared BEGIN/COMMIT (sysbench's) too, with its prepare.
            "query" | "execute" | "prepare" => text.is_some_and(sql_sets_state),
            _ => false,
        },
        Protocol::Postgres => {
            matches!(command, "query" | "execute" | "prepare") && text.is_some_and(sql_sets_state)
        }
        Protocol::Redis => matches!(
            command,
            "select"
                | "auth"
                | "hello"
                | "client"
                | "multi"
                | "exec"
                | "discard"
                | "watch"
                | "unwatch"
                | "readonly"
                | "readwrite"
                | "reset"
        ),
        Protocol::Mongodb => false,
    }
}

/// The first keyword of a SQL text (lower case), after white space, comments and opening
/// parentheses, with the rest of the text after it.
pub(crate) fn first_word(sql: &str) -> (String, &str) {
    let mut s = sql;
    loop {
        let t = s.trim_start_matches(|c: char| c.is_whitespace() || c == '(');
        if let Some(r) = t.strip_prefix("/*") {
            s = r
                .find("*/")
                .map_or("", |i| r.get(i + 2..).unwrap_or_default());
        } else if t.starts_with("--") || t.starts_with('#') {
            s = t
                .find('\n')
                .map_or("", |i| t.get(i + 1..).unwrap_or_default());
        } else {
            s = t;
            break;
        }
    }
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    let (w, rest) = s.split_at(end);
    (w.to_ascii_lowercase(), rest)
}

/// Whether `text` holds `word` as a whole word (ASCII case-insensitive).
fn has_word(text: &str, word: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    let b = lower.as_bytes();
    let is_w = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut from = 0;
    while let Some(i) = lower.get(from..).and_then(|s| s.find(word)) {
        let at = from + i;
        let before = at
            .checked_sub(1)
            .and_then(|j| b.get(j))
            .is_some_and(|&c| is_w(c));
        let after = b.get(at + word.len()).is_some_and(|&c| is_w(c));
        if !before && !after {
            return true;
        }
        from = at + word.len();
    }
    false
}

const WRITE_WORDS: [&str; 8] = [
    "insert", "update", "delete", "merge", "replace", "upsert", "truncate", "into",
];

fn sql_writes(text: &str) -> bool {
    let (w, rest) = first_word(text);
    match w.as_str() {
        "select" | "values" | "table" => has_word(rest, "into") || has_word(rest, "nextval"),
        "with" => WRITE_WORDS.iter().any(|k| has_word(rest, k)) || has_word(rest, "nextval"),
        "explain" | "describe" | "desc" => {
            // EXPLAIN ANALYZE runs the statement.
            has_word(rest, "analyze") && WRITE_WORDS.iter().any(|k| has_word(rest, k))
        }
        "show" | "help" | "checksum" | "handler" | "fetch" | "move" | "close" | "listen"
        | "unlisten" | "deallocate" | "prepare" | "discard" | "reset" | "declare" => false,
        _ => !sql_sets_state(text),
    }
}

fn sql_sets_state(text: &str) -> bool {
    let (w, rest) = first_word(text);
    match w.as_str() {
        "use" | "begin" | "commit" | "rollback" | "savepoint" | "release" | "end" | "abort"
        | "unlock" | "discard" | "reset" => true,
        "start" => first_word(rest).0 == "transaction",
        // SET GLOBAL / PERSIST (and @@global.) change the server, not the session.
        "set" => {
            let (next, _) = first_word(rest);
            !matches!(next.as_str(), "global" | "persist" | "persist_only")
                && !rest.to_ascii_lowercase().contains("@@global")
                && !rest.to_ascii_lowercase().contains("@@persist")
        }
        _ => false,
    }
}

/// Redis commands that never write the keyspace or the server's configuration.
const REDIS_READS: &[&str] = &[
    "asking",
    "auth",
    "bitcount",
    "bitfield_ro",
    "bitpos",
    "command",
    "dbsize",
    "discard",
    "dump",
    "echo",
    "eval_ro",
    "evalsha_ro",
    "exec",
    "exists",
    "expiretime",
    "fcall_ro",
    "geodist",
    "geohash",
    "geopos",
    "georadius_ro",
    "georadiusbymember_ro",
    "geosearch",
    "get",
    "getbit",
    "getrange",
    "hello",
    "hexists",
    "hexpiretime",
    "hget",
    "hgetall",
    "hkeys",
    "hlen",
    "hmget",
    "hpexpiretime",
    "hpttl",
    "hrandfield",
    "hscan",
    "hstrlen",
    "httl",
    "hvals",
    "info",
    "keys",
    "lastsave",
    "lcs",
    "lindex",
    "llen",
    "lolwut",
    "lpos",
    "lrange",
    "mget",
    "multi",
    "object",
    "pexpiretime",
    "pfcount",
    "ping",
    "psubscribe",
    "pttl",
    "pubsub",
    "punsubscribe",
    "quit",
    "randomkey",
    "readonly",
    "readwrite",
    "reset",
    "role",
    "scan",
    "scard",
    "sdiff",
    "select",
    "sinter",
    "sintercard",
    "sismember",
    "smembers",
    "smismember",
    "sort_ro",
    "srandmember",
    "sscan",
    "ssubscribe",
    "strlen",
    "subscribe",
    "substr",
    "sunion",
    "sunsubscribe",
    "time",
    "ttl",
    "type",
    "unsubscribe",
    "unwatch",
    "watch",
    "xinfo",
    "xlen",
    "xpending",
    "xrange",
    "xread",
    "xrevrange",
    "zcard",
    "zcount",
    "zdiff",
    "zinter",
    "zintercard",
    "zlexcount",
    "zmscore",
    "zrandmember",
    "zrange",
    "zrangebylex",
    "zrangebyscore",
    "zrank",
    "zrevrange",
    "zrevrangebylex",
    "zrevrangebyscore",
    "zrevrank",
    "zscan",
    "zscore",
    "zunion",
];

/// Subcommands of Redis container commands that only read.
const REDIS_READ_SUBS: &[(&str, &[&str])] = &[
    (
        "acl",
        &["cat", "getuser", "list", "users", "whoami", "log", "dryrun"],
    ),
    (
        "client",
        &[
            "getname",
            "id",
            "info",
            "list",
            "setname",
            "setinfo",
            "tracking",
            "trackinginfo",
            "getredir",
            "caching",
            "reply",
            "no-evict",
            "no-touch",
        ],
    ),
    (
        "cluster",
        &[
            "info",
            "nodes",
            "slots",
            "shards",
            "keyslot",
            "countkeysinslot",
            "getkeysinslot",
            "myid",
            "myshardid",
            "links",
        ],
    ),
    ("config", &["get"]),
    ("function", &["list", "dump", "stats"]),
    (
        "latency",
        &["doctor", "graph", "histogram", "history", "latest"],
    ),
    ("memory", &["doctor", "malloc-stats", "stats", "usage"]),
    ("module", &["list"]),
    ("script", &["exists"]),
    ("slowlog", &["get", "len"]),
];

fn redis_writes(command: &str, text: &str) -> bool {
    let command = command.to_ascii_lowercase();
    if REDIS_READS.binary_search(&command.as_str()).is_ok() {
        return false;
    }
    let Some((_, subs)) = REDIS_READ_SUBS.iter().find(|(c, _)| *c == command) else {
        return true;
    };
    let sub = text
        .split_ascii_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_ascii_lowercase();
    !subs.contains(&sub.as_str())
}

/// MongoDB commands that only read (an aggregate with `$out` or `$merge` writes).
const MONGO_READS: &[&str] = &[
    "buildinfo",
    "collstats",
    "connectionstatus",
    "count",
    "dbstats",
    "distinct",
    "endsessions",
    "explain",
    "find",
    "getlasterror",
    "getmore",
    "getparameter",
    "hello",
    "hostinfo",
    "ismaster",
    "killcursors",
    "listcollections",
    "listdatabases",
    "listindexes",
    "ping",
    "saslcontinue",
    "saslstart",
    "serverstatus",
    "whatsmyuri",
];

fn mongo_writes(command: &str, text: &str) -> bool {
    let c = command.to_ascii_lowercase();
    if c == "aggregate" {
        return text.contains("$out") || text.contains("$merge");
    }
    !MONGO_READS.contains(&c.as_str())
}

#[cfg(test)]
pub(crate) const REDIS_READS_FOR_TESTS: &[&str] = REDIS_READS;
