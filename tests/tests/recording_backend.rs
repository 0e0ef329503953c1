//! The XNNPACK-delegated corpus programs compiled with their delegates left
//! to a user backend: a recording `XnnpackBackend` must receive each
//! delegate's XNNPACK blob and compile specs at construction, and at run
//! time the call's values — the method's input bytes going in, tensors of
//! the right shapes coming out.
#[cfg(not(ptec_corpus))]
#[test]
fn recording_backend() {
    // tests/build.rs refuses to build without the corpus when it is
    // required, so this only runs where skipping is allowed.
    assert!(std::env::var_os("PTEC_REQUIRE_CORPUS").is_none_or(|v| v.is_empty() || v == "0"));
    eprintln!("SKIPPED: no ../shared/corpus next to the repository; the XNNPACK recording tests did not run");
}

#[cfg(ptec_corpus)]
mod with_corpus {
    use ptec_runtime::{
        Backend, BackendMessage, BackendRegistry, CompileSpec, DelegateArg, DelegateHandle, Model, Value,
    };

    mod xnnpack_mlp {
        include!(concat!(env!("OUT_DIR"), "/delegated_xnnpack_mlp.rs"));
    }
    mod xnnpack_partial {
        include!(concat!(env!("OUT_DIR"), "/delegated_xnnpack_partial.rs"));
    }

    /// One recorded argument: writable, dtype, sizes, bytes.
    type Arg = (bool, ptec_runtime::ScalarType, Vec<usize>, Vec<u8>);

    #[derive(Default)]
    struct Recording {
        blobs: Vec<Vec<u8>>,
        specs: Vec<Vec<(String, Vec<u8>)>>,
        calls: Vec<(DelegateHandle, Vec<Arg>)>,
    }

    impl Backend for Recording {
        fn id(&self) -> &str {
            "XnnpackBackend"
        }
        fn init(&mut self, processed: &[u8], specs: &[CompileSpec]) -> Result<DelegateHandle, BackendMessage> {
            self.blobs.push(processed.to_vec());
            self.specs
                .push(specs.iter().map(|s| (s.key.to_string(), s.value.to_vec())).collect());
            Ok(DelegateHandle(100 + self.blobs.len() - 1))
        }
        fn execute(&mut self, handle: DelegateHandle, args: &mut [DelegateArg<'_>]) -> Result<(), BackendMessage> {
            let args = args
                .iter()
                .map(|a| match a {
                    DelegateArg::Tensor(t) => (true, t.dtype, t.sizes.to_vec(), t.data.to_vec()),
                    DelegateArg::Value(Value::Tensor(t)) => (false, t.dtype, t.sizes.to_vec(), t.data.to_vec()),
                    DelegateArg::Value(_) => (false, ptec_runtime::ScalarType::Byte, vec![], vec![]),
                })
                .collect();
            self.calls.push((handle, args));
            Ok(())
        }
    }

    fn u32_at(b: &[u8], at: usize) -> usize {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize
    }

    /// An XNNPACK blob: `XH00` header whose flatbuffer (`XN01`/`XN00`) and
    /// constant data lie inside the blob, and which is a byte range of the
    /// program file.
    fn check_blob(blob: &[u8], file: &[u8]) {
        assert_eq!(&blob[4..8], b"XH00", "XNNPACK header magic");
        let (fb_off, fb_len) = (u32_at(blob, 10), u32_at(blob, 14));
        let (const_off, const_len) = (
            u32_at(blob, 18),
            u64::from_le_bytes(blob[22..30].try_into().unwrap()) as usize,
        );
        assert!(fb_off + fb_len <= blob.len(), "flatbuffer inside the blob");
        assert!(const_off + const_len <= blob.len(), "constant data inside the blob");
        let ident = &blob[fb_off + 4..fb_off + 8];
        assert!(ident == b"XN01" || ident == b"XN00", "flatbuffer identifier {ident:?}");
        assert!(
            file.windows(blob.len()).any(|w| w == blob),
            "the blob is the file's delegate data"
        );
    }

    fn corpus_file(name: &str) -> Vec<u8> {
        std::fs::read(format!(
            "{}/../../shared/corpus/{name}.bpte",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    }

    /// Sets input 0 of method 0 to a fixed pattern and runs the method;
    /// returns the input's bytes and the sizes of input 0 and output 0.
    fn run_with_pattern(m: &mut dyn Model) -> (Vec<u8>, Vec<usize>, Vec<usize>) {
        let meta = &m.methods()[0];
        let t = meta.input_tensor_meta(0).unwrap();
        assert_eq!(t.dtype, ptec_runtime::ScalarType::Float);
        let n: usize = t.sizes.iter().product();
        let bytes: Vec<u8> = (0..n).flat_map(|i| ((0.1 * i as f32).sin()).to_le_bytes()).collect();
        let in_sizes = t.sizes.to_vec();
        m.set_input(
            0,
            0,
            Value::Tensor(ptec_runtime::TensorRef::new(t.dtype, t.sizes, &bytes)),
        )
        .unwrap();
        m.execute(0).unwrap();
        let out_sizes = m.output(0, 0).unwrap().as_tensor().unwrap().sizes.to_vec();
        (bytes, in_sizes, out_sizes)
    }

    #[test]
    fn xnnpack_mlp_reaches_the_backend() {
        let mut rec = Recording::default();
        let (input, in_sizes, out_sizes) = {
            let mut backends: [&mut dyn Backend; 1] = [&mut rec];
            let mut m = xnnpack_mlp::Program::boxed(BackendRegistry::new(&mut backends)).unwrap();
            run_with_pattern(&mut *m)
        };
        let file = corpus_file("xnnpack_mlp");
        assert_eq!(rec.blobs.len(), 1, "one delegate, initialised once");
        check_blob(&rec.blobs[0], &file);
        assert_eq!(rec.calls.len(), 1, "one DelegateCall per run");
        let (handle, args) = &rec.calls[0];
        assert_eq!(*handle, DelegateHandle(100), "execute gets init's handle");
        // The whole graph is delegated: the method's input in, its output out.
        assert_eq!(args.len(), 2);
        assert_eq!(
            (args[0].2.clone(), &args[0].3),
            (in_sizes, &input),
            "the input's bytes reach the backend"
        );
        assert_eq!(args[1].2, out_sizes);
        assert!(args[1].0, "the output is writable");
    }

    #[test]
    fn xnnpack_partial_reaches_the_backend_per_delegate() {
        let mut rec = Recording::default();
        let (input, in_sizes, _) = {
            let mut backends: [&mut dyn Backend; 1] = [&mut rec];
            let mut m = xnnpack_partial::Program::boxed(BackendRegistry::new(&mut backends)).unwrap();
            run_with_pattern(&mut *m)
        };
        let file = corpus_file("xnnpack_partial");
        assert_eq!(rec.blobs.len(), 2, "two delegates");
        assert_ne!(rec.blobs[0], rec.blobs[1]);
        for b in &rec.blobs {
            check_blob(b, &file);
        }
        // Each delegate runs once, with its own handle, in program order.
        let handles: Vec<_> = rec.calls.iter().map(|(h, _)| *h).collect();
        assert_eq!(handles, vec![DelegateHandle(100), DelegateHandle(101)]);
        assert_eq!(in_sizes, vec![2, 3, 8, 8]);
        assert!(
            rec.calls[0].1.iter().any(|a| a.2 == in_sizes && a.3 == input),
            "the first delegate is given the method's input"
        );
        for (_, args) in &rec.calls {
            assert!(args.iter().any(|a| a.0), "each call has a writable output");
        }
    }
}
