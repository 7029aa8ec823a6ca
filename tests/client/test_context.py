"""loadlab's typed places on Locust objects: its event hooks and the run's context.

Run in a child process: importing Locust monkey-patches the standard library with gevent, which
must not happen inside the test process.
"""

from __future__ import annotations

from tests.support.procs import python_json

CHECK = """
import json
from locust.env import Environment
from locust.event import EventHook, Events
from loadlab.client.context import (ClientContext, LoadlabEvents, add_loadlab_events, context_of,
                                    find_context, set_context)
from loadlab.config import RunConfig

events = Events()
typed = add_loadlab_events(events)
hooks = {name: getattr(events, name) for name in LoadlabEvents.__annotations__}
add_loadlab_events(events)   # again: the hooks (and their listeners) are kept
env = Environment()
before = find_context(env)
try:
    context_of(env)
    raised = False
except AttributeError:
    raised = True
context = ClientContext(config=RunConfig(url="http://a:1", model="m"), worker="w")
set_context(env, context)
print(json.dumps({
    "same_object": typed is events, "hooks": sorted(hooks),
    "all_hooks": all(isinstance(h, EventHook) for h in hooks.values()),
    "kept": all(getattr(events, name) is h for name, h in hooks.items()),
    "locust_own": isinstance(events.request, EventHook),
    "none_before": before is None, "raised_before": raised,
    "found": find_context(env) is context and context_of(env) is context,
    "attribute": env.loadlab is context}))
"""


def test_event_hooks_are_added_once_and_the_context_is_found_only_once_set():
    result = python_json("-c", CHECK)
    assert result.pop("hooks") == sorted(
        ["llm_request", "llm_step", "llm_worker_anchor", "llm_samples", "llm_request_sent", "llm_worker_lost"]
    )
    assert all(result.values()), result
