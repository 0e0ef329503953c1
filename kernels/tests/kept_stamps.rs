//! Generated code decides whether a run is the one that prepares a kept
//! buffer (and may then let go of the constants it read) by
//! `gemm::holds_stamp`: every preparation must leave it true on a zeroed
//! buffer, and a zeroed buffer must not hold one.
use ptec_kernels::gemm::holds_stamp;
use ptec_kernels::nhwc::{Activation, Algorithm, Conv2dNhwc, FilterLayout, FoldedConv};
use ptec_kernels::{bf16, linear, qd8, qs8};

fn check(name: &str, len: usize, prepare: impl Fn(&mut [f32])) {
    let mut kept = vec![0.0f32; len];
    assert!(!holds_stamp(&kept), "{name}: a zeroed buffer");
    prepare(&mut kept);
    assert!(holds_stamp(&kept), "{name}: after its preparation");
}

#[test]
fn every_preparation_stamps_its_buffer() {
    let (k, n) = (64, 24);
    let w: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 - 3.0).collect();
    check("linear", ptec_kernels::gemm::packed_len(k, n), |kept| {
        linear::pack_fully_connected(&w, k, n, false, kept)
    });

    let q: Vec<u8> = (0..k * n / 2).map(|i| i as u8).collect();
    let scales = vec![bf16::from_f32(0.5); n * k / 32];
    check("qd8 blockwise", qd8::blockwise_kept_len(k, n, 32), |kept| {
        qd8::prepare_blockwise(&q, &scales, 32, k, n, kept)
    });

    let i8w: Vec<i8> = (0..k * n).map(|i| (i % 13) as i8 - 6).collect();
    check(
        "qs8 fully connected",
        qs8::Layout::fully_connected(k, n).packed_len(),
        |kept| qs8::pack_fully_connected(&i8w, k, n, true, kept),
    );

    let g = Conv2dNhwc::regular(&[1, 6, 6, 8], &[16, 3, 3, 8], [1, 1], [1, 1, 1, 1], [1, 1], 1).unwrap();
    let cw: Vec<f32> = (0..16 * 3 * 3 * 8).map(|i| (i % 5) as f32).collect();
    check("conv filter", g.packed_filter_len(), |kept| g.pack_filter(&cw, kept));
    let cq: Vec<i8> = cw.iter().map(|&v| v as i8).collect();
    check("qs8 conv", qs8::Layout::conv(&g).packed_len(), |kept| {
        qs8::pack_conv(&g, &cq, kept)
    });
    let folded = FoldedConv {
        geometry: g,
        algorithm: Algorithm::Direct,
        layout: FilterLayout::Xnnpack,
        w: &cw,
        bias: None,
        bn: None,
        residual: None,
        min: f32::NEG_INFINITY,
        max: f32::INFINITY,
        activation: Activation::Identity,
    };
    check("folded conv", g.folded_len(Algorithm::Direct), |kept| {
        folded.prepare(kept)
    });
}
