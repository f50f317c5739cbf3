"""A model's weights in the neutral layout, and back: what ``port`` and ``compare --same-batches``
move between libraries.

A model that can be moved names each of its parameters with ``neutral_parameters()``
(``{neutral name: parameter}``, the same names and shapes on every backend; see
:class:`~gnnbridge.core.contracts.interfaces.GNNModel`). Its buffers, if any, must live in
core-owned modules, where their names are already the same everywhere. A model that covers
only part of its state would be moved half-way, so it is refused whole, in one line.

The optimizer's per-parameter state moves with the weights (Adam's and AdamW's moments, SGD's
momentum buffers: whatever torch keeps per parameter): an optimizer's state is keyed by the
position of each parameter in ``model.parameters()``, which differs between libraries; the
neutral name of the parameter at each position turns one order into the other, so a ported run
resumes exactly. A learning-rate schedule's state names no parameter and moves unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gnnbridge.core.errors import CheckpointError


class NotPortable(CheckpointError):
    """The model's state has no complete neutral naming (a one-backend plugin model, PyG's zoo)."""


def native_to_neutral(model: nn.Module, origin: str) -> dict[str, str]:
    """``{state_dict key: neutral name}`` for every entry of ``model.state_dict()``."""
    named = getattr(model, "neutral_parameters", None)
    if not callable(named):
        raise NotPortable(
            f"{origin} has no neutral parameter names (neutral_parameters()), so its weights cannot "
            "be moved to another library; only models built on both (sage, gcn, gat, gin) can."
        )
    by_id = {id(p): name for name, p in named().items()}
    keys = {}
    for key, param in model.named_parameters():
        if id(param) not in by_id:
            raise NotPortable(
                f"{origin}: parameter '{key}' has no neutral name, so its weights cannot be moved to another library."
            )
        keys[key] = by_id.pop(id(param))
    for key, _ in model.named_buffers():
        keys[key] = key  # core-owned modules: the same name on every backend (checked on arrival)
    return {key: keys[key] for key in model.state_dict() if key in keys}


def to_neutral(model: nn.Module, state: dict[str, torch.Tensor], origin: str) -> dict[str, torch.Tensor]:
    """A state dict of ``model``'s library in the neutral layout."""
    names = native_to_neutral(model, origin)
    missing = sorted(set(state) - set(names))
    if missing:
        raise NotPortable(
            f"{origin}: the checkpoint holds '{missing[0]}', which the model does not name; it cannot be "
            "moved to another library."
        )
    return {names[key]: value for key, value in state.items()}


def from_neutral(model: nn.Module, neutral: dict[str, torch.Tensor], origin: str) -> dict[str, torch.Tensor]:
    """``neutral`` as a state dict of ``model``'s library, checked name by name and shape by shape."""
    names = native_to_neutral(model, origin)
    expected = model.state_dict()
    wanted, offered = set(names.values()), set(neutral)
    if wanted != offered:
        odd = sorted(wanted ^ offered)[0]
        side = "the other library's model lacks" if odd in wanted else "this library's model lacks"
        raise NotPortable(
            f"{origin}: '{odd}' does not exist on both libraries ({side} it); the weights cannot be moved."
        )
    out = {}
    for key, name in names.items():
        value = neutral[name]
        if tuple(value.shape) != tuple(expected[key].shape):
            raise NotPortable(
                f"{origin}: '{name}' has shape {list(value.shape)} on one library and "
                f"{list(expected[key].shape)} on the other; the weights cannot be moved."
            )
        out[key] = value.detach().clone().to(expected[key].dtype)
    return out


def port_optimizer(state: dict[str, Any], source: nn.Module, target: nn.Module, origin: str) -> dict[str, Any]:
    """An optimizer state of ``source``'s parameters re-keyed for ``target``'s parameter order."""
    src_names = native_to_neutral(source, origin)
    dst_names = native_to_neutral(target, origin)
    src_order = [src_names[key] for key, _ in source.named_parameters()]
    dst_index = {dst_names[key]: i for i, (key, _) in enumerate(target.named_parameters())}
    moved = {dst_index[src_order[int(i)]]: value for i, value in state.get("state", {}).items()}
    groups = []
    for group in state.get("param_groups", []):
        groups.append({**group, "params": sorted(dst_index[src_order[int(i)]] for i in group["params"])})
    return {**state, "state": moved, "param_groups": groups}
