"""Drive loadlab's Locust users as a library for test_users.py (a subprocess: Locust patches with gevent).

    python tests/client/users_driver.py URL MODE TARGET SECONDS [REQUESTS]

Prints one JSON object: what Locust's own statistics counted and what `llm_request` delivered.
"""

from __future__ import annotations

from locust.env import Environment

import json
import sys

import gevent

from loadlab.client.context import ClientContext, add_loadlab_events
from loadlab.client.users import ClosedLoopUser, OpenLoopUser, in_flight
from loadlab.clock import now
from loadlab.config import LengthDist, RunConfig, WorkloadConfig
from loadlab.store.schema import StepInfo


def main(url: str, mode: str, target: float, seconds: float, requests: int = 0) -> dict:
    workload = WorkloadConfig(
        input_len=LengthDist(mean=16, min=16, max=16), output_len=LengthDist(mean=8, min=8, max=8)
    )
    config = RunConfig(
        url=url,
        model="m",
        requests=requests,
        timeout=10,
        workload=workload,
        **({"concurrency": [int(target)]} if mode == "closed" else {"rate": [target]}),
    )
    env = Environment(user_classes=[ClosedLoopUser if mode == "closed" else OpenLoopUser], host=url)
    add_loadlab_events(env.events)
    env.loadlab = ClientContext(config=config, worker="driver")
    records, peak = [], [0]
    env.events.llm_request.add_listener(lambda record, **_: records.append(record))
    runner = env.create_local_runner()
    env.loadlab.step = StepInfo(0, "s", mode, target, now())
    runner.start(int(target) if mode == "closed" else 1, spawn_rate=1000)
    for _ in range(int(seconds / 0.05)):
        gevent.sleep(0.05)
        peak[0] = max(peak[0], in_flight(env))
    env.loadlab.step = None
    env.stop_timeout = 10
    runner.stop()
    runner.quit()
    total = env.stats.total
    return {
        "locust_requests": total.num_requests,
        "locust_failures": total.num_failures,
        "records": len(records),
        "failed_records": sum(not r.ok for r in records),
        "ids": [r.request_id for r in records],
        "peak_in_flight": peak[0],
        "in_flight_after": in_flight(env),
        "tokens": [r.client_tokens for r in records],
    }


if __name__ == "__main__":
    args = sys.argv[1:]
    print(json.dumps(main(args[0], args[1], float(args[2]), float(args[3]), *map(int, args[4:]))))
