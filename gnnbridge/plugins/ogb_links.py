"""OGB's link-prediction sets by name, ``ogbl-collab`` and ``ogbl-citation2``, with the splits and
the negatives OGB's leaderboards rank against, read through the ``ogb`` package (registered with
the other link sets by :mod:`gnnbridge.plugins.hetero_real_datasets`; they follow the download
rules of :mod:`gnnbridge.plugins.real_datasets`)::

    <root>/ogbl_collab/RELEASE_v1.txt, raw/*.csv.gz, split/time/{train,valid,test}.pt
    <root>/ogbl_citation2/RELEASE_v1.txt, raw/*.csv.gz, split/time/{train,valid,test}.pt

Why their own negatives: a leaderboard figure is a ranking against fixed candidates, so a
figure against negatives gnnbridge drew would not compare. ogbl-collab ranks every held-out
collaboration against one set of negative author pairs per split (``link.protocol=shared``,
Hits@50); ogbl-citation2 ranks each held-out citation against its own 1,000 negative papers
(``per-edge``, MRR). The held-out edges come as OGB gives them, in order, so each meets its own
negatives; only the train edges pass messages.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gnnbridge.core.errors import BackendUnavailableError
from gnnbridge.core.interfaces import DatasetConfig
from gnnbridge.core.records.hetero import HOMOGENEOUS_EDGE, HeteroSource
from gnnbridge.plugins.options import options
from gnnbridge.plugins.real_datasets import OGB_DEFAULTS, data_root, read_ogb, ready_ogb_folder


@dataclass(frozen=True)
class LinkSet:
    folder: str
    raw: tuple[str, ...]  # raw/*.csv.gz ogb reads before it has a processed cache
    protocol: str  # how OGB ranks it (link.protocol)
    about: str


OGB_LINKS = {
    "ogbl-collab": LinkSet(
        "ogbl_collab",
        ("edge", "num-node-list", "num-edge-list", "node-feat", "edge_weight", "edge_year"),
        "shared",
        "OGB co-authorship: 235,868 authors, Hits@50 against OGB's negatives (ogb package)",
    ),
    "ogbl-citation2": LinkSet(
        "ogbl_citation2",
        ("edge", "num-node-list", "num-edge-list", "node-feat", "node_year"),
        "per-edge",
        "OGB citations: 2.9M papers, MRR against OGB's 1,000 negatives per citation (ogb package)",
    ),
}


def link_loader(name: str):
    def load(config: DatasetConfig, seed: int) -> HeteroSource:
        return load_ogb_links(name, config)

    return load


def load_ogb_links(name: str, config: DatasetConfig) -> HeteroSource:
    """The set's train edges (the only ones that pass messages), its val and test edges, and OGB's
    negatives for each, as a one-type source a link task reads."""
    spec, opts = OGB_LINKS[name], options(config, OGB_DEFAULTS)
    try:
        from ogb.linkproppred import LinkPropPredDataset
    except ImportError:
        raise BackendUnavailableError(f"Dataset '{name}' needs the ogb package: pip install ogb") from None
    root = data_root(config)
    folder = root / spec.folder
    splits = [folder / "split" / "time" / f"{p}.pt" for p in ("train", "valid", "test")]
    ready_ogb_folder(name, folder, splits, spec.raw, opts["download"])
    dataset, split = read_ogb(LinkPropPredDataset, "get_edge_split", name, folder, opts)
    graph = dataset[0]
    edges, negatives = (_shared if spec.protocol == "shared" else _per_edge)(split)
    return HeteroSource(
        {"node": int(graph["num_nodes"])},
        {"node": torch.as_tensor(graph["node_feat"]).float()},
        {HOMOGENEOUS_EDGE: edges["train"]},
        target_edge=HOMOGENEOUS_EDGE,
        held_out=(edges["valid"], edges["test"]),
        held_out_negatives=(negatives["valid"], negatives["test"]),
        negatives_protocol=spec.protocol,
        undirected=spec.protocol == "shared",  # collaborations have no direction
        name=name,
    )


def _shared(split: dict) -> tuple[dict, dict]:
    """ogbl-collab: ``edge`` [E, 2] per split, ``edge_neg`` [M, 2] for val and test."""
    edges = {part: torch.as_tensor(split[part]["edge"]).long().t().contiguous() for part in split}
    negatives = {part: torch.as_tensor(split[part]["edge_neg"]).long().t().contiguous() for part in ("valid", "test")}
    return edges, negatives


def _per_edge(split: dict) -> tuple[dict, dict]:
    """ogbl-citation2: ``source_node``, ``target_node`` per split, ``target_node_neg`` [E, 1000]."""
    edges = {
        part: torch.stack([torch.as_tensor(split[part][k]).long() for k in ("source_node", "target_node")])
        for part in split
    }
    negatives = {part: torch.as_tensor(split[part]["target_node_neg"]).long() for part in ("valid", "test")}
    return edges, negatives
