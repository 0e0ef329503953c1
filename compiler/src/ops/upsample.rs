//! (being written)
use super::*;

pub const OPS: &[(&str, Emitter)] = &[];
