"""The HTTP routes of ``gnnbridge serve`` (FastAPI) and the server's life (uvicorn).

Bodies are read and checked here by hand rather than through pydantic models: every refusal is
a 4xx with ``{"error": "FIELD: what is wrong, and the valid range", "field": "FIELD"}``, in the
same words whatever the field, and a body over ``--max-body`` is cut off while it is read, never
held whole. The model runs in a worker thread (the event loop keeps answering ``/health``);
concurrent ``/predict`` requests for node ids wait at most ``--max-wait-ms`` to be gathered into
one forward pass (:mod:`gnnbridge.serving.batching`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from gnnbridge.core.app.serving import RequestError, Served
from gnnbridge.serving.batching import Batcher

log = logging.getLogger("gnnbridge.serve")


class BodyTooLarge(Exception):
    pass


def create_app(
    served: Served,
    max_body: int = 1 << 20,
    max_batch: int = 64,
    max_wait_ms: float = 2.0,
    on_ready: Callable[[Served], None] | None = None,
    on_failure: Callable[[BaseException], None] | None = None,
) -> FastAPI:
    """The routes over ``served``; see the module docstring. A ``served`` not loaded yet is
    loaded in a thread of its own once the server listens: until then ``/health`` answers 503
    ``{"status": "loading"}`` and every other route a 503 refusal; then ``on_ready(served)``, or
    ``on_failure(exc)`` where loading failed (the server should stop)."""
    batcher = Batcher(served, max_batch, max_wait_ms / 1000)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        if served.loaded:
            on_ready and on_ready(served)
        else:
            _load_in_background(served, asyncio.get_running_loop(), on_ready, on_failure)
        yield
        await batcher.close()  # after uvicorn has let the in-flight requests finish

    app = FastAPI(title="gnnbridge serve", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.batcher = batcher

    app.add_middleware(WhileLoading, served=served)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:  # unknown route, wrong method
        routes = "GET /health, GET /metadata, POST /predict, POST /top-k"
        return error(
            exc.status_code, "path", f"{request.method} {request.url.path}: {exc.detail}; this server answers {routes}"
        )

    @app.get("/health")
    async def health() -> dict:  # (503 {"status": "loading"} before: the middleware above)
        return {"status": "ok", "checkpoint": served.digest}

    @app.get("/metadata")
    async def metadata() -> dict:
        served_so_far = {"requests": batcher.requests, "forward_passes": batcher.batches}
        return served.metadata() | {
            "max_body": max_body, "max_batch": max_batch, "max_wait_ms": max_wait_ms, "batching": served_so_far,
        }  # fmt: skip

    @app.post("/predict")
    async def predict(request: Request):
        body = await json_body(request, max_body)
        if isinstance(body, JSONResponse):
            return body
        if "graph" in body:
            return await answer(lambda: served.subgraph(body["graph"], body.get("nodes")))
        if "edges" in body:
            return await answer(lambda: served.edges(body["edges"]))
        if "nodes" not in body:
            return error(422, "nodes", 'missing; send {"nodes": [ids]} or {"graph": {...}, "nodes": [ids]}')
        return await answer(lambda: batcher.nodes(body["nodes"]), awaited=True)

    @app.post("/top-k")
    async def top_k(request: Request):
        body = await json_body(request, max_body)
        if isinstance(body, JSONResponse):
            return body
        for field in ("sources", "k"):
            if field not in body:
                return error(422, field, 'missing; send {"sources": [ids], "k": K}')
        return await answer(lambda: served.top_k(body["sources"], body["k"]))

    return app


class WhileLoading:
    """Until ``served`` has loaded: ``GET /health`` is 503 ``{"status": "loading"}``, every other
    request a 503 refusal. A plain ASGI middleware (one attribute read per request once loaded;
    Starlette's ``BaseHTTPMiddleware`` would cost every request a task and a queue)."""

    def __init__(self, app, served: Served):
        self.app, self.served = app, served

    async def __call__(self, scope, receive, send) -> None:
        if self.served.loaded or scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"] == "/health":
            response = JSONResponse({"status": "loading"}, status_code=503)
        else:
            response = error(503, "server", "the run is still loading; GET /health answers 200 once it is ready")
        await response(scope, receive, send)


def _load_in_background(served: Served, loop: asyncio.AbstractEventLoop, on_ready, on_failure) -> None:
    """``served.load()`` in a daemon thread (a SIGTERM while loading ends the program without
    waiting for it); its outcome is handed to ``on_ready`` / ``on_failure`` on the event loop."""

    def done(exc: BaseException | None) -> None:
        if exc is None:
            on_ready and on_ready(served)
        elif on_failure is not None:  # (the server stops and raises it: the CLI's one line)
            on_failure(exc)

    def work() -> None:
        try:
            served.load()
            outcome = None
        except BaseException as exc:  # noqa: BLE001 - handed to the server, which stops and reports it
            outcome = exc
        with contextlib.suppress(RuntimeError):  # (the loop has closed: the server stopped meanwhile)
            loop.call_soon_threadsafe(done, outcome)

    threading.Thread(target=work, name="gnnbridge-serve-load", daemon=True).start()


async def answer(compute, awaited: bool = False):
    """``compute()``'s JSON (in a worker thread, or awaited: the batcher's), a refused request's
    4xx, or a 500 of one line for what went wrong in the model."""
    try:
        return await compute() if awaited else await asyncio.to_thread(compute)
    except RequestError as exc:
        return error(exc.status, exc.field, exc.message)
    except Exception as exc:  # noqa: BLE001 - a model's failure is this request's 500, never the server's end
        line = (str(exc).strip().splitlines() or ["no message"])[0][:300]
        log.error("model error: %s: %s", type(exc).__name__, line)
        return error(500, "model", f"{type(exc).__name__}: {line}")


def error(status: int, field: str, message: str) -> JSONResponse:
    """A refusal: ``{"error": "FIELD: MESSAGE", "field": FIELD}``."""
    return JSONResponse({"error": f"{field}: {message}", "field": field}, status_code=status)


async def json_body(request: Request, limit: int) -> dict | JSONResponse:
    """The request's JSON object, read at most ``limit`` bytes far; a refusal's response else."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return error(413, "body", f"{int(declared):,} bytes is over the limit of {limit:,} (--max-body)")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return error(413, "body", f"over the limit of {limit:,} bytes (--max-body)")
        chunks.append(chunk)
    try:
        body: Any = json.loads(b"".join(chunks))
    except (ValueError, RecursionError) as exc:
        return error(400, "body", f"not JSON ({str(exc).splitlines()[0][:100]}); send a JSON object")
    if not isinstance(body, dict):
        return error(400, "body", f"must be a JSON object, got {type(body).__name__}")
    return body
