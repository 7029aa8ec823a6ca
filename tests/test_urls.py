"""The one URL validator: what it accepts, what it refuses, and where credentials go."""

from __future__ import annotations

import base64

import pytest

from loadlab.errors import UserError
from loadlab.urls import parse_http_url, without_credentials


def test_the_rules_of_every_url_loadlab_is_given():
    ok = parse_http_url(" https://h.example:8443/v1/ ")
    assert (ok.origin, ok.path, ok.has_credentials, ok.authorization("k")) == (
        "https://h.example:8443",
        "/v1/",
        False,
        "Bearer k",
    )
    assert str(parse_http_url("http://[::1]:9/metrics?x=1")) == "http://[::1]:9/metrics?x=1"
    for bad in [
        "localhost:8000",
        "ftp://h",
        "http://",
        "http://:80",
        "http://[::1",
        "http://h:port",
        "http://h:99999",
        "http://h:0",
        "http://ho st:80",
        "http://h/\x07",
    ]:
        with pytest.raises(UserError, match="bad --url"):
            parse_http_url(bad, "--url")
    # Credentials: kept apart, sent as Basic auth (before any API key), never shown.
    url = parse_http_url("http://al%40ice:p%3Aw@h:8000/v1")
    assert (url.username, url.password, url.origin, str(url)) == ("al@ice", "p:w", "http://h:8000", "http://h:8000/v1")
    assert url.authorization("k") == "Basic " + base64.b64encode(b"al@ice:p:w").decode()
    assert parse_http_url(url.on_path("/metrics")) == parse_http_url("http://al%40ice:p%3Aw@h:8000/metrics")
    odd = parse_http_url("http://a%2Fb:c%2Fd%23@h")  # "/" and "#" survive a round trip
    assert parse_http_url(odd.on_path("/m")).password == "c/d#"
    assert "al@ice" not in repr(url) and "p:w" not in repr(url)
    with pytest.raises(UserError) as e:
        parse_http_url("http://user:s3cret@[::1")
    assert "s3cret" not in str(e.value)
    assert without_credentials("see http://u:pw@h:1/x and https://t@h") == "see http://h:1/x and https://h"


def test_a_run_config_parses_its_url_once_per_value():
    from loadlab.config import RunConfig

    config = RunConfig(url="http://bob:pw@h:8000/v1")
    parsed = config.parsed_url()
    assert parsed.origin == "http://h:8000" and parsed.has_credentials
    assert config.parsed_url() is parsed  # carried, not parsed again
    config.url = "http://h:9000"
    assert config.parsed_url().origin == "http://h:9000"  # a new value is parsed anew
    # Not part of the config: neither stored nor compared.
    assert "parsed" not in str(config.to_dict()) and config == RunConfig(url="http://h:9000")
    with pytest.raises(UserError, match="bad url"):
        RunConfig(url="ftp://x").parsed_url("url")
