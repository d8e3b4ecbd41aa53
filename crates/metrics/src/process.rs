//! The agent process's own resource use, read from `/proc` the way the Prometheus client
//! libraries' process collectors do, and exported under their standard `process_*` names
//! (plus `dbtap_build_info`).

use std::fmt::Write as _;

/// What the binary was built from: the labels of `dbtap_build_info`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BuildInfo {
    /// The package version (`CARGO_PKG_VERSION`).
    pub version: &'static str,
    /// The git commit built, where the build had a git checkout.
    pub revision: Option<&'static str>,
    /// The compiler's version (`1.95.0`), where the build could ask it.
    pub rustc: Option<&'static str>,
}

/// The agent process's own resource use. A field is `None` where it could not be read (not
/// Linux, or `/proc` not mounted); its family is then left out, as the client libraries do.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AgentInfo {
    /// User plus system CPU time, seconds.
    pub cpu_seconds: Option<f64>,
    /// Resident set size, bytes.
    pub rss_bytes: Option<u64>,
    /// Virtual memory size, bytes.
    pub virtual_bytes: Option<u64>,
    /// Open file descriptors.
    pub open_fds: Option<u64>,
    /// The soft limit on open file descriptors (`None` also when unlimited).
    pub max_fds: Option<u64>,
    /// When the process started, seconds since the Unix epoch.
    pub start_time_unix: f64,
    /// OS threads of the process.
    pub threads: Option<u64>,
    /// What the binary was built from.
    pub build: BuildInfo,
}

impl AgentInfo {
    /// Reads the process's numbers from `/proc/self` (`stat`, `status`, `fd`, `limits`) and
    /// the boot time from `/proc/stat`. The start time is the kernel's (boot time plus the
    /// process's start in clock ticks), or `fallback_start_unix` where that cannot be read.
    pub fn read_self(fallback_start_unix: f64, build: BuildInfo) -> AgentInfo {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let stat = read("/proc/self/stat").and_then(|s| parse_stat(&s));
        let status = read("/proc/self/status");
        let ticks = crate::prom::clock_ticks_per_second();
        let start = stat.zip(read("/proc/stat").and_then(|s| parse_boot_time(&s)));
        AgentInfo {
            cpu_seconds: stat.map(|s| s.cpu_ticks as f64 / ticks),
            rss_bytes: status.as_deref().and_then(|s| status_kb(s, "VmRSS:")),
            virtual_bytes: stat.map(|s| s.vsize_bytes),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|d| d.filter(Result::is_ok).count() as u64),
            max_fds: read("/proc/self/limits").and_then(|s| parse_max_open_files(&s)),
            start_time_unix: start.map_or(fallback_start_unix, |(s, boot)| {
                boot as f64 + s.start_ticks as f64 / ticks
            }),
            threads: stat.map(|s| s.threads),
            build,
        }
    }

    /// Appends the `process_*` families and `dbtap_build_info`.
    pub fn render(&self, out: &mut String) {
        use crate::prom::{family, sample};
        let families: [(&str, &str, &str, Option<f64>); 7] = [
            (
                "process_cpu_seconds_total",
                "counter",
                "Total user and system CPU time spent in seconds.",
                self.cpu_seconds,
            ),
            (
                "process_resident_memory_bytes",
                "gauge",
                "Resident memory size in bytes.",
                self.rss_bytes.map(|v| v as f64),
            ),
            (
                "process_virtual_memory_bytes",
                "gauge",
                "Virtual memory size in bytes.",
                self.virtual_bytes.map(|v| v as f64),
            ),
            (
                "process_open_fds",
                "gauge",
                "Number of open file descriptors.",
                self.open_fds.map(|v| v as f64),
            ),
            (
                "process_max_fds",
                "gauge",
                "Maximum number of open file descriptors.",
                self.max_fds.map(|v| v as f64),
            ),
            (
                "process_start_time_seconds",
                "gauge",
                "Start time of the process since unix epoch in seconds.",
                Some(self.start_time_unix),
            ),
            (
                "process_threads",
                "gauge",
                "Number of OS threads in the process.",
                self.threads.map(|v| v as f64),
            ),
        ];
        for (name, kind, help, v) in families {
            if let Some(v) = v {
                family(out, name, kind, help);
                sample(out, name, "", v);
            }
        }
        family(
            out,
            "dbtap_build_info",
            "gauge",
            "Always 1; the labels say which dbtap runs: version, and the git revision and rustc \
             version it was built from where known.",
        );
        let b = &self.build;
        let mut labels = String::new();
        for (k, v) in [
            ("version", Some(b.version)),
            ("revision", b.revision),
            ("rustc", b.rustc),
        ] {
            let Some(v) = v else { continue };
            if !labels.is_empty() {
                labels.push(',');
            }
            let _ = write!(labels, "{k}=\"");
            crate::prom::escape_label_value(v, &mut labels);
            labels.push('"');
        }
        sample(out, "dbtap_build_info", &labels, 1);
    }
}

