//! A target connection's byte stream (TCP, Unix socket or TLS over TCP) with a read deadline
//! that costs no system call per read: the socket's receive timeout is set again only when it
//! would overshoot the deadline by more than a sixteenth or be under half of it, and a read
//! that timed out before the deadline is retried with the exact time left.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use proto::Endpoint;

use super::{Target, is_timeout};

enum Io {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<crate::tls::TlsStream>),
}

pub(super) struct Stream {
    io: Io,
    /// The receive timeout the socket has now (`None`: not set yet).
    sock_timeout: Option<Duration>,
    /// When the current read wait ends.
    deadline: Option<Instant>,
}

impl Stream {
    fn new(io: Io) -> Stream {
        Stream {
            io,
            sock_timeout: None,
            deadline: None,
        }
    }

    pub(super) fn connect(t: &Target) -> std::io::Result<Stream> {
        Ok(Stream::new(match t {
            Target::Tcp(a) => {
                let s = TcpStream::connect(a)?;
                s.set_nodelay(true)?;
                Io::Tcp(s)
            }
            Target::Unix(p) => Io::Unix(UnixStream::connect(p)?),
        }))
    }

    fn set_sock_timeout(&mut self, d: Duration) -> std::io::Result<()> {
        let d = d.max(Duration::from_millis(1));
        match &self.io {
            Io::Tcp(s) => s.set_read_timeout(Some(d)),
            Io::Unix(s) => s.set_read_timeout(Some(d)),
            Io::Tls(s) => s.sock.set_read_timeout(Some(d)),
        }?;
        self.sock_timeout = Some(d);
        Ok(())
    }

    /// Reads wait at most `d` from now (also over several reads: the deadline stays until
    /// the next call).
    pub(super) fn set_timeout(&mut self, d: Duration) -> std::io::Result<()> {
        self.deadline = Some(Instant::now() + d);
        match self.sock_timeout {
            // Up to half shorter than asked: a read that times out early is retried (see
            // `read`).
            Some(cur) if cur <= d + d / 16 && cur >= d / 2 => Ok(()),
            _ => self.set_sock_timeout(d),
        }
    }

    /// [`upgrade`](Stream::upgrade) in place (a connection already wrapped in a session).
    pub(super) fn upgrade_in_place(&mut self, tls: &crate::tls::Tls) -> std::io::Result<()> {
        let Io::Tcp(s) = &self.io else {
            return Err(std::io::Error::other("TLS needs a TCP target"));
        };
        let tcp = s.try_clone()?;
        self.io = Io::Tls(Box::new(tls.connect(tcp)?));
        Ok(())
    }

    /// The TLS handshake over this TCP connection (`--target-tls`).
    pub(super) fn upgrade(self, tls: &crate::tls::Tls) -> std::io::Result<Stream> {
        match self.io {
            Io::Tcp(s) => Ok(Stream {
                io: Io::Tls(Box::new(tls.connect(s)?)),
                ..self
            }),
            _ => Err(std::io::Error::other("TLS needs a TCP target")),
        }
    }

    pub(super) fn endpoints(&self) -> (Endpoint, Endpoint) {
        let unknown = || Endpoint::unix("");
        let tcp = |s: &TcpStream| {
            (
                s.local_addr().map_or_else(|_| unknown(), Endpoint::from),
                s.peer_addr().map_or_else(|_| unknown(), Endpoint::from),
            )
        };
        match &self.io {
            Io::Tcp(s) => tcp(s),
            Io::Tls(s) => tcp(&s.sock),
            Io::Unix(s) => (
                unknown(),
                s.peer_addr()
                    .ok()
                    .and_then(|a| {
                        a.as_pathname()
                            .map(|p| Endpoint::unix(&p.to_string_lossy()))
                    })
                    .unwrap_or_else(unknown),
            ),
        }
    }

    fn read_once(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match &mut self.io {
            Io::Tcp(s) => s.read(b),
            Io::Unix(s) => s.read(b),
            Io::Tls(s) => s.read(b),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        loop {
            match self.read_once(b) {
                Err(e) if is_timeout(&e) => {
                    let left = self
                        .deadline
                        .and_then(|d| d.checked_duration_since(Instant::now()))
                        .filter(|l| *l >= Duration::from_millis(1));
                    match left {
                        // The socket's timeout was shorter than the deadline: wait the rest.
                        Some(l) => self.set_sock_timeout(l)?,
                        None => return Err(e),
                    }
                }
                r => return r,
            }
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match &mut self.io {
            Io::Tcp(s) => s.write(b),
            Io::Unix(s) => s.write(b),
            Io::Tls(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.io {
            Io::Tcp(s) => s.flush(),
            Io::Unix(s) => s.flush(),
            Io::Tls(s) => s.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read deadline is kept exactly even when the socket's timeout is left longer or
    /// shorter than asked (no reply comes: the read fails at the deadline, not before).
    #[test]
    fn deadline_holds_without_resetting_every_read() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let mut s = Stream::connect(&Target::Tcp(addr)).unwrap();
        let _peer = l.accept().unwrap();
        let mut b = [0u8; 8];
        for ms in [40u64, 80, 41] {
            s.set_timeout(Duration::from_millis(ms)).unwrap();
            let t0 = Instant::now();
            let e = s.read(&mut b).unwrap_err();
            assert!(is_timeout(&e), "{e}");
            let took = t0.elapsed();
            assert!(took >= Duration::from_millis(ms - 1), "{ms}: {took:?}");
            assert!(
                took < Duration::from_millis(ms + ms / 16 + 30),
                "{ms}: {took:?}"
            );
        }
    }
}
