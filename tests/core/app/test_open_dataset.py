"""Opening a dataset is one contract: open_dataset gives the record with what it was opened for
(task family, target, the labels' form, the machine's part) as declared fields."""

from gnnbridge.core.app.preflight import open_dataset, task_record
from gnnbridge.core.config import from_dict
from gnnbridge.core.records.data import GraphData
from gnnbridge.core.records.dataset import Dataset


def test_open_dataset_declares_what_the_record_was_opened_for():
    config = from_dict({"task": "node", "dataset": {"name": "karate"}})
    opened = open_dataset(config)
    assert isinstance(opened, Dataset) and isinstance(opened.record, GraphData)
    assert (opened.family, opened.target, opened.label_form, opened.partition) == ("node", "class", "class", None)
    assert opened.record.labels == "class"
    record = task_record(config)  # the callers' record is the one open_dataset holds
    assert record.num_nodes == opened.record.num_nodes and bool((record.y == opened.record.y).all())


def test_a_built_in_loader_still_takes_a_plain_dataset_section(tmp_path):
    """A script that calls a built-in loader itself (``benchmarks/`` do) hands it the section as
    the config holds it, not a LoaderConfig: the loader reads class labels, as it always did."""
    import numpy as np

    from gnnbridge.core.config import DatasetConfig
    from gnnbridge.plugins.datasets import load_npz

    rng = np.random.default_rng(0)
    edges = np.stack([np.arange(20), (np.arange(20) + 1) % 20]).astype(np.int64)
    x, y = rng.normal(size=(20, 3)).astype(np.float32), np.arange(20, dtype=np.int64) % 2
    np.savez(tmp_path / "g.npz", edge_index=edges, x=x, y=y)
    graph = load_npz(DatasetConfig(name="npz", path=str(tmp_path / "g.npz")), 0)
    assert graph.num_nodes == 20 and graph.labels == "class"
