//! Compiles the repo's fixtures (and, when `../../shared/corpus` is there,
//! the end-to-end corpus cases) through the build-script front end,
//! `ptec::Builder`, with their bundled test cases. A program ptec cannot
//! compile becomes a module whose only test fails with the compiler's
//! message, so nothing is silently skipped.
use std::path::{Path, PathBuf};

/// The cases every front end must pass: (name, file, .ptd, rtol, atol).
const FIXTURES: &[(&str, &str, Option<&str>, f64, f64)] = &[
    ("mlp", "fixtures/mlp.bpte", None, 1e-4, 1e-5),
    ("mlp_bp04", "fixtures/mlp_bp04.bp", None, 1e-4, 1e-5),
    ("cond", "fixtures/cond.bpte", None, 1e-4, 1e-5),
    ("multi_method", "fixtures/multi_method.bpte", None, 1e-4, 1e-5),
    ("multi_method_bp04", "fixtures/multi_method_bp04.bp", None, 1e-4, 1e-5),
    ("kv_cache", "fixtures/kv_cache.bpte", None, 1e-4, 1e-5),
    ("dynamic", "fixtures/dynamic.bpte", None, 1e-4, 1e-5),
    ("ops_mix", "fixtures/ops_mix.bpte", None, 1e-4, 1e-5),
    ("attention", "fixtures/attention.bpte", None, 1e-4, 1e-5),
    ("small_heads", "fixtures/small_heads.bpte", None, 1e-4, 1e-5),
    ("stacktrace", "fixtures/stacktrace.bpte", None, 1e-4, 1e-5),
    (
        "external_weights",
        "fixtures/external_weights.bpte",
        Some("fixtures/external_weights.ptd"),
        1e-4,
        1e-5,
    ),
    ("conv", "fixtures/conv.bpte", None, 1e-4, 1e-4),
    ("channels_last", "fixtures/channels_last.bpte", None, 1e-4, 1e-4),
    ("xnnpack_conv", "fixtures/xnnpack_conv.bpte", None, 1e-4, 1e-5),
    // A 3 × 3 convolution run by Winograd's F(2 × 2, 3 × 3), aten's and
    // XNNPACK's (and by the direct sum: `DIRECT`).
    ("winograd", "fixtures/winograd.bpte", None, 1e-4, 1e-4),
    ("xnnpack_winograd", "fixtures/xnnpack_winograd.bpte", None, 1e-4, 1e-4),
    // Hardswish applied by the convolutions before it, inside a chain
    // (compiler/tests/chains.rs; two threads: tests/threads.rs).
    ("xnnpack_hardswish", "fixtures/xnnpack_hardswish.bpte", None, 1e-4, 1e-4),
    ("xnnpack_ops", "fixtures/xnnpack_ops.bpte", None, 1e-4, 1e-5),
    // Views planned at their base's bytes (compiler/src/alias.rs).
    ("patch_embed", "fixtures/patch_embed.bpte", None, 1e-4, 1e-4),
    ("view_aliases", "fixtures/view_aliases.bpte", None, 1e-4, 1e-4),
    ("aliased_chain", "fixtures/aliased_chain.bpte", None, 1e-4, 1e-4),
    (
        "xnnpack_patch_embed",
        "fixtures/xnnpack_patch_embed.bpte",
        None,
        1e-4,
        1e-4,
    ),
    (
        "xnnpack_view_aliases",
        "fixtures/xnnpack_view_aliases.bpte",
        None,
        1e-4,
        1e-4,
    ),
    ("breadth", "fixtures/breadth.bpte", None, 1e-4, 1e-4),
    ("xnnpack_breadth", "fixtures/xnnpack_breadth.bpte", None, 1e-4, 1e-4),
    ("xnnpack_deconv", "fixtures/xnnpack_deconv.bpte", None, 1e-4, 1e-4),
    ("grid_sample", "fixtures/grid_sample.bpte", None, 1e-4, 1e-4),
    ("topk", "fixtures/topk.bpte", None, 1e-4, 1e-5),
    ("pads", "fixtures/pads.bpte", None, 1e-4, 1e-5),
    ("more_ops", "fixtures/more_ops.bpte", None, 1e-4, 1e-5),
    // Complex tensors in, out, constant and planned (complex32, complex64,
    // complex128), and built from real ones.
    ("complex", "fixtures/complex.bpte", None, 1e-4, 1e-5),
    ("complex_build", "fixtures/complex_build.bpte", None, 1e-4, 1e-5),
    ("selections", "fixtures/selections.bpte", None, 1e-4, 1e-5),
    // Gradients of convolutions and max pooling (sums of up to a few
    // hundred products), and in the half types to a few of their ulps.
    ("grad_ops", "fixtures/grad_ops.bpte", None, 1e-4, 1e-4),
    ("grad_ops_half", "fixtures/grad_ops_half.bpte", None, 1e-4, 0.05),
    ("grad_ops_bf16", "fixtures/grad_ops_bf16.bpte", None, 1e-4, 0.25),
    ("upsample_aa", "fixtures/upsample_aa.bpte", None, 1e-4, 1e-5),
    // Running statistics updated in place, over three calls.
    ("batch_norm_train", "fixtures/batch_norm_train.bpte", None, 1e-4, 1e-5),
    (
        "batch_norm_train_half",
        "fixtures/batch_norm_train_half.bpte",
        None,
        1e-4,
        0.05,
    ),
    // A training step as the exporter writes it (the joint graph).
    ("train_step", "fixtures/train_step.bpte", None, 1e-4, 1e-5),
    // Indices read from the inputs (tests/tests/api/model_api.rs).
    ("dynamic_scatter", "fixtures/dynamic_scatter.bpte", None, 1e-4, 1e-5),
    (
        "xnnpack_dynamic_ops",
        "fixtures/xnnpack_dynamic_ops.bpte",
        None,
        1e-4,
        1e-4,
    ),
    (
        "xnnpack_dynamic_pools",
        "fixtures/xnnpack_dynamic_pools.bpte",
        None,
        1e-4,
        1e-4,
    ),
    ("video", "fixtures/video.bpte", None, 1e-4, 1e-4),
    ("xnnpack_video", "fixtures/xnnpack_video.bpte", None, 1e-4, 1e-4),
    // Eager PyTorch's quantized model, to 4 quanta (of 0.0064).
    ("xnnpack_qs8_cnn", "fixtures/xnnpack_qs8_cnn.bpte", None, 0.0, 0.026),
    // ExecuTorch's runtime with XNNPACK, to the bit.
    (
        "xnnpack_qs8_cnn_runtime",
        "fixtures/xnnpack_qs8_cnn_runtime.bpte",
        None,
        0.0,
        0.0,
    ),
    // Its two int8 inverted residual blocks streamed band by band
    // (compiler/tests/chains.rs), to the bit; also on two threads
    // (tests/threads.rs).
    ("xnnpack_qs8_chains", "fixtures/xnnpack_qs8_chains.bpte", None, 0.0, 0.0),
    (
        "xnnpack_qs8_hardswish",
        "fixtures/xnnpack_qs8_hardswish.bpte",
        None,
        0.0,
        0.0,
    ),
    ("xnnpack_qs8_silu", "fixtures/xnnpack_qs8_silu.bpte", None, 0.0, 0.0),
    ("xnnpack_qd8_mlp", "fixtures/xnnpack_qd8_mlp.bpte", None, 0.0, 0.0),
    // ExecuTorch's runtime on an x86 CPU without AVX-512 VNNI and on one
    // with it, whose XNNPACK sums the 4-bit blocks in other orders: here
    // to an ulp or so, and the one of this CPU's kind to the bit
    // (tests/build_step.rs).
    (
        "xnnpack_qb4_linear",
        "fixtures/xnnpack_qb4_linear.bpte",
        None,
        1e-5,
        1e-6,
    ),
    (
        "xnnpack_qb4_linear_vnni",
        "fixtures/xnnpack_qb4_linear_vnni.bpte",
        None,
        1e-5,
        1e-6,
    ),
    // Exact int8 layers between fp32 operators that are not (see the
    // fixture's note).
    (
        "xnnpack_llama_8da4w",
        "fixtures/xnnpack_llama_8da4w.bpte",
        None,
        0.0,
        0.05,
    ),
    ("llama_kv", "fixtures/llama_kv.bpte", None, 1e-4, 1e-4),
    ("xnnpack_llama_kv", "fixtures/xnnpack_llama_kv.bpte", None, 1e-4, 1e-4),
    ("llama_dynamic", "fixtures/llama_dynamic.bpte", None, 1e-4, 1e-4),
    (
        "xnnpack_llama_dynamic",
        "fixtures/xnnpack_llama_dynamic.bpte",
        None,
        1e-4,
        1e-4,
    ),
    // ExecuTorch's runtime: to the bit on x86-64 Linux (check_cli), where
    // both call glibc's exp; other C libraries' (wasm's, say) differ in
    // the last bit.
    ("quantized_sdpa", "fixtures/quantized_sdpa.bpte", None, 0.0, 1e-6),
    (
        "llama_quantized_kv",
        "fixtures/llama_quantized_kv.bpte",
        None,
        1e-4,
        1e-4,
    ),
    // LLaVA's three methods (image pads computed at run time, a text
    // decoder over embeddings), portable and through XNNPACK.
    ("llava", "fixtures/llava.bpte", None, 1e-4, 1e-4),
    ("xnnpack_llava", "fixtures/xnnpack_llava.bpte", None, 1e-4, 1e-4),
    // The wheel's recipe (int8 encoder, 8da4w decoder, 8-bit embedding),
    // against ExecuTorch's runtime.
    (
        "xnnpack_llava_recipe",
        "fixtures/xnnpack_llava_recipe.bpte",
        None,
        1e-4,
        1e-4,
    ),
    // Gemma 4's text decoder as its own export script lowers it: caches
    // the model registers as zeros, written at the run-time position by a
    // `slice_scatter` and back by `copy_`, a prompt then seven tokens.
    ("xnnpack_gemma4", "fixtures/xnnpack_gemma4.bpte", None, 1e-4, 1e-4),
    // Voxtral Realtime as its export script makes it from a (synthetic)
    // Mistral checkpoint: an audio encoder of run-time length, a text
    // decoder over embeddings with adaptive norms, a token embedding.
    ("voxtral_realtime", "fixtures/voxtral_realtime.bpte", None, 1e-4, 1e-4),
    (
        "xnnpack_voxtral_realtime",
        "fixtures/xnnpack_voxtral_realtime.bpte",
        None,
        1e-4,
        1e-4,
    ),
    // Its streaming export: an encoder chunk a call, its convolutions'
    // edges and attention in ring buffers, the decoder's caches rings of
    // the sliding window.
    (
        "voxtral_realtime_streaming",
        "fixtures/voxtral_realtime_streaming.bpte",
        None,
        1e-4,
        1e-4,
    ),
    (
        "xnnpack_voxtral_realtime_streaming",
        "fixtures/xnnpack_voxtral_realtime_streaming.bpte",
        None,
        1e-4,
        1e-4,
    ),
    // Voxtral TTS's two programs: the language model with the flow-matching
    // head (five methods, the KV cache in the buffer its export shares
    // between methods), and the codec decoder.
    ("voxtral_tts", "fixtures/voxtral_tts.bpte", None, 1e-4, 1e-4),
    (
        "xnnpack_voxtral_tts",
        "fixtures/xnnpack_voxtral_tts.bpte",
        None,
        1e-4,
        1e-4,
    ),
    ("voxtral_tts_codec", "fixtures/voxtral_tts_codec.bpte", None, 1e-4, 1e-4),
    (
        "xnnpack_voxtral_tts_codec",
        "fixtures/xnnpack_voxtral_tts_codec.bpte",
        None,
        1e-4,
        1e-4,
    ),
    // MLPerf Tiny's models through ExecuTorch's Cortex-M backend flow
    // (`cortex_m::` operators), against the converted graph's eager run, to
    // the bit (examples/cortex-m, make_fixtures.py --only cortex_m).
    (
        "ds_cnn_cortex_m",
        "../examples/cortex-m/models/ds_cnn_cortex_m.bpte",
        None,
        0.0,
        0.0,
    ),
    // Its fp32 convolutions between cortex_m::quantize and dequantize (an
    // NCHW model) vary in their last bits with the instruction set: to two
    // quanta of the output.
    (
        "ds_cnn_cortex_m_nchw",
        "../examples/cortex-m/models/ds_cnn_cortex_m_nchw.bpte",
        None,
        0.0,
        0.003359263064339757,
    ),
    (
        "ds_cnn_cortex_m_nhwc",
        "../examples/cortex-m/models/ds_cnn_cortex_m_nhwc.bpte",
        None,
        0.0,
        0.0,
    ),
    (
        "mobilenet_v1_025_cortex_m",
        "../examples/cortex-m/models/mobilenet_v1_025_cortex_m.bpte",
        None,
        0.0,
        0.0,
    ),
    (
        "mobilenet_v1_025_cortex_m_nhwc",
        "../examples/cortex-m/models/mobilenet_v1_025_cortex_m_nhwc.bpte",
        None,
        0.0,
        0.0,
    ),
    (
        "resnet8_cortex_m",
        "../examples/cortex-m/models/resnet8_cortex_m.bpte",
        None,
        0.0,
        0.0,
    ),
    (
        "resnet8_cortex_m_nhwc",
        "../examples/cortex-m/models/resnet8_cortex_m_nhwc.bpte",
        None,
        0.0,
        0.0,
    ),
    // cortex_m::pad with uneven amounts, legacy and explicit-layout.
    (
        "conv_pad_cortex_m",
        "../examples/cortex-m/models/conv_pad_cortex_m.bpte",
        None,
        0.0,
        0.0,
    ),
    (
        "conv_pad_cortex_m_nhwc",
        "../examples/cortex-m/models/conv_pad_cortex_m_nhwc.bpte",
        None,
        0.0,
        0.0,
    ),
    (
        "deep_autoencoder_cortex_m",
        "../examples/cortex-m/models/deep_autoencoder_cortex_m.bpte",
        None,
        0.0,
        0.0,
    ),
    // The backend's other operators, one small model each
    // (make_fixtures.py's _cortex_m_ops), to the bit.
    (
        "mul_cortex_m",
        "../examples/cortex-m/models/mul_cortex_m.bpte",
        None,
        0.0,
        0.0,
    ),
    (
        "broadcast_add_mul_cortex_m",
        "../examples/cortex-m/models/broadcast_add_mul_cortex_m.bpte",
        None,
        0.0,
        0.0,
    ),
    (
        "div_cortex_m",
        "../examples/cortex-m/models/div_cortex_m.bpte",
        None,
        0.0,
        0.0,
    ),
    (
        "activations_cortex_m",
        "../examples/cortex-m/models/activations_cortex_m.bpte",
        None,
        0.0,
        0.0,
    ),
    (
        "softmax_cortex_m",
        "../examples/cortex-m/models/softmax_cortex_m.bpte",
        None,
        0.0,
        0.0,
    ),
    (
        "min_max_cortex_m",
        "../examples/cortex-m/models/min_max_cortex_m.bpte",
        None,
        0.0,
        0.0,
    ),
    (
        "max_pool_cortex_m",
        "../examples/cortex-m/models/max_pool_cortex_m.bpte",
        None,
        0.0,
        0.0,
    ),
    (
        "max_pool_cortex_m_nhwc",
        "../examples/cortex-m/models/max_pool_cortex_m_nhwc.bpte",
        None,
        0.0,
        0.0,
    ),
    (
        "transpose_conv_cortex_m",
        "../examples/cortex-m/models/transpose_conv_cortex_m.bpte",
        None,
        0.0,
        0.0,
    ),
    (
        "transpose_conv_cortex_m_nhwc",
        "../examples/cortex-m/models/transpose_conv_cortex_m_nhwc.bpte",
        None,
        0.0,
        0.0,
    ),
    (
        "bmm_cortex_m",
        "../examples/cortex-m/models/bmm_cortex_m.bpte",
        None,
        0.0,
        0.0,
    ),
];

