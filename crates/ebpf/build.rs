//! Compiles the BPF program (src/bpf/dbtap.bpf.c) with clang into OUT_DIR/dbtap.bpf.o; without
//! clang (or when it fails, or with DBTAP_BPF_PREBUILT=1) the committed src/bpf/dbtap.bpf.o is
//! used instead, so the crate builds everywhere.
//!
//! Regenerate the committed object after changing the C source (from crates/ebpf):
//!   clang -g -O2 -target bpf -mcpu=v3 -D__TARGET_ARCH_x86 -fdebug-prefix-map=$PWD=. -Isrc/bpf \
//!     -c src/bpf/dbtap.bpf.c -o src/bpf/dbtap.bpf.o && llvm-strip -g src/bpf/dbtap.bpf.o
//! (`-fdebug-prefix-map`: the BTF line info names the source relative to the crate, so the
//! object does not depend on where the repository is; `llvm-strip -g` drops DWARF but keeps the BTF that CO-RE needs; `llvm-strip-14` on Debian.)
//! src/bpf/vmlinux.h: `bpftool btf dump file /sys/kernel/btf/vmlinux format c`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn clang_args(src: &Path, out: &Path, include: Option<&str>) -> Vec<String> {
    let mut a: Vec<String> = [
        "-g",
        "-O2",
        "-target",
        "bpf",
        "-mcpu=v3",
        "-D__TARGET_ARCH_x86",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Ok(dir) = std::env::var("CARGO_MANIFEST_DIR") {
        a.push(format!("-fdebug-prefix-map={dir}=."));
    }
    a.push(format!(
        "-I{}",
        src.parent().unwrap_or(Path::new(".")).display()
    ));
    if let Some(inc) = include {
        a.push(format!("-I{inc}"));
    }
    a.push("-c".into());
    a.push(src.display().to_string());
    a.push("-o".into());
    a.push(out.display().to_string());
    a
}

fn compile(src: &Path, out: &Path) -> Result<(), String> {
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    // libbpf-sys exports the headers it vendors (bpf_helpers.h, ...); /usr/include otherwise.
    let include = std::env::var("DEP_BPF_INCLUDE").ok();
    let r = Command::new(&clang)
        .args(clang_args(src, out, include.as_deref()))
        .output()
        .map_err(|e| format!("{clang}: {e}"))?;
    if !r.status.success() {
        let err = String::from_utf8_lossy(&r.stderr);
        return Err(format!(
            "{clang} failed: {}",
            err.lines().take(5).collect::<Vec<_>>().join(" | ")
        ));
    }
    Ok(())
}

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let src = dir.join("src/bpf/dbtap.bpf.c");
    let prebuilt = dir.join("src/bpf/dbtap.bpf.o");
    let out = out_dir.join("dbtap.bpf.o");
    println!("cargo:rerun-if-changed={}", src.display());
    println!(
        "cargo:rerun-if-changed={}",
        dir.join("src/bpf/vmlinux.h").display()
    );
    println!("cargo:rerun-if-changed={}", prebuilt.display());
    println!("cargo:rerun-if-env-changed=DBTAP_BPF_PREBUILT");
    println!("cargo:rerun-if-env-changed=CLANG");
    let forced = std::env::var("DBTAP_BPF_PREBUILT").is_ok_and(|v| v == "1");
    let built = if forced {
        Err("DBTAP_BPF_PREBUILT=1".to_string())
    } else {
        compile(&src, &out)
    };
    if let Err(why) = built {
        println!("cargo:warning=using the prebuilt BPF object ({why})");
        std::fs::copy(&prebuilt, &out).expect("copy the prebuilt src/bpf/dbtap.bpf.o");
    }
}
