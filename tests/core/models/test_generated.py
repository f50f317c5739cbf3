"""Building a model leaves no generated source file in the temp folder, and touches nothing else
there (a user's own module in it, imported while the model is built, stays)."""

from __future__ import annotations

import inspect
import sys
import tempfile

import torch

from gnnbridge.core.models.generated import removing_generated_modules


def test_a_pyg_layer_leaves_no_generated_module_and_keeps_its_source(tmp_path, monkeypatch):
    from torch_geometric.nn import MessagePassing

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    class Fresh(MessagePassing):  # a layer class new to this process: PyG generates its propagate
        def forward(self, x, edge_index):
            return self.propagate(edge_index, x=x)

    with removing_generated_modules():
        layer = Fresh()
    assert list(tmp_path.iterdir()) == []
    assert "def propagate" in inspect.getsource(type(layer).propagate)  # from linecache: still readable
    x, edge_index = torch.eye(3), torch.tensor([[0, 1], [1, 2]])
    assert torch.equal(layer(x, edge_index), torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]))


def test_a_users_module_in_the_temp_folder_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "my_models.py").write_text("VALUE = 1\n")
    (tmp_path / "my_models_notes.py").write_text("NOTE = 2\n")  # the generated pattern, but not imported
    try:
        with removing_generated_modules():
            import my_models  # noqa: F401
        assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".py") == ["my_models.py", "my_models_notes.py"]
    finally:
        sys.modules.pop("my_models", None)


def fresh_layer(name: str):
    """A layer of a class new to this process: PyG generates a propagate once per class name,
    from the class's source (so a class statement, not type())."""
    from torch_geometric.nn import MessagePassing

    if name == "SecondRank":

        class SecondRank(MessagePassing):
            def forward(self, x, edge_index):
                return self.propagate(edge_index, x=x)

        return SecondRank()

    class BesideTheirs(MessagePassing):
        def forward(self, x, edge_index):
            return self.propagate(edge_index, x=x)

    return BesideTheirs()


def test_the_bytecode_folder_another_rank_made_goes_with_the_last_file_in_it(tmp_path, monkeypatch):
    """Two ranks build at once: the one that made $TMPDIR/__pycache__ finishes first, while the
    other's bytecode is still there, so it cannot remove the folder; the other, which found the
    folder made, removes its file and then the folder, now empty. (An empty folder was left.)"""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "__pycache__").mkdir()  # made by the rank that finished first
    with removing_generated_modules():
        fresh_layer("SecondRank")
    assert not (tmp_path / "__pycache__").exists() and not list(tmp_path.glob("*.py"))


def test_another_processes_bytecode_in_the_folder_stays(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    theirs = tmp_path / "__pycache__" / "theirs.cpython-311.pyc"
    theirs.parent.mkdir()
    theirs.write_bytes(b"bytecode")
    with removing_generated_modules():
        fresh_layer("BesideTheirs")
    assert [p.name for p in (tmp_path / "__pycache__").iterdir()] == ["theirs.cpython-311.pyc"]
