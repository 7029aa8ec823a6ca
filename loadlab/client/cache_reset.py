"""Empty the server's prefix cache before a load step, so that hits come from the step's own traffic.

Engines name the endpoint differently: vLLM `POST /reset_prefix_cache` (served only with
VLLM_SERVER_DEV_MODE=1), SGLang `POST /flush_cache`, the reference server as vLLM. Each path is
tried in turn on the server behind the API URL; a 404 or 405 means "not this engine's". vLLM
resets only while no request holds KV blocks (it answers `{"success": false}` otherwise), so
`loadlab run` lets the previous step's requests finish before it resets.
"""

from __future__ import annotations

import json

from loadlab.store.meta import CacheReset
from loadlab.urls import HttpUrl

RESET_PATHS = ("/reset_prefix_cache", "/flush_cache")
NO_RESET_HINT = (
    "the server has no prefix-cache reset (tried POST /reset_prefix_cache and /flush_cache; "
    "vLLM serves its reset only with VLLM_SERVER_DEV_MODE=1): hits left by earlier traffic can "
    "flatter this run's TTFT and throughput"
)


def reset_prefix_cache(server: HttpUrl, api_key: str = "", timeout: float = 30.0) -> CacheReset:
    """POST each of RESET_PATHS on the server of the API URL `server` until one answers 2xx.
    Never raises: an unreachable server or an error status comes back as a failed CacheReset."""
    # Imported here, as in loadlab.client.discovery: after Locust's gevent patching.
    import urllib.error
    import urllib.request

    authorization = server.authorization(api_key)
    tried = []
    for path in RESET_PATHS:
        request = urllib.request.Request(server.on_path(path), data=b"", method="POST")
        if authorization:
            request.add_header("Authorization", authorization)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                body = response.read()
        except urllib.error.HTTPError as e:
            if e.code in (404, 405):
                tried.append(f"{path}: HTTP {e.code}")
                continue
            return CacheReset(False, path, f"POST {path} answered HTTP {e.code}")
        except OSError as e:  # refused, unreachable, timed out
            return CacheReset(False, path, f"POST {path} failed: {getattr(e, 'reason', None) or e}")
        if _refused(body):
            return CacheReset(False, path, f"POST {path} answered success=false (KV blocks still held by requests)")
        return CacheReset(True, path)
    return CacheReset(False, "", "; ".join(tried))


def _refused(body: bytes) -> bool:
    """vLLM answers 200 with {"success": false} when blocks are still held; others send no body."""
    try:
        answer = json.loads(body)
    except ValueError:
        return False
    return isinstance(answer, dict) and answer.get("success") is False
