//! TEMPORARY copies of `proto::Endpoint` and `proto::Process` (replaced by proto::Endpoint at
//! merge: delete this file and point the `pub use` in lib.rs at `proto::{Endpoint, Process}`).
//! The definitions follow I12-INTERFACES.md exactly.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// Where a connection end sits: an IP socket address or a Unix domain socket.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Endpoint {
    Ip(SocketAddr),
    /// A Unix domain socket: its path, "@name" for an abstract name, "" when unbound.
    Unix(Arc<str>),
}

impl Endpoint {
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Endpoint::Ip(a) => Some(a.ip()),
            Endpoint::Unix(_) => None,
        }
    }
    pub fn port(&self) -> Option<u16> {
        match self {
            Endpoint::Ip(a) => Some(a.port()),
            Endpoint::Unix(_) => None,
        }
    }
    pub fn is_unix(&self) -> bool {
        matches!(self, Endpoint::Unix(_))
    }
}

impl From<SocketAddr> for Endpoint {
    fn from(a: SocketAddr) -> Self {
        Endpoint::Ip(a)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Ip(a) => a.fmt(f),
            Endpoint::Unix(p) if p.is_empty() => f.write_str("unix"),
            Endpoint::Unix(p) => f.write_str(p),
        }
    }
}

/// A process on this host: the client of a traced connection.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Process {
    pub pid: u32,
    pub comm: Arc<str>,
}
