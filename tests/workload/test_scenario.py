"""Scenario files and CLI overrides: TOML onto RunConfig, one clear error per mistake."""

from pathlib import Path

import pytest

from loadlab.config import LengthDist, RunConfig
from loadlab.errors import UserError
from loadlab.workload.distributions import parse_length
from loadlab.workload.scenario import apply_overrides, check, load_scenario

REPO = Path(__file__).resolve().parents[2]

SCENARIO = """
url = "http://127.0.0.1:8000"
model = "m"
api = "completions"
concurrency = [1, 8, 32]
step_duration = 10
think_time = "uniform:0.5:1.5"
server_metrics = false

[workload]
kind = "synthetic"
input_len = "uniform:64:256"
output_len = 128
seed = 1
"""


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "scenario.toml"
    path.write_text(text)
    return path


def test_a_scenario_maps_onto_run_config(tmp_path):
    cfg = load_scenario(write(tmp_path, SCENARIO))
    assert isinstance(cfg, RunConfig)
    assert (cfg.url, cfg.model, cfg.api, cfg.concurrency, cfg.step_duration) == (
        "http://127.0.0.1:8000",
        "m",
        "completions",
        [1, 8, 32],
        10.0,
    )
    assert cfg.think_time == LengthDist(kind="uniform", mean=1.0, std=0, min=0.5, max=1.5)
    assert cfg.server_metrics is None
    assert cfg.workload.input_len == parse_length("uniform:64:256")
    assert cfg.workload.output_len == parse_length("128")
    assert cfg.workload.seed == 1
    assert cfg.rate == [] and cfg.timeout == RunConfig().timeout  # untouched keys keep defaults


def test_output_len_given_means_it_is_used_even_for_sharegpt(tmp_path):
    assert load_scenario(write(tmp_path, SCENARIO)).workload.output_from_dataset is False
    assert load_scenario(write(tmp_path, 'rate = [2]\n')).workload.output_from_dataset is True


def test_rate_may_be_a_single_number(tmp_path):
    cfg = load_scenario(write(tmp_path, 'rate = 2\narrival = "gamma"\nburstiness = 0.5\n'))
    assert cfg.rate == [2.0] and cfg.arrival == "gamma" and cfg.burstiness == 0.5


@pytest.mark.parametrize(
    "text,key",
    [
        ('urll = "x"', "urll"),
        ('concurrency = ["a"]', "concurrency"),
        ('timeout = "soon"', "timeout"),
        ("gpu = 1", "gpu"),
        ('[workload]\nkind = "synthetic"\ncolour = 3', "workload.colour"),
        ('[workload]\ninput_len = "uniform:9:1"', "workload.input_len"),
        ("[workload]\nturns = 2.5", "workload.turns"),
        ('workload = 3', "workload"),
        ('api = "grpc"', "api"),
        ('arrival = "burst"', "arrival"),
        ("concurrency = [4]\nrate = [1]", "concurrency or rate"),
        ('[workload]\nkind = "sharegpt"', "workload.dataset"),
        ('url = "http://[::1"', "url"),
        ("[workload]\nitems = 0", "workload.items"),
        ('api = "rerank"\n[workload]\nkind = "multiturn"', "independent prompts"),
    ],
)
def test_mistakes_name_the_key(tmp_path, text, key):
    with pytest.raises(UserError, match=key.replace(".", r"\.")) as e:
        load_scenario(write(tmp_path, text))
    assert "\n" not in str(e.value)


def test_unreadable_files_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_scenario(tmp_path / "nope.toml")
    with pytest.raises(UserError, match="not valid TOML"):
        load_scenario(write(tmp_path, "url = "))


def test_overrides_set_only_given_flags_and_leave_the_input_alone(tmp_path):
    cfg = load_scenario(write(tmp_path, SCENARIO))
    out = apply_overrides(
        cfg, url="http://other:9", concurrency=None, model=None, seed=9, input_len="fixed:32", duration=5
    )
    assert out.url == "http://other:9" and out.duration == 5.0
    assert out.concurrency == [1, 8, 32] and out.model == "m"
    assert out.workload.seed == 9 and out.workload.input_len == parse_length("32")
    assert cfg.url == "http://127.0.0.1:8000" and cfg.workload.seed == 1


