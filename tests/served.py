"""``gnnbridge serve RUN --port 0`` as a user starts it: a process of its own (a fork of the suite's
warm interpreter, :mod:`warm`, which runs a command as a fresh one does) on a free loopback port,
its URL read from the line it prints (the first, once it listens), ready once ``GET /health``
answers 200; every answer before that must be a 503 in JSON (the run still loading). (``tests/`` is on
``sys.path``; the serve tests import this as ``served``.)"""

from __future__ import annotations

import queue
import signal
import threading
import time
from pathlib import Path

import helpers
import httpx
import pytest

START_S = 120  # a server's start on a busy two-core machine (imports, the run loaded)


class Server:
    """``gnnbridge serve RUN --port 0`` in a subprocess; ``url`` from the line it prints."""

    def __init__(self, run: Path, *args: str):
        self.proc = helpers.start("serve", run, "--port", "0", *args, cwd=Path(run).parent)
        self.lines: queue.Queue = queue.Queue()  # what it prints, line by line
        threading.Thread(target=lambda: [self.lines.put(line) for line in self.proc.stdout], daemon=True).start()
        try:
            self.line = self.lines.get(timeout=START_S)
        except queue.Empty:
            self.stop()
            pytest.fail(f"the server printed nothing in {START_S} s; stderr: {self.proc.stderr.read()}")
        assert "127.0.0.1" in self.line and "loopback only" in self.line, self.line
        self.url = "http://" + self.line.split("http://")[1].split()[0]
        self.client = httpx.Client(base_url=self.url, timeout=60)
        self.early: list[httpx.Response] = []  # answers before the run had loaded (503 each)
        deadline = time.monotonic() + START_S
        while (health := self.client.get("/health")).status_code != 200:
            self.early += [health, self.client.post("/predict", json={"nodes": [0]})]
            if self.proc.poll() is not None or time.monotonic() > deadline:  # (stderr is read once it has ended)
                code = self.stop()
                pytest.fail(
                    f"the server did not load within {START_S} s (exit {code}); stderr: {self.proc.stderr.read()}"
                )
            time.sleep(0.2)
        for answer in self.early:  # (a /predict asked while loading may have found it loaded meanwhile)
            if answer.request.url.path == "/health":
                assert answer.status_code == 503 and answer.json() == {"status": "loading"}, answer.text
            elif answer.status_code == 503:
                assert answer.json()["field"] == "server" and "loading" in answer.json()["error"], answer.text

    def post(self, path: str, body) -> httpx.Response:
        return self.client.post(path, json=body)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)
