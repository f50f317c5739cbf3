import os

import pytest
from helpers import REPO

from gnnbridge.core.app.resolve import resolve_config
from gnnbridge.core.config import ExperimentConfig, SamplerKind, Task, apply_overrides, from_dict, parse_override
from gnnbridge.core.errors import ConfigError


def test_override_values_are_yaml():
    assert parse_override("sampler.fanouts=[25,10]") == (["sampler", "fanouts"], [25, 10])
    assert parse_override("train.lr=0.01") == (["train", "lr"], 0.01)
    assert parse_override("model.arch=gat") == (["model", "arch"], "gat")


def test_exponent_floats_without_a_dot_are_numbers():
    # YAML 1.1 reads 1e-3 as a string; a learning rate is what every user means by it.
    assert from_dict({"train": {"lr": "1e-3", "weight_decay": "5E-4"}}).train.lr == 0.001
    with pytest.raises(ConfigError, match="expected float"):
        from_dict({"train": {"lr": "fast"}})


def test_overrides_build_nested_sections_without_touching_input():
    base = {"model": {"arch": "sage"}}
    out = apply_overrides(base, ["model.hidden=128", "train.epochs=3"])
    assert out == {"model": {"arch": "sage", "hidden": 128}, "train": {"epochs": 3}}
    assert base == {"model": {"arch": "sage"}}


def test_defaults_validate_and_round_trip():
    cfg = from_dict({})
    assert isinstance(cfg, ExperimentConfig)
    assert from_dict(cfg.to_dict()) == cfg
    assert from_dict({"sampler": {"kind": "core"}}).sampler.kind == SamplerKind.CORE.value


@pytest.mark.parametrize(
    "data, needle",
    [
        ({"modle": {}}, "did you mean 'model'"),
        ({"model": {"hiden": 3}}, "Unknown config key 'model.hiden' (did you mean 'hidden'?)"),
        ({"model": {"hidden": "big"}}, "model.hidden='big' has the wrong type: expected int"),
        (
            {"model": {"hidden": 0}},
            "model.hidden=0 is out of range; expected a positive integer, e.g. model.hidden=64.",
        ),
        ({"train": {"batch_size": 0}}, "train.batch_size=0"),
        ({"sampler": {"fanouts": [10, 0]}}, "-1 for all neighbours"),
        ({"sampler": {"fanouts": [10]}}, "one fanout per layer"),
        ({"sampler": {"kind": " "}}, "sampler.kind is empty"),
        ({"model": {"arch": ""}}, "model.arch is empty"),
        ({"model": {"options": {"not a name": 1}}}, "model.options has the key 'not a name'"),
        ({"model": {"dropout": 1.5}}, "model.dropout=1.5"),
        ({"train": {"lr": 0}}, "train.lr=0"),
        (
            {"eval": {"layer_store": "dsk"}},
            "eval.layer_store='dsk' is not a place for layer outputs (did you mean 'disk'?)",
        ),
        (
            {"placement": {"tables": "node"}},
            "placement.tables='node' is not supported; choose one of: machine, rank.",
        ),
    ],
)
def test_bad_configs_name_the_key_and_value(data, needle):
    with pytest.raises(ConfigError) as err:
        from_dict(data)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_resolve_config_layers_experiment_dataset_overrides_and_flags(tmp_path):
    path = tmp_path / "my.yaml"
    path.write_text("model:\n  arch: gcn\ntrain:\n  epochs: 4\n")
    cfg = resolve_config(
        str(path), overrides=["train.epochs=5", "model.arch=gat"], backend="dgl", nproc=2, dataset="graph.npz"
    )
    assert (cfg.name, cfg.backend, cfg.nproc, cfg.train.epochs, cfg.model.arch) == ("my", "dgl", 2, 5, "gat")
    assert (cfg.dataset.name, cfg.dataset.path) == ("npz", os.path.abspath("graph.npz"))  # absolute: resumable anywhere


def test_another_dataset_keeps_how_the_experiment_uses_a_graph_but_not_which_graph_it_names(tmp_path):
    """``--dataset`` replaces the experiment's graph (its name, path and options) but keeps its
    reverse edges and partitions: a link experiment on a folder of one's own still adds the
    reverse relations its users need to receive messages."""
    path = tmp_path / "rec.yaml"
    path.write_text("task: link\ndataset:\n  name: rec-synthetic\n  options: {num_users: 100}\n  reverse_edges: true\n")
    cfg = resolve_config(str(path), dataset="my-rec.npz", overrides=["dataset.partitions=2"])
    assert (cfg.dataset.name, cfg.dataset.options, cfg.dataset.reverse_edges, cfg.dataset.partitions) == (
        "npz", {}, True, 2
    )  # fmt: skip
    cfg = resolve_config(str(path), dataset="my-rec.npz", overrides=["dataset.reverse_edges=false"])
    assert cfg.dataset.reverse_edges is False  # --set still has the last word
    assert resolve_config("rec-synthetic", dataset="my-rec.npz").dataset.reverse_edges is True  # a built-in one
    path.write_text("dataset:\n  name: folder\n  path: big\n  partitions: 2\n")
    folder = tmp_path / "other"
    folder.mkdir()
    assert resolve_config(str(path), dataset=str(folder)).dataset.partitions == 2
    assert resolve_config(str(path), dataset="small.npz").dataset.partitions == 0  # a file is read whole


def test_named_and_default_experiments_resolve():
    assert resolve_config(None).name == "sage-synthetic"
    assert resolve_config("gat-synthetic").model.arch == "gat"


def test_bad_yaml_file_is_one_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        resolve_config(str(path))


