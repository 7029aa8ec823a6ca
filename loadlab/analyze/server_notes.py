"""What the summary and the analysis say about the server's metrics beyond the numbers: a page
whose families loadlab does not map, and steps flattered by a warm prefix cache."""

from __future__ import annotations

import pandas as pd

from loadlab.analyze.histograms import SampleIndex
from loadlab.analyze.warm_cache import warm_cache_warnings
from loadlab.collect import signals as sig
from loadlab.store.reader import RunData
from loadlab.store.schema import StepInfo

# What the warm-cache check reads: a run's other samples are left out before indexing.
_CACHE_SIGNALS = (sig.PREFIX_CACHE_QUERIES, sig.PREFIX_CACHE_HITS, sig.PREFIX_CACHE_HIT_RATE)


def server_notes(run: RunData, steps: list[StepInfo], requests: pd.DataFrame) -> list[str]:
    """One line naming a server page's unmapped families (if none is mapped), then one per step
    whose prefix-cache hits its own traffic cannot explain. `requests`: the run's request records."""
    samples = run.samples
    server = samples[samples["source"] == "server"] if len(samples) else samples
    notes = []
    if len(server):
        line = sig.unused_families_line([str(n) for n in server["signal"].unique()])
        if line:
            notes.append(line)
    cache = samples[samples["signal"].isin(_CACHE_SIGNALS)] if len(samples) else samples
    if len(cache):
        notes += warm_cache_warnings(steps, requests, SampleIndex(cache), run.meta.config)
    return notes
