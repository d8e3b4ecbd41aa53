//! `--write DIR`: a rotating set of pcap files holding what the live capture saw, so the raw
//! evidence is there when a digest raises a question.
//!
//! Files are classic pcap with nanosecond timestamps and link type RAW (101: packets start at the
//! IP header, as the live ring hands them over), readable by `dbtap digest`, tcpdump and
//! Wireshark. A new file starts when the current one reaches the size limit or the age limit.
//! Each capture thread writes its own files (no packet crosses threads); the threads share one
//! [`FileSet`], so `keep` bounds the files of all threads together: beyond it the oldest file
//! no thread is writing any more is deleted. Names sort in the order the files were started:
//! `dbtap-<unix seconds>-<sequence>-t<thread>.pcap`.
//!
//! The eBPF source writes its socket stream records the same way, one encoded
//! [`stream::Record`] per packet under link type [`stream::LINKTYPE`] (LINKTYPE_USER0), in files
//! named `...-ebpf.pcap` ([`Rotator::with_linktype`]); `dbtap digest` reads them back.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// pcap magic for nanosecond timestamps, written in native order.
const MAGIC_NS: u32 = 0xa1b2_3c4d;
const LINKTYPE_RAW: u32 = 101;
const SNAPLEN: u32 = 262_144;
const FILE_HEADER_LEN: u64 = 24;
const RECORD_HEADER_LEN: u64 = 16;

pub struct Limits {
    /// Start a new file at this size in bytes.
    pub max_bytes: u64,
    /// Start a new file when the current one is this old (ns of packet time).
    pub max_age_ns: Option<u64>,
    /// Files kept at most.
    pub keep: usize,
}

/// The files of every capture thread, oldest first, shared so that `keep` is a total.
#[derive(Default)]
pub struct FileSet {
    seq: u64,
    /// (path, still being written).
    files: VecDeque<(PathBuf, bool)>,
}

pub type SharedFiles = Arc<Mutex<FileSet>>;

pub struct Rotator {
    dir: PathBuf,
    prefix: String,
    /// `t<thread>`, or `ebpf`.
    label: String,
    linktype: u32,
    limits: Limits,
    shared: SharedFiles,
    current: Option<(BufWriter<File>, u64, u64)>,
    current_path: Option<PathBuf>,
}

impl Rotator {
    /// Checks that `dir` exists (creating it if needed) and is writable; no file is opened
    /// before the first packet.
    pub fn new(
        dir: &Path,
        thread: usize,
        start_unix_s: u64,
        limits: Limits,
        shared: SharedFiles,
    ) -> io::Result<Self> {
        std::fs::create_dir_all(dir)
            .map_err(|e| io::Error::new(e.kind(), format!("--write {}: {e}", dir.display())))?;
        let probe = dir.join(format!(".dbtap-write-test-{}", std::process::id()));
        File::create(&probe)
            .map_err(|e| io::Error::new(e.kind(), format!("--write {}: {e}", dir.display())))?;
        let _ = std::fs::remove_file(&probe);
        Ok(Rotator {
            dir: dir.to_path_buf(),
            prefix: format!("dbtap-{start_unix_s}"),
            label: format!("t{thread}"),
            linktype: LINKTYPE_RAW,
            limits: Limits {
                keep: limits.keep.max(1),
                ..limits
            },
            shared,
            current: None,
            current_path: None,
        })
    }

    /// Files of socket stream records (link type `linktype`, named `...-ebpf.pcap`) instead
    /// of IP packets.
    #[cfg_attr(not(feature = "ebpf"), allow(dead_code))]
    pub fn with_linktype(mut self, linktype: u32) -> Self {
        self.linktype = linktype;
        self.label = "ebpf".to_string();
        self
    }

