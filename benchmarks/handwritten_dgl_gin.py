"""Reference for graph classification: GIN trained with DDP on DGL, written by hand the way
DGL's multi-GPU graph-classification tutorial does it (here on CPU ranks with gloo).

This is the yardstick gnnbridge's ``task=graph`` / ``model.arch=gin`` is measured against, so
it is kept deliberately plain: one file, the tutorial's model and loop, no gnnbridge code except
the import helper that lets DGL 2.1 load on a newer torch.

The model is the tutorial's GIN with ``--layers`` GIN layers: each is ``GINConv`` with a
two-layer MLP (Linear without bias, BatchNorm, ReLU, Linear without bias), epsilon fixed at 0,
then BatchNorm and ReLU; the input features and every layer's output are sum-pooled, each goes
through its own Linear head and dropout, and the class scores are summed. Data: the tutorial's
``GraphDataLoader(use_ddp=True, shuffle=True)`` with ``set_epoch`` every epoch, over the
training graphs of the file's own split.

    python benchmarks/handwritten_dgl_gin.py --npz graphs.npz [--nproc 2 --epochs 20 --seed 0 ...]

Prints one JSON line: test_acc and val_acc (correct graphs / all graphs of the split, on rank 0
after the last epoch), mean_epoch_time_s (training pass only: from asking the loader for the
first batch to the end of the epoch's last optimizer step, timed like gnnbridge's
``epoch_time_s``), epoch_times_s and wall_time_s (the whole script).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# DGL 2.1 cannot be imported plainly on this torch (its graphbolt library is missing for it);
# gnnbridge's helper repairs the library path first. Nothing else of gnnbridge is used.
from gnnbridge.backends.dgl.compat import import_dgl  # noqa: E402

dgl = import_dgl()
from dgl.dataloading import GraphDataLoader  # noqa: E402
from dgl.nn import GINConv, SumPooling  # noqa: E402


class MLP(nn.Module):
    """The tutorial's two-layer MLP inside each GINConv (no biases: BatchNorm shifts instead)."""

    def __init__(self, in_size: int, hidden: int, out_size: int):
        super().__init__()
        self.linears = nn.ModuleList([nn.Linear(in_size, hidden, bias=False), nn.Linear(hidden, out_size, bias=False)])
        self.batch_norm = nn.BatchNorm1d(hidden)

    def forward(self, h):
        return self.linears[1](F.relu(self.batch_norm(self.linears[0](h))))


class GIN(nn.Module):
    def __init__(self, in_size: int, hidden: int, out_size: int, num_layers: int, dropout: float):
        super().__init__()
        sizes = [in_size] + [hidden] * num_layers
        self.ginlayers = nn.ModuleList(GINConv(MLP(a, hidden, hidden), learn_eps=False) for a in sizes[:-1])
        self.batch_norms = nn.ModuleList(nn.BatchNorm1d(hidden) for _ in range(num_layers))
        # One head per pooled representation (input included), as the tutorial does.
        self.linear_prediction = nn.ModuleList(nn.Linear(a, out_size) for a in sizes)
        self.drop = nn.Dropout(dropout)
        self.pool = SumPooling()

    def forward(self, g, h):
        hidden_rep = [h]
        for layer, norm in zip(self.ginlayers, self.batch_norms):
            h = F.relu(norm(layer(g, h)))
            hidden_rep.append(h)
        score = 0
        for head, h in zip(self.linear_prediction, hidden_rep):
            score = score + self.drop(head(self.pool(g, h)))
        return score


