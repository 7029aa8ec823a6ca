"""analysis.json written by hand, as the analyzer writes it (docs/run-folder.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def analysis(labels: list[str], text: str = "", knee: int | None = 1) -> dict[str, Any]:
    """An analysis of steps with these labels: under-loaded, then KV-bound past the knee.

    `text` is appended to every free-text field (headlines, evidence, advice), e.g. markup that
    must arrive inert.
    """
    steps = []
    for i, label in enumerate(labels):
        past = knee is not None and i >= knee
        steps.append(
            {
                "index": i,
                "label": label,
                "mode": "closed",
                "target": float(i + 1),
                "window": {"start": 0.0, "end": 10.0, "seconds": 10.0, "how": "from in-flight reaching the target"},
                "saturation": "past_knee" if past else "under_loaded",
                "saturation_reason": "throughput grew 2 % for 100 % more load" if past else "",
                "constraint": "kv_capacity" if past else "memory_bandwidth",
                "score": 0.71,
                "confidence": 0.64,
                "runner_up": {"constraint": "compute", "score": 0.62, "confidence": 0.55} if past else None,
                "headline": f"step {i} headline {text}",
                "evidence": [
                    {
                        "constraint": "kv_capacity",
                        "name": "kv_usage_p90",
                        "value": 0.97,
                        "unit": "fraction",
                        "threshold": 0.9,
                        "direction": "for",
                        "weight": 1.0,
                        "source": "server_metrics",
                        "signals": ["kv_cache_usage"],
                        "text": f"KV usage p90 97 % >= 90 % {text}",
                    }
                ],
                "advice": [f"vLLM: raise --gpu-memory-utilization {text}"],
                "missing": ["gpu: no GPU collector"],
                "derived": {
                    "achieved_concurrency": {
                        "value": 7.9,
                        "unit": "requests",
                        "signals": ["client.requests"],
                        "source": "client",
                    }
                },
            }
        )
    return {
        "format": 1,
        "generated_at": 1764550000.0,
        "path": "run",
        "cut_off": False,
        "notes": [f"a note {text}"],
        "steps": steps,
        "overall": {
            "constraint": "kv_capacity",
            "saturation": "past_knee",
            "knee_step": knee,
            "client_limited": False,
            "confidence": 0.8,
            "headline": f"KV capacity binds at the knee {text}",
            "advice": [f"add KV blocks {text}"],
            "server": "vllm",
        },
    }


def write_analysis(folder: Path, labels: list[str], text: str = "") -> dict[str, Any]:
    """Write `analysis(labels, text)` into the run folder; returns it."""
    data = analysis(labels, text)
    (folder / "analysis.json").write_text(json.dumps(data))
    return data
