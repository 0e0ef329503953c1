//! Operators: one file per family, each mapping `name.overload` to a function
//! that checks an instruction's arguments at compile time and emits the
//! Rust that runs it (a call into `ptec_runtime::kernels`).
//!
//! An emitter gets an [`OpCtx`]: typed access to the arguments (constant
//! scalars and lists, tensors with dtype and shape) and helpers that emit
//! views of tensor data. It returns the statements of the instruction's
//! body, or a message saying what is wrong with the arguments; the caller
//! turns that into an error located at the method and instruction.
use crate::ir::*;
use crate::plan::fold::Folds;
use crate::plan::layout::{overlaps, Home, MethodLayout, Occupancy};
use crate::plan::prepare::PreparedData;
use proc_macro2::{Ident, Span, TokenStream};
use quote::{format_ident, quote};

mod activation;
mod checks;
mod compare;
mod complex;
mod conv;
mod copy;
mod cortex_m;
mod elementwise;
mod index;
mod linear;
mod llama;
mod norm;
mod pool;
mod prim;
mod quant;
pub(crate) mod random;
mod reduce;
mod shape;
mod softmax;
mod upsample;
mod xnn_quantized;
mod xnnpack;

/// Emits the body of one instruction.
pub type Emitter = fn(&mut OpCtx<'_>) -> Result<TokenStream, String>;

/// Every supported operator, by `name.overload` (or `name` when the overload
/// is empty), from every family.
pub fn registry() -> impl Iterator<Item = (&'static str, Emitter)> {
    [
        elementwise::OPS,
        activation::OPS,
        compare::OPS,
        complex::OPS,
        linear::OPS,
        reduce::OPS,
        copy::OPS,
        shape::OPS,
        index::OPS,
        softmax::OPS,
        norm::OPS,
        conv::OPS,
        pool::OPS,
        upsample::OPS,
        quant::OPS,
        random::OPS,
        cortex_m::OPS,
        prim::OPS,
        llama::OPS,
    ]
    .into_iter()
    .flatten()
    .copied()
}

/// The emitter of an operator: one of the [`registry`], or one of ptec's
/// own operators that lowered XNNPACK subgraphs call (`ptec_xnn::*`) or
/// the passes make (`ptec::*`).
pub fn lookup(full_name: &str) -> Option<Emitter> {
    registry()
        .chain(xnnpack::OPS.iter().copied())
        .chain(xnn_quantized::OPS.iter().copied())
        .chain(activation::FUSED.iter().copied())
        .chain(shape::FUSED.iter().copied())
        .find(|(n, _)| *n == full_name)
        .map(|(_, e)| e)
}

/// A scalar argument (PyTorch `Scalar`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    Int(i64),
    Double(f64),
    Bool(bool),
}

impl Scalar {
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Int(i) => i as f64,
            Scalar::Double(d) => d,
            Scalar::Bool(b) => b as u8 as f64,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Scalar::Double(_))
    }
}

/// A tensor argument, as known at compile time.
#[derive(Clone, Debug)]
pub struct TArg {
    pub value: usize,
    pub dtype: ScalarType,
    /// Sizes (upper bounds when dynamic).
    pub sizes: Vec<usize>,
    pub dynamic: bool,
    pub contiguous: bool,
    pub dim_order: Vec<u8>,
    pub home: Home,
}

impl TArg {
    pub fn rank(&self) -> usize {
        self.sizes.len()
    }

    pub fn numel(&self) -> usize {
        self.sizes.iter().product()
    }
}

/// The storage type of elements of `d` in generated code.
pub fn rust_type(d: ScalarType) -> Option<TokenStream> {
    use ScalarType::*;
    Some(match d {
        Float => quote!(f32),
        Double => quote!(f64),
        Half => quote!(::ptec_runtime::f16),
        BFloat16 => quote!(::ptec_runtime::bf16),
        Byte => quote!(u8),
        Char => quote!(i8),
        Short => quote!(i16),
        Int => quote!(i32),
        Long => quote!(i64),
        Bool => quote!(bool),
        UInt16 => quote!(u16),
        UInt32 => quote!(u32),
        UInt64 => quote!(u64),
        ComplexHalf => quote!(::ptec_runtime::Complex<::ptec_runtime::f16>),
        ComplexFloat => quote!(::ptec_runtime::Complex<f32>),
        ComplexDouble => quote!(::ptec_runtime::Complex<f64>),
        _ => return None,
    })
}

