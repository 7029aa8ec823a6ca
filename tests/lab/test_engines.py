"""The lab's engines: the command line and environment each server starts with, and what is said
when vLLM or llama.cpp cannot be started. (A real vLLM starts in tests/engines/test_vllm.py and
tests/lab/test_lab_vllm.py, a real llama-server in tests/engines/test_llamacpp.py and
tests/lab/test_lab_llamacpp.py.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from loadlab.lab.engines import (
    LLAMACPP_SERVER_ENV,
    VLLM_PYTHON_ENV,
    EngineUnavailable,
    llamacpp_engine,
    llamacpp_server,
    make_tiny_llama,
    reference_engine,
    vllm_engine,
    vllm_python,
)


def test_the_reference_server_gets_the_scenarios_flags_its_device_and_twin():
    command = reference_engine().command(("--preset", "tiny"), 8123, "cpu", twin="h100:llama-3-8b")
    assert command[:3] == [sys.executable, "-m", "reference_server"]
    assert command[3:] == ["--port", "8123", "--device", "cpu", "--twin", "h100:llama-3-8b", "--preset", "tiny"]


def test_vllm_serves_the_tiny_llama_on_loopback_in_float32_with_a_small_kv_pool(tmp_path):
    python = tmp_path / "python"
    python.touch()
    engine = vllm_engine(python, tmp_path / "model")
    command = engine.command(("--max-num-seqs", "2"), 8124, "cpu")
    assert command[:3] == [str(python), "-m", "vllm.entrypoints.openai.api_server"]
    assert command[-3] == "--enforce-eager"  # no torch.compile: its cache never loaded, a minute per start
    assert "--enforce-eager" not in vllm_engine(python, tmp_path / "model", eager=False).command((), 8124, "cpu")
    flags = dict(zip(command[3:-3:2], command[4:-3:2], strict=True))
    assert flags["--model"] == str(tmp_path / "model") and flags["--host"] == "127.0.0.1"
    assert flags["--port"] == "8124" and flags["--dtype"] == "float32"
    assert command[-2:] == ["--max-num-seqs", "2"]  # the scenario's own flags last: they win
    assert engine.env["VLLM_CPU_KVCACHE_SPACE"] == "1"  # GiB: not most of a shared machine's memory
    assert engine.env["HF_HUB_OFFLINE"] == "1"  # loopback only


def test_a_pinned_vllm_binds_its_threads_to_the_cores_it_was_given(tmp_path):
    python = tmp_path / "python"
    python.touch()
    engine = vllm_engine(python, tmp_path / "model")
    assert engine.env_for((0,))["VLLM_CPU_OMP_THREADS_BIND"] == "0"  # not `auto`'s pick by topology
    assert engine.env_for((0, 1))["VLLM_CPU_OMP_THREADS_BIND"] == "0,1"
    assert engine.env_for(()) == engine.env  # unpinned: vLLM's own binding
    assert engine.env_for((0,))["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert reference_engine().env_for((0,)) == {}  # the reference server is pinned by its affinity alone
    # A pool sized in bytes: vLLM ignores the flag while its KV-space variable is set.
    sized = engine.env_for((), ("--max-model-len", "512", "--kv-cache-memory-bytes", "8388608"))
    assert "VLLM_CPU_KVCACHE_SPACE" not in sized and sized["HF_HUB_OFFLINE"] == "1"


def test_without_a_vllm_environment_the_engine_says_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.setenv(VLLM_PYTHON_ENV, str(tmp_path / "nowhere" / "python"))
    assert vllm_python() == tmp_path / "nowhere" / "python"
    assert vllm_python("/given/python") == Path("/given/python")
    with pytest.raises(EngineUnavailable, match=f"`make vllm` builds .venv-vllm, or set {VLLM_PYTHON_ENV}"):
        vllm_engine(vllm_python(), tmp_path / "model")


def test_a_model_already_made_is_not_made_again(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    # The Python given could not make anything: it is not asked.
    assert make_tiny_llama(tmp_path / "no-python", tmp_path) == tmp_path


def test_a_model_that_cannot_be_made_is_one_line_and_leaves_nothing_half_made(tmp_path):
    with pytest.raises(EngineUnavailable, match="could not write the weights for the tiny Llama"):
        make_tiny_llama(tmp_path / "no-python", tmp_path / "model")
    assert list(tmp_path.iterdir()) == []


def test_llamacpp_serves_the_gguf_model_on_loopback_under_a_name_with_the_scenarios_flags_last(tmp_path):
    program = tmp_path / "llama-server"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    engine = llamacpp_engine(program, tmp_path / "tiny.gguf")
    command = engine.command(("--parallel", "2"), 8125, "cpu")
    assert command[0] == str(program)
    flags = dict(zip(command[1:7:2], command[2:7:2], strict=True))
    assert flags == {"--model": str(tmp_path / "tiny.gguf"), "--alias": "tiny-llama", "--host": "127.0.0.1"}
    assert command[7:9] == ["--port", "8125"] and command[-2:] == ["--parallel", "2"]
    assert "--metrics" not in command  # a scenario's flag: without it the server is a black box


def test_without_a_llama_server_the_engine_says_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.setenv(LLAMACPP_SERVER_ENV, str(tmp_path / "nowhere"))
    assert llamacpp_server() == tmp_path / "nowhere" and llamacpp_server("/given") == Path("/given")
    with pytest.raises(EngineUnavailable, match=f"`make llamacpp` builds it, or set {LLAMACPP_SERVER_ENV}"):
        llamacpp_engine(llamacpp_server(), tmp_path / "tiny.gguf")
    (tmp_path / "nowhere").write_text("not executable")
    with pytest.raises(EngineUnavailable, match="no llama-server at"):
        llamacpp_engine(llamacpp_server(), tmp_path / "tiny.gguf")
