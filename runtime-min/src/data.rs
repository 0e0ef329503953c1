//! Files a program reads at run time instead of embedding them: the `.pte`
//! in external-weights mode and `.ptd` files given as run-time data.
//!
//! Generated code knows each file's size and content hash from compile
//! time ([`FileCheck`]); a program checks every [`Blob`] it is given
//! against them before it runs, because the offsets of every constant were
//! compiled in and a different file would be read wrongly.
#[cfg(feature = "alloc")]
use crate::DataLoader;
use crate::Error;

/// Alignment the bytes of a blob need: generated code reads constants in
/// place, so the file's start must be aligned at least as strictly as any
/// element type (and 64 bytes keeps SIMD loads on one cache line).
pub const BLOB_ALIGN: usize = 64;

/// The bytes of one data file, however they were obtained.
pub enum Blob<'a> {
    /// Bytes owned elsewhere: a `static`, a buffer the caller manages, ...
    Borrowed(&'a [u8]),
    /// Bytes read into memory this blob owns.
    #[cfg(feature = "alloc")]
    Owned(OwnedBytes),
    /// A file mapped into memory.
    #[cfg(feature = "std")]
    Mapped(memmap2::Mmap),
}

impl<'a> Blob<'a> {
    /// The file's bytes.
    #[inline(always)]
    pub fn bytes(&self) -> &[u8] {
        match self {
            Blob::Borrowed(b) => b,
            #[cfg(feature = "alloc")]
            Blob::Owned(o) => o.bytes(),
            #[cfg(feature = "std")]
            Blob::Mapped(m) => m,
        }
    }

    /// Reads a whole source into owned, aligned memory.
    #[cfg(feature = "alloc")]
    pub fn load(loader: &mut dyn DataLoader) -> Result<Blob<'static>, Error> {
        let len = loader.size()?;
        let mut owned = OwnedBytes::zeroed(len);
        loader.read_into(0, owned.bytes_mut())?;
        Ok(Blob::Owned(owned))
    }

    /// Maps a file into memory (read-only, shared), or reads it into owned
    /// memory where the platform has no memory maps (WASI).
    ///
    /// The program reads the mapping while it runs; like every memory map,
    /// it must not be truncated or rewritten by another process meanwhile.
    #[cfg(feature = "std")]
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Blob<'static>, Error> {
        let file = std::fs::File::open(path).map_err(|_| Error::Load {
            what: "cannot open the file",
        })?;
        // SAFETY: the mapping is read-only; the documented condition above
        // (no concurrent truncation or rewrite) is the caller's.
        match unsafe { memmap2::Mmap::map(&file) } {
            Ok(map) => Ok(Blob::Mapped(map)),
            Err(_) => Blob::load(&mut crate::FileLoader::from_file(file)?),
        }
    }

    /// Checks that these bytes are the file the program was compiled
    /// against and sit at an address generated code can read in place.
    pub fn check(&self, expected: &FileCheck) -> Result<(), Error> {
        let b = self.bytes();
        let mismatch = Error::FileMismatch {
            file: expected.name,
            expected_size: expected.size,
            size: b.len(),
        };
        if b.len() != expected.size {
            return Err(mismatch);
        }
        if !(b.as_ptr() as usize).is_multiple_of(BLOB_ALIGN) && !b.is_empty() {
            return Err(Error::Misaligned);
        }
        if content_hash(b) != expected.hash {
            return Err(mismatch);
        }
        Ok(())
    }
}

/// Heap bytes aligned to [`BLOB_ALIGN`].
#[cfg(feature = "alloc")]
pub struct OwnedBytes {
    chunks: alloc::boxed::Box<[Chunk]>,
    len: usize,
}

#[cfg(feature = "alloc")]
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Chunk([u8; BLOB_ALIGN]);

#[cfg(feature = "alloc")]
impl OwnedBytes {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        let chunks = alloc::vec![Chunk([0; BLOB_ALIGN]); len.div_ceil(BLOB_ALIGN)].into_boxed_slice();
        OwnedBytes { chunks, len }
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the chunks are `len.div_ceil(64) * 64 >= len` contiguous
        // initialised bytes without padding (Chunk is a byte array).
        unsafe { core::slice::from_raw_parts(self.chunks.as_ptr() as *const u8, self.len) }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as bytes(), and borrowed mutably through &mut self.
        unsafe { core::slice::from_raw_parts_mut(self.chunks.as_mut_ptr() as *mut u8, self.len) }
    }
}

/// What generated code knows of a file it reads at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileCheck {
    /// The file's name when it was compiled (for error messages).
    pub name: &'static str,
    pub size: usize,
    /// [`content_hash`] of the whole file.
    pub hash: u64,
}

/// A fast 64-bit hash of a whole file, to tell a different file from the
/// one compiled against (not a cryptographic check). Four independent
/// lanes over 8-byte words keep it near memory bandwidth.
pub fn content_hash(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mix = |h: u64, w: u64| (h ^ w).wrapping_mul(K).rotate_left(29);
    let mut lanes = [K, K ^ 1, K ^ 2, K ^ 3];
    let mut blocks = bytes.chunks_exact(32);
    for block in &mut blocks {
        for (lane, w) in lanes.iter_mut().zip(block.chunks_exact(8)) {
            *lane = mix(*lane, u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
        }
    }
    let mut h = bytes.len() as u64;
    for lane in lanes {
        h = mix(h, lane);
    }
    for (i, &b) in blocks.remainder().iter().enumerate() {
        h = mix(h, b as u64 | (i as u64) << 8);
    }
    h ^ (h >> 31)
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;

    #[test]
    fn hash_sees_every_byte_and_the_length() {
        let base: alloc::vec::Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let h = content_hash(&base);
        for i in [0, 31, 32, 500, 991, 999] {
            let mut b = base.clone();
            b[i] ^= 1;
            assert_ne!(content_hash(&b), h, "flipping byte {i}");
        }
        assert_ne!(content_hash(&base[..999]), h);
        assert_eq!(content_hash(&base), h);
    }

    #[test]
    fn check_rejects_another_file() {
        let data = OwnedBytes::zeroed(100);
        let blob = Blob::Owned(data);
        let good = FileCheck {
            name: "m.pte",
            size: 100,
            hash: content_hash(&[0; 100]),
        };
        assert_eq!(blob.check(&good), Ok(()));
        let wrong_size = FileCheck { size: 101, ..good };
        assert!(matches!(blob.check(&wrong_size), Err(Error::FileMismatch { .. })));
        let wrong_hash = FileCheck { hash: 1, ..good };
        assert!(matches!(blob.check(&wrong_hash), Err(Error::FileMismatch { .. })));
    }

    #[test]
    fn misaligned_borrowed_bytes_are_refused() {
        let data = OwnedBytes::zeroed(130);
        let b = &data.bytes()[1..129];
        let check = FileCheck {
            name: "x",
            size: 128,
            hash: content_hash(b),
        };
        assert_eq!(Blob::Borrowed(b).check(&check), Err(Error::Misaligned));
    }

    #[test]
    fn load_reads_through_a_loader() {
        let src: alloc::vec::Vec<u8> = (0..200u8).collect();
        let blob = Blob::load(&mut crate::BufferLoader(&src)).unwrap();
        assert_eq!(blob.bytes(), &src[..]);
        assert_eq!(blob.bytes().as_ptr() as usize % BLOB_ALIGN, 0);
    }
}
