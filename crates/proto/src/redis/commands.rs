//! The Redis command table: every command of Redis 7.x (generated from a 7.0.15 server's
//! `COMMAND INFO` by `tests/data/redis/gen_command_table.py`, plus the 7.2/7.4 additions and
//! the hash-field commands of 8.0), with where each command's first key is. Pure data.

/// Where a command's first key is, from its first key specification.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KeyRule {
    /// No key (PING, INFO, SELECT, AUTH, HELLO, MULTI, EXEC, PUBLISH, ...).
    #[default]
    None,
    /// The argument at this index (the command name is index 0).
    At(u32),
    /// A key count at `count_at`, the keys from `first` on (EVAL, FCALL, ZUNION, LMPOP...).
    Numkeys { count_at: u32, first: u32 },
    /// The argument after the first `keyword` found at index `from` or later (XREAD STREAMS).
    After { keyword: &'static str, from: u32 },
}

/// One command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandInfo {
    /// Lower case, as in [`crate::QueryEvent::command`].
    pub name: &'static str,
    /// The command has subcommands (CONFIG GET, CLIENT LIST, XINFO STREAM, ...).
    pub container: bool,
    pub key: KeyRule,
}

const fn c(name: &'static str, container: bool, key: KeyRule) -> CommandInfo {
    CommandInfo {
        name,
        container,
        key,
    }
}

