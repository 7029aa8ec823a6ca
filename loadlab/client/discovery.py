"""What a run needs from its environment before the load starts: the API key, the model name.

Shared by `loadlab run` and the plain-Locust locustfile, so both read the same variables and
ask the endpoint the same way.
"""

from __future__ import annotations

import os

from loadlab.errors import UserError
from loadlab.urls import HttpUrl

API_KEY_ENV = ("LOADLAB_API_KEY", "OPENAI_API_KEY")  # looked up in this order


def api_key_from_env() -> str:
    """The first API key set in API_KEY_ENV, or ""."""
    return next((os.environ[k] for k in API_KEY_ENV if os.environ.get(k)), "")


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
        raise UserError(f"GET {base}{prefix}/models answered HTTP {e.code}; pass {flag}") from None
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        reason = getattr(e, "reason", None) or e
        raise UserError(f"cannot discover the model from {base}{prefix}/models ({reason}); pass {flag}") from None


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
