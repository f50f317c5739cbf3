"""The memory check before a run (core/app/preflight.py): sparse embedding tables are counted
without a dense gradient, so a run that fits with them is not refused for the memory a dense
table would take."""

from __future__ import annotations

import pytest

from gnnbridge.core.app import preflight
from gnnbridge.core.config import from_dict
from gnnbridge.core.errors import ResourceError


def config(embeddings: str):
    return from_dict(
        {
            "dataset": {"name": "rec-synthetic", "options": {"num_users": 4000}},
            "backend": "pyg",
            "task": "link",
            "nproc": 2,
            "model": {"embeddings": embeddings, "hidden": 512},
            "train": {"batch_size": 1},  # batches of a few hundred nodes: the tables dominate
            "eval": {"batch_size": 1},
            "sampler": {"fanouts": [1, 1]},
        }
    )


def test_sparse_tables_need_no_dense_gradient(monkeypatch):
    data = preflight.load_dataset(config("dense"))
    params = preflight.model_parameters(config("dense"), data)
    featureless = [t for t, width in data.feature_dims().items() if not width]
    assert featureless == ["category", "user"]  # types in name order (records/hetero.py)
    table = sum(data.num_nodes[t] for t in featureless) * 512  # a row per node
    # Free memory halfway between the two needs: the dense gradient of the tables (4 bytes a
    # parameter on each of 2 ranks) is what tips it.
    free = 2 * params * preflight.TRAIN_BYTES_PER_PARAM - 4 * table
    monkeypatch.setattr(preflight, "available_memory", lambda: free)
    with pytest.raises(ResourceError, match="parameters"):
        preflight.check_memory(config("dense"), data, 2)
    preflight.check_memory(config("sparse"), data, 2)
