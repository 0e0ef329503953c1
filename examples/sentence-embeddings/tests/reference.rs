//! The compiled model against sentence-transformers' own embeddings of the
//! same sentences (`export.py`'s `reference.json`): the same token ids, and
//! every embedding element within 1e-5, for both exports.
#![cfg(model)]
use example_sentence_embeddings::{model_dir, tokenize, tokenizer, Model, DIM, SEQ_LEN};

#[test]
fn embeddings_match_sentence_transformers() {
    let path = model_dir().join("reference.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let reference: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(reference["seq_len"].as_u64(), Some(SEQ_LEN as u64));
    let t = tokenizer().unwrap();
    let sentences = reference["sentences"].as_array().unwrap();
    for xnnpack in [false, true] {
        let mut model = Model::open(xnnpack).unwrap();
        let mut worst = 0f32;
        for (k, s) in sentences.iter().enumerate() {
            let (ids, mask) = tokenize(&t, s.as_str().unwrap()).unwrap();
            let want_ids: Vec<i64> = reference["input_ids"][k]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect();
            assert_eq!(ids[0].to_vec(), want_ids, "sentence {k}: token ids");
            let got = model.embed(&ids, &mask).unwrap();
            let want = reference["embeddings"][k].as_array().unwrap();
            assert_eq!(want.len(), DIM);
            for (g, w) in got.iter().zip(want) {
                worst = worst.max((g - w.as_f64().unwrap() as f32).abs());
            }
        }
        println!(
            "{}: largest difference {worst:e}",
            if xnnpack { "xnnpack" } else { "portable" }
        );
        assert!(worst <= 1e-5, "xnnpack {xnnpack}: largest difference {worst}");
    }
}
