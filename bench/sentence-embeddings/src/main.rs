//! all-MiniLM-L6-v2 with candle's BERT (`candle-transformers`), loaded from
//! the same `model.safetensors` that ptec's export came from, on the same
//! token ids: the mean over the unmasked tokens, normalized, as
//! `examples/sentence-embeddings/export.py` exports it.
//!
//! ```text
//! bench-sentence-embeddings-candle MODEL_DIR IDS.bin MASK.bin BATCH [--iters N] [--warmup N] [--dump-output FILE]
//! ```
//!
//! IDS and MASK hold BATCH × L int64 values (little-endian). Prints one JSON
//! line with et_runner's latency keys; threads follow `RAYON_NUM_THREADS`,
//! as candle's CPU kernels do.
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use std::time::Instant;

fn read_i64(path: &str) -> Vec<i64> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(
        bytes.len().is_multiple_of(8),
        "{path}: {} bytes is not a whole number of int64",
        bytes.len()
    );
    bytes
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn embed(model: &BertModel, ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
    let types = ids.zeros_like()?;
    let hidden = model.forward(ids, &types, Some(mask))?;
    let weight = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
    let sum = hidden.broadcast_mul(&weight)?.sum(1)?;
    let count = weight.sum(1)?.clamp(1e-9, f64::INFINITY)?;
    let mean = sum.broadcast_div(&count)?;
    let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::INFINITY)?;
    mean.broadcast_div(&norm)
}

fn main() -> candle_core::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 {
        eprintln!(
            "usage: {} MODEL_DIR IDS.bin MASK.bin BATCH [--iters N] [--warmup N] [--dump-output FILE]",
            args[0]
        );
        std::process::exit(2);
    }
    let (dir, batch) = (&args[1], args[4].parse::<usize>().expect("BATCH"));
    let (mut iters, mut warmup, mut dump) = (20usize, 3usize, None);
    let mut rest = args[5..].iter();
    while let Some(flag) = rest.next() {
        let value = rest.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--iters" => iters = value.parse().expect("--iters"),
            "--warmup" => warmup = value.parse().expect("--warmup"),
            "--dump-output" => dump = Some(value.clone()),
            other => panic!("unknown option {other}"),
        }
    }
    let device = Device::Cpu;
    let config: Config = serde_json::from_str(&std::fs::read_to_string(format!("{dir}/config.json"))?)
        .map_err(candle_core::Error::wrap)?;
    let load = Instant::now();
    // SAFETY: the weights file is mapped read-only and not changed while the
    // benchmark runs.
    let vb =
        unsafe { VarBuilder::from_mmaped_safetensors(&[format!("{dir}/model.safetensors")], DType::F32, &device)? };
    let model = BertModel::load(vb, &config)?;
    let load_us = load.elapsed().as_secs_f64() * 1e6;
    let (ids, mask) = (read_i64(&args[2]), read_i64(&args[3]));
    assert_eq!(ids.len(), mask.len(), "IDS and MASK differ in length");
    assert!(
        ids.len().is_multiple_of(batch),
        "{} ids do not split into {batch} rows",
        ids.len()
    );
    let len = ids.len() / batch;
    let ids = Tensor::from_vec(ids, (batch, len), &device)?;
    let mask = Tensor::from_vec(mask, (batch, len), &device)?;
    for _ in 0..warmup {
        embed(&model, &ids, &mask)?;
    }
    let mut times = Vec::with_capacity(iters);
    let mut out = None;
    for _ in 0..iters {
        let t = Instant::now();
        out = Some(embed(&model, &ids, &mask)?);
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    if let (Some(path), Some(out)) = (dump, out) {
        let values = out.flatten_all()?.to_vec1::<f32>()?;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(path, bytes)?;
    }
    let threads = candle_core::utils::get_num_threads();
    println!(
        "{{\"model\": \"candle bert {dir}\", \"batch\": {batch}, \"threads\": {threads}, \"load_us\": {load_us:.1}, \"iters\": {iters}, \"median_us\": {:.1}, \"min_us\": {:.1}, \"max_us\": {:.1}}}",
        times[times.len() / 2],
        times[0],
        times[times.len() - 1]
    );
    Ok(())
}
