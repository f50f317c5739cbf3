"""Starting and stopping ``gnnbridge serve``: the run's checkpoint is read and checked, the socket
bound (a port in use is one clear line, before anything listens), one line says where it
listens, the run loads while uvicorn already answers (``/health``: 503 ``loading``, then 200; a
second line says it is ready), and uvicorn serves until SIGTERM or Ctrl-C, which let the
requests in flight finish and end the program with 0.
"""

from __future__ import annotations

import contextlib
import errno
import signal
import socket
from collections.abc import Callable, Iterator

from gnnbridge.core.app.serving import Served
from gnnbridge.core.errors import ConfigError

LOOPBACK = "127.0.0.1"


def serve(
    served: Served,
    host: str = LOOPBACK,
    port: int = 8080,
    *,
    max_body: int = 1 << 20,
    max_batch: int = 64,
    max_wait_ms: float = 2.0,
    say: Callable[[str], None] = print,
) -> None:
    """Serve ``served`` on ``host:port`` (0: a free port, named in the line ``say`` is given)
    until a signal stops it. A ``served`` not loaded yet (``Served(..., load=False)``) is loaded
    once the server listens (``/health`` answers 503 until then); a failure to load stops the
    server and is raised here."""
    import uvicorn

    from gnnbridge.serving.app import create_app

    sock = bind(host, port)
    bound = sock.getsockname()[1]
    where = (
        "loopback only; --host 0.0.0.0 listens on every interface"
        if host == LOOPBACK
        else "every client that can reach it"
    )
    say(f"gnnbridge serve: {served.config.name} on http://{host}:{bound} ({where}); Ctrl-C stops")
    failed: list[BaseException] = []

    def ready(s: Served) -> None:
        meta = s.metadata()
        say(
            f"gnnbridge serve: ready: {meta['task']}, {meta['backend']}, checkpoint epoch {meta['checkpoint']['epoch']}"
        )

    def failure(exc: BaseException) -> None:
        failed.append(exc)
        server.should_exit = True

    app = create_app(served, max_body, max_batch, max_wait_ms, on_ready=ready, on_failure=failure)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=30)
    server = uvicorn.Server(config)
    with _signals_end_quietly():
        server.run(sockets=[sock])
    sock.close()
    if failed:
        raise failed[0]


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``; a refusal is one line naming both."""
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port {port} is not a port; choose one in [0, 65535] (0: a free one).")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # (inherited by accepted connections)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc.strerror or exc})"
        raise ConfigError(f"--host {host} --port {port} {why}; choose another --port (0: a free one).") from None
    sock.listen(2048)
    return sock


@contextlib.contextmanager
def _signals_end_quietly() -> Iterator[None]:
    """uvicorn stops gracefully on SIGTERM and SIGINT, then raises the signal again under the
    handlers it found: these, which do nothing, so the program ends with 0 after its shutdown
    (not killed by SIGTERM's default, nor a KeyboardInterrupt)."""
    handled = (signal.SIGINT, signal.SIGTERM)
    before = {sig: signal.signal(sig, lambda *_: None) for sig in handled}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
