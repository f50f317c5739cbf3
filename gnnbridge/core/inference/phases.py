"""Where an epoch's time goes, per phase, cheap enough to leave on in every run.

A profiler answers this too, but costs too much to run always, and answers per operator, not per
phase of a training step. Each step marks the end of a phase; the time since the previous mark
is that phase's. On CPU a mark reads the clock (the work is synchronous). On CUDA a mark records
an event on the current stream, without waiting: the events are resolved once, at the end of the
epoch, so marking never stalls the GPU. Event intervals then say when the device reached each
mark, which attributes a host-side stall (sampling, gathering) to the phase that caused it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

PHASES = ("sample", "gather", "h2d", "forward", "backward", "step")
"""In step order. ``h2d``: moving the batch to the device (zero on CPU beyond bookkeeping);
``backward`` includes DDP's all-reduce, which it overlaps."""
WHAT = {
    "sample": "sampling",
    "gather": "feature gathering",
    "h2d": "copy to the device",
    "forward": "forward pass",
    "backward": "backward pass",
    "step": "optimizer step",
}
"""Each phase as the line about a stuck rank names it ("its forward pass of epoch 1, step 3")."""


class PhaseTimer:
    """Seconds per phase over one epoch; ``mark(phase)`` closes ``phase`` at the current point.

    ``tell``, when given, hears which phase of which step begins (``DistContext.doing``): the
    marks already say what a rank is doing, which is what a stuck rank's line must name."""

    def __init__(self, device: torch.device, tell: Callable[[str], None] | None = None, epoch: int = 0):
        self.cuda = device.type == "cuda"
        self.totals = dict.fromkeys(PHASES, 0.0)
        self._marks: list[tuple[str, object]] = []
        self._last = None
        self._tell, self._epoch, self._step = tell, epoch, 1

    def start(self, step: int = 1) -> None:
        """Start timing at ``step`` (1-based; later than 1 when an epoch resumes inside)."""
        self._last, self._step = self._now(), step
        self._begins(PHASES[0])

    def mark(self, phase: str) -> None:
        now = self._now()
        if self.cuda:
            self._marks.append((phase, now))
        else:
            self.totals[phase] = self.totals.get(phase, 0.0) + (now - self._last)
            self._last = now
        if self._tell is not None:
            self._step += phase == PHASES[-1]
            self._begins(PHASES[(PHASES.index(phase) + 1) % len(PHASES)])

    def _begins(self, phase: str) -> None:
        if self._tell is not None:
            self._tell(f"its {WHAT[phase]} of epoch {self._epoch + 1}, step {self._step}")

    def seconds(self) -> dict[str, float]:
        """The totals (for CUDA, after waiting for the marked work once)."""
        if self.cuda and self._marks:
            self._marks[-1][1].synchronize()
            previous = self._last
            for phase, event in self._marks:
                self.totals[phase] = self.totals.get(phase, 0.0) + previous.elapsed_time(event) / 1000.0
                previous = event
            self._last, self._marks = previous, []
        return dict(self.totals)

    def _now(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event


class NoPhases:
    """What evaluators pass where nobody reads the phases."""

    def mark(self, phase: str) -> None:
        """Nothing to record."""


NO_PHASES = NoPhases()


def slowest_rank(ctx, seconds: dict[str, float], total: float) -> dict:
    """Every rank's phases gathered once per epoch (one small all-reduce); returns the slowest
    rank's (by ``total``, its epoch time) with its rank."""
    names = list(seconds)
    row = torch.zeros((ctx.world_size, len(names) + 1), dtype=torch.float64)
    row[ctx.rank] = torch.tensor([total] + [seconds[n] for n in names], dtype=torch.float64)
    ctx.all_reduce_sum(row)
    rank = int(torch.argmax(row[:, 0]))
    return {
        "rank": rank,
        "epoch_time_s": float(row[rank, 0]),
        **{n: float(v) for n, v in zip(names, row[rank, 1:].tolist())},
    }
