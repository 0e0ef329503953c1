//! The operators ptec writes into programs (`ptec_xnn::*`), with the
//! positions of their arguments, and the aten operators that passes both
//! look for and write: one place shared by the pass that makes a call and
//! the emitter that reads it.

/// The backend id ExecuTorch gives its XNNPACK delegate.
pub const XNNPACK_BACKEND_ID: &str = "XnnpackBackend";

/// aten operators the passes look for or write.
pub(crate) mod aten {
    pub(crate) const ADD: &str = "aten::add.out";
    pub(crate) const AVG_POOL2D: &str = "aten::avg_pool2d.out";
    pub(crate) const BATCH_NORM: &str = "aten::_native_batch_norm_legit_no_training.out";
    pub(crate) const CLAMP: &str = "aten::clamp.out";
    pub(crate) const CONVOLUTION: &str = "aten::convolution.out";
    pub(crate) const HARDTANH: &str = "aten::hardtanh.out";
    pub(crate) const MAX_POOL2D_WITH_INDICES: &str = "aten::max_pool2d_with_indices.out";
    pub(crate) const MEAN: &str = "aten::mean.out";
    pub(crate) const MUL: &str = "aten::mul.out";
    pub(crate) const PERMUTE_COPY: &str = "aten::permute_copy.out";
    pub(crate) const RELU: &str = "aten::relu.out";
    pub(crate) const SIGMOID: &str = "aten::sigmoid.out";
    pub(crate) const TANH: &str = "aten::tanh.out";
    pub(crate) const HARDSWISH: &str = "aten::hardswish.out";
}

/// `sigmoid_mul(x, out)`: `x · sigmoid(x)` in the two `f32` steps of the
/// `sigmoid` and `mul` it replaces (see `passes::swish`).
pub(crate) const SIGMOID_MUL: &str = "ptec::sigmoid_mul.out";

/// `gather(x, sizes, strides, offset, table?, out)`: `out` (contiguous,
/// of `Π sizes` elements) takes element `offset + Σ idx·strides` of `x`'s
/// storage, looked up in `table` (256 `i8`s, at the element + 128) if
/// any: a chain of views and permutations as one copy (see
/// `passes::gathers`).
pub(crate) const GATHER: &str = "ptec::gather.out";

/// `fully_connected(x, weight, bias?, weight_transposed, min, max, kept?, out)`:
/// XNNPACK's fully connected layer, `kept` its packed weight.
pub(crate) mod fully_connected {
    pub(crate) const NAME: &str = "ptec_xnn::fully_connected.out";
    pub(crate) const X: usize = 0;
    pub(crate) const WEIGHT: usize = 1;
    pub(crate) const BIAS: usize = 2;
    pub(crate) const TRANSPOSED: usize = 3;
    pub(crate) const MIN: usize = 4;
    pub(crate) const KEPT: usize = 6;
    pub(crate) const OUT: usize = 7;
    /// Arguments in all.
    pub(crate) const COUNT: usize = OUT + 1;
}

/// `conv2d_nhwc(x, weight, bias?, padding, stride, dilation, groups, min,
/// max, kept?, out)`: XNNPACK's convolution on NHWC images, `kept` its
/// packed filter.
pub(crate) mod conv2d_nhwc {
    pub(crate) const NAME: &str = "ptec_xnn::conv2d_nhwc.out";
    pub(crate) const WEIGHT: usize = 1;
    pub(crate) const PADDING: usize = 3;
    pub(crate) const STRIDE: usize = 4;
    pub(crate) const DILATION: usize = 5;
    pub(crate) const GROUPS: usize = 6;
    pub(crate) const MIN: usize = 7;
    pub(crate) const KEPT: usize = 9;
    pub(crate) const OUT: usize = 10;
    /// Arguments in all.
    pub(crate) const COUNT: usize = OUT + 1;
}

