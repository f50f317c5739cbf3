"""Built-in heterogeneous datasets that need no download, and the heterogeneous ``.npz`` format.

* ``rec-synthetic``: a learnable recommendation graph. Users have hidden taste vectors and no
  features; items have a latent vector near their category's and features that are a noisy
  view of it; each user buys the items their taste scores highest (with Gumbel noise, so
  purchases are drawn from a softmax over items, not fixed). Predicting ``(user, buys, item)``
  works only by learning tastes from purchases and matching them to item features.
* ``mag-synthetic``: papers (features, 6 topics), authors and venues (featureless), with
  ``writes``, ``published_in`` and ``cites`` edges mostly inside a topic; paper features alone
  are weakly informative, the neighbourhood through authors and venues tells the topic.
* ``.npz`` with typed keys (``x__paper``, ``edge_index__author__writes__paper`` ...): read by
  :func:`gnnbridge.plugins.npz.load_hetero_npz` (the ``npz`` dataset), validated like the
  homogeneous format.

Loaders return a :class:`HeteroSource`; the task (``node`` or ``link``) decides the splits.
"""

from __future__ import annotations

import torch

from gnnbridge.core.contracts.hookspecs import hookimpl
from gnnbridge.core.errors import DataError
from gnnbridge.core.interfaces import DatasetConfig
from gnnbridge.core.records.hetero import HeteroSource
from gnnbridge.plugins.options import at_least, check_fits, options


@hookimpl
def register_datasets(register):
    register(
        "rec-synthetic",
        load_rec_synthetic,
        "Heterogeneous recommendation graph: users (hidden taste), items (features), categories; task=link "
        "predicts (user, buys, item)",
    )
    register(
        "mag-synthetic",
        load_mag_synthetic,
        "Heterogeneous citation graph: papers (features, 6 topics), authors, venues; task=node on papers",
    )


# --------------------------------------------------------------------------- rec-synthetic

REC_DEFAULTS = {
    "num_users": 2000,
    "num_items": 1000,
    "num_categories": 20,
    "purchases_per_user": 12,
    "num_features": 32,
    "taste_dim": 8,
    "feature_noise": 0.5,
    "temperature": 0.5,
}


def load_rec_synthetic(config: DatasetConfig, seed: int) -> HeteroSource:
    opts = options(config, REC_DEFAULTS)
    at_least("num_users", opts["num_users"], 3, "each split needs a purchase")
    at_least("num_categories", opts["num_categories"], 1, "every item has a category")
    at_least("num_items", opts["num_items"], max(2, opts["num_categories"]), "each category needs an item")
    at_least("purchases_per_user", opts["purchases_per_user"], 1, "users must buy something")
    at_least("num_features", opts["num_features"], 1, "items have features")
    at_least("taste_dim", opts["taste_dim"], 1, "tastes are vectors")
    if opts["purchases_per_user"] >= opts["num_items"]:
        raise DataError(
            f"dataset.options.purchases_per_user={opts['purchases_per_user']} must be below "
            f"num_items={opts['num_items']} (a user buys an item once)."
        )
    check_fits(
        "rec-synthetic",
        8 * opts["num_users"] * opts["num_items"]
        + 4 * opts["num_items"] * opts["num_features"]
        + 4
        * opts["taste_dim"]
        * (opts["num_users"] + 2 * opts["num_items"] + opts["num_categories"] + opts["num_features"]),
        "use smaller dataset.options (num_users x num_items scores are drawn at once, and a taste_dim vector "
        "for every user, item and feature)",
    )
    return rec_graph(**opts, seed=seed)


def rec_graph(
    num_users: int,
    num_items: int,
    num_categories: int,
    purchases_per_user: int,
    num_features: int,
    taste_dim: int,
    feature_noise: float,
    temperature: float,
    seed: int,
) -> HeteroSource:
    gen = torch.Generator().manual_seed(seed)
    category = torch.arange(num_items) % num_categories
    category = category[torch.randperm(num_items, generator=gen)]
    centroids = torch.randn(num_categories, taste_dim, generator=gen)
    latent = centroids[category] + 0.5 * torch.randn(num_items, taste_dim, generator=gen)
    taste = torch.randn(num_users, taste_dim, generator=gen)
    gumbel = -torch.log(-torch.log(torch.rand(num_users, num_items, generator=gen).clamp(1e-12, 1 - 1e-12)))
    bought = (taste @ latent.T / (temperature * taste_dim**0.5) + gumbel).topk(purchases_per_user, dim=1).indices
    users = torch.arange(num_users).repeat_interleave(purchases_per_user)
    view = torch.randn(taste_dim, num_features, generator=gen) / taste_dim**0.5
    x = latent @ view + feature_noise * torch.randn(num_items, num_features, generator=gen)
    edges = {
        ("user", "buys", "item"): torch.stack([users, bought.flatten()]),
        ("item", "in", "category"): torch.stack([torch.arange(num_items), category]),
    }
    return HeteroSource(
        {"user": num_users, "item": num_items, "category": num_categories},
        {"item": x.float()},
        edges,
        target_edge=("user", "buys", "item"),
        name="rec-synthetic",
    )


