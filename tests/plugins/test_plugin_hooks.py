"""The plugin contract: models, samplers and commands from plugins, a model by import path, PyG's
zoo by name, and a broken plugin always named in one line (never a hang, never a wrong run)."""

import json
import re
import sys

import helpers
import pytest
import torch
import yaml
from torch import nn

import gnnbridge
from gnnbridge import hookimpl
from gnnbridge.core import errors, plugins
from gnnbridge.core.config import ModelSpec, Task
from gnnbridge.core.errors import ConfigError, GnnBridgeError
from gnnbridge.core.interfaces import NodeFamily
from gnnbridge.core.plugins import manager
from gnnbridge.core.records.batches import SampledSubgraph
from gnnbridge.core.sampling.neighbors import NeighborSampler
from gnnbridge.testing import registered_plugin
from gnnbridge.testing.conformance import small_graph

KARATE = dict(backend="pyg", nproc=1, progress=False)


class Linear(nn.Module):
    """The smallest model: no message passing, so one builder serves every backend."""

    def __init__(self, in_dim, out_dim, hidden=8):
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim)

    def forward(self, graph, x):
        return self.lin(x)


class SkipFirstNeighbour:
    """A backend-neutral sampler: core's, with a configurable off-by-one bug."""

    def __init__(self, store, fanouts, shift=0, dtype=torch.long, merge_hops=False):
        self.inner = NeighborSampler(store.data.indptr, store.data.indices, fanouts)
        self.shift, self.dtype, self.merge_hops = shift, dtype, merge_hops

    def sample(self, seeds, generator):
        sub = self.inner.sample(seeds, generator)
        nodes, edges = sub.num_sampled_nodes, sub.num_sampled_edges
        if self.merge_hops:  # every hop reported as one: the counts add up, the hops do not match the fanouts
            nodes, edges = [nodes[0], sum(nodes[1:])], [sum(edges)]
        return SampledSubgraph(
            (sub.node + self.shift * (sub.node >= 0)).to(self.dtype),
            sub.row,
            sub.col,
            sub.edge,
            nodes,
            edges,
            sub.batch_size,
        )


class ModelsAndSamplers:
    @hookimpl
    def register_models(self, register):
        register("tiny-linear", Linear, tasks=["node"], description="a linear map")
        register("pyg-only", {"pyg": Linear})
        register("wrong-shape", lambda in_dim, out_dim: Linear(in_dim, out_dim + 1))

    @hookimpl
    def register_samplers(self, register):
        register("neutral", lambda store, fanouts: SkipFirstNeighbour(store, fanouts))
        register("off-by-many", lambda store, fanouts: SkipFirstNeighbour(store, fanouts, shift=10**6))
        register("float-ids", lambda store, fanouts: SkipFirstNeighbour(store, fanouts, dtype=torch.float32))
        register("int32-ids", lambda store, fanouts: SkipFirstNeighbour(store, fanouts, dtype=torch.int32))
        register("one-hop", lambda store, fanouts: SkipFirstNeighbour(store, fanouts, merge_hops=True))


@pytest.fixture
def plugin():
    with registered_plugin(ModelsAndSamplers(), "lab") as p:
        yield p


@pytest.mark.parametrize("backend", ["pyg", "dgl"])
def test_a_plugin_model_and_a_neutral_plugin_sampler_train_on_both_backends(tmp_path, plugin, backend):
    results = gnnbridge.run(
        "karate-sage",
        backend=backend,
        nproc=1,
        progress=False,
        out=tmp_path / "r",
        overrides=["model.arch=tiny-linear", "sampler.kind=neutral", "train.epochs=2"],
    )
    assert results["eval"] == {
        "requested": "layerwise",
        "final": "full",
        "validation": "sampled",
        "note": "model 'tiny-linear' (plugin 'lab') has no layer_forward: evaluated on every seed's full neighbourhood",
    }
    assert results["sampler"] == "CheckedSampler" and 0 <= results["metrics"]["test_acc"] <= 1


def test_models_are_listed_by_task_and_backend(plugin):
    assert {"tiny-linear", "pyg-only", "sage", "GraphSAGE"} <= set(plugins.models.names("pyg", Task.NODE))
    assert "pyg-only" not in plugins.models.names("dgl") and "gin" in plugins.models.names("dgl", Task.GRAPH)
    with pytest.raises(
        ConfigError,
        match=r"^model.arch='pyg-only' \(plugin 'lab'\) is built only for backend pyg, "
        r"not 'dgl'; use --backend pyg",
    ):
        plugins.models.get("pyg-only", "dgl", Task.NODE)


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (
            ["model.arch=wrong-shape"],
            r"^model 'wrong-shape' \(plugin 'lab'\): forward returned shape \[\d+, 3\]; "
            r"expected logits of shape \[\d+, 2\]",
        ),
        (
            ["sampler.kind=off-by-many"],
            r"^sampler 'off-by-many' \(plugin 'lab'\) returned node id 100\d+, outside \[0, 34\)",
        ),
        (
            ["sampler.kind=float-ids"],
            r"^sampler 'float-ids' \(plugin 'lab'\) returned SampledSubgraph.node as a 1-D "
            r"float32 tensor from sample\(\); expected a 1-D int64 tensor",
        ),
        (
            ["sampler.kind=int32-ids"],
            r"^sampler 'int32-ids' \(plugin 'lab'\) returned SampledSubgraph.node as a 1-D "
            r"int32 tensor from sample\(\); expected a 1-D int64 tensor",
        ),
        (
            ["sampler.kind=one-hop"],
            r"^sampler 'one-hop' \(plugin 'lab'\) returned num_sampled_nodes=\[\d+, \d+\] and "
            r"num_sampled_edges=\[\d+\] from sample\(\) for 2 fanouts; expected 3 node counts",
        ),
    ],
)
def test_a_plugin_that_returns_nonsense_is_named_and_the_run_folder_is_removed(tmp_path, plugin, overrides, needle):
    with pytest.raises(plugins.PluginError, match=needle):
        gnnbridge.run("karate-sage", out=tmp_path / "r", overrides=overrides, **KARATE)
    assert not (tmp_path / "r").exists()


def test_taken_names_are_an_error_naming_both_plugins(plugin):
    class Again:
        @hookimpl
        def register_models(self, register):
            register("pyg-only", {"pyg": Linear})

    class OtherBackend:  # the same name for a backend nobody registered it for is fine
        @hookimpl
        def register_models(self, register):
            register("pyg-only", {"dgl": Linear})

    with registered_plugin(OtherBackend(), "elsewhere"):
        assert {c.backend for c in plugins.models.entries() if c.name == "pyg-only"} == {"pyg", "dgl"}
    with registered_plugin(Again(), "again"):
        with pytest.raises(
            plugins.PluginError,
            match="^Model 'pyg-only' for backend 'pyg' is registered twice "
            r"\(plugins 'lab' and 'again'\)",
        ):
            plugins.models.names()


