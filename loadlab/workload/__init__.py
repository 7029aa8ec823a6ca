"""What to send: workload kinds, length distributions, arrival processes and scenario files."""

from __future__ import annotations

from loadlab.config import WorkloadConfig
from loadlab.errors import UserError
from loadlab.workload.base import Workload
from loadlab.workload.multiturn import MultiTurnWorkload
from loadlab.workload.shared_prefix import SharedPrefixWorkload
from loadlab.workload.sharegpt import ShareGPTWorkload
from loadlab.workload.synthetic import SyntheticWorkload
from loadlab.workload.tools import ToolSessionWorkload
from loadlab.workload.trace import TraceWorkload

WORKLOADS: dict[str, type[Workload]] = {
    "synthetic": SyntheticWorkload,
    "sharegpt": ShareGPTWorkload,
    "shared_prefix": SharedPrefixWorkload,
    "multiturn": MultiTurnWorkload,
    "tools": ToolSessionWorkload,
    "trace": TraceWorkload,
}

__all__ = ["Workload", "WORKLOADS", "make_workload"]


def make_workload(cfg: WorkloadConfig, api: str, stream: int = 0) -> Workload:
    """The workload `cfg.kind` describes, for the `api` ("chat" or "completions").

    Give each load-generator process its own `stream` (e.g. its worker index): same seed and
    stream, same requests; other streams draw other prompts from the same distributions.
    """
    try:
        kind = WORKLOADS[cfg.kind]
    except KeyError:
        raise UserError(f"unknown workload kind {cfg.kind!r} (use one of {', '.join(WORKLOADS)})") from None
    return kind(cfg, api, stream)
