//! Scalar operators: `executorch_prim::*.Scalar` arithmetic, comparisons
//! and conversions on Int/Double/Bool values, and `aten::sym_size.int`,
//! `aten::sym_numel`, `aten::_local_scalar_dense`, which read a tensor.
//!
//! Each writes its last argument, a scalar value the method keeps in a
//! state field (see `runtime_scalars` in codegen/method.rs). Inputs are
//! constants or such fields; their Rust types (`i64`, `f64`, `bool`) follow
//! the kinds the program serialized, so every operation is typed at compile
//! time. Semantics are Python's (the exported program's meaning): `//`
//! and `%` round toward negative infinity, `round` is half to even.
use super::*;

pub const OPS: &[(&str, Emitter)] = &[
    ("executorch_prim::add.Scalar", add),
    ("executorch_prim::sub.Scalar", sub),
    ("executorch_prim::mul.Scalar", mul),
    ("executorch_prim::floordiv.Scalar", floordiv),
    ("executorch_prim::floordiv.int", floordiv),
    ("executorch_prim::truediv.Scalar", truediv),
    ("executorch_prim::mod.Scalar", modulo),
    ("executorch_prim::mod.int", modulo),
    ("executorch_prim::eq.Scalar", eq),
    ("executorch_prim::ne.Scalar", ne),
    ("executorch_prim::gt.Scalar", gt),
    ("executorch_prim::lt.Scalar", lt),
    ("executorch_prim::ge.Scalar", ge),
    ("executorch_prim::le.Scalar", le),
    ("executorch_prim::neg.Scalar", neg),
    ("executorch_prim::sym_float.Scalar", sym_float),
    ("executorch_prim::sym_int.Scalar", sym_int),
    ("executorch_prim::sym_max.Scalar", sym_max),
    ("executorch_prim::sym_min.Scalar", sym_min),
    ("executorch_prim::sym_not.Scalar", sym_not),
    ("executorch_prim::sym_ite.Scalar", sym_ite),
    ("executorch_prim::ceil.Scalar", ceil),
    ("executorch_prim::round.Scalar", round),
    ("executorch_prim::trunc.Scalar", trunc),
    ("aten::sym_size.int", sym_size),
    ("aten::sym_numel", sym_numel),
    ("aten::_local_scalar_dense", local_scalar_dense),
];

/// The kind of a scalar value and of its Rust expression: `i64`, `f64` or
/// `bool`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalarKind {
    Int,
    Double,
    Bool,
}

impl ScalarKind {
    /// The tensor dtype of a scalar of this kind (PyTorch's int64 and
    /// float64).
    pub fn dtype(self) -> ScalarType {
        match self {
            ScalarKind::Int => ScalarType::Long,
            ScalarKind::Double => ScalarType::Double,
            ScalarKind::Bool => ScalarType::Bool,
        }
    }

    fn of(v: &Value) -> Option<ScalarKind> {
        match v {
            Value::Int(_) => Some(ScalarKind::Int),
            Value::Double(_) => Some(ScalarKind::Double),
            Value::Bool(_) => Some(ScalarKind::Bool),
            _ => None,
        }
    }
}

/// A typed scalar expression.
#[derive(Clone)]
struct Expr {
    code: TokenStream,
    kind: ScalarKind,
}

impl Expr {
    fn new(code: TokenStream, kind: ScalarKind) -> Self {
        Expr { code, kind }
    }

