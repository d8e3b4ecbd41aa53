//! A protocol module knows nothing of other protocols: no source file under one protocol's
//! directory names another protocol's module (`crate::mysql`, `super::super::redis`,
//! `use crate::{postgres, ...}`) or its `Protocol` variant. Comments and string literals may
//! mention other protocols (detectors are tested against their bytes); code may not.

use std::path::{Path, PathBuf};

use proto::registry::REGISTRY;

/// The identifiers in Rust source, with comments, string, byte-string and char literals
/// removed.
fn identifiers(src: &str) -> Vec<String> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == b'/' && next == Some(b'/') {
            i = src[i..].find('\n').map_or(b.len(), |n| i + n);
        } else if c == b'/' && next == Some(b'*') {
            i = src[i + 2..].find("*/").map_or(b.len(), |n| i + 2 + n + 2);
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\'', '"'), or a lifetime ('a).
            if next == Some(b'\\') {
                i += 2;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
            } else if b.get(i + 2) == Some(&b'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let id = &src[start..i];
            if matches!(id, "r" | "br") && matches!(b.get(i), Some(b'#' | b'"')) {
                i = skip_raw_string(src, i);
            } else {
                out.push(id.to_string());
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The index after the raw string (`#"..."#`, any number of `#`) starting at `i`.
fn skip_raw_string(src: &str, i: usize) -> usize {
    let b = src.as_bytes();
    let hashes = b[i..].iter().take_while(|&&h| h == b'#').count();
    let open = i + hashes;
    if b.get(open) != Some(&b'"') {
        return open;
    }
    let close = format!("\"{}", "#".repeat(hashes));
    src[open + 1..]
        .find(&close)
        .map_or(b.len(), |n| open + 1 + n + close.len())
}

/// The names by which code could refer to protocol `name`: its module and its variant.
fn names_of(name: &str) -> [String; 2] {
    let mut variant = name.to_string();
    variant[..1].make_ascii_uppercase();
    [name.to_string(), variant]
}

/// Where `src` names another protocol than `own`: the offending identifiers.
fn foreign_names(src: &str, own: &str, all: &[&str]) -> Vec<String> {
    let foreign: Vec<String> = all
        .iter()
        .filter(|&&p| p != own)
        .flat_map(|p| names_of(p))
        .collect();
    identifiers(src)
        .into_iter()
        .filter(|id| foreign.contains(id))
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_protocol_module_names_another() {
    let all: Vec<&str> = REGISTRY.iter().map(|s| s.protocol.name()).collect();
    assert!(all.len() >= 4, "{all:?}");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for &own in &all {
        let mut files = Vec::new();
        rust_files(&src.join(own), &mut files);
        assert!(
            files.iter().any(|f| f.ends_with("mod.rs")),
            "{own}: no module directory"
        );
        for f in files {
            let text = std::fs::read_to_string(&f).expect("read source");
            let bad = foreign_names(&text, own, &all);
            assert!(
                bad.is_empty(),
                "{} names another protocol: {bad:?}",
                f.display()
            );
        }
    }
}

#[test]
fn the_scanner_finds_paths_and_skips_comments_and_literals() {
    let all = ["mysql", "postgres", "redis", "mongodb"];
    let flagged = |s: &str| foreign_names(s, "mysql", &all);
    assert_eq!(flagged("use crate::{postgres, Protocol};"), ["postgres"]);
    assert_eq!(
        flagged("let x = super::super::redis::wire::f();"),
        ["redis"]
    );
    assert_eq!(flagged("proto::mongodb::new_session(m, c)"), ["mongodb"]);
    assert_eq!(flagged("Protocol::Postgres"), ["Postgres"]);
    assert!(flagged("use crate::mysql::wire; // like postgres::wire").is_empty());
    assert!(flagged("/* redis::x */ let s = \"mongodb::y\"; let c = '\"';").is_empty());
    assert!(flagged("let t = br#\"postgres \" redis\"#; fn f<'a>(x: &'a u8) {}").is_empty());
    assert!(flagged("let redisish = 1; Protocol::Mysql").is_empty());
}
