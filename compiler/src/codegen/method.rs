//! Code for one method: its state (arena, live sizes, run-time scalars,
//! instruction counter), one function per instruction, `execute`/`step`,
//! the dynamic interface (`set_input`/`output`) and the typed function.
use super::resources::delegate_body;
use super::Ctx;
use crate::codegen::ops::{
    self, dtype_tokens, lit, rust_type, scalar_field, scalar_lit, sizes_field, usize_slice, OpCtx,
};
use crate::error::{Diagnostic, ErrorKind, Location};
use crate::ir::*;
use crate::plan::fold::Folds;
use crate::plan::layout::{Home, MethodLayout, Occupancy};
use crate::plan::MethodPlan;
use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote};

/// The most bytes one method's arena may take. A Rust type must be smaller
/// than 2^61 bytes on a 64-bit target, and the program's struct holds every
/// method's arena: a plan this large comes from a corrupted file, and
/// would not build.
pub const MAX_ARENA_BYTES: usize = 1 << 56;

/// The most bytes all the methods' arenas together may take (see
/// [`MAX_ARENA_BYTES`]).
pub const MAX_PROGRAM_ARENA_BYTES: usize = 1 << 60;

/// What the program struct needs to know of a generated method.
pub struct MethodCode {
    /// Bytes of the method's arena.
    pub arena_bytes: usize,
    pub state_ident: Ident,
    pub field: Ident,
    pub items: TokenStream,
    pub meta: TokenStream,
    pub typed_fn: TokenStream,
    /// What each instruction does, in a few words (see [`short_name`]).
    pub instructions: Vec<String>,
    /// It holds some of the program's shared state (its state has
    /// `shared_save` and `shared_load`).
    pub shares: bool,
}

pub fn scalar_ty(v: &Value) -> Option<TokenStream> {
    match v {
        Value::Int(_) => Some(quote!(i64)),
        Value::Double(_) => Some(quote!(f64)),
        Value::Bool(_) => Some(quote!(bool)),
        _ => None,
    }
}

fn dynamism_tokens(d: Dynamism) -> TokenStream {
    match d {
        Dynamism::Static => quote!(::ptec_runtime::Dynamism::Static),
        Dynamism::DynamicBound => quote!(::ptec_runtime::Dynamism::DynamicBound),
        Dynamism::DynamicUnbound => quote!(::ptec_runtime::Dynamism::DynamicUnbound),
    }
}

