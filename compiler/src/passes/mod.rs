//! The IR-to-IR passes, in the order [`transform`] runs them. Each leaves
//! a program that verifies, and the driver checks that it does.
//!
//! 1. [`xnnpack`]: XNNPACK delegate calls become kernel calls;
//! 2. [`channels_last`]: convolution regions run on NHWC images, with
//!    batch norms and clamps folded into the convolutions;
//! 3. [`conv_chains`]: residual adds fold into the convolution before them,
//!    then the clamps after those adds and activations after convolutions,
//!    and runs of 1×1 convolutions become one chained call;
//! 4. [`qs8_chains`]: int8 inverted residual blocks of the XNNPACK
//!    lowering become one call run band by band;
//! 5. [`qs8_lut`]: an int8 value dequantized, through hardswish and
//!    quantized again becomes one lookup in a table;
//! 6. [`swish`]: `x · sigmoid(x)` in two instructions becomes one call;
//! 7. [`shared_rows`]: dynamically quantized layers on one input quantize
//!    its rows once;
//! 8. [`gathers`]: chains of views and permutations become one copy of
//!    each result they leave.
//!
//! The tensors the passes add have no bytes yet: the next stage, `plan`,
//! gives them some.
pub(crate) mod channels_last;
pub(crate) mod conv_chains;
pub(crate) mod gathers;
pub(crate) mod qs8_chains;
pub(crate) mod qs8_lut;
pub(crate) mod rewrite;
pub(crate) mod shared_rows;
pub(crate) mod swish;
pub mod xnnpack;

use crate::error::Result;
use crate::ir::{Program, TestSuite};
use crate::options::Options;
use crate::read::Loaded;
use crate::verify::verify_program;

/// Runs the passes `options` ask for on a loaded program (see the module
/// docs); a `.ptd` file, which holds no program, is left as it is.
pub fn transform(loaded: &mut Loaded<'_>, options: &Options) -> Result<()> {
    lower_delegates(loaded, options)?;
    let algorithm = options.algorithm();
    let Some(program) = loaded.program.as_mut() else {
        return Ok(());
    };
    let suites = &loaded.suites;
    if options.channels_last {
        let before = program.methods.clone();
        each_method(program, suites, |m| channels_last::convert_method(m, algorithm))?;
        each_method(program, suites, conv_chains::fuse_residual_adds)?;
        each_method(program, suites, conv_chains::fuse_clamps)?;
        each_method(program, suites, conv_chains::fuse_activations)?;
        each_method(program, suites, conv_chains::fuse_chains)?;
        // No value another reads through shared bytes may change layout.
        for (old, new) in before.iter().zip(&program.methods) {
            crate::analysis::alias::check_relaid(old, new)?;
        }
    }
    each_method(program, suites, qs8_chains::fuse_chains)?;
    each_method(program, suites, qs8_lut::fuse_tables)?;
    each_method(program, suites, swish::fuse_sigmoid_mul)?;
    each_method(program, suites, shared_rows::share_quantized_rows)?;
    each_method(program, suites, gathers::compose_moves)?;
    Ok(())
}

/// Compiles the delegate calls ptec knows how to compile into kernel
/// calls: those of the XNNPACK backend when `options` lower them
/// ([`Options::lower_xnnpack`]).
pub fn lower_delegates(loaded: &mut Loaded<'_>, options: &Options) -> Result<()> {
    let Some(program) = loaded.program.as_mut() else {
        return Ok(());
    };
    if options.lower_xnnpack {
        let algorithm = options.algorithm();
        // The lowering consumes the subgraphs: the calls it leaves are
        // numbered anew.
        xnnpack::lower_xnnpack_delegates(program, std::mem::take(&mut loaded.xnnpack), algorithm)?;
        verify_program(program, &loaded.suites)?;
    }
    Ok(())
}

/// Runs a method pass over every method, then verifies the program.
fn each_method(program: &mut Program, suites: &[TestSuite], pass: impl FnMut(&mut crate::ir::Method)) -> Result<()> {
    program.methods.iter_mut().for_each(pass);
    verify_program(program, suites)
}
