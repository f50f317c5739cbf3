"""Tasks: a heterogeneous graph as a dataset gives it (:class:`~gnnbridge.core.records.hetero.HeteroSource`)
turned into the record one task trains on, apart from the records themselves:

    node.py       node classification: splits of the labelled type, message-passing edges
    link.py       link prediction: the split of the target pairs, message passing from train
                  pairs only, fixed evaluation negatives; a homogeneous graph as one node type
    edge.py       edge tasks: a label per given edge of one type, every edge passing messages
    pairs.py      pair arithmetic on [2, E] edge arrays
    negatives.py  the uniform negative draw every link path uses, and the shared negative pairs

May import: ``errors`` and ``records``.
"""

from gnnbridge.core.tasks.edge import for_edge_task, no_edge_labels
from gnnbridge.core.tasks.link import (
    LinkSettings,
    for_link_task,
    from_homogeneous,
    homogeneous_source,
    link_task,
    shared_negatives,
)
from gnnbridge.core.tasks.negatives import negative_destinations
from gnnbridge.core.tasks.node import for_node_task, mapped_node_task, node_task
from gnnbridge.core.tasks.pairs import check_pairs, distinct_pairs, find_pairs, mirror_ids

__all__ = [
    "LinkSettings",
    "for_edge_task",
    "no_edge_labels",
    "check_pairs",
    "distinct_pairs",
    "find_pairs",
    "for_link_task",
    "for_node_task",
    "from_homogeneous",
    "homogeneous_source",
    "link_task",
    "mapped_node_task",
    "mirror_ids",
    "negative_destinations",
    "node_task",
    "shared_negatives",
]
