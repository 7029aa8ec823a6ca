"""The knob table: one knob per class and engine, turned one step its way, and the engine read
from the serve command."""

from __future__ import annotations

import pytest

from loadlab.analyze.advice import ADVICE, LLAMACPP, REFERENCE, VLLM
from loadlab.analyze.knobs import KNOBS, engine_of, knob_for


def test_scheduling_turns_the_admission_cap_up_four_times() -> None:
    vllm, reference = knob_for("scheduling", VLLM), knob_for("scheduling", REFERENCE)
    assert vllm and vllm.flag == "--max-num-seqs" and vllm.turned(2) == 8
    assert reference and reference.flag == "--max-num-seqs" and reference.turned(32) == 128
    llama = knob_for("scheduling", LLAMACPP)
    assert llama and llama.flag == "--parallel" and llama.turned(1) == 4


def test_kv_capacity_doubles_the_pool_and_prefill_halves_the_chunk() -> None:
    kv = knob_for("kv_capacity", VLLM)
    assert kv and kv.flag == "--num-gpu-blocks-override" and kv.turned(40) == 80
    ref_kv = knob_for("kv_capacity", REFERENCE)
    assert ref_kv and ref_kv.flag == "--num-kv-blocks"
    prefill = knob_for("compute", REFERENCE)
    assert prefill and prefill.flag == "--max-num-batched-tokens" and prefill.turned(2048) == 1024


def test_a_black_box_pattern_is_tested_by_the_class_behind_it() -> None:
    assert knob_for("queueing", VLLM) == knob_for("scheduling", VLLM)
    assert knob_for("prefill_cost", REFERENCE) == knob_for("compute", REFERENCE)


def test_a_class_without_a_knob_has_none() -> None:
    assert knob_for("client", VLLM) is None
    assert knob_for("insufficient_data", REFERENCE) is None
    assert knob_for("scheduling", "") is None


def test_a_step_changes_the_value_down_to_1_and_no_further() -> None:
    down, up = knob_for("compute", REFERENCE), knob_for("scheduling", REFERENCE)
    assert down and down.turned(3) == 2 and down.turned(2) == 1 and down.turned(1) == 1
    assert up and up.turned(1) == 4


@pytest.mark.parametrize(
    ("command", "engine"),
    [
        ("loadlab serve --preset tiny --port {port}", REFERENCE),
        (".venv/bin/loadlab serve --port {port}", REFERENCE),
        ("python -m vllm.entrypoints.openai.api_server --model m --port {port}", VLLM),
        ("vllm serve m --port {port}", VLLM),
        ("llama-server -m x.gguf --port {port}", LLAMACPP),
        ("./my-server --port {port}", ""),
    ],
)
def test_the_engine_is_read_from_the_serve_command(command: str, engine: str) -> None:
    assert engine_of(command) == engine


def test_every_knob_is_a_flag_its_class_advice_names_for_that_engine() -> None:
    # The knob table sits beside the advice: a knob the advice does not mention would contradict it.
    for knob in KNOBS:
        lines = ADVICE[knob.constraint].get(knob.engine, [])
        if knob.flag in ("--num-gpu-blocks-override", "--max-concurrent-requests", "--max-running-requests"):
            continue  # the advice says it in its own words (more KV blocks, admission)
        assert any(knob.flag in line for line in lines), (knob, lines)
