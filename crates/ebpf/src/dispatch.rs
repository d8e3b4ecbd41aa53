//! Turning decoded ring records into `Event`s: the user-space state of the traced sockets (who
//! used each last, where its data ended), shared by the tracer and its ring callback.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::record::{self, Raw};
use crate::{Addr, Event, Stats};

/// Cap on sockets remembered in user space (owner pid, data seen: for closes at process exit
/// and gaps at the end).
const MAX_SOCKS: usize = 1 << 20;

/// Where events go when the ring callback hands them out itself (no copy of the records).
pub(crate) type Sink = Box<dyn FnMut(Event<'_>)>;

/// What user space knows of a socket it announced.
#[derive(Clone, Copy, Debug, Default)]
struct SockSeen {
    /// The process that last used it (its exit closes the socket).
    pid: u32,
    /// The end of the last data seen, [outbound, inbound].
    next: [u64; 2],
    /// Whether the last data was TLS plaintext.
    tls: bool,
    /// The traced process is the client: its reads are server->client.
    outgoing: bool,
    /// Missing from its process's descriptors at the last sweep (closed at the next miss).
    missing: bool,
}

/// The dispatch state.
pub(crate) struct Core {
    socks: HashMap<u64, SockSeen, foldhash::fast::RandomState>,
    spare: SockSeen,
    pub(crate) stats: Stats,
    mono_to_real: i128,
    ports: Vec<u16>,
    /// The kernel's socket table: final offsets of the sockets of an exited process.
    socks_map: Option<MapHandle>,
    /// Set: the ring callback dispatches each record to it straight from the ring.
    sink: Option<Sink>,
    /// Events handed to the sink since the last `take_delivered`.
    delivered: usize,
    /// With the socket tracepoints (no accept(2) or connect(2) seen): the sockets the traced
    /// processes held when tracing began. Any other socket was opened since, so its stream is
    /// seen from its start.
    pub(crate) preexisting: Option<HashSet<u64>>,
}

impl Core {
    pub(crate) fn new(
        mono_to_real: i128,
        ports: Vec<u16>,
        socks_map: Option<MapHandle>,
        sink: Option<Sink>,
    ) -> Core {
        Core {
            socks: HashMap::default(),
            spare: SockSeen::default(),
            stats: Stats::default(),
            mono_to_real,
            ports,
            socks_map,
            sink,
            delivered: 0,
            preexisting: None,
        }
    }

    /// More server ports for telling a TCP connection's direction.
    /// Counts the sockets processes `pids` hold now as open before tracing began (seen
    /// mid-stream); only on the socket tracepoints, where `preexisting` is set.
    pub(crate) fn add_preexisting(&mut self, pids: impl Iterator<Item = u32>) {
        if let Some(pre) = self.preexisting.as_mut() {
            for pid in pids {
                pre.extend(crate::procfs::socket_inodes(pid).unwrap_or_default());
            }
        }
    }

    pub(crate) fn add_ports(&mut self, ports: Vec<u16>) {
        self.ports.extend(ports);
        self.ports.sort_unstable();
        self.ports.dedup();
    }

    pub(crate) fn has_sink(&self) -> bool {
        self.sink.is_some()
    }

    /// The events the sink got since the last call.
    pub(crate) fn take_delivered(&mut self) -> usize {
        std::mem::take(&mut self.delivered)
    }

    /// One ring record to the sink (the ring callback of a tracer started with one).
    pub(crate) fn sink_record(&mut self, rec: &[u8]) {
        let Some(mut sink) = self.sink.take() else {
            return;
        };
        self.delivered += self.dispatch(rec, &mut *sink);
        self.sink = Some(sink);
    }

    /// `f`, or the sink when there is one.
    pub(crate) fn with_out<R>(
        &mut self,
        f: &mut dyn FnMut(Event<'_>),
        g: impl FnOnce(&mut Core, &mut dyn FnMut(Event<'_>)) -> R,
    ) -> R {
        match self.sink.take() {
            Some(mut sink) => {
                let r = g(self, &mut *sink);
                self.sink = Some(sink);
                r
            }
            None => g(self, f),
        }
    }

    fn real(&self, mono: u64) -> u64 {
        u64::try_from(i128::from(mono) + self.mono_to_real).unwrap_or(0)
    }

    pub(crate) fn dispatch(&mut self, rec: &[u8], f: &mut dyn FnMut(Event<'_>)) -> usize {
        self.stats.records += 1;
        let Some(raw) = record::decode(rec) else {
            self.stats.bad_records += 1;
            return 0;
        };
        match raw {
            Raw::Open {
                sock,
                ts,
                pid,
                local,
                peer,
                peer_pid,
                accepted,
                outgoing,
            } => {
                if self.socks.contains_key(&sock) {
                    // Announced late (the ring had no room for the first Open): its data came
                    // first and an Open was made for it then.
                    self.stats.late_opens += 1;
                    return 0;
                }
                let accepted = accepted
                    || self
                        .preexisting
                        .as_ref()
                        .is_some_and(|p| !p.contains(&sock));
                let outgoing = outgoing
                    || match self.preexisting {
                        // No connect(2) is seen with the socket tracepoints: a TCP connection
                        // whose local port nothing listens on was connected out.
                        Some(_) => local_port_not_listening(&self.ports, &local),
                        None => !accepted && connected_to_server(&self.ports, &local, &peer),
                    };
                let s = self.seen(sock);
                s.pid = pid;
                s.outgoing = outgoing;
                let ts_ns = self.real(ts);
                f(Event::Open {
                    sock,
                    ts_ns,
                    pid,
                    local,
                    peer,
                    peer_pid,
                    accepted,
                    outgoing,
                });
                1
            }
            Raw::Data {
                sock,
                ts,
                pid,
                inbound,
                offset,
                len,
                bytes,
                tls,
            } => self.data(sock, ts, pid, inbound, offset, len, bytes, tls, f),
            Raw::Close { sock, ts, ends, .. } => self.close(sock, ts, Some(ends), f),
            Raw::Exit { ts, pid } => self.exited(pid, ts, f),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn data(
        &mut self,
        sock: u64,
        ts: u64,
        pid: u32,
        inbound: bool,
        offset: u64,
        len: u64,
        bytes: &[u8],
        tls: bool,
        f: &mut dyn FnMut(Event<'_>),
    ) -> usize {
        let ts_ns = self.real(ts);
        self.stats.data_records += 1;
        self.stats.bytes += bytes.len() as u64;
        let mut n = 1;
        let full = self.socks.len() >= MAX_SOCKS;
        // One hash lookup per record.
        let s = match self.socks.entry(sock) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                self.stats.synthesized_opens += 1;
                let unknown = Addr::Unix(String::new());
                let peer = unknown.clone();
                f(Event::Open {
                    sock,
                    ts_ns,
                    pid,
                    local: unknown,
                    peer,
                    peer_pid: None,
                    accepted: false,
                    outgoing: false,
                });
                n += 1;
                if full {
                    self.spare = SockSeen::default();
                    &mut self.spare
                } else {
                    e.insert(SockSeen::default())
                }
            }
        };
        s.pid = pid;
        s.tls = tls;
        let d = &mut s.next[usize::from(inbound)];
        *d = (*d).max(offset.saturating_add(len));
        let inbound = inbound != s.outgoing;
        f(Event::Data {
            sock,
            ts_ns,
            pid,
            inbound,
            offset,
            len,
            bytes,
            tls,
        });
        n
    }

    /// The user-space state of `sock` (not remembered beyond `MAX_SOCKS` sockets).
    fn seen(&mut self, sock: u64) -> &mut SockSeen {
        if self.socks.len() >= MAX_SOCKS && !self.socks.contains_key(&sock) {
            self.spare = SockSeen::default();
            return &mut self.spare;
        }
        self.socks.entry(sock).or_default()
    }

    /// Closes `sock`; bytes the kernel counted (`ends`) but no record brought (lost at the
    /// very end) become a gap first.
    pub(crate) fn close(
        &mut self,
        sock: u64,
        ts: u64,
        ends: Option<[u64; 2]>,
        f: &mut dyn FnMut(Event<'_>),
    ) -> usize {
        let ts_ns = self.real(ts);
        // One close per open: a socket closed already (its last user exited while a process
        // it was shared with still held it, then closed it) or never announced is not closed.
        let Some(s) = self.socks.remove(&sock) else {
            self.stats.unknown_closes += 1;
            return 0;
        };
        let mut n = 1;
        if let Some(ends) = ends {
            for (dir, &end) in ends.iter().enumerate() {
                let next = s.next[dir];
                if end > next {
                    // An empty record at the end offset: the bytes before it were lost (a
                    // gap), not cut by the copy limit.
                    let (pid, inbound, tls) = (s.pid, (dir == 1) != s.outgoing, s.tls);
                    f(Event::Data {
                        sock,
                        ts_ns,
                        pid,
                        inbound,
                        offset: end,
                        len: 0,
                        bytes: &[],
                        tls,
                    });
                    n += 1;
                }
            }
        }
        f(Event::Close { sock, ts_ns });
        n
    }

    /// A traced process exited: the sockets it used last closed without close(2).
    fn exited(&mut self, pid: u32, ts: u64, f: &mut dyn FnMut(Event<'_>)) -> usize {
        let gone: Vec<u64> = self
            .socks
            .iter()
            .filter(|(_, s)| s.pid == pid)
            .map(|(&k, _)| k)
            .collect();
        self.stats.exit_closes += gone.len() as u64;
        self.close_all(gone, ts, f)
    }

    /// The processes that used the open sockets last, each once.
    pub(crate) fn socket_users(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.socks.values().map(|s| s.pid).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// A sweep of the traced processes' descriptors (`held`: the socket inodes of each process
    /// that used an open socket last, from `socket_users`; a process missing holds nothing): a
    /// socket its process no longer holds in two sweeps in a row is closed (the first miss may be
    /// a socket whose last records are still on their way through the ring). One pass over the
    /// sockets.
    pub(crate) fn sweep(
        &mut self,
        held: &HashMap<u32, HashSet<u64>>,
        ts: u64,
        f: &mut dyn FnMut(Event<'_>),
    ) -> usize {
        let mut gone = Vec::new();
        for (&k, s) in self.socks.iter_mut() {
            if held.get(&s.pid).is_some_and(|h| h.contains(&k)) {
                s.missing = false;
            } else if s.missing {
                gone.push(k);
            } else {
                s.missing = true;
            }
        }
        self.stats.swept_closes += gone.len() as u64;
        self.close_all(gone, ts, f)
    }

    /// Closes `gone`, their final offsets taken from the kernel's socket table.
    fn close_all(&mut self, gone: Vec<u64>, ts: u64, f: &mut dyn FnMut(Event<'_>)) -> usize {
        let ends: Vec<(u64, Option<[u64; 2]>)> = match &self.socks_map {
            None => gone.iter().map(|&s| (s, None)).collect(),
            Some(m) => gone
                .iter()
                .map(|&sock| {
                    let key = sock.to_le_bytes();
                    let v = m.lookup(&key, MapFlags::ANY).ok().flatten();
                    let _ = m.delete(&key);
                    let ends = v.and_then(|v| {
                        let out = u64::from_le_bytes(v.get(..8)?.try_into().ok()?);
                        Some([out, u64::from_le_bytes(v.get(8..16)?.try_into().ok()?)])
                    });
                    (sock, ends)
                })
                .collect(),
        };
        let mut n = 0;
        for (sock, ends) in ends {
            n += self.close(sock, ts, ends, f);
        }
        n
    }
}

/// A TCP connection first seen mid-stream whose local port is none of the configured server
/// ports and whose peer's is: the traced process connected out to a server (it is the client).
fn connected_to_server(ports: &[u16], local: &Addr, peer: &Addr) -> bool {
    match (local, peer) {
        (Addr::Ip(l), Addr::Ip(p)) => !ports.contains(&l.port()) && ports.contains(&p.port()),
        _ => false,
    }
}

/// A TCP connection whose local port is none of `ports` (the server ports and the ports
/// listening on the host): the traced process connected out (an accepted connection has its
/// listener's port).
fn local_port_not_listening(ports: &[u16], local: &Addr) -> bool {
    matches!(local, Addr::Ip(l) if !ports.contains(&l.port()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tcp_connection_to_a_server_port_from_another_port_is_outgoing() {
        let ip = |s: &str| Addr::Ip(s.parse().unwrap());
        let ports = [6379];
        let out = |l: &str, p: &str| connected_to_server(&ports, &ip(l), &ip(p));
        assert!(out("127.0.0.1:40000", "127.0.0.1:6379"));
        assert!(!out("127.0.0.1:6379", "127.0.0.1:40000"));
        assert!(!out("127.0.0.1:6379", "127.0.0.1:6379"));
        assert!(!out("127.0.0.1:40000", "127.0.0.1:5432"));
        let unix = Addr::Unix("/run/redis.sock".into());
        assert!(!connected_to_server(&ports, &unix, &ip("127.0.0.1:6379")));
    }

    #[test]
    fn a_tcp_connection_from_a_port_nothing_listens_on_is_outgoing() {
        let ip = |s: &str| Addr::Ip(s.parse().unwrap());
        let listening = [22, 6379];
        assert!(local_port_not_listening(&listening, &ip("10.0.0.5:40000")));
        assert!(!local_port_not_listening(&listening, &ip("127.0.0.1:6379")));
        assert!(!local_port_not_listening(
            &listening,
            &Addr::Unix("/run/redis.sock".into())
        ));
    }
}
