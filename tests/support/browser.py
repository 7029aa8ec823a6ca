"""Load a page in headless Chromium (the Debian package) and watch it through the DevTools protocol:
console errors, uncaught exceptions, every request the page makes, a value computed in the page
after it loaded, and a screenshot.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM = [
    "chromium",
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--no-first-run",
    "--remote-debugging-port=0",
]


@dataclass
class PageLoad:
    """What happened while a page loaded."""

    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions
    requests: list[str] = field(default_factory=list)  # URLs requested besides the page itself
    value: Any = None  # the expression's value, after the load


def load_page(
    url: str,
    expression: str,
    screenshot: Path | None = None,
    width: int = 1400,
    height: int = 1000,
    settle: float = 1.5,
    timeout: float = 90.0,
) -> PageLoad:
    """Open `url`, wait for its load event and `settle` seconds more, evaluate `expression` there.

    `screenshot`: a PNG of the top `width` x `height` pixels is written there.
    """
    profile = tempfile.mkdtemp(prefix="chromium-")
    try:
        proc = subprocess.Popen(
            [*CHROMIUM, f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            port = _devtools_port(Path(profile), proc, timeout)
            return asyncio.run(
                asyncio.wait_for(_drive(port, url, expression, screenshot, width, height, settle), timeout)
            )
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    finally:
        _remove(profile)


def _remove(profile: str, attempts: int = 50) -> None:
    """Remove Chromium's profile folder: its helper processes may still write into it for a moment
    after the browser itself has exited ("Directory not empty" on a busy machine)."""
    for _ in range(attempts):
        try:
            shutil.rmtree(profile)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)
    shutil.rmtree(profile, ignore_errors=True)


def _devtools_port(profile: Path, proc: subprocess.Popen, timeout: float) -> int:
    """Chromium writes the port it chose into the profile's DevToolsActivePort file."""
    deadline = time.monotonic() + timeout
    port_file = profile / "DevToolsActivePort"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with {proc.returncode} before DevTools was up")
        if port_file.exists() and port_file.read_text().strip():
            return int(port_file.read_text().split()[0])
        time.sleep(0.1)
    raise TimeoutError("chromium's DevTools did not come up")


async def _drive(
    port: int, url: str, expression: str, screenshot: Path | None, width: int, height: int, settle: float
) -> PageLoad:
    result = PageLoad()
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/json/list") as r:
            page = next(t for t in await r.json() if t["type"] == "page")
        async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            cdp = _Cdp(ws, url, result)
            reader = asyncio.create_task(cdp.read())
            for domain in ("Page", "Runtime", "Log", "Network"):
                await cdp.call(f"{domain}.enable")
            await cdp.call(
                "Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False
            )
            await cdp.call("Page.navigate", url=url)
            await cdp.loaded.wait()
            await asyncio.sleep(settle)
            value = await cdp.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
            result.value = value.get("result", {}).get("value")
            if "exceptionDetails" in value:
                raise AssertionError(f"the expression failed in the page: {value['exceptionDetails']}")
            if screenshot is not None:
                await cdp.call("Runtime.evaluate", expression="window.scrollTo(0, 0)")
                shot = await cdp.call("Page.captureScreenshot", format="png")
                screenshot.write_bytes(base64.b64decode(shot["data"]))
            reader.cancel()
    return result


class _Cdp:
    """Commands over one DevTools websocket, and the events that fill a PageLoad."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, url: str, result: PageLoad) -> None:
        self.ws, self.url, self.result = ws, url, result
        self.loaded = asyncio.Event()
        self._next_id = 0
        self._waiting: dict[int, asyncio.Future] = {}

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiting[self._next_id] = future
        await self.ws.send_str(json.dumps({"id": self._next_id, "method": method, "params": params}))
        return await future

    async def read(self) -> None:
        async for message in self.ws:
            data = json.loads(message.data)
            if "id" in data:
                future = self._waiting.pop(data["id"])
                if "error" in data:
                    future.set_exception(RuntimeError(f"DevTools: {data['error']}"))
                else:
                    future.set_result(data.get("result", {}))
            else:
                self._event(data["method"], data.get("params", {}))

    def _event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Page.loadEventFired":
            self.loaded.set()
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.result.errors.append(details.get("exception", {}).get("description") or details.get("text", ""))
        elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            self.result.errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.result.errors.append(params["entry"].get("text", ""))
        elif method == "Network.requestWillBeSent":
            requested = params["request"]["url"]
            if requested != self.url:
                self.result.requests.append(requested)
