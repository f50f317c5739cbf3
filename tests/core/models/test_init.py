"""Core's one initialisation (:mod:`gnnbridge.core.models.init`): each parameter drawn from
``(seed, neutral name)`` alone, by the model's rule or its torch module's, in place; no global
generator drawn; a model that names no rules keeps its own weights."""

from __future__ import annotations

import math

import torch
from torch import nn

from gnnbridge.core.models import init


class Toy(nn.Module):
    """A library-style layer (``lib.w``, renamed ``layer.weight``) beside core-held torch modules."""

    def __init__(self, extra: bool = False, rules: dict | None = None):
        super().__init__()
        self.lib = nn.Module()
        self.lib.w = nn.Parameter(torch.randn(8, 32))  # as a library would draw it
        if extra:  # a parameter only this "library" has
            self.lib.only_here = nn.Parameter(torch.randn(8))
        self.head = nn.Linear(8, 3)
        self.table = nn.Embedding(10, 8)
        self.norm = nn.BatchNorm1d(8)
        self.rules = {"layer.weight": init.kaiming_uniform, "layer.only_here": init.ones} if rules is None else rules

    def neutral_parameters(self):
        out = {name: p for name, p in self.named_parameters() if not name.startswith("lib.")}
        out["layer.weight"] = self.lib.w
        if hasattr(self.lib, "only_here"):
            out["layer.only_here"] = self.lib.only_here
        return out

    def init_rules(self):
        return self.rules


def test_each_parameter_is_drawn_from_the_seed_and_its_name_alone():
    a, b = Toy(), Toy(extra=True)
    before = torch.get_rng_state()
    assert init.initialise(a, 7) == [] and init.initialise(b, 7) == []
    assert torch.equal(torch.get_rng_state(), before)  # the training loop's streams are untouched
    # a parameter only one model has moves no other draw
    for name, value in a.state_dict().items():
        assert torch.equal(value, b.state_dict()[name]), name
    assert torch.equal(b.lib.only_here, torch.ones(8))
    c = Toy()
    init.initialise(c, 8)
    assert not torch.equal(c.lib.w, a.lib.w) and not torch.equal(c.head.weight, a.head.weight)


def test_rules_and_torch_modules_set_the_scale():
    model = Toy()
    init.initialise(model, 0)
    assert float(model.lib.w.abs().max()) <= 1 / math.sqrt(32) and float(model.lib.w.std()) > 0.08  # U(±0.18): std 0.10
    assert float(model.head.bias.abs().max()) <= 1 / math.sqrt(8)
    assert torch.equal(model.norm.weight, torch.ones(8)) and torch.equal(model.norm.bias, torch.zeros(8))
    assert 0.7 < float(model.table.weight.std()) < 1.3
    stack = torch.empty(3, 16, 4)
    init.glorot(stack, init.generator(0, "x"))
    assert float(stack.abs().max()) <= math.sqrt(6 / 20)


def test_a_model_without_rules_keeps_its_weights_and_one_without_a_rule_keeps_that_parameter():
    plain = nn.Linear(4, 2)
    before = plain.weight.clone()
    assert init.initialise(plain, 0) is None
    assert torch.equal(plain.weight, before)
    partial = Toy(rules={})  # a subclass adding a parameter of its own: left as the model drew it
    before = partial.lib.w.clone()
    assert init.initialise(partial, 0) == ["lib.w"]
    assert torch.equal(partial.lib.w, before) and torch.equal(partial.norm.weight, torch.ones(8))
