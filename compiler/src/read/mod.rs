//! Reading any file ptec accepts into the IR: the first stage.
//!
//! [`container`] finds what a file is and where its parts are; [`program`]
//! reads a program's flatbuffer, [`bundle`] a bundle's test cases, [`ptd`]
//! a `.ptd` file's tensors, [`xnnpack`] an XNNPACK delegate's blob. [`parse`] does all that; the driver verifies
//! the result next.
pub(crate) mod bundle;
pub(crate) mod container;
pub(crate) mod program;
pub(crate) mod ptd;
pub(crate) mod xnnpack;

use crate::error::Result;
use crate::ir::*;
use crate::read::bundle::{read_bp04, read_bp08};
use crate::read::container::detect;
use crate::read::program::read_program;
use crate::read::ptd::read_ptd;

/// A file, read.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// What kind of file it is.
    pub kind: FileKind,
    /// The program (of a `.pte` or a bundle).
    pub program: Option<Program>,
    /// Test suites of a bundle.
    pub suites: Vec<TestSuite>,
    /// The tensors of a `.ptd` file.
    pub tensor_data: Option<ExternalFile>,
}

/// Reads `bytes` (a `.pte`, `.bp`, `.bpte` or `.ptd`), resolving external
/// tensors against the `.ptd` files in `data_files`. The program is not
/// verified yet: see `crate::load`.
pub fn parse(bytes: &[u8], data_files: &[&[u8]]) -> Result<Loaded> {
    let kind = detect(bytes)?;
    let external = data_files
        .iter()
        .enumerate()
        .map(|(i, b)| read_ptd(b, i))
        .collect::<Result<Vec<_>>>()?;
    let (program, suites, tensor_data) = match kind {
        FileKind::Program { .. } => (Some(read_program(bytes, 0, bytes.len(), &external)?), Vec::new(), None),
        FileKind::BundleBp08 => {
            let b = read_bp08(bytes, &external)?;
            (Some(b.program), b.suites, None)
        }
        FileKind::BundleBp04 => {
            let b = read_bp04(bytes, &external)?;
            (Some(b.program), b.suites, None)
        }
        FileKind::TensorData => (None, Vec::new(), Some(read_ptd(bytes, 0)?)),
    };
    Ok(Loaded {
        kind,
        program,
        suites,
        tensor_data,
    })
}
