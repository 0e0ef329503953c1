//! Channels-last regions: aten convolutions run on NHWC images (an
//! IR-to-IR pass).
//!
//! PyTorch's convolutions take NCHW images; ptec's fastest convolution
//! kernels (those XNNPACK subgraphs compile to) take NHWC, where a pixel's
//! channels are contiguous. This pass keeps NHWC the images that allow it
//! and rewrites the operations around them:
//!
//! - a 2-d convolution (ungrouped or depthwise, its weight a constant)
//!   becomes `ptec_xnn::conv2d_folded`, which absorbs an inference batch
//!   norm that is the only reader of its result, an `add` of that to
//!   another image (a residual connection), and a clamp (`hardtanh`,
//!   `relu`, `clamp`) after that, each the only reader of the one before:
//!   the filter is rearranged and rescaled on the first run, the residual
//!   added and the clamp applied as outputs are stored;
//! - `add` of two NHWC images, and a clamp of one, stay what they are
//!   (element-wise, they do not care about the layout);
//! - a mean over the height and width of an NHWC image becomes a global
//!   average pooling.
//!
//! An image is kept NHWC when everything that writes it and reads it is one
//! of these operations (decided for the whole method, to a fixed point);
//! it keeps its value index and its planned bytes, and only its sizes
//! change to `[N, H, W, C]`. Where a convolution reads an image that stays
//! NCHW, or writes one, a permutation into (out of) a temporary is made.
//! Methods with jumps are left as they are.
use crate::analysis::alias::share_bytes;
use crate::analysis::uses::Uses;
use crate::ir::*;
use crate::names::aten::{ADD, BATCH_NORM, CLAMP, CONVOLUTION, HARDTANH, MEAN, PERMUTE_COPY, RELU};
use crate::names::{folded, AVG_POOL2D_NHWC, GLOBAL_AVG_POOL2D_NHWC, MAX_POOL2D_NHWC};
use crate::passes::rewrite::{kernel_call, push_f32_tensor, push_int_list, push_value};
use ptec_runtime::kernels::nhwc::{Activation, Algorithm, Conv2dNhwc, FilterLayout, Window2d};
use std::collections::{HashMap, HashSet};

/// NCHW → NHWC and back, as `permute_copy` dims.
const TO_NHWC: [usize; 4] = [0, 2, 3, 1];
const TO_NCHW: [usize; 4] = [0, 3, 1, 2];

/// A convolution with what it absorbs.
struct Conv {
    /// How many instructions after it it absorbs.
    absorbed: usize,
    x: usize,
    w: usize,
    bias: Option<usize>,
    geometry: Conv2dNhwc,
    stride: [usize; 2],
    padding: [usize; 4],
    dilation: [usize; 2],
    bn: Option<BatchNorm>,
    /// The image an absorbed `add` adds to the (batch-normed) result.
    residual: Option<usize>,
    clamp: (f64, f64),
    /// The value the whole chain writes.
    out: usize,
}

struct BatchNorm {
    weight: Option<usize>,
    bias: Option<usize>,
    mean: usize,
    var: usize,
    eps: f64,
}

/// What an instruction of the method is to this pass.
enum Role {
    /// A convolution (and the instructions it absorbs).
    Conv(Box<Conv>),
    /// An instruction absorbed by the convolution at instruction `by`.
    Absorbed {
        by: usize,
    },
    /// `add(a, b)` of same-sized 4-d images, alpha 1.
    Add {
        a: usize,
        b: usize,
        out: usize,
    },
    /// A clamp of a 4-d image.
    Clamp {
        x: usize,
        out: usize,
    },
    /// A mean over dims 2 and 3 of a 4-d image.
    SpatialMean {
        x: usize,
        out: usize,
    },
    /// Max or average pooling of a 4-d image, as ptec's NHWC kernels
    /// compute it.
    Pool(Box<Pool>),
    Other,
}

/// A 2-d pooling: the NHWC operator and its window.
struct Pool {
    op: &'static str,
    x: usize,
    out: usize,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 4],
    /// Of max pooling only.
    dilation: Option<[usize; 2]>,
    out_sizes: [usize; 4],
}

/// A static, contiguous `f32` tensor.
fn f32_tensor(m: &Method, v: usize) -> Option<&Tensor> {
    m.values
        .get(v)?
        .as_tensor()
        .filter(|t| t.dtype == ScalarType::Float && t.dynamism == Dynamism::Static && t.is_contiguous())
}

