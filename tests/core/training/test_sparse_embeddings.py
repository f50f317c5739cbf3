"""Sparse embedding tables (``model.embeddings=sparse``, core/training/sparse.py): a step moves
only the rows its batch looked up, by the same rule as Adam where Adam would move them; the
split optimizer saves, reloads, schedules and restores like one torch optimizer; and a wrong
value is refused in one line."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from gnnbridge.core.config import TrainConfig, from_dict
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.training import optim, sparse


class Tower(nn.Module):
    """A dense layer, a table, another table and a dense head: the kinds alternate."""

    def __init__(self, sparse_tables: bool = True):
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(3, 4)
        self.users = nn.Embedding(50, 4, sparse=sparse_tables)
        self.items = nn.Embedding(30, 4, sparse=sparse_tables)
        self.head = nn.Linear(4, 1)

    def forward(self, x, users, items):
        return self.head(self.proj(x) + self.users(users) * self.items(items)).sum()


def batch(step: int):
    g = torch.Generator().manual_seed(step)
    users, items = torch.randint(0, 50, (8,), generator=g), torch.randint(0, 30, (8,), generator=g)
    return torch.randn(8, 3, generator=g), users, items


def train(model, opt, steps, schedule=None):
    for step in steps:
        opt.zero_grad(set_to_none=True)
        model(*batch(step)).backward()
        opt.step()
        if schedule is not None:
            schedule.step()


def test_a_dense_model_keeps_its_plain_torch_optimizer():
    assert type(optim.for_model(Tower(sparse_tables=False), TrainConfig())) is torch.optim.Adam


def test_a_step_moves_only_looked_up_rows_and_those_as_adams_first_step_does():
    model, dense = Tower(), Tower(sparse_tables=False)
    opt, dense_opt = optim.for_model(model, TrainConfig(lr=0.1)), optim.for_model(dense, TrainConfig(lr=0.1))
    before = copy.deepcopy(model.state_dict())
    train(model, opt, [0])
    train(dense, dense_opt, [0])
    _, users, items = batch(0)
    for name, seen in (("users.weight", users), ("items.weight", items)):
        moved = (model.state_dict()[name] != before[name]).any(1)
        assert moved.nonzero().flatten().tolist() == sorted(set(seen.tolist())), name
    # Adam's first step moves no unseen row either, and a seen one by lr (0.1) times the sign of its
    # gradient; SparseAdam adds eps before the bias correction, Adam after it, which differ by ~1e-5.
    for name, value in dense.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], value, rtol=0, atol=1e-4, msg=name)


def test_the_state_dict_numbers_parameters_in_model_order_and_reloads_to_the_same_steps():
    cfg = TrainConfig(lr=0.05)
    model = Tower()
    opt = optim.for_model(model, cfg)
    assert [g["params"] for g in opt.state_dict()["param_groups"]] == [[0, 1], [2, 3], [4, 5]]
    assert [g["sparse"] for g in opt.param_groups] == [False, True, False]
    train(model, opt, range(3))
    saved_model, saved_opt = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())
    assert set(saved_opt["state"]) == set(range(6))
    train(model, opt, range(3, 6))  # the uninterrupted run

    again = Tower()
    again.load_state_dict(saved_model)
    reloaded = optim.for_model(again, cfg)
    reloaded.load_state_dict(saved_opt)
    train(again, reloaded, range(3, 6))
    for name, value in model.state_dict().items():
        assert torch.equal(again.state_dict()[name], value), name


@pytest.mark.parametrize("name", ["adam", "adamw", "sgd"])
def test_a_schedule_and_a_restore_reach_both_optimizers_and_leave_tables_without_weight_decay(name):
    cfg = TrainConfig(
        optimizer=name, lr=0.1, epochs=4, schedule="step", step_size=1, gamma=0.5, weight_decay=0.01,
        momentum=0.9 if name == "sgd" else 0.0,
    )  # fmt: skip
    model = Tower()
    opt = optim.for_model(model, cfg)
    schedule = optim.build_schedule(opt, cfg)
    train(model, opt, range(2), schedule)
    assert {g["lr"] for g in opt.param_groups} == {0.025}
    state = {"optimizer": copy.deepcopy(opt.state_dict()), "scheduler": schedule.state_dict(), "epoch": 1}
    restored = optim.for_model(model, cfg)
    optim.restore(restored, cfg, state, {})
    assert [g.get("weight_decay", 0) for g in restored.param_groups] == [0.01, 0, 0.01]
    assert {g["lr"] for g in restored.param_groups} == {0.025}
    train(model, restored, range(2, 4))  # steps: a sparse gradient never meets a weight decay
    assert torch.isfinite(model.users.weight).all()


def test_tables_are_only_those_with_sparse_gradients():
    assert list(sparse.sparse_tables(Tower())) == ["users.weight", "items.weight"]
    assert sparse.sparse_tables(Tower(sparse_tables=False)) == {}


def test_a_wrong_value_is_refused_naming_the_choices():
    with pytest.raises(ConfigError, match=r"model.embeddings='spares'.*did you mean 'sparse'.*dense, sparse"):
        from_dict({"model": {"embeddings": "spares"}})


def _steps(opt, param, draws):
    """Sparse gradients with repeated rows (as autograd leaves them) and an empty one."""
    for ids, values in draws:
        param.grad = torch.sparse_coo_tensor(ids[None], values, param.shape)
        opt.step()


def _draws(rows=500, width=16, steps=6):
    gen = torch.Generator().manual_seed(3)
    draws = [
        (torch.randint(0, rows, (400,), generator=gen), torch.randn(400, width, generator=gen)) for _ in range(steps)
    ]
    draws.insert(2, (torch.empty(0, dtype=torch.int64), torch.empty(0, width)))
    return draws


def test_the_compiled_row_adam_takes_sparse_adams_steps_and_loads_its_checkpoints():
    start = torch.randn(500, 16, generator=torch.Generator().manual_seed(0))
    ours, torchs = nn.Parameter(start.clone()), nn.Parameter(start.clone())
    row_adam, sparse_adam = sparse.RowAdam([ours], lr=0.05), torch.optim.SparseAdam([torchs], lr=0.05)
    draws = _draws()
    _steps(row_adam, ours, draws[:4])
    _steps(sparse_adam, torchs, draws[:4])
    assert not torch.equal(ours, start)
    torch.testing.assert_close(ours, torchs, rtol=1e-6, atol=1e-6)  # the same float32 arithmetic, to the last bit or so
    for key in ("exp_avg", "exp_avg_sq"):
        torch.testing.assert_close(row_adam.state[ours][key], sparse_adam.state[torchs][key], rtol=1e-6, atol=1e-7)
    assert row_adam.state[ours]["step"] == sparse_adam.state[torchs]["step"] == 4  # an empty gradient counts
    # a checkpoint of either continues in the other
    swapped = torch.optim.SparseAdam([ours], lr=0.05)
    swapped.load_state_dict(row_adam.state_dict())
    again = sparse.RowAdam([torchs], lr=0.05)
    again.load_state_dict(sparse_adam.state_dict())
    _steps(swapped, ours, draws[4:])
    _steps(again, torchs, draws[4:])
    torch.testing.assert_close(ours, torchs, rtol=1e-5, atol=1e-6)


def test_row_adam_leaves_what_it_cannot_compile_to_sparse_adam():
    start = torch.randn(50, 4, generator=torch.Generator().manual_seed(1))
    ours, torchs = nn.Parameter(start.clone()), nn.Parameter(start.clone())
    draws = _draws(rows=50, width=4, steps=3)
    _steps(sparse.RowAdam([ours], lr=0.05, maximize=True), ours, draws)
    _steps(torch.optim.SparseAdam([torchs], lr=0.05, maximize=True), torchs, draws)
    assert torch.equal(ours, torchs)
    with pytest.raises(RuntimeError, match="dense gradients"):
        ours.grad = torch.ones_like(ours)
        sparse.RowAdam([ours], lr=0.05).step()
