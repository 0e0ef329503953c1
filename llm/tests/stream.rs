//! Streaming detokenization on vocabularies that split characters across
//! tokens: a byte-level BPE of single bytes (as GPT-2 and SmolLM2 write
//! bytes) and a byte-fallback BPE (as Llama 2 and Mistral), whose decoder
//! also drops the first token's leading space.
use ptec_llm::{StreamDecoder, Tokenizer};
use serde_json::json;

const TEXT: &str = "héllo wörld, 世界 says 🦀! ça va? ü";

/// GPT-2's map from bytes to printable characters.
fn byte_chars() -> Vec<char> {
    let mut printable: Vec<u32> = (b'!' as u32..=b'~' as u32)
        .chain(0xa1..=0xac)
        .chain(0xae..=0xff)
        .collect();
    let mut chars: Vec<u32> = printable.clone();
    let mut n = 0;
    for b in 0..256u32 {
        if !printable.contains(&b) {
            printable.push(b);
            chars.push(256 + n);
            n += 1;
        }
    }
    let mut out = vec!['\0'; 256];
    for (b, c) in printable.iter().zip(chars) {
        out[*b as usize] = char::from_u32(c).unwrap();
    }
    out
}

fn byte_level() -> Tokenizer {
    let vocab: serde_json::Map<String, serde_json::Value> = byte_chars()
        .iter()
        .enumerate()
        .map(|(i, c)| (c.to_string(), json!(i)))
        .collect();
    let doc = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": []}
    });
    Tokenizer::from_json(&doc.to_string()).unwrap()
}

fn byte_fallback() -> Tokenizer {
    let mut vocab = serde_json::Map::new();
    vocab.insert("<unk>".into(), json!(0));
    for b in 0..256 {
        vocab.insert(format!("<0x{b:02X}>"), json!(1 + b));
    }
    for (i, piece) in [
        "▁", "h", "l", "o", "w", "r", "d", "s", "a", "y", "v", "c", ",", "!", "?",
    ]
    .iter()
    .enumerate()
    {
        vocab.insert(piece.to_string(), json!(257 + i));
    }
    let doc = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": null, "post_processor": null,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
                  "vocab": vocab, "merges": []}
    });
    Tokenizer::from_json(&doc.to_string()).unwrap()
}

fn check(tok: &Tokenizer) {
    let ids = tok.encode(TEXT, false).unwrap();
    // Characters are split across tokens.
    assert!(ids.len() > TEXT.chars().count(), "{} ids", ids.len());
    let full = tok.decode(&ids, true).unwrap();
    assert_eq!(full, TEXT);
    let mut d = StreamDecoder::new(true);
    let mut pieces = Vec::new();
    for &id in &ids {
        pieces.push(d.push(tok, id).unwrap());
    }
    pieces.push(d.finish(tok).unwrap());
    assert_eq!(pieces.concat(), full);
    // No piece shows half a character.
    assert!(pieces.iter().all(|p| !p.contains('\u{fffd}')), "{pieces:?}");
    // Text streams: most tokens that end a character give a piece.
    assert!(pieces.iter().filter(|p| !p.is_empty()).count() >= TEXT.chars().count() / 2);
    // Cut mid-character, the held-back bytes come out as the full decode
    // shows them.
    let crab = TEXT.find('🦀').unwrap();
    let upto = ids.len() - tok.encode(&TEXT[crab..], false).unwrap().len() + 2;
    let mut d = StreamDecoder::new(true);
    let mut text = String::new();
    for &id in &ids[..upto] {
        text.push_str(&d.push(tok, id).unwrap());
    }
    assert!(!text.contains('\u{fffd}'));
    text.push_str(&d.finish(tok).unwrap());
    assert_eq!(text, tok.decode(&ids[..upto], true).unwrap());
}

#[test]
fn byte_level_pieces_concatenate_to_the_decode() {
    check(&byte_level());
}

#[test]
fn byte_fallback_pieces_concatenate_to_the_decode() {
    check(&byte_fallback());
}
