"""`loadlab mock` as a real process: the OpenAI stream shape, every fault, /truth and /metrics."""

from __future__ import annotations

import http.client
import itertools
import json
import signal
import socket
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadlab.mock.metrics import ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS
from tests.support.procs import BIN, Proc, free_port, loadlab, wait_http

TTFT, ITL = 0.05, 0.01

# Two mocks: one that behaves unless a request asks for a fault (X-Mock-Fault), one with fault rates.
MOCKS = {
    "plain": [
        "--ttft",
        str(TTFT),
        "--itl",
        str(ITL),
        "--output-len",
        "12",
        "--api-key",
        "sk-test",
        "--stall-seconds",
        "0.6",
        "--error-codes",
        "503,429",
    ],
    "mixed": [
        "--error-rate",
        "0.3",
        "--disconnect-rate",
        "0.3",
        "--seed",
        "11",
        "--itl",
        "0.001",
        "--truth-limit",
        "5",
    ],
}


@pytest.fixture(scope="module")
def mocks():
    """name -> port of a running `loadlab mock`."""
    ports = {name: free_port() for name in MOCKS}
    with ExitStack() as stack:
        procs = {
            name: stack.enter_context(
                Proc(
                    [
                        str(BIN / "loadlab"),
                        "mock",
                        "--port",
                        str(ports[name]),
                        "--ttft",
                        "0.01",
                        "--itl",
                        "0.002",
                        *flags,
                    ]
                )
            )
            for name, flags in MOCKS.items()
        }
        for name, proc in procs.items():
            wait_http(f"http://127.0.0.1:{ports[name]}/health", 60, proc.proc)
        yield ports


@dataclass
class Reply:
    status: int
    content_type: str
    lines: list[bytes] = field(default_factory=list)  # the raw body, line by line
    line_times: list[float] = field(default_factory=list)
    complete: bool = True  # the body ended cleanly

    def events(self) -> list[str]:
        return [ln[len(b"data: ") :].decode().rstrip("\n") for ln in self.lines if ln.startswith(b"data: ")]

    def chunks(self) -> list[dict]:
        return [json.loads(e) for e in self.events() if e != "[DONE]"]