def test_graph_task_needs_no_fanouts_and_checks_pooling():
    config = from_dict({"task": "graph", "model": {"arch": "gin", "layers": 3, "pooling": "mean"}})
    assert config.task == "graph" and config.kind is Task.GRAPH and config.sampler.fanouts == [10, 10]
    with pytest.raises(ConfigError, match="model.pooling='max' is not supported"):
        from_dict({"task": "graph", "model": {"pooling": "max"}})


def test_a_task_kind_takes_its_own_defaults_for_the_keys_a_config_does_not_give(tmp_path):
    """Graph tasks pool by the mean and drop nothing, link tasks step at 0.001 without dropout,
    node and edge tasks keep the schema's; whatever a config gives (its file, --set) is kept, and
    a run's config.yaml (every key written) loads as it was."""
    for task, dropout, pooling, lr in (
        ("node", 0.5, "sum", 0.01),
        ("edge", 0.5, "sum", 0.01),
        ("graph", 0.0, "mean", 0.01),
        ("link", 0.0, "sum", 0.001),
    ):
        config = resolve_config(overrides=[f"task={task}"])  # the default experiment, as --set task=... gives it
        assert (config.model.dropout, config.model.pooling, config.train.lr) == (dropout, pooling, lr), task
        assert from_dict(config.to_dict()) == config
    given = resolve_config(overrides=["task=graph", "model.dropout=0.5", "model.pooling=sum"])
    assert (given.model.dropout, given.model.pooling) == (0.5, "sum")
    path = tmp_path / "graphs.yaml"
    path.write_text("task: graph\nmodel:\n  arch: gin\n  dropout: 0.25\n")
    from_file = resolve_config(str(path))
    assert (from_file.model.dropout, from_file.model.pooling) == (0.25, "mean")
    assert resolve_config("gin-synthetic").model.pooling == "sum"  # an experiment that names its readout keeps it
    assert resolve_config(overrides=["task=link", "train.lr=0.01"]).train.lr == 0.01
    assert resolve_config().model.dropout == 0.5 and resolve_config().train.lr == 0.01  # the default experiment


def test_regression_scaling_is_a_key_of_regression_alone():
    assert from_dict({"target": "regression", "train": {"target_scaling": "none"}}).train.target_scaling == "none"
    with pytest.raises(ConfigError) as err:
        from_dict({"target": "multilabel", "train": {"target_scaling": "none"}})
    assert str(err.value) == (
        "train.target_scaling='none' applies to target=regression only, but it is 'multilabel'; drop "
        "train.target_scaling (its default is 'standard') or set target=regression."
    )
    with pytest.raises(ConfigError, match="train.target_scaling='minmax' is not a target scaling"):
        from_dict({"target": "regression", "train": {"target_scaling": "minmax"}})


@pytest.mark.parametrize("name", ["my-experiment.yaml", "my-graph-experiment.yaml"])
def test_example_experiment_files_resolve(name):

    path = REPO / "examples" / name
    config = resolve_config(str(path))
    assert config.name == path.stem and config.description


def test_link_protocol_and_several_hits_at_k():
    """OGB-style evaluation by config: the protocol is a choice, Hits@K takes one K or several,
    and the monitor may name any of them (or val_mrr, where the protocol reports it)."""
    config = from_dict(
        {
            "task": "link",
            "link": {"protocol": "shared", "eval_negatives": 1000, "hits_at": [20, 50, 100]},
            "train": {"monitor": "val_hits@50"},
        }
    )
    assert config.link.ks == [20, 50, 100] and config.train.monitor == "val_hits@50"
    assert from_dict(config.to_dict()) == config
    assert from_dict({"task": "link"}).link.ks == [10] and from_dict({"task": "link"}).link.protocol == "per-edge"
    assert from_dict({"task": "link", "train": {"monitor": "val_mrr"}}).link.monitors() == (
        "val_roc_auc",
        "val_mrr",
        "val_hits",
        "val_hits@10",
    )


@pytest.mark.parametrize(
    "link, train, needle",
    [
        (
            {"protocol": "ogb"},
            {},
            "link.protocol='ogb' is not an evaluation protocol; choose one of: per-edge, shared.",
        ),
        ({"protocol": "shard"}, {}, "(did you mean 'shared'?)"),
        ({"hits_at": []}, {}, "link.hits_at=[] is empty; give at least one item, e.g. link.hits_at=[20,50,100]."),
        ({"hits_at": [5, 5]}, {}, "link.hits_at=[5, 5] repeats 5; give each once, e.g. link.hits_at=[20,50,100]."),
        ({"hits_at": [5, 0]}, {}, "link.hits_at=[5, 0] has 0; expected each item to be a positive integer"),
        ({"hits_at": [5, "a"]}, {}, "link.hits_at[1]='a' has the wrong type: expected int"),
        ({"hits_at": "x"}, {}, "link.hits_at='x' has the wrong type: expected int or a list of them, got str"),
        ({"hits_at": 102}, {}, "link.hits_at=102 exceeds the 101 candidates each evaluation edge is ranked among"),
        ({"protocol": "shared", "hits_at": [50, 101]}, {}, "exceeds the 100 shared negatives each split is scored"),
        ({"protocol": "shared"}, {"monitor": "val_mrr"}, "val_mrr does not score task=link with link.protocol=shared"),
        (
            {"hits_at": [20, 50]},
            {"monitor": "val_hits@10"},
            "choose one of: val_roc_auc, val_mrr, val_hits, val_hits@20",
        ),
        ({}, {"monitor": "val_hits@x"}, "train.monitor='val_hits@x' is not a validation metric"),
    ],
)
def test_bad_link_evaluation_configs_are_one_line_naming_the_choices(link, train, needle):
    with pytest.raises(ConfigError) as err:
        from_dict({"task": "link", "link": link, "train": train})
    assert needle in str(err.value) and "\n" not in str(err.value)
