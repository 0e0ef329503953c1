//! The example's turn yields the token ids ExecuTorch's own runtime
//! yields when it chains the same program's methods on the same image and
//! prompt (`tests/fixtures/make_fixtures.py` records them, after checking
//! they are eager PyTorch's, in `llava_generation.json` and
//! `xnnpack_llava_generation.json`); bad input is an error, not a panic.
use example_multimodal::{Error, Image, Llava, Sampling, Vlm, XnnpackLlava};
use ptec_runtime::Model;

struct Turn {
    sizes: Vec<usize>,
    image: Vec<u8>,
    before: Vec<u32>,
    after: Vec<u32>,
    tokens: Vec<u32>,
}

fn turn(file: &str) -> Turn {
    let path = format!("{}/../../tests/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let ints = |key: &str| -> Vec<u64> {
        doc[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect()
    };
    Turn {
        sizes: ints("image_sizes").into_iter().map(|x| x as usize).collect(),
        image: ints("image").into_iter().map(|x| u8::try_from(x).unwrap()).collect(),
        before: ints("before").into_iter().map(|x| x as u32).collect(),
        after: ints("after").into_iter().map(|x| x as u32).collect(),
        tokens: ints("tokens").into_iter().map(|x| x as u32).collect(),
    }
}

fn check(model: impl Model, file: &str) {
    let t = turn(file);
    assert_eq!(t.sizes.len(), 3);
    assert!(t.tokens.len() > 1);
    let image = Image {
        height: t.sizes[1],
        width: t.sizes[2],
        data: &t.image,
    };
    let mut vlm = Vlm::new(model).unwrap();
    let greedy = Sampling::greedy();
    let got = vlm
        .generate(&image, &t.before, &t.after, t.tokens.len(), &greedy)
        .unwrap();
    assert_eq!(got, t.tokens);
    // Again on the same instance: each turn starts from an empty cache.
    let got = vlm
        .generate(&image, &t.before, &t.after, t.tokens.len(), &greedy)
        .unwrap();
    assert_eq!(got, t.tokens);
}

#[test]
fn a_turn_matches_executorch() {
    check(&mut *Llava::boxed(), "llava_generation.json");
}

#[test]
fn a_turn_through_xnnpack_matches_executorch() {
    check(&mut *XnnpackLlava::boxed(), "xnnpack_llava_generation.json");
}

#[test]
fn bad_input_is_an_error() {
    let mut model = Llava::boxed();
    let mut vlm = Vlm::new(&mut *model).unwrap();
    let greedy = Sampling::greedy();
    let pixels = vec![0u8; 3 * 64 * 64];
    // An image larger than the encoder's bound.
    let big = Image {
        height: 64,
        width: 64,
        data: &pixels,
    };
    assert!(matches!(
        vlm.generate(&big, &[1], &[2], 2, &greedy),
        Err(Error::Runtime(_))
    ));
    // Data that does not fill the sizes given.
    let short = Image {
        height: 8,
        width: 8,
        data: &pixels[..10],
    };
    assert!(matches!(
        vlm.generate(&short, &[1], &[2], 2, &greedy),
        Err(Error::Runtime(_))
    ));
    let image = Image {
        height: 8,
        width: 8,
        data: &pixels[..3 * 64],
    };
    assert!(matches!(
        vlm.generate(&image, &[], &[], 2, &greedy),
        Err(Error::EmptyPrompt)
    ));
    // A token id past the vocabulary.
    assert!(vlm.generate(&image, &[1_000_000], &[2], 2, &greedy).is_err());
    // A prompt longer than the context.
    let long = vec![1u32; vlm.context() + 1];
    assert!(matches!(
        vlm.generate(&image, &long, &[], 2, &greedy),
        Err(Error::ContextFull { .. })
    ));
    // The instance still works after the errors.
    let got = vlm.generate(&image, &[1, 2], &[3], 2, &greedy).unwrap();
    assert_eq!(got.len(), 2);
}
