"""Checkpoints inside an epoch (``train.checkpoint_every_batches``) and resuming from one
exactly, by a restart or ``--resume``.

Why: at recommendation scale one epoch takes hours (a Taobao-shaped graph: 2.6-3 h on two
cores, docs/performance.md). With checkpoints only at epoch ends, a job stopped late in such an
epoch trains all of it again.

How it stays exact without asking anything new of samplers: every random stream is reseeded at
the start of an epoch from (seed, epoch, rank) (see :mod:`gnnbridge.core.inference.checkpoint`), so a resume reseeds
as that epoch's start did and has the sampler draw the first B batches again without training
on them: a sampler's own generators end where they were (sampling is about a tenth of a step at
that scale). Then each rank's global generators (dropout, and anything drawing from torch,
numpy or random) and its running sums of the epoch (loss, confusion counts, first bad step,
time per phase) are put back as they were after batch B; the checkpoint keeps every rank's.
Resuming on another number of ranks, or with a batch size or ``train.max_batches`` that gives
the epoch another number of batches, starts that epoch from its first batch instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gnnbridge.core.contracts.targets import Target
from gnnbridge.core.inference import checkpoint
from gnnbridge.core.runtime.context import DistContext

REPLAY = "its sampling of epoch {epoch}'s first {batches} batches again (resuming inside that epoch)"


@dataclass
class Inside:
    """Where a mid-epoch checkpoint stopped, as one rank resumes it."""

    epoch: int
    batches: int  # of the epoch, trained by every rank before the checkpoint
    mine: dict  # this rank's running sums and generator states there

    @classmethod
    def from_checkpoint(cls, state: dict | None, ctx: DistContext, warn) -> Inside | None:
        """The position ``state`` stopped at, for this rank; None for an epoch-end checkpoint
        or one written by another number of ranks (``warn`` is told why)."""
        mid = (state or {}).get("mid_epoch")
        if mid is None:
            return None
        if len(mid["ranks"]) != ctx.world_size:
            warn(
                f"The checkpoint stopped {mid['batches']} batches into epoch {mid['epoch'] + 1} with "
                f"{len(mid['ranks'])} rank(s); with {ctx.world_size} that epoch starts again from its first batch."
            )
            return None
        return cls(mid["epoch"], mid["batches"], mid["ranks"][ctx.rank])

    def fits(self, epoch: int, batches: int, warn) -> bool:
        """Whether this position is inside ``epoch`` of ``batches`` batches a rank."""
        if epoch != self.epoch:
            return False
        if batches != self.mine["of"]:
            warn(
                f"The checkpoint stopped {self.batches} batches into epoch {epoch + 1} of {self.mine['of']}; "
                f"this run splits it into {batches} (train.batch_size or train.max_batches changed), so that "
                "epoch starts again from its first batch."
            )
            return False
        return True

    def put_back(self, sums: EpochSums) -> None:
        """After the replayed batches: this rank's generators and running sums as they were."""
        checkpoint.set_rng_states(self.mine["rng"])
        sums.load(self.mine)

    def earlier(self, key: str):
        """The seconds (``elapsed``) or phase times (``phases``) spent before the checkpoint: an
        epoch's figures add its segments, so a stop costs no time in the record but the replay."""
        return self.mine[key]


class EpochSums:
    """A rank's running sums of one epoch: the summed loss, its terms (items, or labels present),
    the target's running metric sums and the first step whose loss was NaN or infinite (-1:
    none). They stay on the device (no host sync per step, one reduction per epoch); the first
    bad step is checked once the epoch is done."""

    def __init__(self, target: Target, width: int, device: torch.device):
        self.target = target
        self.loss = torch.zeros((), dtype=torch.float64, device=device)
        self.terms = torch.zeros((), dtype=torch.float64, device=device)
        self.first_bad = torch.full((), -1, dtype=torch.int64, device=device)
        self.running = target.running(width, device)

    def add(self, step: int, loss_sum: torch.Tensor, terms: torch.Tensor, logits: torch.Tensor, y: torch.Tensor):
        self.loss += loss_sum
        self.terms += terms
        self.first_bad = torch.where((self.first_bad < 0) & ~torch.isfinite(loss_sum.detach()), step, self.first_bad)
        self.target.add_running(self.running, logits.detach(), y)

    def reduce(self, ctx: DistContext) -> tuple[float, dict[str, float]]:
        """Every rank's sums added: the epoch's mean loss per term and its running metrics."""
        loss, terms = ctx.all_reduce_sum(torch.stack([self.loss, self.terms])).tolist()
        running = ctx.all_reduce_sum(self.running).cpu()
        return loss / max(1.0, terms), self.target.running_metrics(running, "train")

    def state(self) -> dict:
        return {
            "loss_sum": float(self.loss),
            "terms": float(self.terms),
            "first_bad": int(self.first_bad),
            "running": self.running.detach().cpu().clone(),
        }

    def load(self, state: dict) -> None:
        """A checkpoint's sums; one written before targets (``counts``, a confusion matrix) counted
        one term per item."""
        running = state["running"] if "running" in state else state["counts"]
        self.loss.fill_(state["loss_sum"])
        self.terms.fill_(state["terms"] if "terms" in state else float(running.sum()))
        self.first_bad.fill_(state["first_bad"])
        self.running.copy_(running)


def capture(ctx: DistContext, of: int, sums: EpochSums, elapsed: float, phases: dict) -> list[dict]:
    """Every rank's running sums and generators, on every rank (a collective)."""
    mine = {"of": of, "rng": checkpoint.rng_states(), **sums.state(), "elapsed": elapsed, "phases": phases}
    return ctx.gather_objects(mine)


def added(phases: dict[str, float], earlier: dict[str, float] | None) -> dict[str, float]:
    """Phase times of a segment plus those of the segments before it."""
    return {k: v + (earlier or {}).get(k, 0.0) for k, v in phases.items()}
