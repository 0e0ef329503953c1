//! File kinds and the headers around the flatbuffers: what a file is, where
//! its flatbuffer ends and its segments begin.
use crate::error::{ErrorKind, Errors, Location, Result};
use crate::ir::FileKind;

/// Byte `at..at+4` as a little-endian u32, if present.
pub(crate) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// Byte `at..at+8` as a little-endian u64, if present.
pub(crate) fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// Recognises what a file is from its first bytes.
pub fn detect(bytes: &[u8]) -> Result<FileKind> {
    if bytes.is_empty() {
        return Err(Errors::one(ErrorKind::Empty, Location::default()));
    }
    let magic = bytes.get(4..8);
    match magic {
        Some(b"ET12") => {
            let ext = match bytes.get(8..10) {
                Some(b"eh") => Some(u32_at(bytes, 12).unwrap_or(0)),
                _ => None,
            };
            return Ok(FileKind::Program { extended_header: ext });
        }
        Some(b"BP08") => return Ok(FileKind::BundleBp08),
        Some(b"BP04") => return Ok(FileKind::BundleBp04),
        Some(b"FT01") => return Ok(FileKind::TensorData),
        Some(m) if m[0] == b'E' && m[1] == b'T' && m[2].is_ascii_digit() && m[3].is_ascii_digit() => {
            return Err(Errors::one(
                ErrorKind::BadHeader {
                    what: format!(
                        "program format `{}` is not supported (ptec reads ET12)",
                        String::from_utf8_lossy(m)
                    ),
                },
                Location::at_offset(4),
            ))
        }
        Some(m) if m[0] == b'B' && m[1] == b'P' && m[2].is_ascii_digit() && m[3].is_ascii_digit() => {
            return Err(Errors::one(
                ErrorKind::BadHeader {
                    what: format!(
                        "bundled program format `{}` is not supported (ptec reads BP04 and BP08)",
                        String::from_utf8_lossy(m)
                    ),
                },
                Location::at_offset(4),
            ))
        }
        _ => {}
    }
    if bytes.len() < 8 {
        return Err(Errors::one(
            ErrorKind::Truncated {
                what: "file identifier",
                needed: 8,
                available: bytes.len() as u64,
            },
            Location::at_offset(0),
        ));
    }
    Err(Errors::one(
        ErrorKind::NotExecuTorch {
            looks_like: looks_like(bytes),
        },
        Location::default(),
    ))
}

/// Names a few well-known non-ExecuTorch formats.
fn looks_like(b: &[u8]) -> Option<&'static str> {
    let at4 = b.get(4..8);
    let starts = |p: &[u8]| b.starts_with(p);
    if at4 == Some(b"IREE") {
        Some("an IREE VM module (.vmfb)")
    } else if at4 == Some(b"TFL3") {
        Some("a TensorFlow Lite model (.tflite)")
    } else if starts(b"PK\x03\x04") {
        Some("a zip archive (a PyTorch .pt checkpoint, or an IREE .vmfb archive)")
    } else if starts(b"\x7fELF") {
        Some("an ELF executable or library")
    } else if starts(b"GGUF") {
        Some("a GGUF model")
    } else if starts(b"\x93NUMPY") {
        Some("a NumPy array (.npy)")
    } else if starts(b"\x89PNG") {
        Some("a PNG image")
    } else if starts(b"\x89HDF") {
        Some("an HDF5 file")
    } else if starts(b"\x1f\x8b") {
        Some("a gzip archive")
    } else if b.len() >= 10 && b[8] == b'{' && b[9] == b'"' {
        Some("a safetensors file")
    } else if starts(b"{") || starts(b"[") {
        Some("a JSON document")
    } else if b.get(4..6) == Some(b"ET") {
        Some("an ExecuTorch program of an unknown format version")
    } else {
        None
    }
}

/// The parts of a `.pte`: where its flatbuffer ends and its segments are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PteLayout {
    /// Bytes of the flatbuffer (including the headers), from offset 0.
    pub program_size: usize,
    /// Offset of the first segment from the start of the program, or `None`
    /// when the program has no extended header (and so no segments).
    pub segment_base: Option<usize>,
    /// Length of the `eh00` header, when there is one.
    pub extended_header: Option<u32>,
}

