"""The heterogeneous .npz format: typed keys read into a graph both tasks can use, and every
mistake a user can make in such a file refused in one line naming the array."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import gnnbridge

from gnnbridge.core.app.preflight import for_task
from gnnbridge.core.config import from_dict
from gnnbridge.core.errors import ConfigError, DataError
from gnnbridge.core.interfaces import LoaderConfig
from gnnbridge.plugins.datasets import load_npz

USERS, ITEMS = 30, 20


def arrays(**changes) -> dict:
    rng = np.random.default_rng(0)
    buys = np.stack([np.repeat(np.arange(USERS), 4), rng.integers(0, ITEMS, USERS * 4)]).astype(np.int64)
    out = {
        "num_nodes__user": np.array([USERS], dtype=np.int64),
        "x__item": rng.normal(size=(ITEMS, 5)).astype(np.float32),
        "y__item": (np.arange(ITEMS) % 3).astype(np.int64),
        "edge_index__user__buys__item": buys,
    }
    out.update(changes)
    return {k: v for k, v in out.items() if v is not None}


def load(tmp_path, task: str, **changes):
    path = tmp_path / "shop.npz"
    np.savez(path, **arrays(**changes))
    config = from_dict({"task": task, "dataset": {"name": "npz", "path": str(path), "reverse_edges": True}})
    return for_task(config, load_npz(LoaderConfig.of(config.dataset, "class"), 0))


def test_one_file_serves_node_classification_and_link_prediction(tmp_path):
    node = load(tmp_path, "node")
    assert node.target_node == "item" and node.num_classes == 3 and node.num_nodes == {"user": USERS, "item": ITEMS}
    assert set(node.edge_types) == {("user", "buys", "item"), ("item", "rev_buys", "user")}
    assert node.feature_dims() == {"user": 0, "item": 5}
    link = load(tmp_path, "link")
    assert link.target_edge == ("user", "buys", "item") and link.reverse_edge == ("item", "rev_buys", "user")


def test_held_out_edges_in_the_file_are_the_split_and_leave_message_passing(tmp_path):
    val = np.array([[0, 1], [0, 1]], dtype=np.int64)
    test = np.array([[2, 3], [2, 3]], dtype=np.int64)
    buys = np.concatenate([arrays()["edge_index__user__buys__item"], val, test], axis=1)
    data = load(
        tmp_path,
        "link",
        edge_index__user__buys__item=buys,
        val_edges__user__buys__item=val,
        test_edges__user__buys__item=test,
    )
    assert torch.equal(data.val_edges, torch.from_numpy(val)) and torch.equal(data.test_edges, torch.from_numpy(test))
    train = set(map(tuple, data.edge_index[("user", "buys", "item")].t().tolist()))
    assert not train & {(0, 0), (1, 1), (2, 2), (3, 3)}


@pytest.mark.parametrize(
    "changes, needle",
    [
        ({"edge_index__user__buys__shop": np.zeros((2, 1), dtype=np.int64)}, "'shop', which is not declared"),
        ({"edge_index__user__buys__item": np.array([[0], [99]], dtype=np.int64)}, "'item' node id 99, outside [0, 20)"),
        ({"x__item": np.zeros((20, 5), dtype=np.float64)}, "x__item has dtype float64; expected float32"),
        ({"weights__item": np.zeros(20, dtype=np.float32)}, "'weights__item' is not a key of the heterogeneous format"),
        ({"num_nodes__user": np.array([0], dtype=np.int64)}, "num_nodes__user must hold one positive count"),
        ({"num_nodes__item": np.array([7], dtype=np.int64)}, "num_nodes__item=7 but x__item has 20 rows"),
        ({"y__user": np.zeros(USERS, dtype=np.int64)}, "labels are given for 2 node types"),
        ({"train_idx__item": np.arange(5, dtype=np.int64)}, "give all of train_idx__item"),
        ({"val_edges__user__buys__item": np.zeros((2, 1), dtype=np.int64)}, "must name the same single edge type"),
    ],
)
def test_every_mistake_in_a_heterogeneous_file_is_one_line(tmp_path, changes, needle):
    with pytest.raises(DataError) as err:
        load(tmp_path, "node", **changes)
    assert needle in str(err.value) and "\n" not in str(err.value) and "shop.npz" in str(err.value)


def test_a_file_without_labels_cannot_train_a_node_task(tmp_path):
    with pytest.raises(ConfigError, match="has no node labels"):
        load(tmp_path, "node", y__item=None)


def test_an_out_of_range_held_out_id_is_refused_not_turned_into_another_pair(tmp_path):
    """(0, 25) with 20 items once became the key of user 1's item 5: checked before keys are made."""
    val = np.array([[0, 1], [0, 25]], dtype=np.int64)
    test = np.array([[2, 3], [2, 3]], dtype=np.int64)
    with pytest.raises(DataError) as err:
        load(tmp_path, "link", val_edges__user__buys__item=val, test_edges__user__buys__item=test)
    assert "'item' node id 25, outside [0, 20)" in str(err.value) and "val_edges" in str(err.value)
    assert "\n" not in str(err.value) and "shop.npz" in str(err.value)


