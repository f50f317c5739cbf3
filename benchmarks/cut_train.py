"""Copy a benchmark graph keeping only the first N training nodes.

Why: at Reddit scale one training epoch over all 140k training nodes takes minutes per runner on
a 2-core machine. The training pass's cost per batch does not depend on how many batches there
are, so the Reddit-scale measurement trains on the first 20,480 (10 batches of 1024 per rank
with 2 ranks) while evaluation still covers every node of the full graph.

    python benchmarks/cut_train.py GRAPH.npz OUT.npz 20480
"""

from __future__ import annotations

import sys

import numpy as np


def main(argv: list[str]) -> None:
    source, target, keep = argv[0], argv[1], int(argv[2])
    with np.load(source) as graph:
        arrays = {key: graph[key] for key in graph.files}
    arrays["train_idx"] = arrays["train_idx"][:keep]
    np.savez(target, **arrays)
    print(f"wrote {target}: {arrays['train_idx'].size} training nodes of {arrays['y'].size}")


if __name__ == "__main__":
    main(sys.argv[1:])
