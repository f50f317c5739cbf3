"""Layer-wise inference with each layer in a memory-mapped temp file (eval.layer_store=disk)."""

from __future__ import annotations

import signal
import tempfile

import pytest
import torch

from gnnbridge.core.config import ModelSpec
from gnnbridge.core.inference.evaluation import LayerwiseEvaluator
from gnnbridge.core.plugins import backends
from gnnbridge.core.runtime.context import DistContext
from gnnbridge.testing.conformance import build, small_graph

ALONE = DistContext(0, 1, 0, torch.device("cpu"))


@pytest.fixture
def tmpdir_here(tmp_path, monkeypatch):
    """$TMPDIR for this test: where the layer files go, and where leftovers would show."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def model_for(name, data, layers=3):
    torch.manual_seed(0)
    return build(backends.get(name), ModelSpec(arch="sage", hidden=8, layers=layers, dropout=0.0), data).eval()


def mapped_layer_files(folder):
    """The layer files under ``folder`` this process has mapped."""
    with open("/proc/self/maps") as f:
        return {line.split(None, 5)[-1].strip() for line in f if f"{folder}/gnnbridge-layers-" in line}


def leftovers(folder):
    return sorted(p.name for p in folder.glob("gnnbridge-layers-*"))


@pytest.mark.parametrize("name", ["pyg", "dgl"])
def test_layers_on_disk_give_the_in_memory_logits_and_leave_no_file(name, tmpdir_here):
    data = small_graph()
    model = model_for(name, data)
    # batch_size=7: many batches per layer, the last one short
    memory = LayerwiseEvaluator(backends.get(name), data, ALONE, 7, layer_store="memory").full_logits(model)
    assert not mapped_layer_files(tmpdir_here)  # a tiny graph: auto and memory keep layers in memory
    disk = LayerwiseEvaluator(backends.get(name), data, ALONE, 7, layer_store="disk").full_logits(model)
    # Float tolerance, not bit equality: a layer read back from its file is gathered row by row,
    # while one in RAM may be read in place by a fused aggregation (another summation order).
    torch.testing.assert_close(disk, memory, rtol=1e-5, atol=1e-5)
    # The logits are read from the last layer's file, already deleted with its folder.
    maps = mapped_layer_files(tmpdir_here)
    assert maps and all(m.endswith("(deleted)") for m in maps), maps
    assert leftovers(tmpdir_here) == []


def test_layers_in_a_ram_folder_are_written_with_one_warning(tmp_path, monkeypatch, capsys):
    """/dev/shm is tmpfs: a TMPDIR there keeps the 'disk' layers in RAM, which rank 0 says."""
    from gnnbridge.core.inference.layerstore import ram_backed

    if not ram_backed("/dev/shm"):
        pytest.skip("no tmpfs at /dev/shm on this machine")
    data = small_graph()
    monkeypatch.setattr(tempfile, "tempdir", "/dev/shm")
    LayerwiseEvaluator(backends.get("pyg"), data, ALONE, 64, layer_store="disk").full_logits(model_for("pyg", data))
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("Warning:")]
    assert len(lines) == 1 and "/dev/shm/gnnbridge-layers-" in lines[0] and "TMPDIR" in lines[0]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    if not ram_backed(tmp_path):
        LayerwiseEvaluator(backends.get("pyg"), data, ALONE, 64, layer_store="disk").full_logits(model_for("pyg", data))
        assert "Warning:" not in capsys.readouterr().err


def ctrl_c():
    """A real SIGINT: a KeyboardInterrupt raised by model code with no signal behind it is the
    model's failure (a PluginError), and which one a raise becomes depends on whether this
    process records signals (the CLI's main does), so the test sends the signal itself."""
    signal.raise_signal(signal.SIGINT)


@pytest.mark.parametrize("stop", [RuntimeError("layer 1 failed"), KeyboardInterrupt()])
def test_a_pass_that_fails_midway_removes_its_layer_files(stop, tmpdir_here):
    data = small_graph()
    model = model_for("pyg", data)
    real, seen = model.layer_forward, []

    def layer_forward(index, graph, x):
        if index == 1:  # layer 0's file is written; layer 1 fails (or the user presses Ctrl-C)
            seen.extend(p.name for p in tmpdir_here.glob("gnnbridge-layers-*/*"))
            if isinstance(stop, KeyboardInterrupt):
                ctrl_c()
            raise stop
        return real(index, graph, x)

    model.layer_forward = layer_forward
    with pytest.raises(type(stop)):
        LayerwiseEvaluator(backends.get("pyg"), data, ALONE, 50, layer_store="disk").full_logits(model)
    assert "layer0.bin" in seen  # the layer really was on disk
    assert leftovers(tmpdir_here) == []


@pytest.mark.parametrize("name", ["pyg", "dgl"])
def test_sampled_predict_with_its_logits_on_disk_gives_the_in_memory_logits(name, tmpdir_here):
    """``predict`` in sampled and full mode writes every item's logits into the store's file
    when they would not fit (forced here), so the output streams from disk like layer-wise's."""
    from gnnbridge.core.config import SamplerKind
    from gnnbridge.core.inference.evaluation import SampledEvaluator
    from gnnbridge.core.sampling.neighbors import ALL_NEIGHBORS

    data = small_graph()
    model, backend = model_for(name, data, layers=2), backends.get(name)
    logits = {}
    for store in ("memory", "disk"):
        sampler = backend.sampler(backend.graph_store(data), [ALL_NEIGHBORS] * 2, SamplerKind.AUTO)
        logits[store] = SampledEvaluator(backend, data, ALONE, 7, sampler, 0, layer_store=store).predict(model)
        assert bool(mapped_layer_files(tmpdir_here)) == (store == "disk")
    assert logits["disk"].shape == (data.num_nodes, data.num_classes)
    torch.testing.assert_close(logits["disk"], logits["memory"])
    expected = LayerwiseEvaluator(backend, data, ALONE, 7, layer_store="memory").full_logits(model)
    torch.testing.assert_close(logits["disk"], expected, rtol=1e-5, atol=1e-5)  # every row is its node's
    assert leftovers(tmpdir_here) == []
