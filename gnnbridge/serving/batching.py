"""Gathering concurrent ``/predict`` requests for node ids into one forward pass.

A request is checked on arrival (a bad one is refused at once and never joins a batch), then
queued. One task takes the first request waiting, gathers what else arrives within
``max_wait`` seconds (at most ``max_batch`` requests), and runs them as one batch of seeds in a
worker thread (:meth:`~gnnbridge.core.app.serving.Served.score_nodes`: the union of their
neighbourhoods sampled once); each request gets its own rows back. With ``max_batch`` 1 every
request runs alone. Hand-written: a few lines of asyncio, nothing a library of its own would save.
"""

from __future__ import annotations

import asyncio
import contextlib

from gnnbridge.core.app.serving import Served


class Batcher:
    def __init__(self, served: Served, max_batch: int, max_wait: float):
        self.served, self.max_batch, self.max_wait = served, max(1, max_batch), max(0.0, max_wait)
        self.queue: asyncio.Queue | None = None
        self.task: asyncio.Task | None = None
        self.batches = 0  # forward passes run (the metadata reports them: a test sees batching happen)
        self.requests = 0

    async def nodes(self, ids) -> dict:
        seeds = self.served.node_seeds(ids)  # refused here, before it can spoil a batch
        if self.max_batch == 1:
            return (await self._run([seeds]))[0]
        if self.queue is None:
            self.queue = asyncio.Queue()
            self.task = asyncio.create_task(self._gather())
        done = asyncio.get_running_loop().create_future()
        await self.queue.put((seeds, done))
        return await done

    async def _run(self, seeds: list) -> list[dict]:
        self.batches += 1
        self.requests += len(seeds)
        return await asyncio.to_thread(self.served.score_nodes, seeds)

    async def _gather(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self.queue.get()]
            deadline = loop.time() + self.max_wait
            while len(batch) < self.max_batch:
                try:
                    batch.append(self.queue.get_nowait())
                    continue
                except asyncio.QueueEmpty:
                    pass
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self.queue.get(), left))
                except TimeoutError:
                    break
            await self._answer(batch)

    async def _answer(self, batch: list) -> None:
        try:
            rows = await self._run([seeds for seeds, _ in batch])
        except Exception as exc:  # noqa: BLE001 - every request of the batch is told (a 500 each)
            for _, done in batch:
                if not done.done():
                    done.set_exception(exc)
            return
        for (_, done), row in zip(batch, rows):
            if not done.done():  # (a client that went away)
                done.set_result(row)

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
