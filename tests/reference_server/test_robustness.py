"""Malformed, extreme and abandoned requests: never a 5xx for a client mistake, never a crash,
never a leaked KV block."""

from __future__ import annotations

import json
import math
import socket
import time

import pytest
import requests
from hypothesis import HealthCheck, event, given, settings, strategies as st

from tests.support.reference_server import MAX_MODEL_LEN, MODEL, sse_data, start_server

ABORTS = ("vllm:request_success_total", {"finished_reason": "abort"})


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with start_server(tmp_path_factory.mktemp("robust") / "server.log") as s:
        yield s


# ---- strategies: plausible requests, extreme values, and one field swapped for garbage -----------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
extreme_ints = st.sampled_from([0, -1, MAX_MODEL_LEN, 2**31, 2**63, -(2**63) - 1, 2**64, 10**30, -(10**400)])
garbage = json_values | extreme_ints | st.floats() | st.text(max_size=3) | st.just("🦊" * 3000)

# Prompts sharing their first blocks, so the prefix cache shares and evicts blocks across examples.
SHARED_PREFIX = "A system prompt that many requests share, long enough for a few KV blocks: "
texts = (
    st.text(max_size=40)
    | st.just("x" * (MAX_MODEL_LEN + 1))
    | st.just("<|eos|><|im_end|>")
    | st.just("ü" * 120)
    | st.just("lone \ud800 surrogate")
    | st.text(max_size=20).map(lambda t: SHARED_PREFIX + t)
)
token_ids = st.lists(st.integers(0, 260), min_size=1, max_size=8)
prompts = texts | st.lists(texts, min_size=1, max_size=2) | token_ids | st.lists(token_ids, min_size=1, max_size=2)
parts = st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": texts}), min_size=1, max_size=2)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant"]), "content": texts | parts},
        optional={"name": st.text(max_size=5)},
    ),
    min_size=1,
    max_size=3,
)
max_tokens = st.integers(1, 16)
# Where float sampling parameters once broke the engine (top_p=1e-46 rounds to 0 in float32), and
# what JSON parsers let through (NaN, Infinity): accepted values must serve, the rest must be a 400.
float_extremes = (
    st.sampled_from(
        [
            0.0,
            -0.0,
            5e-324,
            2.2e-308,
            1e-300,
            1e-46,
            1e-45,
            1.2e-38,
            1e-6,
            1e-5,
            0.9999999,
            1.0,
            1.0000001,
            2.0,
            1e6,
            1e300,
            1.7976931348623157e308,
            math.nan,
            math.inf,
            -math.inf,
        ]
    )
    | st.floats()
)
sampling = {
    "model": st.just(MODEL),
    "max_completion_tokens": st.integers(1, 16),
    "min_tokens": st.integers(0, 2),
    "n": st.just(1),
    "temperature": st.floats(0, 2) | float_extremes,
    "top_p": st.floats(0.01, 1) | float_extremes,
    "min_p": st.floats(0, 1) | float_extremes,
    "top_k": st.integers(-1, 600) | extreme_ints,
    "seed": st.integers(-(2**63), 2**63 - 1),
    "stop": st.text(max_size=3) | st.lists(st.text(max_size=4), max_size=5),
    "ignore_eos": st.booleans(),
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries(
        {}, optional={"include_usage": st.booleans(), "continuous_usage_stats": st.booleans()}
    ),
    "logprobs": json_values,
    "unknown_field": json_values,
}
requests_by_path = {
    # max_tokens always (unless swapped for garbage): chat's default, the whole context, is slow on a CPU.
    "/v1/completions": st.fixed_dictionaries({"prompt": prompts, "max_tokens": max_tokens}, optional=sampling),
    "/v1/chat/completions": st.fixed_dictionaries({"messages": messages, "max_tokens": max_tokens}, optional=sampling),
    "/tokenize": st.fixed_dictionaries({}, optional={"prompt": texts, "messages": messages}),
    "/detokenize": st.fixed_dictionaries({"tokens": token_ids}),
}
FIELDS = ["prompt", "messages", "tokens", "max_tokens", *sampling]


@st.composite
def api_requests(draw: st.DrawFn) -> tuple[str, dict]:
    """A path and a plausible body for it; half the time one field (maybe a missing one) is garbage."""
    path = draw(st.sampled_from(sorted(requests_by_path)))
    body = draw(requests_by_path[path])
    if draw(st.booleans()):
        body[draw(st.sampled_from(FIELDS))] = draw(garbage)
    return path, body


