//! `cargo run -p example-llama [-- TOKEN_ID...]`: the token ids a tiny
//! random-weight Llama continues the prompt with. (Its vocabulary has no
//! text: it is a test model, so ids are what there is to print.)
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<i64> = std::env::args().skip(1).map(|a| a.parse()).collect::<Result<_, _>>()?;
    let prompt = if args.is_empty() { vec![3, 14, 15, 9, 26] } else { args };
    let mut model = example_llama::Llama::boxed();
    let tokens = example_llama::generate(&mut *model, &prompt, 8)?;
    println!("prompt: {prompt:?}");
    println!("generated: {tokens:?}");
    Ok(())
}
