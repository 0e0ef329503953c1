//! Picks the board's memory map from the target, and compiles the models
//! (all of `models/manifest.json`, or those named in `PTEC_CORTEX_M_MODELS`,
//! comma-separated; `none` for none) with their bundled test cases. An
//! entry may also be the absolute path of a bundle elsewhere (a model too
//! large to commit), checked at ptec's default tolerance.
use std::{env, fs, path::PathBuf};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    let target = env::var("TARGET").unwrap();
    let board = match target.as_str() {
        "thumbv7em-none-eabihf" => "an386",
        "thumbv8m.main-none-eabihf" => "an547",
        "riscv32imac-unknown-none-elf" => "virt",
        other => panic!(
            "example-cortex-m builds for thumbv7em-none-eabihf (mps2-an386, Cortex-M4F), \
             thumbv8m.main-none-eabihf (mps3-an547, Cortex-M55) \
             or riscv32imac-unknown-none-elf (QEMU's virt), not {other}"
        ),
    };
    let memory = format!("memory/{board}.x");
    fs::copy(&memory, out.join("memory.x")).unwrap();
    println!("cargo:rerun-if-changed={memory}");
    println!("cargo:rustc-link-search={}", out.display());
    // cortex-m-rt's link.x includes memory.x; riscv-rt's takes it apart.
    if board == "virt" {
        println!("cargo:rustc-link-arg-bins=-Tmemory.x");
    }
    println!("cargo:rustc-link-arg-bins=-Tlink.x");
    println!("cargo:rustc-check-cfg=cfg(board, values(\"an386\", \"an547\", \"virt\"))");
    println!("cargo:rustc-cfg=board=\"{board}\"");

    println!("cargo:rerun-if-changed=models/manifest.json");
    println!("cargo:rerun-if-env-changed=PTEC_CORTEX_M_MODELS");
    let manifest: serde_json::Value =
        serde_json::from_str(&fs::read_to_string("models/manifest.json").unwrap()).unwrap();
    let models = manifest["models"].as_object().unwrap();
    let wanted: Vec<String> = match env::var("PTEC_CORTEX_M_MODELS") {
        Ok(list) if list == "none" => Vec::new(),
        Ok(list) if !list.is_empty() => list.split(',').map(str::to_owned).collect(),
        _ => models.keys().cloned().collect(),
    };
    let mut names = Vec::new();
    for entry in &wanted {
        let (name, file, rtol, atol) = if entry.ends_with(".bpte") {
            let stem = std::path::Path::new(entry).file_stem().unwrap().to_string_lossy();
            let name: String = stem
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            let default = ptec::Tolerance::default();
            (format!("m_{name}"), entry.clone(), default.rtol, default.atol)
        } else {
            let m = models
                .get(entry)
                .unwrap_or_else(|| panic!("PTEC_CORTEX_M_MODELS: no model {entry} in models/manifest.json"));
            let file = format!("models/{}", m["file"].as_str().unwrap());
            (
                entry.clone(),
                file,
                m["rtol"].as_f64().unwrap(),
                m["atol"].as_f64().unwrap(),
            )
        };
        ptec::Builder::new(file)
            .name("Net")
            .tests(rtol, atol)
            .generate(&format!("{name}.rs"))
            .unwrap_or_else(|e| panic!("{e}"));
        names.push(name);
    }
    fs::write(out.join("models.rs"), format!("models!({});\n", names.join(", "))).unwrap();
}
