"""Sparse gradients for learnable node embeddings (``model.embeddings=sparse``): a step costs the
rows the batch looked up, not the whole table.

Why this is written here: a featureless node type is an ``nn.Embedding`` of one row per node;
at recommendation scale (4M items x 64) that is 1 GB, and a dense gradient makes every step
all-reduce and Adam-update the whole of it (hours per epoch on a Taobao-sized graph, see
docs/limitations.md). ``nn.Embedding(sparse=True)`` gives a gradient of the looked-up rows
alone, but DDP reduces a sparse gradient with a sparse all-reduce that only gloo has, and
torch's Adam refuses sparse gradients. So:

* the tables are left out of DDP (its ignore list, :func:`exclude_from_ddp`) and
  :class:`SparseGradSync` all-gathers every rank's touched rows with dense collectives, which
  gloo and nccl both have, then divides by the world size as DDP does: every rank builds the
  same gradient and takes the same step, so the replicas stay equal (where all ranks share one
  machine, :mod:`.shared_tables` keeps one copy for them instead, each rank updating its part);
* :class:`SplitOptimizer` steps the tables with a sparse-gradient optimizer
  (``torch.optim.SparseAdam``, lazy Adam: only the touched rows' moments move; SGD for
  ``train.optimizer=sgd``) and everything else with ``train.optimizer``, as *one* torch
  optimizer, so the learning-rate schedule, checkpoints, exact resume and ``port`` need no
  case of their own. ``train.weight_decay`` does not reach the tables (neither sparse
  optimizer has it), as in DGL's and PyG's own embedding examples;
* :class:`RowAdam` is SparseAdam with its update done in one compiled pass over the touched
  rows. Why our own: torch's SparseAdam makes about a dozen passes over them (masks, sparse
  additions that index and coalesce, the arithmetic one operation at a time), single-threaded;
  at Taobao scale (~1M rows of 64 a step) that was half of a training step (py-spy, a pyg
  rank). Same update, state keys and checkpoints as SparseAdam, which it falls back to where
  the compiled pass cannot run (no numba, a GPU table, ``maximize``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from gnnbridge.core.compiled import numba, parallel_launch, signals_deferred, threads
from gnnbridge.core.config import TrainConfig


def sparse_tables(model: nn.Module) -> dict[str, nn.Parameter]:
    """Every parameter that gets a sparse gradient (an ``nn.Embedding(sparse=True)``'s weight,
    whoever built it), by its name in ``model``."""
    out = {}
    for prefix, module in model.named_modules():
        if isinstance(module, nn.Embedding | nn.EmbeddingBag) and module.sparse:
            out[f"{prefix}.weight" if prefix else "weight"] = module.weight
    return out


def exclude_from_ddp(model: nn.Module, names: Iterable[str]) -> None:
    """Tell DDP (before it wraps ``model``) to neither broadcast nor reduce these parameters:
    :class:`SparseGradSync` reduces them. (Every rank builds them from the same seed or loads
    them from the same checkpoint, so they start equal without DDP's broadcast.)"""
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, list(names))


class SparseGradSync:
    """The all-reduce (mean) of the tables' sparse gradients over ranks, by all-gathering each
    rank's rows: one small all-reduce of every rank's row counts, then the row ids and values
    of each table. A rank whose batch missed a table sends nothing for it but still receives
    the others' rows."""

    def __init__(self, ctx, tables: dict[str, nn.Parameter]):
        self.ctx = ctx
        self.params = list(tables.values())

    def __call__(self) -> None:
        ctx = self.ctx
        if not ctx.distributed or not self.params:
            return
        rows = [self.rows(p) for p in self.params]
        counts = torch.zeros((ctx.world_size, len(rows)), dtype=torch.int64)
        counts[ctx.rank] = torch.tensor([ids.numel() for ids, _ in rows])
        counts = ctx.all_reduce_sum(counts)
        for column, (param, (ids, values)) in enumerate(zip(self.params, rows, strict=True)):
            sizes = counts[:, column].tolist()
            if not sum(sizes):
                param.grad = None  # no rank looked a row up: the optimizer skips the table
                continue
            ids = ctx.all_gather_rows(ids, sizes)
            values = ctx.all_gather_rows(values, sizes).div_(ctx.world_size)
            # Not coalesced here: a row several ranks reached comes once per rank, and the
            # optimizer sums them (RowAdam without a sort, which was a fifth of a Taobao step).
            param.grad = torch.sparse_coo_tensor(ids[None], values, param.shape, check_invariants=False)

    def settle(self) -> None:
        """After the optimizer step: nothing to wait for, every rank updated its own copy."""

    @staticmethod
    def rows(param: nn.Parameter) -> tuple[torch.Tensor, torch.Tensor]:
        """(row ids, gradient rows) of this rank's gradient, as autograd left it: a row looked up
        twice may come twice (the optimizer sums repeated rows)."""
        grad = param.grad
        if grad is None:
            return (
                torch.empty(0, dtype=torch.int64, device=param.device),
                param.new_empty((0, *param.shape[1:])),
            )
        if not grad.is_sparse:
            raise RuntimeError(f"a table marked sparse got a dense gradient ({grad.layout})")
        return grad._indices()[0], grad._values()


