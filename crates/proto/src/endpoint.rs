//! Where a connection's ends are: an IP socket address or a Unix domain socket path (never a
//! made-up address), and the process at the client end where the source knows it.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// One end of a connection.
///
/// `Ip` is a plain copy of a `SocketAddr` (cloning it allocates nothing); `Unix` shares its
/// path. Ordered IP endpoints first (in `SocketAddr` order), then Unix paths. An `Ip` endpoint
/// hashes exactly as its `SocketAddr` does, so fixed-seed hashes of IP endpoints (group keys
/// grouped by server) are what they were when these fields were `SocketAddr`s.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Endpoint {
    Ip(SocketAddr),
    /// A Unix domain socket: its path, "@name" for an abstract name, "" when unbound.
    Unix(Arc<str>),
}

impl Endpoint {
    /// A Unix domain socket endpoint.
    pub fn unix(path: &str) -> Endpoint {
        Endpoint::Unix(Arc::from(path))
    }

    /// The IP address (`None` for a Unix socket).
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Endpoint::Ip(a) => Some(a.ip()),
            Endpoint::Unix(_) => None,
        }
    }

    /// The port (`None` for a Unix socket).
    pub fn port(&self) -> Option<u16> {
        match self {
            Endpoint::Ip(a) => Some(a.port()),
            Endpoint::Unix(_) => None,
        }
    }

    /// The socket address (`None` for a Unix socket).
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        match self {
            Endpoint::Ip(a) => Some(*a),
            Endpoint::Unix(_) => None,
        }
    }

    /// True for a Unix domain socket.
    pub fn is_unix(&self) -> bool {
        matches!(self, Endpoint::Unix(_))
    }
}

impl Hash for Endpoint {
    fn hash<H: Hasher>(&self, h: &mut H) {
        match self {
            Endpoint::Ip(a) => a.hash(h),
            Endpoint::Unix(p) => {
                h.write_u8(0xff);
                p.hash(h);
            }
        }
    }
}

impl From<SocketAddr> for Endpoint {
    fn from(a: SocketAddr) -> Endpoint {
        Endpoint::Ip(a)
    }
}

impl std::str::FromStr for Endpoint {
    type Err = String;

    /// `10.0.0.5:3306`, `[::1]:5432`, or a Unix socket path (`/…`, or `@name` for an abstract
    /// one): the inverse of `Display` for bound endpoints.
    fn from_str(s: &str) -> Result<Endpoint, String> {
        if let Ok(a) = s.parse::<SocketAddr>() {
            Ok(Endpoint::Ip(a))
        } else if s.starts_with('/') || s.starts_with('@') {
            Ok(Endpoint::unix(s))
        } else {
            Err(format!(
                "{s:?} is not ADDRESS:PORT or a Unix socket path (/..., @name)"
            ))
        }
    }
}

impl fmt::Display for Endpoint {
    /// `127.0.0.1:3306` (exactly `SocketAddr`'s form, padding and all), a Unix socket's path,
    /// or `unix` for an unbound one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Ip(a) => fmt::Display::fmt(a, f),
            Endpoint::Unix(p) if p.is_empty() => f.pad("unix"),
            Endpoint::Unix(p) => f.pad(p),
        }
    }
}

/// A process at one end of a connection (the client end: the peer of the traced server).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Process {
    pub pid: u32,
    /// The command name (the kernel's `comm`, at most 15 bytes).
    pub comm: Arc<str>,
}

impl fmt::Display for Process {
    /// `psql[4242]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.comm, self.pid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_socketaddr_or_path() {
        for s in [
            "127.0.0.1:3306",
            "[::1]:5432",
            "[fe80::1%2]:6379",
            "10.0.0.5:0",
        ] {
            let a: SocketAddr = s.parse().unwrap();
            let e = Endpoint::from(a);
            assert_eq!(e.to_string(), a.to_string());
            assert_eq!(format!("{e:>24}|{e:<24}|"), format!("{a:>24}|{a:<24}|"));
            assert_eq!((e.ip(), e.port()), (Some(a.ip()), Some(a.port())));
            assert!(!e.is_unix());
        }
        let u = Endpoint::unix("/run/mysqld/mysqld.sock");
        assert_eq!(u.to_string(), "/run/mysqld/mysqld.sock");
        assert_eq!(format!("{u:>25}"), "  /run/mysqld/mysqld.sock");
        assert_eq!((u.ip(), u.port(), u.socket_addr()), (None, None, None));
        assert!(u.is_unix());
        assert_eq!(Endpoint::unix("").to_string(), "unix");
        assert_eq!(Endpoint::unix("@pg").to_string(), "@pg");
        for s in ["127.0.0.1:3306", "[::1]:5432", "/tmp/.s.PGSQL.5432", "@pg"] {
            assert_eq!(s.parse::<Endpoint>().unwrap().to_string(), s);
        }
        assert!("/x".parse::<Endpoint>().unwrap().is_unix());
        for bad in ["", "unix", "127.0.0.1", "host:80", "x/y"] {
            assert!(bad.parse::<Endpoint>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ordering_ip_first_then_paths() {
        let a = Endpoint::from("10.0.0.2:1".parse::<SocketAddr>().unwrap());
        let b = Endpoint::from("10.0.0.10:1".parse::<SocketAddr>().unwrap());
        let (u1, u2) = (Endpoint::unix("/a.sock"), Endpoint::unix("/b.sock"));
        let u2_ = u2.clone();
        let mut v = vec![u2.clone(), b.clone(), u1.clone(), a.clone()];
        v.sort();
        assert_eq!(v, vec![a.clone(), b, u1.clone(), u2]);
        assert_eq!(a, a.clone());
        assert_ne!(u1, Endpoint::unix("/a.sock2"));
        let p = Process {
            pid: 42,
            comm: Arc::from("psql"),
        };
        assert_eq!(p.to_string(), "psql[42]");
        let hash = |x: &dyn Fn(&mut std::hash::DefaultHasher)| {
            let mut h = std::hash::DefaultHasher::new();
            x(&mut h);
            h.finish()
        };
        let sa: SocketAddr = "10.0.0.2:1".parse().unwrap();
        assert_eq!(hash(&|h| a.hash(h)), hash(&|h| sa.hash(h)));
        assert_ne!(hash(&|h| u1.hash(h)), hash(&|h| u2_.hash(h)));
        assert!(
            p < Process {
                pid: 43,
                comm: Arc::from("a")
            }
        );
    }
}
