//! What a program is given when it is constructed: data files read at run
//! time (external-weights mode) and delegate backends. Both live in one
//! generated `…Resources` struct that method states borrow while they run.
use super::Ctx;
use crate::codegen::ops::{lit, scalar_field, sizes_field, usize_slice};
use crate::ir::*;
use crate::plan::layout::{overlaps, Home, MethodLayout};
use proc_macro2::TokenStream;
use quote::quote;

/// The body of a `DelegateCall`: views of its values, then a call into the
/// backend initialised for this delegate at construction.
#[allow(clippy::too_many_arguments)]
pub fn delegate_body(
    ctx: &Ctx<'_>,
    method_index: usize,
    m: &Method,
    layout: &MethodLayout,
    rt: &[bool],
    instruction: usize,
    delegate: usize,
    args: &[usize],
) -> Result<TokenStream, String> {
    if delegate >= m.delegates.len() {
        return Err(format!("delegate {delegate} does not exist"));
    }
    let mut views = Vec::new();
    let mut items = Vec::new();
    let mut written: Vec<(usize, (Home, usize))> = Vec::new();
    for (k, &vi) in args.iter().enumerate() {
        let v = m
            .values
            .get(vi)
            .ok_or_else(|| format!("argument {k} names value {vi}, out of range"))?;
        let item = match v {
            Value::Tensor(t) => {
                let dtype = super::ops::dtype_tokens(t.dtype);
                let order = &t.dim_order;
                let es = lit(t.dtype.element_size());
                let (sizes, len) = if t.dynamism != Dynamism::Static {
                    let f = sizes_field(vi);
                    (quote!(&self.#f[..]), quote!(::ptec_runtime::mem::numel(&self.#f) * #es))
                } else {
                    (usize_slice(&t.sizes), lit(t.nbytes()))
                };
                let name = quote::format_ident!("a{}", k);
                match layout.homes[vi] {
                    Home::Arena { offset } => {
                        let range = (layout.homes[vi], t.nbytes());
                        if let Some((other, _)) = written.iter().find(|(_, r)| overlaps(*r, range)) {
                            return Err(format!(
                                "delegate arguments {other} and {vi} share memory; a backend could not be given both"
                            ));
                        }
                        written.push((vi, range));
                        let off = lit(offset);
                        views.push(quote! {
                            let #name: &mut [u8] = unsafe { ::ptec_runtime::mem::view_mut(base, #off, #len) };
                        });
                        quote!(::ptec_runtime::DelegateArg::Tensor(::ptec_runtime::TensorMut {
                            dtype: #dtype, sizes: #sizes, dim_order: &[#(#order),*], data: #name,
                        }))
                    }
                    Home::Data { source, offset } => {
                        let d = ctx.data_expr(source, offset);
                        let off = lit(offset);
                        quote!(::ptec_runtime::DelegateArg::Value(::ptec_runtime::Value::Tensor(::ptec_runtime::TensorRef {
                            dtype: #dtype, sizes: #sizes, dim_order: &[#(#order),*], data: &#d[#off..#off + #len],
                        })))
                    }
                    Home::None => return Err(format!("delegate argument {k} (value {vi}) has no storage")),
                }
            }
            Value::Int(_) | Value::Double(_) | Value::Bool(_) => {
                let x = if rt[vi] {
                    let f = scalar_field(vi);
                    quote!(self.#f)
                } else {
                    super::ops::scalar_lit(v)
                };
                let ctor = match v {
                    Value::Int(_) => quote!(Int),
                    Value::Double(_) => quote!(Double),
                    _ => quote!(Bool),
                };
                quote!(::ptec_runtime::DelegateArg::Value(::ptec_runtime::Value::#ctor(#x)))
            }
            Value::Null => quote!(::ptec_runtime::DelegateArg::Value(::ptec_runtime::Value::None)),
            other => {
                return Err(format!(
                    "delegate argument {k} (value {vi}) is a {}; backends are given tensors, scalars and None",
                    other.kind()
                ))
            }
        };
        items.push(item);
    }
    let slot = lit(ctx.delegate_base[method_index] + delegate);
    let ins = lit(instruction);
    Ok(quote! {
        #(#views)*
        let mut args = [#(#items),*];
        let slot = rs.delegates[#slot];
        slot.execute(&mut rs.backends, #ins, &mut args)?;
    })
}

/// The resources struct, its construction (checking files, initialising
/// delegates) and its release of delegates on drop.
pub fn resources_items(ctx: &Ctx<'_>, file_checks: &[TokenStream]) -> TokenStream {
    let r = ctx.resources_ident();
    let st = &ctx.struct_ident;
    let n_files = lit(file_checks.len());
    let n_delegates = lit(ctx.n_delegates);
    let (params, _) = constructor_params(ctx, file_checks.len());
    let mut fields = Vec::new();
    let mut init_fields = Vec::new();
    let mut checks = quote!();
    if ctx.runtime_files {
        fields.push(quote!(files: [::ptec_runtime::Blob<'r>; #n_files]));
        init_fields.push(quote!(files));
        checks = quote! {
            for (file, expected) in files.iter().zip(#st::FILES.iter()) {
                file.check(expected)?;
            }
        };
    }
    let mut inits = Vec::new();
    if ctx.n_delegates > 0 {
        fields.push(quote!(backends: ::ptec_runtime::BackendRegistry<'r>));
        fields.push(quote!(delegates: [::ptec_runtime::DelegateSlot; #n_delegates]));
        init_fields.push(quote!(backends));
        init_fields.push(quote!(delegates: [::ptec_runtime::DelegateSlot::EMPTY; #n_delegates]));
        for (mi, m) in ctx.program.methods.iter().enumerate() {
            for (di, d) in m.delegates.iter().enumerate() {
                let slot = lit(ctx.delegate_base[mi] + di);
                let id = &d.id;
                let data = ctx.data_expr(d.processed.source, d.processed.offset);
                let (a, b) = (lit(d.processed.offset), lit(d.processed.offset + d.processed.len));
                let specs = d.compile_specs.iter().map(|(k, v)| {
                    let v = proc_macro2::Literal::byte_string(v);
                    quote!(::ptec_runtime::CompileSpec { key: #k, value: #v })
                });
                inits.push(quote! {
                    {
                        let processed: &[u8] = &#data[#a..#b];
                        rs.delegates[#slot] = ::ptec_runtime::DelegateSlot::init(&mut rs.backends, #id, processed, &[#(#specs),*])?;
                    }
                });
            }
        }
    }
    let drop_impl = if ctx.n_delegates > 0 {
        quote! {
            impl ::core::ops::Drop for #r<'_> {
                fn drop(&mut self) {
                    for slot in self.delegates.iter_mut() {
                        slot.destroy(&mut self.backends);
                    }
                }
            }
        }
    } else {
        quote!()
    };
    let bind = if inits.is_empty() {
        quote!(let rs = #r { #(#init_fields),* };)
    } else {
        quote!(let mut rs = #r { #(#init_fields),* };)
    };
    quote! {
        /// What the program was given at construction.
        struct #r<'r> {
            #(#fields,)*
        }

        impl<'r> #r<'r> {
            /// Checks the files against the ones compiled against and
            /// initialises every delegate with its backend.
            fn new(#params) -> ::core::result::Result<Self, ::ptec_runtime::Error> {
                #checks
                #bind
                #(#inits)*
                Ok(rs)
            }
        }

        #drop_impl
    }
}

/// The constructor parameters (declaration, and the names to pass on).
pub fn constructor_params(ctx: &Ctx<'_>, n_files: usize) -> (TokenStream, TokenStream) {
    let n = lit(n_files);
    let mut decls = Vec::new();
    let mut names = Vec::new();
    if ctx.runtime_files {
        decls.push(quote!(files: [::ptec_runtime::Blob<'r>; #n]));
        names.push(quote!(files));
    }
    if ctx.n_delegates > 0 {
        decls.push(quote!(backends: ::ptec_runtime::BackendRegistry<'r>));
        names.push(quote!(backends));
    }
    (quote!(#(#decls),*), quote!(#(#names),*))
}
