"""loadlab's users under Locust's own command line, web UI and master/worker mode.

    locust -f locustfiles/openai_stream.py --host http://127.0.0.1:8000/v1 --loadlab-model m
    locust -f locustfiles/openai_stream.py --host URL --loadlab-rate 5          # open loop, 5 req/s
    locust -f locustfiles/openai_stream.py --host URL --master --expect-workers 2 --loadlab-out runs/x
    locust -f locustfiles/openai_stream.py --worker --master-host MASTER        # on any host

Closed loop (default): -u users, each one request at a time. Open loop (--loadlab-rate R): one
scheduler user per process (-u defaults to the number of processes), R req/s in total. Workers
take the settings from the master and ship every record to it; the master (or the single
process) keeps live LLM statistics for the web UI's "LLM" tab (/loadlab/stats as JSON) and,
with --loadlab-out DIR, writes all records of all workers to the run folder DIR.
Locust's request statistics get one entry per HTTP request, never per token.
"""

from __future__ import annotations

from locust import events
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

import logging
import sys
from pathlib import Path

from loadlab.analyze.analysis import write_analysis
from loadlab.analyze.summary import write_summary
from loadlab.client.context import ClientContext, add_loadlab_events
from loadlab.client.discovery import API_KEY_ENV, api_key_from_env, discover_model
from loadlab.client.selfcheck import SelfCheck
from loadlab.client.shipping import MasterShipper, WorkerShipper, in_flight_total, worker_id
from loadlab.client.users import ClosedLoopUser, OpenLoopUser  # Locust finds both; init keeps one
from loadlab.clock import now
from loadlab.collect import build_collectors
from loadlab.conductor.livestats import LiveStats
from loadlab.conductor.liveverdict import LiveVerdict
from loadlab.conductor.recording import attach_writer
from loadlab.conductor.webui import install_llm_tab
from loadlab.config import RunConfig
from loadlab.errors import UserError
from loadlab.store.meta import DEGRADED, FINISHED
from loadlab.store.reader import load_run
from loadlab.store.run_folder import RunWriter
from loadlab.store.schema import StepInfo
from loadlab.terminal import inert
from loadlab.urls import parse_http_url
from loadlab.workload.scenario import apply_overrides

log = logging.getLogger("loadlab")


@events.init_command_line_parser.add_listener
def add_options(parser) -> None:
    # On Locust's parser itself: its argument groups do not take include_in_web_ui.
    parser.add_argument(
        "--loadlab-model", default="", help="model name sent in each request (default: the first of GET /v1/models)"
    )
    parser.add_argument(
        "--loadlab-api", default="chat", choices=["chat", "completions"], help="/chat/completions or /completions"
    )
    # Not in the web UI: Locust would put its value into the page's source.
    parser.add_argument(
        "--loadlab-api-key",
        default="",
        include_in_web_ui=False,
        help=f"bearer token (default: ${' or $'.join(API_KEY_ENV)}); never written to disk",
    )
    parser.add_argument("--loadlab-input-len", default="128", help='prompt tokens, e.g. 128 or "uniform:64:256"')
    parser.add_argument("--loadlab-output-len", default="128", help="max_tokens per request, same forms")
    # Command line only: it picks the user class (closed or open loop) when Locust starts.
    parser.add_argument(
        "--loadlab-rate",
        type=float,
        default=0.0,
        include_in_web_ui=False,
        help="open loop: requests/s over all processes (0: closed loop with -u users)",
    )
    parser.add_argument("--loadlab-arrival", default="poisson", help="open loop: poisson | constant | gamma")
    parser.add_argument("--loadlab-timeout", type=float, default=300.0, help="per-request timeout, seconds")
    parser.add_argument(
        "--loadlab-out",
        default="",
        include_in_web_ui=False,
        help="run folder for every request record (on the master / single process)",
    )
    parser.add_argument(
        "--loadlab-server-metrics",
        default="",
        include_in_web_ui=False,
        help="scrape the server's Prometheus metrics (a URL, or a path such as /metrics on "
        "--host): the LLM tab charts running/waiting/KV and the live verdict reads them",
    )


def run_config(environment: Environment) -> RunConfig:
    """The RunConfig of the loadlab options and --host (UserError when one is wrong)."""
    o = environment.parsed_options
    rate = float(o.loadlab_rate or 0)
    url = environment.host or ""
    parsed = parse_http_url(url, "--host")  # checked here, so that the error names Locust's option
    api_key = o.loadlab_api_key or api_key_from_env()
    model = o.loadlab_model or discover_model(parsed, api_key, 10.0, "--loadlab-model")
    return apply_overrides(
        RunConfig(),
        url=url,
        model=model,
        api=o.loadlab_api,
        api_key=api_key,
        input_len=o.loadlab_input_len,
        output_len=o.loadlab_output_len,
        rate=[rate] if rate > 0 else [],
        concurrency=[],
        arrival=o.loadlab_arrival,
        timeout=o.loadlab_timeout,
        out=o.loadlab_out,
        server_metrics=o.loadlab_server_metrics or None,
        gpu=False,
    )


