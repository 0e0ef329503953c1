//! Reading any file ptec accepts: the entry point of the front ends.
use crate::bundle::{read_bp04, read_bp08};
use crate::container::detect;
use crate::error::Result;
use crate::ir::*;
use crate::ptd::read_ptd;
use crate::reader::read_program;
use crate::verify::verify_program;

/// A file, read and verified.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub kind: FileKind,
    /// The program (of a `.pte` or a bundle).
    pub program: Option<Program>,
    /// Test suites of a bundle.
    pub suites: Vec<TestSuite>,
    /// The tensors of a `.ptd` file.
    pub tensor_data: Option<ExternalFile>,
}

/// Reads and verifies `bytes` (a `.pte`, `.bp`, `.bpte` or `.ptd`), resolving
/// external tensors against the `.ptd` files in `data_files`.
pub fn load(bytes: &[u8], data_files: &[&[u8]]) -> Result<Loaded> {
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
    if let Some(p) = &program {
        verify_program(p, &suites)?;
    }
    Ok(Loaded {
        kind,
        program,
        suites,
        tensor_data,
    })
}
