"""A heterogeneous task record derived from a memory-mapped source (``for_task``) travels to the
ranks as "reopen and derive again", never as its tensors: the same record comes back and its
features are still the file's pages. (A homogeneous graph's link task is tested in
tests/distributed/test_mapped_records.py.)"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnbridge.core.app.preflight import for_task
from gnnbridge.core.config import from_dict
from gnnbridge.core.records.hetero import HeteroSource


def open_shop(folder: str) -> HeteroSource:
    """A heterogeneous source whose item features are mapped from ``folder/x__item.npy``."""
    with warnings.catch_warnings():  # read-only mapping, never written
        warnings.simplefilter("ignore", UserWarning)
        x = torch.from_numpy(np.load(Path(folder) / "x__item.npy", mmap_mode="r"))
    buys = torch.stack([torch.arange(30).repeat_interleave(4), torch.arange(120) % 20])
    source = HeteroSource(
        {"user": 30, "item": 20},
        {"item": x},
        {("user", "buys", "item"): buys},
        target_node="item",
        y=torch.arange(20) % 3,
        name="shop",
    )
    source.mapped_from = (open_shop, (folder,))
    return source


def maps_line(tensor: torch.Tensor) -> str:
    ptr = tensor.data_ptr()
    for line in Path("/proc/self/maps").read_text().splitlines():
        start, end = (int(v, 16) for v in line.split()[0].split("-"))
        if start <= ptr < end:
            return line
    raise AssertionError(f"no mapping holds {ptr:#x}")


def travelled(record):
    blob = pickle.dumps(record)
    assert len(blob) < 4000, len(blob)  # the opener and the config, not the tensors
    return pickle.loads(blob)


@pytest.mark.parametrize("task", ["node", "link"])
def test_a_heterogeneous_task_of_a_mapped_source_travels_as_reopen_and_derive(task, tmp_path):
    np.save(tmp_path / "x__item.npy", np.random.default_rng(0).normal(size=(20, 5)).astype(np.float32))
    config = from_dict({"task": task, "dataset": {"reverse_edges": True}})
    derived = for_task(config, open_shop(str(tmp_path)))
    again = travelled(derived)
    assert again.is_mapped and again.edge_types == derived.edge_types
    for et in derived.edge_types:
        assert torch.equal(again.edge_index[et], derived.edge_index[et])
    for name in ("train", "val", "test"):
        assert torch.equal(again.split(name), derived.split(name))
    assert maps_line(again.x["item"]).endswith(f"{tmp_path}/x__item.npy")
    assert derived.share_memory_().x["item"].untyped_storage().filename is None  # not copied to /dev/shm
