//! How big the capture rings are: `--ring-mb` when given (fixed), otherwise 32 MiB that grow
//! with the traffic ([`live::GrowingRing`]) to hold two seconds of the observed peak, within a
//! bound of 256 MiB or an eighth of the machine's memory.

use anyhow::Result;

use crate::cli::CaptureArgs;

/// The capture threads' nice value: they run first when they wake, so a host whose cores the
/// database and its clients keep busy does not starve them (the ring would fill).
pub(super) const READER_NICE: i32 = -10;
/// The ring a run starts with when `--ring-mb` is not given, MiB.
pub(super) const DEFAULT_MB: u32 = 32;
/// Growth keeps this many seconds of the observed peak rate in the ring.
const HOLD_SECONDS: f64 = 2.0;
/// Growth never goes beyond this, MiB.
const MAX_MB: u64 = 256;
/// 256 KiB blocks: a block holds the largest loopback packet (64 KiB) with room, and the kernel
/// hands a block over 20 ms after its first packet even when nearly empty, so light traffic
/// uses whole blocks: smaller blocks make the same memory last longer under light traffic
/// (128 blocks of 32 MiB last 2.5 s of a stopped reader at any rate up to 12 MiB/s).
const BLOCK_SIZE: u32 = 1 << 18;

/// Opens the rings (one per capture thread) and says what they are for the start line; the
/// most common failure (no CAP_NET_RAW) is a one-line error.
pub(super) fn open_rings(
    c: &CaptureArgs,
    filter: &[live::bpf::Insn],
) -> Result<(Vec<live::GrowingRing>, String)> {
    let threads = c.threads.clamp(1, 64);
    let mb = c.ring_mb.unwrap_or(DEFAULT_MB);
    let cfg = live::RingConfig {
        interface: c.interface.clone(),
        block_size: BLOCK_SIZE,
        block_count: (mb.max(2) * (1 << 20) / BLOCK_SIZE).max(2),
        retire_ms: 20,
        fanout_group: (threads > 1).then(|| (std::process::id() & 0xffff) as u16),
    };
    let growth = growth(c, threads);
    let rings = live::open_group(&cfg, filter, threads)?;
    raise_autogroup();
    let size_mb = (u64::from(cfg.block_count) * u64::from(BLOCK_SIZE)) >> 20;
    let desc = match &growth {
        Some(g) => format!(
            "ring {size_mb} MiB growing with the traffic up to {} MiB",
            g.max_bytes >> 20
        ),
        None => format!("ring {size_mb} MiB"),
    };
    let rings = rings
        .into_iter()
        .map(|r| {
            let mut cfg = cfg.clone();
            // Each ring's own group (the same for all, or none).
            cfg.fanout_group = cfg.fanout_group.and(r.fanout_group().ok().flatten());
            live::GrowingRing::new(r, cfg, filter.to_vec(), growth.clone())
        })
        .collect();
    Ok((rings, desc))
}

/// With the scheduler's autogroups (`kernel.sched_autogroup_enabled=1`), a thread's nice value
/// only orders it among the threads of its own session: the capture threads' [`READER_NICE`]
/// would do nothing against the database's and its clients' sessions (measured: a capture thread
/// runnable but not run for the whole of an 8 s sysbench run). So the process's autogroup gets
/// the same nice value, but only when dbtap leads its session (a service, `setsid`): the
/// autogroup is the session's, and an interactive shell's must not change. Where there is no
/// autogroup (or no CAP_SYS_NICE) nothing changes.
fn raise_autogroup() {
    let path = "/proc/self/autogroup";
    if std::path::Path::new(path).exists() && leads_session() {
        let _ = std::fs::write(path, READER_NICE.to_string());
    }
}

/// Whether this process is its session's leader (field 6 of /proc/self/stat is the pid).
fn leads_session() -> bool {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return false;
    };
    let Some(rest) = stat.rfind(')').and_then(|i| stat.get(i + 2..)) else {
        return false;
    };
    // state ppid pgrp session ...
    rest.split_whitespace().nth(3) == Some(std::process::id().to_string().as_str())
}

/// Growth, unless `--ring-mb` fixed the size or several threads share a fanout group.
fn growth(c: &CaptureArgs, threads: usize) -> Option<live::Growth> {
    if c.ring_mb.is_some() || threads > 1 {
        return None;
    }
    let max = (MAX_MB << 20).min(mem_total().map_or(u64::MAX, |m| m / 8));
    (max > u64::from(DEFAULT_MB) << 20).then_some(live::Growth {
        seconds: HOLD_SECONDS,
        max_bytes: max,
    })
}

/// MemTotal of /proc/meminfo, bytes.
fn mem_total() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The line a worker prints when its ring grew (or could not).
pub(super) fn event_line(worker: usize, e: &live::GrowthEvent) -> String {
    match e {
        live::GrowthEvent::Grown {
            from_bytes,
            to_bytes,
            rate,
        } => format!(
            "dbtap: capture ring {worker} grown from {} to {} MiB: the traffic ({:.1} MB/s) \
             filled {} MiB in {:.2} s",
            from_bytes >> 20,
            to_bytes >> 20,
            *rate as f64 / 1e6,
            from_bytes >> 20,
            *from_bytes as f64 / (*rate).max(1) as f64
        ),
        live::GrowthEvent::Failed { to_bytes, error } => format!(
            "dbtap: capture ring {worker} could not grow to {} MiB ({error}); it stays as it is",
            to_bytes >> 20
        ),
    }
}