@pytest.mark.parametrize(
    "args, needle",
    [
        (("", Linear), "invalid name ''"),
        (("x", "not callable"), "registered model 'x' with 'not callable'; give a callable"),
        (("x", Linear, ["edges"]), "tasks=['edges']; tasks are a list of: node, graph"),
    ],
)
def test_invalid_registrations_name_the_plugin(args, needle):
    class Bad:
        @hookimpl
        def register_models(self, register):
            name, build, *tasks = args
            register(name, build, tasks=tasks[0] if tasks else ["node"])

    with (
        registered_plugin(Bad(), "bad"),
        pytest.raises(plugins.PluginError, match=f"^Plugin 'bad' .*{re.escape(needle)}"),
    ):
        plugins.models.names()


@pytest.fixture
def loud(monkeypatch):
    """Warnings shown here, as in a launching process (not a rank)."""
    monkeypatch.delenv(plugins.ENV_WARNED, raising=False)
    monkeypatch.delenv("RANK", raising=False)


def test_a_plugin_that_raises_while_registering_is_left_out_with_a_warning(plugin, capsys, loud):
    class Raises:
        @hookimpl
        def register_datasets(self, register):
            register("raises-graph", lambda config, seed: None, "")

        @hookimpl
        def register_models(self, register):
            register("half-registered", Linear)
            raise ImportError("No module named 'lab_dependency'")

    with registered_plugin(Raises(), "raises"):
        assert "raises-graph" in plugins.datasets.names()
        assert "tiny-linear" in plugins.models.names()  # everything else keeps working
        assert "half-registered" not in plugins.models.names()  # and nothing of the plugin stays
        assert "raises-graph" not in plugins.datasets.names()
        assert [p["name"] for p in plugins.plugin_info()].count("raises") == 1
    assert capsys.readouterr().err == (
        "Warning: plugin 'raises' raised in register_models: ImportError: No module "
        "named 'lab_dependency'; it is left out (uninstall it, or exclude it with "
        "GNNBRIDGE_LOAD_PLUGINS).\n"
    )


def test_a_plugin_that_fails_to_import_or_misnames_a_hook_is_left_out_with_a_warning(capsys, loud):
    class Typo:
        @hookimpl
        def register_modles(self, register):
            pass

    manager._load_one("ghost", "ghost_plugin_pkg", lambda: __import__("ghost_plugin_pkg"))
    manager._load_one("typo", "typo:Typo", Typo)
    try:
        lines = capsys.readouterr().err.splitlines()
        assert lines == [
            "Warning: plugin 'ghost' (ghost_plugin_pkg) failed to load: ModuleNotFoundError: No module named "
            "'ghost_plugin_pkg'; it is left out (uninstall it, or exclude it with GNNBRIDGE_LOAD_PLUGINS).",
            "Warning: plugin 'typo' (typo:Typo) implements 'register_modles', which is not a gnnbridge hook (did you "
            "mean 'register_models'?); hooks: register_backends, register_commands, register_dataset_libraries, "
            "register_dataset_sources, register_datasets, register_experiments, register_graph_readers, "
            "register_loggers, register_models, register_samplers, register_tasks; it is left out "
            "(uninstall it, or exclude it with GNNBRIDGE_LOAD_PLUGINS).",
        ]
        errors = {p["name"]: p["error"] for p in plugins.plugin_info() if "error" in p}
        assert set(errors) == {"ghost", "typo"}
        assert plugins.pm.get_plugin("typo") is None and "sage" in plugins.models.names()
    finally:
        manager._failures.pop("ghost")
        manager._failures.pop("typo")


def test_a_plugin_is_judged_by_its_own_hooks_not_by_another_plugins_typo(capsys, loud):
    """A plugin registered without the load-time check (as registered_plugin does) whose hook is
    misspelt must not get the next, correct plugin left out in its place."""

    class Typo:
        @hookimpl
        def register_modles(self, register):
            pass

    class Fine:
        @hookimpl
        def register_models(self, register):
            register("fine-linear", Linear)

    with registered_plugin(Typo(), "unchecked-typo"):
        manager._load_one("fine", "fine:Fine", Fine)
        try:
            assert "fine-linear" in plugins.models.names()
            assert "Warning" not in capsys.readouterr().err
        finally:
            plugins.pm.unregister(name="fine")
            plugins.reset_registries()


LAB_MODULE = """
import torch
from torch import nn


class DeepMLP(nn.Module):
    def __init__(self, in_dim, out_dim, hidden=16, layers=2, scale=1.0):
        super().__init__()
        self.scale = scale
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))

    def forward(self, graph, x):
        return self.net(x) * self.scale
"""


@pytest.fixture
def lab(tmp_path, monkeypatch):
    (tmp_path / "my_lab").mkdir()
    (tmp_path / "my_lab" / "__init__.py").write_text("")
    (tmp_path / "my_lab" / "models.py").write_text(LAB_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("my_lab")]:
        del sys.modules[name]


def test_a_model_class_by_import_path_from_a_yaml_file_trains(lab):
    (lab / "exp.yaml").write_text(
        "model:\n  arch: my_lab.models:DeepMLP\n  hidden: 8\n  options: {scale: 0.5}\n"
        "train: {epochs: 2}\ndataset: {name: karate}\nsampler: {fanouts: [5, 5]}\n"
    )
    results = gnnbridge.run(str(lab / "exp.yaml"), out=lab / "run", **KARATE)
    assert results["eval"]["final"] == "full" and results["epochs_trained"] == 2
    from gnnbridge.core.inference import checkpoint

    state = checkpoint.load(checkpoint.path_in(lab / "run", "best"))
    assert state["config"]["model"]["options"] == {"scale": 0.5} and "net.0.weight" in state["model"]