def with_stores(tmp_path, stores: int) -> str:
    """The shop plus ``stores`` store nodes every user visits, to predict ``visits`` on."""
    path = tmp_path / "stores.npz"
    visits = np.stack([np.arange(USERS), np.arange(USERS) % stores]).astype(np.int64)
    np.savez(
        path, **arrays(num_nodes__store=np.array([stores], dtype=np.int64), edge_index__user__visits__store=visits)
    )
    return str(path)


def test_a_destination_type_of_one_node_is_refused_not_a_hang(tmp_path):
    """No other destination to draw a negative from: the redraw loop once ran forever here."""
    args = ("train", "--dataset", with_stores(tmp_path, 1), "--set", "task=link", "--set", "link.edge_type=visits")
    proc = gnnbridge(*args, cwd=tmp_path, timeout=120)
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1, proc.stderr
    assert "needs at least 2 'store' nodes to draw negatives; the graph has 1" in proc.stderr


def test_three_destinations_rank_each_held_out_edge_among_all_others_once(tmp_path, capsys):
    config = from_dict(
        {
            "task": "link",
            "dataset": {"name": "npz", "path": with_stores(tmp_path, 3)},
            "link": {"edge_type": "visits", "eval_negatives": 100, "hits_at": 3},
        }
    )
    data = for_task(config, load_npz(LoaderConfig.of(config.dataset, "class"), 0))
    for edges, negatives in (data.held_out("val"), data.held_out("test")):
        assert negatives.shape == (edges.shape[1], 2)  # every other store, once
        assert torch.equal(
            torch.sort(torch.cat([negatives, edges[1:].t()], dim=1)).values, torch.arange(3).expand(edges.shape[1], 3)
        )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "link.eval_negatives=100 but (user,visits,store) has 3 'store' nodes" in err


@pytest.mark.parametrize(
    "setting, needle",
    [
        (
            "link.negatives=5",
            "link.negatives=5 but (user,visits,store) has 3 'store' nodes, so 2 possible negative(s) "
            "per edge; use link.negatives=2 or fewer.",
        ),
        ("link.hits_at=10", "link.hits_at=10 but (user,visits,store) has 3 'store' nodes"),
    ],
)
def test_more_negatives_or_hits_than_a_destination_type_allows_are_refused(tmp_path, refused, setting, needle):
    proc = refused(
        "train",
        "--dataset",
        with_stores(tmp_path, 3),
        "--set",
        "task=link",
        "--set",
        "link.edge_type=visits",
        "--set",
        setting,
        "--set",
        "train.epochs=1",
    )
    assert proc.returncode != 0 and needle in proc.stderr and proc.stderr.count("Error:") == 1, proc.stderr
    assert not (tmp_path / "runs").exists()
