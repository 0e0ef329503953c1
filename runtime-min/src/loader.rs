//! Loading data (weights kept outside the binary) at run time.
use crate::Error;

/// Source of the bytes of a program file, read when a program is
/// constructed in external-weights mode.
pub trait DataLoader {
    /// Total size of the source in bytes.
    fn size(&self) -> Result<usize, Error>;
    /// Reads `out.len()` bytes at `offset` into `out`.
    fn read_into(&mut self, offset: usize, out: &mut [u8]) -> Result<(), Error>;
}

/// A loader over bytes already in memory (a `&[u8]`, an mmap, ...).
pub struct BufferLoader<'a>(pub &'a [u8]);

impl DataLoader for BufferLoader<'_> {
    fn size(&self) -> Result<usize, Error> {
        Ok(self.0.len())
    }

    fn read_into(&mut self, offset: usize, out: &mut [u8]) -> Result<(), Error> {
        let end = offset.checked_add(out.len()).ok_or(Error::Load {
            what: "read past the end",
        })?;
        let src = self.0.get(offset..end).ok_or(Error::Load {
            what: "read past the end",
        })?;
        out.copy_from_slice(src);
        Ok(())
    }
}

/// A loader reading a file.
#[cfg(feature = "std")]
pub struct FileLoader {
    file: std::fs::File,
    size: usize,
}

#[cfg(feature = "std")]
impl FileLoader {
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Self, Error> {
        let file = std::fs::File::open(path).map_err(|_| Error::Load {
            what: "cannot open the file",
        })?;
        Self::from_file(file)
    }

    /// Reads a file that is already open, from its start.
    pub fn from_file(file: std::fs::File) -> Result<Self, Error> {
        let size = file
            .metadata()
            .map_err(|_| Error::Load {
                what: "cannot stat the file",
            })?
            .len();
        let size = usize::try_from(size).map_err(|_| Error::Load { what: "file too large" })?;
        Ok(FileLoader { file, size })
    }
}

#[cfg(feature = "std")]
impl DataLoader for FileLoader {
    fn size(&self) -> Result<usize, Error> {
        Ok(self.size)
    }

    fn read_into(&mut self, offset: usize, out: &mut [u8]) -> Result<(), Error> {
        use std::io::{Read, Seek, SeekFrom};
        self.file
            .seek(SeekFrom::Start(offset as u64))
            .map_err(|_| Error::Load { what: "seek failed" })?;
        self.file
            .read_exact(out)
            .map_err(|_| Error::Load { what: "read failed" })
    }
}
