"""``gnnbridge export``: a run trained on PyG or on DGL, written as ONNX, ``torch.export`` and
safetensors, computes ``predict``'s full-neighbourhood logits (within 1e-4) on the run's graph
and on a second graph of another size, in each format's own runtime (onnxruntime,
``torch.export.load``, ``gnnbridge.load`` of the safetensors file); what cannot be exported, and
bad input, is refused in one line with nothing written."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime
import pytest
import torch
from helpers import in_process, ok, one_line

import gnnbridge
from gnnbridge.core.app import inference
from gnnbridge.core.app.export import graph_inputs
from gnnbridge.core.export import describe_file

pytestmark = pytest.mark.slow  # every case trains a run and traces three programs

NODE = ["dataset.options.num_nodes=300", "train.batch_size=64", "train.epochs=2"]
GRAPHS = ["dataset.options.num_graphs=60", "train.batch_size=16", "train.epochs=2"]
CASES = {  # name: (experiment, backend, overrides); every built-in exported architecture, both libraries
    "sage-pyg": ("sage-synthetic", "pyg", NODE),
    "gat-dgl": ("gat-synthetic", "dgl", NODE),
    "gcn-dgl": ("gcn-synthetic", "dgl", NODE),
    "gin-pyg": ("gin-synthetic", "pyg", GRAPHS),
    # heterogeneous: a link task's encoder (featureless users, a rev_ relation flipped inside) and a typed node task
    "rec-dgl": (
        "rec-synthetic",
        "dgl",
        ["dataset.options.num_users=150", "dataset.options.num_items=100", "train.epochs=1", "link.eval_negatives=20"],
    ),
    "mag-pyg": ("mag-synthetic", "pyg", ["train.epochs=1"]),
    # edge features: GAT's edge attention (node task) and GINE's edge maps (graph task)
    "gat-edges-pyg": ("edges:nodes", "pyg", ["model.arch=gat", "train.batch_size=64", "train.epochs=1"]),
    "gine-dgl": ("edges:graphs", "dgl", ["model.arch=gine", "task=graph", "train.batch_size=16", "train.epochs=1"]),
}
HOMOGENEOUS = ["sage-pyg", "gat-dgl", "gcn-dgl", "gin-pyg", "gat-edges-pyg", "gine-dgl"]
GRAPH_CASES = ("gin-pyg", "gine-dgl")
FORMATS = {"onnx": ".onnx", "torch-export": ".pt2", "safetensors": ".safetensors"}
_runs: dict = {}


@pytest.fixture
def trained(tmp_path_factory):
    """A case's run, trained once per test process (each worker trains only the cases it gets)."""

    def get(name: str):
        if name not in _runs:
            experiment, backend, overrides = CASES[name]
            out = tmp_path_factory.mktemp(name) / "run"
            dataset = None
            if experiment.startswith("edges:"):  # an .npz whose edges carry features
                dataset, experiment = out.parent / "edges.npz", None
                np.savez(dataset, **with_edge_features(graphs=name in GRAPH_CASES))
            run = dict(backend=backend, nproc=1, overrides=overrides, out=out, progress=False, dataset=dataset)
            gnnbridge.run(experiment, **run)
            _runs[name] = out
        return _runs[name]

    return get


def with_edge_features(graphs: bool) -> dict[str, np.ndarray]:
    """300 nodes (or 60 graphs of 5-11 nodes) whose edges carry 3 features each."""
    gen = np.random.default_rng(3)
    if not graphs:
        src, dst = gen.integers(0, 300, 2400), gen.integers(0, 300, 2400)
        attr = gen.standard_normal((2400, 3)).astype(np.float32)
        return {"x": gen.standard_normal((300, 4)).astype(np.float32), "edge_index": np.stack([src, dst]),
                "edge_attr": attr, "y": gen.integers(0, 2, 300)}  # fmt: skip
    edges, attrs, ptr = [], [], [0]
    for _ in range(60):
        n = int(gen.integers(5, 12))
        edges.append(gen.integers(0, n, (2, 3 * n)) + ptr[-1])
        attrs.append(gen.standard_normal((3 * n, 3)).astype(np.float32))
        ptr.append(ptr[-1] + n)
    return {"x": np.ones((ptr[-1], 2), np.float32), "edge_index": np.concatenate(edges, 1),
            "edge_attr": np.concatenate(attrs), "node_ptr": np.array(ptr), "y": gen.integers(0, 2, 60)}  # fmt: skip


