//! A program exported with `share_mutable_buffers` whose methods share
//! state: ExecuTorch's runtime gives them one buffer (make_fixtures.py
//! checks it does), ptec one arena per method, so ptec refuses it with an
//! error that names the methods. A program whose shared buffer only one
//! method uses (Voxtral's exports) compiles.
use std::path::PathBuf;

fn compile(path: &str) -> Result<(), String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(path);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let input = ptec::Input::new(bytes, path.display().to_string());
    ptec::compile(&input, &ptec::Options::new())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[test]
fn methods_sharing_state_are_refused() {
    let e = compile("refused/shared_state.pte").expect_err("compiled a program whose methods share state");
    assert!(
        e.contains("methods `read`, `write` all hold tensors in memory buffer 2")
            && e.contains("share_mutable_buffers")
            && e.contains("method `write`"),
        "{e}"
    );
}

#[test]
fn a_shared_buffer_one_method_uses_compiles() {
    // Every method of these plans the shared buffer; only `text_decoder`
    // holds its KV caches there.
    for name in ["voxtral_tts.pte", "xnnpack_voxtral_tts.pte"] {
        compile(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