def post(port: int, path: str, body: dict, headers: dict | None = None, timeout: float = 10) -> Reply:
    """POST and read the body line by line, as a streaming client does."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        reply = Reply(resp.status, resp.getheader("Content-Type", ""))
        try:
            while line := resp.readline():
                reply.lines.append(line)
                reply.line_times.append(time.time())
        except http.client.IncompleteRead:
            reply.complete = False
        return reply
    finally:
        conn.close()


def get_json(port: int, path: str, headers: dict | None = None) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path, headers=headers or {})
    return json.loads(conn.getresponse().read())


def truth_of(port: int, request_id: str) -> dict:
    return next(r for r in get_json(port, "/truth")["requests"] if r["request_id"] == request_id)


AUTH = {"Authorization": "Bearer sk-test"}
CHAT = {
    "model": "mock",
    "messages": [{"role": "user", "content": "hello"}],
    "stream": True,
    "stream_options": {"include_usage": True},
    "max_tokens": 7,
}
COMPLETION = {"model": "mock", "prompt": "hello", "stream": True, "max_tokens": 7}


def fault(name: str, request_id: str = "") -> dict[str, str]:
    """Headers that make the plain mock inject `name` into this request."""
    return {**AUTH, "X-Mock-Fault": name, **({"X-Request-Id": request_id} if request_id else {})}


def test_chat_stream_shape(mocks):
    reply = post(mocks["plain"], "/v1/chat/completions", CHAT, AUTH)
    assert reply.status == 200 and reply.content_type.startswith("text/event-stream")
    events = reply.events()
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    chunks = reply.chunks()
    content, usage = chunks[:-1], chunks[-1]
    assert len(content) == 7  # one event per token
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert all(len(c["choices"][0]["delta"]["content"]) == 1 for c in content)
    # the role travels with the first real token, never alone
    assert content[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all("role" not in c["choices"][0]["delta"] for c in content[1:])
    assert [c["choices"][0]["finish_reason"] for c in content] == [None] * 6 + ["length"]
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}


def test_completions_stream_shape_without_usage(mocks):
    reply = post(mocks["plain"], "/v1/completions", COMPLETION, AUTH)
    chunks = reply.chunks()
    assert len(chunks) == 7 and reply.events()[-1] == "[DONE]"
    assert all(c["object"] == "text_completion" and len(c["choices"][0]["text"]) == 1 for c in chunks)


def test_each_event_is_flushed_on_its_own_at_the_configured_pace(mocks):
    reply = post(mocks["plain"], "/v1/completions", {**COMPLETION, "max_tokens": 20}, AUTH)
    times = [t for ln, t in zip(reply.lines, reply.line_times, strict=True) if ln.startswith(b"data: {")]
    assert len(times) == 20
    # Sleeps never end early: the span of 19 gaps is at least 19 ITL (loose: a noisy 2-core CI).
    assert times[-1] - times[0] >= 19 * ITL * 0.9


def test_max_completion_tokens_and_the_default_length(mocks):
    body = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "stream": True,
        "max_completion_tokens": 3,
        "temperature": 0.5,
        "ignore_eos": True,
        "unknown_field": 1,
    }
    assert len(post(mocks["plain"], "/v1/chat/completions", body, AUTH).chunks()) == 3
    body.pop("max_completion_tokens")
    assert len(post(mocks["plain"], "/v1/chat/completions", body, AUTH).chunks()) == 12  # --output-len


@pytest.mark.parametrize("prompt,tokens", [("abc", 3), (["ab", "cd"], 4), ([1, 2, 3], 3), ([[1, 2], [3]], 3)])
def test_non_streaming_answers_and_prompt_forms(mocks, prompt, tokens):
    reply = post(mocks["plain"], "/v1/completions", {"prompt": prompt, "max_tokens": 4}, AUTH)
    body = json.loads(b"".join(reply.lines))
    assert reply.status == 200 and body["object"] == "text_completion"
    assert len(body["choices"][0]["text"]) == 4
    assert body["usage"] == {"prompt_tokens": tokens, "completion_tokens": 4, "total_tokens": tokens + 4}


def test_truth_records_when_each_token_left(mocks):
    port = mocks["plain"]
    before = time.time()
    reply = post(port, "/v1/chat/completions", CHAT, {**AUTH, "X-Request-Id": "req-truth-1"})
    truth = truth_of(port, "req-truth-1")
    assert truth["status"] == 200 and truth["fault"] is None and truth["finished"]
    times = truth["token_times"]
    assert len(times) == 7 and times == sorted(times)
    assert before - 0.5 < truth["received_time"] < times[0]
    assert times[0] - truth["received_time"] >= TTFT * 0.9
    # the client saw each token after the server sent it (same host, same wall clock)
    client = [t for ln, t in zip(reply.lines, reply.line_times, strict=True) if b'"content"' in ln]
    assert all(c >= s - 0.005 for c, s in zip(client, times, strict=True))


def test_arrival_is_the_first_read_of_a_request_not_its_handlers_start(mocks):
    """A request's head sent in two parts 0.3 s apart arrived with its first part, though aiohttp
    runs the handler only after the second; on a kept-alive connection each request (after a
    /health, after a 401 whose body was never read) gets its own arrival, never an earlier one."""
    port = mocks["plain"]
    body = json.dumps(COMPLETION).encode()

    def head(request_id: str, auth: bool = True) -> bytes:
        key = "Authorization: Bearer sk-test\r\n" if auth else ""
        return (
            f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{key}"
            f"X-Request-Id: {request_id}\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()

    def answered(reader) -> None:  # reads one response, whole, off the kept-alive connection
        resp = http.client.HTTPResponse(reader)
        resp.begin()
        resp.read()

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        first = head("req-arrival-split")
        sent = time.time()
        sock.sendall(first[:20])
        time.sleep(0.3)
        sock.sendall(first[20:] + body)
        answered(sock)
        assert sent - 0.005 < truth_of(port, "req-arrival-split")["received_time"] < sent + 0.1

        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        answered(sock)
        sock.sendall(head("req-arrival-401", auth=False))  # refused before its body is read
        answered(sock)
        sock.sendall(body)  # the 401's body, late: not the next request's arrival
        time.sleep(0.3)
        sent = time.time()
        sock.sendall(head("req-arrival-after") + body)
        answered(sock)
        assert truth_of(port, "req-arrival-after")["received_time"] >= sent - 0.005


def test_arrival_is_when_the_request_reached_the_host_not_when_the_loop_read_it():
    """The mock is stopped (SIGSTOP) while a request comes in and resumed 0.3 s later, as a loop
    busy with other streams reads it late: its arrival is the kernel's receive time."""
    port = free_port()
    with Proc(
        [str(BIN / "loadlab"), "mock", "--port", str(port), "--ttft", "0.01"], f"http://127.0.0.1:{port}/health"
    ) as mock:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.connect()
        mock.proc.send_signal(signal.SIGSTOP)
        try:
            sent = time.time()
            conn.request("POST", "/v1/completions", json.dumps(COMPLETION), {"X-Request-Id": "req-arrival-stopped"})
            time.sleep(0.3)
        finally:
            mock.proc.send_signal(signal.SIGCONT)
        conn.getresponse().read()
        conn.close()
        assert sent - 0.005 < truth_of(port, "req-arrival-stopped")["received_time"] < sent + 0.1


