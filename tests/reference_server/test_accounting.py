"""The per-GPU work of a step, against sums worked out by hand from the published shapes."""

from __future__ import annotations

from reference_server.accounting import ChunkWork, ModelCost
from reference_server.shapes import PRESETS

# Llama-3-8B, one layer: q 4096x4096 + k, v 2x4096x1024 + o 4096x4096 + MLP 3x4096x14336 + 2 norms of 4096.
LLAMA_8B_LAYER = 16_777_216 + 8_388_608 + 16_777_216 + 176_160_768 + 8_192  # 218,112,000
# Llama-3-70B, one layer: q 8192x8192 + k, v 2x8192x1024 + o 8192x8192 + MLP 3x8192x28672 + 2 norms of 8192.
LLAMA_70B_LAYER = 67_108_864 + 16_777_216 + 67_108_864 + 704_643_072 + 16_384  # 855,654,400


def test_parameter_counts_match_the_published_sizes() -> None:
    assert ModelCost(PRESETS["llama-3-8b"]).layer_params == LLAMA_8B_LAYER
    # 32 layers + embeddings and LM head (2 x 128256 x 4096) + final norm: the "8.03B" of the model card.
    assert ModelCost(PRESETS["llama-3-8b"]).total_params == 32 * LLAMA_8B_LAYER + 2 * 525_336_576 + 4096
    assert round(ModelCost(PRESETS["llama-3-70b"]).total_params / 1e9, 2) == 70.55
    assert round(ModelCost(PRESETS["qwen2.5-7b"]).total_params / 1e9, 2) == 7.62
    assert round(ModelCost(PRESETS["qwen2.5-0.5b"]).total_params / 1e9, 3) == 0.494  # tied embeddings


def test_kv_bytes_per_token_and_their_split_over_gpus() -> None:
    assert ModelCost(PRESETS["llama-3-8b"]).kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131_072
    assert ModelCost(PRESETS["llama-3-70b"], tp=4).kv_bytes_per_token == 2 * 80 * 2 * 128 * 2
    # 8 KV heads over 16 GPUs: each GPU keeps a whole head (vLLM replicates them).
    assert ModelCost(PRESETS["llama-3-70b"], tp=16).kv_bytes_per_token == 2 * 80 * 1 * 128 * 2


def test_a_decode_step_of_llama_3_8b() -> None:
    """One sequence with 1000 tokens cached computes its 1001st."""
    work = ModelCost(PRESETS["llama-3-8b"]).step([ChunkWork(tokens=1, start=1000, sampled=True)])
    # Read: every layer's weights and the LM head (not the embedding table) in bf16, and 1000 tokens of KV.
    assert work.read_bytes == (32 * LLAMA_8B_LAYER + 128_256 * 4096) * 2 + 1000 * 131_072
    assert work.write_bytes == 131_072
    linear = 32 * (LLAMA_8B_LAYER - 2 * 4096)  # norms are no matmul
    attention = 4 * 32 * 32 * 128 * 1001  # QK and PV over 1001 keys, 32 heads of 128, 32 layers
    assert work.flops == 2 * linear + 2 * 128_256 * 4096 + attention


def test_a_prefill_chunk_of_llama_3_70b_on_four_gpus() -> None:
    """2048 prompt tokens from position 0, the last one sampled, each GPU a quarter of the model."""
    work = ModelCost(PRESETS["llama-3-70b"], tp=4).step([ChunkWork(tokens=2048, start=0, sampled=True)])
    linear = 80 * (LLAMA_70B_LAYER - 2 * 8192)
    keys = 2048 * 2049 // 2  # causal: query i sees keys 0..i
    attention = 4 * 80 * 64 * 128 * keys
    assert work.flops == (2 * linear * 2048 + 2 * 128_256 * 8192 + attention) / 4
    assert work.read_bytes == (80 * LLAMA_70B_LAYER + 128_256 * 8192) * 2 / 4  # nothing cached to read
    assert work.write_bytes == 2048 * (2 * 80 * 2 * 128 * 2)
    assert (work.tokens, work.sequences) == (2048, 1)