class SplitOptimizer(torch.optim.Optimizer):
    """``dense`` over the parameters with dense gradients and ``sparse`` over the tables, as one
    torch optimizer. It has one parameter group per run of consecutive parameters of one kind,
    in the model's order, and shares its ``state`` with both: so a state dict numbers the
    parameters as ``model.parameters()`` does (what ``port`` re-keys by) and saves and loads
    like any other optimizer's. ``param_groups`` are the two optimizers' own groups, so a
    schedule that sets ``lr`` sets it for both."""

    def __init__(self, runs: list[tuple[bool, list[nn.Parameter]]], dense: Callable, sparse: Callable):
        self._kinds = [is_sparse for is_sparse, _ in runs]
        # "sparse" marks a table's group for code that sets keys on every group (optim.restore)
        groups = [{"params": params, "sparse": is_sparse} for is_sparse, params in runs]
        self.dense = dense([g for g, s in zip(groups, self._kinds, strict=True) if not s])
        self.sparse = sparse([g for g, s in zip(groups, self._kinds, strict=True) if s])
        super().__init__(groups, {})  # the same group dicts, in the model's order
        self._share()

    def _share(self) -> None:
        """Hand both optimizers their groups (after a load: the loaded ones) and the shared state."""
        for kind, inner in ((False, self.dense), (True, self.sparse)):
            own = [g for g, s in zip(self.param_groups, self._kinds, strict=True) if s == kind]
            inner.__setstate__({"state": self.state, "param_groups": own})

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            raise ValueError("SplitOptimizer.step takes no closure")
        self.dense.step()
        self.sparse.step()

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._share()


def sparse_optimizer(groups: list[dict], cfg: TrainConfig) -> torch.optim.Optimizer:
    """The tables' optimizer: SGD (with ``train.momentum``) for ``train.optimizer=sgd``, else
    lazy Adam (:class:`RowAdam`; also for adamw, whose decoupled weight decay has no sparse form)."""
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)
    return RowAdam(groups, lr=cfg.lr)


class RowAdam(torch.optim.SparseAdam):
    """SparseAdam (lazy Adam: only the rows a gradient names move, their moments too), each
    row's moments and weights updated in one compiled pass, rows in parallel."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._slots: dict[int, np.ndarray] = {}  # per table: row -> slot map of _unique_rows, all -1

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None or not all(self.fusable(g, p) for g in self.param_groups for p in g["params"]):
            return super().step(closure)
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    self._update(group, param)
        return None

    @staticmethod
    def fusable(group: dict, param: torch.Tensor) -> bool:
        """Whether ``param``'s step runs compiled (else it falls back to SparseAdam's)."""
        return (
            _adam_rows is not None
            and not group.get("maximize", False)
            and param.device.type == "cpu"
            and param.dtype == torch.float32
            and param.dim() == 2
            and param.is_contiguous()
        )

    def _update(self, group: dict, param: torch.Tensor) -> None:
        if not param.grad.is_sparse:
            raise RuntimeError("SparseAdam does not support dense gradients, please consider Adam instead")
        ids, values = self._unique_rows(param, param.grad)  # the update is not linear: each row once
        state = self.state[param]
        if not state:  # as SparseAdam keeps it, so either one loads the other's checkpoints
            state.update(step=0, exp_avg=torch.zeros_like(param), exp_avg_sq=torch.zeros_like(param))
        state["step"] += 1  # also for an empty gradient, as SparseAdam counts it
        if not values.numel():
            return
        beta1, beta2 = group["betas"]
        step = state["step"]
        step_size = float(group["lr"]) * math.sqrt(1 - beta2**step) / (1 - beta1**step)
        arrays = (param.detach(), state["exp_avg"], state["exp_avg_sq"], values)
        scalars = (np.float32(1 - beta1), np.float32(1 - beta2), np.float32(-step_size), np.float32(group["eps"]))
        with signals_deferred(), parallel_launch():
            threads()  # numba's pool at the rank's share of the cores, as torch's
            _adam_rows(*(t.numpy() for t in arrays), ids.numpy(), *scalars)

    def _unique_rows(self, param: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``grad``'s row ids and rows with each row once, in no particular order: a coalesced
        gradient as it is; else repeated rows summed in one pass over a row -> slot map (kept per
        table, 4 bytes a row), where ``coalesce`` would sort them."""
        ids, values = grad._indices()[0], grad._values().float()
        if grad.is_coalesced() or getattr(grad, UNIQUE_ROWS, False) or not ids.numel():
            return ids, values.contiguous()
        slots = self._slots.get(id(param))
        if slots is None or slots.shape[0] != param.shape[0]:
            slots = self._slots[id(param)] = np.full(param.shape[0], -1, dtype=np.int32)
        out_ids = np.empty(ids.numel(), dtype=np.int64)
        out_values = np.empty((ids.numel(), param.shape[1]), dtype=np.float32)
        with signals_deferred():
            box = (ids.numpy()[None], values.contiguous().numpy()[None], np.array([ids.numel()]))
            count = _sum_rows(*box, 0, 1, slots, out_ids, out_values)
        return torch.from_numpy(out_ids[:count]), torch.from_numpy(out_values[:count])


