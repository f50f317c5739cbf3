"""One copy per machine of the sparse embedding tables and their Adam moments
(``model.embeddings=sparse`` with ``placement.tables=machine``, the default).

Why: with the tables replicated (:class:`~.sparse.SparseGradSync`), every rank holds all of
every table and both Adam moments (at Taobao scale, 5M rows of 64: 3.8 GB a rank),
all-gathers every other rank's gradient rows, and applies the *same* update to its own copy:
a machine of N ranks does each step's table update N times. Here the ranks of a machine map
one copy, in shared memory (:func:`~gnnbridge.core.runtime.sharing.node_tensors`), and:

1. after the backward pass each rank copies its gradient rows into its slot of a mailbox,
   also in shared memory (no collective moves them; only the row counts are all-reduced);
2. after a barrier, rank r takes the rows it owns (``row % ranks == r``) from every slot,
   sums a row's copies, divides by the world size as DDP does, and hands those rows to the
   optimizer as the table's gradient: :class:`~.sparse.RowAdam` updates each row once per
   machine, by its owner, in the shared weight and moments;
3. a second barrier (:meth:`SharedTableSync.settle`, after the optimizer step) keeps the next
   forward pass from reading a row its owner is still updating.

The arithmetic is the replicated path's, in its order (each rank's rows divided by the world
size, then summed rank by rank; the same compiled Adam), so the two train to the same bits.

Where it does not apply, the trainer keeps the replicated path: ranks on several machines
(one copy per machine would need a second exchange between machines), tables on a GPU, or an
optimizer other than Adam (SGD's sparse step has no compiled form here). torch ships nothing
for this: DDP reduces dense gradients, and torchrec's sharded tables are a GPU stack of its own.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
from torch import nn

from gnnbridge.core.compiled import signals_deferred
from gnnbridge.core.runtime.context import DistContext
from gnnbridge.core.runtime.sharing import node_tensors
from gnnbridge.core.training import sparse

GROWTH = 1.25  # a mailbox grows to this much more than the largest batch seen, so it rarely grows
# Names this process's syncs apart (compare builds a trainer per backend in one rank); every rank
# builds them in the same order, so the node's ranks agree on each name.
_SYNCS = itertools.count()


def applies(ctx: DistContext, optimizer: torch.optim.Optimizer, tables: dict[str, nn.Parameter]) -> bool:
    """Whether this job's tables can be one copy per machine (see the module docstring)."""
    inner = getattr(optimizer, "sparse", None)
    return (
        sparse._sum_rows is not None
        and ctx.distributed
        and ctx.num_nodes == 1
        and ctx.local_world_size == ctx.world_size
        and bool(tables)
        and isinstance(inner, sparse.RowAdam)
        and all(inner.fusable(group, p) for group in inner.param_groups for p in group["params"])
    )


class SharedTableSync:
    """The tables' gradient exchange and update for ranks sharing one machine. Built after the
    optimizer (and a resumed run's loaded state): it moves each table's weight and moments into
    shared memory, from the machine's first rank, whose values every rank already has."""

    def __init__(self, ctx: DistContext, tables: dict[str, nn.Parameter], optimizer: sparse.SplitOptimizer):
        self.ctx = ctx
        self.params = list(tables.values())
        self._boxes: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(self.params)
        self._name = f"tables{next(_SYNCS)}"
        self._grown = 0  # mailboxes made so far: each sharing needs a name of its own
        self._slots = [np.full(p.shape[0], -1, dtype=np.int32) for p in self.params]
        shared = node_tensors(
            ctx, self._name, lambda: self._tensors(optimizer), "the embedding tables", "placement.tables=rank"
        )
        for t, param in enumerate(self.params):
            param.data = shared[f"{t}.weight"]
            state = optimizer.state[param]
            state.setdefault("step", 0)
            state["exp_avg"], state["exp_avg_sq"] = shared[f"{t}.exp_avg"], shared[f"{t}.exp_avg_sq"]

    def _tensors(self, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
        out = {}
        for t, param in enumerate(self.params):
            state = optimizer.state.get(param, {})
            out[f"{t}.weight"] = param.detach()
            for key in ("exp_avg", "exp_avg_sq"):
                out[f"{t}.{key}"] = state[key] if key in state else torch.zeros_like(param)
        return out

    def __call__(self) -> None:
        """After the backward pass: every table's gradient becomes the rows this rank owns of
        the mean over ranks (None where no rank looked a row up, as the optimizer expects)."""
        ctx = self.ctx
        rows = [sparse.SparseGradSync.rows(p) for p in self.params]
        counts = torch.zeros((ctx.world_size, len(rows)), dtype=torch.int64)
        counts[ctx.rank] = torch.tensor([ids.numel() for ids, _ in rows])
        counts = ctx.all_reduce_sum(counts)  # also: every rank is done reading the last step's mailboxes
        for t, (ids, values) in enumerate(rows):
            if counts[:, t].any():
                box_ids, box_values = self._mailbox(t, int(counts[:, t].max()))
                box_ids[ctx.rank, : ids.numel()] = ids
                box_values[ctx.rank, : ids.numel()] = values
        del rows
        ctx.local_barrier()
        for t, param in enumerate(self.params):
            param.grad = self._owned(t, counts[:, t]) if counts[:, t].any() else None

    def settle(self) -> None:
        """After the optimizer step: no rank reads the tables before every owner has updated."""
        self.ctx.local_barrier()

    def _mailbox(self, t: int, needed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Table ``t``'s mailbox, one slot per rank, at least ``needed`` rows a slot. Every rank
        sees the same counts, so all of them grow it together (a sharing is collective)."""
        box = self._boxes[t]
        if box is None or box[0].shape[1] < needed:
            self._boxes[t] = box = None  # the old one unmapped before the new one is made
            width, shape = int(needed * GROWTH) + 1, self.params[t].shape
            name, self._grown = f"{self._name}-mailbox{self._grown}", self._grown + 1
            made = node_tensors(
                self.ctx,
                name,
                lambda: {
                    "ids": torch.zeros((self.ctx.world_size, width), dtype=torch.int64),
                    "values": torch.zeros((self.ctx.world_size, width, shape[1]), dtype=torch.float32),
                },
                "the embedding tables' gradient rows",
                "train.batch_size",
            )
            self._boxes[t] = box = (made["ids"], made["values"])
        return box

    def _owned(self, t: int, sizes: torch.Tensor) -> torch.Tensor:
        """This rank's rows of table ``t``'s mean gradient, each row once (marked so: the
        optimizer does not sum them again)."""
        ctx, param = self.ctx, self.params[t]
        box_ids, box_values = self._boxes[t]
        most = int(sizes.sum())
        out_ids = np.empty(most, dtype=np.int64)
        out_values = np.empty((most, param.shape[1]), dtype=np.float32)
        with signals_deferred():
            count = sparse._sum_rows(
                box_ids.numpy(),
                box_values.numpy(),
                sizes.numpy(),
                ctx.rank,
                ctx.world_size,
                self._slots[t],
                out_ids,
                out_values,
            )
        ids, values = torch.from_numpy(out_ids[:count]), torch.from_numpy(out_values[:count])
        grad = torch.sparse_coo_tensor(ids[None], values, param.shape, check_invariants=False)
        return sparse.mark_unique_rows(grad)
