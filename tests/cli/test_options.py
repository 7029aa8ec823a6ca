"""The flags several commands share, declared once (loadlab/cli/options.py): every command that
takes a group accepts each of its flags, hands the command one typed object, and the groups set
the run's config as `loadlab run`'s flags always did."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest
import typer
from typer.models import OptionInfo

from loadlab.cli import app
from loadlab.cli.options import (
    STEP_DURATION,
    ClientFlags,
    CollectorFlags,
    ConfigFlags,
    EngineFlags,
    FlagGroup,
    LoadFlags,
    SweepFlags,
    WhatIfFlags,
    WorkloadFlags,
    configure,
    takes_flags,
)
from loadlab.conductor.simulate import EngineSettings
from loadlab.config import RunConfig
from loadlab.errors import UserError
from loadlab.workload.distributions import parse_length
from tests.support.procs import loadlab

# Which commands take which group: the workload flags go wherever requests are sent or planned.
TAKEN_BY: dict[type[FlagGroup], tuple[str, ...]] = {
    WorkloadFlags: ("run", "sweep", "diagnose", "simulate", "plan"),
    LoadFlags: ("run", "simulate"),
    ClientFlags: ("run", "sweep", "diagnose"),
    CollectorFlags: ("run", "sweep", "diagnose"),
    SweepFlags: ("sweep", "diagnose"),
    EngineFlags: ("simulate", "plan"),
    WhatIfFlags: ("plan",),
}


def flag_names(group: type[FlagGroup]) -> list[str]:
    """The flag of each field of a group, as typed on the command line (`--input-len`, ...; a
    switch `--flag/--no-flag` by its first name)."""
    declared = typing.get_type_hints(group, include_extras=True)
    # Declared inside Annotated, typer.Option's first argument is the flag's name, not a default.
    options = [
        next(a for a in typing.get_args(declared[f.name])[1:] if isinstance(a, OptionInfo))
        for f in dataclasses.fields(group)
    ]
    return [o.default.split("/")[0] for o in options]


# What each command needs before any other flag parses.
REQUIRED = {
    "run": [],
    "sweep": ["--url", "http://h"],
    "diagnose": ["http://h"],
    "simulate": ["--twin", "h100:m"],
    "plan": ["--users", "1"],
}
VALUES = {int: "3", float: "2.5", str: "x", Path: "x"}


@pytest.fixture(scope="module")
def commands() -> dict[str, typing.Any]:
    if not app.registered_commands[1:]:  # `loadlab` registers its commands when it starts
        import loadlab.cli

        loadlab.cli._register_commands()
    return dict(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def given(group: type[FlagGroup]) -> list[tuple[str, str, list[str], object]]:
    """(field, flag, command-line words, the value the command must receive) for each flag."""
    hints = typing.get_type_hints(group)
    out = []
    for field, flag in zip(dataclasses.fields(group), flag_names(group), strict=True):
        kind = next(
            t for t in (bool, int, float, str, Path) if t in (hints[field.name], *typing.get_args(hints[field.name]))
        )
        if kind is bool:
            out.append((field.name, flag, [flag], True))
        else:
            out.append((field.name, flag, [flag, VALUES[kind]], kind(VALUES[kind])))
    return out


@pytest.mark.parametrize(
    ("group", "command"), [(g, c) for g, cs in TAKEN_BY.items() for c in cs], ids=lambda x: getattr(x, "__name__", x)
)
def test_every_flag_of_a_group_is_accepted_by_each_command_that_takes_it(commands, group, command) -> None:
    cmd = commands[command]
    for field, _, words, value in given(group):
        ctx = cmd.make_context(command, [*REQUIRED[command], *words])
        assert ctx.params[field] == value, f"loadlab {command} {' '.join(words)}"


@pytest.mark.parametrize("command", list(REQUIRED))
def test_help_lists_each_group_under_its_heading(command) -> None:
    helped = loadlab(command, "--help", env={"COLUMNS": "200"}, timeout=60)
    assert helped.returncode == 0, helped.stderr
    for group in (g for g, taken_by in TAKEN_BY.items() if command in taken_by):
        heading = helped.stdout.index(f"─ {group.panel} ─")
        flags = helped.stdout[heading:].split("╰")[0]
        assert all(f"{flag} " in flags for flag in flag_names(group)), (group.panel, flags)


@pytest.mark.parametrize(
    "group", [g for g in TAKEN_BY if g not in (LoadFlags, SweepFlags, WhatIfFlags)], ids=lambda g: g.__name__
)
def test_a_command_not_taking_a_group_refuses_its_flags(commands, group) -> None:
    """simulate has no endpoint: the client's and collectors' flags are unknown options there."""
    for command in set(REQUIRED) - set(TAKEN_BY[group]):
        with pytest.raises(Exception) as refused:  # click's UsageError, which typer vendors
            commands[command].make_context(command, [*REQUIRED[command], *given(group)[0][2]])
        assert refused.value.exit_code == 2 and "No such option" in refused.value.format_message()


def test_a_command_gets_each_group_as_one_typed_object() -> None:
    received: list[object] = []

    @takes_flags
    def cmd(name: str = typer.Option("n", "--name"), *, workload: WorkloadFlags, client: ClientFlags) -> None:
        received.extend((name, workload, client))

    word = typer.Typer()
    word.command()(cmd)
    word(["--input-len", "64", "--name", "a", "--api-key", "k", "--images", "0,2"], standalone_mode=False)
    assert received == ["a", WorkloadFlags(input_len="64", images="0,2"), ClientFlags(api_key="k")]


def test_a_flag_declared_twice_is_a_programming_error() -> None:
    with pytest.raises(TypeError, match="declared twice"):

        @takes_flags
        def cmd(*, load: LoadFlags, limits: SweepFlags) -> None:  # both have step_duration
            pass


def test_step_duration_is_declared_once_for_every_command_that_runs_steps() -> None:
    """run's and simulate's steps, a sweep's and plan --what-if's: one flag, one help text."""
    for group in (LoadFlags, SweepFlags, WhatIfFlags):
        declared = typing.get_type_hints(group, include_extras=True)["step_duration"]
        assert STEP_DURATION in typing.get_args(declared)[1:], group.__name__


def test_a_group_says_which_of_its_flags_were_given() -> None:
    assert EngineFlags().given() == [] and CollectorFlags().given() == []
    assert EngineFlags(max_num_seqs=4, prefix_caching=False).given() == ["--max-num-seqs", "--no-prefix-caching"]
    assert EngineFlags(prefix_caching=True).given() == ["--prefix-caching"]
    assert CollectorFlags(no_gpu=True).given() == ["--no-gpu"]


def test_the_engine_flags_set_the_simulated_engine_and_keep_its_defaults() -> None:
    assert EngineFlags().engine("h100:m") == EngineSettings("h100:m")
    engine = EngineFlags(max_num_seqs=4, gpu_memory_utilization=0.5, prefix_caching=False).engine("a100:m:tp2")
    assert engine == EngineSettings("a100:m:tp2", max_num_seqs=4, gpu_memory_utilization=0.5, prefix_caching=False)


def test_plan_of_a_run_folder_refuses_the_engine_flags(tmp_path) -> None:
    """The engine flags set what --what-if simulates; a measured run folder had its own server."""
    refused = loadlab("plan", str(tmp_path), "--users", "4", "--no-prefix-caching", timeout=60)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "--no-prefix-caching is for --what-if" in lines[0], refused.stderr


def test_the_groups_set_the_config_as_runs_flags_do() -> None:
    cfg = configure(
        RunConfig(),
        LoadFlags(concurrency="1,4"),
        WorkloadFlags(api="embeddings", items=3, input_len="uniform:8:16", seed=5),
        ClientFlags(model="m", api_key="k", processes=2),
        CollectorFlags(no_gpu=True, no_server_metrics=True, reset_prefix_cache=True, prometheus_selector='job="x"'),
        url="http://h",
    )
    assert cfg.concurrency == [1, 4] and cfg.api == "embeddings" and cfg.workload.items == 3
    assert cfg.workload.input_len == parse_length("uniform:8:16") and cfg.workload.seed == 5
    assert (cfg.model, cfg.api_key, cfg.processes) == ("m", "k", 2)
    assert cfg.gpu is False and cfg.server_metrics is None and cfg.reset_prefix_cache
    assert cfg.prometheus_selector == 'job="x"' and cfg.url == "http://h"
    # Flags not given leave the base's settings (a scenario file's) alone ...
    base = RunConfig(gpu=True, server_metrics="http://m/metrics", rate=[2.0])
    kept = configure(base, LoadFlags(), WorkloadFlags(), ClientFlags(), CollectorFlags())
    assert kept == base
    # ... and a load model given by a flag replaces the file's other one.
    assert configure(base, LoadFlags(concurrency="8")).rate == []


def test_trace_names_the_trace_workload_and_its_file() -> None:
    cfg = configure(RunConfig(), WorkloadFlags(trace="t.jsonl", trace_window="0:60"))
    assert (cfg.workload.kind, cfg.workload.dataset, cfg.workload.trace_window) == ("trace", "t.jsonl", "0:60")
    with pytest.raises(UserError, match="does not go with --workload synthetic"):
        configure(RunConfig(), WorkloadFlags(trace="t.jsonl", kind="synthetic"))
    with pytest.raises(UserError, match="leave out --dataset"):
        configure(RunConfig(), WorkloadFlags(trace="t.jsonl", dataset="other.jsonl"))


def test_every_config_flag_names_a_setting() -> None:
    """A field of a config group is a RunConfig/WorkloadConfig setting, or one its settings() maps."""
    for group in (LoadFlags, WorkloadFlags, ClientFlags, CollectorFlags):
        assert issubclass(group, ConfigFlags)
        configure(RunConfig(), group())  # every name is known to apply_overrides (else UserError)
