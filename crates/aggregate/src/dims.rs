//! Dimensions of query events (fingerprint, server, database, user, client host, client
//! process, protocol, command): what `--group-by` groups by, the values a group keyed by them
//! carries for display, and the bounded per-dimension shares of the load shown in the overall
//! summary.
//!
//! Grouping stays allocation-free: a [`DimSet`] is a `Copy` bitmask, and the values of an event's
//! dimensions are folded into the 64-bit group hash with a fixed-seed hasher (so aggregators built
//! on different threads agree on keys and merge exactly). The display values are copied only when
//! a group is created.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::net::IpAddr;
use std::sync::Arc;

use proto::{Endpoint, Protocol, QueryEvent};

/// One dimension of a query event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    /// The normalized statement (the default grouping).
    Fingerprint,
    /// The server endpoint (address and port, or a Unix socket path).
    Server,
    /// The database (schema) the connection uses, when known.
    Db,
    /// The user the connection logged in as, when known.
    User,
    /// The client host (IP address, without the port; "local" for a Unix socket).
    Client,
    /// The wire protocol.
    Protocol,
    /// The command kind ("query", "execute", ...).
    Command,
    /// The client process's command name, where the source knows it (eBPF).
    /// Last in declaration order so the other dimensions keep their bits.
    Process,
}

impl Dim {
    /// Every dimension, in the canonical display order.
    pub const ALL: [Dim; 8] = [
        Dim::Fingerprint,
        Dim::Server,
        Dim::Db,
        Dim::User,
        Dim::Client,
        Dim::Process,
        Dim::Protocol,
        Dim::Command,
    ];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Dim::Fingerprint => "fingerprint",
            Dim::Server => "server",
            Dim::Db => "db",
            Dim::User => "user",
            Dim::Client => "client",
            Dim::Protocol => "protocol",
            Dim::Command => "command",
            Dim::Process => "process",
        }
    }

    /// Parses a dimension name (case-insensitive; `database`, `host`, `proc` and `comm` are
    /// accepted aliases).
    pub fn parse(s: &str) -> Option<Dim> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fingerprint" | "fp" | "query" => Some(Dim::Fingerprint),
            "server" => Some(Dim::Server),
            "db" | "database" | "schema" => Some(Dim::Db),
            "user" => Some(Dim::User),
            "client" | "host" | "client_host" => Some(Dim::Client),
            "protocol" => Some(Dim::Protocol),
            "command" => Some(Dim::Command),
            "process" | "proc" | "comm" => Some(Dim::Process),
            _ => None,
        }
    }

    const fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of dimensions to group by. `Copy`, compared and hashed as one byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DimSet(u8);

impl Default for DimSet {
    /// Grouping by fingerprint only (dbtap's default).
    fn default() -> Self {
        DimSet::FINGERPRINT
    }
}

impl DimSet {
    /// The default grouping: by fingerprint (within protocol and command).
    pub const FINGERPRINT: DimSet = DimSet(1);

    /// The empty set (everything in one group per protocol).
    pub const fn empty() -> DimSet {
        DimSet(0)
    }

    /// Parses a comma-separated list such as `server,fingerprint`. Errors name the bad item.
    pub fn parse_list(s: &str) -> Result<DimSet, String> {
        let mut set = DimSet::empty();
        for item in s.split(',') {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            match Dim::parse(item) {
                Some(d) => set = set.with(d),
                None => {
                    return Err(format!(
                        "unknown dimension {item:?}: expected fingerprint, server, db, user, \
                         client, process, protocol or command"
                    ));
                }
            }
        }
        if set.0 == 0 {
            return Err("empty --group-by list".to_string());
        }
        Ok(set)
    }

    pub const fn with(self, d: Dim) -> DimSet {
        DimSet(self.0 | d.bit())
    }

    pub fn contains(self, d: Dim) -> bool {
        self.0 & d.bit() != 0
    }

    /// True when the set holds dimensions beyond the fingerprint: groups then carry
    /// [`DimValues`] and their hash folds those values in.
    pub fn has_extra(self) -> bool {
        self.0 & !Dim::Fingerprint.bit() != 0
    }

    /// The dimensions in canonical order.
    pub fn iter(self) -> impl Iterator<Item = Dim> {
        Dim::ALL.into_iter().filter(move |d| self.contains(*d))
    }

    /// `server,fingerprint`-style list in canonical order.
    pub fn names(self) -> String {
        self.iter().map(Dim::name).collect::<Vec<_>>().join(",")
    }

