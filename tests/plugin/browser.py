"""Debian's headless Chromium for the plugin's page tests and the report's screenshots
(tests/screenshot_report.py): ``Chromium`` started per page (``--dump-dom`` /
``--screenshot``), ``DevTools`` one Chromium driven over its DevTools pipe."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

#: the first screen a reader sees
WINDOW = (1440, 900)


def wait_or_kill(proc: subprocess.Popen) -> None:
    """Wait up to 20 s for ``proc`` (asked to stop) to exit, else kill its process group."""
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


class Chromium:
    def __init__(self, path: str, profile: Path):
        self.path, self.profile = path, profile

    def _run(self, url: str, *args: str) -> subprocess.CompletedProcess:
        cmd = [self.path, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--disable-dev-shm-usage", f"--user-data-dir={self.profile}",
               "--virtual-time-budget=15000", *args, url]
        out = subprocess.run(cmd, capture_output=True, timeout=120)
        assert out.returncode == 0, out.stderr.decode(errors="replace")[-2000:]
        return out

    def dom(self, url: str) -> str:
        return self._run(url, "--dump-dom").stdout.decode()

    def screenshot(self, url: str, path: Path, size: str = "1400,1000") -> bytes:
        self._run(url, f"--screenshot={path}", f"--window-size={size}", "--hide-scrollbars")
        return path.read_bytes()


class DevTools:
    """One headless Chromium driven over the DevTools protocol on a pipe
    (``--remote-debugging-pipe``: it reads commands from fd 3 and writes replies and events to
    fd 4, each a JSON message ended by NUL), for what the DOM alone does not say: what is
    rendered (``innerText``, layout) before and after a disclosure is opened."""

    def __init__(self, path: str, profile: Path):
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()

        def fds():  # in the child, before exec: the pipe ends at 3 and 4
            high_r, high_w = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(
            [path, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--remote-debugging-pipe",
             "--hide-scrollbars", "about:blank"],
            pass_fds=(3, 4), preexec_fn=fds, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf, self._id, self.session = b"", 0, None
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable")

    def _read(self, deadline: float) -> dict:
        import select

        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise TimeoutError("no reply from Chromium's DevTools pipe")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise EOFError("Chromium closed its DevTools pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, timeout: float = 60, **params):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if self.session and not method.startswith(("Target.", "Browser.")):
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._id:
                assert "error" not in reply, f"{method}: {reply['error']}"
                return reply.get("result", {})
            # anything else is an event (or a reply to nothing we wait for): not needed

    def open(self, url: str, width: int = WINDOW[0], height: int = WINDOW[1]):
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + 60
        while self.js("document.readyState") != "complete":
            assert time.monotonic() < deadline, f"{url} did not load"
            time.sleep(0.2)

    def js(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def screenshot(self, path: Path) -> bytes:
        import base64

        data = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        path.write_bytes(data)
        return data

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except (OSError, TimeoutError, EOFError, AssertionError):
            pass
        wait_or_kill(self.proc)
        os.close(self._w)
        os.close(self._r)
