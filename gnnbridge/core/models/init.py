"""One initialisation for the built-in models, whatever the library: the same ``train.seed``
gives the same starting weights on every backend.

Each library initialises its own layers its own way. DGL's ``SAGEConv`` draws Xavier-uniform
with ReLU's gain (standard deviation 0.067 for a 768 -> 128 layer), PyG's Kaiming-uniform as
torch's ``nn.Linear`` does (0.023); DGL's ``GATConv`` Xavier-normal with ReLU's gain, PyG's
Glorot-uniform. Left to them, one experiment started three times larger on DGL (a first-batch
loss of 7.7 against 2.85 on 16 classes) and its first epochs were another run's. So the weights
of a built-in model are drawn here, once, and the library's own draws are overwritten.

**How.** Every parameter is drawn under its neutral name (the name ``port`` moves it by,
:mod:`~gnnbridge.core.models.neutral`), from a generator of its own seeded by ``(train.seed,
neutral name)``, by a rule the model names (:data:`Rule`). The neutral layout of a parameter is
its layout in every library (``port``'s mapping is a renaming, and ``from_neutral`` checks the
shapes), so drawing a parameter under its neutral name, in place, *is* the neutral draw laid
out for the library, without a second copy of the model (an embedding table may be gigabytes).
One generator per name, not one for the model, so that:

* no global generator is read or advanced: the streams the training loop draws from after the
  model is built (dropout, a library's sampler; all reseeded per epoch anyway) are what they
  were, and so are resumed runs;
* the draws do not depend on the order a library lists its parameters in;
* a parameter only one library has would be drawn the same wherever it exists, and would move no
  other parameter's draw. None of the built-in models has one today (``port`` refuses a model
  with such a parameter). A parameter without a neutral name, or without a rule, is left as the
  model drew it (from torch's generator seeded with ``train.seed``): none of the built-in
  models' (a test checks), where a plugin's subclass of one may add some.

**Which rules.** A model names a rule for each parameter of a library's layer
(``init_rules()``); a parameter of a core-owned torch module (same name on every backend) that
it does not name is drawn as torch initialises that module (``nn.Linear``: Kaiming-uniform,
``U(±1/sqrt(fan_in))`` for the weight and the bias; ``nn.Embedding``: ``N(0, 1)``;
``BatchNorm1d`` / ``LayerNorm``: ones and zeros), so core-held parts keep the scale they had.
The built-in layers follow PyG's defaults, which are the papers' reference implementations and
torch's own: GraphSAGE's matrices Kaiming-uniform (torch's ``nn.Linear``, like every core-held
projection and head, so one model's layers start at one scale), GCN's and GAT's Glorot-uniform
(Kipf & Welling's and Veličković et al.'s code), R-GCN's and HGT's relation matrices Glorot over
their last two dimensions; library-layer biases start at zero (GCN, GAT and DGL's layers do
already). Not Xavier with ReLU's gain: it assumes unit-variance inputs to a ReLU stack, but a
GNN's first layer reads raw features and its last emits logits, which started three times
larger than PyG's and learnt slower (0.36 test accuracy after a first epoch where PyG's start
reached 0.66: "What remains between the libraries" in ``docs/compare-and-port.md``).

A model without ``init_rules()`` (or whose ``init_rules()`` returns None: a plugin's model,
PyG's zoo) keeps its own initialisation, drawn from the global generator seeded with
``train.seed`` as before.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable

import torch
from torch import nn

# Fills a tensor in place from the generator it is given (a CPU generator, a CPU tensor).
Rule = Callable[[torch.Tensor, torch.Generator], None]


def uniform(bound: float) -> Rule:
    """``U(-bound, bound)``."""

    def rule(t: torch.Tensor, gen: torch.Generator) -> None:
        t.uniform_(-bound, bound, generator=gen)

    return rule


def kaiming_uniform(t: torch.Tensor, gen: torch.Generator) -> None:
    """``U(±1/sqrt(fan_in))`` for a matrix stored ``[out, in]``: torch's ``nn.Linear`` weight
    (``kaiming_uniform_(a=sqrt(5))``), and PyG's ``SAGEConv``."""
    uniform(1.0 / math.sqrt(t.shape[-1]))(t, gen)