    /// The group hash of `ev` for this set: `fingerprint_hash` unchanged when the set is the
    /// fingerprint alone; otherwise a fixed-seed hash of the fingerprint hash (0 when the
    /// fingerprint is not grouped) and of each grouped dimension's value. Allocation-free.
    pub fn group_hash(self, ev: &QueryEvent, fingerprint_hash: u64) -> u64 {
        if !self.has_extra() {
            return fingerprint_hash;
        }
        let mut h = hasher();
        self.0.hash(&mut h);
        if self.contains(Dim::Fingerprint) {
            fingerprint_hash.hash(&mut h);
        }
        if self.contains(Dim::Server) {
            ev.server.hash(&mut h);
        }
        if self.contains(Dim::Db) {
            ev.database.as_deref().hash(&mut h);
        }
        if self.contains(Dim::User) {
            ev.user.as_deref().hash(&mut h);
        }
        if self.contains(Dim::Client) {
            Host::of(&ev.client).hash(&mut h);
        }
        if self.contains(Dim::Process) {
            comm(ev).hash(&mut h);
        }
        // Protocol and command are fields of the group key already.
        h.finish()
    }

    /// The display values of `ev`'s grouped dimensions (copied once per new group).
    pub fn values(self, ev: &QueryEvent) -> DimValues {
        DimValues {
            set: self,
            protocol: ev.protocol,
            command: ev.command,
            server: self.contains(Dim::Server).then(|| ev.server.clone()),
            client: self.contains(Dim::Client).then(|| Host::of(&ev.client)),
            process: self
                .contains(Dim::Process)
                .then(|| ev.peer.as_ref().map(|p| p.comm.clone()))
                .flatten(),
            database: self
                .contains(Dim::Db)
                .then(|| ev.database.clone())
                .flatten(),
            user: self.contains(Dim::User).then(|| ev.user.clone()).flatten(),
        }
    }
}

fn hasher() -> impl Hasher {
    foldhash::fast::FixedState::with_seed(0x6469_6d73).build_hasher()
}

/// The value shown for an unknown database, user or process.
pub const UNKNOWN: &str = "(unknown)";

/// The client process's command name of an event, when known.
fn comm(ev: &QueryEvent) -> Option<&str> {
    ev.peer.as_deref().map(|p| &*p.comm)
}

/// A client host: an IP address, or a local client on a Unix domain socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Host {
    Ip(IpAddr),
    /// Connected through a Unix domain socket (shown as "local").
    Local,
}

impl Host {
    /// The host of an endpoint: its IP address, or `Local` for a Unix socket.
    pub fn of(e: &Endpoint) -> Host {
        e.ip().map_or(Host::Local, Host::Ip)
    }
}

impl Hash for Host {
    /// An IP host hashes as its `IpAddr` (group keys by client are what they were when hosts
    /// were plain addresses).
    fn hash<H: Hasher>(&self, h: &mut H) {
        match self {
            Host::Ip(ip) => ip.hash(h),
            Host::Local => h.write_u8(0xfe),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Ip(ip) => fmt::Display::fmt(ip, f),
            Host::Local => f.pad("local"),
        }
    }
}

/// The dimension values of a group keyed by more than its fingerprint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimValues {
    /// The dimensions the group is keyed by.
    pub set: DimSet,
    pub protocol: Protocol,
    pub command: &'static str,
    pub server: Option<Endpoint>,
    pub client: Option<Host>,
    /// `None` when not grouped by database or when the database is unknown.
    pub database: Option<Arc<str>>,
    pub user: Option<Arc<str>>,
    /// The client process's command name; `None` when not grouped by process or unknown.
    pub process: Option<Arc<str>>,
}

impl DimValues {
    /// `(dimension, value)` for each grouped dimension other than the fingerprint, in
    /// canonical order.
    pub fn fields(&self) -> Vec<(Dim, String)> {
        let text = |v: &Option<Arc<str>>| v.as_deref().unwrap_or(UNKNOWN).to_string();
        self.set
            .iter()
            .filter_map(|d| {
                let v = match d {
                    Dim::Fingerprint => return None,
                    Dim::Server => self.server.as_ref().map(|s| s.to_string())?,
                    Dim::Client => self.client.map(|c| c.to_string())?,
                    Dim::Db => text(&self.database),
                    Dim::User => text(&self.user),
                    Dim::Process => text(&self.process),
                    Dim::Protocol => self.protocol.name().to_string(),
                    Dim::Command => self.command.to_string(),
                };
                Some((d, v))
            })
            .collect()
    }

