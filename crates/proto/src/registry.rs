//! The protocol registry: what each protocol declares about itself (default ports, how its
//! connections are recognised from bytes alone, how a session is opened, what its command
//! names mean), and detection over all of them.
//!
//! Each protocol module defines its own [`ProtocolSpec`] as `SPEC`, next to its code, and
//! [`REGISTRY`] lists them. Callers (the binary, a future stream source) iterate the registry
//! and never name a protocol. Detection needs no port: [`detect`] looks at bytes only, so a
//! stream from a Unix socket is recognised as well as one from a known TCP port.

use crate::{ConnMeta, Direction, Session, SessionConfig};
use crate::{mongodb, mysql, postgres, redis};

/// The database protocols dbtap understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    Mysql,
    Postgres,
    Mongodb,
    Redis,
}

impl Protocol {
    /// The stable lower-case name used in every output.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Mysql => "mysql",
            Protocol::Postgres => "postgres",
            Protocol::Mongodb => "mongodb",
            Protocol::Redis => "redis",
        }
    }
}

/// Every protocol, in detection priority order (see [`detect`]); their default ports are
/// listed in this order too. Adding a protocol is one line here (see ARCHITECTURE.md,
/// "Adding a protocol").
pub static REGISTRY: &[&ProtocolSpec] =
    &[&mysql::SPEC, &postgres::SPEC, &redis::SPEC, &mongodb::SPEC];

/// Whether some bytes look like a message of one protocol. Pure, total, never panics.
pub type Recognizer = fn(&[u8]) -> bool;

/// What a protocol declares about itself.
pub struct ProtocolSpec {
    pub protocol: Protocol,
    /// Ports its servers listen on by default: a connection to one is this protocol at once.
    pub default_ports: &'static [u16],
    /// How its connections are recognised from bytes, without any port.
    pub detect: Detection,
    /// Opens the session for one connection.
    pub new_session: fn(ConnMeta, SessionConfig) -> Box<dyn Session>,
    /// What a command name of [`crate::QueryEvent::command`] means.
    pub command_facts: fn(&'static str) -> CommandFacts,
    /// The group text of an event whose command carries no statement text (MySQL names its
    /// commands the way pt-query-digest does, `administrator command: Ping`; the others use
    /// the command name).
    pub text_without_statement: fn(&str) -> String,
}

/// How a protocol's connections are recognised from their bytes. Each recognizer demands whole
/// structures (a length that fits, a known type or command), because one protocol's bytes can
/// read as another's header: a PostgreSQL Bind as a MySQL packet, and the reverse.
///
/// [`detect`] tries them in three passes, each over [`REGISTRY`] in order, so the strongest
/// evidence wins whatever the order of the protocols: first the opening of a connection whose
/// start was captured (`server_greeting`, `client_startup`), then requests that identify their
/// protocol wherever they appear (`client_request`), and last the weaker structural probes for
/// a connection picked up mid-stream (`client_midstream`).
#[derive(Clone, Copy)]
pub struct Detection {
    /// The first bytes a server sends on a connection it has just accepted (a greeting).
    pub server_greeting: Option<Recognizer>,
    /// The first bytes a client sends on a connection it has just opened (a startup message).
    pub client_startup: Option<Recognizer>,
    /// A client request that names its protocol at any command boundary, first bytes or not
    /// (a Redis command array, a MongoDB message header).
    pub client_request: Option<Recognizer>,
    /// A command boundary on a connection picked up mid-stream, recognised from the shape of
    /// whole messages: one delivery of client bytes holding plausible requests only.
    pub client_midstream: Option<Recognizer>,
    /// The first client bytes of a stream that starts inside TLS, its plaintext opening (a
    /// greeting, a TLS request) not delivered: MySQL's login packet. See [`detect_after_tls`].
    pub client_after_tls: Option<Recognizer>,
}

impl Detection {
    /// No recognizer at all: the protocol is chosen by port only.
    pub const NONE: Detection = Detection {
        server_greeting: None,
        client_startup: None,
        client_request: None,
        client_midstream: None,
        client_after_tls: None,
    };
}

/// Whether the server answers a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Answered, unless the request or the connection says otherwise (a MongoDB `moreToCome`
    /// flag, a Redis `CLIENT REPLY OFF`): the event's outcome tells.
    Answered,
    /// Never answered: the event is emitted when the request is sent, with
    /// [`crate::Outcome::NoReplyExpected`].
    Never,
}