def second_graph(path, spec: dict, graph_task: bool):
    """Another graph of the features' width: 157 nodes (3 graphs of a collection), random edges."""
    gen = np.random.default_rng(7)
    n, e = 157, 640
    x = gen.standard_normal((n, spec["in_dim"])).astype(np.float32)
    arrays = {"x": x}
    if graph_task:  # three graphs, edges inside each
        ptr = np.array([0, 40, 101, n])
        parts = [gen.integers(ptr[g], ptr[g + 1], size=(2, 90)) for g in range(3)]
        arrays |= {"edge_index": np.concatenate(parts, axis=1), "node_ptr": ptr, "y": np.arange(3) % spec["out_dim"]}
    else:
        arrays |= {"edge_index": gen.integers(0, n, size=(2, e)), "y": gen.integers(0, spec["out_dim"], size=n)}
    if spec.get("edge_dim"):
        edges = arrays["edge_index"].shape[1]
        arrays["edge_attr"] = gen.standard_normal((edges, spec["edge_dim"])).astype(np.float32)
    np.savez(path, **arrays)
    return arrays


def inputs(arrays: dict, graph_task: bool) -> tuple[torch.Tensor, ...]:
    x, edge_index = torch.from_numpy(arrays["x"]), torch.from_numpy(arrays["edge_index"]).long()
    features = (torch.from_numpy(arrays["edge_attr"]),) if "edge_attr" in arrays else ()
    if not graph_task:
        return x, edge_index, *features
    ptr = torch.from_numpy(arrays["node_ptr"])
    return x, edge_index, torch.repeat_interleave(torch.arange(ptr.numel() - 1), ptr.diff()), *features


def scored(path, args: tuple[torch.Tensor, ...]) -> np.ndarray:
    """The file's outputs from its own runtime, not from gnnbridge's code."""
    if path.suffix == ".onnx":
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return session.run(None, {i.name: t.numpy() for i, t in zip(session.get_inputs(), args)})[0]
    if path.suffix == ".pt2":
        return torch.export.load(str(path)).module()(*args).detach().numpy()
    with torch.no_grad():
        return gnnbridge.load(path)(*args).numpy()


@pytest.mark.parametrize("name", HOMOGENEOUS)
def test_every_format_computes_predicts_logits_on_two_graphs(tmp_path, trained, name):
    run = trained(name)
    graph_task = name in GRAPH_CASES
    report = gnnbridge.export(run, "safetensors", tmp_path / "m.safetensors")
    spec = report["spec"]
    assert spec["trained_on"] == CASES[name][1] and spec["task"] == ("graph" if graph_task else "node")
    other = second_graph(tmp_path / "other.npz", spec, graph_task)
    expected = {
        "run": gnnbridge.predict(run)["logits"],
        "other": gnnbridge.predict(run, dataset=str(tmp_path / "other.npz"))["logits"],
    }
    data = inference._prepare(run, "best", "cpu", (), "export", False)[3]  # the run's graph, as predict reads it
    graphs = {"run": graph_inputs(data, spec), "other": inputs(other, graph_task)}
    assert expected["run"].shape[0] != expected["other"].shape[0]  # two sizes: N (or G) is dynamic
    for fmt, suffix in FORMATS.items():
        path = tmp_path / f"m{suffix}"
        if fmt != "safetensors":
            gnnbridge.export(run, fmt, path)
        assert describe_file(path) == spec
        for which, args in graphs.items():
            got = scored(path, args)
            assert got.shape == expected[which].shape, (fmt, which)
            np.testing.assert_allclose(got, expected[which], atol=1e-4, rtol=0, err_msg=f"{fmt} on {which}")


@pytest.mark.parametrize("name", ["rec-dgl", "mag-pyg"])
def test_a_typed_graph_exports_its_encoder_or_logits(tmp_path, trained, name):
    """A link run exports the encoder: each end type's final states, equal to predict
    --embeddings (the dot decoder named in the file); a typed node task its logits."""
    run = trained(name)
    spec = gnnbridge.export(run, "onnx", tmp_path / "m.onnx")["spec"]
    link = name.startswith("rec")
    if link:
        arrays = gnnbridge.predict(run, embeddings=True)
        expected = [arrays[f"embedding__{t}"] for t in spec["outputs_of"]]
        assert spec["output"] == ["states__user", "states__item"] and spec["decoder"].startswith("dot")
        assert not any("rev_" in name for name in spec["inputs"])  # the reverse relation is made inside
    else:
        expected = [gnnbridge.predict(run)["logits"]]
    data = inference._prepare(run, "best", "cpu", (), "export", False)[3]
    args = graph_inputs(data, spec)
    session = onnxruntime.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    given = dict(zip(spec["inputs"], args))
    outputs = {"onnx": session.run(None, {i.name: given[i.name].numpy() for i in session.get_inputs()})}
    gnnbridge.export(run, "torch-export", tmp_path / "m.pt2")
    with torch.no_grad():
        for fmt, module in [("pt2", torch.export.load(str(tmp_path / "m.pt2")).module()), ("st", None)]:
            if module is None:
                gnnbridge.export(run, "safetensors", tmp_path / "m.safetensors")
                module = gnnbridge.load(tmp_path / "m.safetensors")
            out = module(*args)
            outputs[fmt] = [t.numpy() for t in (out if isinstance(out, (tuple, list)) else (out,))]
    for fmt, got in sorted(outputs.items(), reverse=True):
        assert len(got) == len(expected), fmt
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, atol=1e-4, rtol=0, err_msg=fmt)


