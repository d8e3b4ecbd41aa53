//! Property tests of the `/proc` parsers behind the `process_*` metrics: any text parses
//! without a panic, and a well-formed `/proc/<pid>/stat` line gives back its fields whatever
//! the command name holds (spaces, parentheses, any character).

use metrics::process::{
    Stat, parse_boot_time, parse_max_open_files, parse_stat, parse_stat_cpu_ticks,
    parse_status_rss_bytes,
};
use proptest::prelude::*;

proptest! {
    #[test]
    fn any_text_parses_without_panic(s in any::<String>()) {
        let _ = parse_stat(&s);
        let _ = parse_stat_cpu_ticks(&s);
        let _ = parse_status_rss_bytes(&s);
        let _ = parse_boot_time(&s);
        let _ = parse_max_open_files(&s);
    }

    #[test]
    fn stat_fields_round_trip(
        pid in 1u32..4_000_000,
        comm in "[ -~\u{e9}\u{4e2d}]{0,16}",
        utime in any::<u32>(),
        stime in any::<u32>(),
        threads in 1u64..100_000,
        start in any::<u64>(),
        vsize in any::<u64>(),
    ) {
        // Fields 3..=52; 14 utime, 15 stime, 20 num_threads, 22 starttime, 23 vsize.
        let mut f: Vec<String> = (3..=52).map(|n| (n * 7).to_string()).collect();
        f[0] = "S".into();
        f[14 - 3] = utime.to_string();
        f[15 - 3] = stime.to_string();
        f[20 - 3] = threads.to_string();
        f[22 - 3] = start.to_string();
        f[23 - 3] = vsize.to_string();
        let line = format!("{pid} ({comm}) {}\n", f.join(" "));
        prop_assert_eq!(
            parse_stat(&line),
            Some(Stat {
                cpu_ticks: u64::from(utime) + u64::from(stime),
                threads,
                start_ticks: start,
                vsize_bytes: vsize,
            })
        );
    }

    #[test]
    fn limits_and_status_values(soft in any::<u64>(), hard in any::<u64>(), kb in 0u64..(u64::MAX >> 10)) {
        let limits = format!(
            "Limit                     Soft Limit           Hard Limit           Units     \n\
             Max open files            {soft:<20} {hard:<20} files     \n"
        );
        prop_assert_eq!(parse_max_open_files(&limits), Some(soft));
        let status = format!("Name:\tx\nVmRSS:\t{kb:>8} kB\nThreads:\t3\n");
        prop_assert_eq!(parse_status_rss_bytes(&status), Some(kb * 1024));
    }
}