/// Fixtures compiled again in external-weights mode (the files are given at
/// construction): data from the .pte and a .ptd, mutable state initialised
/// from the file, constant outputs read from it, and filters and weights
/// prepared by the first run instead of the compiler.
const EXTERNAL: &[&str] = &[
    "external_weights",
    "kv_cache",
    "llama_kv",
    "multi_method",
    "mlp",
    "attention",
    "conv",
    "channels_last",
    "xnnpack_conv",
    "xnnpack_ops",
    "xnnpack_qb4_linear",
    "xnnpack_qb4_linear_vnni",
    "xnnpack_qs8_cnn",
    "xnnpack_qs8_cnn_runtime",
    "view_aliases",
    "winograd",
    "xnnpack_winograd",
];

/// Fixtures compiled again with `winograd = false`: every convolution by
/// the direct sum.
const DIRECT: &[&str] = &["winograd", "xnnpack_winograd"];

/// Fixtures compiled again with their convolutions left NCHW (no
/// channels-last regions), so both ways stay tested.
const NCHW: &[&str] = &["conv", "channels_last"];

/// Fixtures compiled again with `trace = true` (`tests/tests/build_step.rs`
/// runs them traced): control flow, an XNNPACK delegate lowered into
/// kernels (also with external weights), channels-last convolutions,
/// dynamic shapes and mutable state.
const TRACED: &[&str] = &["cond", "xnnpack_conv", "conv", "dynamic", "kv_cache"];

