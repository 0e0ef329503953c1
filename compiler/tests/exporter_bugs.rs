//! Programs that ExecuTorch's exporter itself gets wrong (its runtime
//! disagrees with eager PyTorch on them, see `tests/fixtures/exporter-bugs/`):
//! ptec refuses each, with a located error saying why, rather than compile
//! the wrong numbers faithfully.
use std::path::PathBuf;

/// The `refusal` string of `name`'s entry in the manifest.
fn refusal_of(manifest: &str, name: &str) -> String {
    let entry = &manifest[manifest
        .find(&format!("\"{name}\": {{"))
        .unwrap_or_else(|| panic!("{name} not in the manifest"))..];
    let key = "\"refusal\": \"";
    let start = entry.find(key).unwrap() + key.len();
    entry[start..start + entry[start..].find('"').unwrap()].to_string()
}

#[test]
fn exporter_bugs_are_refused() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/exporter-bugs");
    let manifest = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("pte") {
            continue;
        }
        let name = path.file_stem().unwrap().to_str().unwrap();
        let want = refusal_of(&manifest, name);
        let bytes = std::fs::read(&path).unwrap();
        let input = ptec::Input::new(bytes, path.display().to_string());
        let Err(e) = ptec::compile(&input, &ptec::Options::new()) else {
            panic!("{name}: compiled, but ExecuTorch's exporter gets it wrong; want a refusal saying {want:?}");
        };
        let text = e.to_string();
        assert!(text.contains(&want), "{name}: refused for another reason: {text}");
        // Located: the delegate call, the node and its byte offset.
        assert!(
            text.contains("instruction 0, XNNPACK node") && text.contains("byte offset"),
            "{name}: {text}"
        );
        n += 1;
    }
    assert!(n >= 6, "only {n} programs in {}", dir.display());
}