def test_truth_reset_and_generated_ids(mocks):
    port = mocks["plain"]
    post(port, "/v1/completions", COMPLETION, AUTH)
    assert all(r["request_id"] for r in get_json(port, "/truth")["requests"])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", "/truth/reset")
    assert conn.getresponse().status == 200
    assert get_json(port, "/truth") == {"requests": []}


def test_bad_key_unknown_model_bad_body_and_unknown_path(mocks):
    port = mocks["plain"]
    cases = [
        ({}, COMPLETION, "/v1/completions", 401),
        ({"Authorization": "Bearer wrong"}, COMPLETION, "/v1/completions", 401),
        (AUTH, {**COMPLETION, "model": "gpt-9"}, "/v1/completions", 404),
        (AUTH, {"prompt": "x", "max_tokens": 0}, "/v1/completions", 400),
        (AUTH, {"messages": "hi"}, "/v1/chat/completions", 400),
        (AUTH, {"prompt": "x", "max_tokens": 40000}, "/v1/completions", 400),
        (AUTH, COMPLETION, "/v1/embeddings", 404),
        (fault("explode"), COMPLETION, "/v1/completions", 400),
    ]
    for headers, body, path, status in cases:
        reply = post(port, path, body, headers)
        error = json.loads(b"".join(reply.lines))["error"]
        assert reply.status == status, (path, body)
        assert set(error) == {"message", "type", "param", "code"} and error["message"]


def post_raw(port: int, path: str, body: bytes, headers: dict) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json", **headers})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


@pytest.mark.parametrize(
    "body, headers",
    [
        (b"[" * 100_000 + b"]" * 100_000, {}),  # nests too deep
        (b'{"model": "mock", "messages": [{"role": "user", "content": "\\ud800"}]}', {}),  # lone surrogate
        (b'{"model": "mock", "messages": [{"role": "user", "content": [{"text": 5}]}]}', {}),
        (json.dumps(CHAT).encode(), {"Content-Encoding": "bogus"}),
        (json.dumps(CHAT).encode(), {"Content-Encoding": "gzip"}),  # not gzip at all
    ],
)
def test_hostile_bodies_get_400_not_500(mocks, body, headers):
    status, answer = post_raw(mocks["plain"], "/v1/chat/completions", body, {**AUTH, **headers})
    assert status == 400 and answer["error"]["code"] == 400 and answer["error"]["message"]
    assert post(mocks["plain"], "/v1/chat/completions", CHAT, AUTH).status == 200  # and it goes on


def test_a_body_that_does_not_decode_leaves_no_traceback_in_the_log(tmp_path):
    port = free_port()
    log = tmp_path / "mock.log"
    with Proc(
        [str(BIN / "loadlab"), "mock", "--port", str(port)], ready_url=f"http://127.0.0.1:{port}/health", log=log
    ):
        status, _ = post_raw(port, "/v1/chat/completions", json.dumps(CHAT).encode() * 50, {"Content-Encoding": "gzip"})
        assert status == 400
        assert post(port, "/v1/chat/completions", CHAT).status == 200
    assert "Traceback" not in log.read_text()


