"""Headless Chromium (Debian's) driven over the Chrome DevTools Protocol: open a page,
evaluate JavaScript, take a screenshot.  One websocket (``websocket-client``), no driver
binary.  The browser runs in its own process group with a new empty profile and dies with
the test process; ``close`` ends that group and removes the profile."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket

from sdnmpi.testing.waits import wait_for

CHROMIUM = Path("/usr/bin/chromium")
#: util-linux's setpriv execs Chromium with a parent-death signal: the kernel kills it
#: when the test process dies, even by SIGKILL (a CI timeout) where ``close`` never runs,
#: and its helpers follow it.
DIE_WITH_PARENT = ["setpriv", "--pdeathsig", "KILL", "--"]
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
    "--window-size=1280,720",
]


class Browser:
    """One Chromium and its first page (see module docstring)."""

    def __init__(self, log: Path) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="sdnmpi-chromium-"))
        argv = [*DIE_WITH_PARENT, str(CHROMIUM), *FLAGS, f"--user-data-dir={self.profile}"]
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [*argv, "about:blank"],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._ids = itertools.count(1)
        self.ws: websocket.WebSocket | None = None
        try:
            active = self.profile / "DevToolsActivePort"
            wait_for(
                "Chromium's DevTools port", lambda: active.exists() and bool(active.read_text()), 30
            )
            port = int(active.read_text().split()[0])
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                targets = json.load(r)
            page = next(t for t in targets if t["type"] == "page")
            self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30)
        except BaseException:
            self.close()
            raise

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result (events in between are skipped)."""
        assert self.ws is not None
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                result: dict[str, Any] = msg["result"]
                return result

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def js(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-able)."""
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in res:
            raise AssertionError(f"{expression}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        if self.ws is not None:
            with contextlib.suppress(Exception):
                self.ws.close()
            self.ws = None
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)  # the group this Popen made, nothing else
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
                break
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                break  # every process of the group is gone
            time.sleep(0.1)
        shutil.rmtree(self.profile, ignore_errors=True)
