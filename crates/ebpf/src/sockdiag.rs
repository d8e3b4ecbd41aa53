//! Listening sockets from the kernel's sock_diag netlink interface (what `ss -l` uses): TCP
//! listeners with their port and inode, Unix listeners with their path and inode.
//!
//! The periodic rescan asks only for listeners: reading /proc/net/tcp makes the kernel walk the
//! whole established-connection hash table on every read (about 3 % of the tracer thread's
//! samples under load), while a sock_diag dump filtered to the LISTEN state walks the listening
//! table only. The request and the replies are a few fixed C structs, built and read here with
//! checked offsets over rustix's safe netlink socket; a netlink crate (netlink-packet-sock-diag
//! with netlink-sys and netlink-packet-core) would add four crates to the workspace for these
//! ~100 lines. Callers fall back to /proc/net when this fails (e.g. a kernel without unix_diag).

use std::io;
use std::time::Duration;

use rustix::net::netlink::{self, SocketAddrNetlink};
use rustix::net::sockopt::{Timeout, set_socket_timeout};
use rustix::net::{
    AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType, recv, sendto, socket_with,
};

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_HDRLEN: usize = 16;
const TCP_LISTEN: u8 = 10;
const AF_UNIX: u8 = 1;
pub(crate) const AF_INET: u8 = 2;
pub(crate) const AF_INET6: u8 = 10;
const IPPROTO_TCP: u8 = 6;
const UDIAG_SHOW_NAME: u32 = 1;
const UNIX_DIAG_NAME: u16 = 0;
/// struct inet_diag_msg: the source port at 4 (big-endian), the inode at 68.
const INET_DIAG_MSG_LEN: usize = 72;
/// struct unix_diag_msg: state at 2, the inode at 4; attributes follow.
const UNIX_DIAG_MSG_LEN: usize = 16;
/// Bound on the replies read for one dump (a host with this many listeners is not normal).
const MAX_ENTRIES: usize = 1 << 20;

/// What a reply buffer held.
#[derive(Debug, PartialEq)]
pub(crate) enum Step {
    /// More replies follow.
    More,
    /// The dump ended.
    Done,
}

fn header(payload: usize, seq: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(NLMSG_HDRLEN + payload);
    v.extend_from_slice(&((NLMSG_HDRLEN + payload) as u32).to_ne_bytes());
    v.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    v.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    v.extend_from_slice(&seq.to_ne_bytes());
    v.extend_from_slice(&0u32.to_ne_bytes());
    v
}

/// A dump request for the listening TCP sockets of `family` (struct inet_diag_req_v2).
pub(crate) fn inet_request(family: u8, seq: u32) -> Vec<u8> {
    let mut v = header(56, seq);
    v.extend_from_slice(&[family, IPPROTO_TCP, 0, 0]);
    v.extend_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
    v.extend_from_slice(&[0; 48]);
    v
}

