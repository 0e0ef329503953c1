//! Delegate backends: code that runs a `DelegateCall`'s processed blob.
use crate::{Error, Value};

/// One compile spec of a delegate (`key` → opaque bytes).
#[derive(Clone, Copy, Debug)]
pub struct CompileSpec {
    pub key: &'static str,
    pub value: &'static [u8],
}

/// What a backend's `init` returns; identifies the initialised delegate in
/// later `execute` calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DelegateHandle(pub usize);

/// The values of one `DelegateCall`: inputs then outputs, in the call's
/// order. Outputs are written through `outputs`.
pub struct BackendArgs<'a, 'b> {
    pub inputs: &'a [Value<'b>],
    pub outputs: &'a mut [&'b mut [u8]],
}

/// A delegate backend, matched to `BackendDelegate.id` of the program.
pub trait Backend {
    /// The id this backend serves (`XnnpackBackend`, ...).
    fn id(&self) -> &str;
    /// Prepares the processed blob of one delegate.
    fn init(&mut self, processed: &[u8], specs: &[CompileSpec]) -> Result<DelegateHandle, Error>;
    /// Runs an initialised delegate.
    fn execute(&mut self, handle: DelegateHandle, args: BackendArgs<'_, '_>) -> Result<(), Error>;
}

/// The backends given to a program, looked up by id. No global state: a
/// program receives its registry when it is constructed.
#[derive(Default)]
pub struct BackendRegistry<'a> {
    backends: &'a mut [&'a mut dyn Backend],
}

impl<'a> BackendRegistry<'a> {
    pub fn new(backends: &'a mut [&'a mut dyn Backend]) -> Self {
        BackendRegistry { backends }
    }

    /// The backend serving `id`.
    pub fn get(&mut self, id: &'static str) -> Result<&mut dyn Backend, Error> {
        for b in self.backends.iter_mut() {
            if b.id() == id {
                return Ok(&mut **b);
            }
        }
        Err(Error::MissingBackend { id })
    }
}