def check_answer(response: requests.Response) -> None:
    """A client mistake is a 4xx in OpenAI format; a success is well formed."""
    assert response.status_code < 500, response.text
    if response.status_code != 200:
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    elif response.headers["Content-Type"].startswith("text/event-stream"):
        data = sse_data(response.content)
        assert all("error" not in json.loads(d) for d in data[:-1]), data
    else:
        response.json()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(request=api_requests())
def test_malformed_and_extreme_requests_get_a_4xx_or_a_good_answer_and_leak_nothing(server, request):
    path, body = request
    response = server.post(path, json.dumps(body))  # json.dumps lets NaN and Infinity through, as some clients do
    event(f"HTTP {response.status_code}")  # --hypothesis-show-statistics: how many were served
    check_answer(response)
    assert server.pool_is_whole(), "KV blocks or sequences left behind"
    assert_still_serving(server)


def assert_still_serving(server) -> None:
    """The next ordinary request succeeds (a request must never stop the engine)."""
    assert server.get("/health").status_code == 200
    response = server.post("/v1/completions", {"prompt": "ok", "max_tokens": 2, "ignore_eos": True})
    assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] == 2, response.text


SAMPLING_FLOATS = ("temperature", "top_p", "min_p")


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    params=st.fixed_dictionaries({}, optional={name: float_extremes for name in SAMPLING_FLOATS}),
    top_k=st.integers(-1, 300) | extreme_ints,
    stream=st.booleans(),
)
def test_sampling_parameters_at_float_extremes_are_served_or_a_400_and_never_stop_the_engine(
    server, params, top_k, stream
):
    body = {"prompt": "abc", "max_tokens": 4, "ignore_eos": True, "seed": 1, "top_k": top_k, "stream": stream, **params}
    response = server.post("/v1/completions", json.dumps(body))
    check_answer(response)
    if any(not math.isfinite(v) for v in params.values()):
        assert response.status_code == 400 and response.json()["error"]["param"] in (*SAMPLING_FLOATS, "top_k")
    assert server.pool_is_whole()
    assert_still_serving(server)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    path=st.sampled_from(sorted(requests_by_path)) | st.text(alphabet="/abcdv1", max_size=12).map(lambda p: "/" + p),
    body=st.binary(max_size=64),
    method=st.sampled_from(["POST", "GET", "PUT", "DELETE"]),
)
def test_random_bytes_methods_and_paths_are_client_errors(server, path, body, method):
    response = requests.request(method, server.url + path, data=body, timeout=30)
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert response.json()["error"]["message"]


def test_the_server_is_healthy_after_abuse(server):
    check_answer(server.post("/v1/completions", {"prompt": "🦊" * 5000, "max_tokens": 1}))
    check_answer(server.post("/v1/completions", b"[" * 100_000))  # deeper than the JSON parser's recursion limit
    check_answer(server.post("/v1/completions", {"prompt": "x" * 20_000_000}))  # beyond the body limit: 413
    for encoding in ("gzip", "deflate", "br"):  # a body that does not match its Content-Encoding
        check_answer(server.post("/v1/completions", b"not compressed", headers={"Content-Encoding": encoding}))
    assert server.get("/health").status_code == 200
    assert server.pool_is_whole()


# ---- clients that go away ----------------------------------------------------------------------


def open_request(server, body: dict) -> socket.socket:
    """Send a request on a raw socket (so the test controls exactly when the connection closes)."""
    payload = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), timeout=30)
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
    )
    return sock


def test_a_client_that_disconnects_mid_stream_frees_its_sequence_at_once(server):
    aborts = server.metric(ABORTS[0], **ABORTS[1])
    sock = open_request(server, {"prompt": "x", "max_tokens": MAX_MODEL_LEN - 2, "ignore_eos": True, "stream": True})
    received = b""
    while received.count(b"data: ") < 3:
        received += sock.recv(4096)
    assert server.metric("vllm:num_requests_running") == 1
    sock.close()
    assert server.pool_is_whole()
    assert server.metric(ABORTS[0], **ABORTS[1]) == aborts + 1  # aborted, not finished


def test_a_client_that_disconnects_while_waiting_for_a_whole_response_frees_its_sequence(server):
    aborts = server.metric(ABORTS[0], **ABORTS[1])
    sock = open_request(server, {"prompt": "x", "max_tokens": MAX_MODEL_LEN - 2, "ignore_eos": True})
    deadline = time.monotonic() + 10
    while server.metric("vllm:num_requests_running") == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    sock.close()
    assert server.pool_is_whole()
    assert server.metric(ABORTS[0], **ABORTS[1]) == aborts + 1
