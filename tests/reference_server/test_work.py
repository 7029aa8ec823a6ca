"""The reference server's estimate of a step's work (vLLM's --enable-mfu-metrics counters)."""

from __future__ import annotations

from reference_server.config import ModelShape
from reference_server.engine.work import step_work

# 2 layers, hidden 8, 2 heads of 4 (1 KV head: KV width 4), MLP 16, vocab 10.
SHAPE = ModelShape("t", vocab_size=10, hidden_size=8, intermediate_size=16, num_layers=2, num_heads=2,
                   num_kv_heads=1, max_position=64)
PER_LAYER = 2 * 8 * 8 + 2 * 8 * 4 + 3 * 8 * 16      # 128 + 64 + 384 = 576 weights
WEIGHTS = 2 * PER_LAYER + 10 * 8                    # 1232


def test_one_decode_token_reads_every_weight_and_its_context():
    w = step_work(SHAPE, "float32", 1, [(1, 20)], sampled=1)
    assert w.flops == 2 * 2 * PER_LAYER + 2 * 10 * 8 + 4 * 2 * 8 * (20 + 1)
    kv_per_token = 2 * 2 * 4 * 4                      # K and V, 2 layers, width 4, 4 bytes
    assert w.read_bytes == WEIGHTS * 4 + kv_per_token * 20
    assert w.write_bytes == kv_per_token


def test_a_prefill_chunk_is_causal_and_tensor_parallel_splits_the_work():
    one = step_work(SHAPE, "bfloat16", 1, [(4, 0)], sampled=1)
    assert one.flops == 2 * 4 * 2 * PER_LAYER + 2 * 10 * 8 + 4 * 2 * 8 * (1 + 2 + 3 + 4)
    assert one.read_bytes == WEIGHTS * 2
    two = step_work(SHAPE, "bfloat16", 2, [(4, 0)], sampled=1)
    assert (two.flops, two.read_bytes, two.write_bytes) == (one.flops / 2, one.read_bytes / 2, one.write_bytes / 2)


def test_batching_decodes_shares_the_weight_reads():
    single = step_work(SHAPE, "float32", 1, [(1, 10)], sampled=1)
    batch = step_work(SHAPE, "float32", 1, [(1, 10)] * 8, sampled=8)
    assert batch.flops == 8 * single.flops
    assert batch.read_bytes < 2 * single.read_bytes       # weights once; only the KV reads grow