/// XNNPACK's statically quantized (QS8) operators on `i8` tensors. All but
/// the converts end with the same [`TAIL`](qs8::TAIL): `x_scale,
/// x_zero_point, out_scale, out_zero_point, qmin, qmax, out` (the first
/// input's and the output's quantization, and the fused clamp in quanta).
pub(crate) mod qs8 {
    /// Arguments of the tail.
    pub(crate) const TAIL: usize = 7;
    /// `quantize(x, scale, zero_point, out)`: `f32` to `i8`.
    pub(crate) const QUANTIZE: &str = "ptec_xnn::qs8_quantize.out";
    /// `dequantize(q, scale, zero_point, out)`: `i8` to `f32`.
    pub(crate) const DEQUANTIZE: &str = "ptec_xnn::qs8_dequantize.out";
    /// `lut_NAME(q, in_scale, in_zero_point, out_scale, out_zero_point,
    /// out)`: a dequantize, `aten::NAME` and a quantize as one table of
    /// the 256 inputs (see `passes::qs8_lut`).
    pub(crate) const LUT_HARDSWISH: &str = "ptec_xnn::qs8_lut_hardswish.out";
    pub(crate) const LUT_SIGMOID: &str = "ptec_xnn::qs8_lut_sigmoid.out";
    pub(crate) const LUT_TANH: &str = "ptec_xnn::qs8_lut_tanh.out";
    /// The same for `sigmoid` then `mul` by its input (SiLU).
    pub(crate) const LUT_SIGMOID_MUL: &str = "ptec_xnn::qs8_lut_sigmoid_mul.out";
    /// `conv2d_nhwc(x, weight, bias?, weight_scales?, weight_scale, padding,
    /// stride, dilation, groups, depthwise, kept?, <tail>)`: weights `[O,
    /// kH, kW, C / groups]` (`[1, kH, kW, O]` depthwise) with one scale per
    /// output channel (`weight_scales`) or one for all (`weight_scale`);
    /// `kept`, a regular convolution's packed filter.
    pub(crate) const CONV2D_NHWC: &str = "ptec_xnn::qs8_conv2d_nhwc.out";
    /// Where the weight and the kept packing are among a convolution's
    /// arguments.
    pub(crate) const CONV_WEIGHT: usize = 1;
    pub(crate) const CONV_KEPT: usize = 10;
    /// `conv2d_chain(x, <the arguments of a conv2d_nhwc from its weight to
    /// its qmax> for each of 2 or 3 convolutions, out)`: a pointwise then a
    /// depthwise convolution, a depthwise then a pointwise one, or all
    /// three, each reading the previous one's result, run band by band
    /// (see `passes::qs8_chains`).
    pub(crate) const CHAIN: &str = "ptec_xnn::qs8_conv2d_chain.out";
    /// Arguments of one stage of a chain.
    pub(crate) const CHAIN_STAGE_ARGS: usize = 10 + TAIL - 1;
    /// `fully_connected(x, weight, bias?, weight_scales?, weight_scale,
    /// weight_transposed, kept?, <tail>)`: `kept`, the packed weight.
    pub(crate) const FULLY_CONNECTED: &str = "ptec_xnn::qs8_fully_connected.out";
    pub(crate) const FC_WEIGHT: usize = 1;
    pub(crate) const FC_KEPT: usize = 6;
    /// `max_pool2d_nhwc(x, kernel, stride, padding, dilation, <tail>)`.
    pub(crate) const MAX_POOL2D_NHWC: &str = "ptec_xnn::qs8_max_pool2d_nhwc.out";
    /// `global_avg_pool2d_nhwc(x, <tail>)`.
    pub(crate) const GLOBAL_AVG_POOL2D_NHWC: &str = "ptec_xnn::qs8_global_avg_pool2d_nhwc.out";
    /// `add(a, b, b_scale, b_zero_point, <tail>)`, broadcast.
    pub(crate) const ADD: &str = "ptec_xnn::qs8_add.out";
    /// `sub(a, b, b_scale, b_zero_point, <tail>)`, broadcast.
    pub(crate) const SUB: &str = "ptec_xnn::qs8_sub.out";
    /// `mul(a, b, b_scale, b_zero_point, <tail>)`, broadcast.
    pub(crate) const MUL: &str = "ptec_xnn::qs8_mul.out";
}