/// What a protocol says about one of its command names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandFacts {
    /// The command runs a statement or a data command (a query, an execution of a prepared
    /// statement, a Redis command, a MongoDB find), as opposed to a protocol step (prepare,
    /// bind, close, fetching the next batch of a cursor, ping, quit).
    pub execution: bool,
    /// Whether the server answers it.
    pub reply: Reply,
    /// The event's text, when present, is a statement to fingerprint; otherwise it is an
    /// argument (MySQL `init_db` carries a schema name) and the group is the command itself.
    pub text_is_statement: bool,
    /// The command the group of its events is filed under: itself, except where the
    /// protocol's own statistics count two commands as one (PostgreSQL files `execute` under
    /// `query`, as pg_stat_statements counts a simple query and an extended-protocol
    /// execution of the same statement as one).
    pub group_under: &'static str,
}

/// The spec of `protocol`, if it is registered.
pub fn spec(protocol: Protocol) -> Option<&'static ProtocolSpec> {
    REGISTRY.iter().copied().find(|s| s.protocol == protocol)
}

/// Every default port with its protocol, in registry order.
pub fn default_ports() -> impl Iterator<Item = (u16, Protocol)> {
    REGISTRY
        .iter()
        .flat_map(|s| s.default_ports.iter().map(|&port| (port, s.protocol)))
}

/// The protocol whose default port is `port`.
pub fn by_default_port(port: u16) -> Option<Protocol> {
    default_ports()
        .find(|&(p, _)| p == port)
        .map(|(_, proto)| proto)
}

/// Which protocol the bytes travelling in `dir` belong to, if any registered one recognises
/// them. `opening` is true when they are the first bytes of a connection whose start was
/// captured; false for bytes of a connection picked up mid-stream (then they should be a whole
/// delivery that starts at a command boundary, which a caller learns by trying again on later
/// deliveries). No port is involved: the same call serves TCP and Unix-socket streams.
pub fn detect(dir: Direction, bytes: &[u8], opening: bool) -> Option<Protocol> {
    let first = |pick: fn(&Detection) -> Option<Recognizer>| {
        REGISTRY
            .iter()
            .find(|s| pick(&s.detect).is_some_and(|r| r(bytes)))
            .map(|s| s.protocol)
    };
    match dir {
        Direction::ToClient if opening => first(|d| d.server_greeting),
        Direction::ToClient => None,
        Direction::ToServer => {
            let startup = if opening {
                first(|d| d.client_startup)
            } else {
                None
            };
            startup.or_else(|| first(|d| d.client_request)).or_else(|| {
                if opening {
                    None
                } else {
                    first(|d| d.client_midstream)
                }
            })
        }
    }
}

/// Which protocol the first bytes of a stream that starts inside TLS belong to (the eBPF
/// source's TLS plaintext when the plaintext before TLS was not delivered,
/// [`ConnMeta::after_tls`]): the client speaks first there, with a login (`client_after_tls`),
/// a startup message (`client_startup`) or a request (`client_request`), tried in that order.
pub fn detect_after_tls(dir: Direction, bytes: &[u8]) -> Option<Protocol> {
    if dir != Direction::ToServer {
        return None;
    }
    let first = |pick: fn(&Detection) -> Option<Recognizer>| {
        REGISTRY
            .iter()
            .find(|s| pick(&s.detect).is_some_and(|r| r(bytes)))
            .map(|s| s.protocol)
    };
    first(|d| d.client_after_tls)
        .or_else(|| first(|d| d.client_startup))
        .or_else(|| first(|d| d.client_request))
}

impl ProtocolSpec {
    /// Whether client bytes at a command boundary of a connection picked up mid-stream look
    /// like this protocol's requests (its `client_request` or `client_midstream` recognizer).
    pub fn looks_like_midstream_request(&self, bytes: &[u8]) -> bool {
        let d = &self.detect;
        d.client_request.is_some_and(|r| r(bytes)) || d.client_midstream.is_some_and(|r| r(bytes))
    }
}

/// The facts of a protocol's command, or those of a plain answered statement when the protocol
/// is not registered.
pub fn command_facts(protocol: Protocol, command: &'static str) -> CommandFacts {
    match spec(protocol) {
        Some(s) => (s.command_facts)(command),
        None => CommandFacts {
            execution: true,
            reply: Reply::Answered,
            text_is_statement: true,
            group_under: command,
        },
    }
}