/// Parses the headers of a `.pte` held in `b` (a whole file, or a program
/// embedded in a bundle at byte `base` of the file, for locations).
pub fn pte_layout(b: &[u8], base: usize) -> Result<PteLayout> {
    let err = |kind: ErrorKind, at: usize| Errors::one(kind, Location::at_offset(base + at));
    if b.len() < 8 {
        return Err(err(
            ErrorKind::Truncated {
                what: "program header",
                needed: 8,
                available: b.len() as u64,
            },
            0,
        ));
    }
    if &b[4..8] != b"ET12" {
        return Err(err(
            ErrorKind::BadHeader {
                what: format!(
                    "program identifier is {:?}, not ET12",
                    String::from_utf8_lossy(&b[4..8])
                ),
            },
            4,
        ));
    }
    if b.get(8..10) != Some(b"eh") {
        return Ok(PteLayout {
            program_size: b.len(),
            segment_base: None,
            extended_header: None,
        });
    }
    if b.get(8..12) != Some(b"eh00") {
        return Err(err(
            ErrorKind::BadHeader {
                what: format!(
                    "extended header version {:?} is not supported (ptec reads eh00)",
                    String::from_utf8_lossy(b.get(8..12).unwrap_or(&b[8..]))
                ),
            },
            8,
        ));
    }
    let len = u32_at(b, 12).ok_or_else(|| {
        err(
            ErrorKind::Truncated {
                what: "extended header",
                needed: 16,
                available: b.len() as u64,
            },
            12,
        )
    })?;
    if len < 24 {
        return Err(err(
            ErrorKind::BadHeader {
                what: format!("extended header length {len} is below 24"),
            },
            12,
        ));
    }
    let header_end = 8u64 + len as u64;
    if (b.len() as u64) < header_end {
        return Err(err(
            ErrorKind::Truncated {
                what: "extended header",
                needed: header_end,
                available: b.len() as u64,
            },
            8,
        ));
    }
    let program_size = u64_at(b, 16).unwrap_or(0);
    let segment_base = u64_at(b, 24).unwrap_or(0);
    let segment_data_size = if len >= 32 { u64_at(b, 32) } else { None };
    let file_len = b.len() as u64;
    if program_size < header_end || program_size > file_len {
        return Err(err(
            if program_size > file_len {
                ErrorKind::Truncated {
                    what: "program flatbuffer",
                    needed: program_size,
                    available: file_len,
                }
            } else {
                ErrorKind::BadHeader {
                    what: format!("program size {program_size} is smaller than the headers"),
                }
            },
            16,
        ));
    }
    if segment_base != 0 && segment_base < program_size {
        return Err(err(
            ErrorKind::BadHeader {
                what: format!("segment base offset {segment_base} lies inside the program data ({program_size} bytes)"),
            },
            24,
        ));
    }
    if let Some(size) = segment_data_size {
        let end = segment_base.checked_add(size).ok_or_else(|| {
            err(
                ErrorKind::BadHeader {
                    what: "segment data size overflows".into(),
                },
                32,
            )
        })?;
        if end > file_len {
            return Err(err(
                ErrorKind::Truncated {
                    what: "segment data",
                    needed: end,
                    available: file_len,
                },
                32,
            ));
        }
    }
    Ok(PteLayout {
        program_size: program_size as usize,
        segment_base: (segment_base != 0 || segment_data_size.is_some()).then_some(segment_base as usize),
        extended_header: Some(len),
    })
}

/// The parts of a `.ptd`: its flatbuffer and segment base.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PtdLayout {
    /// End of the flatbuffer (offset + size), from the start of the file.
    pub flatbuffer_end: usize,
    pub segment_base: usize,
    pub segment_data_size: usize,
}