    /// Appends one packet (starting at its IP header) captured at `ts_ns` whose length on the
    /// wire was `wire_len`.
    pub fn write(&mut self, ts_ns: u64, data: &[u8], wire_len: u32) -> io::Result<()> {
        let caplen = data.len().min(SNAPLEN as usize);
        let need = RECORD_HEADER_LEN + caplen as u64;
        let rotate = match &self.current {
            None => true,
            Some((_, size, started)) => {
                (*size + need > self.limits.max_bytes && *size > FILE_HEADER_LEN)
                    || self
                        .limits
                        .max_age_ns
                        .is_some_and(|age| ts_ns.saturating_sub(*started) >= age)
            }
        };
        if rotate {
            self.open_next(ts_ns)?;
        }
        if let Some((w, size, _)) = &mut self.current {
            let mut rec = [0u8; 16];
            rec[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_ne_bytes());
            rec[4..8].copy_from_slice(&((ts_ns % 1_000_000_000) as u32).to_ne_bytes());
            rec[8..12].copy_from_slice(&(caplen as u32).to_ne_bytes());
            rec[12..16].copy_from_slice(&wire_len.max(caplen as u32).to_ne_bytes());
            w.write_all(&rec)?;
            w.write_all(&data[..caplen])?;
            *size += need;
        }
        Ok(())
    }