@pytest.mark.parametrize(
    "arch, options, needle",
    [
        (
            "my_lab.models:DeepMLP",
            ["model.options.depth=3"],
            "model.options.depth is not a parameter of class "
            "'my_lab.models:DeepMLP'; its parameters: hidden, layers, scale.",
        ),
        ("my_lab.models:DeepMLP", ["model.options.hidden=3"], "model.options.hidden is set by model.hidden; remove it"),
        (
            "my_lab.models:Missing",
            [],
            "'Missing' is not a torch.nn.Module class in 'my_lab.models'; classes there: DeepMLP.",
        ),
        ("my_lab.nothing:Net", [], "module 'my_lab.nothing' cannot be imported (ModuleNotFoundError"),
        ("os:system", [], "'system' is not a torch.nn.Module class in 'os'"),
    ],
)
def test_import_path_mistakes_are_one_line(lab, arch, options, needle):
    with pytest.raises(ConfigError) as err:
        gnnbridge.run("karate-sage", out=lab / "run", overrides=[f"model.arch={arch}", *options], **KARATE)
    assert needle in str(err.value)
    assert not (lab / "run").exists()


def test_a_checkpoint_naming_code_is_imported_only_with_trust_code(lab):
    gnnbridge.run(
        "karate-sage", out=lab / "run", overrides=["model.arch=my_lab.models:DeepMLP", "train.epochs=1"], **KARATE
    )
    refusal = "importing code a checkpoint names runs it, so evaluate, predict, load and port do that only with"
    for call in (gnnbridge.evaluate, gnnbridge.load, gnnbridge.predict):  # from Python: the keyword
        with pytest.raises(ConfigError, match=re.escape(f"{refusal} trust_code=True.")):
            call(lab / "run")
    helpers.one_line(helpers.in_process("evaluate", "run", cwd=lab), f"{refusal} --trust-code.")  # the command's flag
    report = gnnbridge.evaluate(lab / "run", trust_code=True)
    assert 0 <= report["metrics"]["test_acc"] <= 1 and report["eval"]["final"] == "full"


@pytest.mark.parametrize("arch", ["GraphSAGE", "GCN", "GAT", "GIN", "PNA", "EdgeCNN"])
def test_pyg_zoo_models_trim_per_hop_and_compute_what_untrimmed_ones_do(arch):
    """Per-hop trimming is an optimisation, never a different function (GCN, normalised by
    in-batch degrees, is therefore never trimmed)."""
    from gnnbridge.core.models.build import build_model

    data = small_graph(seed=2)
    spec = ModelSpec(arch=arch, hidden=16, layers=3, dropout=0.0)
    model, _ = build_model(spec, "pyg", Task.NODE, data.num_features, data.num_classes, data)
    model.eval()
    assert model.trim == (arch != "GCN")
    sub = NeighborSampler(data.indptr, data.indices, [5, 3, 2]).sample(
        data.val_idx[:20], torch.Generator().manual_seed(0)
    )
    graph = gnnbridge.core.plugins.backends.get("pyg").from_sampled(sub)
    with torch.no_grad():
        trimmed = model(graph, data.x[sub.node])
        graph.num_sampled_nodes = graph.num_sampled_edges = None
        full = model(graph, data.x[sub.node])
    torch.testing.assert_close(trimmed, full, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "arch, task_args",
    [
        ("PNA", ["karate-sage"]),
        ("GAT", ["karate-sage", "model.options.v2=true", "model.options.heads=2"]),
        ("GIN", ["gin-synthetic"]),
        ("GraphSAGE", ["karate-sage", "model.options.aggr=max"]),
    ],
)
def test_pyg_zoo_models_train_by_name_with_their_options(tmp_path, arch, task_args):
    experiment, *options = task_args
    results = gnnbridge.run(
        experiment, out=tmp_path / "r", overrides=[f"model.arch={arch}", "train.epochs=1", *options], **KARATE
    )
    assert results["epochs_trained"] == 1


def test_full_neighbourhood_evaluation_is_exact_like_layerwise(tmp_path):
    runs = [
        gnnbridge.run("karate-sage", out=tmp_path / mode, overrides=["train.epochs=3", f"eval.mode={mode}"], **KARATE)
        for mode in ("layerwise", "full")
    ]
    assert [r["eval"]["final"] for r in runs] == ["layerwise", "full"]
    for key in ("train_acc", "val_acc", "test_acc"):
        assert runs[0]["metrics"][key] == runs[1]["metrics"][key]


class Commands:
    @hookimpl
    def register_commands(self, cli):
        import click

        @cli.command(name="lab-hello")
        @click.argument("who")
        def hello(who):
            """Say hello."""
            click.echo(f"hello {who}")

        @cli.command(name="train")
        def hijack():
            click.echo("hijacked")


def test_commands_come_from_plugins_and_never_replace_a_taken_name(capsys, loud):
    import click

    @click.group()
    def cli():
        pass

    @cli.command()
    def train():
        click.echo("the real train")

    class Later:
        @hookimpl
        def register_commands(self, cli):
            @cli.command(name="lab-hello")
            def other():
                click.echo("the later one")

    with registered_plugin(Commands(), "lab-commands"), registered_plugin(Later(), "later"):
        plugins.extend_cli(cli)
    assert cli.commands["train"].callback.__name__ == "train" and "lab-hello" in cli.commands
    assert capsys.readouterr().err == (
        "Warning: plugin 'lab-commands' adds a command 'train', which plugin 'gnnbridge' already has; the first one "
        "is kept.\nWarning: plugin 'later' adds a command 'lab-hello', which plugin 'lab-commands' already has; the "
        "first one is kept.\n"
    )
    from click.testing import CliRunner

    assert CliRunner().invoke(cli, ["lab-hello", "you"]).output == "hello you\n"


def test_models_and_samplers_commands_list_what_is_registered(tmp_path):
    out = helpers.gnnbridge("models", "--json", cwd=tmp_path)
    rows = json.loads(out.stdout)
    assert {
        "name": "sage",
        "backend": "dgl",
        "plugin": "dgl",
        "tasks": ["node", "link", "edge"],
        "heterogeneous": True,
        "description": "GraphSAGE, mean aggregation (SAGEConv; HeteroGraphConv on heterogeneous graphs)",
    } in rows
    hetero = {(r["name"], r["backend"]) for r in rows if r["heterogeneous"] and r["tasks"] == ["node", "link", "edge"]}
    assert {(m, b) for m in ("rgcn", "hgt") for b in ("pyg", "dgl")} <= hetero
    assert {
        "name": "gcn",
        "backend": "dgl",
        "plugin": "dgl",
        "tasks": ["node"],
        "heterogeneous": False,
        "description": "GCN normalised by full-graph degrees (GraphConv)",
    } in rows
    assert {r["name"] for r in rows if r["backend"] == "pyg"} >= {"GraphSAGE", "GCN", "GAT", "GIN", "PNA", "EdgeCNN"}


