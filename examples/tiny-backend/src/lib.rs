//! `PtecTinyBackend`: a delegate backend for a made-up blob format, showing
//! how a program compiled by ptec calls code it does not compile itself.
//!
//! The format (written by `tests/fixtures/make_fixtures.py`) is text: a
//! header line, the number of inputs, one line per element-wise operation,
//! each appending a register (inputs are registers `0..n`), and the
//! registers the delegate outputs:
//!
//! ```text
//! ptec-tiny v1
//! inputs 2
//! mul 0 1
//! add 2 0
//! outputs 3
//! ```
//!
//! Every input and output is a float32 tensor with the same number of
//! elements; the operations run element by element.
use ptec_runtime::{Backend, BackendMessage, CompileSpec, DelegateArg, DelegateHandle, Value};

/// Registers one element's evaluation may use (inputs + operations).
const MAX_REGISTERS: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Add(usize, usize),
    Sub(usize, usize),
    Mul(usize, usize),
    Relu(usize),
}

/// A parsed blob.
#[derive(Clone, Debug, PartialEq)]
pub struct TinyProgram {
    inputs: usize,
    ops: Vec<Op>,
    outputs: Vec<usize>,
}

impl TinyProgram {
    /// Parses and validates a blob: every register an operation or output
    /// names must exist before it.
    pub fn parse(blob: &[u8]) -> Result<TinyProgram, BackendMessage> {
        let text = core::str::from_utf8(blob).map_err(|_| "the blob is not UTF-8 text")?;
        let mut lines = text.lines();
        if lines.next() != Some("ptec-tiny v1") {
            return Err("the blob does not start with `ptec-tiny v1`");
        }
        let inputs = lines
            .next()
            .and_then(|l| l.strip_prefix("inputs "))
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or("the second line must be `inputs N`")?;
        let mut ops = Vec::new();
        let mut outputs = None;
        for line in lines {
            let mut words = line.split_whitespace();
            let name = words.next().ok_or("an empty line")?;
            let regs: Vec<usize> = words
                .map(|w| w.parse::<usize>().map_err(|_| "a register is not a number"))
                .collect::<Result<_, _>>()?;
            let defined = inputs + ops.len();
            if regs.iter().any(|&r| r >= defined) {
                return Err("an operation names a register not defined before it");
            }
            let op = match (name, regs.as_slice()) {
                ("add", &[a, b]) => Op::Add(a, b),
                ("sub", &[a, b]) => Op::Sub(a, b),
                ("mul", &[a, b]) => Op::Mul(a, b),
                ("relu", &[a]) => Op::Relu(a),
                ("outputs", _) => {
                    outputs = Some(regs);
                    break;
                }
                _ => return Err("an unknown operation or a wrong number of registers"),
            };
            ops.push(op);
        }
        if inputs + ops.len() > MAX_REGISTERS {
            return Err("too many registers");
        }
        let outputs = outputs.ok_or("no `outputs` line")?;
        Ok(TinyProgram { inputs, ops, outputs })
    }

    fn eval(&self, regs: &mut [f32; MAX_REGISTERS]) {
        for (k, op) in self.ops.iter().enumerate() {
            regs[self.inputs + k] = match *op {
                Op::Add(a, b) => regs[a] + regs[b],
                Op::Sub(a, b) => regs[a] - regs[b],
                Op::Mul(a, b) => regs[a] * regs[b],
                Op::Relu(a) => regs[a].max(0.0),
            };
        }
    }
}

/// The backend: keeps every blob it was given, addressed by handle.
#[derive(Default)]
pub struct TinyBackend {
    programs: Vec<Option<TinyProgram>>,
    /// Compile specs seen by `init`, for inspection.
    pub specs_seen: Vec<(String, Vec<u8>)>,
    /// How many delegates were released.
    pub destroyed: usize,
    /// How many calls ran.
    pub executions: usize,
}

