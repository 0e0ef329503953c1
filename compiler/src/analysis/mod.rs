//! What the passes, the memory plan and code generation ask of a method:
//! where each value is used ([`uses`]), how long it lives ([`lives`]), and
//! which values share planned bytes ([`alias`]); and of a program, what
//! mutable state its methods share ([`shared`]).
pub(crate) mod alias;
pub(crate) mod lives;
pub(crate) mod shared;
pub(crate) mod uses;

/// Small methods for the tests of the passes that place bytes.
#[cfg(test)]
pub(crate) mod test_methods {
    use crate::ir::*;

    /// A tensor of `bytes` bytes.
    pub(crate) fn bytes(bytes: usize, placement: Placement) -> Value {
        Value::Tensor(Tensor {
            dtype: ScalarType::Byte,
            sizes: vec![bytes],
            dim_order: vec![0],
            dynamism: Dynamism::Static,
            placement,
        })
    }

    /// A method with no values or instructions yet, of one planned buffer
    /// (buffer 1) of `buffer_bytes` bytes.
    pub(crate) fn empty(buffer_bytes: u64) -> Method {
        Method {
            name: "forward".into(),
            values: vec![],
            inputs: vec![],
            outputs: vec![],
            instructions: vec![],
            operators: vec![],
            delegates: vec![],
            buffer_sizes: vec![0, buffer_bytes],
            program_buffers: 2,
            temporaries_buffer: None,
            stacktraces: None,
            origins: Vec::new(),
            read_operators: Vec::new(),
            delegate_outputs: Default::default(),
            channels_last: Default::default(),
        }
    }

    /// A method of one 1024-byte planned buffer whose instructions are
    /// calls naming the values listed (the last one as what they write).
    pub(crate) fn calls(values: Vec<Value>, calls: &[&[usize]], inputs: &[usize], outputs: &[usize]) -> Method {
        Method {
            values,
            inputs: inputs.to_vec(),
            outputs: outputs.to_vec(),
            instructions: calls
                .iter()
                .map(|a| Instruction::Kernel {
                    op: 0,
                    args: a.to_vec(),
                })
                .collect(),
            operators: vec![Operator {
                name: "aten::op".into(),
                overload: "out".into(),
            }],
            ..empty(1024)
        }
    }
}
