"""The one way gnnbridge builds a DGL block from CSC arrays.

Edge ids are always spelled out: DGL 2.1's CPU SpMM (``copy_u_mean`` and the ``SAGEConv`` /
``GraphConv`` built on it) segfaults on a CSC without them once rows are long and wide
(measured: 480 neighbours of 602 features; ``tests/backends/test_dgl.py``). Every CSC block
comes from here, so the rule lives in one place.
"""

from __future__ import annotations

from typing import Any

import torch

from gnnbridge.backends.dgl.compat import import_dgl

# Where a block or graph carries its edges' features (DGL's examples read ``edata["feat"]``).
EDGE_FEATURES = "feat"


def csc_block(
    indptr: torch.Tensor, indices: torch.Tensor, num_src: int, num_dst: int, eids: torch.Tensor | None = None
) -> Any:
    """A block with ``num_dst`` destinations whose in-edges are ``indices[indptr[v]:indptr[v+1]]``;
    ``eids`` default to ``0..E-1`` (also when given empty, as DGL returns them for a CSC built without)."""
    if eids is None or eids.numel() != indices.numel():
        eids = torch.arange(indices.numel(), device=indices.device)
    return import_dgl().create_block(
        ("csc", (indptr, indices, eids)), num_src_nodes=num_src, num_dst_nodes=num_dst, device=indptr.device
    )
