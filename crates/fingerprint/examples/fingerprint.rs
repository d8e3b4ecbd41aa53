//! Fingerprints queries read from stdin, one per line with `\n`, `\t`, `\r`, `\\` escaped.
//! Prints `default<TAB>pt<TAB>query_id(pt)` per line, escaped the same way.
//!
//! `cargo run -p dbtap-fingerprint --example fingerprint < queries.txt`

use std::io::{BufRead, Write};

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('\\') => out.push('\\'),
            Some(o) => {
                out.push('\\');
                out.push(o);
            }
            None => out.push('\\'),
        }
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('\t', "\\t")
        .replace('\r', "\\r")
}

fn main() -> std::io::Result<()> {
    let stdin = std::io::stdin();
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let (mut a, mut b) = (String::new(), String::new());
    for line in stdin.lock().lines() {
        let q = unescape(&line?);
        fingerprint::mysql::fingerprint(&q, &mut a);
        fingerprint::mysql::fingerprint_pt(&q, &mut b);
        writeln!(
            stdout,
            "{}\t{}\t{}",
            escape(&a),
            escape(&b),
            fingerprint::query_id(&b)
        )?;
    }
    stdout.flush()
}