/// XNNPACK's dynamically quantized fully connected layer:
/// `qd8_fully_connected(x, weight, scales, group, bias?, min, max, kept?,
/// out)`. `x` is `f32`, its rows quantized when the layer runs; `weight` is
/// `[n, k]` `i8` with `f32` `scales` per output channel, or 4-bit (`u8`,
/// `[n, k / 2]`) with `f32` scales per output channel (`group` 0) or bf16
/// scales per block of `group` inputs; `kept` holds a blockwise layer's
/// weight sums.
pub(crate) mod qd8_fully_connected {
    pub(crate) const NAME: &str = "ptec_xnn::qd8_fully_connected.out";
    pub(crate) const WEIGHT: usize = 1;
    pub(crate) const SCALES: usize = 2;
    pub(crate) const KEPT: usize = 7;
    /// Arguments in all.
    pub(crate) const COUNT: usize = 9;
}

/// `qd8_fully_connected_shared(x, weight, scales, group, bias?, min, max,
/// kept, rows, fresh, out)`: [`qd8_fully_connected`] (the same first eight
/// arguments) over input rows quantized into `rows`, an `f32` tensor of
/// `qd8::scratch_len` words. With `fresh` it quantizes `x` into `rows`;
/// without, it reads the rows the call before it made of the same `x`
/// (see [`crate::passes::shared_rows`]).
pub(crate) mod qd8_fully_connected_shared {
    pub(crate) const NAME: &str = "ptec_xnn::qd8_fully_connected_shared.out";
    pub(crate) const ROWS: usize = 8;
    pub(crate) const FRESH: usize = 9;
    /// Arguments in all.
    pub(crate) const COUNT: usize = 11;
}

/// `depthwise_conv2d_nhwc(x, weight, bias?, padding, stride, dilation, min,
/// max, out)`.
pub(crate) const DEPTHWISE_CONV2D_NHWC: &str = "ptec_xnn::depthwise_conv2d_nhwc.out";
/// `deconv2d_nhwc.out(input, filter, bias?, padding[4], stride[2],
/// dilation[2], adjustment[2], groups, output_min, output_max, out)`:
/// XNNPACK's transposed convolution.
pub(crate) const DECONV2D_NHWC: &str = "ptec_xnn::deconv2d_nhwc.out";
/// `max_pool2d_nhwc(x, kernel, stride, padding, dilation, min, max, out)`.
pub(crate) const MAX_POOL2D_NHWC: &str = "ptec_xnn::max_pool2d_nhwc.out";
/// `avg_pool2d_nhwc(x, kernel, stride, padding, min, max, out)`.
pub(crate) const AVG_POOL2D_NHWC: &str = "ptec_xnn::avg_pool2d_nhwc.out";
/// `global_avg_pool2d_nhwc(x, min, max, out)`.
pub(crate) const GLOBAL_AVG_POOL2D_NHWC: &str = "ptec_xnn::global_avg_pool2d_nhwc.out";
/// XNNPACK's batch matrix multiply.
pub(crate) const BATCH_MATMUL: &str = "ptec_xnn::batch_matmul.out";
/// XNNPACK's PReLU: `prelu(x, slope, out)`, the slope broadcast as in
/// `mul` (XNNPACK's is one per channel of the last dimension).
pub(crate) const PRELU: &str = "ptec_xnn::prelu.out";
/// A chain of folded convolutions (see `passes::conv_chains`): the input,
/// then each stage's arguments of [`folded`] after its input, then the
/// output.
pub(crate) const CONV2D_FOLDED_CHAIN: &str = "ptec_xnn::conv2d_folded_chain.out";

