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