pub(crate) fn image(m: &Method, v: usize) -> Option<[usize; 4]> {
    f32_tensor(m, v)?.sizes.as_slice().try_into().ok()
}

/// A constant `f32` tensor of `len` elements (any rank).
fn constant_vector(m: &Method, v: usize, len: usize) -> Option<usize> {
    let t = f32_tensor(m, v)?;
    let constant = matches!(
        t.placement,
        Placement::Constant { .. } | Placement::External { data: Some(_), .. }
    );
    (constant && t.numel() == len).then_some(v)
}

/// An optional constant vector: `Some(None)` for a None argument.
fn optional_vector(m: &Method, v: usize, len: usize) -> Option<Option<usize>> {
    match m.values.get(v)? {
        Value::Null => Some(None),
        _ => constant_vector(m, v, len).map(Some),
    }
}

pub(crate) fn int(m: &Method, v: usize) -> Option<i64> {
    match m.values.get(v)? {
        Value::Int(i) => Some(*i),
        _ => None,
    }
}

pub(crate) fn number(m: &Method, v: usize) -> Option<f64> {
    match m.values.get(v)? {
        Value::Int(i) => Some(*i as f64),
        Value::Double(d) => Some(*d),
        _ => None,
    }
}

fn ints(m: &Method, v: usize) -> Option<Vec<i64>> {
    match m.values.get(v)? {
        Value::IntList(items) => items.iter().map(|&i| int(m, i)).collect(),
        _ => None,
    }
}

/// A list of non-negative integers.
pub(crate) fn usizes(m: &Method, v: usize) -> Option<Vec<usize>> {
    ints(m, v)?.into_iter().map(|x| usize::try_from(x).ok()).collect()
}

/// A pair of non-negative integers, given as one (for both) or two.
fn pair(m: &Method, v: usize) -> Option<[usize; 2]> {
    match usizes(m, v)?[..] {
        [a] => Some([a, a]),
        [a, b] => Some([a, b]),
        _ => None,
    }
}

/// The convolution at instruction `n`, when this pass can run it NHWC.
fn convolution(m: &Method, args: &[usize]) -> Option<Conv> {
    let &[x, w, bias, stride, padding, dilation, transposed, _, groups, out, ret] = args else {
        return None;
    };
    let ([n, c, h, wd], [o, cg, kh, kw]) = (image(m, x)?, image(m, w)?);
    constant_vector(m, w, o * cg * kh * kw)?;
    let bias = optional_vector(m, bias, o)?;
    let (stride, [ph, pw], dilation) = (pair(m, stride)?, pair(m, padding)?, pair(m, dilation)?);
    let groups = usize::try_from(int(m, groups)?).ok()?;
    if !matches!(m.values.get(transposed), Some(Value::Bool(false))) || ret != out {
        return None;
    }
    let padding = [ph, pw, ph, pw];
    let geometry = Conv2dNhwc::folded(
        FilterLayout::Torch,
        &[n, h, wd, c],
        &[o, cg, kh, kw],
        stride,
        padding,
        dilation,
        groups,
    )?;
    let [on, oh, ow, oc] = geometry.output_sizes();
    if image(m, out)? != [on, oc, oh, ow] {
        return None;
    }
    Some(Conv {
        absorbed: 0,
        x,
        w,
        bias,
        geometry,
        stride,
        padding,
        dilation,
        bn: None,
        residual: None,
        clamp: (f64::NEG_INFINITY, f64::INFINITY),
        out,
    })
}

/// The only reader of `v` (written by instruction `writer`), when it is
/// instruction `writer + 1` reading it as its first argument.
fn next_reads_only<'m>(m: &'m Method, uses: &Uses, writer: usize, v: usize) -> Option<(String, &'m [usize])> {
    let readers = uses.kernel_uses(v, writer)?;
    let next = writer + 1;
    if readers.iter().any(|&(r, pos)| r != next || pos != 0) || readers.is_empty() {
        return None;
    }
    kernel_name(m, m.instructions.get(next)?)
}

