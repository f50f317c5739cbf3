"""An example gnnbridge plugin: every hook a plugin can implement, each kept minimal.

gnnbridge imports this module through the ``gnnbridge`` entry-point group (see pyproject.toml);
library imports stay inside the builders, so listing plugins never imports DGL.
"""

import json
from pathlib import Path

import click
import torch

from gnnbridge import hookimpl


@hookimpl
def register_models(register):
    from gnnbridge_example_plugin.models import MLP, build_ressage

    register("example-mlp", MLP, tasks=["node"], description="a 2-layer MLP on node features (every backend)")
    register(
        "example-ressage",
        {"dgl": build_ressage},
        tasks=["node"],
        description="GraphSAGE with residual connections, DGL layers",
    )


@hookimpl
def register_samplers(register):
    def build(store, fanouts):
        from gnnbridge_example_plugin.dgl_sampler import MultiLayerSampler

        return MultiLayerSampler(fanouts)

    register("example-multilayer", {"dgl": build}, description="DGL BlockSampler: sample_neighbors per layer")


@hookimpl
def register_datasets(register):
    from gnnbridge_example_plugin.counts import counts

    register("example-caves", caves, "48 caves of 12 nodes; a node's class is its cave's group (4 classes)")
    register("example-counts", counts, "the caves with a count per node (target=count)")


@hookimpl
def register_tasks(register):
    from gnnbridge_example_plugin.counts import CountTarget
    from gnnbridge_example_plugin.degree import DegreeFamily

    register(CountTarget())
    register(DegreeFamily())


def caves(config, seed):
    """Cliques joined in a ring; features are a noisy one-hot of the class."""
    from gnnbridge.core.interfaces import GraphData, random_split

    edges, x, y = cave_arrays(seed)
    return GraphData.from_edges(edges, x, y, *random_split(y.numel(), seed), 4, name="example-caves")


def cave_arrays(seed, caves_=48, size=12, classes=4):
    """The caves' edges, features and classes."""
    g = torch.Generator().manual_seed(seed)
    members = torch.arange(caves_ * size).view(caves_, size)
    src, dst = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    keep = src != dst
    edges = torch.cat([torch.stack([m[src[keep]], m[dst[keep]]]) for m in members], dim=1)
    ring = torch.stack([members[:, 0], members.roll(1, 0)[:, 1]])
    edges = torch.cat([edges, ring, ring.flip(0)], dim=1)
    y = (torch.arange(caves_) % classes).repeat_interleave(size)
    x = torch.nn.functional.one_hot(y, classes).float() + torch.randn(y.numel(), classes, generator=g) * 1.5
    return edges, x, y


@hookimpl
def register_commands(cli):
    @cli.command(name="example-summary")
    @click.argument("run", type=click.Path(exists=True, file_okay=False))
    def summary(run):
        """One line per epoch of a finished run (from its results.json)."""
        results = json.loads((Path(run) / "results.json").read_text())
        for row in results["history"]:
            click.echo(f"epoch {row['epoch'] + 1:>3}  loss {row['loss']:.4f}  val_acc {row['val_acc']:.4f}")
        click.echo(f"test_acc {results['metrics']['test_acc']:.4f} (evaluation: {results['eval']['final']})")