def test_a_checkpoint_from_before_model_options_still_evaluates_and_resumes():
    from gnnbridge.core.app.resolve import check_frozen
    from gnnbridge.core.config import ExperimentConfig

    new = ExperimentConfig().to_dict()
    old = {**new, "model": {k: v for k, v in new["model"].items() if k != "options"}}
    check_frozen(old, new, ("model",), "evaluate")  # a key the old config lacks counts as its default
    with pytest.raises(ConfigError, match=r"^model.options.scale=2 differs from the checkpoint's None"):
        check_frozen(old, {**new, "model": {**new["model"], "options": {"scale": 2}}}, ("model",), "evaluate")


BAD_MODULE = """
import torch
from torch import nn


class Unused(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim)
        self.spare = nn.Linear(in_dim, out_dim)

    def forward(self, graph, x):
        return self.lin(x)


class NanOnRankOne(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim)

    def forward(self, graph, x):
        return self.lin(x) * (float("nan") if torch.distributed.get_rank() == 1 else 1.0)


class RaisesOnRankOne(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim)

    def forward(self, graph, x):
        if torch.distributed.get_rank() == 1:
            raise ValueError("rank 1 is unhappy")
        return self.lin(x)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "cls, needle",
    [
        (
            "RaisesOnRankOne",
            "rank 1 failed: class 'my_lab.bad:RaisesOnRankOne' failed in its forward pass: ValueError: "
            "rank 1 is unhappy",
        ),
        (
            "NanOnRankOne",
            "rank 1 failed: class 'my_lab.bad:NanOnRankOne': forward returned NaN or infinite values on a "
            "small batch before training started",
        ),
        (
            "Unused",
            "class 'my_lab.bad:Unused' has parameters that take no part in the loss (spare.weight, spare.bias); "
            "DDP needs every parameter in every step",
        ),
    ],
)
def test_a_model_that_breaks_under_ddp_stops_every_rank_with_one_line(lab, cls, needle):
    """Never a hang: a peer waiting in a collective is stopped too, and nothing half-made stays."""
    (lab / "my_lab" / "bad.py").write_text(BAD_MODULE)
    with pytest.raises(GnnBridgeError) as err:
        gnnbridge.run(
            "karate-sage",
            backend="dgl",
            nproc=2,
            progress=False,
            out=lab / "run",
            timeout=60,
            overrides=[f"model.arch=my_lab.bad:{cls}"],
        )
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert not (lab / "run").exists()


def test_a_graph_model_that_forgets_to_pool_is_named(lab):
    (lab / "my_lab" / "nopool.py").write_text(
        "from torch import nn\n\nclass NoPool(nn.Module):\n"
        "    def __init__(self, in_dim, out_dim):\n        super().__init__()\n"
        "        self.lin = nn.Linear(in_dim, out_dim)\n\n"
        "    def forward(self, graph, x):\n        return self.lin(x)\n"
    )
    with pytest.raises(
        plugins.PluginError,
        match=r"returned shape \[\d+, 3\]; expected logits of shape \[\d+, 3\] "
        r"\(a row per graph \(pool the node states per graph\)",
    ):
        gnnbridge.run("gin-synthetic", out=lab / "run", overrides=["model.arch=my_lab.nopool:NoPool"], **KARATE)


def test_reserved_sampler_names_and_registries_used_during_import_are_refused(capsys, loud):
    class Native:
        @hookimpl
        def register_samplers(self, register):
            register("native", lambda store, fanouts: None)

    with (
        registered_plugin(Native(), "native-again"),
        pytest.raises(plugins.PluginError, match="^Plugin 'native-again' registered sampler 'native', a name"),
    ):
        plugins.samplers.names()
    loaded = manager._loaded
    manager._loaded = False  # as on first use: the plugin below uses a registry while it is imported
    try:
        with pytest.raises(
            plugins.PluginError,
            match="^Plugin 'eager' uses gnnbridge's registries while it is "
            "imported; use them inside its hooks instead.$",
        ):
            manager._load_one("eager", "eager", plugins.backends.names)
    finally:
        manager._loaded = loaded


def test_zoo_options_reach_the_pyg_model():
    """``model.options`` are the zoo class's own keyword arguments: GAT's heads change its weights."""
    from gnnbridge.core.models.build import build_model

    data = small_graph(seed=2)
    spec = ModelSpec(arch="GAT", hidden=16, layers=2, options={"heads": 4, "v2": True})
    model, _ = build_model(spec, "pyg", Task.NODE, data.num_features, data.num_classes, data)
    first = model.net.convs[0]
    assert type(first).__name__ == "GATv2Conv" and first.heads == 4


class PairFactorisation(nn.Module):
    """A heterogeneous link model without message passing: a vector per node (an embedding for a
    featureless type, a linear map of the features otherwise), scored by dot product."""

    def __init__(self, in_dim, out_dim, data, hidden=16):
        super().__init__()
        self.src, _, self.dst = data.target_edge
        self.inputs = nn.ModuleDict(
            {
                t: nn.Linear(w, hidden) if w else nn.Embedding(data.num_nodes[t], hidden)
                for t, w in in_dim.items()
                if t in (self.src, self.dst)
            }
        )

    def forward(self, graph, x, pairs):
        return (self.inputs[self.src](x[self.src])[pairs[0]] * self.inputs[self.dst](x[self.dst])[pairs[1]]).sum(-1)


class LinkModels:
    @hookimpl
    def register_models(self, register):
        register("pair-mf", PairFactorisation, tasks=["link"], heterogeneous=True, description="matrix factorisation")
        register("flat-link", Linear, tasks=["link"], description="claims link, builds for homogeneous graphs only")


@pytest.mark.parametrize("backend", ["pyg", "dgl"])
def test_a_plugin_link_model_trains_on_both_backends_and_a_homogeneous_one_is_refused(tmp_path, backend):
    small = ["dataset.options.num_users=300", "dataset.options.num_items=100", "train.epochs=2", "train.batch_size=64"]
    with registered_plugin(LinkModels(), "links"):
        results = gnnbridge.run(
            "rec-synthetic",
            backend=backend,
            nproc=1,
            progress=False,
            out=tmp_path / "r",
            overrides=["model.arch=pair-mf", *small],
        )
        assert (
            results["metrics"]["test_roc_auc"] > 0.5 and results["history"][1]["loss"] < results["history"][0]["loss"]
        )
        with pytest.raises(
            ConfigError, match="model 'flat-link' .plugin 'links'. is built for homogeneous graphs, but task=link"
        ):
            gnnbridge.run(
                "rec-synthetic",
                backend=backend,
                nproc=1,
                progress=False,
                out=tmp_path / "x",
                overrides=["model.arch=flat-link", *small],
            )
    assert not (tmp_path / "x").exists()


# ---------------------------------------------------------------- the output contract, before epoch 1


class Faulty(nn.Module):
    """A linear model whose ``forward`` or ``layer_forward`` breaks the output contract one way;
    ``train_calls`` counts training-mode forward passes (none: refused before epoch 1)."""

    train_calls = 0
    num_layers = 1

    def __init__(self, in_dim, out_dim, fault="", where="forward"):
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim)
        self.fault, self.where = fault, where

    def forward(self, graph, x):
        if self.training:
            Faulty.train_calls += 1
        out = self.lin(x)
        return self._break(out) if self.where == "forward" or (self.where == "training" and self.training) else out

    def layer_forward(self, i, graph, x):
        out = self.lin(x)
        return self._break(out) if self.where == "layer_forward" else out

    def _break(self, out):
        return {
            "rows": lambda: out[:1],
            "int64": lambda: out.long(),
            "nan": lambda: out * float("nan"),
            "device": lambda: out.to("meta"),
        }[self.fault]()


class FaultyModels:
    @hookimpl
    def register_models(self, register):
        register("faulty", Faulty, tasks=["node"])


@pytest.fixture
def faulty():
    Faulty.train_calls = 0
    with registered_plugin(FaultyModels(), "shop") as p:
        yield p


@pytest.mark.parametrize(
    "fault, where, needle",
    [
        ("int64", "forward", "forward returned int64 logits; expected floating-point logits"),
        ("nan", "forward", "forward returned NaN or infinite values on a small batch before training started"),
        (
            "device",
            "forward",
            "forward returned logits on meta, but the batch is on cpu; compute on the input's device",
        ),
        (
            "rows",
            "layer_forward",
            "layer_forward(0) returned 1 rows for a batch of 8 outputs; expected a 2-D tensor with "
            "one row per output node (8), or one per input node with the output nodes first",
        ),
        ("int64", "layer_forward", "layer_forward(0) returned int64 outputs; expected floating-point outputs"),
        (
            "nan",
            "layer_forward",
            "layer_forward(0) returned NaN or infinite values on a small batch before training started",
        ),
    ],
)
def test_a_model_that_breaks_its_output_contract_is_refused_before_the_first_epoch(
    tmp_path, faulty, fault, where, needle
):
    """One line naming the plugin's model and the method, before any training step: not a raw
    error from the loss, a divergence blamed on the learning rate, or a wrong evaluation."""
    with pytest.raises(plugins.PluginError) as err:
        gnnbridge.run(
            "karate-sage",
            out=tmp_path / "r",
            overrides=["model.arch=faulty", f"model.options.fault={fault}", f"model.options.where={where}"],
            **KARATE,
        )
    assert str(err.value).startswith(f"model 'faulty' (plugin 'shop'): {needle}"), str(err.value)
    assert "\n" not in str(err.value) and "lr" not in str(err.value)
    assert Faulty.train_calls == 0 and not (tmp_path / "r").exists()


def test_nan_at_the_first_training_step_names_the_model_not_the_learning_rate(tmp_path, faulty):
    """NaN only in training mode (the dry step runs in eval mode): the loss is non-finite before
    any optimizer step, so it is the model's fault, however high train.lr is."""
    with pytest.raises(
        plugins.PluginError,
        match=r"^model 'faulty' \(plugin 'shop'\): forward returned NaN or "
        r"infinite logits at the first training step, before any optimizer step .* so the learning "
        r"rate is not the cause",
    ):
        gnnbridge.run(
            "karate-sage",
            out=tmp_path / "r",
            overrides=["model.arch=faulty", "model.options.fault=nan", "model.options.where=training", "train.lr=0.5"],
            **KARATE,
        )
    assert not (tmp_path / "r").exists()