/// The batch norm at `n + 1` reading the convolution's output (`o`
/// channels, sizes `sizes`), when it can be folded: returns it and its
/// output.
fn batch_norm_after(m: &Method, uses: &Uses, n: usize, conv_out: usize, o: usize) -> Option<(BatchNorm, usize)> {
    let (name, a) = next_reads_only(m, uses, n, conv_out)?;
    let &[_, weight, bias, mean, var, _, eps, out, save_mean, save_rstd, ret] = a else {
        return None;
    };
    if name != BATCH_NORM || image(m, out)? != image(m, conv_out)? {
        return None;
    }
    // The saved statistics (empty in inference) must be read by nobody.
    for v in [save_mean, save_rstd, ret] {
        if !uses.kernel_uses(v, n + 1)?.is_empty() {
            return None;
        }
    }
    let bn = BatchNorm {
        weight: optional_vector(m, weight, o)?,
        bias: optional_vector(m, bias, o)?,
        mean: constant_vector(m, mean, o)?,
        var: constant_vector(m, var, o)?,
        eps: number(m, eps)?,
    };
    Some((bn, out))
}

/// `add(a, b)` of same-sized 4-d images, alpha 1: `(a, b, out)`.
fn image_add(m: &Method, name: &str, args: &[usize]) -> Option<(usize, usize, usize)> {
    match *args {
        [a, b, alpha, out, ret]
            if name == ADD
                && ret == out
                && number(m, alpha) == Some(1.0)
                && image(m, a).is_some()
                && image(m, a) == image(m, b)
                && image(m, a) == image(m, out) =>
        {
            Some((a, b, out))
        }
        _ => None,
    }
}

/// The `add` at `writer + 1` when it is the only reader of `v` (an image,
/// written by `writer`) and adds it to another image: returns that image
/// (the residual) and the sum.
pub(crate) fn residual_add_after(m: &Method, uses: &Uses, writer: usize, v: usize) -> Option<(usize, usize)> {
    let readers = uses.kernel_uses(v, writer)?;
    let next = writer + 1;
    if readers.len() != 1 || readers[0].0 != next {
        return None;
    }
    let (name, args) = kernel_name(m, m.instructions.get(next)?)?;
    let (a, b, out) = image_add(m, &name, args)?;
    match readers[0].1 {
        0 => Some((b, out)),
        1 => Some((a, out)),
        _ => None,
    }
}

/// The clamp bounds and input/output of a `hardtanh`, `relu` or `clamp`.
pub(crate) fn clamp_of(m: &Method, name: &str, a: &[usize]) -> Option<((f64, f64), usize, usize)> {
    let bound = |v: usize, none: f64| match m.values.get(v)? {
        Value::Null => Some(none),
        _ => number(m, v),
    };
    let (bounds, x, out, ret) = match (name, a) {
        (RELU, &[x, out, ret]) => ((0.0, f64::INFINITY), x, out, ret),
        (HARDTANH, &[x, lo, hi, out, ret]) => ((number(m, lo)?, number(m, hi)?), x, out, ret),
        (CLAMP, &[x, lo, hi, out, ret]) => ((bound(lo, f64::NEG_INFINITY)?, bound(hi, f64::INFINITY)?), x, out, ret),
        _ => return None,
    };
    let (lo, hi) = bounds;
    // NaN or empty ranges are left to the aten kernels.
    (lo <= hi && ret == out && image(m, x)? == image(m, out)?).then_some((bounds, x, out))
}

/// `mean(x, [2, 3] or [-1, -2], keepdim, None)` of an `f32` image into
/// `[N, C]` or `[N, C, 1, 1]`: the same bytes in either layout.
fn spatial_mean(m: &Method, args: &[usize]) -> Option<Role> {
    let &[x, dims, _, dtype, out, ret] = args else {
        return None;
    };
    let [n, c, _, _] = image(m, x)?;
    let mut dims: Vec<i64> = ints(m, dims)?.iter().map(|&d| if d < 0 { d + 4 } else { d }).collect();
    dims.sort_unstable();
    let sizes = &f32_tensor(m, out)?.sizes;
    let fits = sizes[..] == [n, c] || sizes[..] == [n, c, 1, 1];
    (ret == out && dims == [2, 3] && fits && matches!(m.values.get(dtype), Some(Value::Null)))
        .then_some(Role::SpatialMean { x, out })
}