    fn open_next(&mut self, ts_ns: u64) -> io::Result<()> {
        self.finish_current()?;
        let mut set = self
            .shared
            .lock()
            .map_err(|_| io::Error::other("pcap file set poisoned"))?;
        set.seq += 1;
        let path = self.dir.join(format!(
            "{}-{:06}-{}.pcap",
            self.prefix, set.seq, self.label
        ));
        let f = File::create(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let mut w = BufWriter::with_capacity(1 << 20, f);
        let mut hdr = [0u8; 24];
        hdr[0..4].copy_from_slice(&MAGIC_NS.to_ne_bytes());
        hdr[4..6].copy_from_slice(&2u16.to_ne_bytes());
        hdr[6..8].copy_from_slice(&4u16.to_ne_bytes());
        hdr[16..20].copy_from_slice(&SNAPLEN.to_ne_bytes());
        hdr[20..24].copy_from_slice(&self.linktype.to_ne_bytes());
        w.write_all(&hdr)?;
        self.current = Some((w, FILE_HEADER_LEN, ts_ns));
        set.files.push_back((path.clone(), true));
        self.current_path = Some(path);
        // Delete the oldest files no thread writes any more, down to `keep`.
        while set.files.len() > self.limits.keep {
            let Some(i) = set.files.iter().position(|(_, open)| !*open) else {
                break;
            };
            if let Some((old, _)) = set.files.remove(i) {
                let _ = std::fs::remove_file(old);
            }
        }
        Ok(())
    }

    fn finish_current(&mut self) -> io::Result<()> {
        if let Some(path) = self.current_path.take()
            && let Ok(mut set) = self.shared.lock()
            && let Some(e) = set.files.iter_mut().find(|(p, _)| *p == path)
        {
            e.1 = false;
        }
        if let Some((mut w, _, _)) = self.current.take() {
            w.flush()?;
        }
        Ok(())
    }

    /// Flushes the current file (at the end of an interval, so a reader sees recent packets).
    pub fn flush(&mut self) -> io::Result<()> {
        if let Some((w, _, _)) = &mut self.current {
            w.flush()?;
        }
        Ok(())
    }

    /// Flushes and closes the current file.
    pub fn close(mut self) -> io::Result<()> {
        self.finish_current()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_packet(n: u8) -> Vec<u8> {
        let mut p = vec![
            0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        p.extend_from_slice(&[0, 1, 0, 2, 0, 8, 0, n]);
        p
    }

    fn pcaps(dir: &Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|r| r.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        v.retain(|p| p.extension().is_some_and(|e| e == "pcap"));
        v.sort();
        v
    }

    #[test]
    fn rotates_by_size_and_keeps_the_newest_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let limits = Limits {
            max_bytes: 24 + 3 * (16 + 28),
            max_age_ns: None,
            keep: 2,
        };
        let mut r = Rotator::new(dir.path(), 0, 1_700_000_000, limits, SharedFiles::default())
            .expect("rotator");
        for i in 0..10u8 {
            r.write(1_000 + u64::from(i), &ipv4_packet(i), 28)
                .expect("write");
        }
        r.close().expect("close");
        let files = pcaps(dir.path());
        // 10 packets, 3 per file: files 1..=4 were written, the 2 newest are kept.
        assert_eq!(files.len(), 2, "{files:?}");
        assert!(files[0].to_string_lossy().ends_with("-000003-t0.pcap"));
        assert!(files[1].to_string_lossy().ends_with("-000004-t0.pcap"));
        // The files are real captures: the reader finds the packets with their timestamps.
        let mut seen = Vec::new();
        for f in &files {
            let mut rd = capture::Reader::open(f).expect("open");
            while let Some(fr) = rd.next_frame().expect("frame") {
                assert_eq!(fr.linktype, LINKTYPE_RAW);
                seen.push((fr.ts_ns, fr.data[fr.data.len() - 1]));
            }
        }
        assert_eq!(seen, vec![(1_006, 6), (1_007, 7), (1_008, 8), (1_009, 9)]);
    }

    #[test]
    fn rotates_by_age() {
        let dir = tempfile::tempdir().expect("tempdir");
        let limits = Limits {
            max_bytes: u64::MAX,
            max_age_ns: Some(1_000_000_000),
            keep: 10,
        };
        let mut r = Rotator::new(dir.path(), 1, 1_700_000_000, limits, SharedFiles::default())
            .expect("rotator");
        for i in 0..5u8 {
            // One packet every 0.6 s: a new file every second packet.
            r.write(u64::from(i) * 600_000_000 + 1, &ipv4_packet(i), 28)
                .expect("write");
        }
        r.close().expect("close");
        assert_eq!(pcaps(dir.path()).len(), 3);
    }

    #[test]
    fn unwritable_directory_is_a_one_line_error() {
        let e = Rotator::new(
            Path::new("/proc/dbtap-cannot-exist"),
            0,
            0,
            Limits {
                max_bytes: 1,
                max_age_ns: None,
                keep: 1,
            },
            SharedFiles::default(),
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(e.starts_with("--write /proc/dbtap-cannot-exist:"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn keep_is_a_total_over_threads_and_spares_open_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let shared = SharedFiles::default();
        let limits = || Limits {
            max_bytes: 24 + 2 * (16 + 28),
            max_age_ns: None,
            keep: 3,
        };
        let mut a = Rotator::new(dir.path(), 0, 1, limits(), Arc::clone(&shared)).expect("a");
        let mut b = Rotator::new(dir.path(), 1, 1, limits(), Arc::clone(&shared)).expect("b");
        // Thread b opens its file first and writes into it once; thread a then rotates many
        // times. b's file stays open, so it is never deleted; a's old files go.
        b.write(1, &ipv4_packet(0), 28).expect("b");
        for i in 0..20u8 {
            a.write(10 + u64::from(i), &ipv4_packet(i), 28).expect("a");
        }
        let names: Vec<String> = pcaps(dir.path())
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(names[0].ends_with("-000001-t1.pcap"), "{names:?}");
        assert!(names[1].ends_with("-t0.pcap") && names[2].ends_with("-t0.pcap"));
        // Once b moves on, its old file is the oldest closed one and goes first.
        b.write(2, &ipv4_packet(1), 28).expect("b");
        b.write(3, &ipv4_packet(2), 28).expect("b");
        let after = pcaps(dir.path());
        assert_eq!(after.len(), 3);
        assert!(
            !after
                .iter()
                .any(|p| p.to_string_lossy().ends_with("-000001-t1.pcap"))
        );
        a.close().expect("a");
        b.close().expect("b");
    }
}