def test_the_api_key_may_come_from_the_environment():
    port = free_port()
    with Proc(
        [str(BIN / "loadlab"), "mock", "--port", str(port)],
        ready_url=f"http://127.0.0.1:{port}/health",
        env={"LOADLAB_SERVER_API_KEY": "sk-env"},
    ):
        assert post(port, "/v1/completions", COMPLETION).status == 401
        assert post(port, "/v1/completions", COMPLETION, {"Authorization": "Bearer sk-env"}).status == 200


def test_models_and_health(mocks):
    models = get_json(mocks["plain"], "/v1/models", AUTH)
    assert models["object"] == "list"
    card = models["data"][0]
    assert card["id"] == card["root"] == "mock" and card["max_model_len"] > 0
    conn = http.client.HTTPConnection("127.0.0.1", mocks["plain"], timeout=10)
    conn.request("GET", "/health")
    assert conn.getresponse().status == 200


def test_metrics_parse_with_vllm_names_labels_and_buckets(mocks):
    port = mocks["plain"]
    post(port, "/v1/chat/completions", CHAT, AUTH)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    families = {f.name: f for f in text_string_to_metric_families(conn.getresponse().read().decode())}
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions",
        "vllm:prompt_tokens",
        "vllm:generation_tokens",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:request_success",
    ):
        assert name in families, name
        assert all(s.labels["model_name"] == "mock" and "engine" in s.labels for s in families[name].samples)

    def value(family: str, sample: str, **labels: str) -> float:
        return next(
            s.value
            for s in families[family].samples
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
        )

    assert value("vllm:generation_tokens", "vllm:generation_tokens_total") >= 7
    assert value("vllm:request_success", "vllm:request_success_total", finished_reason="length") >= 1

    def bounds(family: str) -> list[float]:
        return [
            float(s.labels["le"])
            for s in families[family].samples
            if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"
        ]

    assert bounds("vllm:time_to_first_token_seconds") == TTFT_BUCKETS
    assert bounds("vllm:inter_token_latency_seconds") == ITL_BUCKETS
    assert bounds("vllm:e2e_request_latency_seconds") == REQUEST_LATENCY_BUCKETS


def test_running_and_kv_gauges_follow_live_streams(mocks):
    port = mocks["plain"]
    body = {**COMPLETION, "max_tokens": 150, "prompt": "x" * 1000}
    threads = [threading.Thread(target=post, args=(port, "/v1/completions", body, AUTH)) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    gauges = {
        s.name: s.value for f in text_string_to_metric_families(conn.getresponse().read().decode()) for s in f.samples
    }
    for t in threads:
        t.join()
    assert gauges["vllm:num_requests_running"] == 4
    assert 4000 / 65536 <= gauges["vllm:kv_cache_usage_perc"] < 5200 / 65536


def test_error_fault(mocks):
    port = mocks["plain"]
    reply = post(port, "/v1/chat/completions", CHAT, fault("error", "e1"))
    assert reply.status in (503, 429)
    assert json.loads(b"".join(reply.lines))["error"]["code"] == reply.status
    truth = truth_of(port, "e1")
    assert truth["fault"] == "error" and truth["status"] == reply.status and not truth["token_times"]


def test_disconnect_fault_closes_mid_stream_without_done(mocks):
    port = mocks["plain"]
    reply = post(port, "/v1/chat/completions", {**CHAT, "max_tokens": 10}, fault("disconnect", "d1"))
    assert reply.status == 200
    assert "[DONE]" not in reply.events() and len(reply.chunks()) == 5
    truth = truth_of(port, "d1")
    assert truth["fault"] == "disconnect" and not truth["finished"] and len(truth["token_times"]) == 5


def test_malformed_fault_sends_one_invalid_event_mid_stream(mocks):
    port = mocks["plain"]
    events = post(port, "/v1/completions", {**COMPLETION, "max_tokens": 10}, fault("malformed", "m1")).events()
    bad = []
    for i, event in enumerate(events[:-1]):
        try:
            json.loads(event)
        except json.JSONDecodeError:
            bad.append(i)
    assert bad == [5] and events[-1] == "[DONE]" and len(events) == 12
    assert truth_of(port, "m1")["fault"] == "malformed"


def test_stall_fault_pauses_mid_stream(mocks):
    port = mocks["plain"]
    reply = post(port, "/v1/completions", {**COMPLETION, "max_tokens": 10}, fault("stall", "s1"))
    assert reply.events()[-1] == "[DONE]"
    times = truth_of(port, "s1")["token_times"]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) >= 0.6 and gaps.index(max(gaps)) == 4  # between token 5 and token 6