/// Every known command, sorted by name.
pub static COMMANDS: &[CommandInfo] = &[
    c("acl", true, KeyRule::None),
    c("append", false, KeyRule::At(1)),
    c("asking", false, KeyRule::None),
    c("auth", false, KeyRule::None),
    c("bgrewriteaof", false, KeyRule::None),
    c("bgsave", false, KeyRule::None),
    c("bitcount", false, KeyRule::At(1)),
    c("bitfield", false, KeyRule::At(1)),
    c("bitfield_ro", false, KeyRule::At(1)),
    c("bitop", false, KeyRule::At(2)),
    c("bitpos", false, KeyRule::At(1)),
    c("blmove", false, KeyRule::At(1)),
    c(
        "blmpop",
        false,
        KeyRule::Numkeys {
            count_at: 2,
            first: 3,
        },
    ),
    c("blpop", false, KeyRule::At(1)),
    c("brpop", false, KeyRule::At(1)),
    c("brpoplpush", false, KeyRule::At(1)),
    c(
        "bzmpop",
        false,
        KeyRule::Numkeys {
            count_at: 2,
            first: 3,
        },
    ),
    c("bzpopmax", false, KeyRule::At(1)),
    c("bzpopmin", false, KeyRule::At(1)),
    c("client", true, KeyRule::None),
    c("cluster", true, KeyRule::None),
    c("command", true, KeyRule::None),
    c("config", true, KeyRule::None),
    c("copy", false, KeyRule::At(1)),
    c("dbsize", false, KeyRule::None),
    c("debug", false, KeyRule::None),
    c("decr", false, KeyRule::At(1)),
    c("decrby", false, KeyRule::At(1)),
    c("del", false, KeyRule::At(1)),
    c("discard", false, KeyRule::None),
    c("dump", false, KeyRule::At(1)),
    c("echo", false, KeyRule::None),
    c(
        "eval",
        false,
        KeyRule::Numkeys {
            count_at: 2,
            first: 3,
        },
    ),
    c(
        "eval_ro",
        false,
        KeyRule::Numkeys {
            count_at: 2,
            first: 3,
        },
    ),
    c(
        "evalsha",
        false,
        KeyRule::Numkeys {
            count_at: 2,
            first: 3,
        },
    ),
    c(
        "evalsha_ro",
        false,
        KeyRule::Numkeys {
            count_at: 2,
            first: 3,
        },
    ),
    c("exec", false, KeyRule::None),
    c("exists", false, KeyRule::At(1)),
    c("expire", false, KeyRule::At(1)),
    c("expireat", false, KeyRule::At(1)),
    c("expiretime", false, KeyRule::At(1)),
    c("failover", false, KeyRule::None),
    c(
        "fcall",
        false,
        KeyRule::Numkeys {
            count_at: 2,
            first: 3,
        },
    ),
    c(
        "fcall_ro",
        false,
        KeyRule::Numkeys {
            count_at: 2,
            first: 3,
        },
    ),
    c("flushall", false, KeyRule::None),
    c("flushdb", false, KeyRule::None),
    c("function", true, KeyRule::None),
    c("geoadd", false, KeyRule::At(1)),
    c("geodist", false, KeyRule::At(1)),
    c("geohash", false, KeyRule::At(1)),
    c("geopos", false, KeyRule::At(1)),
    c("georadius", false, KeyRule::At(1)),
    c("georadius_ro", false, KeyRule::At(1)),
    c("georadiusbymember", false, KeyRule::At(1)),
    c("georadiusbymember_ro", false, KeyRule::At(1)),
    c("geosearch", false, KeyRule::At(1)),
    c("geosearchstore", false, KeyRule::At(1)),
    c("get", false, KeyRule::At(1)),
    c("getbit", false, KeyRule::At(1)),
    c("getdel", false, KeyRule::At(1)),
    c("getex", false, KeyRule::At(1)),
    c("getrange", false, KeyRule::At(1)),
    c("getset", false, KeyRule::At(1)),
    c("hdel", false, KeyRule::At(1)),
    c("hello", false, KeyRule::None),
    c("hexists", false, KeyRule::At(1)),
    c("hexpire", false, KeyRule::At(1)),
    c("hexpireat", false, KeyRule::At(1)),
    c("hexpiretime", false, KeyRule::At(1)),
    c("hget", false, KeyRule::At(1)),
    c("hgetall", false, KeyRule::At(1)),
    c("hgetdel", false, KeyRule::At(1)),
    c("hgetex", false, KeyRule::At(1)),
    c("hincrby", false, KeyRule::At(1)),
    c("hincrbyfloat", false, KeyRule::At(1)),
    c("hkeys", false, KeyRule::At(1)),
    c("hlen", false, KeyRule::At(1)),
    c("hmget", false, KeyRule::At(1)),
    c("hmset", false, KeyRule::At(1)),
    c("hpersist", false, KeyRule::At(1)),
    c("hpexpire", false, KeyRule::At(1)),
    c("hpexpireat", false, KeyRule::At(1)),
    c("hpexpiretime", false, KeyRule::At(1)),
    c("hpttl", false, KeyRule::At(1)),
    c("hrandfield", false, KeyRule::At(1)),
    c("hscan", false, KeyRule::At(1)),
    c("hset", false, KeyRule::At(1)),
    c("hsetex", false, KeyRule::At(1)),
    c("hsetnx", false, KeyRule::At(1)),
    c("hstrlen", false, KeyRule::At(1)),
    c("httl", false, KeyRule::At(1)),
    c("hvals", false, KeyRule::At(1)),
    c("incr", false, KeyRule::At(1)),
    c("incrby", false, KeyRule::At(1)),
    c("incrbyfloat", false, KeyRule::At(1)),
    c("info", false, KeyRule::None),
    c("keys", false, KeyRule::None),
    c("lastsave", false, KeyRule::None),
    c("latency", true, KeyRule::None),
    c("lcs", false, KeyRule::At(1)),
    c("lindex", false, KeyRule::At(1)),
    c("linsert", false, KeyRule::At(1)),
    c("llen", false, KeyRule::At(1)),
    c("lmove", false, KeyRule::At(1)),
    c(
        "lmpop",
        false,
        KeyRule::Numkeys {
            count_at: 1,
            first: 2,
        },
    ),
    c("lolwut", false, KeyRule::None),
    c("lpop", false, KeyRule::At(1)),
    c("lpos", false, KeyRule::At(1)),
    c("lpush", false, KeyRule::At(1)),
    c("lpushx", false, KeyRule::At(1)),
    c("lrange", false, KeyRule::At(1)),
    c("lrem", false, KeyRule::At(1)),
    c("lset", false, KeyRule::At(1)),
    c("ltrim", false, KeyRule::At(1)),
    c("memory", true, KeyRule::None),
    c("mget", false, KeyRule::At(1)),
    c("migrate", false, KeyRule::At(3)),
    c("module", true, KeyRule::None),
    c("monitor", false, KeyRule::None),
    c("move", false, KeyRule::At(1)),
    c("mset", false, KeyRule::At(1)),
    c("msetnx", false, KeyRule::At(1)),
    c("multi", false, KeyRule::None),
    c("object", true, KeyRule::None),
    c("persist", false, KeyRule::At(1)),
    c("pexpire", false, KeyRule::At(1)),
    c("pexpireat", false, KeyRule::At(1)),
    c("pexpiretime", false, KeyRule::At(1)),
    c("pfadd", false, KeyRule::At(1)),
    c("pfcount", false, KeyRule::At(1)),
    c("pfdebug", false, KeyRule::At(2)),
    c("pfmerge", false, KeyRule::At(1)),
    c("pfselftest", false, KeyRule::None),
    c("ping", false, KeyRule::None),
    c("psetex", false, KeyRule::At(1)),
    c("psubscribe", false, KeyRule::None),
    c("psync", false, KeyRule::None),
    c("pttl", false, KeyRule::At(1)),
    c("publish", false, KeyRule::None),
    c("pubsub", true, KeyRule::None),
    c("punsubscribe", false, KeyRule::None),
    c("quit", false, KeyRule::None),
    c("randomkey", false, KeyRule::None),
    c("readonly", false, KeyRule::None),
    c("readwrite", false, KeyRule::None),
    c("rename", false, KeyRule::At(1)),
    c("renamenx", false, KeyRule::At(1)),
    c("replconf", false, KeyRule::None),
    c("replicaof", false, KeyRule::None),
    c("reset", false, KeyRule::None),
    c("restore", false, KeyRule::At(1)),
    c("restore-asking", false, KeyRule::At(1)),
    c("role", false, KeyRule::None),
    c("rpop", false, KeyRule::At(1)),
    c("rpoplpush", false, KeyRule::At(1)),
    c("rpush", false, KeyRule::At(1)),
    c("rpushx", false, KeyRule::At(1)),
    c("sadd", false, KeyRule::At(1)),
    c("save", false, KeyRule::None),
    c("scan", false, KeyRule::None),
    c("scard", false, KeyRule::At(1)),
    c("script", true, KeyRule::None),
    c("sdiff", false, KeyRule::At(1)),
    c("sdiffstore", false, KeyRule::At(1)),
    c("select", false, KeyRule::None),
    c("set", false, KeyRule::At(1)),
    c("setbit", false, KeyRule::At(1)),
    c("setex", false, KeyRule::At(1)),
    c("setnx", false, KeyRule::At(1)),
    c("setrange", false, KeyRule::At(1)),
    c("shutdown", false, KeyRule::None),
    c("sinter", false, KeyRule::At(1)),
    c(
        "sintercard",
        false,
        KeyRule::Numkeys {
            count_at: 1,
            first: 2,
        },
    ),
    c("sinterstore", false, KeyRule::At(1)),
    c("sismember", false, KeyRule::At(1)),
    c("slaveof", false, KeyRule::None),
    c("slowlog", true, KeyRule::None),
    c("smembers", false, KeyRule::At(1)),
    c("smismember", false, KeyRule::At(1)),
    c("smove", false, KeyRule::At(1)),
    c("sort", false, KeyRule::At(1)),
    c("sort_ro", false, KeyRule::At(1)),
    c("spop", false, KeyRule::At(1)),
    c("spublish", false, KeyRule::At(1)),
    c("srandmember", false, KeyRule::At(1)),
    c("srem", false, KeyRule::At(1)),
    c("sscan", false, KeyRule::At(1)),
    c("ssubscribe", false, KeyRule::At(1)),
    c("strlen", false, KeyRule::At(1)),
    c("subscribe", false, KeyRule::None),
    c("substr", false, KeyRule::At(1)),
    c("sunion", false, KeyRule::At(1)),
    c("sunionstore", false, KeyRule::At(1)),
    c("sunsubscribe", false, KeyRule::At(1)),
    c("swapdb", false, KeyRule::None),
    c("sync", false, KeyRule::None),
    c("time", false, KeyRule::None),
    c("touch", false, KeyRule::At(1)),
    c("ttl", false, KeyRule::At(1)),
    c("type", false, KeyRule::At(1)),
    c("unlink", false, KeyRule::At(1)),
    c("unsubscribe", false, KeyRule::None),
    c("unwatch", false, KeyRule::None),
    c("wait", false, KeyRule::None),
    c("waitaof", false, KeyRule::None),
    c("watch", false, KeyRule::At(1)),
    c("xack", false, KeyRule::At(1)),
    c("xadd", false, KeyRule::At(1)),
    c("xautoclaim", false, KeyRule::At(1)),
    c("xclaim", false, KeyRule::At(1)),
    c("xdel", false, KeyRule::At(1)),
    c("xgroup", true, KeyRule::None),
    c("xinfo", true, KeyRule::None),
    c("xlen", false, KeyRule::At(1)),
    c("xpending", false, KeyRule::At(1)),
    c("xrange", false, KeyRule::At(1)),
    c(
        "xread",
        false,
        KeyRule::After {
            keyword: "STREAMS",
            from: 1,
        },
    ),
    c(
        "xreadgroup",
        false,
        KeyRule::After {
            keyword: "STREAMS",
            from: 4,
        },
    ),
    c("xrevrange", false, KeyRule::At(1)),
    c("xsetid", false, KeyRule::At(1)),
    c("xtrim", false, KeyRule::At(1)),
    c("zadd", false, KeyRule::At(1)),
    c("zcard", false, KeyRule::At(1)),
    c("zcount", false, KeyRule::At(1)),
    c(
        "zdiff",
        false,
        KeyRule::Numkeys {
            count_at: 1,
            first: 2,
        },
    ),
    c("zdiffstore", false, KeyRule::At(1)),
    c("zincrby", false, KeyRule::At(1)),
    c(
        "zinter",
        false,
        KeyRule::Numkeys {
            count_at: 1,
            first: 2,
        },
    ),
    c(
        "zintercard",
        false,
        KeyRule::Numkeys {
            count_at: 1,
            first: 2,
        },
    ),
    c("zinterstore", false, KeyRule::At(1)),
    c("zlexcount", false, KeyRule::At(1)),
    c(
        "zmpop",
        false,
        KeyRule::Numkeys {
            count_at: 1,
            first: 2,
        },
    ),
    c("zmscore", false, KeyRule::At(1)),
    c("zpopmax", false, KeyRule::At(1)),
    c("zpopmin", false, KeyRule::At(1)),
    c("zrandmember", false, KeyRule::At(1)),
    c("zrange", false, KeyRule::At(1)),
    c("zrangebylex", false, KeyRule::At(1)),
    c("zrangebyscore", false, KeyRule::At(1)),
    c("zrangestore", false, KeyRule::At(1)),
    c("zrank", false, KeyRule::At(1)),
    c("zrem", false, KeyRule::At(1)),
    c("zremrangebylex", false, KeyRule::At(1)),
    c("zremrangebyrank", false, KeyRule::At(1)),
    c("zremrangebyscore", false, KeyRule::At(1)),
    c("zrevrange", false, KeyRule::At(1)),
    c("zrevrangebylex", false, KeyRule::At(1)),
    c("zrevrangebyscore", false, KeyRule::At(1)),
    c("zrevrank", false, KeyRule::At(1)),
    c("zscan", false, KeyRule::At(1)),
    c("zscore", false, KeyRule::At(1)),
    c(
        "zunion",
        false,
        KeyRule::Numkeys {
            count_at: 1,
            first: 2,
        },
    ),
    c("zunionstore", false, KeyRule::At(1)),
];

