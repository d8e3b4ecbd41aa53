//! Invariants of the tree that the compiler does not check by itself: no crate may use `unsafe`
//! except `live` and `metrics`, which keep it in one audited module each.

use std::path::{Path, PathBuf};

/// The crates allowed `unsafe`, with the modules that may hold it.
const UNSAFE_ALLOWED: &[(&str, &[&str])] =
    &[("live", &["src/sys.rs"]), ("metrics", &["src/prom.rs"])];

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or_else(|| panic!("no parent of the dbtap crate"))
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_crate_forbids_unsafe_but_the_live_capture_ones() {
    let mut checked = 0;
    for e in std::fs::read_dir(crates_dir()).unwrap_or_else(|e| panic!("{e}")) {
        let dir = e.unwrap_or_else(|e| panic!("{e}")).path();
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_string();
        let root = ["src/lib.rs", "src/main.rs"]
            .iter()
            .map(|r| dir.join(r))
            .find(|p| p.exists());
        let Some(root) = root else { continue };
        let text = std::fs::read_to_string(&root).unwrap_or_else(|e| panic!("{e}"));
        checked += 1;
        match UNSAFE_ALLOWED.iter().find(|(c, _)| *c == name) {
            None => assert!(
                text.contains("#![forbid(unsafe_code)]"),
                "{} lacks #![forbid(unsafe_code)]",
                root.display()
            ),
            Some((_, modules)) => {
                assert!(
                    text.contains("#![deny(unsafe_code)]"),
                    "{} lacks #![deny(unsafe_code)]",
                    root.display()
                );
                // Only the audited modules may opt back in.
                let mut files = Vec::new();
                rust_files(&dir.join("src"), &mut files);
                for f in files {
                    let t = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{e}"));
                    if t.contains("allow(unsafe_code)") {
                        assert!(
                            modules.iter().any(|m| f.ends_with(m)),
                            "{} allows unsafe code; only {name}/{modules:?} may",
                            f.display()
                        );
                    }
                }
            }
        }
    }
    assert!(checked >= 11, "only {checked} crates found");
}

/// Whether a source path is test code (test files, `tests/` dirs, benches and examples).
fn is_test_code(rel: &str) -> bool {
    rel.contains("/tests/")
        || rel.contains("/benches/")
        || rel.contains("/examples/")
        || rel.ends_with("tests.rs")
        || rel.ends_with("_tests.rs")
        || rel.contains("/testing")
}

/// Functions of `text` longer than `max` lines: a `fn` line up to the `}` at its indentation.
fn long_functions(text: &str, max: usize) -> Vec<(usize, usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let ind = &l[..l.len() - t.len()];
        let t = t
            .strip_prefix("pub(crate) ")
            .or_else(|| t.strip_prefix("pub(super) "))
            .or_else(|| t.strip_prefix("pub "))
            .unwrap_or(t);
        let t = t.strip_prefix("const ").unwrap_or(t);
        let Some(rest) = t.strip_prefix("fn ") else {
            continue;
        };
        if l.trim_end().ends_with(';') {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let close = format!("{ind}}}");
        if let Some(j) = lines[i + 1..].iter().position(|x| *x == close) {
            let n = j + 2;
            if n > max {
                out.push((i + 1, n, name));
            }
        }
    }
    out
}

#[test]
fn rooms_you_can_hold_in_your_head() {
    // Non-test code: no file over 1,000 lines, no function over 100 (ARCHITECTURE.md).
    let mut files = Vec::new();
    rust_files(&crates_dir(), &mut files);
    let mut bad = Vec::new();
    for f in &files {
        let rel = f.to_string_lossy().replace('\\', "/");
        if rel.contains("/target/") || is_test_code(&rel) {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{e}"));
        let n = text.lines().count();
        if n > 1000 {
            bad.push(format!("{rel}: {n} lines"));
        }
        for (line, len, name) in long_functions(&text, 100) {
            bad.push(format!("{rel}:{line}: fn {name} is {len} lines"));
        }
    }
    assert!(files.len() > 100, "only {} files found", files.len());
    assert!(bad.is_empty(), "split these:\n{}", bad.join("\n"));
}

#[test]
fn the_length_check_sees_a_long_function() {
    let long = format!("fn f() {{\n{}}}\n", "    x();\n".repeat(120));
    assert_eq!(long_functions(&long, 100).len(), 1);
    let short = "fn g() {\n    y();\n}\n";
    assert!(long_functions(short, 100).is_empty());
}