PYG_STYLE_MODULE = '''
from torch import nn
from torch_geometric.nn import GATv2Conv, SAGEConv


class TwoLayer(nn.Module):
    """A third-party PyG model: each layer maps every input node, so forward and layer_forward
    return a row per input node, outputs first."""

    backends = ("pyg",)
    num_layers = 2

    def __init__(self, in_dim, out_dim, hidden=16):
        super().__init__()
        self.convs = nn.ModuleList([GATv2Conv(in_dim, hidden, heads=1), SAGEConv(hidden, out_dim)])

    def forward(self, graph, x):
        for i in range(self.num_layers):
            x = self.layer_forward(i, graph, x)
        return x

    def layer_forward(self, i, graph, x):
        x = self.convs[i](x, graph.edge_index)
        return x.relu() if i == 0 else x
'''


@pytest.mark.slow
def test_a_pyg_style_layer_forward_trains_and_is_evaluated_layerwise_on_two_ranks(lab):
    """``layer_forward`` may return what ``forward`` may (a row per input node): the final
    layer-wise evaluation is exact, so it scores what a full-neighbourhood pass scores."""
    (lab / "my_lab" / "pygstyle.py").write_text(PYG_STYLE_MODULE)
    metrics = {}
    for mode in ("layerwise", "full"):
        results = gnnbridge.run(
            "karate-sage",
            backend="pyg",
            nproc=2,
            progress=False,
            out=lab / mode,
            timeout=120,
            overrides=["model.arch=my_lab.pygstyle:TwoLayer", "train.epochs=2", f"eval.mode={mode}"],
        )
        assert results["eval"]["final"] == mode and results["epochs_trained"] == 2
        metrics[mode] = results["metrics"]
    assert metrics["layerwise"] == pytest.approx(metrics["full"], abs=1e-6)


TASKS_MODULE = '''
import torch
from torch import nn


class IdsPerGraph(nn.Module):
    """A graph model that returns class ids (int64) instead of logits."""

    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim)

    def forward(self, graph, x):
        logits = self.lin(x).new_zeros(graph.num_graphs, self.lin.out_features)
        return logits.index_add(0, graph.batch, self.lin(x)).argmax(1, keepdim=True).expand_as(logits)


class NanLink(nn.Module):
    """A link model whose scores are NaN."""

    heterogeneous = True

    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.lin = nn.Linear(in_dim["node"], 8)

    def forward(self, graph, x, pairs):
        h = self.lin(x["node"])
        return (h[pairs[0]] * h[pairs[1]]).sum(-1) * float("nan")
'''