    /// `server=127.0.0.1:6379 db=shop`: the grouped dimensions other than the fingerprint.
    pub fn label(&self) -> String {
        self.fields()
            .iter()
            .map(|(d, v)| format!("{}={v}", d.name()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Distinct (protocol, server, client host, database, user, process) combinations whose shares
/// are kept exactly; events of later new combinations are counted in [`DimShares::other`].
pub const SHARES_CAP: usize = 4096;

/// Count and service time of a set of events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Share {
    pub count: u64,
    /// Sum of service times, nanoseconds.
    pub service_ns: u128,
}

impl Share {
    fn add(&mut self, o: &Share) {
        self.count = self.count.saturating_add(o.count);
        self.service_ns = self.service_ns.saturating_add(o.service_ns);
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Combo {
    protocol: Protocol,
    server: Endpoint,
    client: Host,
    database: Option<Arc<str>>,
    user: Option<Arc<str>>,
    /// The client process's command name, when known.
    process: Option<Arc<str>>,
    share: Share,
}

/// How the load splits over the values of each dimension: bounded exact counts and service
/// times per (protocol, server, client host, database, user, process) combination, from which
/// each dimension's shares are summed. One fixed-seed hash and one lookup per event, no
/// allocation once a combination is known. Mergeable exactly while under [`SHARES_CAP`].
#[derive(Clone, Debug, Default)]
pub struct DimShares {
    /// Combination hash to its place in `combos`.
    index: HashMap<u64, usize, foldhash::fast::FixedState>,
    combos: Vec<Combo>,
    other: Share,
    /// The place in `combos` of the combination of the last event recorded: events come in
    /// runs of one combination, and comparing an event's values with that combination's (the
    /// same values that are hashed, strings compared by address first) skips the hash of the
    /// strings and the lookup. Connections of one combination share it (each connection's
    /// database and user are their own allocations; their text is compared).
    last: Option<usize>,
}

impl Combo {
    /// Whether `ev`, whose client host is `client`, belongs to this combination: its hashed
    /// values are equal.
    #[inline]
    fn matches(&self, ev: &QueryEvent, client: Host) -> bool {
        fn same(a: &Option<Arc<str>>, b: Option<&Arc<str>>) -> bool {
            match (a, b) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b) || **a == **b,
                _ => false,
            }
        }
        self.protocol == ev.protocol
            && self.server == ev.server
            && self.client == client
            && same(&self.database, ev.database.as_ref())
            && same(&self.user, ev.user.as_ref())
            && same(&self.process, ev.peer.as_ref().map(|p| &p.comm))
    }
}

impl PartialEq for DimShares {
    /// The same combinations with the same shares (in whatever order they were first seen).
    fn eq(&self, o: &DimShares) -> bool {
        self.other == o.other
            && self.index.len() == o.index.len()
            && self.index.iter().all(|(h, &i)| {
                o.index
                    .get(h)
                    .and_then(|&j| o.combos.get(j))
                    .is_some_and(|c| self.combos.get(i) == Some(c))
            })
    }
}

impl Eq for DimShares {}

/// The top values of one dimension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimShare {
    pub dim: Dim,
    /// `(value, share)`, largest service time first (ties: count, then value).
    pub values: Vec<(String, Share)>,
    /// Events of combinations beyond [`SHARES_CAP`]: their value is not known.
    pub other: Share,
}

impl DimShares {
    fn combo_hash(ev: &QueryEvent, client: Host) -> u64 {
        let mut h = hasher();
        ev.protocol.hash(&mut h);
        ev.server.hash(&mut h);
        client.hash(&mut h);
        ev.database.as_deref().hash(&mut h);
        ev.user.as_deref().hash(&mut h);
        // Only when known: combinations without a process hash as they did before it existed.
        if let Some(c) = comm(ev) {
            c.hash(&mut h);
        }
        h.finish()
    }

    /// Counts one event.
    pub fn record(&mut self, ev: &QueryEvent) {
        self.record_host(ev, Host::of(&ev.client));
    }

    /// [`record`](DimShares::record) of an event whose client host the caller has already
    /// taken (`client` is `Host::of(&ev.client)`). The event of the last combination is
    /// counted inline; another takes the out-of-line path.
    #[inline(always)]
    pub(crate) fn record_host(&mut self, ev: &QueryEvent, client: Host) {
        let share = Share {
            count: 1,
            service_ns: ev.service_ns().map_or(0, u128::from),
        };
        if let Some(c) = self
            .last
            .and_then(|i| self.combos.get_mut(i))
            .filter(|c| c.matches(ev, client))
        {
            c.share.add(&share);
            return;
        }
        self.record_new(ev, client, share);
    }

    /// [`record_host`](DimShares::record_host) of an event of another combination than the
    /// last one.
    #[inline(never)]
    fn record_new(&mut self, ev: &QueryEvent, client: Host, share: Share) {
        let h = Self::combo_hash(ev, client);
        let i = match self.index.get(&h) {
            Some(&i) => i,
            None if self.combos.len() < SHARES_CAP => {
                self.index.insert(h, self.combos.len());
                self.combos.push(Combo {
                    protocol: ev.protocol,
                    server: ev.server.clone(),
                    client,
                    database: ev.database.clone(),
                    user: ev.user.clone(),
                    process: ev.peer.as_ref().map(|p| p.comm.clone()),
                    share: Share::default(),
                });
                self.combos.len() - 1
            }
            None => {
                self.other.add(&share);
                return;
            }
        };
        if let Some(c) = self.combos.get_mut(i) {
            c.share.add(&share);
        }
        self.last = Some(i);
    }

    /// Adds everything `o` counted (its combinations in a deterministic order).
    pub fn merge(&mut self, o: &DimShares) {
        let mut keys: Vec<(&u64, &usize)> = o.index.iter().collect();
        keys.sort_unstable();
        for (h, &j) in keys {
            let Some(oc) = o.combos.get(j) else { continue };
            if let Some(c) = self.index.get(h).and_then(|&i| self.combos.get_mut(i)) {
                c.share.add(&oc.share);
            } else if self.combos.len() < SHARES_CAP {
                self.index.insert(*h, self.combos.len());
                self.combos.push(oc.clone());
            } else {
                self.other.add(&oc.share);
            }
        }
        self.other.add(&o.other);
    }

    /// Multiplies every count and time by `n`.
    pub fn scale(&mut self, n: u64) {
        let f = |s: &mut Share| {
            s.count = s.count.saturating_mul(n);
            s.service_ns = s.service_ns.saturating_mul(u128::from(n));
        };
        for c in &mut self.combos {
            f(&mut c.share);
        }
        f(&mut self.other);
    }

    /// Events of combinations beyond [`SHARES_CAP`].
    pub fn other(&self) -> Share {
        self.other
    }

    /// Every value of `dim` (one of server, db, user, client, process, protocol) with its share,
    /// largest service time first. `None` for fingerprint and command (groups show those).
    pub fn of(&self, dim: Dim) -> Option<DimShare> {
        let name = |v: &Option<Arc<str>>| v.as_deref().unwrap_or(UNKNOWN).to_string();
        let value = |c: &Combo| -> Option<String> {
            Some(match dim {
                Dim::Server => c.server.to_string(),
                Dim::Client => c.client.to_string(),
                Dim::Db => name(&c.database),
                Dim::User => name(&c.user),
                Dim::Process => name(&c.process),
                Dim::Protocol => c.protocol.name().to_string(),
                Dim::Fingerprint | Dim::Command => return None,
            })
        };
        let mut sums: HashMap<String, Share> = HashMap::new();
        for c in &self.combos {
            sums.entry(value(c)?).or_default().add(&c.share);
        }
        let mut values: Vec<(String, Share)> = sums.into_iter().collect();
        values.sort_by(|a, b| {
            b.1.service_ns
                .cmp(&a.1.service_ns)
                .then_with(|| b.1.count.cmp(&a.1.count))
                .then_with(|| a.0.cmp(&b.0))
        });
        Some(DimShare {
            dim,
            values,
            other: self.other,
        })
    }
}

/// What shaped an aggregate: the grouping and the `--where` filter, for report headers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    pub group_by: DimSet,
    /// The filter as given, its expressions joined by ` AND `; empty when none.
    pub filter: String,
}

impl Scope {
    /// True when it differs from the default (fingerprint grouping, no filter).
    pub fn is_default(&self) -> bool {
        self.group_by == DimSet::FINGERPRINT && self.filter.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_lists() {
        let s = DimSet::parse_list("server, fingerprint").unwrap();
        assert!(s.contains(Dim::Server) && s.contains(Dim::Fingerprint));
        assert!(!s.contains(Dim::Db));
        assert_eq!(s.names(), "fingerprint,server");
        assert_eq!(
            DimSet::parse_list("fingerprint").unwrap(),
            DimSet::default()
        );
        assert!(!DimSet::default().has_extra());
        assert!(DimSet::parse_list("db,user").unwrap().has_extra());
        assert!(
            DimSet::parse_list("sever")
                .unwrap_err()
                .contains("\"sever\"")
        );
        assert!(DimSet::parse_list(" , ").is_err());
    }
}