/// `max_pool2d_with_indices` (its indices read by nobody) or `avg_pool2d`
/// (padding not counted, or none) of an `f32` image, in floor mode.
fn pooling(m: &Method, uses: &Uses, n: usize, name: &str, args: &[usize]) -> Option<Role> {
    let (op, x, out, dilation, ceil_mode) = match (name, args) {
        ("aten::max_pool2d_with_indices.out", &[x, _, _, _, dilation, ceil_mode, out, indices, _]) => {
            if !uses.kernel_uses(indices, n)?.is_empty() {
                return None;
            }
            (MAX_POOL2D_NHWC, x, out, Some(pair(m, dilation)?), ceil_mode)
        }
        ("aten::avg_pool2d.out", &[x, _, _, padding, ceil_mode, count_pad, divisor, out, ret]) => {
            let unpadded = pair(m, padding)? == [0, 0];
            let counts_pad = !matches!(m.values.get(count_pad), Some(Value::Bool(false)));
            if ret != out || !matches!(m.values.get(divisor), Some(Value::Null)) || (counts_pad && !unpadded) {
                return None;
            }
            (AVG_POOL2D_NHWC, x, out, None, ceil_mode)
        }
        _ => return None,
    };
    if !matches!(m.values.get(ceil_mode), Some(Value::Bool(false))) {
        return None;
    }
    let [b, c, h, w] = image(m, x)?;
    let kernel = pair(m, args[1])?;
    // An empty stride is the kernel's.
    let stride = match ints(m, args[2])?.len() {
        0 => kernel,
        _ => pair(m, args[2])?,
    };
    let [ph, pw] = pair(m, args[3])?;
    let padding = [ph, pw, ph, pw];
    let window = Window2d::new(b, h, w, kernel, stride, padding, dilation.unwrap_or([1, 1]))?;
    let out_sizes = [b, window.out_h, window.out_w, c];
    (image(m, out)? == [b, c, window.out_h, window.out_w]).then(|| {
        Role::Pool(Box::new(Pool {
            op,
            x,
            out,
            kernel,
            stride,
            padding,
            dilation,
            out_sizes,
        }))
    })
}

/// The roles of a method's instructions: convolutions with what they
/// absorb, and the element-wise operations that may run NHWC.
fn roles(m: &Method, uses: &Uses) -> Vec<Role> {
    let mut roles: Vec<Role> = Vec::with_capacity(m.instructions.len());
    let mut n = 0;
    while n < m.instructions.len() {
        let Some((name, args)) = kernel_name(m, &m.instructions[n]) else {
            roles.push(Role::Other);
            n += 1;
            continue;
        };
        let role = match name.as_str() {
            CONVOLUTION => convolution(m, args).map(|c| Role::Conv(Box::new(c))),
            ADD => image_add(m, &name, args).map(|(a, b, out)| Role::Add { a, b, out }),
            MEAN => spatial_mean(m, args),
            "aten::max_pool2d_with_indices.out" | "aten::avg_pool2d.out" => pooling(m, uses, n, &name, args),
            _ => clamp_of(m, &name, args).map(|(_, x, out)| Role::Clamp { x, out }),
        };
        let Some(mut role) = role else {
            roles.push(Role::Other);
            n += 1;
            continue;
        };
        let mut absorbed = 0;
        if let Role::Conv(conv) = &mut role {
            let mut writer = n;
            if let Some((bn, out)) = batch_norm_after(m, uses, writer, conv.out, conv.geometry.out_c) {
                conv.bn = Some(bn);
                conv.out = out;
                writer += 1;
            }
            if let Some((residual, out)) = residual_add_after(m, uses, writer, conv.out) {
                conv.residual = Some(residual);
                conv.out = out;
                writer += 1;
            }
            if let Some((name, a)) = next_reads_only(m, uses, writer, conv.out) {
                if let Some((bounds, _, out)) = clamp_of(m, &name, a) {
                    conv.clamp = bounds;
                    conv.out = out;
                    writer += 1;
                }
            }
            absorbed = writer - n;
            conv.absorbed = absorbed;
        }
        roles.push(role);
        roles.extend((0..absorbed).map(|_| Role::Absorbed { by: n }));
        n += 1 + absorbed;
    }
    roles
}

