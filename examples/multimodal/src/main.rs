//! `cargo run -p example-multimodal [-- --xnnpack]`: a tiny random-weight
//! LLaVA looks at a made-up 12 × 16 image between two short prompts and
//! answers with 6 token ids, greedily. The weights are random, so the
//! answer is too; `tests/turn.rs` checks it is ExecuTorch's.
use example_multimodal::{Error, Image, Llava, Sampling, Vlm, XnnpackLlava};

fn main() -> Result<(), Error> {
    let xnnpack = std::env::args().any(|a| a == "--xnnpack");
    let (height, width) = (12, 16);
    // A gradient per channel.
    let data: Vec<u8> = (0..3 * height * width)
        .map(|i| ((i % width) * 16 + (i / width % height) * 8 + i / (height * width) * 64) as u8)
        .collect();
    let image = Image {
        height,
        width,
        data: &data,
    };
    let (before, after) = ([1, 17, 5, 9], [12, 20, 7]);
    let tokens = if xnnpack {
        Vlm::new(&mut *XnnpackLlava::boxed())?.generate(&image, &before, &after, 6, &Sampling::greedy())?
    } else {
        Vlm::new(&mut *Llava::boxed())?.generate(&image, &before, &after, 6, &Sampling::greedy())?
    };
    println!("prompt: {before:?} <image {height}x{width}> {after:?}");
    println!("generated: {tokens:?}");
    Ok(())
}
