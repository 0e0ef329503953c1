//! Reading any file ptec accepts into the IR: the first stage.
//!
//! [`container`] finds what a file is and where its parts are; [`program`]
//! reads a program's flatbuffer, [`bundle`] a bundle's test cases, [`ptd`]
//! a `.ptd` file's tensors, [`xnnpack`] the subgraph in the blob of each
//! XNNPACK delegate call. [`parse`] does all that; the driver verifies the
//! result next. No later stage parses a file's bytes.
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

/// A file, read: the IR, the subgraphs of its XNNPACK delegate calls, and
/// the bytes of the files its data references point into, which later
/// stages read through it rather than being handed the files.
#[derive(Clone, Debug)]
pub struct Loaded<'a> {
    /// What kind of file it is.
    pub kind: FileKind,
    /// The program (of a `.pte` or a bundle).
    pub program: Option<Program>,
    /// Test suites of a bundle.
    pub suites: Vec<TestSuite>,
    /// The tensors of a `.ptd` file.
    pub tensor_data: Option<ExternalFile>,
    /// The files' bytes, by [`DataSource`].
    pub files: Files<'a>,
    /// The subgraph of each XNNPACK delegate call of the program (or why
    /// its blob could not be read), for the lowering.
    pub(crate) xnnpack: xnnpack::Graphs,
    /// The mutable state its methods share, found once the program is
    /// verified and before the passes change it ([`crate::load`]).
    pub(crate) shared: Option<crate::analysis::shared::SharedState>,
}

impl Loaded<'_> {
    /// The same, its program's data read from `program` instead (a file
    /// that holds the same bytes where the IR points, and maybe more).
    pub fn with_program_file<'b>(self, program: &'b [u8]) -> Loaded<'b>
    where
        Self: 'b,
    {
        Loaded {
            kind: self.kind,
            program: self.program,
            suites: self.suites,
            tensor_data: self.tensor_data,
            files: Files {
                program,
                data: self.files.data,
            },
            xnnpack: self.xnnpack,
            shared: self.shared,
        }
    }

    /// Reads the blobs of the program's XNNPACK delegate calls again, after
    /// its delegates changed (the fuzz targets and tests point them at
    /// other bytes).
    pub fn read_delegates(&mut self) {
        self.xnnpack = read_delegates(self.program.as_ref(), self.files.program);
    }
}

/// The subgraphs of `program`'s XNNPACK delegate calls, their blobs read
/// from `file`, the program's file.
fn read_delegates(program: Option<&Program>, file: &[u8]) -> xnnpack::Graphs {
    program.map(|p| xnnpack::Graphs::read(p, file)).unwrap_or_default()
}

/// The bytes of the files a program was read from: the program's, then
/// the `.ptd` files' (and a bundle of test cases embedded after them). The
/// IR's data references ([`DataRef`]) are byte ranges of these, and the
/// generated code names the files with their lengths and hashes.
#[derive(Clone, Debug, Default)]
pub struct Files<'a> {
    program: &'a [u8],
    data: Vec<&'a [u8]>,
}

impl<'a> Files<'a> {
    /// The program's bytes and the `.ptd` files', in order.
    pub fn new(program: &'a [u8], data: &[&'a [u8]]) -> Self {
        Files {
            program,
            data: data.to_vec(),
        }
    }

    /// The bytes of a file (none for the blocks the compiler makes, which
    /// are not such files).
    pub fn bytes(&self, source: DataSource) -> &'a [u8] {
        match source {
            DataSource::Program => self.program,
            DataSource::External(k) => self.data.get(k).copied().unwrap_or(&[]),
            DataSource::Embedded | DataSource::PrepareOnly => &[],
        }
    }

    /// How many data files follow the program.
    pub fn data_files(&self) -> usize {
        self.data.len()
    }

    /// Adds a data file, `DataSource::External(n)` for the `n` returned.
    pub fn add_data(&mut self, bytes: &'a [u8]) -> usize {
        self.data.push(bytes);
        self.data.len() - 1
    }
}

/// Reads `bytes` (a `.pte`, `.bp`, `.bpte` or `.ptd`), resolving external
/// tensors against the `.ptd` files in `data_files`. The program is not
/// verified yet: see `crate::load`.
pub fn parse<'a>(bytes: &'a [u8], data_files: &[&'a [u8]]) -> Result<Loaded<'a>> {
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
        xnnpack: read_delegates(program.as_ref(), bytes),
        kind,
        program,
        suites,
        tensor_data,
        files: Files::new(bytes, data_files),
        shared: None,
    })
}