    /// This expression converted to `kind` (Rust `as` casts: doubles
    /// truncate toward zero, like C++'s `static_cast` and Python's `int`).
    fn to(&self, kind: ScalarKind) -> TokenStream {
        use ScalarKind::*;
        let e = &self.code;
        match (self.kind, kind) {
            (a, b) if a == b => quote!(#e),
            (Int, Double) => quote!((#e as f64)),
            (Bool, Double) => quote!((#e as u8 as f64)),
            (Double | Bool, Int) => quote!((#e as i64)),
            (Int, Bool) => quote!((#e != 0)),
            (Double, Bool) => quote!((#e != 0.0)),
            _ => unreachable!("all pairs covered"),
        }
    }
}

impl OpCtx<'_> {
    /// An expression for scalar argument `i` (Int, Double or Bool): its
    /// literal when constant, its state field when computed at run time.
    pub fn scalar_expr(&self, i: usize) -> Result<(TokenStream, ScalarKind), String> {
        let (vi, v) = self.value(i)?;
        let kind = ScalarKind::of(v)
            .ok_or_else(|| format!("argument {i} (value {vi}) must be a scalar, is a {}", v.kind()))?;
        let code = if self.runtime(vi) {
            let f = scalar_field(vi);
            quote!(self.#f)
        } else {
            match v {
                Value::Int(x) => i64_lit(*x),
                Value::Double(x) => f64_lit(*x),
                Value::Bool(b) => quote!(#b),
                _ => unreachable!("kind checked"),
            }
        };
        Ok((code, kind))
    }

    fn scalar_operand(&self, i: usize) -> Result<Expr, String> {
        self.scalar_expr(i).map(|(code, kind)| Expr::new(code, kind))
    }

    /// The statement storing `e` into scalar argument `i`, the op's result.
    fn store_scalar(&self, i: usize, e: Expr) -> Result<TokenStream, String> {
        let (vi, v) = self.value(i)?;
        let kind =
            ScalarKind::of(v).ok_or_else(|| format!("the result (value {vi}) must be a scalar, is a {}", v.kind()))?;
        if !self.runtime(vi) {
            return Err(format!("the result (value {vi}) is not a run-time scalar"));
        }
        let f = scalar_field(vi);
        let code = e.to(kind);
        Ok(quote! { self.#f = #code; })
    }

    /// The error a scalar division by zero returns.
    fn division_by_zero(&self) -> TokenStream {
        let ins = lit(self.instruction);
        quote!(::ptec_runtime::Error::Kernel { instruction: #ins, error: ::ptec_runtime::kernels::KernelError::DivisionByZero })
    }
}

/// The kind two numbers compute in: `f64` if either is a double, else
/// `i64` (bools count as integers, as in Python).
fn numeric(a: &Expr, b: &Expr) -> ScalarKind {
    if a.kind == ScalarKind::Double || b.kind == ScalarKind::Double {
        ScalarKind::Double
    } else {
        ScalarKind::Int
    }
}

/// `op(a, b) -> result` with both operands converted to their common kind;
/// `body(kind, a, b)` builds the result.
fn binary(
    ctx: &mut OpCtx<'_>,
    body: impl FnOnce(&OpCtx<'_>, ScalarKind, TokenStream, TokenStream) -> Expr,
) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (a, b) = (ctx.scalar_operand(0)?, ctx.scalar_operand(1)?);
    let k = numeric(&a, &b);
    let r = body(ctx, k, a.to(k), b.to(k));
    ctx.store_scalar(2, r)
}

fn add(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    binary(ctx, |_, k, a, b| match k {
        ScalarKind::Int => Expr::new(quote!(#a.wrapping_add(#b)), k),
        _ => Expr::new(quote!((#a + #b)), k),
    })
}

fn sub(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    binary(ctx, |_, k, a, b| match k {
        ScalarKind::Int => Expr::new(quote!(#a.wrapping_sub(#b)), k),
        _ => Expr::new(quote!((#a - #b)), k),
    })
}

fn mul(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    binary(ctx, |_, k, a, b| match k {
        ScalarKind::Int => Expr::new(quote!(#a.wrapping_mul(#b)), k),
        _ => Expr::new(quote!((#a * #b)), k),
    })
}

/// `a // b`: floor division; integers fail on a zero divisor.
fn floordiv(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    binary(ctx, |ctx, k, a, b| {
        let s = quote!(::ptec_runtime::kernels::scalar);
        match k {
            ScalarKind::Int => {
                let err = ctx.division_by_zero();
                Expr::new(quote!(#s::div_floor_int(#a, #b).ok_or(#err)?), k)
            }
            _ => Expr::new(quote!(#s::div_floor(#a, #b)), k),
        }
    })
}

/// `a % b` with the divisor's sign; integers fail on a zero divisor.
fn modulo(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    binary(ctx, |ctx, k, a, b| {
        let s = quote!(::ptec_runtime::kernels::scalar);
        match k {
            ScalarKind::Int => {
                let err = ctx.division_by_zero();
                Expr::new(quote!(#s::remainder_int(#a, #b).ok_or(#err)?), k)
            }
            _ => Expr::new(quote!(#s::remainder(#a, #b)), k),
        }
    })
}

/// `a / b` in `f64`, whatever the operands.
fn truediv(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (a, b) = (ctx.scalar_operand(0)?, ctx.scalar_operand(1)?);
    let (a, b) = (a.to(ScalarKind::Double), b.to(ScalarKind::Double));
    ctx.store_scalar(2, Expr::new(quote!((#a / #b)), ScalarKind::Double))
}

/// A comparison: bools compare as bools, mixed numbers as `f64`.
fn compare(ctx: &mut OpCtx<'_>, op: TokenStream) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (a, b) = (ctx.scalar_operand(0)?, ctx.scalar_operand(1)?);
    let k = if a.kind == ScalarKind::Bool && b.kind == ScalarKind::Bool {
        ScalarKind::Bool
    } else {
        numeric(&a, &b)
    };
    let (a, b) = (a.to(k), b.to(k));
    ctx.store_scalar(2, Expr::new(quote!((#a #op #b)), ScalarKind::Bool))
}

fn eq(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    compare(ctx, quote!(==))
}
fn ne(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    compare(ctx, quote!(!=))
}
fn gt(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    compare(ctx, quote!(>))
}
fn lt(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    compare(ctx, quote!(<))
}
fn ge(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    compare(ctx, quote!(>=))
}
fn le(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    compare(ctx, quote!(<=))
}

/// `op(a) -> result` for one operand.
fn unary(ctx: &mut OpCtx<'_>, body: impl FnOnce(Expr) -> Expr) -> Result<TokenStream, String> {
    ctx.arity(2)?;
    let a = ctx.scalar_operand(0)?;
    ctx.store_scalar(1, body(a))
}

fn neg(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    unary(ctx, |a| match a.kind {
        ScalarKind::Double => {
            let e = a.code;
            Expr::new(quote!((-#e)), ScalarKind::Double)
        }
        _ => {
            let e = a.to(ScalarKind::Int);
            Expr::new(quote!(#e.wrapping_neg()), ScalarKind::Int)
        }
    })
}

fn sym_float(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    unary(ctx, |a| Expr::new(a.to(ScalarKind::Double), ScalarKind::Double))
}

fn sym_int(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    unary(ctx, |a| Expr::new(a.to(ScalarKind::Int), ScalarKind::Int))
}

fn sym_not(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    unary(ctx, |a| {
        let e = a.to(ScalarKind::Bool);
        Expr::new(quote!((!#e)), ScalarKind::Bool)
    })
}

/// A double rounded to an integer by `scalar::#f` (integers pass through).
fn to_integer(ctx: &mut OpCtx<'_>, f: &str) -> Result<TokenStream, String> {
    let f = format_ident!("{}", f);
    unary(ctx, |a| match a.kind {
        ScalarKind::Double => {
            let e = a.code;
            Expr::new(
                quote!((::ptec_runtime::kernels::scalar::#f(#e) as i64)),
                ScalarKind::Int,
            )
        }
        _ => Expr::new(a.to(ScalarKind::Int), ScalarKind::Int),
    })
}

fn ceil(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    to_integer(ctx, "ceil")
}
fn round(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    to_integer(ctx, "round")
}
fn trunc(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    to_integer(ctx, "trunc")
}

/// Python's `max(a, b)`/`min(a, b)`: the first operand unless the second
/// is strictly better.
fn sym_max(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    binary(ctx, |_, k, a, b| {
        Expr::new(quote!({ let (a, b) = (#a, #b); if b > a { b } else { a } }), k)
    })
}
fn sym_min(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    binary(ctx, |_, k, a, b| {
        Expr::new(quote!({ let (a, b) = (#a, #b); if b < a { b } else { a } }), k)
    })
}

/// `sym_ite(b, t, f)`: `t if b else f`.
fn sym_ite(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(4)?;
    let (c, t, f) = (ctx.scalar_operand(0)?, ctx.scalar_operand(1)?, ctx.scalar_operand(2)?);
    let k = if t.kind == f.kind { t.kind } else { numeric(&t, &f) };
    let (c, t, f) = (c.to(ScalarKind::Bool), t.to(k), f.to(k));
    ctx.store_scalar(3, Expr::new(quote!((if #c { #t } else { #f })), k))
}

/// `sym_size.int(self, dim) -> int`: the live size of a dim.
fn sym_size(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (x, dim) = (ctx.tensor(0)?, ctx.int(1)?);
    if x.rank() == 0 {
        return Err("sym_size of a 0-dim tensor".into());
    }
    let d = norm_dim(dim, x.rank())?;
    let size = if x.dynamic {
        let f = sizes_field(x.value);
        let dl = lit(d);
        quote!((self.#f[#dl] as i64))
    } else {
        i64_lit(x.sizes[d] as i64)
    };
    ctx.store_scalar(2, Expr::new(size, ScalarKind::Int))
}

/// `sym_numel(self) -> int`: the live element count.
fn sym_numel(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(2)?;
    let x = ctx.tensor(0)?;
    let n = ctx.numel(&x);
    ctx.store_scalar(1, Expr::new(quote!((#n as i64)), ScalarKind::Int))
}

/// `_local_scalar_dense(self) -> Scalar`: the first element (PyTorch's
/// `.item()`), as a double, integer or bool by the tensor's dtype.
fn local_scalar_dense(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    ctx.arity(2)?;
    let x = ctx.tensor(0)?;
    if !x.dynamic && x.numel() != 1 {
        return Err(format!(
            "value {} has {} elements; `.item()` needs one",
            x.value,
            x.numel()
        ));
    }
    let (v, view) = ctx.read(&x)?;
    let e = quote!(::ptec_runtime::kernels::num::Element);
    let ins = lit(ctx.instruction);
    let first = quote! {
        (*#v.first().ok_or(::ptec_runtime::Error::Kernel {
            instruction: #ins,
            error: ::ptec_runtime::kernels::KernelError::ShapeMismatch,
        })?)
    };
    let item = if x.dtype == ScalarType::Bool {
        Expr::new(first, ScalarKind::Bool)
    } else if x.dtype.is_float() {
        Expr::new(quote!(#e::to_f64(#first)), ScalarKind::Double)
    } else {
        Expr::new(quote!(#e::to_i64(#first)), ScalarKind::Int)
    };
    let store = ctx.store_scalar(1, item)?;
    Ok(quote! { #view #store })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expr(kind: ScalarKind) -> Expr {
        Expr::new(quote!(x), kind)
    }

    #[test]
    fn conversions_are_casts() {
        use ScalarKind::*;
        assert_eq!(expr(Int).to(Int).to_string(), "x");
        assert_eq!(expr(Int).to(Double).to_string(), "(x as f64)");
        assert_eq!(expr(Double).to(Int).to_string(), "(x as i64)");
        assert_eq!(expr(Bool).to(Double).to_string(), "(x as u8 as f64)");
        assert_eq!(expr(Int).to(Bool).to_string(), "(x != 0)");
    }

    #[test]
    fn mixed_numbers_compute_in_doubles() {
        use ScalarKind::*;
        assert_eq!(numeric(&expr(Int), &expr(Int)), Int);
        assert_eq!(numeric(&expr(Bool), &expr(Int)), Int);
        assert_eq!(numeric(&expr(Int), &expr(Double)), Double);
    }

    #[test]
    fn every_prim_op_writes_a_scalar() {
        for (name, _) in OPS {
            assert!(writes_scalar(name), "{name}");
        }
    }
}
