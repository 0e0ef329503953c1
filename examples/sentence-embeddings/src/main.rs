//! Embeds a few sentences (or the arguments) and prints their cosine
//! similarity matrix: `cargo run --release [-- --xnnpack] [SENTENCE...]`.
#[cfg(model)]
fn main() -> Result<(), String> {
    use example_sentence_embeddings::{cosine, tokenize, tokenizer, Model};
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let xnnpack = args.iter().any(|a| a == "--xnnpack");
    args.retain(|a| a != "--xnnpack");
    if args.is_empty() {
        args = [
            "The cat sits outside.",
            "A kitten is sitting in the garden.",
            "A man is playing guitar.",
            "Someone plays a musical instrument.",
            "The new movie is awesome.",
        ]
        .map(String::from)
        .to_vec();
    }
    let t = tokenizer()?;
    let mut model = Model::open(xnnpack)?;
    let mut embeddings = Vec::new();
    for s in &args {
        let (ids, mask) = tokenize(&t, s)?;
        embeddings.push(model.embed(&ids, &mask)?);
    }
    println!(
        "cosine similarity ({}):",
        if xnnpack { "XNNPACK export" } else { "portable export" }
    );
    for (i, a) in embeddings.iter().enumerate() {
        let row: Vec<String> = embeddings.iter().map(|b| format!("{:5.2}", cosine(a, b))).collect();
        println!("{}  [{i}] {}", row.join(" "), args[i]);
    }
    Ok(())
}

#[cfg(not(model))]
fn main() {
    eprintln!(
        "no model in {}: make it with\n  python examples/sentence-embeddings/export.py\n(see examples/sentence-embeddings/export.py for the packages it needs)",
        example_sentence_embeddings::model_dir().display()
    );
    std::process::exit(1);
}
