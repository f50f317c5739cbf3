"""Which seeds each rank trains on in an epoch, and the random streams keyed on (seed, epoch, rank).

All ranks draw the same permutation from ``(seed, epoch)``, take disjoint contiguous shards that
cover every seed, and split their shard into the *same number of batches* on every rank. Equal
counts are what keep DDP's all-reduces paired: an uneven split (4097 seeds, batch 1024, 2 ranks
gives 3 batches on one rank and 2 on the other with naive chunking) hangs the job on the last
step. ``DistributedSampler`` pads with duplicates instead, which makes metrics inexact.
"""

from __future__ import annotations

import torch

from gnnbridge.core.errors import ConfigError

# Training negatives of link batches draw from a stream of their own, apart from the neighbour
# draws, so core's sampler and DGL's draw the same negatives for the same batches (their
# neighbour draws differ in number), and a change to one sampler cannot move the other's.
NEGATIVES_STREAM = 5


def derived_seed(seed: int, epoch: int, rank: int = 0, stream: int = 0) -> int:
    """One integer seed per (seed, epoch, rank, stream), in [0, 2**31) so every library accepts it."""
    return (seed * 1_000_003 + epoch * 10_007 + rank * 101 + stream * 7) % (2**31 - 1)


def epoch_generator(seed: int, epoch: int, rank: int = 0, stream: int = 0) -> torch.Generator:
    """A CPU generator for (seed, epoch, rank, stream): same inputs, same numbers, any process."""
    return torch.Generator().manual_seed(derived_seed(seed, epoch, rank, stream))


def num_batches(num_seeds: int, batch_size: int, world_size: int) -> int:
    """Batches every rank runs per epoch: enough that no rank's batch exceeds ``batch_size``."""
    per_rank = -(-num_seeds // world_size)
    return max(1, -(-per_rank // batch_size))


# An epoch of fewer optimizer steps per rank than this is named before training. One step per
# epoch is the measured trap: the GIN tutorial's own collection (120 graphs per rank, batch 256)
# ended at test accuracy 0.47 after 8 epochs, while 2 steps per epoch (batch 64) reached 1.0, and
# so did 16 one-step epochs: what counts is the updates in all, and few steps per epoch make an
# experiment's epochs too few. BatchNorm's running statistics move once per step (momentum 0.1),
# so 8 one-step epochs leave 43% of their starting values in what evaluation reads. 3, not more:
# karate-sage, the smallest built-in experiment, trains well in 3 steps per epoch, and a warning
# on a built-in would teach users to ignore it.
FEW_STEPS = 3


def few_steps(
    num_seeds: int, batch_size: int, world_size: int, max_batches: int = 0, item: str = "item", norms: bool = False
) -> str | None:
    """A one-line warning when an epoch is fewer than :data:`FEW_STEPS` optimizer steps per rank
    and a smaller ``train.batch_size`` would give more; None otherwise. Not when
    ``train.max_batches`` asks for fewer steps itself, nor when each rank holds too few items
    for any batch size to reach :data:`FEW_STEPS` (then the split, or --nproc, is the lever).
    ``norms``: the model has BatchNorm layers, whose running statistics the line names too."""
    if max_batches and max_batches < FEW_STEPS:
        return None
    steps = num_batches(num_seeds, batch_size, world_size)
    per_rank = -(-num_seeds // world_size)
    enough = per_rank // FEW_STEPS  # the largest batch size that gives FEW_STEPS steps or more
    if steps >= FEW_STEPS or enough < 1:
        return None
    what = "the weights and BatchNorm's running statistics are" if norms else "the weights are"
    return (
        f"an epoch is {steps} optimizer step{'s' if steps > 1 else ''} per rank ({per_rank} {item}s per rank, "
        f"train.batch_size={batch_size}), so {what} updated {'once' if steps == 1 else f'{steps} times'} an epoch "
        f"and may not settle; use --set train.batch_size={enough} or smaller for {FEW_STEPS} or more steps an epoch."
    )


def rank_shard(
    seeds: torch.Tensor, seed: int, epoch: int, rank: int, world_size: int, shuffle: bool = True
) -> torch.Tensor:
    """This rank's disjoint share of ``seeds`` for ``epoch``; all shards together cover ``seeds``."""
    if seeds.numel() < world_size:
        raise ConfigError(
            f"{seeds.numel()} seeds cannot be shared by {world_size} ranks; "
            f"use --nproc {max(1, seeds.numel())} or fewer."
        )
    if shuffle:
        perm = torch.randperm(seeds.numel(), generator=epoch_generator(seed, epoch))
        seeds = seeds[perm.to(seeds.device)]
    return torch.tensor_split(seeds, world_size)[rank]


def epoch_batches(
    seeds: torch.Tensor, batch_size: int, seed: int, epoch: int, rank: int, world_size: int, shuffle: bool = True
) -> list[torch.Tensor]:
    """This rank's batches for ``epoch``: the same count on every rank, none larger than ``batch_size``."""
    shard = rank_shard(seeds, seed, epoch, rank, world_size, shuffle)
    count = num_batches(seeds.numel(), batch_size, world_size)
    return list(torch.tensor_split(shard, count))


def split_batches(
    data, split: str, batch_size: int, seed: int, epoch: int, ctx, shuffle: bool = True
) -> list[torch.Tensor]:
    """This rank's batches of ``data``'s ``split`` for ``epoch``, the same count on every rank:
    a share of the whole split, or, on a machine's part of a partitioned graph, a share of the
    machine's own members (:func:`machine_batches`)."""
    part = data.partition
    if part is None:
        return epoch_batches(data.split(split), batch_size, seed, epoch, ctx.rank, ctx.world_size, shuffle)
    return machine_batches(
        data.split(split), part.split_counts[split], batch_size, seed, epoch, ctx.local_rank, ctx.local_world_size,
        shuffle,
    )  # fmt: skip


def machine_batches(
    seeds: torch.Tensor,
    counts: list[int],
    batch_size: int,
    seed: int,
    epoch: int,
    local_rank: int,
    local_world: int,
    shuffle: bool = True,
) -> list[torch.Tensor]:
    """This rank's batches of its machine's ``seeds`` (every machine ``m`` holds ``counts[m]``):
    the ranks of a machine share its seeds, and every rank of the job runs as many batches, the
    most any machine needs, none larger than ``batch_size``; a machine with fewer seeds runs
    smaller batches, some possibly empty (each still joins the exchanges and DDP's all-reduce)."""
    total = machine_steps(counts, batch_size, local_world)
    if shuffle:
        generator = epoch_generator(seed, epoch)
        seeds = seeds[torch.randperm(seeds.numel(), generator=generator).to(seeds.device)]
    shard = torch.tensor_split(seeds, local_world)[local_rank]
    return list(torch.tensor_split(shard, total))


def machine_steps(counts: list[int], batch_size: int, local_world: int) -> int:
    """Batches every rank of a partitioned graph's job runs to cover its share of its machine's
    items (machine ``m`` holding ``counts[m]``, shared by ``local_world`` ranks): the most any
    machine needs, so every rank joins every batch's exchanges."""
    return max(num_batches(c, batch_size, local_world) for c in counts)


# --------------------------------------------------------------------------- neighbour sampling
