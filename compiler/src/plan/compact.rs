//! The file bytes generated code embeds, compacted.
//!
//! A program file holds much that generated code never reads: the
//! flatbuffer itself, and (once the compiler has prepared filters and packed
//! weights from them) the original weights. Embedding the file whole would
//! put both the weights and their prepared copy in the binary. So the plan
//! predicts which bytes the code will read (`plan::reads`), and this copies
//! exactly the data ranges holding those into one block,
//! [`DataSource::Embedded`], and moves the ranges only the compiler reads
//! to [`DataSource::PrepareOnly`], which is never embedded. Every data
//! reference of the program is rewritten to its new place
//! ([`Compacted::relocate`] moves the plan's), so code generation emits the
//! compacted offsets without knowing about any of this.
use crate::ir::*;
use crate::read::Files;
use std::collections::BTreeSet;

/// Where generated code reads file bytes: `(source, byte offset)` of the
/// start of each read.
pub type Reads = BTreeSet<(DataSource, usize)>;

/// A program whose data references point into [`Compacted::embedded`] and
/// [`Compacted::prepare_only`] instead of its files.
#[derive(Clone, Debug)]
pub struct Compacted {
    pub program: Program,
    pub suites: Vec<TestSuite>,
    /// The bytes of [`DataSource::Embedded`]: every range generated code
    /// reads.
    pub embedded: Vec<u8>,
    /// The bytes of [`DataSource::PrepareOnly`].
    pub prepare_only: Vec<u8>,
    /// Where each run of file bytes went.
    runs: Vec<Run>,
}

impl Compacted {
    /// Where the file byte at `offset` of `source` went; anything else (no
    /// file, or no data reference there) stays as it is.
    pub fn relocate(&self, source: DataSource, offset: usize) -> (DataSource, usize) {
        relocate(&self.runs, source, offset)
    }
}

/// [`Compacted::relocate`] over `runs`.
fn relocate(runs: &[Run], source: DataSource, offset: usize) -> (DataSource, usize) {
    match run_index(runs, source, offset).map(|i| runs[i]) {
        Some(r) if from_file(source) => (r.to, r.at + (offset - r.start)),
        _ => (source, offset),
    }
}

/// A run of bytes of one source file holding one or more (overlapping)
/// data references, moved as a unit.
#[derive(Clone, Copy, Debug)]
struct Run {
    source: DataSource,
    start: usize,
    end: usize,
    /// Whether generated code reads it.
    read: bool,
    /// Where it goes: `Embedded` or `PrepareOnly`, at this offset.
    to: DataSource,
    at: usize,
}

/// Every data reference of the program and suites (method values, delegate
/// blobs, test cases), with whether generated code reads it whatever
/// `reads` says: initial values of mutable buffers, delegate blobs and test
/// data are always embedded; constants only when something reads them.
fn each_ref(program: &mut Program, suites: &mut [TestSuite], mut f: impl FnMut(&mut DataRef, bool)) {
    for m in &mut program.methods {
        for v in &mut m.values {
            if let Value::Tensor(t) = v {
                match &mut t.placement {
                    Placement::Constant { data } | Placement::External { data: Some(data), .. } => f(data, false),
                    Placement::Mutable { initial, .. } => f(initial, true),
                    _ => {}
                }
            }
        }
        for d in &mut m.delegates {
            f(&mut d.processed, true);
        }
    }
    let values = suites
        .iter_mut()
        .flat_map(|s| &mut s.cases)
        .flat_map(|c| c.inputs.iter_mut().chain(&mut c.expected));
    for v in values {
        if let TestValue::Tensor { data, .. } = v {
            f(data, true);
        }
    }
}

/// Whether a reference points into one of the files read (the only kind a
/// program has before compaction).
fn from_file(source: DataSource) -> bool {
    matches!(source, DataSource::Program | DataSource::External(_))
}

/// Appends `bytes` to `out` at an offset congruent to `start` modulo 64, so
/// every alignment the data had in its file (up to a cache line) holds in
/// the block as well; returns that offset.
fn place(out: &mut Vec<u8>, start: usize, bytes: &[u8]) -> usize {
    let mut at = out.len().next_multiple_of(64) + start % 64;
    if at >= out.len() + 64 {
        at -= 64;
    }
    out.resize(at, 0);
    out.extend_from_slice(bytes);
    at
}