/// `conv2d_folded`: an NHWC convolution with a batch norm, a clamp and a
/// residual add folded in, made by the channels-last pass and, from
/// XNNPACK's convolutions, by the XNNPACK lowering.
pub(crate) mod folded {
    pub(crate) const NAME: &str = "ptec_xnn::conv2d_folded.out";
    pub(crate) const X: usize = 0;
    pub(crate) const WEIGHT: usize = 1;
    pub(crate) const BIAS: usize = 2;
    pub(crate) const BN_WEIGHT: usize = 3;
    pub(crate) const BN_BIAS: usize = 4;
    pub(crate) const MEAN: usize = 5;
    pub(crate) const VAR: usize = 6;
    pub(crate) const EPS: usize = 7;
    pub(crate) const PADDING: usize = 8;
    pub(crate) const STRIDE: usize = 9;
    pub(crate) const DILATION: usize = 10;
    pub(crate) const GROUPS: usize = 11;
    pub(crate) const MIN: usize = 12;
    pub(crate) const MAX: usize = 13;
    pub(crate) const RESIDUAL: usize = 14;
    pub(crate) const KEPT: usize = 15;
    /// The weight's layout, an integer ([`layout_code`]).
    pub(crate) const LAYOUT: usize = 16;
    /// What is applied to each result last, an integer ([`activation_code`]).
    pub(crate) const ACTIVATION: usize = 17;
    /// How the products run, an integer ([`algorithm_code`]); the kept
    /// filter is prepared for it.
    pub(crate) const ALGORITHM: usize = 18;
    pub(crate) const OUT: usize = 19;
    /// Arguments in all.
    pub(crate) const COUNT: usize = OUT + 1;

    use ptec_runtime::kernels::nhwc::{Activation, Algorithm, FilterLayout};

    /// The integer a call holds for `layout`.
    pub(crate) fn layout_code(layout: FilterLayout) -> i64 {
        match layout {
            FilterLayout::Torch => 0,
            FilterLayout::Xnnpack => 1,
        }
    }

    /// The layout `code` stands for.
    pub(crate) fn layout(code: i64) -> Option<FilterLayout> {
        [FilterLayout::Torch, FilterLayout::Xnnpack]
            .into_iter()
            .find(|&l| layout_code(l) == code)
    }

    /// The integer a call holds for `activation`.
    pub(crate) fn activation_code(activation: Activation) -> i64 {
        match activation {
            Activation::Identity => 0,
            Activation::Hardswish => 1,
            Activation::SigmoidMul => 2,
        }
    }

    /// The activation `code` stands for.
    pub(crate) fn activation(code: i64) -> Option<Activation> {
        [Activation::Identity, Activation::Hardswish, Activation::SigmoidMul]
            .into_iter()
            .find(|&a| activation_code(a) == code)
    }

    /// The integer a call holds for `algorithm`.
    pub(crate) fn algorithm_code(algorithm: Algorithm) -> i64 {
        match algorithm {
            Algorithm::Direct => 0,
            Algorithm::Winograd => 1,
        }
    }

    /// The algorithm `code` stands for.
    pub(crate) fn algorithm(code: i64) -> Option<Algorithm> {
        [Algorithm::Direct, Algorithm::Winograd]
            .into_iter()
            .find(|&a| algorithm_code(a) == code)
    }

    /// The values a call takes, by name (an absent optional is a null
    /// value; `bn` is the batch norm's weight, bias, mean, variance and
    /// eps).
    pub(crate) struct Args {
        pub x: usize,
        pub weight: usize,
        pub bias: usize,
        pub bn: [usize; 5],
        pub padding: usize,
        pub stride: usize,
        pub dilation: usize,
        pub groups: usize,
        pub min: usize,
        pub max: usize,
        pub residual: usize,
        pub kept: usize,
        pub layout: usize,
        pub activation: usize,
        pub algorithm: usize,
        pub out: usize,
    }

    impl Args {
        /// In the call's order.
        pub(crate) fn to_vec(&self) -> Vec<usize> {
            let [bn_weight, bn_bias, mean, var, eps] = self.bn;
            let mut args = vec![0; COUNT];
            for (at, v) in [
                (X, self.x),
                (WEIGHT, self.weight),
                (BIAS, self.bias),
                (BN_WEIGHT, bn_weight),
                (BN_BIAS, bn_bias),
                (MEAN, mean),
                (VAR, var),
                (EPS, eps),
                (PADDING, self.padding),
                (STRIDE, self.stride),
                (DILATION, self.dilation),
                (GROUPS, self.groups),
                (MIN, self.min),
                (MAX, self.max),
                (RESIDUAL, self.residual),
                (KEPT, self.kept),
                (LAYOUT, self.layout),
                (ACTIVATION, self.activation),
                (ALGORITHM, self.algorithm),
                (OUT, self.out),
            ] {
                args[at] = v;
            }
            args
        }
    }
}

