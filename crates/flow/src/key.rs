//! Flow keys: the 4-tuple of a connection, normalized so that both directions map to one key.

use std::net::{IpAddr, SocketAddr};

/// One end of a connection. Built from the address and port only: IPv6 flow info and scope id
/// (which may vary between packets of one connection) are not part of the identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Endpoint {
    pub ip: IpAddr,
    pub port: u16,
}

impl From<SocketAddr> for Endpoint {
    fn from(a: SocketAddr) -> Self {
        Endpoint {
            ip: a.ip(),
            port: a.port(),
        }
    }
}

/// Normalized 4-tuple: `lo` is the smaller endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct FlowKey {
    lo: Endpoint,
    hi: Endpoint,
}

impl FlowKey {
    /// The key of a segment from `src` to `dst`, and whether `src` is the key's `lo` end.
    pub fn new(src: SocketAddr, dst: SocketAddr) -> (FlowKey, bool) {
        let (s, d) = (Endpoint::from(src), Endpoint::from(dst));
        if s <= d {
            (FlowKey { lo: s, hi: d }, true)
        } else {
            (FlowKey { lo: d, hi: s }, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_directions_one_key() {
        let a: SocketAddr = "10.0.0.1:3306".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:50000".parse().unwrap();
        let (k1, s1) = FlowKey::new(a, b);
        let (k2, s2) = FlowKey::new(b, a);
        assert_eq!(k1, k2);
        assert_ne!(s1, s2);
        let v6a: SocketAddr = "[::1]:3306".parse().unwrap();
        let v6b: SocketAddr = "[::1]:40000".parse().unwrap();
        let (k3, _) = FlowKey::new(v6a, v6b);
        let (k4, _) = FlowKey::new(v6b, v6a);
        assert_eq!(k3, k4);
        assert_ne!(k1, k3);
    }
}
