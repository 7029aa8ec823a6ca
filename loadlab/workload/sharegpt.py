"""Prompts from a ShareGPT-format data set: a JSON list of {"conversations": [{"from", "value"}]}."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from loadlab.config import WorkloadConfig
from loadlab.errors import UserError
from loadlab.workload.base import POOLING_APIS, Workload, single_turn
from loadlab.workload.distributions import draw_range, sample_length
from loadlab.workload.limits import DOCS, MAX_DATASET_BYTES
from loadlab.workload.spec import RequestSpec
from loadlab.workload.text import token_count

_HUMAN = ("human", "user")
_ASSISTANT = ("gpt", "assistant", "chatgpt")


@dataclass(frozen=True)
class PromptPair:
    """The first human turn of a conversation and the length of the answer that followed it."""

    prompt: str
    answer_tokens: int


def load_sharegpt(path: str | Path) -> list[PromptPair]:
    """Read the usable (human question, answer) pairs; UserError when the file is missing or wrong."""
    path = Path(path)
    if not str(path) or not path.is_file():
        raise UserError(f"dataset file not found: {str(path) or '(workload.dataset is empty)'}")
    size = path.stat().st_size
    if size > MAX_DATASET_BYTES:
        raise UserError(
            f"dataset {path} is {size >> 20:,} MiB: more than the bound of {MAX_DATASET_BYTES >> 20:,} MiB "
            f"(it is parsed whole; {DOCS})"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read dataset {path}: {e}") from None
    except json.JSONDecodeError as e:
        raise UserError(f"dataset {path} is not valid JSON: {e.msg} at line {e.lineno}") from None
    if not isinstance(data, list):
        raise UserError(f"dataset {path} is not ShareGPT format: expected a JSON list of conversations")
    pairs = [p for p in (_first_pair(entry) for entry in data) if p is not None]
    if not pairs:
        raise UserError(f"dataset {path} has no conversation with a human turn followed by an answer")
    return pairs


def _first_pair(entry: object) -> PromptPair | None:
    turns = entry.get("conversations") if isinstance(entry, dict) else None
    if not isinstance(turns, list):
        return None
    for question, answer in itertools.pairwise(turns):
        if (
            isinstance(question, dict)
            and isinstance(answer, dict)
            and question.get("from") in _HUMAN
            and answer.get("from") in _ASSISTANT
            and isinstance(question.get("value"), str)
            and isinstance(answer.get("value"), str)
            and question["value"]
        ):
            return PromptPair(question["value"], max(1, token_count(answer["value"])))
    return None


class ShareGPTWorkload(Workload):
    """Each pass sends every usable conversation's first question once, in a seeded shuffled order."""

    def __init__(self, cfg: WorkloadConfig, api: str, stream: int = 0) -> None:
        super().__init__(cfg, api, stream)
        self.pairs = load_sharegpt(cfg.dataset)
        self._order: list[int] = []

    def token_range(self) -> tuple[int, int]:
        """The data set's fewest and most tokens, question and answer (or output_len's), in one request."""
        prompts = [token_count(p.prompt) for p in self.pairs]
        if self.cfg.output_from_dataset and self.api not in POOLING_APIS:
            totals = [n + p.answer_tokens for n, p in zip(prompts, self.pairs, strict=True)]
            return min(totals), max(totals)
        least, most = draw_range(self.cfg.output_len) if self.api not in POOLING_APIS else (0, 0)
        return min(prompts) + int(least), max(prompts) + int(most)

    def _next(self) -> RequestSpec:
        if not self._order:
            self._order = list(range(len(self.pairs)))
            self.rng.shuffle(self._order)
        pair = self.pairs[self._order.pop()]
        if self.cfg.output_from_dataset:
            max_tokens = pair.answer_tokens
        else:
            max_tokens = sample_length(self.cfg.output_len, self.rng)
        return single_turn(pair.prompt, max_tokens, token_count(pair.prompt))
