"""Headless Chromium (the Debian package) driven over the DevTools protocol, for tests and
benchmarks of the topology map: load a page, wait until it says it is drawn, read the DOM
with JavaScript, take a screenshot.

    with Browser() as browser:
        browser.open("http://127.0.0.1:8080/topology/")
        browser.wait_for("document.body.dataset.state === 'drawn'")
        cells = browser.evaluate("document.querySelectorAll('#map .c').length")

Chromium runs with a new profile in a temporary directory, no sandbox (root in a
container), no GPU, and no background networking (this machine's network refuses it); it
listens for the protocol on a free port of 127.0.0.1, read from the ``DevToolsActivePort``
file it writes. :meth:`Browser.close` stops it by its pid and removes the profile.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket

#: Where the Debian package puts it (``apt-get install chromium``).
CHROMIUM = "chromium"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars")


class BrowserError(RuntimeError):
    """Chromium could not start, or a page did not do what was waited for."""


def chromium() -> str | None:
    """The path of the chromium executable, or None when it is not installed."""
    return shutil.which(CHROMIUM)


class Browser:
    """One headless Chromium with one page, ``width`` x ``height`` CSS pixels; a context manager."""

    def __init__(self, width: int = 1400, height: int = 900, timeout: float = 30.0) -> None:
        self.width, self.height, self.timeout = width, height, timeout
        self._profile = Path(tempfile.mkdtemp(prefix="troupe-chromium-"))
        self._ids = itertools.count(1)
        self._proc: subprocess.Popen[bytes] | None = None
        self._ws: websocket.WebSocket | None = None

    def __enter__(self) -> Browser:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start Chromium and connect to its page."""
        exe = chromium()
        if exe is None:
            raise BrowserError("chromium is not installed (apt-get install chromium; make test installs it)")
        self._proc = subprocess.Popen(
            [exe, *FLAGS, f"--user-data-dir={self._profile}", "--remote-debugging-port=0",
             f"--window-size={self.width},{self.height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=(self._profile / "chromium.log").open("wb"))
        port_file = self._profile / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while not port_file.exists() or not port_file.read_text().strip():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise BrowserError(f"chromium did not start: {self._log_tail()}")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            targets = json.load(r)
        page = next(t for t in targets if t.get("type") == "page")
        self._ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=self.timeout,
                                               suppress_origin=True, http_no_proxy=["127.0.0.1"])
        self.send("Emulation.setDeviceMetricsOverride",
                  width=self.width, height=self.height, deviceScaleFactor=1, mobile=False)

    def _log_tail(self) -> str:
        log = self._profile / "chromium.log"
        return log.read_text(errors="replace")[-2000:] if log.exists() else ""

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one protocol command and return its result (events in between are dropped)."""
        assert self._ws is not None, "not started"
        ident = next(self._ids)
        self._ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression on the page (awaited when it is a promise)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails'].get('exception', {}).get('description')}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        """Navigate the page to ``url`` (returns once the navigation started)."""
        result = self.send("Page.navigate", url=url)
        if result.get("errorText"):
            raise BrowserError(f"{url}: {result['errorText']}")

    def wait_for(self, expression: str, timeout: float | None = None) -> Any:
        """Evaluate ``expression`` until it is truthy; returns its value. Raises
        :class:`BrowserError` with the page's status line after ``timeout`` seconds."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            with contextlib.suppress(BrowserError):  # the page may be between two documents
                value = self.evaluate(expression)
                if value:
                    return value
            if time.monotonic() > deadline:
                status = self.evaluate("(document.getElementById('status') || {}).textContent || document.title")
                raise BrowserError(f"timed out waiting for {expression!r}; page status: {status!r}")
            time.sleep(0.05)

    def screenshot(self, path: Path, full_page: bool = False) -> None:
        """Save a PNG of the page as it is shown (the whole page when ``full_page``)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
            size = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", **params)["data"]))

    def close(self) -> None:
        """Stop Chromium (by its pid) and remove its profile."""
        if self._ws is not None:
            with contextlib.suppress(Exception):
                self._ws.close()
            self._ws = None
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        shutil.rmtree(self._profile, ignore_errors=True)
