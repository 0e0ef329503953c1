//! The one entry point of the three front ends: file bytes in, Rust out.
use crate::codegen::{generate, to_source, Options};
use crate::error::{ErrorKind, Errors, Location, Result};
use crate::load::{load, Loaded};
use crate::verify::verify_program;
use proc_macro2::TokenStream;

/// Reads, verifies and compiles a program (`.pte`, or the program of a
/// `.bp`/`.bpte` bundle) to tokens. `data` are the bytes of the `.ptd`
/// files named in `options.data_paths`.
pub fn compile(bytes: &[u8], data: &[&[u8]], options: &Options) -> Result<TokenStream> {
    // A panic here is a bug in ptec; it still must not take down a build
    // script or a proc macro, so it becomes an error that says so.
    std::panic::catch_unwind(|| {
        let mut loaded = load(bytes, data)?;
        lower_delegates(&mut loaded, bytes, options.lower_xnnpack)?;
        generate(&loaded, bytes, data, options)
    })
    .unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(Errors::one(ErrorKind::Internal { detail: msg }, Location::default()))
    })
}

/// Compiles the delegate calls ptec knows how to compile into kernel
/// calls: those of the XNNPACK backend when `lower_xnnpack` is set. The
/// lowered program is verified again, as a loaded one is.
pub fn lower_delegates(loaded: &mut Loaded, bytes: &[u8], lower_xnnpack: bool) -> Result<()> {
    let Some(program) = loaded.program.as_mut() else {
        return Ok(());
    };
    if lower_xnnpack {
        crate::xnnpack::lower_xnnpack_delegates(program, bytes)?;
        verify_program(program, &loaded.suites)?;
    }
    Ok(())
}

/// [`compile`], formatted as a source file with its `@generated` header.
pub fn compile_to_string(bytes: &[u8], data: &[&[u8]], options: &Options) -> Result<String> {
    let tokens = compile(bytes, data, options)?;
    to_source(tokens, options, bytes)
}

/// Reads a file for a front end, with an error that names it.
pub fn read_file(path: &std::path::Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        Errors::one(
            ErrorKind::Io {
                path: path.display().to_string(),
                detail: e.to_string(),
            },
            Location::default(),
        )
    })
}

/// Writes `contents` to `path` unless it already holds exactly that, so
/// build systems do not see a change (and rebuild) for nothing.
pub fn write_if_changed(path: &std::path::Path, contents: &str) -> std::io::Result<bool> {
    if std::fs::read(path).is_ok_and(|old| old == contents.as_bytes()) {
        return Ok(false);
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, contents)?;
    Ok(true)
}
