"""One load-generator worker process: `python -m loadlab.client.worker --master-port P`.

Started by loadlab.client.distributed (one per `--processes`); it can also join a master on another
host with `--master-host`. It runs loadlab's user classes, takes the run's context from the master
and ships its records there (loadlab.client.shipping); it exits when the master quits.
"""

from __future__ import annotations

from locust import User
from locust.env import Environment
from locust.log import setup_logging

import argparse
import inspect

from loadlab.client.context import add_loadlab_events
from loadlab.client.shipping import WorkerShipper


def user_classes() -> list[type[User]]:
    """Every runnable user class of loadlab.client.users (the master picks which ones run)."""
    from loadlab.client import users

    return [obj for obj in vars(users).values() if inspect.isclass(obj) and issubclass(obj, User) and not obj.abstract]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m loadlab.client.worker", description=__doc__)
    parser.add_argument("--master-host", default="127.0.0.1")
    parser.add_argument("--master-port", type=int, required=True)
    parser.add_argument("--loglevel", default="WARNING")
    args = parser.parse_args(argv)
    setup_logging(args.loglevel)

    environment = Environment(user_classes=user_classes())
    add_loadlab_events(environment.events)
    runner = environment.create_worker_runner(args.master_host, args.master_port)
    WorkerShipper(environment)
    runner.greenlet.join()


if __name__ == "__main__":
    main()
