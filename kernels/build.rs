//! Enables the AVX-512 kernels when the compiler has stable AVX-512
//! intrinsics (Rust 1.89); older compilers (the crate supports 1.85) build
//! the AVX2 and portable kernels only.
use std::process::Command;

fn main() {
    println!("cargo:rustc-check-cfg=cfg(ptec_avx512)");
    println!("cargo:rerun-if-env-changed=RUSTC");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .unwrap_or_default();
    // "rustc 1.95.0 (...)": the minor version.
    let minor = version
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.split('.').nth(1))
        .and_then(|m| m.parse::<u32>().ok())
        .unwrap_or(0);
    if minor >= 89 {
        println!("cargo:rustc-cfg=ptec_avx512");
    }
}
