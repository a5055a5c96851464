"""A tiny Chrome DevTools Protocol client over ``--remote-debugging-pipe`` (no websocket, no extra packages).

Chromium reads NUL-terminated JSON commands from file descriptor 3 and writes replies and events to descriptor 4.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_chromium() -> str | None:
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """One headless Chromium with one page; ``evaluate`` runs JavaScript in it and returns the JSON value."""

    def __init__(self, executable: str, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="torchscan-chromium-")
        to_browser_read, self._write_fd = os.pipe()
        self._read_fd, from_browser_write = os.pipe()
        def wire() -> None:  # in the child: our pipe ends become fds 3 and 4 (moved high first: no clobbering)
            high_read = fcntl.fcntl(to_browser_read, fcntl.F_DUPFD, 10)
            high_write = fcntl.fcntl(from_browser_write, fcntl.F_DUPFD, 10)
            os.dup2(high_read, 3)
            os.dup2(high_write, 4)

        self.process = subprocess.Popen(
            [executable, "--headless=new", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-dev-shm-usage",
             "--allow-file-access-from-files", f"--user-data-dir={self.profile}", "--window-size=1280,900",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4, to_browser_read, from_browser_write),
            preexec_fn=wire,  # noqa: PLW1509 - fds 3 and 4 can only be wired in the child; no threads here
        )
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session = self._attach()

    def _attach(self) -> str:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page.enable", "Runtime.enable"):
            self.call(domain, session=session)
        return session

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._write_fd, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._receive()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def _receive(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("no answer from Chromium")
            chunk = os.read(self._read_fd, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed the debugging pipe")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(raw)

    def open(self, path: Path) -> None:
        """Navigate to a local file and wait for its load event."""
        self.events.clear()
        self.call("Page.navigate", {"url": path.resolve().as_uri()}, session=self.session)
        deadline = time.monotonic() + self.timeout
        while not any(event.get("method") == "Page.loadEventFired" for event in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} did not finish loading")
            self.events.append(self._receive())

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, session=self.session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript error: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> bytes:
        data = base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"}, session=self.session)["data"])
        path.write_bytes(data)
        return data

    def console_errors(self) -> list[str]:
        return [json.dumps(event["params"]) for event in self.events
                if event.get("method") == "Runtime.exceptionThrown"]

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._write_fd)
        os.close(self._read_fd)
        shutil.rmtree(self.profile, ignore_errors=True)