def test_stall_longer_than_the_client_timeout_is_seen_as_a_timeout(mocks):
    with pytest.raises(TimeoutError):
        post(mocks["plain"], "/v1/completions", {**COMPLETION, "max_tokens": 10}, fault("stall"), timeout=0.3)


def test_not_sse_fault_answers_a_stream_request_with_plain_json(mocks):
    port = mocks["plain"]
    reply = post(port, "/v1/chat/completions", CHAT, fault("not_sse", "n1"))
    assert reply.status == 200 and reply.content_type.startswith("application/json")
    body = json.loads(b"".join(reply.lines))
    assert body["object"] == "chat.completion" and len(body["choices"][0]["message"]["content"]) == 7
    assert truth_of(port, "n1")["fault"] == "not_sse"


def test_faults_mix_by_their_rates_and_truth_keeps_the_latest(mocks):
    outcomes = []
    for i in range(20):
        reply = post(mocks["mixed"], "/v1/completions", {**COMPLETION, "max_tokens": 4}, {"X-Request-Id": f"x{i}"})
        outcomes.append((reply.status, "[DONE]" in reply.events()))
    assert [r["request_id"] for r in get_json(mocks["mixed"], "/truth")["requests"]] == [f"x{i}" for i in range(15, 20)]
    statuses = {s for s, _ in outcomes}
    assert 200 in statuses and statuses - {200}  # both errors and successes
    assert (200, False) in outcomes and (200, True) in outcomes  # both disconnects and full streams


def test_client_that_goes_away_is_recorded(mocks):
    port = mocks["plain"]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(
        "POST",
        "/v1/completions",
        json.dumps({**COMPLETION, "max_tokens": 200}),
        {**AUTH, "X-Request-Id": "gone-1", "Content-Type": "application/json"},
    )
    resp = conn.getresponse()
    resp.readline()
    conn.sock.close()
    conn.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        truth = truth_of(port, "gone-1")
        if truth["end_time"] is not None:
            break
        time.sleep(0.1)
    assert truth["client_disconnected"] and not truth["finished"]


@pytest.mark.parametrize(
    "args",
    [
        ["--error-rate", "2"],
        ["--error-codes", "abc"],
        ["--port", "-5"],
        ["--ttft", "inf"],
        ["--itl", "nan"],
        ["--error-codes", "500,,429"],
    ],
)
def test_bad_flags_are_one_line_errors(args):
    result = loadlab("mock", "--port", str(free_port()), *args, timeout=60)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1


def test_sigterm_ends_the_mock_promptly_even_with_a_stalled_stream():
    port = free_port()
    with Proc(
        [str(BIN / "loadlab"), "mock", "--port", str(port), "--stall-rate", "1", "--stall-seconds", "60"],
        ready_url=f"http://127.0.0.1:{port}/health",
    ) as proc:
        t = threading.Thread(target=lambda: _ignore(post, port, "/v1/completions", COMPLETION, timeout=30))
        t.start()
        time.sleep(0.5)
        start = time.monotonic()
        assert proc.stop(timeout=20) == 0
        assert time.monotonic() - start < 10
        t.join()


def _ignore(fn, *args, **kwargs) -> None:
    try:
        fn(*args, **kwargs)
    except Exception:
        pass


def test_the_official_openai_client_works_against_the_mock(mocks):
    import openai

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{mocks['plain']}/v1", api_key="sk-test", max_retries=0)
    assert [m.id for m in client.models.list()] == ["mock"]
    stream = client.chat.completions.create(
        model="mock",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content for c in chunks if c.choices) == "the q"
    assert chunks[-1].usage.completion_tokens == 5
    done = client.completions.create(model="mock", prompt="hi", max_tokens=3)
    assert done.choices[0].text == "the" and done.usage.prompt_tokens == 2
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=client.base_url, api_key="wrong", max_retries=0).models.list()
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="other", prompt="hi", max_tokens=3)


def test_a_port_in_use_is_a_one_line_error(mocks):
    result = loadlab("mock", "--port", str(mocks["plain"]), timeout=60)
    assert result.returncode == 2 and result.stderr.startswith("error: cannot listen on")