/// Subcommands of container commands that take a key: (container, subcommand, rule).
pub static KEYED_SUBCOMMANDS: &[(&str, &str, KeyRule)] = &[
    ("memory", "usage", KeyRule::At(2)),
    ("object", "encoding", KeyRule::At(2)),
    ("object", "freq", KeyRule::At(2)),
    ("object", "idletime", KeyRule::At(2)),
    ("object", "refcount", KeyRule::At(2)),
    ("xgroup", "create", KeyRule::At(2)),
    ("xgroup", "createconsumer", KeyRule::At(2)),
    ("xgroup", "delconsumer", KeyRule::At(2)),
    ("xgroup", "destroy", KeyRule::At(2)),
    ("xgroup", "setid", KeyRule::At(2)),
    ("xinfo", "consumers", KeyRule::At(2)),
    ("xinfo", "groups", KeyRule::At(2)),
    ("xinfo", "stream", KeyRule::At(2)),
];

/// Case-insensitive byte comparison of an ASCII lower-case table name with `b`.
fn cmp_ci(name: &str, b: &[u8]) -> std::cmp::Ordering {
    name.bytes().cmp(b.iter().map(u8::to_ascii_lowercase))
}

/// The longest name looked up (longer ones are in no table).
const LOOKUP_MAX: usize = 32;

