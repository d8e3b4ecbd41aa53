//! Per connection and direction, the next expected offset: records become in-order data and
//! exact gaps; repeats are trimmed; the number of open connections is capped (least recently
//! active evicted). Pure: no IO, no clock.

use std::collections::{BTreeMap, HashMap};

use crate::{Direction, Record, StreamHandler, StreamOpen};

/// Counters of what the reassembler saw and what it could not deliver.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Records pushed (all kinds).
    pub records: u64,
    /// Connections opened (an `Open` for a connection already open closes it and counts again).
    pub opens: u64,
    /// Bytes delivered as data.
    pub data_bytes: u64,
    /// Bytes delivered as gaps because the source skipped them (lost records: ring full).
    pub gap_lost_bytes: u64,
    /// Bytes delivered as gaps because a record's bytes were cut at the source's copy limit.
    pub gap_truncated_bytes: u64,
    /// Data records wholly before the expected offset: dropped.
    pub duplicate_records: u64,
    /// Bytes trimmed away as already delivered (whole duplicates and partial overlaps).
    pub duplicate_bytes: u64,
    /// Data and Close records of a connection that is not open: dropped.
    pub unknown_conn_records: u64,
    /// Data records whose `len` was smaller than their bytes (taken as the bytes' length).
    pub short_len_records: u64,
    /// Connections closed to stay under the connection cap (the least recently active).
    pub evicted: u64,
    /// Connections closed by [`Reassembler::expire`] after no record for the idle time.
    pub expired: u64,
    /// Connections that switched to TLS (or were first seen inside it).
    pub tls_starts: u64,
}

#[derive(Debug)]
struct Conn {
    /// The next expected offset, per direction (ToServer, ToClient).
    next: [u64; 2],
    /// A `tls` record was seen: `start_tls` was delivered.
    tls: bool,
    /// Its last activity (a tick of the reassembler).
    tick: u64,
    /// The key of its one entry in the recency index: its activity when that entry was made,
    /// at most `tick`. Records only advance `tick`; the entry moves when it reaches the front
    /// of the index stale (amortized O(1) per record instead of a tree removal and insertion).
    key: u64,
    /// The timestamp of its last record.
    last_ts: u64,
}

/// Turns [`Record`]s into ordered data and exact gaps for a [`StreamHandler`].
#[derive(Debug)]
pub struct Reassembler {
    max_conns: usize,
    conns: HashMap<u64, Conn, foldhash::fast::RandomState>,
    /// Recency index: key tick -> connection, one entry per open connection; after the stale
    /// entries at the front are moved (see `Conn::key`), the first is the least recent.
    recent: BTreeMap<u64, u64>,
    tick: u64,
    stats: Stats,
}

fn index(d: Direction) -> usize {
    match d {
        Direction::ToServer => 0,
        Direction::ToClient => 1,
    }
}

