"""`--twin GPU:MODEL[:tpN]`: which GPU, which model shape, how many GPUs (no torch import: --help stays fast)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from reference_server.twin.hardware import GPUS

# Real model shapes the twin serves: keys of reference_server.shapes.PRESETS.
TWIN_MODELS = ("llama-3-8b", "llama-3-70b", "qwen2.5-0.5b", "qwen2.5-7b")
MAX_TP = 8


@dataclass(frozen=True)
class TwinSpec:
    gpu: str  # a key of GPUS
    model: str  # a key of PRESETS
    tp: int = 1

    def __str__(self) -> str:
        return f"{self.gpu}:{self.model}:tp{self.tp}"


def parse_twin(text: str) -> TwinSpec:
    """Parse `GPU:MODEL[:tpN]` (case-insensitive); a ValueError names what is wrong and the choices."""
    parts = text.strip().lower().split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"--twin takes GPU:MODEL[:tpN] (e.g. h100:llama-3-8b:tp2), not {text!r}")
    gpu, model = parts[0], parts[1]
    if gpu not in GPUS:
        raise ValueError(f"--twin: unknown GPU {gpu!r}; choose from {', '.join(GPUS)}")
    if model not in TWIN_MODELS:
        raise ValueError(f"--twin: unknown model {model!r}; choose from {', '.join(TWIN_MODELS)}")
    tp = 1
    if len(parts) == 3:
        match = re.fullmatch(r"tp(\d+)", parts[2])
        if not match or not 1 <= int(match.group(1)) <= MAX_TP:
            raise ValueError(f"--twin: the third part is tpN with N in 1..{MAX_TP}, not {parts[2]!r}")
        tp = int(match.group(1))
    return TwinSpec(gpu, model, tp)
