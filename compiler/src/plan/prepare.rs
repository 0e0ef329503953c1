//! Work on constants done at compile time: the prepared filters of NHWC
//! convolutions (rearranged, batch norm folded in) and the packed weights
//! of matrix products.
//!
//! ptec's kernels keep such data in a "kept" tensor, prepared by the first
//! run. When every constant it is made from is embedded in the program, the
//! compiler prepares it instead, with the kernels' own functions, and the
//! program embeds the result with its other constants ([`DataSource::Embedded`]):
//! the kept tensor then takes no memory in the method's state, no run pays
//! for the preparation, and the weights it was made from stay out of the
//! binary (see `plan::compact`).
//! In external-weights mode the weights are not known to the binary, and
//! the first run prepares them as before.
use crate::ir::*;
use crate::names::{
    conv2d_nhwc, folded, fully_connected, qd8_fully_connected, qd8_fully_connected_shared, qs8, CONV2D_FOLDED_CHAIN,
};
use crate::read::Files;
use std::cell::RefCell;
use std::collections::BTreeSet;

/// Arguments of one folded convolution after its input, as a chain repeats
/// them.
const FOLDED_ARGS: usize = folded::OUT - folded::WEIGHT;

/// Where the constants a kept tensor is prepared from sit among a call's
/// arguments: `(kept, sources)`. Optional ones may be `None` values.
pub(crate) fn kept_arguments(name: &str, n_args: usize) -> Vec<(usize, Vec<usize>)> {
    let folded_at = |first: usize| {
        let at = |field: usize| first + field - folded::WEIGHT;
        let sources = [
            folded::WEIGHT,
            folded::BIAS,
            folded::BN_WEIGHT,
            folded::BN_BIAS,
            folded::MEAN,
            folded::VAR,
        ];
        (at(folded::KEPT), sources.iter().map(|&f| at(f)).collect())
    };
    match name {
        folded::NAME => vec![folded_at(folded::WEIGHT)],
        CONV2D_FOLDED_CHAIN => {
            let stages = n_args.saturating_sub(2) / FOLDED_ARGS;
            (0..stages).map(|i| folded_at(1 + i * FOLDED_ARGS)).collect()
        }
        fully_connected::NAME => vec![(fully_connected::KEPT, vec![fully_connected::WEIGHT])],
        conv2d_nhwc::NAME => vec![(conv2d_nhwc::KEPT, vec![conv2d_nhwc::WEIGHT])],
        qd8_fully_connected::NAME | qd8_fully_connected_shared::NAME => vec![(
            qd8_fully_connected::KEPT,
            vec![qd8_fully_connected::WEIGHT, qd8_fully_connected::SCALES],
        )],
        qs8::CONV2D_NHWC => vec![(qs8::CONV_KEPT, vec![qs8::CONV_WEIGHT])],
        qs8::CHAIN => {
            // A stage's arguments are a convolution's from its weight on.
            let stages = n_args.saturating_sub(2) / qs8::CHAIN_STAGE_ARGS;
            let at = |i: usize, arg: usize| 1 + i * qs8::CHAIN_STAGE_ARGS + arg - qs8::CONV_WEIGHT;
            (0..stages)
                .map(|i| (at(i, qs8::CONV_KEPT), vec![at(i, qs8::CONV_WEIGHT)]))
                .collect()
        }
        qs8::FULLY_CONNECTED => vec![(qs8::FC_KEPT, vec![qs8::FC_WEIGHT])],
        _ => Vec::new(),
    }
}

/// Whether the code of a call of `name` reads the constants its kept tensor
/// is prepared from even when the compiler prepared it: a
/// `qd8_fully_connected`'s names its weight and scales whatever its kept
/// packing; the others read only the preparation.
pub(crate) fn reads_sources_when_prepared(name: &str) -> bool {
    name == qd8_fully_connected::NAME || name == qd8_fully_connected_shared::NAME
}

