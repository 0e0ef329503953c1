"""The chat benchmark's reference engines (bench/chat.sh drives them):
one timed chat turn of SmolLM2-135M-Instruct, as `chat-bench` does it for
ptec, printing one JSON line with the same keys.

  chat_ref.py et PTE THREADS PROMPT DECODE MESSAGE_FILE DIR
  chat_ref.py llamacpp GGUF THREADS PROMPT DECODE MESSAGE_FILE DIR

`et` runs an export_llama .pte on ExecuTorch's runtime (its Python
bindings, with the quantized and `llama::` kernels loaded) and tokenizes
with the `tokenizers` package on DIR/tokenizer.json; `llamacpp` runs the
GGUF on llama.cpp (llama-cpp-python), which tokenizes and detokenizes.
Both render DIR/chat_template.jinja with jinja2 the way transformers does,
for the user message in MESSAGE_FILE (`chat-bench message PROMPT`), and
check that the prompt is PROMPT tokens.

The protocol is chat-bench's: load, a one-token warm-up call at position 0
(in load_s), then one turn: render, tokenize, prefill, greedy decode of
DECODE tokens with EOS ignored, streaming detokenization. As in ptec-llm,
prefill_tok_s and ttft_s are timed from the end of tokenization (prefill
to the first sampled token), first_text_s and total_s from the start of
the turn (rendering); decode_tok_s is (new_tokens - 1) over the decode
steps after the first token, detokenization included. peak_rss_kb is the
process's (interpreter and libraries included); baseline_rss_kb is the
peak right after the imports, before the model is loaded. Runs with the
venv that has the engine: examples/chat/setup.sh's for `et`, bench/chat.sh's
llama.cpp venv for `llamacpp` (this file imports each engine's packages
only for that engine).
"""
import codecs
import ctypes
import json
import os
import resource
import sys
import time
from pathlib import Path


def rss_kb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def render(dir, message):
    """DIR/chat_template.jinja for one user message, with the generation
    prompt, as transformers' apply_chat_template renders it."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    template = env.from_string((Path(dir) / "chat_template.jinja").read_text())
    return template.render(messages=[{"role": "user", "content": message}], add_generation_prompt=True)


class Turn:
    """The clock of one turn, as ptec-llm's Stats keeps it."""

    def __init__(self, prompt, decode):
        self.prompt, self.decode = prompt, decode
        self.first_text = None
        self.answer = []

    def start(self):
        self.t0 = time.perf_counter()

    def tokenized(self, ids):
        if len(ids) != self.prompt:
            sys.exit(f"the prompt is {len(ids)} tokens, not {self.prompt}")
        self.t1 = time.perf_counter()

    def text(self, piece):
        if piece and self.first_text is None:
            self.first_text = time.perf_counter() - self.t0
        self.answer.append(piece)

    def run(self, prefill, step, pieces, finish):
        """prefill() -> first token; step(token, pos) -> next token;
        pieces(token) -> text; finish() -> the rest of the text."""
        first = prefill()
        self.prefill_s = time.perf_counter() - self.t1
        self.ttft_s = self.prefill_s
        t = time.perf_counter()
        tokens, pos, nxt = [], self.prompt, first
        while True:
            tokens.append(nxt)
            self.text(pieces(nxt))
            if len(tokens) >= self.decode:
                break
            nxt = step(nxt, pos)
            pos += 1
        self.decode_s = time.perf_counter() - t
        self.text(finish())
        self.total_s = time.perf_counter() - self.t0
        return tokens

    def report(self, load_s, new_tokens, baseline):
        steps = new_tokens - 1
        out = {
            "prompt_tokens": self.prompt,
            "new_tokens": new_tokens,
            "load_s": round(load_s, 6),
            "ttft_s": round(self.ttft_s, 6),
            "first_text_s": round(self.first_text, 6) if self.first_text is not None else float("nan"),
            "prefill_tok_s": round(self.prompt / max(self.prefill_s, 1e-9), 3),
            "decode_tok_s": round(steps / max(self.decode_s, 1e-9), 3),
            "total_s": round(self.total_s, 6),
            "peak_rss_kb": rss_kb(),
            "baseline_rss_kb": baseline,
        }
        print(json.dumps(out))
        if os.environ.get("CHAT_TEXT"):
            print(repr("".join(self.answer)), file=sys.stderr)