fn float_bytes(arg: &DelegateArg<'_>) -> Result<usize, BackendMessage> {
    let (dtype, len) = match arg {
        DelegateArg::Tensor(t) => (t.dtype, t.data.len()),
        DelegateArg::Value(Value::Tensor(t)) => (t.dtype, t.data.len()),
        DelegateArg::Value(_) => return Err("an argument is not a tensor"),
    };
    if dtype != ptec_runtime::ScalarType::Float {
        return Err("an argument is not a float32 tensor");
    }
    Ok(len / 4)
}

fn read(arg: &DelegateArg<'_>, i: usize) -> f32 {
    let bytes: &[u8] = match arg {
        DelegateArg::Tensor(t) => t.data,
        DelegateArg::Value(Value::Tensor(t)) => t.data,
        DelegateArg::Value(_) => &[],
    };
    bytes
        .get(4 * i..4 * i + 4)
        .map_or(0.0, |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

impl Backend for TinyBackend {
    fn id(&self) -> &str {
        "PtecTinyBackend"
    }

    fn init(&mut self, processed: &[u8], specs: &[CompileSpec]) -> Result<DelegateHandle, BackendMessage> {
        let program = TinyProgram::parse(processed)?;
        self.specs_seen
            .extend(specs.iter().map(|s| (s.key.to_string(), s.value.to_vec())));
        self.programs.push(Some(program));
        Ok(DelegateHandle(self.programs.len() - 1))
    }

    fn execute(&mut self, handle: DelegateHandle, args: &mut [DelegateArg<'_>]) -> Result<(), BackendMessage> {
        let program = self
            .programs
            .get(handle.0)
            .and_then(Option::as_ref)
            .ok_or("unknown handle")?;
        if args.len() != program.inputs + program.outputs.len() {
            return Err("the call does not pass the blob's inputs and outputs");
        }
        let (inputs, outputs) = args.split_at_mut(program.inputs);
        let n = outputs.first().map(float_bytes).transpose()?.unwrap_or(0);
        for a in inputs.iter().chain(outputs.iter()) {
            if float_bytes(a)? != n {
                return Err("the tensors differ in size");
            }
        }
        let mut regs = [0.0f32; MAX_REGISTERS];
        for i in 0..n {
            for (k, a) in inputs.iter().enumerate() {
                regs[k] = read(a, i);
            }
            program.eval(&mut regs);
            for (o, &r) in outputs.iter_mut().zip(&program.outputs) {
                let DelegateArg::Tensor(t) = o else {
                    return Err("an output is not writable");
                };
                t.data[4 * i..4 * i + 4].copy_from_slice(&regs[r].to_le_bytes());
            }
        }
        self.executions += 1;
        Ok(())
    }

    fn destroy(&mut self, handle: DelegateHandle) {
        if let Some(p) = self.programs.get_mut(handle.0) {
            *p = None;
            self.destroyed += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_format_and_rejects_bad_blobs() {
        let p = TinyProgram::parse(b"ptec-tiny v1\ninputs 2\nmul 0 1\nadd 2 0\noutputs 3\n").unwrap();
        assert_eq!(p.ops, vec![Op::Mul(0, 1), Op::Add(2, 0)]);
        assert_eq!(p.outputs, vec![3]);
        let mut regs = [0.0; MAX_REGISTERS];
        regs[0] = 2.0;
        regs[1] = 3.0;
        p.eval(&mut regs);
        assert_eq!(regs[3], 8.0);
        for bad in [
            &b"xnn\n"[..],
            b"ptec-tiny v1\ninputs x\n",
            b"ptec-tiny v1\ninputs 1\nmul 0 1\noutputs 1\n",
            b"ptec-tiny v1\ninputs 1\ndiv 0 0\noutputs 1\n",
            b"ptec-tiny v1\ninputs 1\nrelu 0\n",
        ] {
            assert!(TinyProgram::parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