UNIQUE_ROWS = "_gnnbridge_unique_rows"


def mark_unique_rows(grad: torch.Tensor) -> torch.Tensor:
    """Mark a sparse gradient whose rows are each named once though it is not coalesced (not
    sorted): :class:`RowAdam` then takes it as it is (``shared_tables`` builds such rows)."""
    setattr(grad, UNIQUE_ROWS, True)
    return grad


def runs_of_kind(model: nn.Module) -> list[tuple[bool, list[nn.Parameter]]]:
    """``model``'s parameters in order, cut where they switch between dense and sparse."""
    sparse = {id(p) for p in sparse_tables(model).values()}
    runs: list[tuple[bool, list[nn.Parameter]]] = []
    for param in model.parameters():
        kind = id(param) in sparse
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(param)
        else:
            runs.append((kind, [param]))
    return runs


_adam_rows = _sum_rows = None
if numba is not None:
    from numba import njit, prange

    @njit(cache=True, nogil=True, parallel=True)
    def _adam_rows(weight, exp_avg, exp_avg_sq, values, ids, keep1, keep2, minus_step, eps):
        """SparseAdam's arithmetic, in its order and in float32, for each row ``ids[r]`` with
        gradient ``values[r]`` (``ids`` unique: rows update in parallel)."""
        for r in prange(ids.shape[0]):
            row = ids[r]
            for c in range(weight.shape[1]):
                g = values[r, c]
                m = exp_avg[row, c] + (g - exp_avg[row, c]) * keep1
                v = exp_avg_sq[row, c] + (g * g - exp_avg_sq[row, c]) * keep2
                exp_avg[row, c] = m
                exp_avg_sq[row, c] = v
                weight[row, c] += minus_step * (m / (np.sqrt(v) + eps))

    @njit(cache=True, nogil=True)
    def _sum_rows(box_ids, box_values, sizes, me, ranks, slot_of, out_ids, out_values):
        """Each row id ``r`` with ``r % ranks == me`` in the first ``sizes[k]`` entries of each
        ``box_ids[k]``, once in ``out_ids`` (first seen, box by box), with the sum over its copies
        of ``box_values[k, i] / ranks`` (each rounded to float32 before the sum, as a replicated
        gradient divided in place would be); returns how many. ``slot_of`` (-1 everywhere) is left
        as it was. One box, ``ranks=1``: repeated rows summed; one box per rank: the rows a rank
        owns of the ranks' mean (``shared_tables``)."""
        count = 0
        for k in range(box_ids.shape[0]):
            for i in range(sizes[k]):
                row = box_ids[k, i]
                if row % ranks != me:
                    continue
                slot = slot_of[row]
                if slot < 0:
                    slot = count
                    slot_of[row] = slot
                    out_ids[slot] = row
                    count += 1
                    for c in range(box_values.shape[2]):
                        out_values[slot, c] = np.float32(box_values[k, i, c] / ranks)
                else:
                    for c in range(box_values.shape[2]):
                        out_values[slot, c] += np.float32(box_values[k, i, c] / ranks)
        for slot in range(count):
            slot_of[out_ids[slot]] = -1
        return count
