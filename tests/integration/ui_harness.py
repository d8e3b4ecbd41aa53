"""Runs `dbtap ui` (or `dbtap live --listen`) for the web UI tests, and a headless Chromium
driven by Playwright for Python (the system's /usr/bin/chromium: Playwright cannot download its
own browsers here; tests/setup.sh installs both).

`Ui` starts the binary, returns once it printed its "dbtap: ui on http://ADDR/" line, and stops
it with SIGTERM. `Browser` opens pages and waits for them to say they are drawn: every page
sets `body[data-state]` to `loading` while it fetches and to `ready` (or `error`) once it has
drawn what it fetched. Nothing here trusts dbtap: truth comes from the servers and clients.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import harness

CHROMIUM = "/usr/bin/chromium"
READY = "dbtap: ui on http://"


class Ui:
    """One `dbtap ui ARGS... --listen 127.0.0.1:PORT` process."""

    def __init__(self, port: int, *args, subcommand: str = "ui", ready: str = READY):
        self.port = port
        self.args = [str(a) for a in args]
        self.subcommand = subcommand
        self.ready_line = ready
        self.proc: subprocess.Popen | None = None
        self.err: list[str] = []
        self.ready = threading.Event()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> "Ui":
        harness.wait_port_free(self.port)
        cmd = [str(harness.dbtap_path()), self.subcommand, *self.args,
               "--listen", f"127.0.0.1:{self.port}"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)

        def read_err():
            for line in iter(self.proc.stderr.readline, b""):
                s = line.decode(errors="replace")
                self.err.append(s)
                if self.ready_line in s:
                    self.ready.set()

        threading.Thread(target=read_err, daemon=True).start()
        if not self.ready.wait(timeout):
            self.stop()
            raise RuntimeError(f"{' '.join(cmd)} did not start serving; stderr: {''.join(self.err)!r}")
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> "Ui":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def api(self, path: str, **params) -> dict:
        """GET /api/<path>?params, the JSON answer (raises on an HTTP error)."""
        q = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        url = f"{self.base}/api/{path}" + (f"?{q}" if q else "")
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"GET {url}: {e.code} {e.read()[:300]!r}") from None


class Browser:
    """A headless Chromium (Playwright, system binary) with one page."""

    def __init__(self, width: int = 1400, height: int = 900, color_scheme: str = "light"):
        self.size = {"width": width, "height": height}
        self.color_scheme = color_scheme
        self.errors: list[str] = []

    def __enter__(self) -> "Browser":
        from playwright.sync_api import sync_playwright
        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                                args=["--no-sandbox"])
        # UTC: the pages show and read times in the browser's zone (the tests type some).
        self.page = self.browser.new_page(viewport=self.size, color_scheme=self.color_scheme,
                                          timezone_id="UTC")
        # Script errors fail the tests that check `errors`; a missing favicon or a 4xx the page
        # shows on purpose is not one.
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        return self

    def __exit__(self, *exc) -> None:
        self.browser.close()
        self._pw.stop()

    def open(self, url: str, timeout_ms: float = 20_000):
        self.page.goto(url)
        return self.wait_ready(timeout_ms)

    def wait_ready(self, timeout_ms: float = 20_000):
        """Waits for the page to have drawn the current view; fails on a page error."""
        self.page.wait_for_selector("body[data-state=ready], body[data-state=error]",
                                    timeout=timeout_ms)
        state = self.page.get_attribute("body", "data-state")
        if state != "ready":
            raise AssertionError(f"page {self.page.url} shows an error: "
                                 f"{self.page.inner_text('#error')!r}")
        assert not self.errors, self.errors
        return self.page

    def act(self, fn):
        """Runs `fn()` (a click, a selection) that changes the view, then waits for the redraw."""
        fn()
        return self.wait_ready()

    def shot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path), full_page=True)


def wait_until(fn, timeout: float = 10.0, step: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(step)
