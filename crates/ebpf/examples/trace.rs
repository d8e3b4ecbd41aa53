//! Prints what the eBPF tracer sees: `cargo run -p dbtap-ebpf --example trace -- --pid N`
//! (also --port P, --socket PATH, --process NAME, --tcp, --seconds S, --ring-kb N, --quiet: counters only).

use std::time::{Duration, Instant};

fn main() {
    let mut cfg = ebpf::Config::default();
    let mut secs = 10u64;
    let mut quiet = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = || -> String { String::new() };
        let mut val = || args.next().unwrap_or_else(v);
        match a.as_str() {
            "--pid" => cfg.pids.push(val().parse().expect("--pid N")),
            "--port" => cfg.ports.push(val().parse().expect("--port P")),
            "--socket" => cfg.unix_paths.push(val().into()),
            "--process" => cfg.processes.push(val()),
            "--seconds" => secs = val().parse().expect("--seconds S"),
            "--tcp" => cfg.tcp_plaintext = true,
            "--quiet" => quiet = true,
            "--ring-kb" => cfg.ring_bytes = val().parse::<usize>().expect("--ring-kb N") << 10,
            _ => {
                eprintln!("unknown argument {a}");
                std::process::exit(2)
            }
        }
    }
    let mut t = ebpf::Tracer::start(&cfg).unwrap_or_else(|e| {
        eprintln!("dbtap-ebpf: {e}");
        std::process::exit(1)
    });
    for target in t.targets() {
        eprintln!("tracing {} ({}): {}", target.pid, target.comm, target.why);
    }
    eprintln!("libssl probed: {:?}", t.ssl_libs());
    let end = Instant::now() + Duration::from_secs(secs);
    // Bytes missing per (socket, direction): offset jumps and records shorter than their `len`
    // (should equal lost_bytes + truncated_bytes).
    let mut next: std::collections::HashMap<(u64, bool), u64> = std::collections::HashMap::new();
    let mut gaps = 0u64;
    while Instant::now() < end {
        let r = t.poll(Duration::from_millis(100), &mut |e| match e {
            ebpf::Event::Data { sock, inbound, offset, len, bytes, .. } if quiet => {
                let at = next.entry((sock, inbound)).or_insert(0);
                gaps += offset.saturating_sub(*at) + (len - bytes.len() as u64);
                *at = offset + len;
            }
            _ if quiet => {}
            ebpf::Event::Data { sock, pid, inbound, offset, len, bytes, tls, .. } => {
                let head = String::from_utf8_lossy(&bytes[..bytes.len().min(60)]).replace(['\r', '\n'], ".");
                println!("data sock={sock} pid={pid} in={inbound} off={offset} len={len} n={} tls={tls} {head:?}", bytes.len());
            }
            other => println!("{other:?}"),
        });
        if let Err(e) = r {
            eprintln!("dbtap-ebpf: {e}");
            break;
        }
    }
    eprintln!("{:?}", t.stats());
    if quiet {
        eprintln!("missing bytes seen: {gaps}");
    }
    eprintln!("{:?}", t.run_time());
}