/// Parses the `FH01` header of a `.ptd` file.
pub fn ptd_layout(b: &[u8]) -> Result<PtdLayout> {
    let err = |kind: ErrorKind, at: usize| Errors::one(kind, Location::at_offset(at));
    if b.get(4..8) != Some(b"FT01") {
        return Err(err(
            ErrorKind::BadHeader {
                what: "tensor data identifier is not FT01".into(),
            },
            4,
        ));
    }
    if b.get(8..12) != Some(b"FH01") {
        return Err(err(
            ErrorKind::BadHeader {
                what: "tensor data header magic is not FH01".into(),
            },
            8,
        ));
    }
    let len = u32_at(b, 12).unwrap_or(0) as u64;
    if len < 40 {
        return Err(err(
            ErrorKind::BadHeader {
                what: format!("tensor data header length {len} is below 40"),
            },
            12,
        ));
    }
    let file_len = b.len() as u64;
    if file_len < 8 + len {
        return Err(err(
            ErrorKind::Truncated {
                what: "tensor data header",
                needed: 8 + len,
                available: file_len,
            },
            8,
        ));
    }
    let fb_offset = u64_at(b, 16).unwrap_or(0);
    let fb_size = u64_at(b, 24).unwrap_or(0);
    let seg_base = u64_at(b, 32).unwrap_or(0);
    let seg_size = u64_at(b, 40).unwrap_or(0);
    let fb_end = fb_offset.checked_add(fb_size).ok_or_else(|| {
        err(
            ErrorKind::BadHeader {
                what: "flatbuffer size overflows".into(),
            },
            24,
        )
    })?;
    if fb_end > file_len {
        return Err(err(
            ErrorKind::Truncated {
                what: "tensor data flatbuffer",
                needed: fb_end,
                available: file_len,
            },
            24,
        ));
    }
    let seg_end = seg_base.checked_add(seg_size).ok_or_else(|| {
        err(
            ErrorKind::BadHeader {
                what: "segment data size overflows".into(),
            },
            40,
        )
    })?;
    if seg_end > file_len {
        return Err(err(
            ErrorKind::Truncated {
                what: "tensor data segments",
                needed: seg_end,
                available: file_len,
            },
            40,
        ));
    }
    Ok(PtdLayout {
        flatbuffer_end: fb_end as usize,
        segment_base: seg_base as usize,
        segment_data_size: seg_size as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(len: u32, program_size: u64, seg_base: u64, seg_size: Option<u64>) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[0..4].copy_from_slice(&40u32.to_le_bytes());
        b[4..8].copy_from_slice(b"ET12");
        b[8..12].copy_from_slice(b"eh00");
        b[12..16].copy_from_slice(&len.to_le_bytes());
        b[16..24].copy_from_slice(&program_size.to_le_bytes());
        b[24..32].copy_from_slice(&seg_base.to_le_bytes());
        if let Some(s) = seg_size {
            b[32..40].copy_from_slice(&s.to_le_bytes());
        }
        b
    }

    #[test]
    fn both_extended_header_lengths() {
        let b = header(24, 48, 48, None);
        assert_eq!(
            pte_layout(&b, 0).unwrap(),
            PteLayout {
                program_size: 48,
                segment_base: Some(48),
                extended_header: Some(24)
            }
        );
        let b = header(32, 48, 56, Some(8));
        assert_eq!(
            pte_layout(&b, 0).unwrap(),
            PteLayout {
                program_size: 48,
                segment_base: Some(56),
                extended_header: Some(32)
            }
        );
    }

    #[test]
    fn segment_data_past_the_end_is_truncation() {
        let b = header(32, 48, 56, Some(100));
        let e = pte_layout(&b, 0).unwrap_err();
        assert!(
            matches!(
                e.first().kind,
                ErrorKind::Truncated {
                    what: "segment data",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn short_extended_header_rejected() {
        let b = header(16, 48, 48, None);
        assert!(matches!(
            pte_layout(&b, 0).unwrap_err().first().kind,
            ErrorKind::BadHeader { .. }
        ));
    }

    #[test]
    fn recognises_other_formats() {
        let mut tfl = vec![0u8; 16];
        tfl[4..8].copy_from_slice(b"TFL3");
        let e = detect(&tfl).unwrap_err();
        assert_eq!(
            e.first().kind,
            ErrorKind::NotExecuTorch {
                looks_like: Some("a TensorFlow Lite model (.tflite)")
            }
        );
        let mut iree = vec![0u8; 16];
        iree[4..8].copy_from_slice(b"IREE");
        assert!(detect(&iree).unwrap_err().to_string().contains("IREE"));
        assert_eq!(detect(&[]).unwrap_err().first().kind, ErrorKind::Empty);
        assert!(matches!(
            detect(b"abc").unwrap_err().first().kind,
            ErrorKind::Truncated { .. }
        ));
        let mut et = vec![0u8; 16];
        et[4..8].copy_from_slice(b"ET11");
        assert!(detect(&et).unwrap_err().to_string().contains("ET11"));
    }
}