/// The fields of `/proc/<pid>/stat` the process metrics use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// utime + stime (fields 14 and 15), clock ticks.
    pub cpu_ticks: u64,
    /// num_threads (field 20).
    pub threads: u64,
    /// starttime (field 22): clock ticks after boot.
    pub start_ticks: u64,
    /// vsize (field 23), bytes.
    pub vsize_bytes: u64,
}

/// Parses a `/proc/<pid>/stat` line. The command name (field 2) is in parentheses and may hold
/// spaces and parentheses, so fields are counted after the last `)`.
pub fn parse_stat(stat: &str) -> Option<Stat> {
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    // Field 3 is the first after ')': field n is at index n - 3.
    let f: Vec<&str> = rest.split_ascii_whitespace().take(21).collect();
    let num = |n: usize| -> Option<u64> { f.get(n - 3)?.parse().ok() };
    Some(Stat {
        cpu_ticks: num(14)?.saturating_add(num(15)?),
        threads: num(20)?,
        start_ticks: num(22)?,
        vsize_bytes: num(23)?,
    })
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line, in clock ticks.
pub fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    parse_stat(stat).map(|s| s.cpu_ticks)
}

/// A `Name:   1234 kB` line of `/proc/<pid>/status`, in bytes.
fn status_kb(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix(key))?;
    let mut it = line.split_ascii_whitespace();
    let n: u64 = it.next()?.parse().ok()?;
    match it.next() {
        Some("kB") | None => Some(n.saturating_mul(1024)),
        _ => None,
    }
}

/// The `VmRSS:   1234 kB` line of `/proc/<pid>/status`, in bytes.
pub fn parse_status_rss_bytes(status: &str) -> Option<u64> {
    status_kb(status, "VmRSS:")
}

/// The `btime` line of `/proc/stat`: boot time, seconds since the Unix epoch.
pub fn parse_boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// The soft limit of the `Max open files` line of `/proc/<pid>/limits` (`None` when unlimited).
pub fn parse_max_open_files(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    line.split_ascii_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_line() {
        let stat = "1234 (my (odd) proc) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 \
                    3 0 100 1000000 200 18446744073709551615";
        assert_eq!(parse_stat_cpu_ticks(stat), Some(300));
        assert_eq!(
            parse_stat(stat),
            Some(Stat {
                cpu_ticks: 300,
                threads: 3,
                start_ticks: 100,
                vsize_bytes: 1_000_000
            })
        );
        assert_eq!(parse_stat_cpu_ticks("garbage"), None);
        assert_eq!(parse_stat_cpu_ticks("1 (x) S 1 2"), None);
        assert_eq!(
            parse_stat("1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18"),
            None
        );
    }

    #[test]
    fn status_rss() {
        let status = "Name:\tdbtap\nVmPeak:\t  9000 kB\nVmRSS:\t    1234 kB\nThreads:\t4\n";
        assert_eq!(parse_status_rss_bytes(status), Some(1234 * 1024));
        assert_eq!(parse_status_rss_bytes("Name:\tx\n"), None);
    }

    #[test]
    fn boot_time_and_fd_limit() {
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nintr 5\nbtime 1795609732\nprocesses 9\n"),
            Some(1_795_609_732)
        );
        assert_eq!(parse_boot_time("cpu 1\n"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max cpu time              unlimited            unlimited            seconds   \n\
                      Max open files            20000                524288               files     \n";
        assert_eq!(parse_max_open_files(limits), Some(20000));
        assert_eq!(
            parse_max_open_files(
                "Max open files            unlimited            unlimited  files\n"
            ),
            None
        );
    }

    #[test]
    fn read_self_sees_this_process() {
        let build = BuildInfo {
            version: "1.2.3",
            revision: None,
            rustc: None,
        };
        let a = AgentInfo::read_self(1.5, build);
        assert_eq!(a.build, build);
        if cfg!(target_os = "linux") {
            assert!(a.rss_bytes.is_some_and(|r| r > 0));
            assert!(a.virtual_bytes >= a.rss_bytes);
            assert!(a.cpu_seconds.is_some_and(|c| c >= 0.0));
            assert!(a.open_fds.is_some_and(|n| n >= 3), "{a:?}");
            assert!(a.threads.is_some_and(|n| n >= 1));
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            // Started in the last hour, not in the future (a tick of rounding allowed).
            assert!(a.start_time_unix <= now + 1.0 && a.start_time_unix > now - 3600.0);
        }
    }

    #[test]
    fn build_info_labels() {
        let mut out = String::new();
        let a = AgentInfo {
            build: BuildInfo {
                version: "0.1.0",
                revision: Some("abc\"def"),
                rustc: None,
            },
            ..AgentInfo::default()
        };
        a.render(&mut out);
        assert!(
            out.ends_with("dbtap_build_info{version=\"0.1.0\",revision=\"abc\\\"def\"} 1\n"),
            "{out}"
        );
        // Only the start time is known here: no other process family.
        assert_eq!(out.matches("# TYPE process_").count(), 1, "{out}");
    }
}
