"""Sampler: printable ASCII + EOS only, min_tokens and ignore_eos, greedy, top-k/top-p, seeds."""

import codecs

import torch

from reference_server.engine.sampler import PRINTABLE, Sampler
from reference_server.engine.sequence import Sequence
from reference_server.interface import SamplingParams

EOS = 257
VOCAB = 512


def seq(seed: int | None = None, outputs: int = 0, **params) -> Sequence:
    gen = None if seed is None else torch.Generator().manual_seed(seed)
    s = Sequence("r", [1], SamplingParams(**params), 0.0, gen)
    s.output_ids = [65] * outputs
    return s


def eos_favoured(rows: int = 1) -> torch.Tensor:
    logits = torch.zeros(rows, VOCAB)
    logits[:, EOS] = 50.0
    logits[:, 300] = 100.0  # a special id above EOS: never sampled
    logits[:, 200] = 100.0  # a non-ASCII byte: never sampled
    return logits


def test_only_printable_bytes_or_eos_are_sampled() -> None:
    sampler = Sampler(EOS, seed=0)
    logits = torch.randn(64, VOCAB) * 5
    picks = sampler.sample(logits, [seq(temperature=2.0) for _ in range(64)])
    assert set(picks) <= set(PRINTABLE) | {EOS}
    assert all(bytes([t]).decode("ascii").isprintable() or t in (9, 10) for t in picks if t != EOS)


def test_eos_is_suppressed_until_min_tokens_and_always_with_ignore_eos() -> None:
    sampler = Sampler(EOS, seed=0)
    early, due, ignored = (
        seq(temperature=0, min_tokens=3, outputs=2),
        seq(temperature=0, min_tokens=3, outputs=3),
        seq(temperature=0, ignore_eos=True, outputs=50),
    )
    picks = sampler.sample(eos_favoured(3), [early, due, ignored])
    assert picks[0] != EOS and picks[1] == EOS and picks[2] != EOS


def test_greedy_takes_the_highest_allowed_token() -> None:
    logits = torch.zeros(1, VOCAB)
    logits[0, ord("q")] = 3.0
    logits[0, ord("z")] = 2.0
    assert Sampler(EOS, seed=0).sample(logits, [seq(temperature=0)]) == [ord("q")]


def test_top_k_1_and_tiny_top_p_are_greedy() -> None:
    sampler = Sampler(EOS, seed=0)
    logits = torch.randn(8, VOCAB)
    greedy = sampler.sample(logits, [seq(temperature=0) for _ in range(8)])
    assert sampler.sample(logits, [seq(temperature=1.5, top_k=1) for _ in range(8)]) == greedy
    assert sampler.sample(logits, [seq(temperature=1.5, top_p=1e-6) for _ in range(8)]) == greedy


def test_top_k_limits_choices() -> None:
    logits = torch.zeros(1, VOCAB)
    for t in b"abc":
        logits[0, t] = 5.0
    sampler = Sampler(EOS, seed=0)
    picks = {sampler.sample(logits, [seq(temperature=1.0, top_k=3)])[0] for _ in range(60)}
    assert picks == set(b"abc")


def test_a_request_seed_makes_sampling_reproducible() -> None:
    logits = torch.randn(1, VOCAB)

    def draw(seed: int | None, sampler_seed: int = 0) -> list[int]:
        s, sampler = seq(seed, temperature=1.0), Sampler(EOS, sampler_seed)
        return [sampler.sample(logits, [s])[0] for _ in range(30)]

    assert draw(5) == draw(5, sampler_seed=99)  # the request's seed wins over the engine's
    assert draw(5) != draw(6)


def test_min_p_keeps_only_tokens_near_the_top() -> None:
    logits = torch.zeros(1, VOCAB)
    logits[0, ord("a")] = 5.0
    logits[0, ord("b")] = 4.5  # 0.61 x a's probability
    logits[0, ord("c")] = 2.0  # 0.05 x a's probability
    sampler = Sampler(EOS, seed=0)
    picks = {sampler.sample(logits, [seq(temperature=1.0, min_p=0.5)])[0] for _ in range(60)}
    assert picks == set(b"ab")


EXTREMES = [5e-324, 1e-300, 1e-46, 1e-45, 1e-38, 1e-6, 0.5, 1.0]


def test_extreme_parameters_always_keep_the_top_token() -> None:
    # Each of these once drew from an all-zero distribution (torch.multinomial raised): top_p=1e-46
    # rounds to 0 in float32, and so did the whole kept mass.
    sampler = Sampler(EOS, seed=0)
    logits = torch.randn(4, VOCAB, generator=torch.Generator().manual_seed(7)) * 30
    greedy = sampler.sample(logits, [seq(temperature=0) for _ in range(4)])
    candidates = set(PRINTABLE) | {EOS}  # a row whose top score is EOS's may end there
    for value in EXTREMES:
        for params in (
            {"top_p": value},
            {"min_p": value},
            {"temperature": 1e-5, "top_p": value},
            {"temperature": 1e6, "top_p": value, "min_p": value},
            {"temperature": value + 1e-5},
        ):
            picks = sampler.sample(logits, [seq(**{"temperature": 1.0, **params}) for _ in range(4)])
            assert set(picks) <= candidates, params
            if params.get("top_p", 1.0) < 1e-6 or params.get("min_p", 0.0) == 1.0:
                assert picks == greedy, params
    huge = torch.full((1, VOCAB), 3e38)  # scores near float32's limit: still a valid draw
    assert sampler.sample(huge, [seq(temperature=1e-5, top_k=3, top_p=1e-300)])[0] in PRINTABLE


def test_utf8_output_is_valid_text_with_cjk_and_emoji_and_eos_never_splits_a_character() -> None:
    """With utf8, a sequence drawn token by token decodes without a replacement character, holds
    3- and 4-byte characters, and EOS (strongly favoured here) comes only between characters."""
    sampler = Sampler(EOS, seed=0, utf8=True)
    seqs = [seq(seed=i, temperature=1.0) for i in range(16)]
    for _ in range(200):
        logits = torch.randn(len(seqs), VOCAB) * 3
        logits[:, EOS] = 1.0
        live = [s for s in seqs if not s.output_ids or s.output_ids[-1] != EOS]
        for s, token in zip(live, sampler.sample(logits[: len(live)], live), strict=True):
            s.output_ids.append(token)
    # Raises on invalid bytes, and on a character cut by EOS; one cut by the end of the draws waits.
    texts = [
        codecs.getincrementaldecoder("utf-8")().decode(bytes(t for t in s.output_ids if t != EOS), EOS in s.output_ids)
        for s in seqs
    ]
    assert any(EOS in s.output_ids for s in seqs)
    every = "".join(texts)
    assert any("\u4000" <= ch <= "\u9fff" for ch in every)
    assert any("\U0001f000" <= ch <= "\U0001ffff" for ch in every)
