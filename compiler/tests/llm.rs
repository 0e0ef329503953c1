//! The LLM export's KV caches: what `llama::update_cache` writes in place
//! is state, zeroed by `init` (construction and `reset`), and nothing else
//! the generated code keeps is placed over it.
use ptec::ir::{Instruction, Placement, Value};
use std::path::PathBuf;

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures")
            .join(name),
    )
    .unwrap()
}

/// The planned byte ranges (buffer 1, from 0) of the caches the method's
/// `update_cache` calls write.
fn cache_ranges(bytes: &[u8]) -> Vec<(u64, u64)> {
    let loaded = ptec::load(bytes, &[]).unwrap();
    let m = &loaded.program.as_ref().unwrap().methods[0];
    let mut ranges: Vec<(u64, u64)> = m
        .instructions
        .iter()
        .filter_map(|ins| match ins {
            Instruction::Kernel { op, args } if m.operators[*op].full_name() == "llama::update_cache.out" => {
                Some(args[1])
            }
            _ => None,
        })
        .map(|v| match &m.values[v] {
            Value::Tensor(t) => match t.placement {
                Placement::Planned { buffer: 1, offset } => (offset, offset + t.nbytes() as u64),
                ref p => panic!("cache value {v} is {p:?}"),
            },
            other => panic!("cache value {v} is a {}", other.kind()),
        })
        .collect();
    ranges.sort_unstable();
    ranges.dedup();
    ranges
}

#[test]
fn init_zeroes_exactly_the_kv_caches() {
    for name in ["llama_kv.pte", "llama_dynamic.pte", "xnnpack_llama_dynamic.pte"] {
        let bytes = fixture(name);
        let caches = cache_ranges(&bytes);
        // Two layers, a key and a value cache each.
        assert_eq!(caches.len(), 4, "{name}: {caches:?}");
        let input = ptec::Input::new(&bytes, name);
        let code = ptec::compile(&input, &ptec::Options::new())
            .and_then(|o| o.to_source())
            .unwrap();
        let init = code
            .split("fn init(")
            .nth(1)
            .unwrap()
            .split("fn execute(")
            .next()
            .unwrap();
        let mut zeroed: Vec<(u64, u64)> = init
            .lines()
            .filter_map(|l| {
                let l = l.trim().strip_prefix("self.arena.0[")?.strip_suffix("].fill(0);")?;
                let (a, b) = l.split_once("..")?;
                Some((
                    a.trim_end_matches("usize").parse().ok()?,
                    b.trim_end_matches("usize").parse().ok()?,
                ))
            })
            .collect();
        zeroed.sort_unstable();
        // The arena starts at the plan's first buffer: offsets agree.
        assert_eq!(zeroed, caches, "{name}");
    }
}
