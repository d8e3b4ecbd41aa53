//! The sink's queue of batches not yet confirmed by the server: on disk (`--clickhouse-spool
//! DIR`: one file per batch, written to a temporary name, synced, then renamed) or in memory,
//! bounded in bytes (the oldest batch is dropped and counted past the bound). A file that does
//! not read back (bad magic, length or checksum) is reported, removed and counted; never a
//! panic. Batches found on disk at start are sent after a ledger check (they may have been
//! sent just before the agent stopped), see `sink.rs`.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"DBTAPCH1";
const HEADER: usize = 8 + 8 + 8 + 4 + 4 + 8 + 8;
const EXT: &str = "chb";

/// A batch of rows encoded in RowBinary, all of one day (one partition: one part per insert).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Random; every row of the batch carries it in the `batch` column.
    pub id: u64,
    pub rows: u64,
    /// First and last minute of the rows (unix seconds).
    pub min_ts: u32,
    pub max_ts: u32,
    pub body: Vec<u8>,
}

/// FNV-1a 64 of the body (a check against torn or corrupted files, not against tampering).
fn checksum(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3)
    })
}

impl Batch {
    /// The batch as a spool file.
    pub fn to_file_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER + self.body.len());
        v.extend_from_slice(MAGIC);
        v.extend_from_slice(&self.id.to_le_bytes());
        v.extend_from_slice(&self.rows.to_le_bytes());
        v.extend_from_slice(&self.min_ts.to_le_bytes());
        v.extend_from_slice(&self.max_ts.to_le_bytes());
        v.extend_from_slice(&(self.body.len() as u64).to_le_bytes());
        v.extend_from_slice(&checksum(&self.body).to_le_bytes());
        v.extend_from_slice(&self.body);
        v
    }

    /// Reads a spool file's bytes (checked: magic, lengths, checksum).
    pub fn from_file_bytes(b: &[u8]) -> Result<Batch, String> {
        let field = |at: usize, n: usize| b.get(at..at + n).ok_or("truncated header");
        let u64_at = |at: usize| -> Result<u64, String> {
            let mut a = [0u8; 8];
            a.copy_from_slice(field(at, 8)?);
            Ok(u64::from_le_bytes(a))
        };
        let u32_at = |at: usize| -> Result<u32, String> {
            let mut a = [0u8; 4];
            a.copy_from_slice(field(at, 4)?);
            Ok(u32::from_le_bytes(a))
        };
        if field(0, 8)? != MAGIC {
            return Err("not a dbtap spool file".into());
        }
        let (id, rows, min_ts, max_ts) = (u64_at(8)?, u64_at(16)?, u32_at(24)?, u32_at(28)?);
        let (len, sum) = (u64_at(32)?, u64_at(40)?);
        let body = b.get(HEADER..).ok_or("truncated header")?;
        if body.len() as u64 != len {
            return Err(format!("body of {} bytes, header says {len}", body.len()));
        }
        if checksum(body) != sum {
            return Err("checksum mismatch".into());
        }
        Ok(Batch {
            id,
            rows,
            min_ts,
            max_ts,
            body: body.to_vec(),
        })
    }

    fn size(&self) -> u64 {
        (HEADER + self.body.len()) as u64
    }
}

/// A queued batch: in memory, or the file holding it.
#[derive(Debug)]
struct Entry {
    id: u64,
    rows: u64,
    size: u64,
    /// Found on disk at start, or an attempt failed after the request left: the server may
    /// hold it already.
    maybe_sent: bool,
    held: Held,
}

#[derive(Debug)]
enum Held {
    Memory(Batch),
    File(PathBuf),
}

/// What [`Spool::push`] dropped to stay within the bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    pub batches: u64,
    pub rows: u64,
}

/// The queue, oldest first.
#[derive(Debug)]
pub struct Spool {
    dir: Option<PathBuf>,
    max_bytes: u64,
    q: VecDeque<Entry>,
    bytes: u64,
    seq: u64,
}

/// The batch at the front of the queue, to send.
#[derive(Debug)]
pub struct Front {
    pub batch: Batch,
    pub maybe_sent: bool,
}

impl Spool {
    /// An in-memory queue of at most `max_bytes`.
    pub fn memory(max_bytes: u64) -> Spool {
        Spool {
            dir: None,
            max_bytes,
            q: VecDeque::new(),
            bytes: 0,
            seq: 0,
        }
    }

