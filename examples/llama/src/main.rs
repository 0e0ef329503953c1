//! `cargo run -p example-llama [-- PROMPT]`: a tiny random-weight Llama
//! continues the prompt (by default "the cat sat"), greedily; prints the
//! token ids and the text. The weights are random, so the text is too.
fn main() -> Result<(), tokenizers::Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let text = if args.is_empty() {
        "the cat sat".to_string()
    } else {
        args.join(" ")
    };
    let tokenizer = example_llama::tokenizer();
    let prompt: Vec<i64> = tokenizer
        .encode(text.as_str(), false)?
        .get_ids()
        .iter()
        .map(|&id| id as i64)
        .collect();
    let mut model = example_llama::Llama::boxed();
    let tokens = example_llama::generate(&mut *model, &prompt, 8)?;
    let ids: Vec<u32> = tokens.iter().map(|&t| t as u32).collect();
    println!("prompt: {text:?} = {prompt:?}");
    println!("generated: {tokens:?} = {:?}", tokenizer.decode(&ids, true)?);
    Ok(())
}
