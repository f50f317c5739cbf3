"""A target of the plugin's own: ``target=count`` predicts a count per item (Poisson regression).

The model's output is the log of the expected count; the loss is the Poisson negative log-
likelihood, and the metrics are the mean Poisson deviance (lower is better, so the best epoch
is the lowest) and the mean absolute error of the expected count. Both are sums, so every rank
adds its own and one all-reduce makes them exact.
"""

import torch
import torch.nn.functional as F

from gnnbridge.core.interfaces import Target


class CountScores:
    def __init__(self):
        self.sums = torch.zeros(3, dtype=torch.float64)  # deviance, |count - rate|, items

    def update(self, outputs, y):
        rate, y = outputs.detach().double().view(-1).exp().cpu(), y.detach().double().view(-1).cpu()
        deviance = 2 * (torch.xlogy(y, y / rate) - (y - rate))
        self.sums += torch.stack([deviance.sum(), (y - rate).abs().sum(), torch.tensor(float(y.numel()))])

    def reduce(self, ctx):
        self.sums = ctx.all_reduce_sum(self.sums)
        return self

    def as_metrics(self, prefix):
        deviance, absolute, items = self.sums.tolist()
        return {f"{prefix}_deviance": deviance / max(1.0, items), f"{prefix}_count_mae": absolute / max(1.0, items)}


class CountTarget(Target):
    name = "count"
    description = "a count per item: Poisson regression of its log-rate (deviance, MAE of the count)"
    labels = "regression"  # y float32 [items], read and checked as regression targets are
    losses = ("poisson",)
    monitors = ("val_deviance", "val_count_mae")
    lower_is_better = ("deviance", "count_mae")

    def loss(self, outputs, y, name):
        y = y.view(-1)
        return F.poisson_nll_loss(outputs.view(-1).float(), y, log_input=True, reduction="sum"), y.new_tensor(y.numel())

    def running(self, width, device):
        return torch.zeros(2, dtype=torch.float64, device=device)  # |count - rate|, items

    def add_running(self, sums, outputs, y):
        rate = outputs.detach().view(-1).double().exp()
        sums += torch.stack([(y.view(-1).double() - rate).abs().sum(), sums.new_tensor(y.numel())])

    def running_metrics(self, sums, prefix):
        absolute, items = sums.tolist()
        return {f"{prefix}_count_mae": absolute / max(1.0, items)}

    def scores(self, width):
        return CountScores()

    def derived(self, items, width):
        return {"rate": (torch.exp, torch.float32, (items, width))}


def counts(config, seed):
    """The caves graph with a count per node: Poisson draws whose rate its cave's group sets."""
    from gnnbridge.core.interfaces import GraphData, random_split
    from gnnbridge_example_plugin import cave_arrays

    edges, x, groups = cave_arrays(seed)
    g = torch.Generator().manual_seed(seed)
    y = torch.poisson(torch.tensor([0.5, 2.0, 5.0, 9.0])[groups], generator=g)
    return GraphData.from_edges(edges, x, y, *random_split(y.numel(), seed), name="example-counts")
