//! Invariants of the tree that the compiler does not check by itself: no crate may use `unsafe`
//! except the live-capture crates, which keep it in one audited module each.

use std::path::{Path, PathBuf};

/// The crates allowed `unsafe`, with the one module that may hold it.
const UNSAFE_ALLOWED: &[(&str, &str)] = &[("live", "src/sys.rs"), ("metrics", "src/prom.rs")];

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
            Some((_, module)) => {
                assert!(
                    text.contains("#![deny(unsafe_code)]"),
                    "{} lacks #![deny(unsafe_code)]",
                    root.display()
                );
                // Only the audited module may opt back in.
                let mut files = Vec::new();
                rust_files(&dir.join("src"), &mut files);
                for f in files {
                    let t = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{e}"));
                    if t.contains("allow(unsafe_code)") {
                        assert!(
                            f.ends_with(module),
                            "{} allows unsafe code; only {name}/{module} may",
                            f.display()
                        );
                    }
                }
            }
        }
    }
    assert!(checked >= 11, "only {checked} crates found");
}