/// The `llama::` operators of ExecuTorch's LLM export
/// (`extension/llm/custom_ops`).
pub(crate) mod llama {
    /// `update_cache(value, cache, start_pos, out)`: writes `value`
    /// (`[B, S, H, D]`) into `cache` (`[B, max_S, H, D]`) at sequence
    /// position `start_pos`, in place; `out` is a placeholder.
    pub(crate) const UPDATE_CACHE: &str = "llama::update_cache.out";
    /// `update_cache_with_indices(value, cache, start_pos, indices, out)`:
    /// as `update_cache`, each token at the position `indices[b][s]`.
    pub(crate) const UPDATE_CACHE_WITH_INDICES: &str = "llama::update_cache_with_indices.out";
    /// `custom_sdpa(q, k_cache, v_cache, start_pos, attn_mask?, dropout_p,
    /// is_causal, scale?, out)`: attention of `q` (`[B, S, H, D]`) over the
    /// caches' first `start_pos + S` positions.
    pub(crate) const CUSTOM_SDPA: &str = "llama::custom_sdpa.out";
    /// `sdpa_with_kv_cache(q, k, v, key_cache, value_cache, start_pos,
    /// seq_len, attn_mask?, dropout_p, is_causal, scale?, out)`: writes
    /// `k` and `v` into the caches in place, as `update_cache` does, then
    /// is `custom_sdpa` over them.
    pub(crate) const SDPA_WITH_KV_CACHE: &str = "llama::sdpa_with_kv_cache.out";
    /// `custom_quantized_sdpa(q, k_cache, v_cache, start_pos, attn_mask?,
    /// dropout_p, is_causal, scale?, q_zero_points?, q_scales?,
    /// k_zero_points?, k_scales?, v_zero_points?, v_scales?,
    /// is_seq_at_dim_2, out)`: `custom_sdpa` over int8 operands, each row
    /// with its scale and zero point.
    pub(crate) const CUSTOM_QUANTIZED_SDPA: &str = "llama::custom_quantized_sdpa.out";
    /// `gated_delta_rule(query, key, value, decay, beta, initial_state,
    /// out, final_state)`: Qwen3.5's linear attention, a recurrent state
    /// per head carried token by token.
    pub(crate) const GATED_DELTA_RULE: &str = "llama::gated_delta_rule.out";
    /// The cache argument of both `update_cache` operators.
    pub(crate) const CACHE: usize = 1;
    /// The caches `sdpa_with_kv_cache` writes.
    pub(crate) const KEY_CACHE: usize = 3;
    pub(crate) const VALUE_CACHE: usize = 4;
}

/// `copy_(self, src, non_blocking, out)`: the exporter's write-back of a
/// mutated buffer (or input) at the end of the method.
pub(crate) const COPY_INPLACE: &str = "aten::copy_";

/// The arguments other than the last (the out tensor) that operator `name`
/// writes in place. Their bytes hold data from run to run (a KV cache), so
/// every analysis treats them as written by the call and in use
/// throughout. A `copy_`'s `self` is a mutable buffer even when the file
/// gives it no initial state (a cache the model registered as zeros,
/// which ExecuTorch leaves in its planned memory from run to run).
pub(crate) fn written_in_place(name: &str) -> &'static [usize] {
    match name {
        llama::UPDATE_CACHE | llama::UPDATE_CACHE_WITH_INDICES => &[llama::CACHE],
        llama::SDPA_WITH_KV_CACHE => &[llama::KEY_CACHE, llama::VALUE_CACHE],
        COPY_INPLACE => &[0],
        _ => &[],
    }
}

/// The non-empty `parts` in CamelCase: `["mobilenet", "v2"]` → `MobilenetV2`.
pub(crate) fn camel_case<'a>(parts: impl Iterator<Item = &'a str>) -> String {
    parts
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
                None => String::new(),
            }
        })
        .collect()
}
