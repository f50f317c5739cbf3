"""gnnbridge from a Jupyter notebook, executed headlessly (nbclient, a real ipykernel): a graph
built in one cell, a PyG model class defined in another (in the kernel's ``__main__``, which
spawned ranks could not import by name), trained on 1 and 2 ranks, the model and its outputs
handed back in the notebook."""

from __future__ import annotations

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

CELLS = [
    """\
import numpy as np, torch, gnnbridge
from torch_geometric.data import Data
from torch_geometric.nn import SAGEConv
rng = np.random.default_rng(0)
n, c = 300, 3
y = rng.integers(0, c, n)
x = torch.from_numpy((rng.normal(size=(n, 6)) + 1.5 * np.eye(c, 6)[y]).astype(np.float32))
src = rng.integers(0, n, 6 * n)
dst = np.array([rng.choice(np.flatnonzero(y == y[s])) for s in src])
data = Data(x=x, edge_index=torch.from_numpy(np.stack([src, dst])), y=torch.from_numpy(y))""",
    """\
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = SAGEConv(6, 16), SAGEConv(16, 3)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)""",
    """\
settings = ["train.epochs=3", "train.batch_size=32"]
one = gnnbridge.run(dataset=data, model=Net(), nproc=1, out="one", overrides=settings, progress=False)
two = gnnbridge.run(dataset=data, model=Net(), nproc=2, out="two", overrides=settings, progress=False)
model = gnnbridge.load("two", trust_code=True)
outputs = gnnbridge.predict("two", trust_code=True)
print(type(model).__name__, one["world_size"], two["world_size"], outputs["logits"].shape[0],
      min(one["metrics"]["test_acc"], two["metrics"]["test_acc"]) > 0.6)""",
]


@pytest.mark.slow
def test_a_notebook_trains_its_own_model_class_on_one_and_two_ranks_and_gets_it_back(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNBRIDGE_DATA", str(tmp_path / "data-root"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell) for cell in CELLS])
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    printed = "".join(out.get("text", "") for out in nb.cells[-1].outputs if out.get("name") == "stdout")
    assert printed.split() == ["Net", "1", "2", "300", "True"], nb.cells[-1].outputs
    assert (tmp_path / "two" / "results.json").is_file()
