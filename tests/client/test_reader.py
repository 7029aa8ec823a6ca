"""The process's body reader: kernel-timed tokens, TLS bodies, the pause policy, clean ends.

Servers are a real `loadlab mock` subprocess (it reports when it sent each token) or small
hand-written gevent servers in this process.
"""

from __future__ import annotations

import itertools
import subprocess
import time

import gevent
import gevent.ssl
import pytest
from gevent.server import StreamServer
from geventhttpclient.client import HTTPClient
from geventhttpclient.url import URL

from loadlab.client.reader import GATHER_S, Pacing, body_reader, next_pause
from loadlab.store.schema import ErrorCategory
from tests.support.event_stream import client, send, serve_events, start_mock, truth, url_of

EVENT = b'data: {"choices":[{"delta":{"content":"t"},"finish_reason":null}]}\n\n'
LAST = b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'


@pytest.mark.serial  # it makes its own busy client, with a 30 s limit a crowded host can overrun
def test_a_token_is_timed_when_it_reaches_the_host_even_while_the_client_is_busy():
    """The client's process is blocked for 40 ms of every 53 ms (a loop that never yields), so
    many tokens are read late; their times must still be when the mock sent them. (Tokens 100 ms
    apart: a stream's next token does not arrive before the late read of the previous one, which
    would merge the two, even on a busy machine.)"""
    with start_mock("--ttft", "0.05", "--itl", "0.1") as mock:
        url = url_of(mock)
        stop = time.perf_counter() + 2.0

        def hog() -> None:
            while time.perf_counter() < stop:
                busy_until = time.perf_counter() + 0.04
                while time.perf_counter() < busy_until:
                    pass
                gevent.sleep(0.013)  # a cycle out of step with the tokens' 100 ms

        http = client(url, concurrency=4)
        hogger = gevent.spawn(hog)
        jobs = [gevent.spawn(send, url, http, f"busy-{i}", max_tokens=15) for i in range(4)]
        gevent.joinall(jobs, timeout=30)
        hogger.kill()
        served = truth(url)
    late = []
    for job in jobs:
        rec = job.value
        assert rec.ok, rec.error_detail
        assert rec.token_clock == "kernel" and rec.client_tokens == 15
        real_times = served[rec.request_id]["token_times"]
        late.extend(mine - real for mine, real in zip(rec.token_times, real_times, strict=True))
    # Timed at the read, most of them would be late, by up to 40 ms.
    assert max(late) < 0.01, sorted(late)[-5:]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[str, str]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = str(folder / "cert.pem"), str(folder / "key.pem")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-days",
            "1",
            "-keyout",
            key,
            "-out",
            cert,
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_tls_bodies_are_read_whole_and_timed_at_the_read(certificate):
    """One write of ~25 KB of events, then a second's silence: more than a TLS record and far
    more than one read (4 KB), so part of it waits inside the TLS layer where epoll cannot see
    it. It must still be read at once, not when the last write wakes the socket again."""
    cert, key = certificate
    writes = [EVENT * 5, EVENT * 350, 1.0, LAST]
    # gevent's own TLS contexts on both sides: this test process is not monkey-patched (Locust's
    # processes are, and there the standard names are gevent's).
    server_tls = gevent.ssl.SSLContext(gevent.ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)

    def client_tls(cafile: str) -> gevent.ssl.SSLContext:
        context = gevent.ssl.SSLContext(gevent.ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(cafile)
        return context

    server = StreamServer(("127.0.0.1", 0), serve_events(writes), ssl_context=server_tls)
    server.start()
    try:
        url = f"https://127.0.0.1:{server.server_port}"
        http = HTTPClient.from_url(
            URL(url),
            concurrency=2,
            network_timeout=5,
            connection_timeout=5,
            insecure=True,
            ssl_context_factory=client_tls,
            ssl_options={"ca_certs": cert},
        )
        records = [send(url, http, f"tls-{i}") for i in range(2)]  # the second reuses the socket
    finally:
        server.stop(timeout=1)
    for rec in records:
        assert rec.ok, rec.error_detail
        assert rec.token_clock == "read" and rec.client_tokens == 355 and rec.finish_reason == "stop"
        assert rec.token_times[-1] - rec.token_times[0] < 0.5
        assert rec.end_time - rec.token_times[0] > 0.9
    assert len(body_reader()) == 0


def test_a_stalled_stream_that_times_out_leaves_nothing_behind():
    """The first request stalls after two tokens and times out; its socket is closed, the reader
    lets go of it, and the next request on the same pool is read to its end."""
    stalling = StreamServer(("127.0.0.1", 0), serve_events([EVENT, EVENT, 30.0, LAST]))
    healthy = StreamServer(("127.0.0.1", 0), serve_events([EVENT, EVENT, LAST]))
    stalling.start()
    healthy.start()
    try:
        url = f"http://127.0.0.1:{stalling.server_port}"
        stalled = send(url, client(url), "stalls", timeout=0.5)
        assert len(body_reader()) == 0
        url = f"http://127.0.0.1:{healthy.server_port}"
        http = client(url, concurrency=1)
        after = [send(url, http, f"after-{i}") for i in range(2)]
    finally:
        stalling.stop(timeout=1)
        healthy.stop(timeout=1)
    assert stalled.error == ErrorCategory.TIMEOUT.value and stalled.client_tokens == 2
    assert all(rec.ok and rec.client_tokens == 2 for rec in after)


def test_the_pause_halves_to_none_while_tokens_merge_and_grows_back_to_the_gather_time():
    pause, pauses = GATHER_S, []
    for _ in range(6):
        pause = next_pause(pause, merged=True)
        pauses.append(pause)
    assert pauses[0] == GATHER_S / 2 and pauses[-1] == 0.0
    assert all(a > b or b == 0.0 for a, b in itertools.pairwise(pauses))
    for _ in range(10):
        pause = next_pause(pause, merged=False)
        assert 0 < pause <= GATHER_S
    assert pause == GATHER_S


def test_streams_slower_than_the_gather_time_keep_the_longest_pause():
    pacing = Pacing()
    pauses = [pacing.after_pass(merged=False, gap=0.04) for _ in range(50)]
    assert all(p == GATHER_S for p in pauses)


def test_a_stream_faster_than_the_gather_time_settles_below_a_quarter_of_its_gap_instead_of_merging_again():
    """Tokens 6 ms apart: the longest pause merges two of them; the pause then grows back only to
    a quarter of the gap the reads show, leaving the rest to the pass and to a busy host."""
    pacing = Pacing()
    pause = pacing.after_pass(merged=True, gap=float("inf"))
    assert pause == GATHER_S / 2
    pauses = [pacing.after_pass(merged=False, gap=0.006) for _ in range(50)]
    assert 0 < max(pauses) <= 0.0015 and pauses[-1] == max(pauses)


def test_a_single_short_gap_is_forgotten_within_tens_of_passes():
    pacing = Pacing()
    assert pacing.after_pass(merged=False, gap=0.0002) == 0.0  # a quarter of it is below the shortest pause
    pauses = [pacing.after_pass(merged=False, gap=float("inf")) for _ in range(60)]
    assert pauses[0] < GATHER_S and pauses[-1] == GATHER_S