/// The images to keep NHWC: written by a convolution or by an element-wise
/// operation on NHWC images, read only by operations that can read them
/// NHWC, planned, and neither an input nor an output of the method. What
/// each operation accepts depends on the others' images, so candidates are
/// dropped until none more need to be.
fn nhwc_images(m: &Method, uses: &Uses, roles: &[Role]) -> HashSet<usize> {
    // Each candidate's writer: its first and last instruction.
    let mut writer: HashMap<usize, (usize, usize)> = HashMap::new();
    for (n, role) in roles.iter().enumerate() {
        match role {
            Role::Conv(c) => {
                writer.insert(c.out, (n, n + c.absorbed));
            }
            Role::Add { out, .. } | Role::Clamp { out, .. } => {
                writer.insert(*out, (n, n));
            }
            Role::Pool(p) => {
                writer.insert(p.out, (n, n));
            }
            _ => {}
        }
    }
    // The kernel uses of each candidate outside its writer.
    let mut readers: HashMap<usize, Vec<(usize, usize)>> = HashMap::new();
    for (&v, &(first, last)) in &writer {
        let kept = matches!(
            m.values[v].as_tensor().map(|t| &t.placement),
            Some(Placement::Planned { .. })
        ) && image(m, v).is_some();
        if let Some(uses) = uses.kernel_uses(v, first).filter(|_| kept) {
            readers.insert(v, uses.into_iter().filter(|&(r, _)| r < first || r > last).collect());
        }
    }
    let mut nhwc: HashSet<usize> = readers.keys().copied().collect();
    loop {
        let was = nhwc.clone();
        let all_in = |vs: &[usize]| vs.iter().all(|v| was.contains(v));
        nhwc.retain(|v| {
            let written = match &roles[writer[v].0] {
                Role::Conv(_) => true,
                Role::Add { a, b, .. } => all_in(&[*a, *b]),
                Role::Clamp { x, .. } => all_in(&[*x]),
                Role::Pool(p) => all_in(&[p.x]),
                _ => false,
            };
            written
                && readers[v].iter().all(|&(r, pos)| match &roles[r] {
                    Role::Conv(c) => pos == 0 && c.x == *v,
                    Role::Absorbed { by } => matches!(&roles[*by], Role::Conv(c) if c.residual == Some(*v)),
                    Role::Add { a, b, out } => pos <= 1 && all_in(&[*a, *b, *out]),
                    Role::Clamp { out, .. } => pos == 0 && all_in(&[*out]),
                    Role::SpatialMean { .. } => pos == 0,
                    Role::Pool(p) => pos == 0 && p.x == *v,
                    _ => false,
                })
        });
        if nhwc.len() == was.len() {
            return nhwc;
        }
    }
}

/// The rewriting of one method.
struct Rewrite<'m> {
    m: &'m mut Method,
    nhwc: HashSet<usize>,
    code: Vec<Instruction>,
    /// Each convolution's prepared filter, kept from run to run.
    kept: AddedBuffer,
    /// How the convolutions run their products.
    algorithm: Algorithm,
    null: Option<usize>,
}

/// Rewrites one method (see the module docs), its convolutions to run by
/// `algorithm`.
pub(crate) fn convert_method(m: &mut Method, algorithm: Algorithm) {
    if m.has_jumps() {
        return;
    }
    let uses = Uses::of(m);
    let roles = roles(m, &uses);
    if !roles.iter().any(|r| matches!(r, Role::Conv(_))) {
        return;
    }
    let nhwc = nhwc_images(m, &uses, &roles);
    let old = std::mem::take(&mut m.instructions);
    let old_traces = m.stacktraces.take();
    let mut traces = old_traces.as_ref().map(|_| Vec::new());
    let mut origins = Vec::with_capacity(old.len());
    let mut r = Rewrite {
        m,
        nhwc,
        code: Vec::with_capacity(old.len()),
        kept: AddedBuffer::default(),
        algorithm,
        null: None,
    };
    for (n, (ins, role)) in old.iter().zip(&roles).enumerate() {
        let start = r.code.len();
        match role {
            Role::Absorbed { .. } => {}
            Role::Conv(c) => r.conv(c),
            Role::SpatialMean { x, out } if r.nhwc.contains(x) => {
                let (lo, hi) = r.bounds((f64::NEG_INFINITY, f64::INFINITY));
                r.call(GLOBAL_AVG_POOL2D_NHWC, vec![*x, lo, hi, *out]);
            }
            Role::Pool(p) if r.nhwc.contains(&p.x) => r.pool(p),
            _ => r.code.push(ins.clone()),
        }
        if let (Some(t), Some(old_t)) = (traces.as_mut(), old_traces.as_ref()) {
            let frames = old_t.get(n).cloned().unwrap_or_default();
            t.extend(std::iter::repeat_n(frames, r.code.len() - start));
        }
        let mut origin = r.m.origin(n);
        if let Role::Conv(c) = role {
            if c.absorbed > 0 {
                // Its output is that of the last instruction it absorbed.
                let last = r.m.origin(n + c.absorbed);
                origin.logged_as = Some(last.logged_as.unwrap_or(last.instruction));
            }
        }
        origins.extend(std::iter::repeat_n(origin, r.code.len() - start));
    }
    for &v in &r.nhwc {
        if let Some(Value::Tensor(t)) = r.m.values.get_mut(v) {
            if let &[n, c, h, w] = &t.sizes[..] {
                t.sizes = vec![n, h, w, c];
                r.m.channels_last.insert(v);
            }
        }
    }
    let Rewrite { m, code, kept, .. } = r;
    kept.install(m);
    m.instructions = code;
    m.stacktraces = traces;
    m.origins = origins;
}

