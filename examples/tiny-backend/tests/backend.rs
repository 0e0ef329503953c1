//! A program whose multiply-add is delegated to `PtecTinyBackend`: the
//! backend is initialised at construction with the blob and compile specs
//! from the file, executes the call, and is released on drop; a missing or
//! failing backend is an error, never a panic.
use example_tiny_backend::TinyBackend;
use ptec_runtime::{Backend, BackendMessage, BackendRegistry, CompileSpec, DelegateArg, DelegateHandle, Error, Model};

mod tiny {
    ptec_macros::include_pte!("../../tests/fixtures/tiny_delegate.bpte", name = TinyDelegate, tests);
}
use tiny::{bundled, TinyDelegate};

mod device {
    ptec_macros::include_pte!("../../tests/fixtures/device_copies.bpte", name = DeviceCopies, tests);
}

#[test]
fn bundled_cases_pass_with_the_backend() {
    let mut backend = TinyBackend::default();
    {
        let mut backends: [&mut dyn Backend; 1] = [&mut backend];
        let mut model = TinyDelegate::boxed(BackendRegistry::new(&mut backends)).unwrap();
        assert!(!bundled::CASES.is_empty());
        for k in 0..bundled::CASES.len() {
            bundled::run_case(&mut *model, k, bundled::TOLERANCE).unwrap_or_else(|e| panic!("case {k}: {e}"));
        }
    }
    assert_eq!(backend.executions, bundled::CASES.len());
    assert_eq!(backend.specs_seen, vec![("precision".to_string(), b"fp32".to_vec())]);
    assert_eq!(backend.destroyed, 1, "dropping the program releases its delegate");
}

/// The same delegate said to run on `cuda:0`: the exporter copies its
/// inputs in (`et_copy::_h2d_copy`) and its output out (`_d2h_copy`), which
/// ptec runs as host copies around the backend; eager PyTorch's outputs.
#[test]
fn device_copies_around_the_backend_match_eager_pytorch() {
    let mut backend = TinyBackend::default();
    {
        let mut backends: [&mut dyn Backend; 1] = [&mut backend];
        let mut model = device::DeviceCopies::boxed(BackendRegistry::new(&mut backends)).unwrap();
        assert_eq!(device::bundled::CASES.len(), 2);
        for k in 0..device::bundled::CASES.len() {
            device::bundled::run_case(&mut *model, k, device::bundled::TOLERANCE)
                .unwrap_or_else(|e| panic!("case {k}: {e}"));
        }
    }
    assert_eq!(backend.executions, 2);
    assert_eq!(
        backend.specs_seen,
        vec![
            ("precision".to_string(), b"fp32".to_vec()),
            ("target_device".to_string(), b"cuda:0".to_vec())
        ]
    );
}

/// Records what `init` and `execute` receive.
#[derive(Default)]
struct Recording {
    blob: Vec<u8>,
    specs: Vec<(String, Vec<u8>)>,
    calls: Vec<Vec<(bool, Vec<usize>, usize)>>,
}

impl Backend for Recording {
    fn id(&self) -> &str {
        "PtecTinyBackend"
    }
    fn init(&mut self, processed: &[u8], specs: &[CompileSpec]) -> Result<DelegateHandle, BackendMessage> {
        self.blob = processed.to_vec();
        self.specs = specs.iter().map(|s| (s.key.to_string(), s.value.to_vec())).collect();
        Ok(DelegateHandle(7))
    }
    fn execute(&mut self, handle: DelegateHandle, args: &mut [DelegateArg<'_>]) -> Result<(), BackendMessage> {
        assert_eq!(handle, DelegateHandle(7), "execute gets the handle init returned");
        self.calls.push(
            args.iter()
                .map(|a| match a {
                    DelegateArg::Tensor(t) => (true, t.sizes.to_vec(), t.data.len()),
                    DelegateArg::Value(v) => (false, v.as_tensor().map_or(vec![], |t| t.sizes.to_vec()), 0),
                })
                .collect(),
        );
        Ok(())
    }
}

#[test]
fn the_backend_gets_the_blob_and_the_call_values() {
    let mut rec = Recording::default();
    {
        let mut backends: [&mut dyn Backend; 1] = [&mut rec];
        let mut model = TinyDelegate::new(BackendRegistry::new(&mut backends)).unwrap();
        model.forward(&[[1.0; 4]; 3], &[[2.0; 4]; 3]).unwrap();
    }
    // The blob is the file's delegate data, byte for byte.
    let file = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/tiny_delegate.pte"
    ))
    .unwrap();
    assert!(
        rec.blob.starts_with(b"ptec-tiny v1\n"),
        "{:?}",
        String::from_utf8_lossy(&rec.blob)
    );
    assert!(file.windows(rec.blob.len()).any(|w| w == rec.blob.as_slice()));
    assert_eq!(rec.specs, vec![("precision".to_string(), b"fp32".to_vec())]);
    // Two float inputs and one output, all [3, 4] in planned memory.
    assert_eq!(rec.calls, vec![vec![(true, vec![3, 4], 48); 3]]);
}

#[test]
fn a_missing_backend_is_an_error_at_construction() {
    let e = TinyDelegate::new(BackendRegistry::empty()).err().expect("no backend");
    assert_eq!(e, Error::MissingBackend { id: "PtecTinyBackend" });
    assert!(e.to_string().contains("PtecTinyBackend"));
}

struct Failing {
    at_init: bool,
}

impl Backend for Failing {
    fn id(&self) -> &str {
        "PtecTinyBackend"
    }
    fn init(&mut self, _: &[u8], _: &[CompileSpec]) -> Result<DelegateHandle, BackendMessage> {
        if self.at_init {
            Err("cannot prepare")
        } else {
            Ok(DelegateHandle(0))
        }
    }
    fn execute(&mut self, _: DelegateHandle, _: &mut [DelegateArg<'_>]) -> Result<(), BackendMessage> {
        Err("out of cheese")
    }
}

#[test]
fn a_failing_backend_is_an_error_naming_the_instruction() {
    let mut f = Failing { at_init: false };
    let mut backends: [&mut dyn Backend; 1] = [&mut f];
    let mut model = TinyDelegate::boxed(BackendRegistry::new(&mut backends)).unwrap();
    let e = model
        .forward(&[[1.0; 4]; 3], &[[2.0; 4]; 3])
        .expect_err("the backend fails");
    let delegate_instruction = (0..model.methods()[0].num_instructions)
        .find(|&i| {
            model.reset(0).unwrap();
            (0..i).for_each(|_| {
                model.step(0).unwrap();
            });
            model.step(0).is_err()
        })
        .expect("one instruction fails");
    assert_eq!(
        e,
        Error::Backend {
            instruction: delegate_instruction,
            message: "out of cheese"
        }
    );

    let mut f = Failing { at_init: true };
    let mut backends: [&mut dyn Backend; 1] = [&mut f];
    let e = TinyDelegate::new(BackendRegistry::new(&mut backends))
        .err()
        .expect("init fails");
    assert_eq!(
        e,
        Error::BackendInit {
            id: "PtecTinyBackend",
            message: "cannot prepare"
        }
    );
}

#[test]
fn a_malformed_blob_is_refused_by_the_example_backend() {
    let mut b = TinyBackend::default();
    assert!(b.init(b"ptec-tiny v2\n", &[]).is_err());
}
