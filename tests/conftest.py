"""Shared fixtures. Tests run on CPU; multi-process tests use gloo with 2 ranks."""
from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("GNNBRIDGE_CACHE", os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "gnnbridge"))
torch.set_num_threads(1)


@pytest.fixture
def small_data():
    from gnnbridge.testing.conformance import small_graph

    return small_graph()