def load_graphs(path: str):
    """The .npz as a list of ``(DGLGraph, label)`` (features in ``ndata["attr"]``), plus its
    three splits as lists of graph ids, and the number of classes."""
    arrays = np.load(path)
    x, (src, dst) = torch.from_numpy(arrays["x"]), torch.from_numpy(arrays["edge_index"])
    ptr, labels = arrays["node_ptr"], torch.from_numpy(arrays["y"])
    # Every edge stays inside one graph, so sorting by source groups the edges graph by graph.
    order = torch.argsort(src, stable=True)
    src, dst = src[order], dst[order]
    edge_ptr = np.searchsorted(src.numpy(), ptr)
    graphs = []
    for g in range(len(ptr) - 1):
        n0, n1, e0, e1 = ptr[g], ptr[g + 1], edge_ptr[g], edge_ptr[g + 1]
        graph = dgl.graph((src[e0:e1] - n0, dst[e0:e1] - n0), num_nodes=int(n1 - n0))
        graph.ndata["attr"] = x[n0:n1]
        graphs.append((graph, labels[g]))
    splits = {k: arrays[f"{k}_idx"].tolist() for k in ("train", "val", "test")}
    return graphs, splits, int(labels.max()) + 1


@torch.no_grad()
def evaluate(model, loader) -> float:
    """Correct graphs over all graphs of the loader (not a mean of per-batch accuracies)."""
    model.eval()
    correct = total = 0
    for bg, labels in loader:
        pred = model(bg, bg.ndata["attr"]).argmax(1)
        correct += int((pred == labels).sum())
        total += len(labels)
    return correct / total


def train_epoch(model, loader, optimizer) -> tuple[float, float]:
    """One pass over this rank's shard of the training graphs; returns (seconds, mean loss)."""
    model.train()
    total_loss, steps = 0.0, 0
    start = time.perf_counter()
    for bg, labels in loader:
        loss = F.cross_entropy(model(bg, bg.ndata["attr"]), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total_loss += loss.item()
        steps += 1
    return time.perf_counter() - start, total_loss / max(steps, 1)


def run(rank: int, args, port: int, graphs, splits, num_classes: int, results) -> None:
    """One DDP rank: train on its shard of the training graphs, then rank 0 evaluates."""
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // args.nproc))  # share the cores
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.nproc)
    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP broadcasts rank 0's anyway)

    # use_ddp=True wraps a DistributedSampler: each rank gets every world_size-th graph of a
    # permutation drawn from (ddp_seed, epoch), padded so all ranks run the same number of
    # batches; set_epoch below is what makes the permutation change between epochs.
    train_loader = GraphDataLoader(
        [graphs[i] for i in splits["train"]], use_ddp=True, ddp_seed=args.seed, batch_size=args.batch_size, shuffle=True
    )
    in_size = graphs[0][0].ndata["attr"].shape[1]
    model = DistributedDataParallel(GIN(in_size, args.hidden, num_classes, args.layers, args.dropout))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    epoch_times = []
    for epoch in range(args.epochs):
        train_loader.set_epoch(epoch)
        seconds, loss = train_epoch(model, train_loader, optimizer)
        epoch_times.append(seconds)
        if rank == 0:
            print(f"epoch {epoch + 1:>3}  loss {loss:.4f}  {seconds:.2f}s", file=sys.stderr, flush=True)

    if rank == 0:
        # The plain module: a DDP forward on one rank alone would wait for the others.
        loaders = {k: GraphDataLoader([graphs[i] for i in splits[k]], batch_size=256) for k in ("val", "test")}
        results.put(
            {
                "val_acc": evaluate(model.module, loaders["val"]),
                "test_acc": evaluate(model.module, loaders["test"]),
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
    parser = argparse.ArgumentParser(description="Hand-written DGL DDP GIN graph classification (reference).")
    parser.add_argument("--npz", required=True)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--layers", type=int, default=3, help="GIN layers (the tutorial's num_layers - 1)")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32, help="graphs per batch per rank")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    start = time.perf_counter()
    args = parse_args(argv)
    graphs, splits, num_classes = load_graphs(args.npz)
    results = mp.get_context("spawn").SimpleQueue()
    mp.spawn(run, args=(args, free_port(), graphs, splits, num_classes, results), nprocs=args.nproc, join=True)
    summary = results.get()
    summary["wall_time_s"] = time.perf_counter() - start
    print(json.dumps({"runner": "handwritten-dgl-gin", **summary}))


if __name__ == "__main__":
    main()
