"""ShareGPT data sets: first human turn as prompt, the answer's length as output length."""

import json

import pytest

from loadlab.config import WorkloadConfig
from loadlab.errors import UserError
from loadlab.workload import make_workload
from loadlab.workload.distributions import parse_length

DATA = [
    {
        "id": "a",
        "conversations": [
            {"from": "human", "value": "What is a GPU?"},
            {"from": "gpt", "value": "A graphics processor."},
            {"from": "human", "value": "ignored later turn"},
        ],
    },
    {
        "id": "b",
        "conversations": [
            {"from": "system", "value": "be brief"},
            {"from": "human", "value": "héllo"},
            {"from": "gpt", "value": "hi"},
        ],
    },
    {"id": "no answer", "conversations": [{"from": "human", "value": "alone"}]},
    {"id": "not a conversation"},
    "junk",
]


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(DATA), encoding="utf-8")
    return path


def test_prompts_and_answer_lengths(dataset):
    w = make_workload(WorkloadConfig(kind="sharegpt", dataset=str(dataset)), "chat")
    specs = {s.prompt: s for s in (w.next_request() for _ in range(2))}
    assert set(specs) == {"What is a GPU?", "héllo"}
    assert specs["What is a GPU?"].max_tokens == len("A graphics processor.")
    assert specs["héllo"].input_tokens == 6  # bytes: é is two
    assert specs["héllo"].max_tokens == 2
    assert specs["héllo"].messages == [{"role": "user", "content": "héllo"}]


def test_each_pass_uses_every_conversation_once(dataset):
    w = make_workload(WorkloadConfig(kind="sharegpt", dataset=str(dataset), seed=3), "chat")
    prompts = [w.next_request().prompt for _ in range(6)]
    for i in range(0, 6, 2):
        assert sorted(prompts[i : i + 2]) == sorted(["What is a GPU?", "héllo"])


def test_explicit_output_length_replaces_the_answer_length(dataset):
    cfg = WorkloadConfig(
        kind="sharegpt", dataset=str(dataset), output_len=parse_length("50"), output_from_dataset=False
    )
    w = make_workload(cfg, "completions")
    assert {w.next_request().max_tokens for _ in range(4)} == {50}


def test_reproducible_with_seed(dataset):
    def prompts(seed):
        w = make_workload(WorkloadConfig(kind="sharegpt", dataset=str(dataset), seed=seed), "chat")
        return [w.next_request() for _ in range(10)]

    assert prompts(1) == prompts(1)


@pytest.mark.parametrize(
    "content,message",
    [
        (None, "not found"),
        ("{not json", "not valid JSON"),
        ('{"conversations": []}', "expected a JSON list"),
        ('[{"conversations": [{"from": "gpt", "value": "x"}]}]', "no conversation"),
    ],
)
def test_missing_or_invalid_file_is_a_one_line_user_error(tmp_path, content, message):
    path = tmp_path / "data.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UserError, match=message) as e:
        make_workload(WorkloadConfig(kind="sharegpt", dataset=str(path)), "chat")
    assert "\n" not in str(e.value)