/// Compacts the data of `program` and `suites` (see the module doc): `reads`
/// are the reads the code will make (`plan::reads`); `files` the files'
/// bytes. Fails, naming the reference, if one lies outside its file (the
/// checks before generation rule that out).
pub fn compact(program: &Program, suites: &[TestSuite], reads: &Reads, files: &Files<'_>) -> Result<Compacted, String> {
    let mut program = program.clone();
    let mut suites = suites.to_vec();
    let mut refs = Vec::new();
    each_ref(&mut program, &mut suites, |r, always| {
        if from_file(r.source) {
            refs.push((r.source, r.offset, r.offset.saturating_add(r.len), always));
        }
    });
    refs.sort_unstable_by_key(|&(s, a, b, _)| (s, a, b));

    // Overlapping references share a run.
    let mut runs: Vec<Run> = Vec::new();
    for (source, start, end, always) in refs {
        match runs.last_mut() {
            Some(r) if r.source == source && start < r.end => {
                r.end = r.end.max(end);
                r.read |= always;
            }
            _ => runs.push(Run {
                source,
                start,
                end,
                read: always,
                to: DataSource::Embedded,
                at: 0,
            }),
        }
    }
    for &(source, offset) in reads {
        if let Some(i) = run_index(&runs, source, offset) {
            runs[i].read = true;
        }
    }

    let (mut embedded, mut prepare_only) = (Vec::new(), Vec::new());
    for r in &mut runs {
        let file = files.bytes(r.source);
        let bytes = file.get(r.start..r.end).ok_or_else(|| {
            format!(
                "data at bytes {}..{} of {:?} lies outside its file ({} bytes)",
                r.start,
                r.end,
                r.source,
                file.len()
            )
        })?;
        // Empty runs cost nothing where they are.
        if r.read || r.start == r.end {
            r.at = place(&mut embedded, r.start, bytes);
        } else {
            r.to = DataSource::PrepareOnly;
            r.at = place(&mut prepare_only, r.start, bytes);
        }
    }

    each_ref(&mut program, &mut suites, |d, _| {
        if from_file(d.source) {
            assert!(
                run_index(&runs, d.source, d.offset).is_some(),
                "every reference lies in the run made of it"
            );
            (d.source, d.offset) = relocate(&runs, d.source, d.offset);
        }
    });
    Ok(Compacted {
        program,
        suites,
        embedded,
        prepare_only,
        runs,
    })
}

