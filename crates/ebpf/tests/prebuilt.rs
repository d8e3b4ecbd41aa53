//! The committed prebuilt BPF object is what the C source compiles to (where clang and
//! llvm-strip are installed; otherwise the check says it is skipped).
//! The prebuilt object was compiled with clang 14 (Debian 12).

use std::process::Command;

#[test]
fn prebuilt_object_matches_the_source() {
    let dir = env!("CARGO_MANIFEST_DIR");
    // The object was built with Debian's clang 14; another version emits other bytes.
    let version = Command::new("clang").arg("--version").output();
    let version = version
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    if !version.contains("clang version 14.") {
        eprintln!(
            "SKIPPED: the prebuilt object comes from clang 14; here: {}",
            version.lines().next().unwrap_or("no clang")
        );
        return;
    }
    let out = std::env::temp_dir().join(format!("dbtap-prebuilt-check-{}.o", std::process::id()));
    let clang = Command::new("clang")
        .current_dir(dir)
        .args([
            "-g",
            "-O2",
            "-target",
            "bpf",
            "-mcpu=v3",
            "-D__TARGET_ARCH_x86",
            &format!("-fdebug-prefix-map={dir}=."),
            "-Isrc/bpf",
            "-c",
        ])
        .arg("src/bpf/dbtap.bpf.c")
        .arg("-o")
        .arg(&out)
        .status();
    if !clang.is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED: clang (with the libbpf headers) cannot compile the BPF program here");
        return;
    }
    let strip = Command::new("llvm-strip").arg("-g").arg(&out).status();
    if !strip.is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED: no llvm-strip");
        let _ = std::fs::remove_file(&out);
        return;
    }
    let fresh = std::fs::read(&out).unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_file(&out);
    let committed =
        std::fs::read(format!("{dir}/src/bpf/dbtap.bpf.o")).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        fresh == committed,
        "src/bpf/dbtap.bpf.o is stale: regenerate it with the command in build.rs"
    );
}