def glorot(t: torch.Tensor, gen: torch.Generator) -> None:
    """``U(±sqrt(6 / (a + b)))`` over the last two dimensions ``a, b`` (PyG's ``glorot``; for a
    stack of matrices, per matrix: R-GCN's per relation, HGT's per head, GAT's per head)."""
    uniform(math.sqrt(6.0 / (t.shape[-2] + t.shape[-1])))(t, gen)


def normal(t: torch.Tensor, gen: torch.Generator) -> None:
    """``N(0, 1)``: torch's ``nn.Embedding``."""
    t.normal_(0.0, 1.0, generator=gen)


def zeros(t: torch.Tensor, gen: torch.Generator) -> None:
    t.zero_()


def ones(t: torch.Tensor, gen: torch.Generator) -> None:
    t.fill_(1.0)


def module_rule(module: nn.Module, attr: str) -> Rule | None:
    """How torch initialises parameter ``attr`` of ``module``, for the modules core builds with."""
    if isinstance(module, nn.Linear):
        return kaiming_uniform if attr == "weight" else uniform(1.0 / math.sqrt(module.in_features))
    if isinstance(module, nn.Embedding):
        return normal
    if isinstance(module, (nn.BatchNorm1d, nn.LayerNorm)):
        return ones if attr == "weight" else zeros
    return None


def generator(seed: int, name: str) -> torch.Generator:
    """The generator of parameter ``name``: the same for ``(seed, name)`` in any process."""
    digest = hashlib.blake2b(f"{int(seed)}/{name}".encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)


def initial_rules(model: nn.Module) -> dict[str, tuple[str | None, Rule | None]] | None:
    """``{state_dict key: (neutral name, rule)}`` for every parameter of ``model`` (a None rule: no
    neutral name, or no rule for it), or None when the model keeps its own initialisation (it
    names no rules, or no neutral names)."""
    named, neutral = getattr(model, "init_rules", None), getattr(model, "neutral_parameters", None)
    rules = named() if callable(named) and callable(neutral) else None
    if rules is None:
        return None
    # port's names (neutral.native_to_neutral reads the same): by the parameter itself, not its key
    names = {id(p): name for name, p in neutral().items()}
    owners = {id(p): (m, attr) for m in model.modules() for attr, p in m.named_parameters(recurse=False)}
    out: dict[str, tuple[str | None, Rule | None]] = {}
    for key, param in model.named_parameters():
        name = names.get(id(param))
        rule = rules.get(name) if name is not None else None
        if rule is None and key == name:  # a core-owned module: named alike on every backend
            rule = module_rule(*owners[id(param)])
        out[key] = (name, rule)
    return out


def initialise(model: nn.Module, seed: int) -> list[str] | None:
    """Draw every parameter of ``model`` by its rule from ``(seed, its neutral name)``, in place
    (see the module docstring). Returns the parameters left as the model drew them (without a
    neutral name or a rule: none of the built-in models', which a test checks; a plugin's
    subclass of one may add some), or None, changing nothing, for a model that names no rules."""
    rules = initial_rules(model)
    if rules is None:
        return None
    params = dict(model.named_parameters())
    left = []
    with torch.no_grad():
        for key, (name, rule) in rules.items():
            param = params[key]
            if rule is None:
                left.append(key)
            elif param.device.type == "cpu" and param.dtype == torch.float32:
                rule(param, generator(seed, name))
            else:  # drawn on the CPU in float32 like any other, then copied: the same numbers anywhere
                value = torch.empty(param.shape, dtype=torch.float32)
                rule(value, generator(seed, name))
                param.copy_(value)
    return left