@pytest.mark.parametrize(
    "experiment, overrides, needle",
    [
        (
            "gin-synthetic",
            ["model.arch=my_lab.tasks:IdsPerGraph"],
            "class 'my_lab.tasks:IdsPerGraph': forward returned int64 logits; expected floating-point logits",
        ),
        (
            None,
            ["task=link", "dataset.options.num_nodes=300", "model.arch=my_lab.tasks:NanLink"],
            "class 'my_lab.tasks:NanLink': forward returned NaN or infinite values on a small batch before training",
        ),
    ],
)
def test_graph_and_link_models_are_checked_before_the_first_epoch_too(lab, experiment, overrides, needle):
    (lab / "my_lab" / "tasks.py").write_text(TASKS_MODULE)
    with pytest.raises(plugins.PluginError) as err:
        gnnbridge.run(experiment, out=lab / "run", overrides=[*overrides, "train.epochs=1"], **KARATE)
    assert str(err.value).startswith(needle), str(err.value)
    assert not (lab / "run").exists()


@pytest.mark.parametrize("backend", ["pyg", "dgl"])
def test_a_layer_forward_may_return_a_row_per_input_node_on_both_backends(tmp_path, faulty, backend):
    """As ``forward`` may: the output nodes' rows come first and are kept, so layer-wise
    evaluation scores what a full-neighbourhood pass scores (here: a per-node linear map)."""
    metrics = {}
    for mode in ("layerwise", "full"):
        results = gnnbridge.run(
            "karate-sage",
            backend=backend,
            nproc=1,
            progress=False,
            out=tmp_path / mode,
            overrides=["model.arch=faulty", "model.options.where=none", f"eval.mode={mode}", "eval.batch_size=5"],
        )
        assert results["eval"]["final"] == mode
        metrics[mode] = results["metrics"]
    assert metrics["layerwise"] == pytest.approx(metrics["full"])


def test_the_cli_refuses_a_model_on_another_device_in_one_line(refused, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # importing model.arch puts the folder on it
    (tmp_path / "elsewhere.py").write_text(
        "from torch import nn\n\nclass Meta(nn.Module):\n"
        "    def __init__(self, in_dim, out_dim):\n        super().__init__()\n"
        "        self.lin = nn.Linear(in_dim, out_dim)\n\n"
        "    def forward(self, graph, x):\n        return self.lin(x).to('meta')\n"
    )
    try:
        proc = refused("train", "karate-sage", "--set", "model.arch=elsewhere:Meta", "--quiet", "--out", "run")
    finally:
        sys.modules.pop("elsewhere", None)
    assert proc.returncode != 0 and proc.stderr.splitlines() == [
        "Error: class 'elsewhere:Meta': forward returned logits on meta, but the batch is on cpu; compute on the "
        "input's device (create tensors with device=x.device, register them as buffers, never call .cpu() or "
        ".cuda() in the model)."
    ], proc.stderr
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- plugin faults are the plugin's


@pytest.fixture
def as_cli(monkeypatch):
    """As in a CLI process (which records the signals it is sent), and no signal has arrived yet;
    both undone afterwards, so no other test sees this one's state."""
    monkeypatch.setattr(errors, "_recording", [True])
    monkeypatch.setattr(errors, "_signals_received", [])


@pytest.mark.parametrize("stop", [SystemExit(0), KeyboardInterrupt()], ids=["SystemExit", "KeyboardInterrupt"])
def test_a_plugin_that_exits_at_import_or_in_a_hook_is_left_out_like_one_that_raises(capsys, loud, as_cli, stop):
    """``sys.exit()`` or a stray ``KeyboardInterrupt`` in a plugin must not end the command (with
    exit 0, or as if the user pressed Ctrl-C): it is that plugin's failure, named in one line."""

    class Exits:
        @hookimpl
        def register_models(self, register):
            raise stop

    def load():
        raise stop

    manager._load_one("exits-on-import", "exits_pkg", load)
    try:
        with registered_plugin(Exits(), "exits"):
            assert "sage" in plugins.models.names()  # everything else keeps working
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 2, lines
        assert lines[0].startswith(
            f"Warning: plugin 'exits-on-import' (exits_pkg) failed to load: {type(stop).__name__}"
        )
        assert lines[1].startswith(f"Warning: plugin 'exits' raised in register_models: {type(stop).__name__}")
    finally:
        manager._failures.pop("exits-on-import")


def test_what_a_plugin_prints_while_loading_never_reaches_the_commands_output(capsys, loud):
    """stdout is the command's output: ``models --json`` must stay JSON, ``config show > x.yaml`` YAML."""
    from gnnbridge.cli import main

    class Chatty:
        @hookimpl
        def register_models(self, register):
            print("lab plugin: registering models")

        @hookimpl
        def register_experiments(self, register):
            print("lab plugin: registering experiments")

    def load():
        print("lab plugin: imported")
        return Chatty()

    manager._load_one("chatty-import", "chatty_pkg", load)
    try:
        with registered_plugin(Chatty(), "chatty"):
            capsys.readouterr()
            main(["models", "--json"])
            shown = capsys.readouterr()
            assert {"sage", "gcn"} <= {row["name"] for row in json.loads(shown.out)}
            assert "lab plugin: registering models" in shown.err
            main(["config", "show", "karate-sage"])
            assert yaml.safe_load(capsys.readouterr().out)["model"]["arch"] == "sage"
    finally:
        manager._failures.pop("chatty-import", None)
        if plugins.pm.has_plugin("chatty-import"):
            plugins.pm.unregister(name="chatty-import")
            plugins.reset_registries()
    assert "lab plugin: imported" not in capsys.readouterr().out


class BadData:
    @hookimpl
    def register_datasets(self, register):
        register("gives-none", lambda config, seed: None, "")
        register("gives-tuple", lambda config, seed: (torch.zeros(3, 2), torch.zeros(3)), "")
        register("gives-dict", lambda config, seed: {"x": torch.zeros(3, 2)}, "")
        register("exits", lambda config, seed: sys.exit(3), "")
        register("interrupts", lambda config, seed: (_ for _ in ()).throw(KeyboardInterrupt()), "")


@pytest.mark.parametrize(
    "dataset, needle",
    [
        ("gives-none", "returned a NoneType from its loader; expected a GraphData"),
        ("gives-tuple", "returned a tuple from its loader; expected a GraphData"),
        ("gives-dict", "returned a dict from its loader; expected a GraphData"),
        ("exits", "failed in its loader(config.dataset, seed): SystemExit(3)"),
        ("interrupts", "failed in its loader(config.dataset, seed): KeyboardInterrupt, though no Ctrl-C"),
    ],
)
def test_a_dataset_loader_that_returns_nonsense_or_exits_is_named(refused, as_cli, dataset, needle):
    with registered_plugin(BadData(), "lab-data"):
        shown = refused("train", "--dataset", dataset, "--backend", "pyg", "--out", "run")
    assert shown.returncode == 1 and shown.stderr.count("\n") == 1, shown.stderr
    assert shown.stderr.startswith(f"Error: dataset '{dataset}' (plugin 'lab-data') ") and needle in shown.stderr, (
        shown.stderr
    )


def test_an_experiment_registered_as_a_string_is_named(refused):
    class StringExperiment:
        @hookimpl
        def register_experiments(self, register):
            register("lab-exp", "model: {arch: sage}", "")

    with registered_plugin(StringExperiment(), "lab-exp"):
        shown = refused("train", "lab-exp", "--out", "run")
    assert shown.returncode == 1 and shown.stderr.count("\n") == 1, shown.stderr
    assert shown.stderr.startswith("Error: Plugin 'lab-exp' registered experiment 'lab-exp' as a str"), shown.stderr
    assert "register a dict of config sections" in shown.stderr


STOPPING_MODEL = """
import sys
from torch import nn


class StopsInForward(nn.Module):
    def __init__(self, in_dim, out_dim, hidden=8, layers=2):
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim)

    def forward(self, graph, x):
        raise {stop}
"""


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["KeyboardInterrupt()", "SystemExit(0)"])
def test_a_model_that_raises_keyboardinterrupt_or_exits_in_forward_is_a_failure_not_a_ctrl_c(tmp_path, stop):
    """Not "Stopped by SIGINT" (exit 130), not a silent exit 0: one line naming the model."""
    (tmp_path / "stopping_lab.py").write_text(STOPPING_MODEL.format(stop=stop))
    args = ("train", "karate-sage", "--backend", "pyg", "--quiet", "--set", "model.arch=stopping_lab:StopsInForward")
    proc = helpers.gnnbridge(*args, "--out", "run", cwd=tmp_path)  # the model's module: in the working folder
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: class 'stopping_lab:StopsInForward'"), proc.stderr
    assert f"failed in its forward pass: {stop.split('(')[0]}" in lines[0] and "SIGINT" not in lines[0], lines[0]


