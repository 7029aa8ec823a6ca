"""Small trace files in the real layouts of the public traces, written by the tests that read them.

Each writer takes rows of (seconds since the first request, input tokens, output tokens) and
writes them the way the published files do: Azure's dates with 7 fractional digits, BurstGPT's
six columns, Mooncake's JSON lines with millisecond timestamps and hash ids.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

Row = tuple[float, int, int]
AZURE_START = datetime(2023, 11, 16, 18, 15, 46)


def write_azure(path: Path, rows: list[Row]) -> Path:
    """AzureLLMInferenceTrace_{code,conv}.csv: TIMESTAMP,ContextTokens,GeneratedTokens."""
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for t, tokens_in, tokens_out in rows:
        stamp = (AZURE_START + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"  # 7 digits, as published
        lines.append(f"{stamp},{tokens_in},{tokens_out}")
    path.write_text("\r\n".join(lines) + "\r\n")
    return path


def write_burstgpt(path: Path, rows: list[Row], start: float = 5.0) -> Path:
    """BurstGPT_*.csv: Timestamp (seconds),Model,Request tokens,Response tokens,Total tokens,Log Type."""
    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    for i, (t, tokens_in, tokens_out) in enumerate(rows):
        model = "ChatGPT" if i % 3 else "GPT-4"
        log = "Conversation log" if i % 2 else "API log"
        lines.append(f"{start + t:g},{model},{tokens_in},{tokens_out},{tokens_in + tokens_out},{log}")
    path.write_text("\n".join(lines) + "\n")
    return path


def write_mooncake(path: Path, rows: list[tuple[float, int, int, list[int]]]) -> Path:
    """mooncake_trace.jsonl: {"timestamp" (ms), "input_length", "output_length", "hash_ids"} per line."""
    lines = [
        json.dumps({"timestamp": round(t * 1000), "input_length": i, "output_length": o, "hash_ids": ids})
        for t, i, o, ids in rows
    ]
    path.write_text("\n".join(lines) + "\n")
    return path
