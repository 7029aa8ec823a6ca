"""Finding the server on this host when `loadlab diagnose` is given no URL: real servers on free
ports stand for the usual ones (LOADLAB_PROBE_PORTS, the internal list tests probe instead)."""

from __future__ import annotations

import sys
from urllib.parse import urlsplit

import pytest

from loadlab.client.discovery import PORTS_ENV, LocalServer, find_local_servers, local_server, probe_ports
from loadlab.errors import UserError
from tests.support.mock_load import mock_server
from tests.support.procs import Proc, free_port


def port_of(url: str) -> int:
    return int(urlsplit(url).port or 0)


def test_a_server_on_a_probed_port_is_found_with_its_engine_and_model():
    with mock_server("--model", "tiny-model") as (url, _):
        found = find_local_servers((free_port(), port_of(url)))
    assert found == [
        LocalServer(url, "loadlab's reference server or mock", "", ("tiny-model",), ("/v1/models owned_by loadlab",))
    ]
    assert found[0].describe() == (
        f"loadlab's reference server or mock at {url}, serving tiny-model (from /v1/models owned_by loadlab)"
    )


def test_a_server_that_wants_a_key_is_found_and_says_so():
    with mock_server("--api-key", "sekrit") as (url, _):
        (asks,) = find_local_servers((port_of(url),))
        (keyed,) = find_local_servers((port_of(url),), api_key="sekrit")
    assert asks.models == () and asks.evidence == ("/v1/models answered 401: it needs an API key",)
    assert keyed.models == ("mock",)


def test_a_port_that_is_not_an_llm_server_is_not_counted(tmp_path):
    port = free_port()
    # a plain web server: /v1/models is a 404 page, not a model list
    with Proc([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)],
              ready_url=f"http://127.0.0.1:{port}/", timeout=30):  # fmt: skip
        assert find_local_servers((port, free_port())) == []


def test_none_or_several_servers_ask_for_a_url(monkeypatch):
    nothing = free_port()
    monkeypatch.setenv(PORTS_ENV, str(nothing))
    assert probe_ports() == (nothing,)
    with pytest.raises(UserError, match=f"no URL given and no LLM server answered on 127.0.0.1 at {nothing} "):
        local_server()
    with mock_server() as (one, _), mock_server() as (two, _):
        monkeypatch.setenv(PORTS_ENV, f"{port_of(one)},{nothing},{port_of(two)}")
        with pytest.raises(UserError, match="no URL given and 2 servers answered") as caught:
            local_server()
        assert one in str(caught.value) and two in str(caught.value) and "give one URL" in str(caught.value)
        monkeypatch.setenv(PORTS_ENV, f"{nothing},{port_of(two)}")
        assert local_server().url == two


def test_without_the_internal_list_the_usual_ports_are_probed(monkeypatch):
    monkeypatch.delenv(PORTS_ENV, raising=False)
    assert probe_ports() == (8000, 30000, 8080, 11434, 1234, 3000)
