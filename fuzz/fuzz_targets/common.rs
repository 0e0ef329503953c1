//! Shared by the fuzz targets.

/// Fails (a crash for libFuzzer) when `result` is an `Internal` error: a
/// panic that `ptec::compile` caught and turned into one.
pub fn no_internal<T>(result: ptec::Result<T>) {
    if let Err(e) = result {
        if let Some(d) = e.0.iter().find(|d| matches!(d.kind, ptec::ErrorKind::Internal { .. })) {
            panic!("ptec panicked: {d}");
        }
    }
}
