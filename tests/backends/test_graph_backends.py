"""Graph classification on each backend: loaders, and the same GIN on both libraries."""
import pytest
import torch

from gnnbridge.core.collection import pack
from gnnbridge.core.config import ModelSpec, SamplerKind
from gnnbridge.core.plugins import get_backend
from gnnbridge.plugins.datasets import family_graphs

BACKENDS = ("pyg", "dgl")


@pytest.fixture(scope="module")
def data():
    collection = family_graphs(60, 6, 14, seed=0)
    collection.x = torch.randn(collection.num_nodes, 5, generator=torch.Generator().manual_seed(0))
    return collection


def gin(backend, data, pooling="sum", seed=0):
    torch.manual_seed(seed)
    spec = ModelSpec(arch="gin", hidden=16, layers=3, pooling=pooling, dropout=0.0)
    return backend.model(spec, data.num_features, data.num_classes)


@pytest.mark.parametrize("name", BACKENDS)
def test_library_loader_yields_the_requested_graphs_in_order(name, data):
    backend = get_backend(name)
    loader = backend.collection_sampler(backend.collection_store(data), SamplerKind.NATIVE)
    batches = [torch.tensor([5, 2, 40]), torch.tensor([], dtype=torch.int64), torch.tensor([7])]
    out = list(loader.loader(batches))
    assert len(out) == 3  # the empty batch too: DDP needs the step
    for mb, ids in zip(out, batches):
        assert torch.equal(mb.seeds, ids)
        assert torch.equal(mb.input_nodes, pack(data, ids).node)


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("pooling", ["sum", "mean"])
def test_library_loader_and_core_packer_give_the_same_logits(name, pooling, data):
    backend = get_backend(name)
    store = backend.collection_store(data)
    model = gin(backend, data, pooling).eval()
    ids = [data.test_idx]
    outputs = []
    for kind in (SamplerKind.NATIVE, SamplerKind.CORE):
        (mb,) = backend.collection_sampler(store, kind).loader(ids)
        with torch.no_grad():
            outputs.append(model(mb.graph, data.x[mb.input_nodes]))
    assert outputs[0].shape == (data.test_idx.numel(), data.num_classes)
    torch.testing.assert_close(outputs[0], outputs[1])


@pytest.mark.parametrize("pooling", ["sum", "mean"])
def test_pyg_weights_loaded_into_dgl_give_the_same_logits(pooling, data):
    """One neutral GIN: identical parameter names and shapes, and the same function of them."""
    pyg, dgl = get_backend("pyg"), get_backend("dgl")
    a, b = gin(pyg, data, pooling, seed=0), gin(dgl, data, pooling, seed=1)
    shapes = {k: v.shape for k, v in a.neutral_parameters().items()}
    assert shapes == {k: v.shape for k, v in b.neutral_parameters().items()}
    assert shapes["mlps.0.0.weight"] == (16, 5) and shapes["heads.3.weight"] == (data.num_classes, 16)
    train = pack(data, data.train_idx)  # one step's worth of BatchNorm statistics, in a only
    a(pyg.from_packed(train), data.x[train.node])
    b.load_state_dict(a.state_dict())
    packed = pack(data, data.val_idx)
    x = data.x[packed.node]
    with torch.no_grad():
        torch.testing.assert_close(a.eval()(pyg.from_packed(packed), x), b.eval()(dgl.from_packed(packed), x))


@pytest.mark.parametrize("name", BACKENDS)
def test_empty_batch_gives_no_rows_and_a_gradient(name, data):
    backend = get_backend(name)
    model = gin(backend, data).train()
    packed = pack(data, torch.tensor([], dtype=torch.int64))
    logits = model(backend.from_packed(packed), data.x[packed.node])
    assert logits.shape == (0, data.num_classes)
    torch.nn.functional.cross_entropy(logits, torch.zeros(0, dtype=torch.int64), reduction="sum").backward()
    assert all(p.grad is not None for p in model.parameters())