# --------------------------------------------------------------------------- mag-synthetic

MAG_DEFAULTS = {
    "num_papers": 3000,
    "num_authors": 1500,
    "num_venues": 30,
    "num_topics": 6,
    "num_features": 32,
    "authors_per_paper": 3,
    "citations_per_paper": 5,
    "homophily": 0.5,
    "feature_signal": 0.3,
}


def load_mag_synthetic(config: DatasetConfig, seed: int) -> HeteroSource:
    opts = options(config, MAG_DEFAULTS)
    at_least("num_topics", opts["num_topics"], 2, "classification needs two classes")
    at_least("num_papers", opts["num_papers"], 3 * opts["num_topics"], "every topic needs a paper in each split")
    for key in ("num_authors", "num_venues"):
        at_least(key, opts[key], opts["num_topics"], "each topic needs one")
    for key in ("num_features", "authors_per_paper", "citations_per_paper"):
        at_least(key, opts[key], 1, "papers need features, authors and citations")
    if not 0.0 <= opts["homophily"] <= 1.0:
        raise DataError(f"dataset.options.homophily={opts['homophily']} must be in [0, 1].")
    edges = opts["num_papers"] * (opts["authors_per_paper"] + opts["citations_per_paper"] + 1)
    check_fits(
        "mag-synthetic",
        4 * opts["num_papers"] * (opts["num_features"] + 16) + 8 * 8 * edges,
        "use smaller dataset.options (num_papers x (authors_per_paper + citations_per_paper) edges)",
    )
    return mag_graph(**opts, seed=seed)


def mag_graph(
    num_papers: int,
    num_authors: int,
    num_venues: int,
    num_topics: int,
    num_features: int,
    authors_per_paper: int,
    citations_per_paper: int,
    homophily: float,
    feature_signal: float,
    seed: int,
) -> HeteroSource:
    gen = torch.Generator().manual_seed(seed)
    topic = torch.randint(0, num_topics, (num_papers,), generator=gen)
    author_topic = torch.arange(num_authors) % num_topics
    venue_topic = torch.arange(num_venues) % num_topics

    def partner(count: int, topics_of: torch.Tensor, of: torch.Tensor) -> torch.Tensor:
        """For each entry of ``of`` (a topic), a member of the same topic w.p. homophily, else anyone."""
        same = torch.rand(of.numel(), generator=gen) < homophily
        per_topic = count // num_topics
        pick = of + num_topics * torch.randint(0, max(1, per_topic), (of.numel(),), generator=gen)
        return torch.where(same & (pick < count), pick, torch.randint(0, count, (of.numel(),), generator=gen))

    paper_rep = torch.arange(num_papers).repeat_interleave(authors_per_paper)
    writes = torch.stack([partner(num_authors, author_topic, topic[paper_rep]), paper_rep])
    published = torch.stack([torch.arange(num_papers), partner(num_venues, venue_topic, topic)])
    citing = torch.arange(num_papers).repeat_interleave(citations_per_paper)
    same = torch.rand(citing.numel(), generator=gen) < homophily
    by_topic = torch.argsort(topic, stable=True)
    start = torch.cat([torch.zeros(1, dtype=torch.int64), torch.bincount(topic, minlength=num_topics).cumsum(0)])
    t = topic[citing]
    size = (start[t + 1] - start[t]).clamp(min=1)
    cited_same = by_topic[
        (start[t] + (torch.rand(citing.numel(), generator=gen) * size).long()).clamp(max=num_papers - 1)
    ]
    cited = torch.where(same, cited_same, torch.randint(0, num_papers, (citing.numel(),), generator=gen))
    keep = cited != citing
    cites = torch.stack([citing[keep], cited[keep]])
    x = feature_signal * torch.randn(num_topics, num_features, generator=gen)[topic] + torch.randn(
        num_papers, num_features, generator=gen
    )
    edges = {
        ("author", "writes", "paper"): writes,
        ("paper", "published_in", "venue"): published,
        ("paper", "cites", "paper"): cites,
    }
    return HeteroSource(
        {"paper": num_papers, "author": num_authors, "venue": num_venues},
        {"paper": x.float()},
        edges,
        target_node="paper",
        y=topic,
        name="mag-synthetic",
    )
