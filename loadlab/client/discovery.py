"""What a run needs from its environment before the load starts: the API key, the model name,
and, when `loadlab diagnose` is given no URL, the server listening on this host.

Shared by `loadlab run` and the plain-Locust locustfile, so both read the same variables and
ask the endpoint the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from loadlab.errors import UserError
from loadlab.urls import HttpUrl

API_KEY_ENV = ("LOADLAB_API_KEY", "OPENAI_API_KEY")  # looked up in this order
# What an endpoint's refusal of the key says, whichever request met it first (model discovery,
# or the load's first requests: loadlab.conductor.budget).
KEY_REFUSED = {
    401: "wrong or missing API key: check --api-key or $LOADLAB_API_KEY (or $OPENAI_API_KEY)",
    403: "the API key is not allowed here: check the key and its permissions",
}


def api_key_from_env() -> str:
    """The first API key set in API_KEY_ENV, or ""."""
    return os.environ[api_key_variable()] if api_key_variable() else ""


def api_key_variable() -> str:
    """The name of the first variable of API_KEY_ENV that is set, or ""."""
    return next((k for k in API_KEY_ENV if os.environ.get(k)), "")


def discover_model(url: HttpUrl, api_key: str, timeout: float, flag: str = "--model") -> str:
    """The first model id the endpoint lists (GET /v1/models); UserError when it cannot say,
    naming `flag`, the option that gives the model instead (Locust's is --loadlab-model)."""
    # Imported here: the CLI imports this module at start-up, and urllib.request imports ssl,
    # which must come after Locust's gevent patching (loadlab run imports locust first).
    import json
    import urllib.error
    import urllib.request

    from loadlab.client.stream import split_url

    base, prefix, authorization = split_url(url, api_key)
    request = urllib.request.Request(f"{base}{prefix}/models")
    if authorization:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            models = json.loads(r.read())["data"]
        return str(models[0]["id"])
    except urllib.error.HTTPError as e:
        if e.code in KEY_REFUSED:  # --model would only meet the same refusal on every request
            raise UserError(f"GET {base}{prefix}/models answered HTTP {e.code}: {KEY_REFUSED[e.code]}") from None
        raise UserError(f"GET {base}{prefix}/models answered HTTP {e.code}; pass {flag}") from None
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        reason = getattr(e, "reason", None) or e
        raise UserError(f"cannot discover the model from {base}{prefix}/models ({reason}); pass {flag}") from None


# This host's usual ports of LLM servers, probed in this order when `loadlab diagnose` is given
# no URL: port -> the servers that listen there by default.
LOCAL_PORTS: dict[int, str] = {
    8000: "vLLM, loadlab serve",
    30000: "SGLang",
    8080: "llama.cpp, TGI",
    11434: "Ollama",
    1234: "LM Studio",
    3000: "TGI",
}
# Internal, for tests: comma-separated ports probed instead of LOCAL_PORTS (not a user setting).
PORTS_ENV = "LOADLAB_PROBE_PORTS"
LOCAL_HOST = "127.0.0.1"
PROBE_TIMEOUT = 0.5  # seconds per request: a local server answers /v1/models in milliseconds
# /v1/models' `owned_by` -> the engine (each engine's own value).
OWNERS = {
    "vllm": "vLLM",
    "sglang": "SGLang",
    "llamacpp": "llama.cpp",
    "library": "Ollama",
    "organization_owner": "LM Studio",
    "loadlab": "loadlab's reference server or mock",
}
# Where an engine says its version, or who it is when `owned_by` did not: engine -> (path, JSON key).
VERSION_AT = {
    "vLLM": ("/version", "version"),
    "SGLang": ("/version", "version"),
    "llama.cpp": ("/props", "build_info"),
    "Ollama": ("/api/version", "version"),
    "TGI": ("/info", "version"),
}
# Engines whose endpoint above names them by a key only they answer with (vLLM's and SGLang's
# /version look alike): engine -> that key.
TELLS = {"llama.cpp": "default_generation_settings", "Ollama": "version", "TGI": "router"}


@dataclass(frozen=True)
class LocalServer:
    """An OpenAI-compatible server found on this host: its URL, the engine and models it named,
    and what said so."""

    url: str
    engine: str  # "" when nothing named it
    version: str
    models: tuple[str, ...]
    evidence: tuple[str, ...]  # e.g. "/v1/models owned_by vllm", "Server: llama.cpp"

    def describe(self) -> str:
        """One line: the engine, version and model, and what named them."""
        engine = f"{self.engine} {self.version}".strip() or "an OpenAI-compatible server"
        models = ", ".join(self.models) or "no model listed"
        why = f" (from {', '.join(self.evidence)})" if self.evidence else ""
        return f"{engine} at {self.url}, serving {models}{why}"


def local_server(api_key: str = "") -> LocalServer:
    """The one server found on this host's usual ports; UserError (one line, asking for a URL)
    when none answers or several do."""
    ports = probe_ports()
    found = find_local_servers(ports, api_key)
    if len(found) == 1:
        return found[0]
    if not found:
        where = ", ".join(f"{p} ({LOCAL_PORTS.get(p, 'given')})" for p in ports)
        raise UserError(
            f"no URL given and no LLM server answered on {LOCAL_HOST} at {where}: give the endpoint's URL, "
            "e.g. loadlab diagnose http://HOST:PORT"
        )
    which = "; ".join(s.describe() for s in found)
    raise UserError(f"no URL given and {len(found)} servers answered ({which}): give one URL, e.g. {found[0].url}")


def probe_ports() -> tuple[int, ...]:
    """LOCAL_PORTS, or the ports of PORTS_ENV (internal, for tests)."""
    given = os.environ.get(PORTS_ENV, "")
    return tuple(int(p) for p in given.split(",") if p.strip().isdigit()) if given else tuple(LOCAL_PORTS)


def find_local_servers(ports: tuple[int, ...], api_key: str = "", timeout: float = PROBE_TIMEOUT) -> list[LocalServer]:
    """The OpenAI-compatible servers on `ports` of this host (GET /v1/models answers a model
    list, or asks for a key). A closed port costs a refused connection, so probing is quick
    when nothing listens."""
    found = (_probe(f"http://{LOCAL_HOST}:{port}", api_key, timeout) for port in ports)
    return [s for s in found if s is not None]


def _probe(url: str, api_key: str, timeout: float) -> LocalServer | None:
    answer = _get(f"{url}/v1/models", api_key, timeout)
    if answer is None:
        return None
    status, headers, body = answer
    header = headers.get("server", "")
    evidence = [f"Server: {header}"] if "llama.cpp" in header else []
    engine = "llama.cpp" if evidence else ""
    models: tuple[str, ...] = ()
    if status in (401, 403):
        evidence.append(f"/v1/models answered {status}: it needs an API key")
    elif status != 200 or not isinstance(body, dict) or not isinstance(body.get("data"), list):
        return None  # something else listens there: not an OpenAI-compatible server
    else:
        cards = [c for c in body["data"] if isinstance(c, dict)]
        models = tuple(str(c.get("id")) for c in cards)
        owner = next((str(c.get("owned_by")) for c in cards if str(c.get("owned_by")) in OWNERS), "")
        if owner and not engine:
            engine = OWNERS[owner]
            evidence.append(f"/v1/models owned_by {owner}")
    # Who it is, when /v1/models did not say, and its version: from the engines' own endpoints.
    for name, (path, key) in VERSION_AT.items():
        if (engine and name != engine) or (not engine and name not in TELLS):
            continue
        said = _get(f"{url}{path}", api_key, timeout)
        data = said[2] if said is not None and said[0] == 200 and isinstance(said[2], dict) else {}
        if key in data and TELLS.get(name, key) in data:
            evidence.append(path)
            return LocalServer(url, name, str(data[key]), models, tuple(evidence))
    return LocalServer(url, engine, "", models, tuple(evidence))


def _get(url: str, api_key: str, timeout: float) -> tuple[int, dict[str, str], object] | None:
    """GET `url`: (status, headers in lower case, the JSON body or None); None when nothing answers."""
    # Imported here, as in discover_model: urllib.request imports ssl.
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url)
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            status, headers, raw = r.status, r.headers, r.read(1 << 20)
    except urllib.error.HTTPError as e:
        status, headers, raw = e.code, e.headers, b""
    except (OSError, ValueError):
        return None  # refused, timed out, or not HTTP
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    return status, {k.lower(): v for k, v in headers.items()}, body


def advertised_context(url: HttpUrl, api_key: str, timeout: float, model: str) -> int | None:
    """The context window `model` has at the endpoint (max_model_len in GET /v1/models, as vLLM, SGLang,
    the reference server and the mock say it), or None where the endpoint does not say."""
    import json
    import urllib.request

    from loadlab.client.stream import split_url

    base, prefix, authorization = split_url(url, api_key)
    request = urllib.request.Request(f"{base}{prefix}/models")
    if authorization:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            models = json.loads(r.read(1 << 20))["data"]
        card = next((m for m in models if m.get("id") == model), None)
        context = card.get("max_model_len") if card else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # no list, or not one we can read: nothing to check against
    return context if isinstance(context, int) and not isinstance(context, bool) and context > 0 else None