impl Rewrite<'_> {
    fn call(&mut self, full_name: &str, args: Vec<usize>) {
        let call = kernel_call(self.m, full_name, args);
        self.code.push(call);
    }

    fn null(&mut self) -> usize {
        *self.null.get_or_insert_with(|| push_value(self.m, Value::Null))
    }

    fn optional(&mut self, v: Option<usize>) -> usize {
        v.unwrap_or_else(|| self.null())
    }

    fn bounds(&mut self, (lo, hi): (f64, f64)) -> (usize, usize) {
        (
            push_value(self.m, Value::Double(lo)),
            push_value(self.m, Value::Double(hi)),
        )
    }

    /// A new NHWC temporary of `sizes`, unplanned: [`crate::plan::temporaries`]
    /// gives it bytes once the passes are done.
    fn temp(&mut self, sizes: [usize; 4]) -> usize {
        push_f32_tensor(self.m, sizes.to_vec(), Placement::Unplanned)
    }

    /// `permute_copy(from, dims, to)`.
    fn permute(&mut self, from: usize, dims: [usize; 4], to: usize) {
        let dims = push_int_list(self.m, &dims);
        self.call(PERMUTE_COPY, vec![from, dims, to, to]);
    }

    /// An image an NHWC operation reads (of NHWC sizes `sizes`): itself
    /// when kept NHWC, else a temporary it is permuted into.
    fn nhwc_input(&mut self, v: usize, sizes: [usize; 4]) -> usize {
        if self.nhwc.contains(&v) {
            return v;
        }
        let t = self.temp(sizes);
        self.permute(v, TO_NHWC, t);
        t
    }

    /// Where an NHWC operation writes `out` (of NHWC sizes `sizes`):
    /// itself when kept NHWC, else a temporary that [`Self::finish`]
    /// permutes into it.
    fn target(&mut self, out: usize, sizes: [usize; 4]) -> usize {
        if self.nhwc.contains(&out) {
            out
        } else {
            self.temp(sizes)
        }
    }

    fn finish(&mut self, written: usize, out: usize) {
        if written != out {
            self.permute(written, TO_NCHW, out);
        }
    }

    fn pool(&mut self, p: &Pool) {
        let out = self.target(p.out, p.out_sizes);
        let mut args = vec![
            p.x,
            push_int_list(self.m, &p.kernel),
            push_int_list(self.m, &p.stride),
            push_int_list(self.m, &p.padding),
        ];
        if let Some(d) = p.dilation {
            args.push(push_int_list(self.m, &d));
        }
        let (lo, hi) = self.bounds((f64::NEG_INFINITY, f64::INFINITY));
        args.extend([lo, hi, out]);
        self.call(p.op, args);
        self.finish(out, p.out);
    }

    fn conv(&mut self, c: &Conv) {
        let w = &c.geometry.window;
        let x = self.nhwc_input(c.x, [w.batch, w.in_h, w.in_w, c.geometry.in_c]);
        let residual = c.residual.map(|r| self.nhwc_input(r, c.geometry.output_sizes()));
        // The chain's output is written where the convolution runs, not
        // where its last instruction ran: bytes planned for it may still hold
        // the input then. Such an output, kept NHWC, loses its plan and
        // becomes a temporary like those at region borders. (The residual is read as the output is written, element
        // by element, but a kernel must not be handed the same bytes to
        // read and to write.)
        let clash = share_bytes(self.m, x, c.out) || residual.is_some_and(|r| share_bytes(self.m, r, c.out));
        if self.nhwc.contains(&c.out) && clash {
            if let Some(Value::Tensor(t)) = self.m.values.get_mut(c.out) {
                t.placement = Placement::Unplanned;
            }
        }
        let out = self.target(c.out, c.geometry.output_sizes());
        let bias = self.optional(c.bias);
        let bn = match &c.bn {
            Some(bn) => [
                self.optional(bn.weight),
                self.optional(bn.bias),
                bn.mean,
                bn.var,
                push_value(self.m, Value::Double(bn.eps)),
            ],
            None => [self.null(); 5],
        };
        let padding = push_int_list(self.m, &c.padding);
        let stride = push_int_list(self.m, &c.stride);
        let dilation = push_int_list(self.m, &c.dilation);
        let groups = push_value(self.m, Value::Int(c.geometry.groups as i64));
        let (lo, hi) = self.bounds(c.clamp);
        let algorithm = c.geometry.algorithm(self.algorithm);
        let len = c.geometry.folded_len(algorithm);
        let placement = self.kept.reserve(self.m, len as u64 * 4);
        let kept = push_f32_tensor(self.m, vec![len], placement);
        let residual = self.optional(residual);
        let layout = push_value(self.m, Value::Int(folded::layout_code(FilterLayout::Torch)));
        let activation = push_value(self.m, Value::Int(folded::activation_code(Activation::Identity)));
        let algorithm = push_value(self.m, Value::Int(folded::algorithm_code(algorithm)));
        let args = folded::Args {
            x,
            weight: c.w,
            bias,
            bn,
            padding,
            stride,
            dilation,
            groups,
            min: lo,
            max: hi,
            residual,
            kept,
            layout,
            activation,
            algorithm,
            out,
        };
        self.call(folded::NAME, args.to_vec());
        self.finish(out, c.out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tests/fixtures/channels_last.pte's forward method, before and after
    /// the pass.
    fn fixture() -> (Method, Method) {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/channels_last.pte");
        let bytes = std::fs::read(path).unwrap();
        let mut program = crate::load(&bytes, &[]).unwrap().program.unwrap();
        let before = program.methods[0].clone();
        let m = &mut program.methods[0];
        convert_method(m, Algorithm::Winograd);
        crate::passes::conv_chains::fuse_residual_adds(m);
        crate::passes::conv_chains::fuse_chains(m);
        crate::plan::temporaries::plan_temporaries(m);
        crate::verify::verify_program(&program, &[]).unwrap();
        (before, program.methods.remove(0))
    }

    fn calls(m: &Method) -> Vec<(String, Vec<usize>)> {
        m.instructions
            .iter()
            .filter_map(|i| kernel_name(m, i).map(|(n, a)| (n, a.to_vec())))
            .collect()
    }

    fn count(calls: &[(String, Vec<usize>)], name: &str) -> usize {
        calls.iter().filter(|(n, _)| n == name).count()
    }

    #[test]
    fn convolutions_absorb_batch_norms_residual_adds_and_clamps() {
        let (before, after) = fixture();
        let (old, new) = (calls(&before), calls(&after));
        assert_eq!(count(&old, CONVOLUTION), 6);
        // The grouped convolution stays; the others run NHWC.
        assert_eq!(count(&new, CONVOLUTION), 1);
        assert_eq!(count(&new, folded::NAME), 5);
        assert_eq!(count(&old, BATCH_NORM), 3);
        assert_eq!(count(&new, BATCH_NORM), 0);
        // Three relus (one after the residual add) and the clamp are
        // absorbed, and so is the add.
        assert_eq!(count(&old, RELU), 3);
        assert_eq!(count(&new, RELU) + count(&new, CLAMP), 0);
        assert_eq!((count(&old, ADD), count(&new, ADD)), (1, 0));
        // The residual block's second convolution adds the block's input
        // (the pooled image, kept NHWC), then clamps at zero.
        let (_, pool) = new.iter().find(|(n, _)| n == MAX_POOL2D_NHWC).expect("the pooling");
        let pooled = *pool.last().unwrap();
        let with_residual: Vec<&Vec<usize>> = new
            .iter()
            .filter(|(n, a)| n == folded::NAME && !matches!(after.values[a[folded::RESIDUAL]], Value::Null))
            .map(|(_, a)| a)
            .collect();
        assert_eq!(with_residual.len(), 1);
        let c2 = with_residual[0];
        assert_eq!(c2[folded::RESIDUAL], pooled);
        assert_eq!(
            (number(&after, c2[folded::MIN]), number(&after, c2[folded::MAX])),
            (Some(0.0), Some(f64::INFINITY))
        );
        assert_eq!(count(&new, MAX_POOL2D_NHWC), 1);
        assert_eq!(count(&new, GLOBAL_AVG_POOL2D_NHWC), 1);
        // The clamp is the depthwise convolution's bounds.
        let dw = new
            .iter()
            .filter(|(n, _)| n == folded::NAME)
            .find(|(_, a)| int(&after, a[folded::GROUPS]) == Some(8))
            .expect("the depthwise convolution");
        assert_eq!(
            (number(&after, dw.1[folded::MIN]), number(&after, dw.1[folded::MAX])),
            (Some(-1.0), Some(1.0))
        );
    }

    #[test]
    fn images_cross_region_borders_through_permutations() {
        let (before, after) = fixture();
        let new = calls(&after);
        let permutes: Vec<Vec<i64>> = new
            .iter()
            .filter(|(n, _)| n == PERMUTE_COPY)
            .map(|(_, a)| ints(&after, a[1]).unwrap())
            .collect();
        // The input in, the image the grouped convolution reads out and its
        // output back in; the linear layer's weight transpose.
        assert_eq!(
            permutes,
            [vec![0, 2, 3, 1], vec![0, 3, 1, 2], vec![0, 2, 3, 1], vec![1, 0]]
        );
        // The method's input and outputs keep their NCHW sizes.
        for &v in before.inputs.iter().chain(&before.outputs) {
            assert_eq!(after.values[v], before.values[v], "value {v}");
        }
        // Images kept NHWC have their sizes permuted and keep their planned
        // bytes, unless those may still hold the convolution's input when it
        // runs: then they become temporaries, placed clear of the input.
        let mut moved = 0;
        for (_, a) in new.iter().filter(|(n, _)| n == folded::NAME) {
            let (x, out) = (a[folded::X], a[folded::OUT]);
            if out >= before.values.len() {
                continue; // a temporary, permuted into an NCHW image
            }
            let (b, t) = (
                before.values[out].as_tensor().unwrap(),
                after.values[out].as_tensor().unwrap(),
            );
            if t.sizes.len() == 4 && t.sizes != b.sizes {
                assert_eq!(t.sizes, [b.sizes[0], b.sizes[2], b.sizes[3], b.sizes[1]]);
            }
            if t.placement != b.placement {
                let residual = Some(a[folded::RESIDUAL]).filter(|&r| r < before.values.len());
                let clash = share_bytes(&before, x, out) || residual.is_some_and(|r| share_bytes(&before, r, out));
                assert!(clash, "value {out} moved");
                assert!(matches!(t.placement, Placement::Planned { .. }));
                assert!(!share_bytes(&after, x, out));
                assert!(residual.is_none_or(|r| !share_bytes(&after, r, out)));
                moved += 1;
            }
        }
        // ExecuTorch's plan for this fixture puts one chain's output where
        // its convolution's input was.
        assert_eq!(moved, 1);
    }

    #[test]
    fn methods_without_convolutions_or_with_jumps_are_left_alone() {
        let (before, _) = fixture();
        let mut m = before.clone();
        m.instructions
            .retain(|i| kernel_name(&before, i).is_none_or(|(n, _)| n != CONVOLUTION));
        let want = m.clone();
        convert_method(&mut m, Algorithm::Winograd);
        assert_eq!(m, want);
        let mut m = before.clone();
        let cond = push_value(&mut m, Value::Bool(true));
        m.instructions.push(Instruction::JumpFalse { cond, destination: 0 });
        let want = m.clone();
        convert_method(&mut m, Algorithm::Winograd);
        assert_eq!(m, want);
    }
}