/// The command a group of `command` events is filed under ([`CommandFacts::group_under`]).
pub fn group_command(protocol: Protocol, command: &'static str) -> &'static str {
    command_facts(protocol, command).group_under
}

/// The group text of an event of `command` that carries no statement text.
pub fn text_without_statement(protocol: Protocol, command: &str) -> String {
    match spec(protocol) {
        Some(s) => (s.text_without_statement)(command),
        None => command.to_string(),
    }
}

/// [`ProtocolSpec::text_without_statement`] for protocols that name such groups by command.
pub fn command_as_text(command: &str) -> String {
    command.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Protocol; 4] = [
        Protocol::Mysql,
        Protocol::Postgres,
        Protocol::Mongodb,
        Protocol::Redis,
    ];

    #[test]
    fn every_protocol_is_registered_once() {
        for p in ALL {
            let n = REGISTRY.iter().filter(|s| s.protocol == p).count();
            assert_eq!(n, 1, "{}", p.name());
        }
        assert_eq!(REGISTRY.len(), ALL.len());
    }

    #[test]
    fn default_ports_are_distinct_and_in_registry_order() {
        let ports: Vec<_> = default_ports().collect();
        assert_eq!(
            ports,
            [
                (3306, Protocol::Mysql),
                (5432, Protocol::Postgres),
                (6379, Protocol::Redis),
                (27017, Protocol::Mongodb)
            ]
        );
        assert_eq!(by_default_port(6379), Some(Protocol::Redis));
        assert_eq!(by_default_port(80), None);
    }

    #[test]
    fn detection_without_ports() {
        use Direction::{ToClient, ToServer};
        let greeting = b"\x0a\x00\x00\x00\x0a8.0.1\x00\x01\x00\x00\x00abcdefgh\x00";
        assert_eq!(detect(ToClient, greeting, true), Some(Protocol::Mysql));
        assert_eq!(detect(ToClient, greeting, false), None);
        let startup = b"\x00\x00\x00\x08\x04\xd2\x16\x2f"; // SSLRequest
        assert_eq!(detect(ToServer, startup, true), Some(Protocol::Postgres));
        let ping = b"*1\r\n$4\r\nPING\r\n";
        assert_eq!(detect(ToServer, ping, true), Some(Protocol::Redis));
        assert_eq!(detect(ToServer, ping, false), Some(Protocol::Redis));
        assert_eq!(detect(ToClient, ping, false), None);
        let query = b"\x09\x00\x00\x00\x03SELECT 1";
        assert_eq!(detect(ToServer, query, false), Some(Protocol::Mysql));
        assert_eq!(
            detect(ToServer, query, true),
            None,
            "mid-stream probes only"
        );
        let pg_query = b"Q\x00\x00\x00\x0dSELECT 1\x00";
        assert_eq!(detect(ToServer, pg_query, false), Some(Protocol::Postgres));
        assert_eq!(detect(ToServer, b"GET / HTTP/1.1\r\n\r\n", false), None);
        assert_eq!(detect(ToServer, b"", false), None);
    }

    #[test]
    fn midstream_probes() {
        let probe =
            |p: Protocol, b: &[u8]| spec(p).is_some_and(|s| s.looks_like_midstream_request(b));
        let query = b"\x09\x00\x00\x00\x03SELECT 1";
        assert!(probe(Protocol::Mysql, query));
        assert!(!probe(Protocol::Postgres, query));
        assert!(probe(Protocol::Postgres, b"Q\x00\x00\x00\x0dSELECT 1\x00"));
        assert!(probe(Protocol::Redis, b"*1\r\n$4\r\nPING\r\n"));
        assert!(!probe(Protocol::Mongodb, b"*1\r\n$4\r\nPING\r\n"));
        // A greeting is no request.
        let greeting = b"\x0a\x00\x00\x00\x0a8.0.1\x00\x01\x00\x00\x00abcdefgh\x00";
        assert!(!probe(Protocol::Mysql, greeting));
    }

    #[test]
    fn command_facts_per_protocol() {
        let facts = |p, c| command_facts(p, c);
        assert!(facts(Protocol::Postgres, "execute").execution);
        assert!(!facts(Protocol::Postgres, "fetch").execution);
        assert_eq!(facts(Protocol::Postgres, "fetch").group_under, "fetch");
        assert_eq!(facts(Protocol::Postgres, "terminate").reply, Reply::Never);
        assert_eq!(facts(Protocol::Mysql, "quit").reply, Reply::Never);
        assert_eq!(facts(Protocol::Mysql, "query").reply, Reply::Answered);
        assert_eq!(facts(Protocol::Mongodb, "op_insert").reply, Reply::Never);
        assert_eq!(facts(Protocol::Mongodb, "insert").reply, Reply::Answered);
        assert!(!facts(Protocol::Mongodb, "getmore").execution);
        assert!(facts(Protocol::Mongodb, "find").execution);
        assert!(facts(Protocol::Redis, "get").execution);
        for p in ALL {
            assert!(facts(p, "query").text_is_statement, "{}", p.name());
        }
    }

    #[test]
    fn grouping_facts() {
        assert_eq!(group_command(Protocol::Postgres, "execute"), "query");
        assert_eq!(group_command(Protocol::Mysql, "execute"), "execute");
        assert_eq!(
            text_without_statement(Protocol::Mysql, "ping"),
            "administrator command: Ping"
        );
        assert_eq!(text_without_statement(Protocol::Redis, "ping"), "ping");
    }
}
