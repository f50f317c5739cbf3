"""The dry step: a plugin model's contract checked on one small batch before the first epoch.

What a model can get wrong about its outputs (shape, dtype, device, NaN) would otherwise show
mid-run as a raw error from the loss, a divergence blamed on the learning rate, or, for
``layer_forward``, a shape error in the final layer-wise evaluation after every epoch trained.
Here it is one line naming the model and the method, before any work is spent.

The step changes nothing a run computes: eval mode (no dropout draw, no BatchNorm update) under
``no_grad``, the model's own module rather than DDP's wrapper (no collective, no buffer
broadcast), no optimizer step, and every global generator is reseeded when the first epoch
starts. The backward pass is left out: a model's dtype and device faults show in its outputs,
and a backward that fails is already named by the training step (``backward pass``).
Every rank runs it and then shares its verdict, so a rank whose model failed ends the job with
its one line and no healthy rank waits in a collective for it.
"""

from __future__ import annotations

import torch

from gnnbridge.core.config import EvalMode
from gnnbridge.core.errors import GnnBridgeError
from gnnbridge.core.inference.evaluation import layer_batch, layer_batch_of, step_outputs
from gnnbridge.core.inference.placement import autocast
from gnnbridge.core.plugins import PluginError
from gnnbridge.core.records.batches import with_edge_features
from gnnbridge.core.records.hetero import HeteroGraphData
from gnnbridge.core.runtime.rank import failed_on
from gnnbridge.core.sampling.distributed import PartitionSampler, exchange_for
from gnnbridge.core.sampling.neighbors import NeighborSampler

SEEDS = 8  # items of the dry batch: enough for real shapes, cheap on any graph
FANOUT = 5  # neighbours per node of the one-hop graph layer_forward is tried on


def dry_step(parts) -> None:
    """Check the model on this rank, then agree with every other rank (see the module docstring)."""
    error: GnnBridgeError | None = None
    try:
        with parts.call.watched("its dry step before epoch 1 (one small batch)"):
            _check(parts)
    except GnnBridgeError as exc:  # a plugin's fault, already one line naming it
        error = exc
    lines = parts.ctx.gather_objects(None if error is None else str(error))
    if error is not None:
        raise error
    failed = [(rank, line) for rank, line in enumerate(lines) if line]
    if failed:
        raise failed_on(*failed[0])


def _check(parts) -> None:
    model, ctx = parts.model, parts.ctx
    seeds = parts.data.split("train")[:SEEDS]
    part = parts.data.partition
    if part is not None and not seeds.numel() and not getattr(parts.data, "scores_pairs", False):
        # every rank of a partitioned graph joins the batch's exchanges, one without training
        # seeds too: it tries its machine's first nodes (of a heterogeneous graph's labelled
        # type there may be none, as there may be no train edge of a link task: the batch is then
        # empty, its exchanges still run)
        seeds = torch.arange(min(SEEDS, part.sizes[part.part]))
    if not seeds.numel() and part is None:
        return
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), autocast(parts.config.placement.precision, ctx.device):
            parts.sampler.reseed(parts.config.train.seed, -1, ctx.rank)  # as validation does
            for mb in parts.sampler.loader([seeds]):
                logits, _ = step_outputs(parts, model, mb)  # shape, dtype and device, by parts.call
                parts.call.finite(logits, "forward")
            if parts.final_mode() is EvalMode.LAYERWISE:  # the layers will be called one by one: try them now
                if isinstance(parts.data, HeteroGraphData):
                    if part is None:  # (a part's typed pass is tried by its evaluation: it needs every node's inputs)
                        check_typed_layers(parts, model)
                else:
                    check_layers(parts.call, parts.backend, model, parts.data, seeds, ctx.device, ctx)
    finally:
        model.train(was_training)


def check_layers(call, backend, model, data, seeds: torch.Tensor, device: torch.device, ctx=None) -> None:
    """One ``layer_forward`` per layer on a one-hop graph of ``seeds``, as layer-wise evaluation
    calls it, each output checked by ``call`` (also the conformance suite's check). A later
    layer's input is the previous layer's real output repeated to the graph's input-node count:
    the right width, dtype and device, without an L-hop neighbourhood. On a machine's part of a
    partitioned graph (every rank of the job at once: ``ctx``'s), across machines."""
    generator = torch.Generator().manual_seed(0)
    if data.partition is not None:
        one_hop = PartitionSampler.of(data, [FANOUT], exchange_for(ctx))
        sub = one_hop.sample(seeds + one_hop.start, generator)
        graph, rows = layer_batch_of(backend, sub, one_hop.fetch(sub.node), device)
    else:
        sub = with_edge_features(NeighborSampler(data.indptr, data.indices, [FANOUT]).sample(seeds, generator), data)
        graph, rows = layer_batch(backend, model, data.x, sub, device)
    for layer in range(model.num_layers):
        out = call.layer(model, layer, graph, rows, seeds.numel(), last=layer == model.num_layers - 1)
        call.finite(out, f"layer_forward({layer})")
        rows = out[torch.arange(sub.node.numel(), device=out.device) % out.shape[0]]


def check_typed_layers(parts, model) -> None:
    """Each ``layer(i, graph, rows, block=0)`` of a typed layer-wise model on a one-hop graph of
    a few nodes of every type some relation reaches, as the typed pass calls it: each must give
    one finite row per node of that type. A later layer's inputs repeat the previous layer's
    outputs to the graph's node counts (the right width, dtype and device)."""
    from gnnbridge.core.inference.typed_layerwise import TypedLayerwise, unwrap

    model = unwrap(model)
    typed = TypedLayerwise(parts.backend, parts.data, parts.ctx, SEEDS, "memory", parts.call)
    for node_type in typed.reached:
        ids = torch.arange(min(SEEDS, parts.data.num_nodes[node_type]))
        sub = typed.one_hop.sample({node_type: ids})
        graph = parts.backend.graph_to(parts.backend.from_hetero_sampled(sub), parts.ctx.device)
        rows = {t: typed.inputs(model, t, nodes) for t, nodes in sub.node.items()}
        for layer in range(model.spec.layers):
            with parts.call.blame(f"layer({layer}) of the typed layer-wise pass"):
                out = model.layer(layer, graph, rows, block=0)
            got = out.get(node_type) if isinstance(out, dict) else None
            if not isinstance(got, torch.Tensor) or got.dim() != 2 or got.shape[0] != ids.numel():
                shape = list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
                raise PluginError(
                    f"{parts.call.origin}: layer({layer}) gave {shape} for the {ids.numel()} '{node_type}' nodes "
                    "of a one-hop graph; the typed layer-wise pass needs a dict with one row per destination node."
                )
            parts.call.finite(got, f"layer({layer})")
            rows = {t: got[torch.arange(n.numel()) % got.shape[0]] for t, n in sub.node.items()}