/// Whether value `v` is absent or a constant whose bytes the compiler has.
fn known_constant_or_none(m: &Method, v: usize) -> bool {
    match m.values.get(v) {
        Some(Value::Null) => true,
        Some(Value::Tensor(t)) => matches!(
            t.placement,
            Placement::Constant { .. } | Placement::External { data: Some(_), .. }
        ),
        _ => false,
    }
}

/// The kept tensors of `m` the compiler prepares: those whose constants
/// are all known (each is an unplanned or added-buffer tensor of one call).
pub fn prepared_at_compile_time(m: &Method) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    for ins in &m.instructions {
        let Some((name, args)) = kernel_name(m, ins) else {
            continue;
        };
        for (kept, sources) in kept_arguments(&name, args.len()) {
            let Some(&k) = args.get(kept) else { continue };
            let is_tensor = matches!(m.values.get(k), Some(Value::Tensor(_)));
            let known = sources
                .iter()
                .all(|&s| args.get(s).is_some_and(|&v| known_constant_or_none(m, v)));
            if is_tensor && known {
                out.insert(k);
            }
        }
    }
    out
}

/// The bytes of the constants a program embeds (see
/// [`DataSource::Embedded`]), to which the prepared constants are appended
/// as its instructions are generated.
pub struct PreparedData<'a> {
    /// The files the program was read from.
    files: Files<'a>,
    /// The bytes of [`DataSource::PrepareOnly`].
    prepare_only: Vec<u8>,
    bytes: RefCell<Vec<u8>>,
    /// How many leading bytes of `bytes` are the files' (the rest were
    /// prepared).
    files_len: usize,
}

/// Each prepared constant starts on a cache line.
const ALIGN: usize = 64;

impl<'a> PreparedData<'a> {
    /// The constants of a program's files as read, for the planning that
    /// prepares from them.
    pub fn new(files: Files<'a>) -> Self {
        PreparedData {
            files,
            prepare_only: Vec::new(),
            bytes: RefCell::new(Vec::new()),
            files_len: 0,
        }
    }

    /// For a compacted program (see `plan::compact`): the prepared
    /// constants follow the bytes it embeds.
    pub fn compacted(embedded: Vec<u8>, prepare_only: Vec<u8>) -> Self {
        PreparedData {
            files: Files::default(),
            prepare_only,
            files_len: embedded.len(),
            bytes: RefCell::new(embedded),
        }
    }

    /// `len` little-endian `f32`s of a source from byte `offset`.
    pub fn read_f32(&self, source: DataSource, offset: usize, len: usize) -> Result<Vec<f32>, String> {
        let bytes = self.read_bytes(source, offset, len.saturating_mul(4))?;
        Ok(bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    /// `len` bytes of a source from byte `offset`.
    pub fn read_bytes(&self, source: DataSource, offset: usize, len: usize) -> Result<Vec<u8>, String> {
        let embedded = self.bytes.borrow();
        let file = match source {
            DataSource::Embedded => &embedded[..],
            DataSource::PrepareOnly => &self.prepare_only[..],
            _ => self.files.bytes(source),
        };
        offset
            .checked_add(len)
            .and_then(|end| file.get(offset..end))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| format!("{len} bytes at byte {offset} lie outside their file"))
    }

    /// Appends `floats` (little-endian); returns their byte offset in
    /// [`DataSource::Embedded`].
    pub fn push(&self, floats: &[f32]) -> usize {
        let mut bytes = self.bytes.borrow_mut();
        let start = bytes.len().next_multiple_of(ALIGN);
        bytes.resize(start, 0);
        let offset = bytes.len();
        bytes.extend(floats.iter().flat_map(|f| f.to_le_bytes()));
        offset
    }

    /// How many leading bytes are the files' bytes the code reads.
    pub fn files_len(&self) -> usize {
        self.files_len
    }

    /// The bytes embedded so far, taken out.
    pub fn take_bytes(&self) -> Vec<u8> {
        std::mem::take(&mut *self.bytes.borrow_mut())
    }
}
