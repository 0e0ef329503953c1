//! Delegate backends: code that runs a `DelegateCall`'s processed blob.
//!
//! A program with delegates is given its backends when it is constructed
//! (a [`BackendRegistry`], no global state). Construction initialises every
//! delegate of every method with the backend serving its id — a missing
//! backend or a failing `init` is an error then, not at the first call —
//! and dropping the program releases each handle with [`Backend::destroy`].
use crate::{ScalarType, Value};

/// One compile spec of a delegate (`key` → opaque bytes), as the exporter
/// wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompileSpec {
    pub key: &'static str,
    pub value: &'static [u8],
}

/// What a backend's `init` returns; identifies the initialised delegate in
/// later `execute` and `destroy` calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DelegateHandle(pub usize);

/// A tensor a delegate may write: planned memory of the program.
#[derive(Debug)]
pub struct TensorMut<'a> {
    pub dtype: ScalarType,
    /// Live sizes (backends cannot resize tensors).
    pub sizes: &'a [usize],
    pub dim_order: &'a [u8],
    pub data: &'a mut [u8],
}

/// One value of a `DelegateCall`, in the call's order (the delegate's inputs
/// then its outputs, as ExecuTorch passes them).
#[derive(Debug)]
pub enum DelegateArg<'a> {
    /// A tensor in the program's planned memory, readable and writable.
    Tensor(TensorMut<'a>),
    /// A value the delegate can only read: constant tensors, scalars, None.
    Value(Value<'a>),
}

/// What a backend reports when it fails: a short message, shown with the
/// delegate's id or instruction.
pub type BackendMessage = &'static str;

/// A delegate backend, matched to `BackendDelegate.id` of the program.
pub trait Backend {
    /// The id this backend serves (`XnnpackBackend`, ...).
    fn id(&self) -> &str;
    /// Prepares the processed blob of one delegate, with its compile specs.
    fn init(&mut self, processed: &[u8], specs: &[CompileSpec]) -> Result<DelegateHandle, BackendMessage>;
    /// Runs an initialised delegate on the call's values.
    fn execute(&mut self, handle: DelegateHandle, args: &mut [DelegateArg<'_>]) -> Result<(), BackendMessage>;
    /// Releases an initialised delegate (when its program is dropped).
    fn destroy(&mut self, _handle: DelegateHandle) {}
}

/// The backends given to a program, looked up by id.
pub struct BackendRegistry<'a> {
    backends: &'a mut [&'a mut dyn Backend],
}

impl<'a> BackendRegistry<'a> {
    pub fn new(backends: &'a mut [&'a mut dyn Backend]) -> Self {
        BackendRegistry { backends }
    }

    /// No backends: for programs whose delegates are all compiled by ptec.
    pub fn empty() -> BackendRegistry<'static> {
        BackendRegistry { backends: &mut [] }
    }

    /// Index of the backend serving `id`.
    pub fn find(&self, id: &str) -> Option<usize> {
        self.backends.iter().position(|b| b.id() == id)
    }

    /// The backend at `index` (from [`find`](Self::find)).
    pub fn at(&mut self, index: usize) -> Option<&mut dyn Backend> {
        match self.backends.get_mut(index) {
            Some(b) => Some(&mut **b),
            None => None,
        }
    }
}

/// An initialised delegate of a program: which backend serves it and the
/// handle `init` returned. Generated code keeps one per delegate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DelegateSlot {
    pub backend: usize,
    pub handle: DelegateHandle,
    /// Whether `init` succeeded (and `destroy` is owed).
    pub live: bool,
}

impl DelegateSlot {
    pub const EMPTY: DelegateSlot = DelegateSlot {
        backend: 0,
        handle: DelegateHandle(0),
        live: false,
    };

    /// Finds the backend for `id` and initialises the delegate with it.
    pub fn init(
        backends: &mut BackendRegistry<'_>,
        id: &'static str,
        processed: &[u8],
        specs: &[CompileSpec],
    ) -> Result<DelegateSlot, crate::Error> {
        let backend = backends.find(id).ok_or(crate::Error::MissingBackend { id })?;
        let b = backends.at(backend).ok_or(crate::Error::MissingBackend { id })?;
        let handle = b
            .init(processed, specs)
            .map_err(|message| crate::Error::BackendInit { id, message })?;
        Ok(DelegateSlot {
            backend,
            handle,
            live: true,
        })
    }

    /// Runs the delegate; failures are reported at `instruction`.
    #[inline]
    pub fn execute(
        &self,
        backends: &mut BackendRegistry<'_>,
        instruction: usize,
        args: &mut [DelegateArg<'_>],
    ) -> Result<(), crate::Error> {
        let not_initialised = crate::Error::Backend {
            instruction,
            message: "the delegate was not initialised",
        };
        if !self.live {
            return Err(not_initialised);
        }
        let b = backends.at(self.backend).ok_or(not_initialised)?;
        b.execute(self.handle, args)
            .map_err(|message| crate::Error::Backend { instruction, message })
    }

    /// Releases the delegate if it was initialised.
    pub fn destroy(&mut self, backends: &mut BackendRegistry<'_>) {
        if self.live {
            if let Some(b) = backends.at(self.backend) {
                b.destroy(self.handle);
            }
            self.live = false;
        }
    }
}
