"""One streaming request against a real `loadlab mock`: per-token timing and every failure category.

The client runs in this process on gevent sockets (no monkey-patching needed); the mock runs as a
subprocess and reports, per X-Request-Id, when it really sent each token (GET /truth).
"""

from __future__ import annotations

import json
import re
import socket
import time

import gevent
import pytest
from gevent.server import StreamServer

from loadlab.client.stream import Endpoint, build_body, error_category
from loadlab.config import RunConfig
from loadlab.errors import UserError
from loadlab.store.schema import ErrorCategory
from tests.support.event_stream import client, send, serve_events, spec, start_mock, truth, url_of
from tests.support.reference_server import MODEL, start_server


@pytest.fixture(scope="module")
def clean_mock():
    with start_mock("--ttft", "0.05", "--itl", "0.02") as mock:
        yield url_of(mock)


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_token_times_match_the_mock_truth(clean_mock, api):
    http = client(clean_mock, concurrency=8)
    ids = [f"{api}-timing-{i}" for i in range(8)]
    jobs = [gevent.spawn(send, clean_mock, http, rid, api=api, max_tokens=20) for rid in ids]
    gevent.joinall(jobs, timeout=30)
    records = [j.value for j in jobs]
    served = truth(clean_mock)
    errors = []
    for rec in records:
        assert rec.ok, rec.error_detail
        assert rec.status == 200 and rec.finish_reason == "length"
        assert rec.completion_tokens == 20 and rec.client_tokens == 20 and rec.prompt_tokens > 0
        real = served[rec.request_id]["token_times"]
        assert len(rec.token_times) == len(real) == 20
        assert rec.first_token_time == rec.token_times[0]
        assert rec.scheduled_time <= rec.send_time < rec.first_token_time <= rec.end_time
        assert rec.token_events == "chunks" and rec.empty_chunks == 0
        assert rec.server_request_id.startswith("chatcmpl-" if api == "chat" else "cmpl-")  # the stream's id
        errors += [mine - theirs for mine, theirs in zip(rec.token_times, real, strict=True)]
    assert len({rec.server_request_id for rec in records}) == len(records)
    errors.sort()
    # A token is timed when its packet reached this host; the mock reads its clock just after
    # its write returns, so the client's time can precede the mock's by as long as the mock was
    # held up in between (milliseconds on a busy shared 2-core machine), never by much more.
    assert errors[0] > -0.05
    assert abs(errors[len(errors) // 2]) < 0.025


def test_lines_that_arrive_together_share_a_time_and_a_split_line_waits_for_its_end():
    """A hand-written server (CRLF line endings): two events in one write, then an event whose
    line comes in two writes 0.2 s apart, then [DONE]."""
    event = b'data: {"choices":[{"delta":{"content":"%s"},"finish_reason":%s}]}\r\n\r\n'
    together = event % (b"a", b"null") + event % (b"b", b"null")
    split = event % (b"c", b'"stop"') + b"data: [DONE]\r\n\r\n"
    serve = serve_events([together, 0.19, split[:30], 0.19, split[30:]])  # each write + 10 ms

    server = StreamServer(("127.0.0.1", 0), serve)
    server.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        rec = send(url, client(url), "batched")
    finally:
        server.stop(timeout=1)
    assert rec.ok, rec.error_detail
    assert rec.finish_reason == "stop" and rec.client_tokens == 3
    first, second, third = rec.token_times
    assert first == second  # one read brought both lines
    assert third - second >= 0.39  # complete only with the third write, 0.4 s later


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_on_the_reference_server_with_chinese_and_emoji_every_token_counts(tmp_path, api):
    """The reference server streams one chunk per token, "" while a character's bytes are
    incomplete (as vLLM does; its byte-level tokens make CJK text and emoji 3-4 tokens a
    character, and the random model's bytes often begin one): the client's count is usage's."""
    prompts = ["你好，请用中文介绍一下你自己。", "🙂🚀 emoji 测试 🎉", "日本語と中文の混合テキスト ✨"]
    with start_server(tmp_path / "server.log", "--output-text", "utf8") as server:
        http = client(server.url, concurrency=len(prompts), timeout=60)
        jobs = [
            gevent.spawn(
                send, server.url, http, f"{api}-cjk-{i}", api=api, model=MODEL, timeout=60, max_tokens=48, prompt=p
            )
            for i, p in enumerate(prompts * 2)
        ]
        gevent.joinall(jobs, timeout=120)
    records = [j.value for j in jobs]
    for rec in records:
        assert rec is not None and rec.ok, rec and rec.error_detail
        assert rec.client_tokens == rec.completion_tokens == len(rec.token_times) == 48
        assert rec.token_events == "chunks"
        assert rec.server_request_id.startswith("chatcmpl-" if api == "chat" else "cmpl-")
    assert sum(rec.empty_chunks for rec in records) > 0  # empty chunks were there, and counted


def serve_once(writes: list[bytes | float], request_id: str, headers: bytes = b""):
    """One request through the client against a hand-written event stream; its record."""
    server = StreamServer(("127.0.0.1", 0), serve_events(writes, headers))
    server.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        return send(url, client(url), request_id)
    finally:
        server.stop(timeout=1)


CHAT_CHUNK = b'data: {"id":"chatcmpl-abc","choices":[{"index":0,"delta":{%s},"finish_reason":%s}]}\n\n'
USAGE_CHUNK = b'data: {"id":"chatcmpl-abc","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":%d}}\n\n'


def test_a_token_with_empty_text_counts_and_is_timed_and_the_role_chunk_does_not():
    """vLLM's shape: a role-only chunk, then one chunk per generated token, "" while the
    detokenizer holds back an incomplete UTF-8 character, the last token with the finish reason."""
    token = lambda text, finish=b"null": CHAT_CHUNK % (b'"content":"%s"' % text.encode(), finish)  # noqa: E731
    writes = [
        CHAT_CHUNK % (b'"role":"assistant","content":""', b"null"),
        0.2,
        token(""),
        token(""),
        token("你"),
        0.05,
        token("!"),
        token("", b'"stop"'),
        USAGE_CHUNK % 5 + b"data: [DONE]\n\n",
    ]
    rec = serve_once(writes, "vllm-shape")
    assert rec.ok, rec.error_detail
    assert rec.client_tokens == rec.completion_tokens == len(rec.token_times) == 5
    assert rec.token_events == "chunks" and rec.empty_chunks == 3
    assert rec.first_token_time == rec.token_times[0] and rec.first_token_time - rec.send_time >= 0.2
    assert rec.token_times[3] - rec.token_times[2] >= 0.05
    assert rec.server_request_id == "chatcmpl-abc"


def test_empty_chunks_that_usage_shows_were_no_tokens_are_not_counted():
    """A server that ends with an extra empty chunk: usage counts the chunks with text alone."""
    token = lambda text, finish=b"null": CHAT_CHUNK % (b'"content":"%s"' % text.encode(), finish)  # noqa: E731
    writes = [token("a"), token("b"), token("", b'"stop"'), USAGE_CHUNK % 2 + b"data: [DONE]\n\n"]
    rec = serve_once(writes, "extra-empty")
    assert rec.ok, rec.error_detail
    assert rec.client_tokens == rec.completion_tokens == len(rec.token_times) == 2
    assert rec.token_events == "text_chunks" and rec.empty_chunks == 1


def test_the_x_request_id_header_names_the_request_before_the_streams_id():
    writes = [CHAT_CHUNK % (b'"content":"a"', b'"stop"') + b"data: [DONE]\n\n"]
    rec = serve_once(writes, "with-header", headers=b"X-Request-Id: server-7\r\n")
    assert rec.ok and rec.server_request_id == "server-7"


def test_a_request_is_timed_from_when_it_goes_out_connection_set_up_included():
    """The send time is taken after the request's head is built (the client's own Python, made
    0.3 s slow here) and before its connection is made (made 0.3 s slow): a request's TTFT holds
    the set-up, as the user waits for it, and none of the client's building. Two requests share
    the client (as in open loop), the second going out while the first waits for its answer:
    each is timed by its own send."""
    arrivals: dict[str, float] = {}
    serve = serve_events([b'data: {"choices":[{"delta":{"content":"a"},"finish_reason":"stop"}]}\n\n'])

    def handle(conn, address) -> None:
        head = conn.recv(65536, socket.MSG_PEEK)  # the request's first bytes are here
        arrivals[re.search(rb"X-Request-Id: (\S+)", head).group(1).decode()] = time.time()
        gevent.sleep(0.6)  # the answer waits: the second request goes out meanwhile
        serve(conn, address)

    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        http = client(url, concurrency=2)
        build, connect = http._build_request, http._connection_pool._create_socket

        def slow_build(*args, **kwargs):
            gevent.sleep(0.3)
            return build(*args, **kwargs)

        def slow_connect():
            gevent.sleep(0.3)
            return connect()

        http._build_request, http._connection_pool._create_socket = slow_build, slow_connect
        started = {"first": time.time()}
        first = gevent.spawn(send, url, http, "first")
        gevent.sleep(0.7)
        started["second"] = time.time()
        second = gevent.spawn(send, url, http, "second")
        gevent.joinall([first, second], timeout=10)
    finally:
        server.stop(timeout=1)
    for rec in (first.value, second.value):
        assert rec.ok, rec.error_detail
        assert rec.send_time - started[rec.request_id] >= 0.3  # the building is not the server's time
        assert 0.3 <= arrivals[rec.request_id] - rec.send_time < 0.4  # the set-up is; its own send


def test_request_body_pins_the_output_and_asks_for_usage():
    endpoint = Endpoint.from_config(RunConfig(url="http://h:1/v1", model="m", api="completions"))
    assert endpoint.path == "/v1/completions" and endpoint.base_url == "http://h:1"
    body = json.loads(build_body(spec(7), endpoint))
    assert body["prompt"] == "hello" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == body["min_tokens"] == 7 and body["ignore_eos"] is True
    assert "min_tokens" not in json.loads(build_body(spec(7, pin=False), endpoint))


def test_counting_by_logprobs_asks_for_the_sampled_tokens_logprob_alone():
    for api, asked in (("chat", {"logprobs": True, "top_logprobs": 0}), ("completions", {"logprobs": 0})):
        endpoint = Endpoint.from_config(RunConfig(url="http://h:1", model="m", api=api, token_count="logprobs"))
        body = json.loads(build_body(spec(7), endpoint))
        assert {k: body[k] for k in asked} == asked
    plain = Endpoint.from_config(RunConfig(url="http://h:1", model="m"))
    assert "logprobs" not in json.loads(build_body(spec(7), plain))


def test_tokens_a_chunks_logprobs_name_are_counted_even_when_chunks_merge_or_are_skipped():
    """vLLM's chat stream with logprobs behind a busy API server: three tokens in one chunk, a
    held-back character's token with no text, the role chunk naming none."""

    def token(text: bytes, count: int, finish: bytes = b"null") -> bytes:
        entries = b",".join([b'{"token":"x","logprob":-1.0,"top_logprobs":[]}'] * count)
        return b'data: {"id":"chatcmpl-abc","choices":[{"index":0,"delta":{%s},"logprobs":{"content":[%s]},' \
            b'"finish_reason":%s}]}\n\n' % (text, entries, finish)  # fmt: skip

    writes = [
        CHAT_CHUNK % (b'"role":"assistant","content":""', b"null"),
        0.1,
        token(b'"content":"abc"', 3),
        0.05,
        token(b"", 1),
        token(b'"content":"d"', 1, b'"stop"'),
        USAGE_CHUNK % 5 + b"data: [DONE]\n\n",
    ]
    rec = serve_once(writes, "logprobs")
    assert rec.ok, rec.error_detail
    assert rec.client_tokens == rec.completion_tokens == len(rec.token_times) == 5
    assert rec.token_events == "logprobs"
    assert rec.token_times[0] == rec.token_times[1] == rec.token_times[2]  # one chunk: bunched
    assert rec.token_times[3] - rec.token_times[2] >= 0.05


def test_counting_by_timings_asks_llamacpp_for_them_in_every_chunk():
    endpoint = Endpoint.from_config(RunConfig(url="http://h:1", model="m", token_count="timings"))
    assert json.loads(build_body(spec(7), endpoint))["timings_per_token"] is True
    for count in ("auto", "chunks", "logprobs"):  # its own field: sent to llama.cpp alone
        other = Endpoint.from_config(RunConfig(url="http://h:1", model="m", token_count=count))
        assert "timings_per_token" not in json.loads(build_body(spec(7), other))


def llamacpp_chunk(text: str, generated: int, finish: str = "") -> bytes:
    """A completions chunk as llama.cpp writes it with timings_per_token: its count of the tokens
    generated so far in `timings.predicted_n`."""
    timings = {"cache_n": 3, "prompt_n": 5, "prompt_ms": 12.5, "predicted_n": generated, "predicted_ms": 40.0}
    choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": finish or None}
    chunk = {"choices": [choice], "id": "cmpl-ll", "object": "text_completion", "timings": timings}
    if finish:
        chunk["usage"] = {
            "completion_tokens": generated,
            "prompt_tokens": 8,
            "prompt_tokens_details": {"cached_tokens": 3},
        }
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"


def test_tokens_llamacpp_merges_into_one_chunk_are_counted_by_its_timings():
    """llama.cpp sends nothing for a token that ends inside a UTF-8 character: "你" (3 byte tokens)
    comes as one chunk whose timings say 3 more tokens; its last chunk, empty, says none."""
    writes = [
        0.1,
        llamacpp_chunk("a", 1),
        0.05,
        llamacpp_chunk("你", 4),
        llamacpp_chunk("b", 5),
        llamacpp_chunk("", 5, "length") + b"data: [DONE]\n\n",
    ]
    rec = serve_once(writes, "llamacpp")
    assert rec.ok, rec.error_detail
    assert rec.client_tokens == rec.completion_tokens == len(rec.token_times) == 5
    assert rec.token_events == "timings"
    assert rec.token_times[1] == rec.token_times[2] == rec.token_times[3]  # one chunk: bunched
    assert rec.token_times[1] - rec.token_times[0] >= 0.05
    # The server's account of the request, from the last chunk's timings.
    assert (rec.server_prompt_tokens, rec.cached_tokens) == (5, 3)
    assert rec.server_prefill_time == pytest.approx(0.0125) and rec.server_decode_time == pytest.approx(0.04)


def test_timings_in_the_last_chunk_alone_do_not_count_tokens_but_are_recorded():
    """llama.cpp not asked for timings_per_token: only its last chunk carries them."""
    plain = lambda text: b'data: {"choices":[{"text":"%s","index":0,"finish_reason":null}]}\n\n' % text  # noqa: E731
    writes = [plain(b"a"), plain(b"b"), llamacpp_chunk("", 2, "stop") + b"data: [DONE]\n\n"]
    rec = serve_once(writes, "last-timings")
    assert rec.ok, rec.error_detail
    assert rec.client_tokens == rec.completion_tokens == 2 and rec.token_events == "text_chunks"
    assert rec.server_prefill_time == pytest.approx(0.0125)


@pytest.mark.parametrize("bad", ["127.0.0.1:8000", "ftp://x", "http://", "http://h:port", "http://[::1"])
def test_bad_urls_are_user_errors(bad):
    with pytest.raises(UserError):
        Endpoint.from_config(RunConfig(url=bad, model="m"))


def test_credentials_in_the_url_are_basic_auth_and_leave_the_url():
    endpoint = Endpoint.from_config(RunConfig(url="http://bob:pw@h:8000/v1", model="m", api_key="k"))
    assert (endpoint.base_url, endpoint.path) == ("http://h:8000", "/v1/chat/completions")
    assert endpoint.headers("r")["Authorization"] == "Basic Ym9iOnB3"  # base64("bob:pw")
    assert "pw" not in repr(endpoint)
    keyed = Endpoint.from_config(RunConfig(url="http://h:8000", model="m", api_key="k"))
    assert keyed.headers("r")["Authorization"] == "Bearer k"


def test_every_fault_lands_in_its_category_and_sockets_stay_clean():
    """Faults drawn by the mock per request; 4 greenlets take turns on a pool of 4 keep-alive
    sockets, so a socket returned dirty after an abandoned stream would break a later request."""
    with start_mock(
        "--ttft",
        "0.02",
        "--itl",
        "0.01",
        "--seed",
        "3",
        "--error-rate",
        "0.1",
        "--error-codes",
        "500,429",
        "--disconnect-rate",
        "0.1",
        "--malformed-rate",
        "0.1",
        "--stall-rate",
        "0.1",
        "--stall-seconds",
        "10",
        "--not-sse-rate",
        "0.1",
    ) as mock:
        url = url_of(mock)
        # A clean response well inside the timeout even on a busy host; a stall far beyond it.
        http = client(url, concurrency=4, timeout=2.5)
        records = []

        def worker(w: int) -> None:
            for i in range(12):
                records.append(send(url, http, f"fault-{w}-{i}", timeout=2.5))

        gevent.joinall([gevent.spawn(worker, w) for w in range(4)], timeout=60)
        served = truth(url)
    assert len(records) == 48
    expected = {
        None: "",
        "disconnect": ErrorCategory.DISCONNECT.value,
        "malformed": ErrorCategory.MALFORMED.value,
        "stall": ErrorCategory.TIMEOUT.value,
        "not_sse": ErrorCategory.NOT_SSE.value,
    }
    seen = set()
    for rec in records:
        t = served[rec.request_id]
        if t["fault"] == "error":
            want = ErrorCategory.HTTP_429.value if t["status"] == 429 else ErrorCategory.HTTP_5XX.value
            assert rec.status == t["status"]
        else:
            want = expected[t["fault"]]
        assert rec.error == want, (t["fault"], rec.error, rec.error_detail)
        seen.add(t["fault"])
        if t["fault"] in ("disconnect", "malformed", "stall"):
            # the tokens before the fault were measured, and the failure has an end time
            assert rec.client_tokens >= 1 and rec.end_time > rec.send_time
    assert {"error", "disconnect", "malformed", "stall", "not_sse", None} <= seen


def test_auth_unknown_model_and_refused_connection():
    with start_mock("--api-key", "sekret") as mock:
        url = url_of(mock)
        http = client(url)
        assert send(url, http, "no-key").error == ErrorCategory.HTTP_401.value
        assert send(url, http, "key", api_key="sekret").ok
        unknown = send(url, http, "bad-model", model="nope", api_key="sekret")
        assert unknown.error == ErrorCategory.HTTP_404.value and unknown.status == 404
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
        refused = send(dead, client(dead), "refused")
    assert refused.error == ErrorCategory.CONNECT.value and refused.status == 0
    assert refused.token_times == [] and refused.end_time >= refused.send_time


@pytest.mark.parametrize(
    "error, responded, category",
    [
        (ConnectionRefusedError(111, "refused"), False, ErrorCategory.CONNECT),
        (socket.gaierror(-2, "Name or service not known"), False, ErrorCategory.CONNECT),
        (TimeoutError("connect timed out"), False, ErrorCategory.CONNECT),
        (ConnectionResetError(104, "reset"), False, ErrorCategory.DISCONNECT),
        (ConnectionResetError(104, "reset"), True, ErrorCategory.DISCONNECT),
        (TimeoutError("read timed out"), True, ErrorCategory.TIMEOUT),
        (gevent.GreenletExit(), True, ErrorCategory.ABORTED),
        (KeyError("bug"), True, ErrorCategory.CLIENT),
    ],
)
def test_each_transport_exception_has_one_category(error, responded, category):
    assert error_category(error, responded)[0] is category