impl Reassembler {
    /// At most `max_conns` connections open at once (at least 1).
    pub fn new(max_conns: usize) -> Self {
        Reassembler {
            max_conns: max_conns.max(1),
            conns: HashMap::default(),
            recent: BTreeMap::new(),
            tick: 0,
            stats: Stats::default(),
        }
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Connections currently open.
    pub fn open_conns(&self) -> usize {
        self.conns.len()
    }

    /// Feeds one record; the handler hears what it means, in order.
    pub fn push(&mut self, r: &Record<'_>, h: &mut impl StreamHandler) {
        self.stats.records += 1;
        match r {
            Record::Open(o) => self.open(o, h),
            Record::Data {
                conn,
                dir,
                ts_ns,
                offset,
                len,
                bytes,
                tls,
            } => self.data(*conn, *dir, *ts_ns, (*offset, *len), bytes, *tls, h),
            Record::Close { conn, ts_ns } => {
                if let Some(c) = self.conns.remove(conn) {
                    self.recent.remove(&c.key);
                    h.close(*conn, *ts_ns);
                } else {
                    self.stats.unknown_conn_records += 1;
                }
            }
        }
    }

    /// Closes every open connection (end of the source), in connection id order.
    pub fn finish(&mut self, ts_ns: u64, h: &mut impl StreamHandler) {
        let mut ids: Vec<u64> = self.conns.keys().copied().collect();
        ids.sort_unstable();
        self.conns.clear();
        self.recent.clear();
        for id in ids {
            h.close(id, ts_ns);
        }
    }

    /// Closes the connections with no record since `now_ns - idle_ns` (a source can lose a
    /// close); returns how many. Walks from the least recently active and stops at the first
    /// recent one, so records are assumed to come roughly in time order.
    pub fn expire(&mut self, now_ns: u64, idle_ns: u64, h: &mut impl StreamHandler) -> usize {
        let before = now_ns.saturating_sub(idle_ns);
        let mut n = 0;
        while let Some((tick, conn)) = self.least_recent() {
            if self.conns.get(&conn).is_some_and(|c| c.last_ts >= before) {
                break;
            }
            self.recent.remove(&tick);
            self.conns.remove(&conn);
            self.stats.expired += 1;
            n += 1;
            h.close(conn, now_ns);
        }
        n
    }

    /// The least recently active connection's entry (key, connection), after moving stale
    /// entries at the front of the index to their connection's last activity.
    fn least_recent(&mut self) -> Option<(u64, u64)> {
        loop {
            let (&key, &conn) = self.recent.first_key_value()?;
            match self.conns.get_mut(&conn) {
                Some(c) if c.tick != key => {
                    self.recent.remove(&key);
                    c.key = c.tick;
                    self.recent.insert(c.tick, conn);
                }
                _ => return Some((key, conn)),
            }
        }
    }

    fn open(&mut self, o: &StreamOpen, h: &mut impl StreamHandler) {
        if let Some(old) = self.conns.remove(&o.conn) {
            // The id was reused without a Close: the old connection ended.
            self.recent.remove(&old.key);
            h.close(o.conn, o.ts_ns);
        }
        while self.conns.len() >= self.max_conns {
            let Some((key, victim)) = self.least_recent() else {
                break;
            };
            self.recent.remove(&key);
            self.conns.remove(&victim);
            self.stats.evicted += 1;
            h.close(victim, o.ts_ns);
        }
        self.tick += 1;
        let c = Conn {
            next: [0, 0],
            tls: false,
            tick: self.tick,
            key: self.tick,
            last_ts: o.ts_ns,
        };
        self.conns.insert(o.conn, c);
        self.recent.insert(self.tick, o.conn);
        self.stats.opens += 1;
        h.open(o);
    }

    #[allow(clippy::too_many_arguments)]
    fn data(
        &mut self,
        conn: u64,
        dir: Direction,
        ts: u64,
        (offset, len): (u64, u64),
        bytes: &[u8],
        tls: bool,
        h: &mut impl StreamHandler,
    ) {
        let Reassembler {
            conns, stats, tick, ..
        } = self;
        // One lookup per record: marks it the most recently active.
        let Some(c) = conns.get_mut(&conn) else {
            stats.unknown_conn_records += 1;
            return;
        };
        c.last_ts = c.last_ts.max(ts);
        *tick += 1;
        c.tick = *tick;
        if tls && !c.tls {
            c.tls = true;
            stats.tls_starts += 1;
            h.start_tls(conn, ts);
        }
        let blen = bytes.len() as u64;
        let len = if len < blen {
            stats.short_len_records += 1;
            blen
        } else {
            len
        };
        let next = &mut c.next[index(dir)];
        let end = offset.saturating_add(len);
        if end <= *next && len > 0 {
            stats.duplicate_records += 1;
            stats.duplicate_bytes += len;
            return;
        }
        if offset > *next {
            let lost = offset - *next;
            stats.gap_lost_bytes += lost;
            h.gap(conn, dir, lost, ts);
        }
        // Bytes of this record already delivered (a partial overlap).
        let skip = next.saturating_sub(offset);
        stats.duplicate_bytes += skip;
        *next = (*next).max(end);
        if skip < blen {
            let fresh = &bytes[skip as usize..];
            stats.data_bytes += fresh.len() as u64;
            h.data(conn, dir, fresh, ts);
        }
        let truncated = len - skip.max(blen);
        if truncated > 0 {
            stats.gap_truncated_bytes += truncated;
            h.gap(conn, dir, truncated, ts);
        }
    }
}
