//! Tests generated from a bundle's test cases: a `bundled` module that can
//! run every case through the dynamic interface (used by `ptec check`) and
//! one `#[test]` per case.
//!
//! Inputs and expected outputs are not copied into the code: they are byte
//! ranges of the embedded bundle file.
use super::Ctx;
use crate::codegen::ops::{f64_lit, i64_lit, lit, usize_slice};
use crate::ir::*;
use proc_macro2::TokenStream;
use quote::{format_ident, quote};

fn value(ctx: &Ctx<'_>, v: &TestValue) -> TokenStream {
    match v {
        TestValue::Tensor {
            dtype,
            sizes,
            dim_order,
            data,
        } => {
            let d = format_ident!("{}", format!("{dtype:?}"));
            let s = usize_slice(sizes);
            let ident = ctx.data_ident(data.source);
            let (a, b) = (lit(data.offset), lit(data.offset + data.len));
            quote! {
                ::ptec_runtime::Value::Tensor(::ptec_runtime::TensorRef {
                    dtype: ::ptec_runtime::ScalarType::#d,
                    sizes: #s,
                    dim_order: &[#(#dim_order),*],
                    data: &#ident.0[#a..#b],
                })
            }
        }
        TestValue::Int(i) => {
            let l = i64_lit(*i);
            quote!(::ptec_runtime::Value::Int(#l))
        }
        TestValue::Bool(b) => quote!(::ptec_runtime::Value::Bool(#b)),
        TestValue::Double(d) => {
            let l = f64_lit(*d);
            quote!(::ptec_runtime::Value::Double(#l))
        }
    }
}

/// The `bundled` module for `suites`, with default tolerances for the
/// generated `#[test]`s.
///
/// `files` are the statics embedding the files a program in external-weights
/// mode is given (empty otherwise): the tests embed them and hand them over
/// as borrowed blobs. A program with delegates gets no `#[test]`s, as only
/// its user has the backends; `run_case` works for it all the same.
pub fn generate_tests(ctx: &Ctx<'_>, suites: &[TestSuite], rtol: f64, atol: f64, files: &[TokenStream]) -> TokenStream {
    let st = &ctx.struct_ident;
    let construct = if ctx.runtime_files {
        let blobs = std::iter::once(DataSource::Program)
            .chain((0..files.len().saturating_sub(1)).map(DataSource::External))
            .map(|s| {
                let id = ctx.data_ident(s);
                quote!(::ptec_runtime::Blob::Borrowed(&#id.0))
            });
        quote!(#st::boxed([#(#blobs),*]).expect("the embedded files are the ones compiled against"))
    } else {
        quote!(#st::try_boxed().expect("the heap holds the program"))
    };
    let mut arms = Vec::new();
    let mut traced_arms = Vec::new();
    let mut cases = Vec::new();
    let mut tests = Vec::new();
    let mut n = 0usize;
    for s in suites {
        let Some(mi) = ctx.program.methods.iter().position(|m| m.name == s.method) else {
            continue;
        };
        let mil = lit(mi);
        let first = n;
        for (ci, c) in s.cases.iter().enumerate() {
            let nl = lit(n);
            let inputs = c.inputs.iter().map(|v| value(ctx, v));
            let expected = c.expected.iter().map(|v| value(ctx, v));
            let (inputs, expected) = (quote!(&[#(#inputs),*]), quote!(&[#(#expected),*]));
            arms.push(quote! {
                #nl => ::ptec_runtime::harness::run_case(model, #mil, #inputs, #expected, tol),
            });
            traced_arms.push(quote! {
                #nl => ::ptec_runtime::harness::run_case_traced(model, #mil, #inputs, #expected, tol, tracer),
            });
            let name = &s.method;
            let cil = lit(ci);
            cases.push(quote!((#name, #cil)));
            let tname = format_ident!("{}_{}", crate::codegen::method_ident(&s.method), ci);
            let prefix = lit(first);
            tests.push(quote! {
                #[test]
                fn #tname() {
                    // Cases of a method run in order on one instance, so a
                    // stateful method sees the state its earlier cases left.
                    let mut model = #construct;
                    for k in #prefix..#nl {
                        run_case(&mut *model, k, TOLERANCE).unwrap_or_else(|e| panic!("earlier case {k}: {e}"));
                    }
                    if let Err(e) = run_case(&mut *model, #nl, TOLERANCE) {
                        panic!("{}[{}]: {e}", #name, #cil);
                    }
                }
            });
            n += 1;
        }
    }
    if ctx.n_delegates > 0 {
        tests.clear();
    }
    let test_mod = if tests.is_empty() {
        quote!()
    } else {
        quote! {
            #[cfg(test)]
            mod tests {
                use super::*;
                #(#tests)*
            }
        }
    };
    let count = lit(n);
    let out_of_range = quote! {
        _ => Err(::ptec_runtime::harness::CaseFailure::Error(::ptec_runtime::Error::IndexOutOfRange {
            what: "test case",
            index: case,
            len: #count,
        })),
    };
    let run_traced = ctx.trace.then(|| {
        quote! {
            /// [`run_case`], the execution reported to `tracer`.
            pub fn run_case_traced(
                model: &mut dyn ::ptec_runtime::Model,
                case: usize,
                tol: ::ptec_runtime::harness::Tolerance,
                tracer: &mut dyn ::ptec_runtime::trace::Tracer,
            ) -> ::core::result::Result<(), ::ptec_runtime::harness::CaseFailure> {
                match case {
                    #(#traced_arms)*
                    #out_of_range
                }
            }
        }
    });
    let (rt, at) = (f64_lit(rtol), f64_lit(atol));
    quote! {
            /// The bundled test cases of the program, runnable through the
            /// dynamic interface.
            pub mod bundled {
                use super::*;

                #(#files)*

                /// Tolerance of the generated tests.
                pub const TOLERANCE: ::ptec_runtime::harness::Tolerance = ::ptec_runtime::harness::Tolerance { rtol: #rt, atol: #at };

                /// `(method, index within the method's suite)` of each case.
                pub const CASES: [(&str, usize); #count] = [#(#cases),*];

                /// Runs case `case` (an index into [`CASES`]) on `model`.
                pub fn run_case(
                    model: &mut dyn ::ptec_runtime::Model,
                    case: usize,
                    tol: ::ptec_runtime::harness::Tolerance,
                ) -> ::core::result::Result<(), ::ptec_runtime::harness::CaseFailure> {
                    match case {
                        #(#arms)*
                        #out_of_range
                    }
                }

                #run_traced

    #test_mod
            }
        }
}
