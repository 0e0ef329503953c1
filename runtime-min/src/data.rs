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
        // Miri cannot map a file (it stops, rather than failing the call):
        // there the bytes are read, as when mapping fails.
        if cfg!(miri) {
            return Blob::load(&mut crate::FileLoader::from_file(file)?);
        }
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
        // Hashing reads every page; a mapped file gives each chunk's pages
        // back as it goes, so that checking a large file costs no memory.
        if hash_chunks(b, |at, len| self.release(at, len)) != expected.hash {
            return Err(mismatch);
        }
        Ok(())
    }

    /// Tells the system that the pages wholly inside `len` bytes at
    /// `offset` are not needed now: a memory-mapped file's pages leave the
    /// process's resident memory and are read from the file again if
    /// touched. The bytes never change; other blobs ignore it. Generated
    /// code calls it on constants it has just repacked and will not read
    /// again, so a program does not hold its weights twice.
    pub fn release(&self, offset: usize, len: usize) {
        #[cfg(all(feature = "std", unix))]
        if let Blob::Mapped(m) = self {
            // SAFETY: sysconf has no preconditions.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            let page = if page > 0 { page as usize } else { return };
            let base = m.as_ptr() as usize;
            let start = (base + offset.min(m.len())).next_multiple_of(page);
            let end = (base + offset.saturating_add(len).min(m.len())) / page * page;
            if end > start {
                // Derived from the mapping's pointer, not cast from an
                // address, so that it keeps the mapping's provenance.
                let first = m.as_ptr().wrapping_add(start - base) as *mut libc::c_void;
                // SAFETY: the pages lie inside this read-only shared file
                // mapping; MADV_DONTNEED on it drops them from memory and
                // later reads fault the same bytes back from the file.
                unsafe { libc::madvise(first, end - start, libc::MADV_DONTNEED) };
            }
        }
        #[cfg(not(all(feature = "std", unix)))]
        let _ = (offset, len);
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
    hash_chunks(bytes, |_, _| {})
}

/// Bytes [`hash_chunks`] reads between calls: a multiple of the 32-byte
/// block, so chunks end on block boundaries. Smaller under Miri, so that
/// its tests cross chunks on sizes it interprets in seconds (the hash does
/// not depend on it).
const CHUNK: usize = if cfg!(miri) { 4 << 10 } else { 4 << 20 };

/// [`content_hash`], calling `done(offset, len)` after each chunk of
/// `bytes` it has read.
fn hash_chunks(bytes: &[u8], mut done: impl FnMut(usize, usize)) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mix = |h: u64, w: u64| (h ^ w).wrapping_mul(K).rotate_left(29);
    let mut lanes = [K, K ^ 1, K ^ 2, K ^ 3];
    let whole = bytes.len() / 32 * 32;
    for (c, chunk) in bytes[..whole].chunks(CHUNK).enumerate() {
        for block in chunk.chunks_exact(32) {
            for (lane, w) in lanes.iter_mut().zip(block.chunks_exact(8)) {
                *lane = mix(*lane, u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
            }
        }
        done(c * CHUNK, chunk.len());
    }
    let mut h = bytes.len() as u64;
    for lane in lanes {
        h = mix(h, lane);
    }
    for (i, &b) in bytes[whole..].iter().enumerate() {
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
    fn hash_in_chunks_is_the_one_pass_hash() {
        // The definition, in one pass over the blocks.
        fn one_pass(bytes: &[u8]) -> u64 {
            const K: u64 = 0x9E37_79B9_7F4A_7C15;
            let mix = |h: u64, w: u64| (h ^ w).wrapping_mul(K).rotate_left(29);
            let mut lanes = [K, K ^ 1, K ^ 2, K ^ 3];
            let mut blocks = bytes.chunks_exact(32);
            for block in &mut blocks {
                for (lane, w) in lanes.iter_mut().zip(block.chunks_exact(8)) {
                    *lane = mix(*lane, u64::from_le_bytes(w.try_into().unwrap()));
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
        let big: alloc::vec::Vec<u8> = (0..(2 * CHUNK + CHUNK / 4) as u32 + 77)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in [0, 31, 32, CHUNK, CHUNK + 5, big.len()] {
            let mut seen = alloc::vec::Vec::new();
            let h = hash_chunks(&big[..len], |at, n| seen.push((at, n)));
            assert_eq!(h, one_pass(&big[..len]), "{len} bytes");
            let covered: usize = seen.iter().map(|s| s.1).sum();
            assert_eq!(covered, len / 32 * 32);
            assert!(seen.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0));
        }
    }

    // Only unix maps files (and releases their pages).
    #[cfg(unix)]
    #[test]
    fn released_pages_read_the_same() {
        let dir = std::env::temp_dir().join(std::format!("ptec-release-{}", std::process::id()));
        // Many pages; under Miri, which takes minutes to compare and hash
        // 300 kB, five.
        let len: u32 = if cfg!(miri) { 20_000 } else { 300_000 };
        let bytes: alloc::vec::Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        std::fs::write(&dir, &bytes).unwrap();
        let blob = Blob::open(&dir).unwrap();
        assert_eq!(blob.bytes(), &bytes[..]);
        blob.release(5000, len as usize * 2 / 3);
        blob.release(0, usize::MAX);
        blob.release(usize::MAX, 10);
        assert_eq!(blob.bytes(), &bytes[..]);
        let check = FileCheck {
            name: "f",
            size: bytes.len(),
            hash: content_hash(&bytes),
        };
        assert_eq!(blob.check(&check), Ok(()));
        assert_eq!(blob.bytes(), &bytes[..]);
        drop(blob);
        std::fs::remove_file(&dir).unwrap();
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
