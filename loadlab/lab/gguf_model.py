"""A tiny random-weight Llama written as GGUF, the file llama.cpp's server loads: no hub download.

Its tokenizer is SentencePiece-style (`llama`) with no merges: `<unk>`, `<s>`, `</s>`, the 256
byte tokens `<0x00>`..`<0xFF>` and the word-boundary mark `▁` that SentencePiece writes for a
space. Every text falls back to bytes, so one byte (a space included) is one token, as with the
byte-level tokenizer of the tiny vLLM model; CJK characters and emoji are 3-4 tokens each, and a
random model's output is random bytes, often incomplete UTF-8 (which llama.cpp holds back).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SPACE = "\u2581"  # SentencePiece's mark for a space
UNK, BOS, EOS = 0, 1, 2


@dataclass(frozen=True)
class TinyLlama:
    """The model's shape; the defaults are the tiny vLLM model's (hidden 256, 4 layers, 2 KV heads)."""

    hidden: int = 256
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 512
    context: int = 4096  # positions it was "trained" for: llama.cpp's default -c
    seed: int = 0

    @property
    def file_name(self) -> str:
        """A name that says the shape, so that a changed shape makes a new file."""
        return f"tiny-llama-h{self.hidden}-l{self.layers}-f{self.ffn}-s{self.seed}.gguf"


def vocabulary() -> list[str]:
    """The tokens, in id order."""
    return ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), SPACE]


def make_tiny_gguf(folder: Path, shape: TinyLlama = TinyLlama()) -> Path:
    """The GGUF file of `shape` in `folder`, written unless already there (as a sibling file renamed
    into place, so that a half-written file is never taken for the model). Needs the `gguf`
    package (ImportError otherwise)."""
    path = folder / shape.file_name
    if path.exists():
        return path
    import gguf  # the writer llama.cpp's own converters use (PyPI `gguf`, also in llama.cpp's tree)

    folder.mkdir(parents=True, exist_ok=True)
    making = path.with_name(f"{path.name}.making-{os.getpid()}")
    tokens = vocabulary()
    writer = gguf.GGUFWriter(str(making), "llama")
    writer.add_name("loadlab tiny llama (random weights)")
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.hidden)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_dimension_count(shape.hidden // shape.heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    writer.add_token_types([*types, *[gguf.TokenType.BYTE] * 256, gguf.TokenType.NORMAL])
    writer.add_unk_token_id(UNK)
    writer.add_bos_token_id(BOS)
    writer.add_eos_token_id(EOS)
    writer.add_add_space_prefix(False)  # a prompt's first byte is its first token
    for name, tensor in _weights(shape, len(tokens)).items():
        writer.add_tensor(name, tensor)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        making.rename(path)
    finally:
        making.unlink(missing_ok=True)
    return path


def _weights(shape: TinyLlama, vocab: int) -> dict[str, np.ndarray]:
    """Random float32 weights under llama.cpp's tensor names; numpy shapes are (out, in), which
    the writer stores reversed, as GGUF's dimensions go."""
    rng = np.random.default_rng(shape.seed)
    head = shape.hidden // shape.heads
    kv = head * shape.kv_heads

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    ones = np.ones(shape.hidden, dtype=np.float32)
    weights = {"token_embd.weight": matrix(vocab, shape.hidden), "output_norm.weight": ones}
    for i in range(shape.layers):
        weights |= {
            f"blk.{i}.attn_norm.weight": ones,
            f"blk.{i}.attn_q.weight": matrix(shape.hidden, shape.hidden),
            f"blk.{i}.attn_k.weight": matrix(kv, shape.hidden),
            f"blk.{i}.attn_v.weight": matrix(kv, shape.hidden),
            f"blk.{i}.attn_output.weight": matrix(shape.hidden, shape.hidden),
            f"blk.{i}.ffn_norm.weight": ones,
            f"blk.{i}.ffn_gate.weight": matrix(shape.ffn, shape.hidden),
            f"blk.{i}.ffn_up.weight": matrix(shape.ffn, shape.hidden),
            f"blk.{i}.ffn_down.weight": matrix(shape.hidden, shape.ffn),
        }
    weights["output.weight"] = matrix(vocab, shape.hidden)
    return weights