def test_overrides_accept_cli_shaped_values():
    out = apply_overrides(RunConfig(), concurrency="1,4,16", rate=None, think_time="0.25", kind="multiturn")
    assert out.concurrency == [1, 4, 16]
    assert out.think_time == LengthDist(kind="fixed", mean=0.25, std=0, min=0.25, max=0.25)
    assert out.workload.kind == "multiturn"


def test_overriding_load_shape_replaces_the_files():
    cfg = apply_overrides(RunConfig(concurrency=[4]), concurrency=[], rate=[3.0])
    assert cfg.rate == [3.0] and cfg.concurrency == []


def test_bad_overrides_are_user_errors():
    with pytest.raises(UserError, match="colour"):
        apply_overrides(RunConfig(), colour="red")
    with pytest.raises(UserError, match="processes"):
        apply_overrides(RunConfig(), processes="many")
    with pytest.raises(UserError, match="rate"):
        apply_overrides(RunConfig(), rate=[-1.0])
    for flags in ({"concurrency": "1,,8"}, {"concurrency": "1,8,"}, {"rate": " , 2"}, {"concurrency": ""}):
        with pytest.raises(UserError, match="empty item"):  # never silently 1,8
            apply_overrides(RunConfig(), **flags)


def test_check_complete_wants_a_url_and_a_load():
    with pytest.raises(UserError, match="url"):
        check(RunConfig(concurrency=[1]))
    with pytest.raises(UserError, match="concurrency or rate"):
        check(RunConfig(url="http://x"))
    check(RunConfig(url="http://x", rate=[1.0]))


@pytest.mark.parametrize(
    "path", sorted(p for p in (REPO / "examples").glob("*.toml") if not p.name.startswith("slo-")), ids=lambda p: p.name
)
def test_example_scenarios_load_and_are_complete(path):  # examples/slo-*.toml: SLO files (tests/metrics)
    check(load_scenario(path))


def test_an_output_len_flag_pins_sharegpt_output_unless_told_otherwise():
    from loadlab.config import WorkloadConfig

    cfg = RunConfig(workload=WorkloadConfig(kind="sharegpt", dataset="x.json"))
    assert apply_overrides(cfg, output_len="64").workload.output_from_dataset is False
    assert apply_overrides(cfg, output_len="64", output_from_dataset=True).workload.output_from_dataset is True
    assert apply_overrides(cfg, seed=2).workload.output_from_dataset is True


def test_an_slo_table_is_kept_as_the_inline_text_and_checked_by_the_slo_parser(tmp_path):
    text = SCENARIO + '\n[slo]\nttft = 500\nttft_p99 = "2s"\n[slo.step."concurrency=8"]\noutput_tps = 100\n'
    cfg = load_scenario(write(tmp_path, text))
    assert cfg.slo == "ttft=500,ttft_p99=2s,step=concurrency=8:output_tps=100"
    assert "slo" in cfg.to_dict()  # run.json says which SLO the run was held to
    assert apply_overrides(cfg, slo="error_rate=1%").slo == "error_rate=1%"
    with pytest.raises(UserError, match=r"scenario.toml: bad SLO 'ttft_p99=fast'"):
        load_scenario(write(tmp_path, SCENARIO + '\n[slo]\nttft_p99 = "fast"\n'))
    with pytest.raises(UserError, match="bad SLO 'speed=1'"):
        apply_overrides(cfg, slo="speed=1")


def test_a_load_no_process_could_keep_up_with_is_refused_per_process():
    """--rate 1e6 once kept a run from ever ending (the scheduler never yielded) and
    --concurrency 1e9 tried to spawn a billion users: past a bound per process, a clear error."""
    with pytest.raises(UserError, match="add --processes"):
        check(RunConfig(url="http://x", rate=[1e6]))
    with pytest.raises(UserError, match="add --processes"):
        check(RunConfig(url="http://x", concurrency=[10**9]))
    check(RunConfig(url="http://x", rate=[8000.0], processes=2))  # 4000/s each: fine
    check(RunConfig(url="http://x", concurrency=[30000], processes=2))
