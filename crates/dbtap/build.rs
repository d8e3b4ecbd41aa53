//! Tells the binary what it was built from, for `dbtap_build_info` in /metrics: the git
//! revision (`DBTAP_GIT_REVISION`, when built from a git checkout) and the compiler's version
//! (`DBTAP_RUSTC_VERSION`). Either is left unset when it cannot be found; nothing fails.

use std::path::Path;
use std::process::Command;

fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !s.trim().is_empty()).then(|| s.trim().to_string())
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    output(Command::new("git").arg("-C").arg(dir).args(args))
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DBTAP_GIT_REVISION");
    let dir = std::env::var_os("CARGO_MANIFEST_DIR").map(std::path::PathBuf::from);
    let given = std::env::var("DBTAP_GIT_REVISION")
        .ok()
        .filter(|s| !s.is_empty());
    let revision = given.or_else(|| {
        let dir = dir.as_deref()?;
        let rev = git(dir, &["rev-parse", "--short=12", "HEAD"])?;
        // Rebuild when HEAD moves: its file, and the branch's ref (loose or packed).
        for p in ["HEAD", "packed-refs"] {
            if let Some(path) = git(dir, &["rev-parse", "--git-path", p]) {
                println!("cargo:rerun-if-changed={}", dir.join(path).display());
            }
        }
        if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"])
            && let Some(path) = git(dir, &["rev-parse", "--git-path", &branch])
        {
            println!("cargo:rerun-if-changed={}", dir.join(path).display());
        }
        Some(rev)
    });
    if let Some(rev) = revision {
        println!("cargo:rustc-env=DBTAP_GIT_REVISION={rev}");
    }
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    // "rustc 1.95.0 (59807616e 2026-04-14)" -> "1.95.0"
    if let Some(v) = output(Command::new(rustc).arg("--version"))
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_string))
    {
        println!("cargo:rustc-env=DBTAP_RUSTC_VERSION={v}");
    }
}