@pytest.mark.parametrize("where", ["import", "__init__"])
def test_a_model_class_that_exits_at_import_or_construction_is_named(lab, refused, where):
    (lab / "exits_lab.py").write_text(
        "import sys\nfrom torch import nn\n"
        + ("sys.exit(0)\n" if where == "import" else "")
        + "class Exits(nn.Module):\n    def __init__(self, in_dim, out_dim):\n        super().__init__()\n"
        "        sys.exit(0)\n"
    )
    shown = refused("train", "karate-sage", "--backend", "pyg", "--set", "model.arch=exits_lab:Exits", "--out", "run")
    sys.modules.pop("exits_lab", None)
    assert shown.returncode == 1 and shown.stderr.count("\n") == 1, shown.stderr
    assert "exits_lab" in shown.stderr and "SystemExit" in shown.stderr, shown.stderr
    assert not (lab / "run").exists()


def test_only_a_keyboardinterrupt_a_signal_caused_passes_through_plugin_code_as_a_ctrl_c(as_cli):
    import signal

    def forward():
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        errors.record_interrupts()  # what the CLI and every rank do first
        with pytest.raises(
            plugins.PluginError,
            match=r"^model 'x' failed in its forward pass: KeyboardInterrupt, "
            r"though no Ctrl-C or signal arrived",
        ):
            with plugins.blame("model 'x'", "forward pass"):
                forward()
        with pytest.raises(KeyboardInterrupt):  # a real Ctrl-C arriving while plugin code runs stays one
            with plugins.blame("model 'x'", "forward pass"):
                signal.raise_signal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_typed_layer_wise_model_whose_layer_breaks_the_contract_is_named_before_training():
    """A model that declares typed_layerwise gets its layers tried on a one-hop graph in the dry
    step (as the typed pass will call them): a wrong shape is one line naming it before the first
    epoch, not a failure in the final evaluation after all of them."""
    from gnnbridge.backends.pyg.hetero import PygHeteroSAGE
    from gnnbridge.core.app.preflight import for_task
    from gnnbridge.core.config import from_dict
    from gnnbridge.core.inference.assembly import RunParts
    from gnnbridge.core.plugins import datasets
    from gnnbridge.core.runtime.context import DistContext
    from gnnbridge.core.training.dry import check_typed_layers

    class WrongLayer(PygHeteroSAGE):
        cut = {}  # how the typed pass's calls (block=0) are broken: rows or columns

        def layer(self, index, graph, h, block=None):
            out = super().layer(index, graph, h, block)
            return (
                out
                if block is None
                else {t: v[self.cut.get("rows", slice(None)), : self.cut.get("columns")] for t, v in out.items()}
            )

    config = from_dict({"task": "link", "backend": "pyg", "dataset": {"name": "rec-synthetic"}})
    data = for_task(config, datasets.get("rec-synthetic")(config.dataset, 0))
    parts = RunParts(config, data, DistContext(0, 1, 0, torch.device("cpu")))
    check_typed_layers(parts, parts.model)  # core's own model keeps the contract
    wrong = WrongLayer(config.model, data, 1)
    wrong.cut = {"rows": slice(0, 1)}  # one row for 8 nodes
    with pytest.raises(plugins.PluginError, match=r"layer\(0\) gave \[1, 64\] for the 8 '\w+' nodes of a one-hop"):
        check_typed_layers(parts, wrong)
    wrong.cut = {"columns": 3}  # rows the next layer cannot read: its failure, blamed in one line
    with pytest.raises(plugins.PluginError, match=r"in its layer\(1\) of the typed layer-wise pass: RuntimeError"):
        check_typed_layers(parts, wrong)


# ---------------------------------------------------------------- a task family of a plugin's own (in-process)


class SmallGraphsOnly(NodeFamily):
    """A node family that refuses graphs of more than ``most`` nodes in its own line, and (``broken``)
    makes a record of the wrong type."""

    name = "small-nodes"
    description = "node classification of small graphs"
    most, broken = 10, False

    def check(self, data, config):
        if data.num_nodes > self.most:
            raise ConfigError(f"task=small-nodes takes at most {self.most} nodes; '{data.name}' has {data.num_nodes}.")

    def record(self, data, config):
        return {"not": "a record"} if self.broken else data


class Families:
    def __init__(self, *families):
        self.families = families

    @hookimpl
    def register_tasks(self, register):
        for family in self.families:
            register(family)


