//! End-to-end tests of ptec live in `tests/`; see `build.rs`.