/// Fixtures whose delegates `examples/tiny-backend`'s backend serves: one
/// delegate call, and the same with device copies around it.
const USER_BACKEND: &[&str] = &["tiny_delegate", "device_copies"];

/// XNNPACK-delegated corpus programs, compiled with their delegates left to
/// a user backend (tests/recording_backend.rs) rather than compiled.
const DELEGATED: &[&str] = &["xnnpack_mlp", "xnnpack_partial"];

/// Corpus cases of the code-generation issue, and the XNNPACK-delegated ones
/// (their delegate calls compiled).
pub const CORPUS: &[&str] = &[
    "mlp",
    "conv_net",
    "cond",
    "multi_method",
    "kv_cache",
    "dynamic",
    "xnnpack_mlp",
    "xnnpack_partial",
];

/// How a fixture is compiled besides its defaults.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Default,
    ExternalWeights,
    Nchw,
    Traced,
    TracedExternal,
    Direct,
}

fn generate(name: &str, file: &Path, data: Option<&Path>, rtol: f64, atol: f64, mode: Mode, out: &Path) {
    let mut b = ptec::Builder::new(file)
        .name("Program")
        .tests(rtol, atol)
        .external_weights(matches!(mode, Mode::ExternalWeights | Mode::TracedExternal))
        .channels_last(mode != Mode::Nchw)
        .trace(matches!(mode, Mode::Traced | Mode::TracedExternal))
        .winograd(mode != Mode::Direct)
        .out_dir(out);
    if let Some(d) = data {
        b = b.data(d);
    }
    if let Err(e) = b.generate(&format!("{name}.rs")) {
        let msg = e.to_string();
        std::fs::write(
            out.join(format!("{name}.rs")),
            format!(
                "#[test]\nfn not_compiled() {{\n    panic!(\"ptec could not compile {name}: {{}}\", {msg:?});\n}}\n"
            ),
        )
        .expect("write OUT_DIR");
        println!(
            "cargo:warning=ptec could not compile {name}: {}",
            msg.lines().next().unwrap_or("")
        );
    }
}

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let mut modules = Vec::new();
    for (name, file, data, rtol, atol) in FIXTURES {
        let module = format!("fixture_{name}");
        generate(
            &module,
            Path::new(file),
            data.map(Path::new),
            *rtol,
            *atol,
            Mode::Default,
            &out,
        );
        modules.push(module);
        for (set, mode, prefix) in [
            (EXTERNAL, Mode::ExternalWeights, "external"),
            (NCHW, Mode::Nchw, "nchw"),
            (DIRECT, Mode::Direct, "direct"),
            (TRACED, Mode::Traced, "traced"),
            (&["xnnpack_conv"], Mode::TracedExternal, "traced_external"),
        ] {
            if set.contains(name) {
                let module = format!("{prefix}_{name}");
                generate(&module, Path::new(file), data.map(Path::new), *rtol, *atol, mode, &out);
                modules.push(module);
            }
        }
    }
    // export_llama's model families (make_fixtures.py's LLM_FAMILIES), at
    // their manifest's tolerances.
    let fixtures: serde_json::Value =
        serde_json::from_slice(&std::fs::read("fixtures/manifest.json").expect("fixtures/manifest.json"))
            .expect("manifest JSON");
    println!("cargo:rerun-if-changed=fixtures/manifest.json");
    let families = fixtures["fixtures"].as_object().expect("fixtures");
    let families: Vec<&String> = families
        .keys()
        .filter(|n| n.starts_with("llm_") || n.starts_with("xnnpack_llm_"))
        .collect();
    assert!(families.len() >= 18, "{families:?}");
    for name in families {
        let f = &fixtures["fixtures"][name];
        let (rtol, atol) = (f["rtol"].as_f64().expect("rtol"), f["atol"].as_f64().expect("atol"));
        let module = format!("fixture_{name}");
        let file = format!("fixtures/{name}.bpte");
        generate(&module, Path::new(&file), None, rtol, atol, Mode::Default, &out);
        modules.push(module);
    }
    // Programs whose delegates a user backend serves (examples/tiny-backend's
    // `TinyBackend`), for the Model API's property test: with delegates,
    // no `#[test]`s are generated (they cannot make the backend).
    for name in USER_BACKEND {
        let module = format!("user_backend_{name}");
        let file = format!("fixtures/{name}.bpte");
        generate(&module, Path::new(&file), None, 1e-4, 1e-5, Mode::Default, &out);
        modules.push(module);
    }
    let corpus = Path::new("../../shared/corpus");
    println!("cargo:rerun-if-changed={}", corpus.display());
    println!("cargo:rerun-if-env-changed=PTEC_REQUIRE_CORPUS");
    // In CI the corpus must be there: its tests may not pass by skipping.
    let required = std::env::var_os("PTEC_REQUIRE_CORPUS").is_some_and(|v| !v.is_empty() && v != "0");
    assert!(
        !required || corpus.join("manifest.json").exists(),
        "PTEC_REQUIRE_CORPUS is set but there is no corpus at {}",
        corpus.display()
    );
    if corpus.join("manifest.json").exists() {
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(corpus.join("manifest.json")).expect("manifest"))
                .expect("manifest JSON");
        for name in CORPUS {
            let case = &manifest["cases"][name];
            let rtol = case["rtol"].as_f64().unwrap_or(1e-4);
            let atol = case["atol"].as_f64().unwrap_or(1e-5);
            let file = corpus.join(case["bpte"].as_str().unwrap_or_default());
            let module = format!("corpus_{name}");
            generate(&module, &file, None, rtol, atol, Mode::Default, &out);
            modules.push(module);
        }
        for name in DELEGATED {
            let file = corpus.join(format!("{name}.bpte"));
            let b = ptec::Builder::new(&file)
                .name("Program")
                .tests(1e-4, 1e-4)
                .lower_xnnpack(false)
                .out_dir(&out);
            b.generate(&format!("delegated_{name}.rs"))
                .unwrap_or_else(|e| panic!("ptec could not compile {name} with user backends: {e}"));
        }
        println!("cargo:rustc-cfg=ptec_corpus");
    } else {
        println!(
            "cargo:warning=no corpus at {}: corpus cases are skipped",
            corpus.display()
        );
    }
    // One module per generated file, for tests/build_step.rs to include.
    let mut list = String::new();
    for m in &modules {
        list.push_str(&format!(
            "#[allow(dead_code)]\nmod {m} {{\n    include!(concat!(env!(\"OUT_DIR\"), \"/{m}.rs\"));\n}}\n"
        ));
    }
    std::fs::write(out.join("generated_modules.rs"), list).expect("write OUT_DIR");
}
