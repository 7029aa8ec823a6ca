"""The decoder: real preset shapes, chunked and cached attention agree with one-shot prefill,
seeded weights are reproducible and not degenerate, safetensors checkpoints load by HF name."""

import pytest
import torch
from safetensors.torch import save_file

from reference_server.attention import AttentionMetadata, KVCache, PrefillChunk
from reference_server.model import load_model, pack_for_cpu
from reference_server.parallel import TensorParallel
from reference_server.shapes import PRESETS

TINY = PRESETS["tiny"]
CPU = torch.device("cpu")
BLOCK = 16


def tiny_model(seed: int = 0, weights: str = ""):
    return load_model(TINY, TensorParallel(), torch.float32, CPU, seed=seed, weights=weights)


def new_cache(num_blocks: int = 8) -> KVCache:
    return KVCache(TINY.num_layers, num_blocks, BLOCK, TINY.num_kv_heads, TINY.head_dim, torch.float32, CPU)


def prefill_logits(model, ids: list[int], table: list[int]) -> torch.Tensor:
    """Logits of every position after one whole-prompt prefill into blocks `table`."""
    slots = torch.tensor([table[p // BLOCK] * BLOCK + p % BLOCK for p in range(len(ids))])
    meta = AttentionMetadata(slot_mapping=slots, prefills=[PrefillChunk(0, len(ids), 0, torch.tensor([table]))])
    with torch.inference_mode():
        return model.logits(model(torch.tensor(ids), torch.arange(len(ids)), meta, new_cache()))


def test_real_presets_have_the_published_shapes() -> None:
    llama = PRESETS["llama-3-8b"]
    assert (
        llama.num_layers,
        llama.hidden_size,
        llama.num_heads,
        llama.num_kv_heads,
        llama.intermediate_size,
        llama.vocab_size,
    ) == (32, 4096, 32, 8, 14336, 128256)
    qwen = PRESETS["qwen2.5-0.5b"]
    assert (
        qwen.num_layers,
        qwen.hidden_size,
        qwen.num_heads,
        qwen.num_kv_heads,
        qwen.tie_embeddings,
        qwen.qkv_bias,
    ) == (24, 896, 14, 2, True, True)
    for shape in PRESETS.values():
        assert shape.vocab_size >= 261  # room for every byte and the special tokens


def test_chunked_prefill_and_decode_match_one_shot_prefill() -> None:
    model = tiny_model()
    ids = list(b"The quick brown fox jumps over")  # 30 tokens over two blocks
    table = [5, 2]
    full = prefill_logits(model, ids, table)
    cache = new_cache()

    def step(start: int, end: int, decode: bool) -> torch.Tensor:
        slots = torch.tensor([table[p // BLOCK] * BLOCK + p % BLOCK for p in range(start, end)])
        if decode:
            meta = AttentionMetadata(
                slots,
                num_decodes=1,
                decode_tables=torch.tensor([table]),
                decode_len=end,
                decode_mask=torch.ones(1, 1, 1, end, dtype=torch.bool),
            )
        else:
            mask = torch.arange(end)[None, :] <= torch.arange(start, end)[:, None] if start else None
            meta = AttentionMetadata(slots, prefills=[PrefillChunk(0, end - start, start, torch.tensor([table]), mask)])
        with torch.inference_mode():
            return model.logits(model(torch.tensor(ids[start:end]), torch.arange(start, end), meta, cache))

    chunked = torch.cat([step(0, 12, False), step(12, 29, False), step(29, 30, True)])
    torch.testing.assert_close(chunked, full, atol=1e-4, rtol=1e-4)


def test_seeded_weights_are_reproducible_and_not_degenerate() -> None:
    ids = list(b"hello there")
    a, b, c = (prefill_logits(tiny_model(seed), ids, [0]) for seed in (1, 1, 2))
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a, c)
    # Unit-scale logits: neither a constant nor a one-hot distribution.
    assert 0.3 < float(a.std()) < 5.0
    assert len(set(a.argmax(-1).tolist())) > 1


def test_safetensors_checkpoint_loads_by_hugging_face_names(tmp_path) -> None:
    source = tiny_model(seed=7)
    state = {name: p.detach().clone() for name, p in source.named_parameters()}
    assert "model.layers.0.self_attn.q_proj.weight" in state and "lm_head.weight" in state
    path = tmp_path / "tiny.safetensors"
    save_file(state, str(path))
    loaded = tiny_model(seed=0, weights=str(path))
    ids = list(b"weights")
    torch.testing.assert_close(prefill_logits(loaded, ids, [0]), prefill_logits(source, ids, [0]))
    assert not torch.allclose(prefill_logits(tiny_model(seed=0), ids, [0]), prefill_logits(loaded, ids, [0]))


def test_checkpoint_with_a_missing_or_misshapen_tensor_is_refused(tmp_path) -> None:
    state = {name: p.detach().clone() for name, p in tiny_model().named_parameters()}
    del state["model.norm.weight"]
    save_file(state, str(tmp_path / "missing.safetensors"))
    with pytest.raises(ValueError, match="model.norm.weight is missing"):
        tiny_model(weights=str(tmp_path / "missing.safetensors"))
    state["model.norm.weight"] = torch.ones(3)
    save_file(state, str(tmp_path / "bad.safetensors"))
    with pytest.raises(ValueError, match="has shape"):
        tiny_model(weights=str(tmp_path / "bad.safetensors"))


def test_tensor_parallel_shards_must_divide_heads() -> None:
    with pytest.raises(ValueError, match="does not divide num_kv_heads"):
        load_model(TINY, TensorParallel(0, 4), torch.float32, CPU)


def test_weights_packed_for_the_cpu_give_the_same_logits_and_no_second_copy() -> None:
    plain, packed = tiny_model(seed=3), tiny_model(seed=3)
    pack_for_cpu(packed)
    ids = list(b"packed weights")
    torch.testing.assert_close(prefill_logits(packed, ids, [0]), prefill_logits(plain, ids, [0]), atol=1e-4, rtol=1e-4)
    layer = packed.model.layers[0].mlp.up_proj
    assert layer.packed is not None and layer.weight is None  # the plain copy is dropped
