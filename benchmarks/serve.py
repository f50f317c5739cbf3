"""``gnnbridge serve`` under load (issue 64, part 2): latency and throughput at 1, 8 and 64
concurrent clients, for node ids and for sent subgraphs, against two references.

Why: the server claims that a request costs its own neighbourhood (never the whole graph), and
that concurrent requests share forward passes (``--max-batch``, ``--max-wait-ms``). This script
measures both claims on this machine:

1. **gnnbridge serve**: the real server (``python -m gnnbridge serve RUN --port 0``, a
   subprocess); ``C`` clients (asyncio, httpx) each send requests one after another, every
   request ``--ids`` random node ids (or a random subgraph of ``--sub-nodes`` nodes and
   ``--sub-edges`` edges, scored on its own); p50 / p99 latency and requests/s;
2. **one forward pass of the same batch**: the limit batching can reach, ``C`` requests' ids
   scored in one call in this process (``Served.score_nodes``), no HTTP: its time is the least
   a batch of ``C`` concurrent requests can take;
3. **a naive server**: the same routes, but every request runs ``predict``'s full layer-wise pass
   over the whole graph and picks its rows (``--naive``, served by this script in a subprocess).

Prints one table and writes ``--json`` (default ``serve.json``) with every number.

    python benchmarks/serve.py                  # 20k nodes, sage on pyg: about three minutes on 2 cores
    python benchmarks/serve.py --nodes 100000 --backend dgl --requests 400
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CLIENTS = (1, 8, 64)


def main() -> None:
    args = parse()
    if args.naive:
        return naive_server(Path(args.naive), args.port)
    import gnnbridge
    from gnnbridge.core.app.serving import Served

    root = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    run = root / "run"
    overrides = [f"dataset.options.num_nodes={args.nodes}", "train.epochs=1", "train.batch_size=1024"]
    gnnbridge.run("sage-synthetic", backend=args.backend, nproc=1, overrides=overrides, out=run, progress=False)
    served = Served(run)
    rows = []
    # The limit first: once a server has been stopped, its processes' last work (a naive server's
    # full pass in flight) can still hold the cores for a while, which measured 71 ms for a
    # one-request pass that takes under 1 ms alone.
    for clients in CLIENTS:  # the limit: C requests' ids in one pass, in this process
        rows.append(
            {"server": "one forward pass (limit)", "kind": "nodes", "clients": clients} | limit(served, clients, args)
        )
        print_row(rows[-1])
    for label, cmd in (
        ("gnnbridge serve", [sys.executable, "-m", "gnnbridge", "serve", str(run), "--port", "0"]),
        ("naive (full pass per request)", [sys.executable, __file__, "--naive", str(run), "--port", "0"]),
    ):
        proc, url = start(cmd)
        try:
            for kind in ("nodes", "subgraph"):
                if label.startswith("naive") and kind == "subgraph":
                    continue  # (a sent graph is scored on its own either way)
                for clients in CLIENTS:
                    total = args.requests if not label.startswith("naive") else max(clients, args.requests // 10)
                    rows.append(
                        {"server": label, "kind": kind, "clients": clients}
                        | load(url, kind, clients, total, args, served)
                    )
                    print_row(rows[-1])
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))
    print(f"wrote {args.json}")


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=20000)
    p.add_argument("--backend", default="pyg")
    p.add_argument("--ids", type=int, default=4, help="node ids per request")
    p.add_argument("--sub-nodes", type=int, default=50)
    p.add_argument("--sub-edges", type=int, default=200)
    p.add_argument("--requests", type=int, default=400, help="requests per row (a tenth for the naive server)")
    p.add_argument("--json", default="serve.json")
    p.add_argument("--naive", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    return p.parse_args()


def start(cmd: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    url = "http://" + line.split("http://")[1].split()[0]
    import httpx

    while httpx.get(url + "/health", timeout=60).status_code != 200:  # it listens first, then loads the run
        time.sleep(0.2)
    return proc, url


def body(kind: str, rng: np.random.Generator, args, served) -> dict:
    if kind == "nodes":
        return {"nodes": rng.integers(0, args.nodes, args.ids).tolist()}
    x = rng.standard_normal((args.sub_nodes, served.data.num_features)).astype(np.float32)
    edges = rng.integers(0, args.sub_nodes, (2, args.sub_edges))
    return {"graph": {"x": x.tolist(), "edge_index": edges.tolist()}, "nodes": list(range(args.ids))}


def load(url: str, kind: str, clients: int, total: int, args, served) -> dict:
    """``clients`` clients sending ``total`` requests in all, one after another each."""
    import httpx

    rng = np.random.default_rng(0)
    bodies = [json.dumps(body(kind, rng, args, served)).encode() for _ in range(total)]
    latencies: list[float] = []

    async def client(mine: list[bytes], http: httpx.AsyncClient) -> None:
        for content in mine:
            t = time.perf_counter()
            got = await http.post("/predict", content=content, headers={"content-type": "application/json"})
            latencies.append(time.perf_counter() - t)
            assert got.status_code == 200, got.text

    async def everyone() -> float:
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:
            await http.post("/predict", content=bodies[0], headers={"content-type": "application/json"})  # warm
            t = time.perf_counter()
            await asyncio.gather(*(client(bodies[i::clients], http) for i in range(clients)))
            return time.perf_counter() - t

    wall = asyncio.run(everyone())
    return figures(latencies, wall)


def limit(served, clients: int, args) -> dict:
    """``clients`` requests' ids in one ``score_nodes`` call, repeated."""
    import torch

    rng = np.random.default_rng(1)
    served.score_nodes([torch.from_numpy(rng.integers(0, args.nodes, args.ids))])  # warm (not timed)
    latencies = []
    for _ in range(max(5, 100 // clients)):
        batch = [torch.from_numpy(rng.integers(0, args.nodes, args.ids)) for _ in range(clients)]
        t = time.perf_counter()
        served.score_nodes(batch)
        latencies.append(time.perf_counter() - t)
    return figures(latencies, sum(latencies), per_call=clients)


def figures(latencies: list[float], wall: float, per_call: int = 1) -> dict:
    ms = sorted(v * 1000 for v in latencies)
    return {
        "p50_ms": round(statistics.median(ms), 2),
        "p99_ms": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 2),
        "requests_per_s": round(len(ms) * per_call / wall, 1),
        "requests": len(ms) * per_call,
    }


def print_row(row: dict) -> None:
    print(
        f"{row['server']:<32} {row['kind']:<9} clients={row['clients']:<3} p50 {row['p50_ms']:>8.2f} ms  "
        f"p99 {row['p99_ms']:>8.2f} ms  {row['requests_per_s']:>8.1f} req/s",
        flush=True,
    )


def naive_server(run: Path, port: int) -> None:
    """The reference: ``/predict`` for node ids by a full pass over the whole graph per request."""
    import threading

    import uvicorn
    from fastapi import FastAPI

    from gnnbridge.core.app.serving import Served
    from gnnbridge.serving.server import bind

    served = Served(run)
    lock = threading.Lock()
    app = FastAPI()

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok"}

    @app.post("/predict")
    def predict(payload: dict) -> dict:
        with lock:
            logits = served.parts.predict()  # predict's layer-wise pass: every node, every layer
        return served.outputs(logits[payload["nodes"]].float())

    sock = bind("127.0.0.1", port)
    print(f"naive on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