/// The run of `source` holding byte `offset` (or starting there, for an
/// empty one).
fn run_index(runs: &[Run], source: DataSource, offset: usize) -> Option<usize> {
    let i = runs
        .partition_point(|r| (r.source, r.start) <= (source, offset))
        .checked_sub(1)?;
    let r = &runs[i];
    (r.source == source && (offset < r.end || offset == r.start)).then_some(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn constant(offset: usize, len: usize) -> Value {
        Value::Tensor(Tensor {
            dtype: ScalarType::Float,
            sizes: vec![len / 4],
            dim_order: vec![0],
            dynamism: Dynamism::Static,
            placement: Placement::Constant {
                data: DataRef {
                    source: DataSource::Program,
                    offset,
                    len,
                },
            },
        })
    }

    fn program(values: Vec<Value>) -> Program {
        Program {
            version: 0,
            range: DataRef {
                source: DataSource::Program,
                offset: 0,
                len: 0,
            },
            methods: vec![Method {
                name: "forward".into(),
                values,
                inputs: vec![],
                outputs: vec![],
                instructions: vec![],
                operators: vec![],
                delegates: vec![],
                buffer_sizes: vec![0],
                program_buffers: 1,
                temporaries_buffer: None,
                stacktraces: None,
                origins: Vec::new(),
                read_operators: Vec::new(),
                delegate_outputs: Default::default(),
                channels_last: Default::default(),
            }],
            segments: vec![],
            named_data: vec![],
            external_files: vec![],
        }
    }

    fn data(v: &Value) -> DataRef {
        match &v.as_tensor().unwrap().placement {
            Placement::Constant { data } => *data,
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn only_read_ranges_are_embedded_and_keep_their_alignment() {
        let file: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        // Value 0 is read; value 1 only prepared from; value 2 overlaps
        // value 0 and so moves with it; value 3 is unread and overlaps
        // nothing read.
        let p = program(vec![
            constant(104, 40),
            constant(300, 64),
            constant(120, 40),
            constant(600, 8),
        ]);
        let reads: Reads = [(DataSource::Program, 104)].into();
        let c = compact(&p, &[], &reads, &Files::new(&file, &[])).unwrap();
        let v = &c.program.methods[0].values;
        let (a, b, d, e) = (data(&v[0]), data(&v[1]), data(&v[2]), data(&v[3]));
        assert_eq!(a.source, DataSource::Embedded);
        assert_eq!(d.source, DataSource::Embedded);
        assert_eq!(b.source, DataSource::PrepareOnly);
        assert_eq!(e.source, DataSource::PrepareOnly);
        // The run 104..160 holds values 0 and 2, nothing else.
        assert_eq!(c.embedded.len(), a.offset + 56);
        assert_eq!(d.offset - a.offset, 16);
        for (r, orig) in [(a, 104), (d, 120)] {
            assert_eq!(r.offset % 64, orig % 64);
            assert_eq!(&c.embedded[r.offset..r.offset + r.len], &file[orig..orig + r.len]);
        }
        for (r, orig) in [(b, 300), (e, 600)] {
            assert_eq!(r.offset % 64, orig % 64);
            assert_eq!(&c.prepare_only[r.offset..r.offset + r.len], &file[orig..orig + r.len]);
        }
    }

    #[test]
    fn a_reference_outside_its_file_is_an_error() {
        let p = program(vec![constant(96, 64)]);
        let e = compact(&p, &[], &Reads::new(), &Files::new(&[0; 100], &[])).unwrap_err();
        assert!(e.contains("96..160") && e.contains("100 bytes"), "{e}");
    }

    /// The byte ranges in `file` of the weights the compiler prepares kept
    /// tensors from (see `prepare::kept_arguments`).
    fn preparation_sources(file: &[u8]) -> Vec<(usize, usize)> {
        let mut loaded = crate::load(file, &[]).unwrap();
        crate::transform(&mut loaded, &crate::Options::new()).unwrap();
        let mut ranges = Vec::new();
        for m in &loaded.program.unwrap().methods {
            for ins in &m.instructions {
                let Instruction::Kernel { op, args } = ins else {
                    continue;
                };
                let name = m.operators[*op].full_name();
                for (kept, sources) in crate::plan::prepare::kept_arguments(&name, args.len()) {
                    let kept_is_tensor = matches!(m.values.get(args[kept]), Some(Value::Tensor(_)));
                    // The weight comes first.
                    match m.values.get(args[sources[0]]) {
                        Some(Value::Tensor(t)) if kept_is_tensor => {
                            if let Placement::Constant { data } = &t.placement {
                                ranges.push((data.offset, data.offset + data.len));
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        ranges
    }

    #[test]
    fn weights_only_prepared_from_stay_out_of_the_binary() {
        for name in [
            "conv.bpte",
            "channels_last.bpte",
            "xnnpack_conv.bpte",
            "xnnpack_ops.bpte",
        ] {
            let file = std::fs::read(format!("{}/../tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
            let embedded = crate::compile(&crate::Input::new(&file, name), &crate::Options::new()).unwrap();
            let files_part = &embedded.prepared()[..embedded.files_len()];
            let sources = preparation_sources(&file);
            assert!(!sources.is_empty(), "{name}: no weights to prepare from");
            for (a, b) in sources {
                let weight = &file[a..b];
                // Weights of a few floats could match anything by chance.
                if weight.len() < 64 {
                    continue;
                }
                assert!(
                    !files_part.windows(weight.len()).any(|w| w == weight),
                    "{name}: the weight at bytes {a}..{b} is embedded"
                );
            }
            assert!(
                embedded.files_len() < file.len() / 2,
                "{name}: {} of the file's {} bytes embedded",
                embedded.files_len(),
                file.len()
            );
        }
    }
}
