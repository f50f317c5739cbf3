"""Reference: GraphSAGE trained with DDP on DGL, written by hand the way DGL's multi-GPU
node-classification tutorial does it (here on CPU ranks with the gloo backend).

This is the yardstick gnnbridge is measured against, so it is kept deliberately plain: one
file, no gnnbridge code except the import helper that lets DGL 2.1 load on a newer torch.

    python benchmarks/handwritten_dgl.py --npz graph.npz [--nproc 2 --epochs 10 ...]

Prints one JSON line: test_acc, val_acc, mean_epoch_time_s (training pass only: from asking
the loader for the first batch to the end of the epoch's last optimizer step, timed like
gnnbridge's ``epoch_time_s``), epoch_times_s, eval_time_s (the final exact layer-wise inference
over all nodes, split over the ranks as in DGL's multi-GPU tutorial, until rank 0 has the
accuracies: gnnbridge's ``final_eval_time_s``) and wall_time_s (the whole script).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import warnings
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
from dgl.multiprocessing import shared_tensor  # noqa: E402
from dgl.nn import SAGEConv  # noqa: E402


class SAGE(nn.Module):
    """GraphSAGE with mean aggregation: ReLU and dropout between layers, none after the last."""

    def __init__(self, in_size: int, hidden: int, out_size: int, num_layers: int, dropout: float):
        super().__init__()
        self.sizes = [in_size] + [hidden] * (num_layers - 1) + [out_size]
        sizes = self.sizes
        self.layers = nn.ModuleList(SAGEConv(a, b, "mean") for a, b in zip(sizes[:-1], sizes[1:]))
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i < len(self.layers) - 1:
                h = self.dropout(F.relu(h))
        return h

    @torch.no_grad()
    def inference(self, g, batch_size: int):
        """Exact outputs of every node, one layer at a time with all neighbours, the nodes split
        over the ranks as in DGL's multi-GPU tutorial (call it on every rank).

        Sampled evaluation would add noise, and computing each seed's full 2-hop tree repeats
        work; a layer at a time computes every node's hidden state once. Each rank computes
        its share of a layer (``use_ddp=True``) into a tensor in shared memory, and all wait
        for the layer to be complete before reading it for the next one.
        """
        sampler = dgl.dataloading.MultiLayerFullNeighborSampler(1)
        all_nodes = torch.arange(g.num_nodes())
        # drop_last=False pads the last rank's share with the first nodes: they are written
        # twice with the same values.
        loader = dgl.dataloading.DataLoader(
            g, all_nodes, sampler, batch_size=batch_size, shuffle=False, drop_last=False, use_ddp=True
        )
        h = g.ndata["feat"]
        for i, layer in enumerate(self.layers):
            last = i == len(self.layers) - 1
            out = shared_tensor((g.num_nodes(), self.sizes[i + 1]))
            for input_nodes, output_nodes, blocks in loader:
                z = layer(blocks[0], h[input_nodes])
                out[output_nodes] = z if last else F.relu(z)
            dist.barrier()
            h = out
        return h


def load_graph(path: str):
    """The .npz as a DGLGraph with ``feat`` and ``label``, plus its three splits."""
    arrays = np.load(path)
    src, dst = torch.from_numpy(arrays["edge_index"])
    g = dgl.graph((src, dst), num_nodes=arrays["x"].shape[0])
    g.ndata["feat"] = torch.from_numpy(arrays["x"])
    g.ndata["label"] = torch.from_numpy(arrays["y"])
    # Build the sparse formats once here, so each rank does not build its own per batch.
    g.create_formats_()
    splits = {k: torch.from_numpy(arrays[f"{k}_idx"]) for k in ("train", "val", "test")}
    return g, splits


def train_epoch(model, loader, optimizer) -> tuple[float, float]:
    """One pass over this rank's seeds; returns (seconds, mean loss)."""
    model.train()
    total_loss, steps = 0.0, 0
    start = time.perf_counter()
    for _input_nodes, _output_nodes, blocks in loader:
        x = blocks[0].srcdata["feat"]
        y = blocks[-1].dstdata["label"]
        loss = F.cross_entropy(model(blocks, x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total_loss += loss.item()
        steps += 1
    return time.perf_counter() - start, total_loss / max(steps, 1)


def accuracy(logits, labels, idx) -> float:
    return float((logits[idx].argmax(1) == labels[idx]).float().mean())


def run(rank: int, args, port: int, g, splits, results) -> None:
    """One DDP rank: train on its share of the training nodes, then rank 0 evaluates."""
    # Two ranks on a 2-core machine: give each its share of the cores, as gnnbridge does,
    # instead of letting both start one thread per core and fight over them.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // args.nproc))
    # DGL suggests pinning loader workers to cores; with num_workers=0 there are none to pin.
    warnings.filterwarnings("ignore", message="Dataloader CPU affinity opt is not enabled")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.nproc)
    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP broadcasts rank 0's anyway)
    np.random.seed(args.seed + rank)  # DGL's DDP loader shuffles each rank's shard with numpy
    dgl.seed(args.seed + rank)  # neighbour sampling

    # DGL lists fanouts from the input layer to the output layer; ours are from the seeds out.
    fanouts = [int(f) for f in args.fanouts.split(",")]
    sampler = dgl.dataloading.NeighborSampler(list(reversed(fanouts)))
    # use_ddp=True gives each rank a fixed contiguous shard of the training nodes and shuffles
    # within it every epoch. With drop_last=False DGL pads the shards to equal length by
    # repeating a few seeds, so every rank runs the same number of batches and DDP's
    # gradient all-reduces stay paired (unequal batch counts would hang the last step).
    loader = dgl.dataloading.DataLoader(
        g, splits["train"], sampler, use_ddp=True, batch_size=args.batch_size, shuffle=True, drop_last=False
    )

    num_classes = int(g.ndata["label"].max()) + 1
    model = SAGE(g.ndata["feat"].shape[1], args.hidden, num_classes, len(fanouts), args.dropout)
    model = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    epoch_times = []
    for epoch in range(args.epochs):
        seconds, loss = train_epoch(model, loader, optimizer)
        epoch_times.append(seconds)
        if rank == 0:
            print(f"epoch {epoch + 1:>3}  loss {loss:.4f}  {seconds:.2f}s", file=sys.stderr, flush=True)

    # Timed like gnnbridge's final_eval_time_s: from the end of training (all ranks, as after
    # gnnbridge's last checkpoint barrier) to rank 0 holding the accuracies.
    dist.barrier()
    start = time.perf_counter()
    model.eval()
    logits = model.module.inference(g, batch_size=4096)
    if rank == 0:
        labels = g.ndata["label"]
        val_acc, test_acc = accuracy(logits, labels, splits["val"]), accuracy(logits, labels, splits["test"])
        results.put(
            {
                "val_acc": val_acc,
                "test_acc": test_acc,
                "eval_time_s": time.perf_counter() - start,
                "mean_epoch_time_s": float(np.mean(epoch_times)),
                "epoch_times_s": epoch_times,
            }
        )
    dist.barrier()  # the other ranks keep the shared outputs alive until rank 0 has scored them
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Hand-written DGL DDP GraphSAGE (reference).")
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
    g, splits = load_graph(args.npz)
    results = mp.get_context("spawn").SimpleQueue()
    mp.spawn(run, args=(args, free_port(), g, splits, results), nprocs=args.nproc, join=True)
    summary = results.get()
    summary["wall_time_s"] = time.perf_counter() - start
    print(json.dumps({"runner": "handwritten-dgl", **summary}))


if __name__ == "__main__":
    main()
