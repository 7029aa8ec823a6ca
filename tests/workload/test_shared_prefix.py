"""Shared-prefix workload: N prefixes x M suffixes, each prompt sent once per pass."""

from collections import Counter

from loadlab.config import WorkloadConfig
from loadlab.workload import make_workload
from loadlab.workload.distributions import parse_length


def shared(seed: int = 0):
    cfg = WorkloadConfig(
        kind="shared_prefix",
        num_prefixes=3,
        prefix_len=200,
        suffixes_per_prefix=4,
        input_len=parse_length("uniform:20:40"),
        output_len=parse_length("16"),
        seed=seed,
    )
    return make_workload(cfg, "completions")


def test_one_pass_sends_every_prefix_suffix_pair_once():
    w = shared()
    prompts = [w.next_request().prompt for _ in range(12)]
    assert len(set(prompts)) == 12
    prefixes = Counter(p[:200] for p in prompts)
    assert len(prefixes) == 3 and set(prefixes.values()) == {4}
    # The next pass repeats the same 12 prompts (so a prefix cache can hit), in another order.
    again = [w.next_request().prompt for _ in range(12)]
    assert set(again) == set(prompts) and again != prompts


def test_lengths_are_prefix_plus_suffix():
    w = shared()
    for _ in range(12):
        s = w.next_request()
        assert s.input_tokens == len(s.prompt) and 220 <= s.input_tokens <= 240
        assert s.max_tokens == 16
        assert s.messages[0]["content"] == s.prompt


def test_reproducible_with_seed():
    a, b, c = shared(1), shared(1), shared(2)
    assert [a.next_request() for _ in range(30)] == [b.next_request() for _ in range(30)]
    assert a.next_request().prompt[:200] not in {c.next_request().prompt[:200] for _ in range(12)}


def test_every_stream_shares_the_same_prefixes_in_its_own_order():
    cfg = WorkloadConfig(kind="shared_prefix", num_prefixes=3, prefix_len=200, suffixes_per_prefix=4, seed=1)
    a, b = make_workload(cfg, "chat", stream=0), make_workload(cfg, "chat", stream=1)
    pass_a = [a.next_request().prompt for _ in range(12)]
    pass_b = [b.next_request().prompt for _ in range(12)]
    assert set(pass_a) == set(pass_b) and pass_a != pass_b
