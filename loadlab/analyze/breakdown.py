"""The run's requests broken down by what they carried: by turn and by media.

By turn (multi-turn and tool-calling sessions): a session's later turns resend a longer history; a
prefix cache should serve all of it but the newest part, so the hit rate climbs with the turn while
the TTFT stays flat. Where it does not, the cache is too small or evicts sessions between turns.

By media (chat requests with images or audio): TTFT against the image count and size, and the
audio length, with the prompt tokens the server charged for them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from loadlab.store.meta import float_or_nan

_FIGURES = ("prompt_tokens_p50", "ttft_p50", "ttft_p99", "cache_hit_rate")


@dataclass
class Figures:
    """One group of requests (warm-up excluded)."""

    requests: int
    failed: int
    prompt_tokens_p50: float  # the server's usage.prompt_tokens (NaN when it did not say)
    ttft_p50: float  # seconds, successful requests
    ttft_p99: float
    cache_hit_rate: float  # cached / prompt tokens summed over the requests whose server said (NaN: none did)


@dataclass
class TurnSummary(Figures):
    """One turn number over every session of the run."""

    turn: int = 0  # 0-based

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TurnSummary:
        """Read back summary.json's form (NaN written as null)."""
        return cls(turn=int(d["turn"]), **_read(d))


@dataclass
class MediaSummary(Figures):
    """The requests that carried the same number of images of the same total size and audio."""

    images: int = 0
    image_pixels: int = 0  # all images of a request together
    audio_seconds: float = 0.0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MediaSummary:
        """Read back summary.json's form (NaN written as null)."""
        media = {"images": int(d["images"]), "image_pixels": int(d["image_pixels"])}
        audio = float(d["audio_seconds"])
        return cls(**media, audio_seconds=audio, **_read(d))


def turn_summaries(requests: pd.DataFrame) -> list[TurnSummary]:
    """Per-turn figures of `requests` (per_request's frame: `ok`, `ttft`), for the turns of
    conversations; [] when the run has none."""
    if "turn" not in requests or not (requests["turn"] >= 0).any():
        return []
    in_sessions = requests[requests["turn"] >= 0]
    return [
        TurnSummary(turn=turn, **_figures(in_sessions[in_sessions["turn"] == turn]))
        for turn in sorted(int(t) for t in in_sessions["turn"].unique())
    ]


def media_summaries(requests: pd.DataFrame) -> list[MediaSummary]:
    """Figures per (images, image pixels, audio seconds) of `requests`, fewest first; [] when no
    request carried media. (Folders from before the media columns read them as null: none.)"""
    columns = ["images", "image_pixels", "audio_seconds"]
    if not all(c in requests for c in columns):
        return []
    keys = requests[columns].fillna(0)
    if not (keys > 0).any(axis=None):
        return []
    groups = keys.drop_duplicates().sort_values(columns)
    rows = []
    for images, pixels, audio in groups.itertuples(index=False):
        group = requests[
            (keys["images"] == images) & (keys["image_pixels"] == pixels) & (keys["audio_seconds"] == audio)
        ]
        rows.append(
            MediaSummary(images=int(images), image_pixels=int(pixels), audio_seconds=float(audio), **_figures(group))
        )
    return rows


def _figures(group: pd.DataFrame) -> dict[str, Any]:
    ok = group[group["ok"]]
    ttft = ok["ttft"].dropna().to_numpy(dtype=float)
    cached = _cached(ok)
    said = ok[(ok["prompt_tokens"] > 0) & (cached >= 0)]
    prompt = said["prompt_tokens"].sum()
    return {
        "requests": len(group),
        "failed": int((~group["ok"]).sum()),
        "prompt_tokens_p50": _p(ok["prompt_tokens"][ok["prompt_tokens"] >= 0].to_numpy(dtype=float), 50),
        "ttft_p50": _p(ttft, 50),
        "ttft_p99": _p(ttft, 99),
        "cache_hit_rate": float(cached[said.index].sum() / prompt) if prompt > 0 else math.nan,
    }


def _read(d: dict[str, Any]) -> dict[str, Any]:
    """Figures' fields from summary.json's form (NaN written as null)."""
    counts = {"requests": int(d["requests"]), "failed": int(d["failed"])}
    return counts | {name: float_or_nan(d[name]) for name in _FIGURES}


def _cached(df: pd.DataFrame) -> pd.Series:
    # Run folders older than the cached_tokens column read it as null: not said.
    if "cached_tokens" not in df:
        return pd.Series(-1, index=df.index)
    return df["cached_tokens"].fillna(-1)


def _p(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else math.nan