/// A dump request for the listening Unix sockets with their names (struct unix_diag_req).
pub(crate) fn unix_request(seq: u32) -> Vec<u8> {
    let mut v = header(24, seq);
    v.extend_from_slice(&[AF_UNIX, 0, 0, 0]);
    v.extend_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
    v.extend_from_slice(&0u32.to_ne_bytes());
    v.extend_from_slice(&UDIAG_SHOW_NAME.to_ne_bytes());
    v.extend_from_slice(&[0; 8]);
    v
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Walks the netlink messages of one reply buffer, handing each payload to `f`.
fn messages(buf: &[u8], f: &mut dyn FnMut(&[u8])) -> io::Result<Step> {
    let mut at = 0;
    while at + NLMSG_HDRLEN <= buf.len() {
        let bad = || io::Error::new(io::ErrorKind::InvalidData, "malformed sock_diag reply");
        let len = u32_at(buf, at).ok_or_else(bad)? as usize;
        let kind = u16_at(buf, at + 4).ok_or_else(bad)?;
        if len < NLMSG_HDRLEN {
            return Err(bad());
        }
        let msg = buf.get(at..at.saturating_add(len)).ok_or_else(bad)?;
        let payload = msg.get(NLMSG_HDRLEN..).unwrap_or_default();
        match kind {
            NLMSG_DONE => return Ok(Step::Done),
            NLMSG_ERROR => {
                let errno = u32_at(payload, 0).map_or(0, |e| e as i32);
                if errno == 0 {
                    return Ok(Step::Done);
                }
                return Err(io::Error::from_raw_os_error(errno.saturating_neg()));
            }
            _ => f(payload),
        }
        at = at.saturating_add((len + 3) & !3);
    }
    Ok(Step::More)
}

/// Listening TCP sockets in one reply buffer: (port, inode) appended to `out`.
pub(crate) fn parse_inet(buf: &[u8], out: &mut Vec<(u16, u64)>) -> io::Result<Step> {
    messages(buf, &mut |p| {
        if p.len() < INET_DIAG_MSG_LEN || p.get(1) != Some(&TCP_LISTEN) {
            return;
        }
        let port = p.get(4..6).map(|b| u16::from_be_bytes([b[0], b[1]]));
        if let (Some(port), Some(ino)) = (port, u32_at(p, 68)) {
            out.push((port, u64::from(ino)));
        }
    })
}

/// A Unix socket name as /proc/net/unix shows it: a path, or `@` and the abstract name (its
/// NUL bytes shown as `@`).
fn unix_name(raw: &[u8]) -> String {
    match raw.split_first() {
        None => String::new(),
        Some((0, rest)) => {
            let s: Vec<u8> = rest
                .iter()
                .map(|&b| if b == 0 { b'@' } else { b })
                .collect();
            format!("@{}", String::from_utf8_lossy(&s))
        }
        Some(_) => {
            let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
            String::from_utf8_lossy(raw.get(..end).unwrap_or_default()).into_owned()
        }
    }
}

/// Listening Unix sockets with a name in one reply buffer: (name, inode) appended to `out`.
pub(crate) fn parse_unix(buf: &[u8], out: &mut Vec<(String, u64)>) -> io::Result<Step> {
    messages(buf, &mut |p| {
        if p.len() < UNIX_DIAG_MSG_LEN || p.get(2) != Some(&TCP_LISTEN) {
            return;
        }
        let Some(ino) = u32_at(p, 4) else { return };
        let mut at = UNIX_DIAG_MSG_LEN;
        while let (Some(len), Some(kind)) = (u16_at(p, at), u16_at(p, at + 2)) {
            let len = usize::from(len);
            if len < 4 {
                return;
            }
            if kind == UNIX_DIAG_NAME {
                if let Some(raw) = p.get(at + 4..at + len)
                    && !raw.is_empty()
                {
                    out.push((unix_name(raw), u64::from(ino)));
                }
                return;
            }
            at += (len + 3) & !3;
        }
    })
}

/// Sends `req` and feeds every reply buffer to `parse` until the dump ends.
fn dump(req: &[u8], parse: &mut dyn FnMut(&[u8]) -> io::Result<Step>) -> io::Result<()> {
    let fd = socket_with(
        AddressFamily::NETLINK,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        Some(netlink::SOCK_DIAG),
    )?;
    set_socket_timeout(&fd, Timeout::Recv, Some(Duration::from_secs(2)))?;
    sendto(&fd, req, SendFlags::empty(), &SocketAddrNetlink::new(0, 0))?;
    let mut buf = vec![0u8; 32 << 10];
    // Each reply carries at least one entry; the bound keeps a misbehaving peer finite.
    for _ in 0..MAX_ENTRIES {
        let (n, _) = recv(&fd, &mut buf[..], RecvFlags::empty())?;
        if n == 0 {
            return Ok(());
        }
        if parse(buf.get(..n).unwrap_or_default())? == Step::Done {
            return Ok(());
        }
    }
    Ok(())
}

/// The listening TCP sockets (IPv4 and IPv6) of this network namespace: (port, inode).
pub fn tcp_listeners() -> io::Result<Vec<(u16, u64)>> {
    let mut out = Vec::new();
    for (seq, family) in [(1, AF_INET), (2, AF_INET6)] {
        dump(&inet_request(family, seq), &mut |b| parse_inet(b, &mut out))?;
    }
    Ok(out)
}

/// The listening Unix sockets with a name: (path or `@`abstract name, inode).
pub fn unix_listeners() -> io::Result<Vec<(String, u64)>> {
    let mut out = Vec::new();
    dump(&unix_request(3), &mut |b| parse_unix(b, &mut out))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn msg(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((NLMSG_HDRLEN + payload.len()) as u32).to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(&[0; 10]);
        v.extend_from_slice(payload);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    fn inet_msg(state: u8, port: u16, ino: u32) -> Vec<u8> {
        let mut p = vec![AF_INET, state, 0, 0];
        p.extend_from_slice(&port.to_be_bytes());
        p.resize(68, 0);
        p.extend_from_slice(&ino.to_ne_bytes());
        msg(SOCK_DIAG_BY_FAMILY, &p)
    }

    fn unix_msg(state: u8, ino: u32, name: Option<&[u8]>) -> Vec<u8> {
        let mut p = vec![AF_UNIX, 1, state, 0];
        p.extend_from_slice(&ino.to_ne_bytes());
        p.extend_from_slice(&[0; 8]);
        // An attribute before the name (UNIX_DIAG_PEER), to be skipped.
        p.extend_from_slice(&8u16.to_ne_bytes());
        p.extend_from_slice(&2u16.to_ne_bytes());
        p.extend_from_slice(&7u32.to_ne_bytes());
        if let Some(n) = name {
            p.extend_from_slice(&((4 + n.len()) as u16).to_ne_bytes());
            p.extend_from_slice(&UNIX_DIAG_NAME.to_ne_bytes());
            p.extend_from_slice(n);
            while p.len() % 4 != 0 {
                p.push(0);
            }
        }
        msg(SOCK_DIAG_BY_FAMILY, &p)
    }

    #[test]
    fn requests_have_the_kernel_struct_sizes() {
        let r = inet_request(AF_INET6, 9);
        assert_eq!(r.len(), 16 + 56);
        assert_eq!(u32_at(&r, 0), Some(72));
        assert_eq!(u16_at(&r, 4), Some(SOCK_DIAG_BY_FAMILY));
        assert_eq!(u32_at(&r, 8), Some(9));
        assert_eq!(r[16], AF_INET6);
        assert_eq!(u32_at(&r, 20), Some(1 << 10));
        let u = unix_request(3);
        assert_eq!(u.len(), 16 + 24);
        assert_eq!(u32_at(&u, 28), Some(UDIAG_SHOW_NAME));
    }

    #[test]
    fn inet_replies() {
        let mut b = inet_msg(TCP_LISTEN, 3306, 4242);
        b.extend(inet_msg(1, 40000, 5));
        b.extend(inet_msg(TCP_LISTEN, 6379, 77));
        let mut out = Vec::new();
        assert_eq!(parse_inet(&b, &mut out).unwrap(), Step::More);
        assert_eq!(out, vec![(3306, 4242), (6379, 77)]);
        let done = msg(NLMSG_DONE, &0u32.to_ne_bytes());
        assert_eq!(parse_inet(&done, &mut out).unwrap(), Step::Done);
        let err = msg(NLMSG_ERROR, &(-2i32).to_ne_bytes());
        assert_eq!(
            parse_inet(&err, &mut out).unwrap_err().raw_os_error(),
            Some(2)
        );
    }

    #[test]
    fn unix_replies() {
        let mut b = unix_msg(TCP_LISTEN, 31337, Some(b"/run/mysqld/mysqld.sock\0"));
        b.extend(unix_msg(1, 31338, Some(b"/run/mysqld/mysqld.sock\0")));
        b.extend(unix_msg(TCP_LISTEN, 4242, Some(b"\0/tmp/.X11-unix/X0")));
        b.extend(unix_msg(TCP_LISTEN, 999, None));
        b.extend(unix_msg(TCP_LISTEN, 1000, Some(b"/tmp/with space")));
        b.extend(msg(NLMSG_DONE, &[]));
        b.extend(unix_msg(TCP_LISTEN, 1, Some(b"/after/done")));
        let mut out = Vec::new();
        assert_eq!(parse_unix(&b, &mut out).unwrap(), Step::Done);
        assert_eq!(
            out,
            vec![
                ("/run/mysqld/mysqld.sock".to_string(), 31337),
                ("@/tmp/.X11-unix/X0".to_string(), 4242),
                ("/tmp/with space".to_string(), 1000)
            ]
        );
    }

    #[test]
    fn malformed_lengths_are_errors_not_loops() {
        let mut b = inet_msg(TCP_LISTEN, 1, 1);
        b[0..4].copy_from_slice(&3u32.to_ne_bytes());
        assert!(parse_inet(&b, &mut Vec::new()).is_err());
        let mut b = inet_msg(TCP_LISTEN, 1, 1);
        b[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(parse_inet(&b, &mut Vec::new()).is_err());
    }

    #[test]
    fn the_kernel_answers_like_proc_net() {
        // This machine's own listeners, both ways (sock_diag may be absent: then skip). Other
        // processes open and close listeners meanwhile: one of a few tries must agree exactly.
        if tcp_listeners().is_err() || unix_listeners().is_err() {
            eprintln!("sock_diag not available here: skipped");
            return;
        }
        let read = |p| std::fs::read_to_string(p).unwrap_or_default();
        let proc_net = || {
            let mut t = crate::procfs::tcp_listeners(&read("/proc/net/tcp"));
            t.extend(crate::procfs::tcp_listeners(&read("/proc/net/tcp6")));
            let mut u = crate::procfs::unix_listeners(&read("/proc/net/unix"));
            t.sort();
            u.sort();
            (t, u)
        };
        // Listeners of this test: a path, an abstract name, TCP.
        let dir = std::env::temp_dir().join(format!("dbtap-sockdiag-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);
        let ino = |fd: std::os::fd::RawFd| {
            let l = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
            crate::procfs::socket_inode(l.to_str().unwrap()).unwrap()
        };
        use std::os::fd::AsRawFd;
        use std::os::linux::net::SocketAddrExt;
        let ul = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let name = format!("dbtap-sockdiag-{}", std::process::id());
        let abs = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let al = std::os::unix::net::UnixListener::bind_addr(&abs).unwrap();
        let tl = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tl.local_addr().unwrap().port();
        let unix = unix_listeners().unwrap();
        assert!(unix.contains(&(path.display().to_string(), ino(ul.as_raw_fd()))));
        assert!(unix.contains(&(format!("@{name}"), ino(al.as_raw_fd()))));
        assert!(
            tcp_listeners()
                .unwrap()
                .contains(&(port, ino(tl.as_raw_fd())))
        );
        let mut last = None;
        for _ in 0..20 {
            let before = proc_net();
            let mut tcp = tcp_listeners().unwrap();
            let mut unix = unix_listeners().unwrap();
            tcp.sort();
            unix.sort();
            if before == (tcp.clone(), unix.clone()) {
                let _ = std::fs::remove_dir_all(&dir);
                return;
            }
            last = Some((before, (tcp, unix)));
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = std::fs::remove_dir_all(&dir);
        panic!("sock_diag and /proc/net never agreed: {last:?}");
    }

    proptest! {
        #[test]
        fn parsers_never_panic(b in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse_inet(&b, &mut Vec::new());
            let _ = parse_unix(&b, &mut Vec::new());
        }

        #[test]
        fn inet_entries_round_trip(e in proptest::collection::vec((any::<u16>(), any::<u32>()), 0..20)) {
            let mut b = Vec::new();
            for &(port, ino) in &e {
                b.extend(inet_msg(TCP_LISTEN, port, ino));
            }
            let mut out = Vec::new();
            prop_assert_eq!(parse_inet(&b, &mut out).unwrap(), Step::More);
            let want: Vec<(u16, u64)> = e.iter().map(|&(p, i)| (p, u64::from(i))).collect();
            prop_assert_eq!(out, want);
        }
    }
}