fn tag_tokens(v: &Value) -> TokenStream {
    let t = match v {
        Value::Null => "None",
        Value::Int(_) => "Int",
        Value::Double(_) => "Double",
        Value::Bool(_) => "Bool",
        Value::String(_) => "String",
        Value::Tensor(_) => "Tensor",
        Value::IntList(_) => "ListInt",
        Value::DoubleList(_) => "ListDouble",
        Value::BoolList(_) => "ListBool",
        Value::TensorList(_) => "ListTensor",
        Value::OptionalTensorList(_) => "ListOptionalTensor",
    };
    let t = format_ident!("{}", t);
    quote!(::ptec_runtime::Tag::#t)
}

fn value_meta(v: &Value) -> TokenStream {
    let tag = tag_tokens(v);
    match v {
        Value::Tensor(t) => {
            let dtype = dtype_tokens(t.dtype);
            let sizes = usize_slice(&t.sizes);
            let order = &t.dim_order;
            let dynamism = dynamism_tokens(t.dynamism);
            quote! {
                ::ptec_runtime::ValueMeta {
                    tag: #tag,
                    tensor: Some(::ptec_runtime::TensorMeta { dtype: #dtype, sizes: #sizes, dim_order: &[#(#order),*], dynamism: #dynamism }),
                }
            }
        }
        _ => quote!(::ptec_runtime::ValueMeta { tag: #tag, tensor: None }),
    }
}

/// Values whose scalar is computed at run time: scalar inputs, targets of
/// moves and outputs of scalar (`executorch_prim`) operators.
fn runtime_scalars(m: &Method) -> Vec<bool> {
    let mut rt = vec![false; m.values.len()];
    let scalar = |i: usize| matches!(m.values.get(i), Some(Value::Int(_) | Value::Double(_) | Value::Bool(_)));
    for &i in &m.inputs {
        if scalar(i) {
            rt[i] = true;
        }
    }
    for ins in &m.instructions {
        match ins {
            Instruction::Move { to, .. } if scalar(*to) => rt[*to] = true,
            Instruction::Kernel { op, args } => {
                if let Some(o) = m.operators.get(*op) {
                    if ops::writes_scalar(&o.full_name()) {
                        if let Some(&last) = args.last() {
                            if scalar(last) {
                                rt[last] = true;
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
    rt
}

/// A Rust identifier from a method name.
pub fn method_ident(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, 'm');
    }
    if syn::parse_str::<Ident>(&s).is_err()
        || matches!(s.as_str(), "new" | "boxed" | "reset" | "method_meta" | "default")
    {
        s = format!("run_{s}");
    }
    s
}

fn camel(s: &str) -> String {
    crate::names::camel_case(s.split('_'))
}

/// The name of the type generated code keeps method `method`'s state in,
/// for program struct `program`: tools that read a built binary's symbols
/// (`ptec size`) find the method's code under it.
pub fn state_type_name(program: &str, method: &str) -> String {
    format!("{program}{}State", camel(&method_ident(method)))
}

/// `s`'s `_`-separated words joined by single underscores.
fn snake(s: &str) -> String {
    let words: Vec<&str> = s.split('_').filter(|w| !w.is_empty()).collect();
    words.join("_")
}

/// The typed Rust type of a static, non-bool tensor: nested arrays (or the
/// element type for rank 0); `None` for tensors exposed as `TensorRef`.
fn typed_array(t: &Tensor) -> Option<TokenStream> {
    if t.dynamism != Dynamism::Static || t.dtype == ScalarType::Bool || !t.is_contiguous() {
        return None;
    }
    let mut ty = rust_type(t.dtype)?;
    for &s in t.sizes.iter().rev() {
        let n = lit(s);
        ty = quote!([#ty; #n]);
    }
    Some(ty)
}

pub fn generate_method(
    ctx: &Ctx<'_>,
    index: usize,
    m: &Method,
    plan: MethodPlan,
) -> Result<MethodCode, Vec<Diagnostic>> {
    let MethodPlan {
        layout,
        mut folds,
        occupancy,
        shared,
    } = plan;
    // The weights packed at compile time go first among the constants
    // prepared for the method.
    if let Some(prepared) = &ctx.prepared {
        folds.place_packed(prepared);
    }
    let rt = runtime_scalars(m);
    let at = Location::method(&m.name);
    let mut errors = Vec::new();
    let mident = method_ident(&m.name);
    let state_ident = format_ident!("{}", state_type_name(&ctx.struct_ident.to_string(), &m.name));
    // No run of underscores (ExecuTorch's training programs have methods
    // such as `__et_training_fqn_forward`): distinct when the state types are.
    let field = format_ident!("m_{}", snake(&mident));

    let (mut fields, init) = state_fields(ctx, m, &layout, &rt);

    let packing = packing(ctx, &layout, &folds, &mut fields);

    // One function per instruction.
    let (rs_mut, rs_ref) = (ctx.rs_param(true), ctx.rs_param(false));
    let (rs_arg, rs_arg_after) = (ctx.rs_arg(false), ctx.rs_arg(true));
    let data_expr = |s: DataSource, offset: usize| ctx.data_expr(s, offset);
    let emit = Emit {
        ctx,
        index,
        m,
        layout: &layout,
        folds: &folds,
        occupancy: &occupancy,
        rt: &rt,
        data_expr: &data_expr,
        scratch: Default::default(),
        thread_share: Default::default(),
        written: Default::default(),
    };
    let mut ins_fns = Vec::new();
    let mut has_jumps = false;
    // Instructions with no code of their own get no function: frees, jumps
    // (their test is in `run_at`) and what folded into another.
    let has_fn = |n: usize, ins: &Instruction| match ins {
        Instruction::Kernel { .. } => folds.elided(n).is_none(),
        Instruction::Delegate { .. } | Instruction::Move { .. } => true,
        Instruction::JumpFalse { .. } | Instruction::Free { .. } => false,
    };
    let mut folded_into: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for n in 0..m.instructions.len() {
        if let Some(by) = folds.elided(n) {
            folded_into.entry(by).or_default().push(n);
        }
    }
    for (n, ins) in m.instructions.iter().enumerate() {
        let fname = format_ident!("i{}", n);
        let at = at.clone().instruction(n);
        let doc = instruction_doc(m, n, ins, &folded_into);
        let body = match ins {
            Instruction::JumpFalse { .. } => {
                has_jumps = true;
                Ok(quote!())
            }
            _ => emit.body(n, ins, &at),
        };
        match body {
            Ok(body) => {
                if has_fn(n, ins) {
                    ins_fns.push(quote! {
                        #(#[doc = #doc])*
                        #[inline]
                        fn #fname(&mut self #rs_mut) -> ::core::result::Result<(), ::ptec_runtime::Error> {
                            let base = self.arena.0.as_mut_ptr();
                            #body
                            Ok(())
                        }
                    });
                }
            }
            Err(d) => errors.push(*d),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let (scratch, thread_share) = (emit.scratch.get(), emit.thread_share.get());
    // The thread scratch goes after the plan and every instruction's own
    // scratch.
    let thread_scratch_offset = layout
        .arena_size
        .checked_add(scratch)
        .and_then(|b| b.checked_next_multiple_of(64));
    let thread_scratch_bytes = thread_share.checked_mul(ptec_runtime::kernels::nhwc::MAX_CHAIN_PARTS);
    let arena_total = thread_scratch_offset
        .zip(thread_scratch_bytes)
        .and_then(|(o, t)| o.checked_add(t))
        .filter(|&b| b <= MAX_ARENA_BYTES);
    let Some(arena_total) = arena_total else {
        return Err(vec![Diagnostic::new(
            ErrorKind::Unsupported {
                detail: format!(
                    "the method's memory ({} bytes planned, {scratch} of scratch and {} of thread scratch) is more than a method may take ({MAX_ARENA_BYTES} bytes)",
                    layout.arena_size,
                    thread_share.saturating_mul(ptec_runtime::kernels::nhwc::MAX_CHAIN_PARTS)
                ),
            },
            at,
        )]);
    };
    let arena_lit = lit(arena_total);
    let thread_scratch = (thread_share > 0).then(|| {
        let offset = lit(thread_scratch_offset.unwrap_or(arena_total));
        let floats = lit(thread_scratch_bytes.unwrap_or(0) / 4);
        quote! {
            /// Where the thread scratch starts in the arena, in bytes, and
            /// its length in floats: the chains' buffers, each thread's in
            /// its own share.
            const THREAD_SCRATCH_OFFSET: usize = #offset;
            const THREAD_SCRATCH_FLOATS: usize = #floats;
        }
    });
    fields.insert(0, quote!(arena: ::ptec_runtime::mem::Arena<#arena_lit>));

    // Control: execute, run_at (one instruction), step.
    let len = m.instructions.len();
    let mut arms = Vec::new();
    for (n, ins) in m.instructions.iter().enumerate() {
        let nl = lit(n);
        let next = lit(n + 1);
        let arm = match ins {
            Instruction::JumpFalse { cond, destination } => {
                let dest = lit(*destination);
                let c = cond_expr(m, &layout, &rt, *cond, n, &data_expr);
                quote!(#nl => { if #c { #next } else { #dest } })
            }
            _ if !has_fn(n, ins) => quote!(#nl => { #next }),
            _ => {
                let f = format_ident!("i{}", n);
                quote!(#nl => { self.#f(#rs_arg)?; #next })
            }
        };
        arms.push(arm);
    }
    let len_lit = lit(len);
    let execute_body = if has_jumps {
        quote! {
            let mut pc = 0usize;
            while pc < #len_lit {
                pc = self.run_at(pc #rs_arg_after)?;
            }
            Ok(())
        }
    } else {
        let calls = m
            .instructions
            .iter()
            .enumerate()
            .filter(|&(n, i)| has_fn(n, i))
            .map(|(n, _)| format_ident!("i{}", n));
        quote! { #(self.#calls(#rs_arg)?;)* Ok(()) }
    };

    let (ensure_packed, pack_fn) = if packing.is_empty() {
        (quote!(), quote!())
    } else {
        (
            quote!(self.pack_weights(#rs_arg);),
            quote! {
                /// Packs the constant weights of the products, once.
                #[cold]
                fn pack_weights_now(&mut self #rs_ref) {
                    #(#packing)*
                    self.packed_ready = true;
                }

                #[inline(always)]
                fn pack_weights(&mut self #rs_ref) {
                    if !self.packed_ready {
                        self.pack_weights_now(#rs_arg);
                    }
                }
            },
        )
    };
    let step_pack = if packing.is_empty() {
        quote!()
    } else {
        quote!(if self.pc == 0 { #ensure_packed })
    };
    let set_input_arms = m
        .inputs
        .iter()
        .enumerate()
        .map(|(k, &vi)| set_input_arm(m, &layout, &rt, k, vi));
    let output_arms = m
        .outputs
        .iter()
        .enumerate()
        .map(|(k, &vi)| output_arm(m, &layout, &rt, k, vi, ctx));
    let output_sig = if ctx.has_resources() {
        let r = ctx.resources_ident();
        quote!(fn output<'s>(&'s self, index: usize, rs: &'s #r<'_>) -> ::core::result::Result<::ptec_runtime::Value<'s>, ::ptec_runtime::Error>)
    } else {
        quote!(fn output(&self, index: usize) -> ::core::result::Result<::ptec_runtime::Value<'_>, ::ptec_runtime::Error>)
    };
    let traced = ctx.trace.then(|| {
        let written = emit.written.take();
        traced_items(
            m,
            &layout,
            &folded_into,
            &written,
            |n| has_fn(n, &m.instructions[n]),
            &ensure_packed,
            ctx,
        )
    });
    let shared_fns = shared_fns(&shared);
    let n_in = lit(m.inputs.len());
    let n_out = lit(m.outputs.len());
    let fits = super::fits_target(&format!("the memory of method `{}`", m.name), arena_total);
    let items = quote! {
        #fits

        struct #state_ident {
            #(#fields,)*
        }

        impl #state_ident {
            #thread_scratch

            /// Sets live sizes to their bounds, run-time scalars to their
            /// serialized values and mutable tensors to their initial data.
            fn init(&mut self #rs_ref) {
                self.pc = 0;
                #(#init)*
            }

            fn execute(&mut self #rs_mut) -> ::core::result::Result<(), ::ptec_runtime::Error> {
                self.pc = 0;
                #ensure_packed
                #execute_body
            }

            #pack_fn

            /// Runs instruction `pc`; returns the next one.
            fn run_at(&mut self, pc: usize #rs_mut) -> ::core::result::Result<usize, ::ptec_runtime::Error> {
                Ok(match pc {
                    #(#arms)*
                    _ => #len_lit,
                })
            }

            fn step(&mut self #rs_mut) -> ::core::result::Result<::ptec_runtime::Step, ::ptec_runtime::Error> {
                if self.pc >= #len_lit {
                    self.pc = 0;
                    return Ok(::ptec_runtime::Step::Done);
                }
                #step_pack
                let next = self.run_at(self.pc #rs_arg_after)?;
                self.pc = next;
                if next >= #len_lit {
                    self.pc = 0;
                    Ok(::ptec_runtime::Step::Done)
                } else {
                    Ok(::ptec_runtime::Step::Continue)
                }
            }

            fn set_input(&mut self, index: usize, value: ::ptec_runtime::Value<'_>) -> ::core::result::Result<(), ::ptec_runtime::Error> {
                match index {
                    #(#set_input_arms)*
                    _ => Err(::ptec_runtime::Error::IndexOutOfRange { what: "input", index, len: #n_in }),
                }
            }

            #output_sig {
                match index {
                    #(#output_arms)*
                    _ => Err(::ptec_runtime::Error::IndexOutOfRange { what: "output", index, len: #n_out }),
                }
            }

            #(#ins_fns)*

            #traced

            #shared_fns
        }
    };

    let name = &m.name;
    let inputs_meta = m.inputs.iter().map(|&i| value_meta(&m.values[i]));
    let outputs_meta = m.outputs.iter().map(|&i| value_meta(&m.values[i]));
    // The program's plan; what the passes added is ptec's own business.
    let buffers = m
        .buffer_sizes
        .iter()
        .take(m.program_buffers)
        .skip(1)
        .map(|&s| lit(s as usize));
    let meta = quote! {
        ::ptec_runtime::MethodMeta {
            name: #name,
            inputs: &[#(#inputs_meta),*],
            outputs: &[#(#outputs_meta),*],
            planned_buffers: &[#(#buffers),*],
            num_instructions: #len_lit,
        }
    };
    let typed_fn = typed_fn(m, &layout, &rt, index, &mident, &field, ctx, !shared.is_empty());
    let instructions = m
        .instructions
        .iter()
        .enumerate()
        .map(|(n, ins)| short_name(m, n, ins, &folds))
        .collect();
    Ok(MethodCode {
        arena_bytes: arena_total,
        state_ident,
        field,
        items,
        meta,
        typed_fn,
        instructions,
        shares: !shared.is_empty(),
    })
}

/// The state's hand-over of the shared state it holds (see
/// [`crate::plan::shared`]): `shared_save` copies its bytes into the
/// program's shared buffer, `shared_load` takes them from there.
fn shared_fns(runs: &[crate::plan::shared::SharedRun]) -> TokenStream {
    if runs.is_empty() {
        return quote!();
    }
    let (mut save, mut load) = (Vec::new(), Vec::new());
    for r in runs {
        let (s, a, n) = (lit(r.shared), lit(r.arena), lit(r.len));
        save.push(quote!(shared[#s..#s + #n].copy_from_slice(&self.arena.0[#a..#a + #n]);));
        load.push(quote!(self.arena.0[#a..#a + #n].copy_from_slice(&shared[#s..#s + #n]);));
    }
    quote! {
        /// Copies the shared state this method holds into the program's
        /// shared buffer.
        fn shared_save(&self, shared: &mut [u8]) {
            #(#save)*
        }

        /// Takes the shared state this method holds from the program's
        /// shared buffer.
        fn shared_load(&mut self, shared: &[u8]) {
            #(#load)*
        }
    }
}

/// What traced code adds to a method's state (the `trace` option):
/// `ORIGINS`, each instruction's origin in ExecuTorch's numbering (`None`
/// for those without code of their own), `execute_traced`, which runs the
/// method reporting each instruction to a tracer, and `trace_outputs`,
/// which gives it the tensors an instruction wrote.
fn traced_items(
    m: &Method,
    layout: &MethodLayout,
    folded_into: &std::collections::BTreeMap<usize, Vec<usize>>,
    written: &std::collections::BTreeMap<usize, Vec<usize>>,
    has_fn: impl Fn(usize) -> bool,
    ensure_packed: &TokenStream,
    ctx: &Ctx<'_>,
) -> TokenStream {
    let origin_tokens = |o: Origin| {
        let instruction = proc_macro2::Literal::u32_suffixed(u32::try_from(o.instruction).unwrap_or(u32::MAX));
        let node = match o.delegate_node {
            Some(h) => {
                let h = proc_macro2::Literal::u32_suffixed(h);
                quote!(::core::option::Option::Some(#h))
            }
            None => quote!(::core::option::Option::None),
        };
        // The kernel's name, as ExecuTorch's generated registration times
        // it (prim ops are not timed apart from their instruction there).
        let operator = m
            .read_operators
            .get(o.instruction)
            .and_then(Option::as_deref)
            .filter(|name| o.delegate_node.is_none() && !name.starts_with("executorch_prim::"))
            .map(|name| name.split_once("::").map_or(name, |(_, rest)| rest));
        let operator = match operator {
            Some(name) => quote!(::core::option::Option::Some(#name)),
            None => quote!(::core::option::Option::None),
        };
        quote!(::ptec_runtime::trace::Origin { chain: 0u32, instruction: #instruction, delegate_node: #node, operator: #operator })
    };
    let origin = |n: usize| origin_tokens(m.origin(n));
    let len = m.instructions.len();
    let origins = (0..len).map(|n| {
        if has_fn(n) {
            let o = origin(n);
            quote!(::core::option::Option::Some(#o))
        } else {
            quote!(::core::option::Option::None)
        }
    });
    // After the last node of each XNNPACK call ptec lowered, the call's
    // outputs as the call's own (no node), where ExecuTorch's runtime logs
    // its arguments: `ptec check` compares them with those. Only when
    // every one can be logged, so that they line up.
    let mut tails: std::collections::BTreeMap<usize, Vec<TokenStream>> = Default::default();
    for (&k, outputs) in &m.delegate_outputs {
        let of_call = |n: &usize| has_fn(*n) && m.origin(*n).instruction == k && m.origin(*n).delegate_node.is_some();
        let (Some(last), Some(tensors)) = (
            (0..len).rev().find(of_call),
            outputs
                .iter()
                .map(|&vi| traced_tensor_ref(m, layout, vi))
                .collect::<Option<Vec<_>>>(),
        ) else {
            continue;
        };
        let o = origin_tokens(Origin {
            instruction: k,
            delegate_node: None,
            logged_as: None,
        });
        tails.insert(
            last,
            tensors
                .into_iter()
                .map(|t| quote!(tracer.output(#o, "DELEGATE_CALL", #t);))
                .collect(),
        );
    }
    let mut arms = Vec::new();
    for (&n, values) in written {
        if !has_fn(n) {
            continue;
        }
        // The parts of one instruction as read (a convolution between the
        // permutations of its image) report what the last part writes.
        if (n + 1..len)
            .find(|&k| has_fn(k))
            .is_some_and(|k| m.origin(k) == m.origin(n))
        {
            continue;
        }
        // An instruction that also does later ones (a fused relu) leaves
        // the last one's result: it is reported as that instruction's.
        let last = folded_into.get(&n).into_iter().flatten().copied().fold(n, usize::max);
        let mut o = m.origin(last);
        o.instruction = o.logged_as.unwrap_or(o.instruction);
        let o = origin_tokens(o);
        let name = match &m.instructions[last] {
            Instruction::Kernel { op, .. } => m.operators.get(*op).map(Operator::full_name).unwrap_or_default(),
            _ => "DELEGATE_CALL".to_string(),
        };
        let mut outputs: Vec<TokenStream> = values
            .iter()
            .filter_map(|&vi| traced_tensor_ref(m, layout, vi))
            .map(|t| quote!(tracer.output(#o, #name, #t);))
            .collect();
        outputs.extend(tails.remove(&n).unwrap_or_default());
        if !outputs.is_empty() {
            let nl = lit(n);
            arms.push(quote!(#nl => { #(#outputs)* }));
        }
    }
    for (n, outputs) in tails {
        let nl = lit(n);
        arms.push(quote!(#nl => { #(#outputs)* }));
    }
    let len_lit = lit(len);
    let (rs_mut, rs_arg_after) = (ctx.rs_param(true), ctx.rs_arg(true));
    let name = &m.name;
    quote! {
        const ORIGINS: [::core::option::Option<::ptec_runtime::trace::Origin>; #len_lit] = [#(#origins),*];

        /// Runs the method as `execute` does, reporting each instruction
        /// to `tracer`.
        fn execute_traced(&mut self, tracer: &mut dyn ::ptec_runtime::trace::Tracer #rs_mut) -> ::core::result::Result<(), ::ptec_runtime::Error> {
            self.pc = 0;
            #ensure_packed
            tracer.begin_execute(#name);
            let mut pc = 0usize;
            while pc < #len_lit {
                let origin = Self::ORIGINS[pc];
                if let ::core::option::Option::Some(o) = origin {
                    tracer.begin(o);
                }
                let next = self.run_at(pc #rs_arg_after)?;
                if let ::core::option::Option::Some(o) = origin {
                    tracer.end(o);
                    if tracer.wants_outputs() {
                        self.trace_outputs(pc, tracer);
                    }
                }
                pc = next;
            }
            tracer.end_execute();
            Ok(())
        }

        /// Gives `tracer` the tensors instruction `pc` wrote.
        fn trace_outputs(&self, pc: usize, tracer: &mut dyn ::ptec_runtime::trace::Tracer) {
            match pc {
                #(#arms)*
                _ => {}
            }
        }
    }
}

/// Value `vi`'s sizes as the generated code reads them: its live sizes
/// field when they vary, else the literal.
fn live_sizes(vi: usize, t: &Tensor) -> TokenStream {
    if t.dynamism != Dynamism::Static {
        let f = sizes_field(vi);
        quote!(&self.#f[..])
    } else {
        usize_slice(&t.sizes)
    }
}

/// A `TensorRef` of tensor `vi`'s live data in the arena; `None` for a
/// value that is not a tensor there.
fn tensor_ref(m: &Method, layout: &MethodLayout, vi: usize) -> Option<TokenStream> {
    let (t, offset) = arena_tensor(m, layout, vi)?;
    let order = &t.dim_order;
    Some(tensor_ref_tokens(
        m,
        vi,
        t,
        offset,
        live_sizes(vi, t),
        quote!(&[#(#order),*]),
    ))
}

/// [`tensor_ref`] for debug outputs: a value stored NHWC by the
/// channels-last pass is given with PyTorch's NCHW sizes and the dim order
/// that says how it is stored, so that the tracer logs it in PyTorch's
/// order, which ExecuTorch's Inspector compares with eager outputs.
fn traced_tensor_ref(m: &Method, layout: &MethodLayout, vi: usize) -> Option<TokenStream> {
    let (t, offset) = arena_tensor(m, layout, vi)?;
    match t.sizes[..] {
        [n, h, w, c] if m.channels_last.contains(&vi) => Some(tensor_ref_tokens(
            m,
            vi,
            t,
            offset,
            usize_slice(&[n, c, h, w]),
            quote!(&[0u8, 2u8, 3u8, 1u8]),
        )),
        _ => tensor_ref(m, layout, vi),
    }
}

/// Tensor `vi` and its offset in the arena; `None` for a value that is
/// not a tensor there.
fn arena_tensor<'m>(m: &'m Method, layout: &MethodLayout, vi: usize) -> Option<(&'m Tensor, usize)> {
    match (m.values.get(vi), layout.homes.get(vi)) {
        (Some(Value::Tensor(t)), Some(&Home::Arena { offset })) => Some((t, offset)),
        _ => None,
    }
}

fn tensor_ref_tokens(
    m: &Method,
    vi: usize,
    t: &Tensor,
    offset: usize,
    sizes: TokenStream,
    order: TokenStream,
) -> TokenStream {
    let dtype = dtype_tokens(t.dtype);
    let n = live_bytes(m, vi, t);
    let o = lit(offset);
    quote! {
        ::ptec_runtime::TensorRef {
            dtype: #dtype,
            sizes: #sizes,
            dim_order: #order,
            data: &self.arena.0[#o..#o + #n],
        }
    }
}

/// Instruction `n` in a few words, for profiles: its operator, or its kind,
/// and the instruction it was folded into.
pub fn short_name(m: &Method, n: usize, ins: &Instruction, folds: &Folds) -> String {
    let what = match ins {
        Instruction::Kernel { op, .. } => m.operators.get(*op).map(Operator::full_name).unwrap_or_default(),
        Instruction::Delegate { delegate, .. } => format!("delegate {delegate}"),
        Instruction::Move { .. } => "move".into(),
        Instruction::JumpFalse { .. } => "jump".into(),
        Instruction::Free { .. } => "free".into(),
    };
    match folds.elided(n) {
        Some(by) => format!("{what} (folded into {by})"),
        None => what,
    }
}

fn describe(m: &Method, ins: &Instruction) -> String {
    match ins {
        Instruction::Kernel { op, args } => format!(
            "{}({})",
            m.operators.get(*op).map(Operator::full_name).unwrap_or_default(),
            args.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")
        ),
        Instruction::Delegate { delegate, args } => format!("delegate {delegate} {args:?}"),
        Instruction::Move { from, to } => format!("move value {from} to value {to}"),
        Instruction::JumpFalse { cond, destination } => format!("jump to {destination} unless value {cond}"),
        Instruction::Free { value } => format!("free value {value}"),
    }
}

/// Bytes of a tensor's live data: `(start, len)` expressions.
fn live_bytes(m: &Method, vi: usize, t: &Tensor) -> TokenStream {
    let es = lit(t.dtype.element_size());
    if t.dynamism != Dynamism::Static {
        let f = sizes_field(vi);
        let _ = m;
        quote!(::ptec_runtime::mem::numel(&self.#f) * #es)
    } else {
        lit(t.nbytes())
    }
}

fn move_body(
    m: &Method,
    layout: &MethodLayout,
    rt: &[bool],
    from: usize,
    to: usize,
    data_expr: &dyn Fn(DataSource, usize) -> TokenStream,
) -> Result<TokenStream, String> {
    match (&m.values[from], &m.values[to]) {
        (Value::Tensor(f), Value::Tensor(t)) => {
            if f.dtype != t.dtype || f.sizes.len() != t.sizes.len() {
                return Err(format!("move from value {from} to value {to}: dtype or rank differ"));
            }
            let Home::Arena { offset: dst } = layout.homes[to] else {
                return Err(format!("move into value {to}, which has no memory of its own"));
            };
            let n = live_bytes(m, from, f);
            let mut out = quote!();
            match layout.homes[from] {
                Home::Arena { offset: src } => {
                    let (s, d) = (lit(src), lit(dst));
                    if src != dst {
                        out = quote! { unsafe { ::ptec_runtime::mem::copy_within(base, #s, #d, #n) }; };
                    }
                }
                Home::Data { source, offset } => {
                    let data = data_expr(source, offset);
                    let (s, d) = (lit(offset), lit(dst));
                    out = quote! { let n = #n; self.arena.0[#d..#d + n].copy_from_slice(&#data[#s..#s + n]); };
                }
                Home::None => return Err(format!("move from value {from}, which has no storage")),
            }
            if t.dynamism != Dynamism::Static {
                let tf = sizes_field(to);
                if f.dynamism != Dynamism::Static {
                    let ff = sizes_field(from);
                    out.extend(quote! { self.#tf = self.#ff; });
                } else {
                    let s = usize_slice(&f.sizes);
                    out.extend(quote! { self.#tf.copy_from_slice(#s); });
                }
            } else if f.sizes != t.sizes {
                return Err(format!("move from value {from} to value {to}: static sizes differ"));
            }
            Ok(out)
        }
        (fv, tv) if scalar_ty(fv).is_some() && scalar_ty(tv).is_some() && rt[to] => {
            let tf = scalar_field(to);
            let src = if rt[from] {
                let ff = scalar_field(from);
                quote!(self.#ff)
            } else {
                scalar_lit(fv)
            };
            let ty = scalar_ty(tv).expect("checked");
            Ok(quote! { self.#tf = #src as #ty; })
        }
        (fv, tv) => Err(format!("move from a {} to a {} is not supported", fv.kind(), tv.kind())),
    }
}

fn cond_expr(
    m: &Method,
    layout: &MethodLayout,
    rt: &[bool],
    cond: usize,
    instruction: usize,
    data_expr: &dyn Fn(DataSource, usize) -> TokenStream,
) -> TokenStream {
    let ins = lit(instruction);
    match &m.values[cond] {
        Value::Bool(b) if !rt[cond] => quote!(#b),
        Value::Bool(_) => {
            let f = scalar_field(cond);
            quote!(self.#f)
        }
        Value::Tensor(t) => {
            let n = live_bytes(m, cond, t);
            let bytes = match layout.homes[cond] {
                Home::Arena { offset } => {
                    let o = lit(offset);
                    quote!(&self.arena.0[#o..#o + n])
                }
                Home::Data { source, offset } => {
                    let d = data_expr(source, offset);
                    let o = lit(offset);
                    quote!(&#d[#o..#o + n])
                }
                Home::None => quote!(&[]),
            };
            quote! {{
                let n = #n;
                let bytes: &[u8] = #bytes;
                ::ptec_runtime::mem::check_bools(bytes, #cond).map_err(|_| ::ptec_runtime::Error::BadCondition { instruction: #ins })?;
                bytes.iter().all(|&b| b != 0)
            }}
        }
        _ => quote!(false),
    }
}

fn set_input_arm(m: &Method, layout: &MethodLayout, rt: &[bool], k: usize, vi: usize) -> TokenStream {
    let kl = lit(k);
    match &m.values[vi] {
        Value::Tensor(t) => {
            let dtype = dtype_tokens(t.dtype);
            let order = &t.dim_order;
            let es = lit(t.dtype.element_size());
            let Home::Arena { offset } = layout.homes[vi] else {
                return quote!(#kl => Err(::ptec_runtime::Error::WrongTag { index: #kl, expected: ::ptec_runtime::Tag::Tensor, got: value.tag() }),);
            };
            let off = lit(offset);
            // The sizes are checked before their product is taken (sizes
            // within the bound cannot overflow it), and nothing is written
            // until every check has passed: a refused input changes nothing.
            let (sizes_check, sizes_set) = if t.dynamism == Dynamism::Static {
                let s = usize_slice(&t.sizes);
                (
                    quote! { if t.sizes != #s { return Err(::ptec_runtime::Error::WrongSizes { index: #kl }); } },
                    quote!(),
                )
            } else {
                let f = sizes_field(vi);
                let b = usize_slice(&t.sizes);
                (
                    quote! {
                        let bound: &[usize] = #b;
                        if t.sizes.len() != bound.len() || t.sizes.iter().zip(bound).any(|(s, b)| s > b) {
                            return Err(::ptec_runtime::Error::WrongSizes { index: #kl });
                        }
                    },
                    quote!(self.#f.copy_from_slice(t.sizes);),
                )
            };
            let bool_check = if t.dtype == ScalarType::Bool {
                quote!(::ptec_runtime::mem::check_bools(t.data, #kl)?;)
            } else {
                quote!()
            };
            quote! {
                #kl => {
                    let t = match value {
                        ::ptec_runtime::Value::Tensor(t) => t,
                        other => return Err(::ptec_runtime::Error::WrongTag { index: #kl, expected: ::ptec_runtime::Tag::Tensor, got: other.tag() }),
                    };
                    if t.dtype != #dtype {
                        return Err(::ptec_runtime::Error::WrongDtype { index: #kl, expected: #dtype, got: t.dtype });
                    }
                    if t.dim_order != [#(#order),*] {
                        return Err(::ptec_runtime::Error::WrongDimOrder { index: #kl });
                    }
                    #sizes_check
                    let n = t.sizes.iter().product::<usize>() * #es;
                    if t.data.len() != n {
                        return Err(::ptec_runtime::Error::WrongDataLength { index: #kl, expected: n, got: t.data.len() });
                    }
                    #bool_check
                    #sizes_set
                    self.arena.0[#off..#off + n].copy_from_slice(t.data);
                    Ok(())
                }
            }
        }
        v if rt[vi] => {
            let f = scalar_field(vi);
            let (pat, tag) = match v {
                Value::Int(_) => (quote!(::ptec_runtime::Value::Int(x)), quote!(::ptec_runtime::Tag::Int)),
                Value::Double(_) => (
                    quote!(::ptec_runtime::Value::Double(x)),
                    quote!(::ptec_runtime::Tag::Double),
                ),
                _ => (
                    quote!(::ptec_runtime::Value::Bool(x)),
                    quote!(::ptec_runtime::Tag::Bool),
                ),
            };
            quote! {
                #kl => match value {
                    #pat => { self.#f = x; Ok(()) }
                    other => Err(::ptec_runtime::Error::WrongTag { index: #kl, expected: #tag, got: other.tag() }),
                },
            }
        }
        _ => {
            quote!(#kl => match value { ::ptec_runtime::Value::None => Ok(()), other => Err(::ptec_runtime::Error::WrongTag { index: #kl, expected: ::ptec_runtime::Tag::None, got: other.tag() }) },)
        }
    }
}

fn output_arm(m: &Method, layout: &MethodLayout, rt: &[bool], k: usize, vi: usize, ctx: &Ctx<'_>) -> TokenStream {
    let kl = lit(k);
    let v = &m.values[vi];
    match v {
        Value::Tensor(t) => {
            let dtype = dtype_tokens(t.dtype);
            let order = &t.dim_order;
            let sizes = live_sizes(vi, t);
            let n = live_bytes(m, vi, t);
            let data = match layout.homes[vi] {
                Home::Arena { offset } => {
                    let o = lit(offset);
                    quote!(&self.arena.0[#o..#o + #n])
                }
                Home::Data { source, offset } => {
                    let d = ctx.data_expr(source, offset);
                    let o = lit(offset);
                    quote!(&#d[#o..#o + #n])
                }
                Home::None => quote!(&[]),
            };
            quote! {
                #kl => Ok(::ptec_runtime::Value::Tensor(::ptec_runtime::TensorRef {
                    dtype: #dtype,
                    sizes: #sizes,
                    dim_order: &[#(#order),*],
                    data: #data,
                })),
            }
        }
        Value::Int(_) | Value::Double(_) | Value::Bool(_) => {
            let expr = if rt[vi] {
                let f = scalar_field(vi);
                quote!(self.#f)
            } else {
                scalar_lit(v)
            };
            let ctor = match v {
                Value::Int(_) => quote!(Int),
                Value::Double(_) => quote!(Double),
                _ => quote!(Bool),
            };
            quote!(#kl => Ok(::ptec_runtime::Value::#ctor(#expr)),)
        }
        _ => quote!(#kl => Ok(::ptec_runtime::Value::None),),
    }
}

/// The typed function of a method: inputs and outputs as arrays whose dtype
/// and shape rustc checks (`TensorRef` for dynamic and bool tensors).
#[allow(clippy::too_many_arguments)]
fn typed_fn(
    m: &Method,
    layout: &MethodLayout,
    rt: &[bool],
    index: usize,
    mident: &str,
    field: &Ident,
    ctx: &Ctx<'_>,
    shares: bool,
) -> TokenStream {
    let fname = format_ident!("{}", mident);
    let (self_rs_mut, self_rs_ref) = (ctx.self_rs(true, false), ctx.self_rs(false, true));
    let mut params = Vec::new();
    let mut sets = Vec::new();
    for (k, &vi) in m.inputs.iter().enumerate() {
        let p = format_ident!("input{}", k);
        let kl = lit(k);
        match &m.values[vi] {
            Value::Tensor(t) => match (typed_array(t), layout.homes[vi]) {
                (Some(ty), Home::Arena { offset }) => {
                    let (o, n) = (lit(offset), lit(t.nbytes()));
                    params.push(quote!(#p: &#ty));
                    sets.push(
                        quote! { self.#field.arena.0[#o..#o + #n].copy_from_slice(::ptec_runtime::bytes_of(#p)); },
                    );
                }
                _ => {
                    params.push(quote!(#p: ::ptec_runtime::TensorRef<'_>));
                    sets.push(quote! { self.#field.set_input(#kl, ::ptec_runtime::Value::Tensor(#p))?; });
                }
            },
            v if rt[vi] => {
                let ty = scalar_ty(v).expect("scalar");
                let f = scalar_field(vi);
                params.push(quote!(#p: #ty));
                sets.push(quote! { self.#field.#f = #p; });
            }
            _ => {}
        }
    }
    let mut out_tys = Vec::new();
    let mut out_exprs = Vec::new();
    for (k, &vi) in m.outputs.iter().enumerate() {
        let kl = lit(k);
        match &m.values[vi] {
            Value::Tensor(t) => match typed_array(t) {
                Some(ty) => {
                    let n = lit(t.nbytes());
                    let bytes = match layout.homes[vi] {
                        Home::Arena { offset } => {
                            let o = lit(offset);
                            quote!(&self.#field.arena.0[#o..#o + #n])
                        }
                        Home::Data { source, offset } => {
                            let d = ctx.data_expr(source, offset);
                            let o = lit(offset);
                            quote!(&#d[#o..#o + #n])
                        }
                        Home::None => quote!(&[]),
                    };
                    out_tys.push(quote!(&#ty));
                    out_exprs.push(quote!(::ptec_runtime::from_bytes::<#ty>(#bytes)?));
                }
                None => {
                    out_tys.push(quote!(::ptec_runtime::TensorRef<'_>));
                    out_exprs.push(quote! {
                        match self.#field.output(#kl #self_rs_ref)? {
                            ::ptec_runtime::Value::Tensor(t) => t,
                            _ => return Err(::ptec_runtime::Error::NotATensor { index: #kl }),
                        }
                    });
                }
            },
            v @ (Value::Int(_) | Value::Double(_) | Value::Bool(_)) => {
                out_tys.push(scalar_ty(v).expect("scalar"));
                if rt[vi] {
                    let f = scalar_field(vi);
                    out_exprs.push(quote!(self.#field.#f));
                } else {
                    out_exprs.push(scalar_lit(v));
                }
            }
            _ => {
                out_tys.push(quote!(()));
                out_exprs.push(quote!(()));
            }
        }
    }
    let (ret_ty, ret) = if out_tys.len() == 1 {
        (out_tys[0].clone(), out_exprs[0].clone())
    } else {
        (quote!((#(#out_tys),*)), quote!((#(#out_exprs),*)))
    };
    let doc = format!(
        " Runs method `{}` (method {index}): sets the inputs, executes and returns the outputs.",
        m.name
    );
    // Constant outputs read the run-time files through `rs`.
    let bind_rs = if ctx.runtime_files {
        quote!(let rs = &self.rs;)
    } else {
        quote!()
    };
    let takes_mut = !m.instructions.is_empty() || !sets.is_empty() || shares;
    let recv = if takes_mut { quote!(&mut self) } else { quote!(&self) };
    let exec = if m.instructions.is_empty() {
        quote!()
    } else {
        quote!(self.#field.execute(#self_rs_mut)?;)
    };
    let share = if shares {
        let i = lit(index);
        quote!(self.shared_switch(#i);)
    } else {
        quote!()
    };
    quote! {
        #[doc = #doc]
        pub fn #fname(#recv, #(#params),*) -> ::core::result::Result<#ret_ty, ::ptec_runtime::Error> {
            #share
            #(#sets)*
            #exec
            #bind_rs
            Ok(#ret)
        }
    }
}

/// The method state's fields beside its arena (the instruction counter,
/// live sizes, run-time scalars) and the statements that initialise them
/// and the arena (mutable tensors' initial data; what a call writes in
/// place without an initial state, such as a KV cache, zeroed).
fn state_fields(ctx: &Ctx<'_>, m: &Method, layout: &MethodLayout, rt: &[bool]) -> (Vec<TokenStream>, Vec<TokenStream>) {
    // State fields (the arena's size is known once every instruction has
    // said how much scratch it needs).
    let mut fields = vec![quote!(pc: usize)];
    // Not restored by `init` (nor so by `reset`): the generator goes on
    // from call to call until `Model::manual_seed`.
    if ops::random::draws_random(m) {
        fields.push(quote!(rng: ::ptec_runtime::kernels::random::Rng));
    }
    let mut init = Vec::new();
    for (i, v) in m.values.iter().enumerate() {
        if let Value::Tensor(t) = v {
            if t.dynamism != Dynamism::Static {
                let f = sizes_field(i);
                let r = lit(t.sizes.len());
                let bound = usize_slice(&t.sizes);
                fields.push(quote!(#f: [usize; #r]));
                init.push(quote!(self.#f.copy_from_slice(#bound);));
            }
            if let (Placement::Mutable { initial, .. }, Home::Arena { offset }) = (&t.placement, layout.homes[i]) {
                let data = ctx.data_expr(initial.source, initial.offset);
                let (s, e) = (lit(initial.offset), lit(initial.offset + initial.len));
                let (d, de) = (lit(offset), lit(offset + initial.len));
                init.push(quote!(self.arena.0[#d..#de].copy_from_slice(&#data[#s..#e]);));
            }
        }
        if rt[i] {
            let f = scalar_field(i);
            let ty = scalar_ty(v).expect("runtime scalars are scalars");
            let val = scalar_lit(v);
            fields.push(quote!(#f: #ty));
            init.push(quote!(self.#f = #val;));
        }
    }

    // What a call writes in place without an initial state (a KV cache)
    // starts empty again on reset.
    for v in crate::analysis::lives::held(m) {
        let placed =
            matches!(m.values.get(v), Some(Value::Tensor(t)) if matches!(t.placement, Placement::Planned { .. }));
        if let (true, Some((Home::Arena { offset }, n))) = (placed, layout.range(m, v)) {
            let (d, de) = (lit(offset), lit(offset + n));
            init.push(quote!(self.arena.0[#d..#de].fill(0);));
        }
    }
    (fields, init)
}

/// Statements packing the products' constant weights on the first run,
/// with the state fields they need added to `fields`.
fn packing(ctx: &Ctx<'_>, layout: &MethodLayout, folds: &Folds, fields: &mut Vec<TokenStream>) -> Vec<TokenStream> {
    // Without their constants at compile time (external-weights mode),
    // weights are packed on the first run, not at construction: building a
    // program stays free of work proportional to its weights, and reset
    // keeps them.
    let mut packing = Vec::new();
    if folds.packed_len > 0 {
        let n = lit(folds.packed_len);
        fields.push(quote!(packed: ::ptec_runtime::mem::Packed<#n>));
        fields.push(quote!(packed_ready: bool));
        for w in folds.packed() {
            let Home::Data { source, offset } = layout.homes[w.value] else {
                continue;
            };
            let data = ctx.data_expr(source, offset);
            let (off, elements) = (lit(offset), lit(w.k * w.n));
            let (at, end) = (lit(w.offset), lit(w.offset + w.len));
            let (k, n, trans) = (lit(w.k), lit(w.n), w.trans);
            // The view cannot fail (the compiler checked the constant lies
            // in its file); if it did, the product would use `b` unpacked.
            packing.push(quote! {
                if let Ok(b) = ::ptec_runtime::mem::constant::<f32>(&#data, #off, #elements) {
                    ::ptec_runtime::kernels::gemm::pack(b, #k, #n, #trans, &mut self.packed.0[#at..#end]);
                }
            });
        }
    }
    packing
}

/// What the code of one instruction needs of its method.
struct Emit<'a> {
    ctx: &'a Ctx<'a>,
    index: usize,
    m: &'a Method,
    layout: &'a MethodLayout,
    folds: &'a Folds,
    occupancy: &'a Occupancy,
    rt: &'a [bool],
    data_expr: &'a dyn Fn(DataSource, usize) -> TokenStream,
    /// The most scratch bytes an instruction needs, and the most bytes of
    /// one thread's share of the thread scratch (see
    /// `OpCtx::thread_scratch_f32`).
    scratch: std::cell::Cell<usize>,
    thread_share: std::cell::Cell<usize>,
    /// The values each instruction writes, for traced code's outputs.
    written: std::cell::RefCell<std::collections::BTreeMap<usize, Vec<usize>>>,
}

impl Emit<'_> {
    /// The body of instruction `n`'s function (empty for one without code
    /// of its own).
    fn body(&self, n: usize, ins: &Instruction, at: &Location) -> Result<TokenStream, Box<Diagnostic>> {
        let m = self.m;
        let body = match ins {
            Instruction::Kernel { .. } if self.folds.elided(n).is_some() => Ok(quote!()),
            Instruction::Kernel { op, args } => {
                let name = m.operators.get(*op).map(Operator::full_name).unwrap_or_default();
                match ops::lookup(&name) {
                    None => Err(Diagnostic::new(
                        ErrorKind::UnsupportedOperator { name: name.clone() },
                        at.clone(),
                    )),
                    Some(emit) => {
                        let mut oc = OpCtx::new(
                            m,
                            self.layout,
                            n,
                            name.clone(),
                            args,
                            self.data_expr,
                            self.rt,
                            self.folds,
                            self.occupancy,
                            self.ctx.prepared.as_ref(),
                        );
                        let r = emit(&mut oc).and_then(|body| oc.check_overlaps().map(|_| body));
                        self.written.borrow_mut().insert(n, oc.written());
                        self.scratch.set(self.scratch.get().max(oc.scratch_bytes));
                        self.thread_share
                            .set(self.thread_share.get().max(oc.thread_share_bytes));
                        r.map_err(|detail| {
                            Diagnostic::new(
                                ErrorKind::BadArguments {
                                    operator: name.clone(),
                                    detail,
                                },
                                at.clone(),
                            )
                        })
                    }
                }
            }
            Instruction::Delegate { delegate, args } => {
                // ExecuTorch logs every argument of a delegate call: which
                // are outputs is the backend's business.
                self.written.borrow_mut().insert(n, args.clone());
                delegate_body(self.ctx, self.index, m, self.layout, self.rt, n, *delegate, args)
                    .map_err(|d| Diagnostic::new(ErrorKind::Unsupported { detail: d }, at.clone()))
            }
            Instruction::Move { from, to } => move_body(m, self.layout, self.rt, *from, *to, self.data_expr)
                .map_err(|d| Diagnostic::new(ErrorKind::Unsupported { detail: d }, at.clone())),
            Instruction::JumpFalse { .. } | Instruction::Free { .. } => Ok(quote!()),
        };
        body.map_err(Box::new)
    }
}

/// The doc lines of instruction `n`'s function: what it is, where in the
/// model's source, and what was folded into it.
fn instruction_doc(
    m: &Method,
    n: usize,
    ins: &Instruction,
    folded_into: &std::collections::BTreeMap<usize, Vec<usize>>,
) -> Vec<String> {
    let mut doc = vec![format!(" Instruction {n}: {}", describe(m, ins))];
    if let Some(frames) = m.stacktraces.as_ref().and_then(|s| s.get(n)) {
        if let Some(f) = frames.first() {
            doc.push(format!(
                " at {}:{} in {}: {}",
                f.filename,
                f.lineno,
                f.name,
                f.context.trim()
            ));
        }
    }
    for folded in folded_into.get(&n).into_iter().flatten() {
        doc.push(format!(" Also does instruction {folded}, which ptec folded into it."));
    }
    doc
}