def et(pte, threads, prompt, decode, message, dir):
    import executorch.kernels.quantized  # noqa: F401
    import torch
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401
    from executorch.extension.pybindings import portable_lib
    from executorch.runtime import Runtime
    from tokenizers import Tokenizer
    from tokenizers.decoders import DecodeStream

    baseline = rss_kb()
    started = time.perf_counter()
    torch.set_num_threads(threads)
    portable_lib._unsafe_reset_threadpool(threads)
    tok = Tokenizer.from_file(str(Path(dir) / "tokenizer.json"))
    method = Runtime.get().load_program(Path(pte)).load_method("forward")
    # Prompts go in chunks of at most the tokens input's bound (export_llama
    # makes it max_seq_len - 1, 127 here; ptec-llm chunks the same way).
    chunk = method.metadata.input_tensor_meta(0).sizes()[1]

    def forward(ids, pos):
        return method.execute([torch.tensor([ids], dtype=torch.long), torch.tensor([pos], dtype=torch.long)])[0]

    forward([1], 0)  # the warm-up; the next call at 0 overwrites the cache
    load_s = time.perf_counter() - started

    turn = Turn(prompt, decode)
    turn.start()
    ids = tok.encode(render(dir, message), add_special_tokens=False).ids
    turn.tokenized(ids)

    def prefill():
        for at in range(0, len(ids), chunk):
            logits = forward(ids[at : at + chunk], at)
        return int(logits[0].argmax())

    stream = DecodeStream(skip_special_tokens=True)
    tokens = turn.run(
        prefill,
        lambda t, pos: int(forward([t], pos)[0].argmax()),
        lambda t: stream.step(tok, t),
        lambda: "",
    )
    turn.report(load_s, len(tokens), baseline)


def llamacpp(gguf, threads, prompt, decode, message, dir):
    import numpy as np
    import llama_cpp
    from llama_cpp import Llama

    baseline = rss_kb()
    started = time.perf_counter()
    llm = Llama(
        model_path=gguf,
        n_ctx=512,
        n_batch=512,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
    )
    n_vocab = llm.n_vocab()
    ctx = llm._ctx

    def logits():
        # The last evaluated token's logits, in llama.cpp's buffer (no copy).
        return np.ctypeslib.as_array(ctx.get_logits_ith(-1), shape=(n_vocab,))

    llm.eval([1])  # the warm-up
    llm.reset()
    load_s = time.perf_counter() - started

    turn = Turn(prompt, decode)
    turn.start()
    # The template's text, tokenized by llama.cpp with special tokens
    # parsed (<|im_start|> is one token) and no BOS added (the GGUF says
    # add_bos_token false; the template starts with <|im_start|>).
    ids = llm.tokenize(render(dir, message).encode(), add_bos=False, special=True)
    turn.tokenized(ids)

    def prefill():
        llm.eval(ids)
        return int(logits().argmax())

    def step(t, pos):
        assert llm.n_tokens == pos
        llm.eval([t])
        return int(logits().argmax())

    # Pieces are bytes (special tokens, EOS among them, give none, as with
    # skip_special_tokens); a character can span tokens.
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
    vocab = llm._model.vocab
    buf = ctypes.create_string_buffer(64)

    def piece(t):
        n = llama_cpp.llama_token_to_piece(vocab, t, buf, len(buf), 0, False)
        assert 0 <= n <= len(buf)
        return utf8.decode(buf.raw[:n])

    tokens = turn.run(prefill, step, piece, lambda: utf8.decode(b"", final=True))
    turn.report(load_s, len(tokens), baseline)


def main():
    a = sys.argv
    if len(a) != 8 or a[1] not in ("et", "llamacpp"):
        sys.exit(__doc__)
    engine = {"et": et, "llamacpp": llamacpp}[a[1]]
    message = Path(a[6]).read_text().rstrip("\n")
    engine(a[2], int(a[3]), int(a[4]), int(a[5]), message, a[7])


if __name__ == "__main__":
    main()
