"""`loadlab simulate --twin GPU:MODEL[:tpN]`: a run against the GPU twin in virtual time.

The load flags are `loadlab run`'s; the engine flags are `loadlab serve --twin`'s. The run folder
is an ordinary one, marked simulated in run.json (docs/simulate.md says what is in its numbers).
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import typer

from loadlab.errors import UserError

SIMULATED_URL = "http://simulated"  # no endpoint: the config's URL only has to be well formed


def simulate(
    twin: str = typer.Option(..., "--twin", help="GPU:MODEL[:tpN], e.g. h100:llama-3-8b (docs/twin.md)."),
    api: str | None = typer.Option(None, "--api", help="chat | completions (default chat)."),
    scenario: Path | None = typer.Option(None, "-c", "--scenario", help="TOML scenario file; flags override it."),
    out: Path | None = typer.Option(None, "--out", help="Run folder (default runs/<timestamp>-sim)."),
    concurrency: str | None = typer.Option(None, "--concurrency", help="Closed loop: users, or steps such as 1,8,32."),
    rate: str | None = typer.Option(None, "--rate", help="Open loop: requests/s, or steps such as 1,5,10."),
    arrival: str | None = typer.Option(None, "--arrival", help="Open-loop arrivals: poisson | constant | gamma."),
    burstiness: float | None = typer.Option(None, "--burstiness", help="Gamma shape: 1 = Poisson, < 1 burstier."),
    think_time: str | None = typer.Option(None, "--think-time", help="Closed-loop pause between requests, seconds."),
    duration: float | None = typer.Option(None, "--duration", help="Simulated seconds to run (per step)."),
    requests: int | None = typer.Option(None, "--requests", help="Stop after this many measured requests (per step)."),
    step_duration: float | None = typer.Option(None, "--step-duration", help="Simulated seconds per step."),
    warmup_requests: int | None = typer.Option(None, "--warmup-requests", help="First N requests of each step."),
    ramp_up: float | None = typer.Option(None, "--ramp-up", help="Closed loop: new users start over this many s."),
    timeout: float | None = typer.Option(None, "--timeout", help="Per-request timeout in simulated seconds."),
    workload: str | None = typer.Option(None, "--workload", help="synthetic | sharegpt | shared_prefix | multiturn."),
    input_len: str | None = typer.Option(None, "--input-len", help="Prompt tokens: 128, uniform:64:256, ..."),
    output_len: str | None = typer.Option(None, "--output-len", help="Output tokens (same forms)."),
    dataset: str | None = typer.Option(None, "--dataset", help="ShareGPT-format JSON file (--workload sharegpt)."),
    seed: int | None = typer.Option(None, "--seed", help="Workload seed."),
    max_num_seqs: int = typer.Option(32, "--max-num-seqs", help="The engine's most sequences running at once."),
    max_num_batched_tokens: int = typer.Option(2048, "--max-num-batched-tokens", help="Token budget of one step."),
    gpu_memory_utilization: float = typer.Option(0.9, "--gpu-memory-utilization", help="Share of GPU memory taken."),
    prefix_caching: bool = typer.Option(True, "--prefix-caching/--no-prefix-caching", help="Reuse prompt prefixes."),
) -> None:
    """Simulate a `loadlab run` against `loadlab serve --twin` in virtual time (no HTTP, no sleeping)."""
    from loadlab.cli.run import check_out_folder, print_final_analysis, print_final_summary
    from loadlab.conductor.simulate import EngineSettings, simulate_run
    from loadlab.config import RunConfig
    from loadlab.workload import make_workload
    from loadlab.workload.scenario import apply_overrides, check, load_scenario

    if importlib.util.find_spec("torch") is None:
        raise UserError("the simulation runs the reference server's engine: pip install 'loadlab[server]'")
    cfg = load_scenario(scenario) if scenario is not None else RunConfig()
    if concurrency is not None:
        cfg.rate = []
    if rate is not None:
        cfg.concurrency = []
    cfg = apply_overrides(
        cfg,
        url=SIMULATED_URL,
        api=api,
        concurrency=concurrency,
        rate=rate,
        arrival=arrival,
        burstiness=burstiness,
        think_time=think_time,
        duration=duration,
        requests=requests,
        step_duration=step_duration,
        warmup_requests=warmup_requests,
        ramp_up=ramp_up,
        timeout=timeout,
        kind=workload,
        input_len=input_len,
        output_len=output_len,
        dataset=dataset,
        seed=seed,
    )
    check(cfg, complete=True)
    make_workload(cfg.workload, cfg.api)  # a bad data set fails here, before the simulator starts
    folder = out or Path(cfg.out or Path("runs") / (time.strftime("%Y%m%d-%H%M%S") + "-sim"))
    check_out_folder(folder)
    cfg.out = str(folder)
    engine = EngineSettings(twin, max_num_seqs, max_num_batched_tokens, gpu_memory_utilization, prefix_caching)
    print(f"loadlab simulate -> {folder}  (twin {twin}, virtual time)", file=sys.stderr)
    result = simulate_run(cfg, engine, folder)
    print(
        f"simulated {result.virtual_seconds:.1f} s in {result.wall_seconds:.1f} s of wall time "
        f"({result.requests} requests){'; ' + result.reason if result.reason else ''}",
        file=sys.stderr,
    )
    print_final_summary(folder)
    print_final_analysis(folder)


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command()(simulate)
