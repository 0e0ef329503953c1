//! Reads `.ptd` external tensor data files.
use crate::error::{ErrorKind, Errors, Location, Result};
use crate::ir::{DataRef, DataSource, ExternalFile, ExternalTensor, ScalarType};
use crate::read::container::ptd_layout;
use crate::read::program::verifier_options;
use ptec_schema::flat_tensor as fb;

/// Reads a `.ptd` file; its data is addressed as [`DataSource::External`]
/// `index`.
pub fn read_ptd(bytes: &[u8], index: usize) -> Result<ExternalFile> {
    let layout = ptd_layout(bytes)?;
    let root = flatbuffers::root_with_opts::<fb::FlatTensor>(&verifier_options(), &bytes[..layout.flatbuffer_end])
        .map_err(|e| {
            Errors::one(
                ErrorKind::Flatbuffer {
                    what: "tensor data",
                    detail: e.to_string(),
                },
                Location::at_offset(0),
            )
        })?;
    let mut segments = Vec::new();
    let mut errors = Vec::new();
    for s in root.segments().iter().flat_map(|v| v.iter()) {
        let start = (layout.segment_base as u64).checked_add(s.offset());
        let end = start.and_then(|st| st.checked_add(s.size_()));
        let limit = (layout.segment_base + layout.segment_data_size) as u64;
        match (start, end) {
            (Some(st), Some(e)) if e <= limit => segments.push(Some(DataRef {
                source: DataSource::External(index),
                offset: st as usize,
                len: s.size_() as usize,
            })),
            _ => {
                errors.push(crate::error::Diagnostic::new(
                    // Offset and limit both count from the segment data's
                    // start (the location).
                    ErrorKind::OutsideData {
                        what: "tensor data segment",
                        offset: s.offset(),
                        len: s.size_(),
                        limit: layout.segment_data_size as u64,
                    },
                    Location::at_offset(layout.segment_base),
                ));
                segments.push(None);
            }
        }
    }
    let mut tensors = Vec::new();
    for nd in root.named_data().iter().flat_map(|v| v.iter()) {
        let key = nd.key().unwrap_or("").to_string();
        let seg = nd.segment_index() as usize;
        let Some(Some(data)) = segments.get(seg).copied() else {
            errors.push(crate::error::Diagnostic::new(
                ErrorKind::IndexOutOfRange {
                    what: "tensor data segment",
                    index: seg as i64,
                    len: segments.len(),
                },
                Location::default(),
            ));
            continue;
        };
        let layout = nd.tensor_layout();
        tensors.push(ExternalTensor {
            key,
            dtype: layout.and_then(|l| ScalarType::from_code(l.scalar_type().0)),
            sizes: layout
                .and_then(|l| l.sizes())
                .map(|v| v.iter().map(|s| s as i64).collect())
                .unwrap_or_default(),
            dim_order: layout
                .and_then(|l| l.dim_order())
                .map(|v| v.bytes().to_vec())
                .unwrap_or_default(),
            data,
        });
    }
    if errors.is_empty() {
        Ok(ExternalFile { tensors })
    } else {
        Err(Errors(errors))
    }
}
