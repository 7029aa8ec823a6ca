"""Synthetic workload: prompt lengths in byte-level tokens, output lengths, distinct prompts, seeds."""

import statistics

import pytest

from loadlab.config import WorkloadConfig
from loadlab.workload import make_workload
from loadlab.workload.distributions import parse_length


def synthetic(input_len: str = "uniform:64:256", output_len: str = "normal:100:20", seed: int = 0):
    cfg = WorkloadConfig(
        kind="synthetic", input_len=parse_length(input_len), output_len=parse_length(output_len), seed=seed
    )
    return make_workload(cfg, "chat")


def test_prompt_length_in_bytes_is_the_drawn_input_length():
    w = synthetic()
    specs = [w.next_request() for _ in range(500)]
    for s in specs:
        assert s.prompt.isascii()
        assert len(s.prompt.encode()) == s.input_tokens
        assert 64 <= s.input_tokens <= 256
    assert statistics.mean(s.input_tokens for s in specs) == pytest.approx(160, rel=0.06)


def test_output_lengths_follow_the_distribution_and_are_pinned():
    specs = iter_specs(synthetic(), 1000)
    assert statistics.mean(s.max_tokens for s in specs) == pytest.approx(100, rel=0.03)
    assert all(s.pin_output for s in specs)


def iter_specs(w, n):
    return [w.next_request() for _ in range(n)]


def test_both_apis_get_the_same_text():
    s = synthetic().next_request()
    assert s.messages == [{"role": "user", "content": s.prompt}]


def test_prompts_do_not_share_prefixes():
    specs = iter_specs(synthetic("fixed:512"), 200)
    assert len({s.prompt[:8] for s in specs}) == 200


def test_same_seed_same_requests_other_seed_other_requests():
    assert iter_specs(synthetic(seed=4), 20) == iter_specs(synthetic(seed=4), 20)
    assert iter_specs(synthetic(seed=4), 20) != iter_specs(synthetic(seed=5), 20)


@pytest.mark.parametrize("n", [1, 5, 9, 10, 5000, 100000])
def test_exact_lengths_small_and_large(n):
    assert synthetic(f"fixed:{n}").next_request().input_tokens == n
    assert len(synthetic(f"fixed:{n}").next_request().prompt) == n


def pooling(api: str, items: int):
    cfg = WorkloadConfig(kind="synthetic", input_len=parse_length("uniform:8:64"), items=items, seed=4)
    return make_workload(cfg, api)


def test_an_embeddings_request_carries_its_prompt_and_more_drawn_texts():
    spec = pooling("embeddings", 3).next_request()
    assert len(spec.documents) == 3 and spec.documents[0] == spec.prompt and len(set(spec.documents)) == 3
    assert spec.input_tokens == sum(len(d.encode()) for d in spec.documents)
    assert spec.max_tokens == 0


def test_a_rerank_request_ranks_drawn_documents_against_its_prompt():
    spec = pooling("rerank", 4).next_request()
    assert len(spec.documents) == 4 and spec.prompt not in spec.documents
    assert spec.input_tokens == len(spec.prompt.encode()) + sum(len(d.encode()) for d in spec.documents)
    again = pooling("rerank", 4).next_request()
    assert (again.prompt, again.documents) == (spec.prompt, spec.documents)  # seeded
