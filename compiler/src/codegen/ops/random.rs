//! Random numbers: `rand.out` and `randn.out`, drawn from the method's
//! generator (`ptec_runtime::kernels::random`), which advances from call to
//! call and which `Model::manual_seed` seeds. PyTorch's and ExecuTorch's
//! generators are not reproduced: see docs/operator-coverage.md.
use super::checks::no_dynamic;
use super::*;

pub const OPS: &[(&str, Emitter)] = &[("aten::rand.out", rand), ("aten::randn.out", randn)];

/// Whether method `m` draws random numbers (its state then holds a
/// generator, `rng`).
pub fn draws_random(m: &Method) -> bool {
    m.instructions.iter().any(|ins| match ins {
        Instruction::Kernel { op, .. } => m
            .operators
            .get(*op)
            .is_some_and(|o| OPS.iter().any(|(n, _)| *n == o.full_name())),
        _ => false,
    })
}

/// The stream of method `name` (FNV-1a of its name): methods seeded alike
/// draw different numbers.
pub fn stream(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `rand.out(size, *, out)` and `randn.out(size, *, out)`: `out`, of the
/// sizes given, filled by `kernel`.
fn draw(ctx: &mut OpCtx<'_>, kernel: TokenStream) -> Result<TokenStream, String> {
    ctx.arity(3)?;
    let (size, out) = (ctx.int_list(0)?, ctx.tensor(1)?);
    if out.dynamic {
        return Err(no_dynamic(ctx));
    }
    require_contiguous(&[&out])?;
    require_dtype(&out, FLOATS)?;
    if size.iter().any(|&s| s < 0) || size.iter().map(|&s| s as usize).ne(out.sizes.iter().copied()) {
        return Err(format!(
            "size {size:?} is not output value {}'s {:?}",
            out.value, out.sizes
        ));
    }
    let s = proc_macro2::Literal::u64_suffixed(stream(&ctx.method.name));
    let (o, stmt) = ctx.write(&out)?;
    Ok(quote! { #stmt ::ptec_runtime::kernels::random::#kernel(&mut self.rng, #s, #o); })
}

fn rand(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    draw(ctx, quote!(uniform))
}

fn randn(ctx: &mut OpCtx<'_>) -> Result<TokenStream, String> {
    draw(ctx, quote!(normal))
}