@events.init.add_listener
def on_init(environment: Environment, runner, web_ui, **_) -> None:
    loadlab_events = add_loadlab_events(environment.events)
    if isinstance(runner, WorkerRunner):  # settings come from the master
        WorkerShipper(environment)
        return
    options = environment.parsed_options
    open_loop = float(options.loadlab_rate or 0) > 0
    try:
        environment.loadlab = ClientContext(config=run_config(environment), worker=worker_id())
    except UserError as e:
        log.error("error: %s", inert(str(e)))
        sys.exit(2)
    environment.user_classes[:] = [OpenLoopUser if open_loop else ClosedLoopUser]
    if open_loop and options.num_users is None:  # one scheduler per process
        options.num_users = options.expect_workers if isinstance(runner, MasterRunner) else 1

    if isinstance(runner, MasterRunner):  # first, before anything yields: workers may say HELLO now
        MasterShipper(environment)
    else:  # a single process watches its own CPU and loop lag (workers do it in WorkerShipper)
        SelfCheck(environment.loadlab.worker).start(lambda samples: loadlab_events.llm_samples.fire(samples=samples))
    if options.loadlab_out:
        _write_run_folder(environment, Path(options.loadlab_out))
    _start_collectors(environment)
    live = LiveStats(open_loop, in_flight=lambda: in_flight_total(environment))
    loadlab_events.llm_request.add_listener(lambda record, **_: live.add(record))
    if web_ui:
        install_llm_tab(environment, live, _live_verdict(environment))

    @events.test_start.add_listener
    def begin_step(environment: Environment, **_) -> None:
        # Each test started (from the web UI, again and again) is a new step of the run; the host
        # and the options may have changed since init.
        context = environment.loadlab
        index = 0 if context.step is None else context.step.index + 1
        context.config = run_config(environment)
        rate = context.config.rate
        users, processes = environment.runner.target_user_count, environment.runner.worker_count
        if rate and users != processes:
            log.warning(
                "open loop runs one scheduler user per process: use -u %d (not %d), or the rate "
                "is %d/%d times --loadlab-rate",
                processes,
                users,
                users,
                processes,
            )
        target = rate[0] if rate else users
        mode = "open" if rate else "closed"
        label = f"rate={target:g}" if rate else f"concurrency={target}"
        step = StepInfo(index=index, label=label, mode=mode, target=target, start_time=now())
        live.reset()  # like Locust's own statistics, the LLM tab shows the current test
        context.step = step
        loadlab_events.llm_step.fire(step=step)


def _start_collectors(environment: Environment) -> None:
    """The server-metrics scraper (--loadlab-server-metrics), on the master or single process;
    its samples go where the workers' go (`llm_samples`: the run folder, the LLM tab)."""
    try:
        collectors = build_collectors(environment.loadlab.config)
    except UserError as e:
        log.error("error: %s", inert(str(e)))
        sys.exit(2)
    hooks = environment.events
    for c in collectors:
        c.start(lambda samples: hooks.llm_samples.fire(samples=samples))
        hooks.quitting.add_listener(lambda c=c, **_: c.stop())


def _live_verdict(environment: Environment) -> LiveVerdict:
    """The live verdict of the last 30 s for the LLM tab, fed by the same events as the run folder."""
    verdict = LiveVerdict(environment.loadlab.config.to_dict(), lambda: environment.loadlab.step, now)
    hooks = environment.events
    hooks.llm_request.add_listener(lambda record, **_: verdict.add_record(record))
    hooks.llm_samples.add_listener(lambda samples, **_: verdict.add_samples(samples))
    hooks.quitting.add_listener(lambda **_: verdict.close())
    return verdict


def _write_run_folder(environment: Environment, folder: Path) -> None:
    """Every record (all workers') goes to the run folder; it is closed when Locust quits."""
    context = environment.loadlab
    try:
        writer = RunWriter(folder, context.config, context.anchor)
    except UserError as e:
        log.error("error: %s", inert(str(e)))
        sys.exit(2)
    writer.start_autoflush()
    hooks = environment.events
    losses = attach_writer(hooks, writer)  # workers lost: the run ends degraded
    hooks.llm_step.add_listener(lambda step, **_: writer.begin_step(step))

    def end_step(**_) -> None:
        if environment.loadlab.step is not None:
            writer.end_step(environment.loadlab.step.index, now())

    def close(**_) -> None:
        # Locust quits the runner only after the quitting listeners: quit it first, so the
        # workers' last records (and a single process's aborted requests) reach the folder.
        environment.runner.quit()
        writer.close(DEGRADED if losses else FINISHED)
        try:
            run = load_run(folder)
            write_summary(run)
        except OSError as e:  # the parts are there: `loadlab summary` recomputes it
            writer.fail(e)
            return
        try:
            write_analysis(run)
        except OSError as e:  # `loadlab analyze` writes it later
            log.warning("analysis.json not written: %s", e)

    hooks.test_stop.add_listener(end_step)
    hooks.quitting.add_listener(close)