    /// A queue in `dir` (created if needed), with the batches already there (oldest first).
    /// Returns the warnings about files that did not read (they are removed).
    pub fn open(dir: &Path, max_bytes: u64) -> std::io::Result<(Spool, Vec<String>)> {
        std::fs::create_dir_all(dir)?;
        let mut names: Vec<PathBuf> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == EXT))
            .collect();
        names.sort();
        let mut s = Spool {
            dir: Some(dir.to_path_buf()),
            ..Spool::memory(max_bytes)
        };
        let mut warnings = Vec::new();
        for p in names {
            let read = std::fs::read(&p).map_err(|e| e.to_string());
            match read.and_then(|b| Batch::from_file_bytes(&b)) {
                Ok(b) => {
                    s.seq = s.seq.max(seq_of(&p).unwrap_or(0) + 1);
                    s.bytes += b.size();
                    s.q.push_back(Entry {
                        id: b.id,
                        rows: b.rows,
                        size: b.size(),
                        maybe_sent: true,
                        held: Held::File(p),
                    });
                }
                Err(e) => {
                    let _ = std::fs::remove_file(&p);
                    warnings.push(format!("spool file {} removed: {e}", p.display()));
                }
            }
        }
        Ok((s, warnings))
    }

    /// Adds a batch at the back (to disk first, when on disk), then drops the oldest batches
    /// while the queue is over its bound (never the one just added).
    pub fn push(&mut self, b: Batch) -> std::io::Result<Dropped> {
        let size = b.size();
        let held = match &self.dir {
            None => Held::Memory(b.clone()),
            Some(dir) => {
                let p = dir.join(format!("{:020}-{:016x}.{EXT}", self.seq, b.id));
                let tmp = p.with_extension("tmp");
                write_synced(&tmp, &b.to_file_bytes())?;
                std::fs::rename(&tmp, &p)?;
                // The rename itself survives a crash once the directory is synced.
                std::fs::File::open(dir)?.sync_all()?;
                Held::File(p)
            }
        };
        self.seq += 1;
        self.bytes += size;
        self.q.push_back(Entry {
            id: b.id,
            rows: b.rows,
            size,
            maybe_sent: false,
            held,
        });
        let mut d = Dropped::default();
        while self.bytes > self.max_bytes && self.q.len() > 1 {
            if let Some(e) = self.remove_front() {
                d.batches += 1;
                d.rows += e.rows;
            }
        }
        Ok(d)
    }

    /// The oldest batch (read from its file); a file that no longer reads is removed and
    /// reported as `Err`.
    pub fn front(&mut self) -> Option<Result<Front, String>> {
        let e = self.q.front()?;
        let r = match &e.held {
            Held::Memory(b) => Ok(b.clone()),
            Held::File(p) => std::fs::read(p)
                .map_err(|x| x.to_string())
                .and_then(|b| Batch::from_file_bytes(&b))
                .map_err(|x| format!("spool file {} removed: {x}", p.display())),
        };
        let maybe_sent = e.maybe_sent;
        Some(match r {
            Ok(batch) if batch.id == e.id => Ok(Front { batch, maybe_sent }),
            Ok(_) => {
                self.remove_front();
                Err("spool file changed under dbtap: removed".into())
            }
            Err(x) => {
                self.remove_front();
                Err(x)
            }
        })
    }

    /// Marks the oldest batch (if it is `id`) as possibly stored by the server.
    pub fn mark_maybe_sent(&mut self, id: u64) {
        if let Some(e) = self.q.front_mut().filter(|e| e.id == id) {
            e.maybe_sent = true;
        }
    }

    /// Removes the oldest batch if it is `id` (delivered).
    pub fn done(&mut self, id: u64) {
        if self.q.front().is_some_and(|e| e.id == id) {
            self.remove_front();
        }
    }

    fn remove_front(&mut self) -> Option<Entry> {
        let e = self.q.pop_front()?;
        self.bytes = self.bytes.saturating_sub(e.size);
        if let Held::File(p) = &e.held {
            let _ = std::fs::remove_file(p);
        }
        Some(e)
    }

    pub fn len(&self) -> usize {
        self.q.len()
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Bytes queued (headers included).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

fn seq_of(p: &Path) -> Option<u64> {
    p.file_name()?.to_str()?.split('-').next()?.parse().ok()
}

fn write_synced(p: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(p)?;
    f.write_all(bytes)?;
    f.sync_all()
}