def test_a_plugins_task_family_is_asked_before_training_and_its_faults_name_it(tmp_path):
    """A family registered in register_tasks is chosen by task=NAME and runs as its kind; its own
    check refuses a dataset in its own line, a record of the wrong type names the plugin, and an
    unknown task lists the families there are. Nothing is written for any of them."""
    family = SmallGraphsOnly()
    run = dict(backend="pyg", nproc=1, progress=False, out=tmp_path / "r")
    with registered_plugin(Families(family), "small"):
        assert plugins.families.names() == ["edge", "graph", "link", "node", "small-nodes"]
        with pytest.raises(ConfigError, match=r"^task=small-nodes takes at most 10 nodes; '[^']+' has \d+\.$"):
            gnnbridge.run("sage-synthetic", **run, overrides=["task=small-nodes", "train.epochs=1"])
        family.broken = True
        with pytest.raises(
            plugins.PluginError,
            match=r"^task family 'small-nodes' \(plugin 'small'\) returned a dict from record\(data, config\); "
            r"expected the GraphData it was given or a new one\.$",
        ):
            gnnbridge.run("sage-synthetic", **run, overrides=["task=small-nodes", "train.epochs=1"])
    with pytest.raises(
        errors.UnknownNameError,
        match=r"^Unknown task family 'small-nodes'\. Available: edge, graph, link, node\. \(gnnbridge targets",
    ):
        gnnbridge.run("sage-synthetic", **run, overrides=["task=small-nodes"])
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "registered, needle",
    [
        (
            type("Kindless", (NodeFamily,), {"name": "kindless", "kind": "node"})(),
            "task family 'kindless' as a Kindless",
        ),
        (type("Loose", (), {"name": "loose", "kind": Task.NODE})(), "'loose' as a Loose"),
    ],
)
def test_a_family_of_no_kind_or_of_no_contract_is_refused_naming_the_plugin(registered, needle):
    with (
        registered_plugin(Families(registered), "odd"),
        pytest.raises(plugins.PluginError, match=f"^Plugin 'odd' registered .*{re.escape(needle)}"),
    ):
        plugins.families.names() + plugins.targets.names()


@pytest.mark.parametrize(
    "target, form", [("class", "class"), ("regression", "regression"), ("multilabel", "multilabel")]
)
def test_a_dataset_loader_is_told_the_label_form_as_a_declared_field(target, form):
    """A plugin's ``loader(config, seed)`` reads the form the run's target reads labels in from
    ``config.label_form`` (a LoaderConfig, set by core), and builds its labels in that form."""
    from gnnbridge.core.app.preflight import task_record
    from gnnbridge.core.config import from_dict
    from gnnbridge.core.interfaces import GraphData, LoaderConfig

    told = []

    def load(config, seed):
        told.append(config)
        n = 40
        y = {"class": torch.arange(n) % 2, "regression": torch.rand(n), "multilabel": (torch.rand(n, 3) > 0.5).float()}
        x, ring = torch.randn(n, 4), torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
        splits = torch.arange(0, 24), torch.arange(24, 32), torch.arange(32, n)
        return GraphData.from_edges(ring, x, y[config.label_form], *splits)

    class FormPlugin:
        @hookimpl
        def register_datasets(self, register):
            register("told-form", load, "a graph whose labels take the form it is told")

    with registered_plugin(FormPlugin(), "told-form"):
        config = from_dict({"task": "node", "target": target, "dataset": {"name": "told-form"}})
        data = task_record(config)
    assert isinstance(told[0], LoaderConfig) and told[0].label_form == form and told[0].name == "told-form"
    assert data.labels == form
    assert not {"label_form", "reading"} & set(config.to_dict()["dataset"])  # the run's own section is left as it was


@pytest.mark.parametrize(
    "target, built, refusal",
    [
        ("regression", "class", "holds a class per node (2 classes), but target=regression"),
        ("class", "regression", "float labels are targets of regression or multilabel"),
        ("multilabel", "values", "multilabel targets are 0 or 1"),
    ],
)
def test_a_loaders_labels_of_another_form_are_one_line(target, built, refusal):
    """A plugin's loader that builds its record without ``labels=`` and ignores ``config.reading``
    gets the form its ``y`` shows; a form the run's target cannot read is refused in one line
    naming what the labels are, not read wrongly (no context decides it any more)."""
    from gnnbridge.core.app.preflight import task_record
    from gnnbridge.core.config import from_dict
    from gnnbridge.core.errors import DataError
    from gnnbridge.core.interfaces import GraphData

    def load(config, seed):
        n = 40
        y = {"class": torch.arange(n) % 2, "regression": torch.rand(n), "values": torch.rand(n, 3) * 5}[built]
        ring = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
        splits = torch.arange(24), torch.arange(24, 32), torch.arange(32, n)
        return GraphData.from_edges(ring, torch.randn(n, 4), y, *splits)

    class StubbornPlugin:
        @hookimpl
        def register_datasets(self, register):
            register("stubborn", load, "a graph whose labels take one form whatever it is told")

    with registered_plugin(StubbornPlugin(), "stubborn"):
        config = from_dict({"task": "node", "target": target, "dataset": {"name": "stubborn"}})
        with pytest.raises(DataError, match=re.escape(refusal)):
            task_record(config)


def test_graph_readers_are_told_the_reading_and_one_argument_readers_still_work(tmp_path, monkeypatch):
    """A graph reader of ``read(obj, reading)`` is told how the run reads the object (the form a
    regression run reads, the drawn splits); one written as ``read(obj)``, before readings, is
    still called so. Both objects become the run's dataset file."""
    from pathlib import Path

    import numpy as np

    from gnnbridge.core.app.objects import as_dataset
    from gnnbridge.plugins.npz import read_npz

    monkeypatch.setenv("GNNBRIDGE_DATA", str(tmp_path / "data-root"))

    class Told:
        pass

    class Plain:
        pass

    told = []
    n = 30
    arrays = {
        "x": np.random.default_rng(0).normal(size=(n, 3)).astype(np.float32),
        "edge_index": np.stack([np.arange(n), (np.arange(n) + 1) % n]).astype(np.int64),
        "y": np.linspace(0, 1, n, dtype=np.float32),
    }

    def read_told(obj, reading):
        if not isinstance(obj, Told):
            return None
        told.append(reading)
        return dict(arrays)

    def read_plain(obj):
        return dict(arrays) if isinstance(obj, Plain) else None

    class Readers:
        @hookimpl
        def register_graph_readers(self, register):
            register("told", read_told, "a Told")
            register("plain", read_plain, "a Plain")

    overrides = ["target=regression", "dataset.splits=drawn"]
    with registered_plugin(Readers(), "readers"):
        first = as_dataset(Told(), {"task": "node"}, overrides)
        second = as_dataset(Plain(), {"task": "node"}, overrides)
    assert told[0].form == "regression" and told[0].splits is False and told[0].edge_labels is False
    assert first == second and np.array_equal(read_npz(Path(first), "regression")["y"], arrays["y"])
