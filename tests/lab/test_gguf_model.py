"""The tiny random-weight Llama llama.cpp serves: a GGUF file with a byte-fallback vocabulary (one
byte, a space included, one token), written once and never half-written."""

from __future__ import annotations

import gguf

from loadlab.lab.gguf_model import SPACE, TinyLlama, make_tiny_gguf, vocabulary


def test_the_vocabulary_is_the_special_tokens_the_256_bytes_and_the_space_mark():
    tokens = vocabulary()
    assert tokens[:3] == ["<unk>", "<s>", "</s>"] and tokens[3] == "<0x00>" and tokens[258] == "<0xFF>"
    assert tokens[-1] == SPACE and len(tokens) == 260


def test_the_model_is_a_llama_gguf_of_its_shape_written_once(tmp_path):
    shape = TinyLlama(hidden=64, layers=2, heads=2, kv_heads=1, ffn=128)
    path = make_tiny_gguf(tmp_path, shape)
    assert path.name == shape.file_name and [p.name for p in tmp_path.iterdir()] == [path.name]
    reader = gguf.GGUFReader(str(path))
    field = reader.fields["general.architecture"]
    assert bytes(field.parts[field.data[0]]).decode() == "llama"
    tensors = {t.name: t.shape.tolist() for t in reader.tensors}
    assert tensors["token_embd.weight"] == [64, 260] and tensors["blk.1.attn_k.weight"] == [64, 32]
    assert len(tensors) == 3 + 9 * shape.layers
    written = path.stat().st_mtime_ns
    assert make_tiny_gguf(tmp_path, shape) == path and path.stat().st_mtime_ns == written  # not again
