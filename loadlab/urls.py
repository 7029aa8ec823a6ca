"""The one validator of every http(s) URL loadlab is given: the endpoint, /metrics, Prometheus.

Credentials in a URL (`http://user:pw@host`) are taken apart here: they become an HTTP Basic
`Authorization` header and never travel on inside a URL that could be printed or stored.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from urllib.parse import quote, unquote, urlsplit

from loadlab.errors import UserError

_USERINFO = re.compile(r"(?<=//)[^/?#@\s]*@")


@dataclass(frozen=True)
class HttpUrl:
    """A checked http(s) URL, its credentials kept apart (`str()` never shows them)."""

    scheme: str
    netloc: str  # host[:port], without credentials
    path: str  # as given, e.g. "/v1" or ""
    query: str = ""
    username: str = field(default="", repr=False)
    password: str = field(default="", repr=False)

    @property
    def has_credentials(self) -> bool:
        """True when the URL carried `user:password@`."""
        return bool(self.username or self.password)

    @property
    def origin(self) -> str:
        """`scheme://host[:port]`."""
        return f"{self.scheme}://{self.netloc}"

    def __str__(self) -> str:
        return self.origin + self.path + (f"?{self.query}" if self.query else "")

    def on_path(self, path: str) -> str:
        """The URL of `path` on the same server, credentials included (for a second fetch there)."""
        userinfo = f"{quote(self.username, safe='')}:{quote(self.password, safe='')}@" if self.has_credentials else ""
        return f"{self.scheme}://{userinfo}{self.netloc}{path}"

    def authorization(self, api_key: str = "") -> str:
        """The Authorization header for this URL: Basic from its credentials, else Bearer `api_key`,
        else ""."""
        if self.has_credentials:
            token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
            return f"Basic {token}"
        return f"Bearer {api_key}" if api_key else ""


def parse_http_url(url: str, what: str = "URL") -> HttpUrl:
    """`url` checked and taken apart; UserError naming `what` (e.g. "--url") when it is not an
    http(s) URL with a host and a valid port. The message never repeats credentials."""

    def bad(why: str) -> UserError:
        return UserError(f"bad {what} {without_credentials(url)!r}: {why}")

    text = url.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as e:  # "Invalid IPv6 URL", "Port out of range", a port that is not a number
        raise bad(f"{e}; expected http://host:port or https://host:port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise bad("expected http://host:port or https://host:port")
    if port == 0:
        raise bad("port 0 cannot be connected to")
    if any(c.isspace() or not c.isprintable() for c in text):
        raise bad("it holds a blank or a control character")
    netloc = parts.netloc.rpartition("@")[2]
    return HttpUrl(
        scheme=parts.scheme,
        netloc=netloc,
        path=parts.path,
        query=parts.query,
        username=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
    )


def without_credentials(text: str) -> str:
    """`text` with the `user:password@` of any URL in it removed (also in malformed URLs)."""
    return _USERINFO.sub("", text)


def is_loopback(url: str) -> bool:
    """True when `url` names this host: a loopback address, localhost or 0.0.0.0."""
    host = (urlsplit(url if "://" in url else f"http://{url}").hostname or "").lower()
    return host in ("localhost", "::1", "0.0.0.0") or host.startswith("127.")