/// The command named `name` (any case). The name is lower-cased once into a stack buffer,
/// then the table is binary-searched with plain byte-slice comparisons (per-byte case
/// folding inside every comparison was 7 % of a pipelined Redis digest).
pub fn lookup(name: &[u8]) -> Option<&'static CommandInfo> {
    let mut buf = [0u8; LOOKUP_MAX];
    let lower = buf.get_mut(..name.len())?;
    for (d, s) in lower.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    let lower: &[u8] = lower;
    COMMANDS
        .binary_search_by(|c| c.name.as_bytes().cmp(lower))
        .ok()
        .and_then(|i| COMMANDS.get(i))
}

/// Where the key of subcommand `sub` (any case) of container `container` is.
pub fn subcommand_key(container: &str, sub: &[u8]) -> KeyRule {
    KEYED_SUBCOMMANDS
        .iter()
        .find(|(c, s, _)| *c == container && cmp_ci(s, sub).is_eq())
        .map_or(KeyRule::None, |x| x.2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_lower_case_and_unique() {
        for w in COMMANDS.windows(2) {
            assert!(w[0].name < w[1].name, "{} / {}", w[0].name, w[1].name);
        }
        for c in COMMANDS {
            assert!(
                c.name.bytes().all(|b| b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || b == b'_'
                    || b == b'-'),
                "{}",
                c.name
            );
        }
        assert!(COMMANDS.len() > 250);
    }

    #[test]
    fn lookups() {
        assert_eq!(lookup(b"GET").unwrap().key, KeyRule::At(1));
        assert_eq!(lookup(b"get").unwrap().name, "get");
        assert_eq!(lookup(b"hSeT").unwrap().name, "hset");
        assert!(lookup(b"config").unwrap().container);
        assert_eq!(lookup(b"PING").unwrap().key, KeyRule::None);
        assert_eq!(
            lookup(b"EVALSHA").unwrap().key,
            KeyRule::Numkeys {
                count_at: 2,
                first: 3
            }
        );
        assert_eq!(
            lookup(b"xreadgroup").unwrap().key,
            KeyRule::After {
                keyword: "STREAMS",
                from: 4
            }
        );
        assert_eq!(lookup(b"restore-asking").unwrap().key, KeyRule::At(1));
        assert!(lookup(b"nope").is_none());
        assert!(lookup(b"").is_none());
        assert!(lookup(&[0xFF; 40]).is_none());
        assert_eq!(subcommand_key("object", b"ENCODING"), KeyRule::At(2));
        assert_eq!(subcommand_key("config", b"GET"), KeyRule::None);
        for name in [
            "hexpire",
            "waitaof",
            "lpush",
            "blpop",
            "client",
            "function",
            "sintercard",
        ] {
            assert!(lookup(name.as_bytes()).is_some(), "{name}");
        }
    }
}