def test_check_compares_with_predict_for_the_user(tmp_path, trained):
    run = trained("sage-pyg")
    spec = gnnbridge.export(run, "safetensors", tmp_path / "first.safetensors")["spec"]
    second_graph(tmp_path / "other.npz", spec, graph_task=False)
    proc = ok(
        in_process(
            "export", run, "--format", "torch-export", "--out", "m.pt2", "--check", "--dataset", "other.npz",
            cwd=tmp_path,
        )
    )  # fmt: skip
    assert "matches predict" in proc.stdout and "other.npz" in proc.stdout, proc.stdout
    assert (tmp_path / "m.pt2").is_file()


def test_a_file_that_does_not_compute_predict_is_removed(tmp_path, trained, monkeypatch):
    from gnnbridge.core.export import programs

    run = trained("sage-pyg")
    monkeypatch.setattr(programs.SageLayer, "forward", lambda self, x, src, dst: self.root(x))  # no neighbours
    proc = in_process("export", run, "--format", "safetensors", "--out", "m.safetensors", "--check", cwd=tmp_path)
    one_line(proc, "differs from predict on the run's graph")
    assert not (tmp_path / "m.safetensors").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--format", "tflite", "--out", "m.tflite"], "--format 'tflite' is not an export format; choose one of: onnx"),
        (["--format", "onnx", "--out", "m.pt2"], "must end in .onnx for --format onnx"),
        (["--format", "onnx", "--out", "taken.onnx"], "already exists"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, trained, args, needle):
    run = trained("sage-pyg")
    (tmp_path / "taken.onnx").write_text("mine")
    before = sorted(p.name for p in tmp_path.iterdir())
    one_line(in_process("export", run, *args, cwd=tmp_path), needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / "taken.onnx").read_text() == "mine"


def test_what_has_no_program_is_named_in_one_line(tmp_path):
    from torch_geometric.nn import SAGEConv

    class Mine(torch.nn.Module):  # a user's own model: gnnbridge has no program of it
        def __init__(self):
            super().__init__()
            self.conv = SAGEConv(-1, 8)  # sage-synthetic: 8 classes

        def forward(self, x, edge_index):
            return self.conv(x, edge_index)

    run = tmp_path / "mine"
    gnnbridge.run("sage-synthetic", backend="pyg", nproc=1, out=run, progress=False, model=Mine(),
                  overrides=[*NODE, "train.epochs=1"])  # fmt: skip
    proc = in_process("export", run, "--format", "onnx", "--out", "m.onnx", cwd=tmp_path)
    one_line(proc, "cannot be exported yet: model.arch=")
    assert "has no exported program for node tasks (built in: sage, gcn, gat, gine)" in proc.stderr
    assert not (tmp_path / "m.onnx").exists()


def test_the_safetensors_file_holds_neutral_names_and_its_description(tmp_path, trained):
    from safetensors import safe_open

    run = trained("gat-dgl")
    gnnbridge.export(run, "safetensors", tmp_path / "m.safetensors")
    with safe_open(str(tmp_path / "m.safetensors"), "pt") as f:
        keys, meta = set(f.keys()), json.loads(f.metadata()["gnnbridge"])
    assert {"layers.0.weight", "layers.0.att_src", "layers.0.att_dst", "layers.1.bias"} <= keys
    assert meta["arch"] == "gat" and meta["inputs"] == ["x", "edge_index"]


def test_a_safetensors_file_loads_without_either_library(tmp_path, trained):
    import subprocess
    import sys

    run = trained("gcn-dgl")
    gnnbridge.export(run, "safetensors", tmp_path / "m.safetensors")
    code = (
        "import sys, torch, gnnbridge\n"
        "m = gnnbridge.load(sys.argv[1])\n"
        "out = m(torch.randn(5, m.description['in_dim']), torch.tensor([[0, 1, 2], [1, 2, 3]]))\n"
        "print(list(out.shape), sorted({'torch_geometric', 'dgl'} & set(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m.safetensors")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("]")[0] + "]" == f"[5, {describe_file(tmp_path / 'm.safetensors')['out_dim']}]"
    assert proc.stdout.strip().endswith("[]"), proc.stdout  # neither library was imported
