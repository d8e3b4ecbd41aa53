//! Test support: a recording handler that checks the handler contract, and a packet builder.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;

use flow::tcp_flags::{ACK, FIN, PSH, RST, SYN};
use flow::{Dir, FlowConfig, FlowTable, Handler, Segment};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ev {
    Open {
        id: u64,
        client: SocketAddr,
        server: SocketAddr,
        saw_syn: bool,
    },
    Data {
        id: u64,
        dir: Dir,
        bytes: Vec<u8>,
        ts: u64,
    },
    Gap {
        id: u64,
        dir: Dir,
        len: u64,
    },
    Close {
        id: u64,
    },
}

/// Data or gap, merged: adjacent data runs are joined, adjacent gaps are added up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Chunk {
    D(Vec<u8>),
    G(u64),
}

#[derive(Default)]
pub struct Rec {
    pub events: Vec<Ev>,
    /// Decline connections in `open`.
    pub reject: bool,
    /// Return false from `data` once this many bytes were delivered on a connection.
    pub stop_after: Option<usize>,
    pub state: HashMap<u64, (bool, usize)>, // id -> (closed, bytes)
}

impl Handler for Rec {
    fn open(
        &mut self,
        id: u64,
        client: SocketAddr,
        server: SocketAddr,
        saw_syn: bool,
        _: u64,
    ) -> bool {
        assert!(!self.state.contains_key(&id), "id {id} opened twice");
        self.events.push(Ev::Open {
            id,
            client,
            server,
            saw_syn,
        });
        if self.reject {
            self.state.insert(id, (true, 0));
            return false;
        }
        self.state.insert(id, (false, 0));
        true
    }

    fn data(&mut self, id: u64, dir: Dir, data: &[u8], ts: u64) -> bool {
        let st = self.state.get_mut(&id).expect("data for unknown id");
        assert!(!st.0, "data after close/reject for {id}");
        assert!(!data.is_empty(), "empty data");
        st.1 += data.len();
        let more = self.stop_after.is_none_or(|n| st.1 < n);
        self.events.push(Ev::Data {
            id,
            dir,
            bytes: data.to_vec(),
            ts,
        });
        more
    }

    fn gap(&mut self, id: u64, dir: Dir, len: u64, _: u64) {
        let st = self.state.get(&id).expect("gap for unknown id");
        assert!(!st.0, "gap after close for {id}");
        assert!(len > 0, "empty gap");
        self.events.push(Ev::Gap { id, dir, len });
    }

    fn close(&mut self, id: u64, _: u64) {
        let st = self.state.get_mut(&id).expect("close for unknown id");
        assert!(!st.0, "closed twice (or after reject): {id}");
        st.0 = true;
        self.events.push(Ev::Close { id });
    }
}

impl Rec {
    pub fn chunks(&self, id: u64, dir: Dir) -> Vec<Chunk> {
        let mut out: Vec<Chunk> = Vec::new();
        for e in &self.events {
            match e {
                Ev::Data {
                    id: i,
                    dir: d,
                    bytes,
                    ..
                } if *i == id && *d == dir => match out.last_mut() {
                    Some(Chunk::D(v)) => v.extend_from_slice(bytes),
                    _ => out.push(Chunk::D(bytes.clone())),
                },
                Ev::Gap { id: i, dir: d, len } if *i == id && *d == dir => match out.last_mut() {
                    Some(Chunk::G(n)) => *n += len,
                    _ => out.push(Chunk::G(*len)),
                },
                _ => {}
            }
        }
        out
    }

    /// The stream with gaps rendered as `_` (for short readable assertions).
    pub fn text(&self, id: u64, dir: Dir) -> String {
        let mut s = String::new();
        for c in self.chunks(id, dir) {
            match c {
                Chunk::D(v) => s.push_str(&String::from_utf8_lossy(&v)),
                Chunk::G(n) => s.extend(std::iter::repeat_n('_', n as usize)),
            }
        }
        s
    }

    pub fn opens(&self) -> Vec<u64> {
        self.events
            .iter()
            .filter_map(|e| {
                if let Ev::Open { id, .. } = e {
                    Some(*id)
                } else {
                    None
                }
            })
            .collect()
    }

    pub fn closes(&self) -> Vec<u64> {
        self.events
            .iter()
            .filter_map(|e| {
                if let Ev::Close { id } = e {
                    Some(*id)
                } else {
                    None
                }
            })
            .collect()
    }

    pub fn gaps(&self, id: u64, dir: Dir) -> Vec<u64> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Ev::Gap { id: i, dir: d, len } if *i == id && *d == dir => Some(*len),
                _ => None,
            })
            .collect()
    }
}