/// A `usize` literal.
pub fn lit(n: usize) -> TokenStream {
    let l = proc_macro2::Literal::usize_suffixed(n);
    quote!(#l)
}

/// An `&[usize]` literal.
pub fn usize_slice(v: &[usize]) -> TokenStream {
    let items = v.iter().map(|&n| lit(n));
    quote!(&[#(#items),*])
}

/// An `f64` literal that round-trips (NaN and infinities spelled out).
pub fn f64_lit(x: f64) -> TokenStream {
    if x.is_nan() {
        quote!(f64::NAN)
    } else if x == f64::INFINITY {
        quote!(f64::INFINITY)
    } else if x == f64::NEG_INFINITY {
        quote!(f64::NEG_INFINITY)
    } else {
        let l = proc_macro2::Literal::f64_suffixed(x);
        quote!(#l)
    }
}

/// An `f32` literal that round-trips (NaN and infinities spelled out).
pub fn f32_lit(x: f32) -> TokenStream {
    if x.is_nan() {
        quote!(f32::NAN)
    } else if x == f32::INFINITY {
        quote!(f32::INFINITY)
    } else if x == f32::NEG_INFINITY {
        quote!(f32::NEG_INFINITY)
    } else {
        let l = proc_macro2::Literal::f32_suffixed(x);
        quote!(#l)
    }
}

/// An `i64` literal.
pub fn i64_lit(x: i64) -> TokenStream {
    let l = proc_macro2::Literal::i64_suffixed(x);
    quote!(#l)
}

/// Names the per-method state fields of dynamic sizes and runtime scalars.
pub fn sizes_field(value: usize) -> Ident {
    format_ident!("s{}", value)
}

pub fn scalar_field(value: usize) -> Ident {
    format_ident!("v{}", value)
}

/// Per-instruction emission context.
pub struct OpCtx<'a> {
    pub method: &'a Method,
    pub layout: &'a MethodLayout,
    pub instruction: usize,
    pub name: String,
    pub args: &'a [usize],
    /// The bytes of each source file, as an expression (see
    /// `codegen::Ctx::data_expr`).
    pub data_expr: &'a dyn Fn(DataSource, usize) -> TokenStream,
    /// Values whose scalar is computed at run time (a state field).
    pub runtime_scalars: &'a [bool],
    /// What the method's compile-time folds changed.
    pub folds: &'a Folds,
    views: Vec<(usize, bool)>,
    counter: usize,
    /// Where the program's plan is free, for scratch.
    occupancy: &'a Occupancy,
    /// Arena ranges of this instruction's scratch slices.
    scratch: Vec<(usize, usize)>,
    /// Bytes of scratch this instruction needs after every tensor (the
    /// method's scratch space, at the arena's end), where the plan had no
    /// room.
    pub scratch_bytes: usize,
    /// Bytes of one thread's share of the method's thread scratch this
    /// instruction needs (see [`Self::thread_scratch_f32`]).
    pub thread_share_bytes: usize,
    /// Where constants prepared at compile time go (`None` in
    /// external-weights mode).
    prepared: Option<&'a PreparedData<'a>>,
}

impl<'a> OpCtx<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        method: &'a Method,
        layout: &'a MethodLayout,
        instruction: usize,
        name: String,
        args: &'a [usize],
        data_expr: &'a dyn Fn(DataSource, usize) -> TokenStream,
        runtime_scalars: &'a [bool],
        folds: &'a Folds,
        occupancy: &'a Occupancy,
        prepared: Option<&'a PreparedData<'a>>,
    ) -> Self {
        OpCtx {
            method,
            layout,
            instruction,
            name,
            args,
            data_expr,
            runtime_scalars,
            folds,
            views: Vec::new(),
            counter: 0,
            occupancy,
            scratch: Vec::new(),
            scratch_bytes: 0,
            thread_share_bytes: 0,
            prepared,
        }
    }

    /// Whether the kept tensor `t` is prepared at compile time (see
    /// `codegen::prepare`): its call must then compute it with
    /// [`Self::constant_f32`] and read it with [`Self::read_prepared`].
    pub fn is_prepared(&self, t: &TArg) -> bool {
        self.layout.prepared.contains(&t.value)
    }

    /// The elements of the embedded `f32` constant `t`, at compile time.
    pub fn constant_f32(&self, t: &TArg) -> Result<Vec<f32>, String> {
        let prepared = self
            .prepared
            .ok_or("constants are not known at compile time in this mode")?;
        match t.home {
            Home::Data { source, offset } if t.dtype == ScalarType::Float && !t.dynamic => {
                prepared.read_f32(source, offset, t.numel())
            }
            _ => Err(format!("value {} is not an embedded f32 constant", t.value)),
        }
    }

    /// The bytes of the embedded constant `t`, at compile time.
    pub fn constant_bytes(&self, t: &TArg) -> Result<Vec<u8>, String> {
        let prepared = self
            .prepared
            .ok_or("constants are not known at compile time in this mode")?;
        match t.home {
            Home::Data { source, offset } if !t.dynamic => {
                prepared.read_bytes(source, offset, t.numel() * t.dtype.element_size())
            }
            _ => Err(format!("value {} is not an embedded constant", t.value)),
        }
    }

    /// [`Self::constant_f32`] of an optional tensor.
    pub fn opt_constant_f32(&self, t: &Option<TArg>) -> Result<Option<Vec<f32>>, String> {
        t.as_ref().map(|t| self.constant_f32(t)).transpose()
    }

    /// Statements that let go of the pages of the run-time files holding
    /// the constants `sources` (`Blob::release`); empty when the program
    /// embeds its data.
    pub fn release_files(&self, sources: &[&TArg]) -> TokenStream {
        let mut out = quote!();
        if self.prepared.is_some() {
            return out;
        }
        for t in sources {
            if let Home::Data { source, offset } = t.home {
                if matches!(source, DataSource::Program | DataSource::External(_)) && !t.dynamic {
                    let file = lit(crate::codegen::Ctx::file_index(source));
                    let (at, len) = (lit(offset), lit(t.numel() * t.dtype.element_size()));
                    out.extend(quote!(rs.files[#file].release(#at, #len);));
                }
            }
        }
        out
    }

    /// Embeds `floats`, what the compiler prepared for the kept tensor
    /// `kept` (as many as it holds), and emits a shared view of them.
    pub fn read_prepared(&mut self, kept: &TArg, floats: &[f32]) -> Result<(Ident, TokenStream), String> {
        let prepared = self
            .prepared
            .ok_or("constants are not prepared at compile time in this mode")?;
        if floats.len() != kept.numel() {
            return Err(format!(
                "value {} holds {} elements, its preparation {}",
                kept.value,
                kept.numel(),
                floats.len()
            ));
        }
        let offset = prepared.push(floats);
        let mut t = kept.clone();
        t.home = Home::Data {
            source: DataSource::Embedded,
            offset,
        };
        self.read(&t)
    }

    /// A shared view of the `f32` tensor `t` when the call reads it
    /// (`needed`); otherwise an empty `&[f32]` in its place: a constant the
    /// compiler prepared another from, left out of the binary (see
    /// `plan::compact`).
    pub fn read_if_needed(&mut self, t: &TArg, needed: bool) -> Result<(Ident, TokenStream), String> {
        if needed {
            return self.read(t);
        }
        let name = self.fresh("unread");
        let stmt = quote!(let #name: &[f32] = &[];);
        Ok((name, stmt))
    }

    /// Fails unless the call has exactly `n` arguments (returns included).
    pub fn arity(&self, n: usize) -> Result<(), String> {
        if self.args.len() == n {
            Ok(())
        } else {
            Err(format!(
                "expected {n} arguments (with the out tensors and returns), got {}",
                self.args.len()
            ))
        }
    }

    fn value(&self, i: usize) -> Result<(usize, &'a Value), String> {
        let vi = *self.args.get(i).ok_or_else(|| format!("argument {i} is missing"))?;
        let v = self
            .method
            .values
            .get(vi)
            .ok_or_else(|| format!("argument {i} names value {vi}, out of range"))?;
        Ok((vi, v))
    }

    fn runtime(&self, vi: usize) -> bool {
        self.runtime_scalars.get(vi).copied().unwrap_or(false)
    }

    pub fn is_null(&self, i: usize) -> Result<bool, String> {
        Ok(matches!(self.value(i)?.1, Value::Null))
    }

    pub fn tensor(&self, i: usize) -> Result<TArg, String> {
        let (vi, _) = self.value(i)?;
        self.tensor_by_value(vi).map_err(|e| format!("argument {i}: {e}"))
    }

    pub fn opt_tensor(&self, i: usize) -> Result<Option<TArg>, String> {
        if self.is_null(i)? {
            Ok(None)
        } else {
            self.tensor(i).map(Some)
        }
    }

    pub fn int(&self, i: usize) -> Result<i64, String> {
        let (vi, v) = self.value(i)?;
        match v {
            Value::Int(x) if !self.runtime(vi) => Ok(*x),
            Value::Int(_) => Err(format!(
                "argument {i} (value {vi}) is an integer computed at run time; this operator needs a constant"
            )),
            other => Err(format!(
                "argument {i} (value {vi}) must be an Int, is a {}",
                other.kind()
            )),
        }
    }

    pub fn opt_int(&self, i: usize) -> Result<Option<i64>, String> {
        if self.is_null(i)? {
            Ok(None)
        } else {
            self.int(i).map(Some)
        }
    }

    pub fn bool(&self, i: usize) -> Result<bool, String> {
        let (vi, v) = self.value(i)?;
        match v {
            Value::Bool(x) if !self.runtime(vi) => Ok(*x),
            other => Err(format!(
                "argument {i} (value {vi}) must be a constant Bool, is a {}",
                other.kind()
            )),
        }
    }

    pub fn scalar(&self, i: usize) -> Result<Scalar, String> {
        let (vi, v) = self.value(i)?;
        if self.runtime(vi) {
            return Err(format!(
                "argument {i} (value {vi}) is a scalar computed at run time; this operator needs a constant"
            ));
        }
        match v {
            Value::Int(x) => Ok(Scalar::Int(*x)),
            Value::Double(x) => Ok(Scalar::Double(*x)),
            Value::Bool(x) => Ok(Scalar::Bool(*x)),
            other => Err(format!(
                "argument {i} (value {vi}) must be a Scalar, is a {}",
                other.kind()
            )),
        }
    }

    pub fn opt_scalar(&self, i: usize) -> Result<Option<Scalar>, String> {
        if self.is_null(i)? {
            Ok(None)
        } else {
            self.scalar(i).map(Some)
        }
    }

    pub fn double(&self, i: usize) -> Result<f64, String> {
        self.scalar(i).map(Scalar::as_f64)
    }

    pub fn opt_double(&self, i: usize) -> Result<Option<f64>, String> {
        self.opt_scalar(i).map(|s| s.map(Scalar::as_f64))
    }

    pub fn string(&self, i: usize) -> Result<String, String> {
        match self.value(i)? {
            (_, Value::String(s)) => Ok(s.clone()),
            (vi, other) => Err(format!(
                "argument {i} (value {vi}) must be a String, is a {}",
                other.kind()
            )),
        }
    }

    pub fn int_list(&self, i: usize) -> Result<Vec<i64>, String> {
        let (vi, v) = self.value(i)?;
        match v {
            Value::IntList(items) => items
                .iter()
                .map(|&k| match self.method.values.get(k) {
                    Some(Value::Int(x)) if !self.runtime(k) => Ok(*x),
                    _ => Err(format!(
                        "argument {i} (value {vi}): item value {k} is not a constant Int"
                    )),
                })
                .collect(),
            other => Err(format!(
                "argument {i} (value {vi}) must be an IntList, is a {}",
                other.kind()
            )),
        }
    }

    pub fn opt_int_list(&self, i: usize) -> Result<Option<Vec<i64>>, String> {
        if self.is_null(i)? {
            Ok(None)
        } else {
            self.int_list(i).map(Some)
        }
    }

    pub fn double_list(&self, i: usize) -> Result<Vec<f64>, String> {
        match self.value(i)? {
            (_, Value::DoubleList(items)) => Ok(items.clone()),
            (vi, other) => Err(format!(
                "argument {i} (value {vi}) must be a DoubleList, is a {}",
                other.kind()
            )),
        }
    }

    pub fn bool_list(&self, i: usize) -> Result<Vec<bool>, String> {
        match self.value(i)? {
            (_, Value::BoolList(items)) => Ok(items.clone()),
            (vi, other) => Err(format!(
                "argument {i} (value {vi}) must be a BoolList, is a {}",
                other.kind()
            )),
        }
    }

    pub fn opt_double_list(&self, i: usize) -> Result<Option<Vec<f64>>, String> {
        if self.is_null(i)? {
            Ok(None)
        } else {
            self.double_list(i).map(Some)
        }
    }

    pub fn tensor_list(&self, i: usize) -> Result<Vec<TArg>, String> {
        let (vi, v) = self.value(i)?;
        match v {
            Value::TensorList(items) => items.iter().map(|&k| self.tensor_by_value(k)).collect(),
            other => Err(format!(
                "argument {i} (value {vi}) must be a TensorList, is a {}",
                other.kind()
            )),
        }
    }

    pub fn opt_tensor_list(&self, i: usize) -> Result<Vec<Option<TArg>>, String> {
        let (vi, v) = self.value(i)?;
        match v {
            Value::OptionalTensorList(items) => items
                .iter()
                .map(|k| k.map(|k| self.tensor_by_value(k)).transpose())
                .collect(),
            Value::TensorList(items) => items.iter().map(|&k| self.tensor_by_value(k).map(Some)).collect(),
            other => Err(format!(
                "argument {i} (value {vi}) must be a list of optional tensors, is a {}",
                other.kind()
            )),
        }
    }

    /// The tensor of value `vi` (not necessarily an argument: a fold may
    /// name another value to read or write instead).
    pub fn tensor_by_value(&self, vi: usize) -> Result<TArg, String> {
        match self.method.values.get(vi) {
            Some(Value::Tensor(t)) => {
                if rust_type(t.dtype).is_none() {
                    return Err(format!(
                        "value {vi} has dtype {}, which ptec does not compute with",
                        t.dtype
                    ));
                }
                // Complex tensors go only to the operators written for them;
                // every other emitter assumes real elements.
                if t.dtype.is_complex() && !complex::takes_complex(&self.name) {
                    return Err(format!(
                        "value {vi} is {}; ptec computes with complex tensors only in {}",
                        t.dtype,
                        complex::OPS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                    ));
                }
                Ok(TArg {
                    value: vi,
                    dtype: t.dtype,
                    sizes: t.sizes.clone(),
                    dynamic: t.dynamism != Dynamism::Static,
                    contiguous: t.is_contiguous(),
                    dim_order: t.dim_order.clone(),
                    home: self.layout.homes[vi],
                })
            }
            Some(other) => Err(format!("value {vi} must be a tensor, is a {}", other.kind())),
            None => Err(format!("value {vi} is out of range")),
        }
    }

    fn fresh(&mut self, prefix: &str) -> Ident {
        self.counter += 1;
        Ident::new(&format!("{prefix}{}", self.counter), Span::call_site())
    }

    /// An expression of type `&[usize]`: the live sizes of `t`.
    pub fn sizes(&self, t: &TArg) -> TokenStream {
        if t.dynamic {
            let f = sizes_field(t.value);
            quote!(&self.#f[..])
        } else {
            usize_slice(&t.sizes)
        }
    }

    /// An expression of type `usize`: the live element count of `t`.
    pub fn numel(&self, t: &TArg) -> TokenStream {
        if t.dynamic {
            let f = sizes_field(t.value);
            quote!(::ptec_runtime::mem::numel(&self.#f))
        } else {
            lit(t.numel())
        }
    }

    fn view(&mut self, t: &TArg, mutable: bool) -> Result<(Ident, TokenStream), String> {
        self.views.push((t.value, mutable));
        let ty = rust_type(t.dtype).ok_or_else(|| format!("dtype {} is not supported", t.dtype))?;
        let len = self.numel(t);
        let name = self.fresh(if mutable { "out" } else { "in" });
        let is_bool = t.dtype == ScalarType::Bool;
        let vi = lit(t.value);
        let stmt = match (t.home, mutable) {
            (Home::Arena { offset }, false) => {
                let off = lit(offset);
                if is_bool {
                    quote! { let #name: &[bool] = unsafe { ::ptec_runtime::mem::view_bool(base, #off, #len, #vi) }?; }
                } else {
                    quote! { let #name: &[#ty] = unsafe { ::ptec_runtime::mem::view(base, #off, #len) }; }
                }
            }
            (Home::Arena { offset }, true) => {
                let off = lit(offset);
                if is_bool {
                    quote! { let #name: &mut [bool] = unsafe { ::ptec_runtime::mem::view_bool_mut(base, #off, #len) }; }
                } else {
                    quote! { let #name: &mut [#ty] = unsafe { ::ptec_runtime::mem::view_mut(base, #off, #len) }; }
                }
            }
            (Home::Data { source, offset }, false) => {
                let data = (self.data_expr)(source, offset);
                let off = lit(offset);
                if is_bool {
                    quote! { let #name: &[bool] = ::ptec_runtime::mem::constant_bool(&#data, #off, #len)?; }
                } else {
                    quote! { let #name: &[#ty] = ::ptec_runtime::mem::constant(&#data, #off, #len)?; }
                }
            }
            (Home::Data { .. }, true) => {
                return Err(format!("value {} is constant data and cannot be written", t.value));
            }
            (Home::None, _) => return Err(format!("value {} has no storage", t.value)),
        };
        Ok((name, stmt))
    }

    /// The values the instruction writes, in the order it first views them.
    pub fn written(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for &(v, mutable) in &self.views {
            if mutable && !out.contains(&v) {
                out.push(v);
            }
        }
        out
    }

    /// Emits a shared view of `t`'s live elements; returns its name and the
    /// `let` statement.
    pub fn read(&mut self, t: &TArg) -> Result<(Ident, TokenStream), String> {
        self.view(t, false)
    }

    /// Emits a mutable view of `t`'s live elements.
    pub fn write(&mut self, t: &TArg) -> Result<(Ident, TokenStream), String> {
        self.view(t, true)
    }

    /// Emits a mutable `f32` scratch slice of `len` elements (an expression
    /// of type `usize`, whose largest value is `max_len`), in arena space no
    /// tensor uses during this instruction: where the program's plan is
    /// free, else at the arena's end.
    pub fn scratch_f32(&mut self, len: TokenStream, max_len: usize) -> (Ident, TokenStream) {
        self.scratch_of(quote!(f32), 4, len, max_len)
    }

    /// A scratch of `len` bytes, as [`Self::scratch_f32`].
    pub fn scratch_i8(&mut self, len: usize) -> (Ident, TokenStream) {
        self.scratch_of(quote!(i8), 1, lit(len), len)
    }

    fn scratch_of(
        &mut self,
        ty: TokenStream,
        elem_bytes: usize,
        len: TokenStream,
        max_len: usize,
    ) -> (Ident, TokenStream) {
        let name = self.fresh("scratch");
        let bytes = max_len * elem_bytes;
        let offset = match self.occupancy.room(self.instruction, bytes, &self.scratch) {
            Some(o) => o,
            None => {
                let o = self.layout.arena_size + self.scratch_bytes;
                self.scratch_bytes += bytes.div_ceil(64) * 64;
                o
            }
        };
        self.scratch.push((offset, offset + bytes));
        let off = lit(offset);
        let stmt = quote! { let #name: &mut [#ty] = unsafe { ::ptec_runtime::mem::view_mut(base, #off, #len) }; };
        (name, stmt)
    }

    /// Emits a mutable `f32` view of the method's thread scratch: a region
    /// after everything else in the arena, which no tensor and no other
    /// scratch ever uses, of `parts` equal shares of at least
    /// `share_floats` each (the largest share any instruction asks for).
    /// Every instruction that asks gets the same region, so a kernel that
    /// keeps part `p`'s buffers in share `p` (part `p` runs on thread `p`)
    /// finds them where only that thread has written.
    pub fn thread_scratch_f32(&mut self, share_floats: usize) -> (Ident, TokenStream) {
        let name = self.fresh("scratch");
        self.thread_share_bytes = self.thread_share_bytes.max((share_floats * 4).div_ceil(64) * 64);
        let stmt = quote! {
            let #name: &mut [f32] = unsafe {
                ::ptec_runtime::mem::view_mut(base, Self::THREAD_SCRATCH_OFFSET, Self::THREAD_SCRATCH_FLOATS)
            };
        };
        (name, stmt)
    }

    /// Statements that set the live sizes of a dynamic output `t` to the
    /// `&[usize]` expression `sizes` (checked against the bound); nothing for
    /// a static output, whose sizes the compiler has already checked.
    pub fn set_sizes(&self, t: &TArg, sizes: TokenStream) -> TokenStream {
        if !t.dynamic {
            return quote!();
        }
        let f = sizes_field(t.value);
        let bound = usize_slice(&t.sizes);
        let ins = lit(self.instruction);
        let vi = lit(t.value);
        quote! {
            {
                let new_sizes: &[usize] = #sizes;
                let bound: &[usize] = #bound;
                if new_sizes.len() != bound.len() || new_sizes.iter().zip(bound).any(|(n, b)| n > b) {
                    return Err(::ptec_runtime::Error::ShapeExceedsBound { instruction: #ins, value: #vi });
                }
                self.#f.copy_from_slice(new_sizes);
            }
        }
    }

    /// Maps a kernel's `KernelResult` to the runtime error of this
    /// instruction.
    pub fn kernel_result(&self, call: TokenStream) -> TokenStream {
        let ins = lit(self.instruction);
        quote! { (#call).map_err(|error| ::ptec_runtime::Error::Kernel { instruction: #ins, error })?; }
    }

    /// Checks that no tensor this instruction writes overlaps another it
    /// views; returns the offending pair.
    pub fn check_overlaps(&self) -> Result<(), String> {
        for (i, &(a, am)) in self.views.iter().enumerate() {
            for &(b, bm) in &self.views[i + 1..] {
                if !(am || bm) {
                    continue;
                }
                let clash = a == b
                    || match (self.layout.range(self.method, a), self.layout.range(self.method, b)) {
                        (Some(ra), Some(rb)) => overlaps(ra, rb),
                        _ => false,
                    };
                if clash {
                    return Err(format!(
                        "value {a} and value {b} share memory but the instruction writes one while reading the other"
                    ));
                }
            }
        }
        // The arena keeps no bytes for values the folds bypass; a view of one
        // would read or write another tensor's.
        if let Some(&(v, _)) = self.views.iter().find(|&&(v, _)| self.layout.untouched(v)) {
            return Err(format!(
                "internal: the instruction views value {v}, which the arena does not hold (its producer was folded away)"
            ));
        }
        // Scratch placement relies on lives; a mistake there must fail the
        // compilation, not alias a tensor.
        for &(lo, hi) in &self.scratch {
            for &(v, _) in &self.views {
                if let Some((Home::Arena { offset }, n)) = self.layout.range(self.method, v) {
                    if n > 0 && offset < hi && lo < offset + n {
                        return Err(format!("internal: the instruction's scratch overlaps value {v}"));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Checks a gather's output (`indices`' sizes, then `dim`: an embedding)
/// and returns the statements that give it its live sizes when the indices
/// vary (nothing when static). The caller has checked `out` varies with
/// `indices`.
pub fn gathered_sizes(ctx: &OpCtx<'_>, indices: &TArg, out: &TArg, dim: usize) -> Result<TokenStream, String> {
    let mut want = indices.sizes.clone();
    want.push(dim);
    require_sizes(out, &want)?;
    if !indices.dynamic {
        return Ok(quote!());
    }
    let (r, r1, d) = (lit(indices.rank()), lit(indices.rank() + 1), lit(dim));
    let is = ctx.sizes(indices);
    Ok(ctx.set_sizes(
        out,
        quote!(&{
            let mut s = [0usize; #r1];
            s[..#r].copy_from_slice(#is);
            s[#r] = #d;
            s
        }),
    ))
}

/// The rows of a product over the last dim (`k`) of `x`, as an expression,
/// and the statements that give `out` its live sizes: `x`'s leading dims
/// then `n` (or, for a 2-d `out`, the rows then `n`). With a dynamic `x`
/// the rows are counted at run time, where a last dim other than `k` is an
/// error.
pub fn product_rows(
    ctx: &OpCtx<'_>,
    x: &TArg,
    out: &TArg,
    k: usize,
    n: usize,
) -> Result<(TokenStream, TokenStream), String> {
    if !x.dynamic {
        return Ok((lit(x.numel() / k.max(1)), quote!()));
    }
    if !out.dynamic || (out.rank() != x.rank() && out.rank() != 2) {
        return Err(format!(
            "the output (value {}) must vary with the input (value {}), with its rank or 2",
            out.value, x.value
        ));
    }
    let (xs, numel, rank) = (ctx.sizes(x), ctx.numel(x), x.rank());
    let (kl, k1, nl, last, ins) = (lit(k), lit(k.max(1)), lit(n), lit(rank - 1), lit(ctx.instruction));
    let rows = quote!((#numel / #k1));
    let sizes = if out.rank() == rank {
        quote!(&{
            let mut s = [0usize; #last + 1];
            s.copy_from_slice(#xs);
            s[#last] = #nl;
            s
        })
    } else {
        quote!(&[#rows, #nl])
    };
    let set = ctx.set_sizes(out, sizes);
    let check = quote! {
        {
            let live: &[usize] = #xs;
            if live[#last] != #kl {
                return Err(::ptec_runtime::Error::Kernel {
                    instruction: #ins,
                    error: ::ptec_runtime::kernels::KernelError::ShapeMismatch,
                });
            }
        }
    };
    Ok((rows, quote!(#check #set)))
}

/// Requires all tensors to have the default (contiguous) dim order.
pub fn require_contiguous(ts: &[&TArg]) -> Result<(), String> {
    for t in ts {
        if !t.contiguous {
            return Err(format!(
                "value {} has dim_order {:?}; this operator supports only contiguous tensors",
                t.value, t.dim_order
            ));
        }
    }
    Ok(())
}

/// Requires `t` to have one of the given dtypes.
pub fn require_dtype(t: &TArg, allowed: &[ScalarType]) -> Result<(), String> {
    if allowed.contains(&t.dtype) {
        Ok(())
    } else {
        Err(format!(
            "value {} has dtype {}; supported: {:?}",
            t.value,
            t.dtype,
            allowed.iter().map(|d| d.name()).collect::<Vec<_>>()
        ))
    }
}

/// Requires an output of rank `rank`.
pub fn require_rank(t: &TArg, rank: usize) -> Result<(), String> {
    if t.rank() != rank {
        return Err(format!(
            "output value {} has rank {}, expected {rank}",
            t.value,
            t.rank()
        ));
    }
    Ok(())
}

/// Requires a static output's sizes to equal `want`.
pub fn require_sizes(t: &TArg, want: &[usize]) -> Result<(), String> {
    if t.dynamic {
        return require_rank(t, want.len());
    }
    if t.sizes != want {
        Err(format!(
            "output value {} has sizes {:?}, expected {:?}",
            t.value, t.sizes, want
        ))
    } else {
        Ok(())
    }
}

pub(crate) use crate::shapes::{norm_dim, permutation};

/// The floating types kernels compute in.
pub const FLOATS: &[ScalarType] = &[
    ScalarType::Float,
    ScalarType::Double,
    ScalarType::Half,
    ScalarType::BFloat16,
];

/// Whether an operator writes a scalar value (its last argument) rather
/// than a tensor: the `executorch_prim` scalar operators and `sym_size`.
pub fn writes_scalar(full_name: &str) -> bool {
    prim::OPS.iter().any(|(n, _)| *n == full_name)
}

/// A scalar value as a literal (`()` for anything else).
pub(crate) fn scalar_lit(v: &Value) -> TokenStream {
    match v {
        Value::Int(x) => i64_lit(*x),
        Value::Double(x) => f64_lit(*x),
        Value::Bool(b) => quote!(#b),
        _ => quote!(()),
    }
}

/// A dtype as the runtime's `ScalarType`.
pub(crate) fn dtype_tokens(d: ScalarType) -> TokenStream {
    let name = format_ident!("{}", format!("{d:?}"));
    quote!(::ptec_runtime::ScalarType::#name)
}
