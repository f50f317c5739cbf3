"""Reference: GraphSAGE trained with DDP on PyG, written by hand in the style of PyG's
multi-GPU Reddit example (``NeighborLoader`` per rank, ``DistributedDataParallel``,
``mp.spawn``), here on CPU ranks with the gloo backend.

PyG's ``NeighborLoader`` samples with pyg-lib or torch-sparse. Without either (as on a plain
CPU install of torch_geometric) this script prints ``{"skipped": "..."}`` and exits 0, so a
benchmark run still completes; with one of them it trains and prints one JSON line like
``handwritten_dgl.py`` (test_acc, val_acc, mean_epoch_time_s, epoch_times_s, eval_time_s,
wall_time_s). Unlike the DGL script, the final inference runs on rank 0 alone, as in PyG's
example, so its ``eval_time_s`` is not split over the ranks.

    python benchmarks/handwritten_pyg.py --npz graph.npz [--nproc 2 --epochs 10 ...]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def missing_sampler() -> str | None:
    """Why ``NeighborLoader`` cannot sample here, or None when it can."""
    import torch_geometric.typing as pyg_typing

    if pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE:
        return None
    return "PyG's NeighborLoader needs pyg-lib or torch-sparse, and neither is installed"


class SAGE(nn.Module):
    """GraphSAGE with mean aggregation: ReLU and dropout between layers, none after the last."""

    def __init__(self, in_size: int, hidden: int, out_size: int, num_layers: int, dropout: float):
        super().__init__()
        from torch_geometric.nn import SAGEConv

        sizes = [in_size] + [hidden] * (num_layers - 1) + [out_size]
        self.convs = nn.ModuleList(SAGEConv(a, b, aggr="mean") for a, b in zip(sizes[:-1], sizes[1:]))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, edge_index):
        # Like PyG's example, every layer runs on the whole sampled subgraph and the seeds'
        # rows are taken at the end (no per-layer trimming).
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = self.dropout(F.relu(x))
        return x

    @torch.no_grad()
    def inference(self, x_all, loader):
        """Exact outputs of every node, one layer at a time with all neighbours.

        ``loader`` yields each batch's 1-hop neighbourhood (seeds first); a layer at a time
        computes every node's hidden state once instead of once per seed's 2-hop tree.
        """
        for i, conv in enumerate(self.convs):
            parts = []  # the loader keeps node order (shuffle=False), so outputs concatenate
            for batch in loader:
                h = conv(x_all[batch.n_id], batch.edge_index)[: batch.batch_size]
                parts.append(F.relu(h) if i < len(self.convs) - 1 else h)
            x_all = torch.cat(parts)
        return x_all


def load_data(path: str):
    """The .npz as a PyG ``Data`` (x, y, edge_index) plus its three splits."""
    from torch_geometric.data import Data

    arrays = np.load(path)
    data = Data(
        x=torch.from_numpy(arrays["x"]),
        y=torch.from_numpy(arrays["y"]),
        edge_index=torch.from_numpy(arrays["edge_index"]),
    )
    splits = {k: torch.from_numpy(arrays[f"{k}_idx"]) for k in ("train", "val", "test")}
    return data, splits


def rank_shard(train_idx, rank: int, world_size: int):
    """This rank's equal-length share of the training nodes.

    Every rank gets exactly ``len // world_size`` seeds (at most ``world_size - 1`` left-over
    nodes are never trained on), so every rank's loader yields the same number of batches and
    DDP's gradient all-reduces stay paired. Shards of unequal length (PyG's example splits with
    ``split(len // world_size)``) can give one rank an extra batch, and that rank then waits
    forever in its last backward pass; ``drop_last=True`` alone does not rule that out.
    """
    per_rank = train_idx.numel() // world_size
    return train_idx[rank * per_rank : (rank + 1) * per_rank]


def train_epoch(model, loader, optimizer) -> tuple[float, float]:
    """One pass over this rank's seeds; returns (seconds, mean loss)."""
    model.train()
    total_loss, steps = 0.0, 0
    start = time.perf_counter()
    for batch in loader:
        out = model(batch.x, batch.edge_index)[: batch.batch_size]
        loss = F.cross_entropy(out, batch.y[: batch.batch_size])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total_loss += loss.item()
        steps += 1
    return time.perf_counter() - start, total_loss / max(steps, 1)


def accuracy(logits, labels, idx) -> float:
    return float((logits[idx].argmax(1) == labels[idx]).float().mean())


def run(rank: int, args, port: int, data, splits, results) -> None:
    """One DDP rank: train on its share of the training nodes, then rank 0 evaluates."""
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    # Give each rank its share of the cores, as gnnbridge does, so ranks do not oversubscribe.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // args.nproc))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.nproc)
    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP broadcasts rank 0's anyway)

    fanouts = [int(f) for f in args.fanouts.split(",")]  # PyG's order: from the seeds outwards
    train_loader = NeighborLoader(
        data,
        num_neighbors=fanouts,
        input_nodes=rank_shard(splits["train"], rank, args.nproc),
        batch_size=args.batch_size,
        shuffle=True,
    )

    num_classes = int(data.y.max()) + 1
    model = SAGE(data.num_features, args.hidden, num_classes, len(fanouts), args.dropout)
    model = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    torch.manual_seed(args.seed + 1 + rank)  # sampling and dropout streams differ per rank

    epoch_times = []
    for epoch in range(args.epochs):
        seconds, loss = train_epoch(model, train_loader, optimizer)
        epoch_times.append(seconds)
        if rank == 0:
            print(f"epoch {epoch + 1:>3}  loss {loss:.4f}  {seconds:.2f}s", file=sys.stderr, flush=True)

    dist.barrier()  # training is over on every rank (as after gnnbridge's last checkpoint)
    if rank == 0:
        # As in PyG's example, rank 0 alone runs the final inference while the others wait;
        # timed until it has the accuracies, like gnnbridge's final_eval_time_s.
        start = time.perf_counter()
        model.eval()
        # The 1-hop loader needs only the topology; features are indexed from x_all directly.
        topology = Data(edge_index=data.edge_index, num_nodes=data.num_nodes)
        full_loader = NeighborLoader(topology, num_neighbors=[-1], input_nodes=None, batch_size=4096, shuffle=False)
        logits = model.module.inference(data.x, full_loader)
        val_acc, test_acc = accuracy(logits, data.y, splits["val"]), accuracy(logits, data.y, splits["test"])
        results.put(
            {
                "val_acc": val_acc,
                "test_acc": test_acc,
                "eval_time_s": time.perf_counter() - start,
                "mean_epoch_time_s": float(np.mean(epoch_times)),
                "epoch_times_s": epoch_times,
            }
        )
    dist.barrier()  # the other ranks wait for rank 0's evaluation before leaving the group
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Hand-written PyG DDP GraphSAGE (reference).")
    parser.add_argument("--npz", required=True)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--fanouts", default="25,10", help="neighbours per hop, counted from the seeds")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    start = time.perf_counter()
    args = parse_args(argv)
    reason = missing_sampler()
    if reason is not None:
        print(json.dumps({"runner": "handwritten-pyg", "skipped": reason}))
        return
    data, splits = load_data(args.npz)
    results = mp.get_context("spawn").SimpleQueue()
    mp.spawn(run, args=(args, free_port(), data, splits, results), nprocs=args.nproc, join=True)
    summary = results.get()
    summary["wall_time_s"] = time.perf_counter() - start
    print(json.dumps({"runner": "handwritten-pyg", **summary}))


if __name__ == "__main__":
    main()