/// An owned segment.
#[derive(Clone, Debug)]
pub struct Pkt {
    pub ts: u64,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub payload: Vec<u8>,
    pub missing: u32,
}

impl Pkt {
    pub fn seg(&self) -> Segment<'_> {
        Segment {
            ts_ns: self.ts,
            src: self.src,
            dst: self.dst,
            seq: self.seq,
            ack: self.ack,
            flags: self.flags,
            payload: &self.payload,
            missing: self.missing,
        }
    }
}

pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Builds the packets of one connection. Every packet after the SYN carries an ACK of all the
/// bytes the other side has sent so far (as a real receiver would, the capture aside).
pub struct Tcp {
    pub client: SocketAddr,
    pub server: SocketAddr,
    pub c_isn: u32,
    pub s_isn: u32,
    /// Bytes sent so far (SYN excluded, FIN included).
    pub c_off: u32,
    pub s_off: u32,
    pub ts: u64,
}

impl Tcp {
    pub fn new(client: &str, server: &str, c_isn: u32, s_isn: u32) -> Tcp {
        Tcp {
            client: addr(client),
            server: addr(server),
            c_isn,
            s_isn,
            c_off: 0,
            s_off: 0,
            ts: 1_000,
        }
    }

    fn tick(&mut self) -> u64 {
        self.ts += 1_000;
        self.ts
    }

    pub fn c_seq(&self) -> u32 {
        self.c_isn.wrapping_add(1).wrapping_add(self.c_off)
    }

    pub fn s_seq(&self) -> u32 {
        self.s_isn.wrapping_add(1).wrapping_add(self.s_off)
    }

    pub fn syn(&mut self) -> Pkt {
        let ts = self.tick();
        Pkt {
            ts,
            src: self.client,
            dst: self.server,
            seq: self.c_isn,
            ack: 0,
            flags: SYN,
            payload: vec![],
            missing: 0,
        }
    }

    pub fn syn_ack(&mut self) -> Pkt {
        let ts = self.tick();
        Pkt {
            ts,
            src: self.server,
            dst: self.client,
            seq: self.s_isn,
            ack: self.c_seq(),
            flags: SYN | ACK,
            payload: vec![],
            missing: 0,
        }
    }

    pub fn c_flags(&mut self, flags: u8, data: &[u8]) -> Pkt {
        let ts = self.tick();
        let p = Pkt {
            ts,
            src: self.client,
            dst: self.server,
            seq: self.c_seq(),
            ack: self.s_seq(),
            flags,
            payload: data.to_vec(),
            missing: 0,
        };
        self.c_off = self
            .c_off
            .wrapping_add(data.len() as u32 + u32::from(flags & FIN != 0));
        p
    }

    pub fn s_flags(&mut self, flags: u8, data: &[u8]) -> Pkt {
        let ts = self.tick();
        let p = Pkt {
            ts,
            src: self.server,
            dst: self.client,
            seq: self.s_seq(),
            ack: self.c_seq(),
            flags,
            payload: data.to_vec(),
            missing: 0,
        };
        self.s_off = self
            .s_off
            .wrapping_add(data.len() as u32 + u32::from(flags & FIN != 0));
        p
    }

    pub fn c(&mut self, data: &[u8]) -> Pkt {
        self.c_flags(ACK | PSH, data)
    }

    pub fn s(&mut self, data: &[u8]) -> Pkt {
        self.s_flags(ACK | PSH, data)
    }

    pub fn c_fin(&mut self) -> Pkt {
        self.c_flags(ACK | FIN, b"")
    }

    pub fn s_fin(&mut self) -> Pkt {
        self.s_flags(ACK | FIN, b"")
    }

    pub fn c_ack(&mut self) -> Pkt {
        self.c_flags(ACK, b"")
    }

    pub fn s_ack(&mut self) -> Pkt {
        self.s_flags(ACK, b"")
    }

    pub fn c_rst(&mut self) -> Pkt {
        self.c_flags(RST | ACK, b"")
    }
}

pub fn mysql_cfg() -> FlowConfig {
    FlowConfig {
        server_ports: vec![3306],
        ..FlowConfig::default()
    }
}

pub fn run(cfg: FlowConfig, pkts: &[Pkt]) -> (Rec, FlowTable) {
    let mut t = FlowTable::new(cfg);
    let mut rec = Rec::default();
    for p in pkts {
        t.process(&p.seg(), &mut rec);
    }
    (rec, t)
}

pub fn run_finish(cfg: FlowConfig, pkts: &[Pkt]) -> (Rec, FlowTable) {
    let (mut rec, mut t) = run(cfg, pkts);
    t.finish(&mut rec);
    assert_eq!(t.buffered_bytes(), 0);
    (rec, t)
}
