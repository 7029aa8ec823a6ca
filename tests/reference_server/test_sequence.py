"""Sequence: the tokens of prompt + output by position, whichever part they fall in."""

from reference_server.engine.sequence import Sequence
from reference_server.interface import SamplingParams


def test_token_ids_spans_prompt_and_output():
    seq = Sequence("r", [1, 2, 3], SamplingParams(), arrival=0.0)
    seq.output_ids += [4, 5]
    everything = [1, 2, 3, 4, 5]
    for start in range(6):
        for end in range(start, 6):
            assert seq.token_ids(start, end) == everything[start:end], (start, end)
