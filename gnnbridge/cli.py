"""The ``gnnbridge`` command line: parse, call the library, print.

Every user error surfaces as a :class:`~gnnbridge.core.errors.GnnBridgeError` (or a click usage
error) and is printed here, once, as a single ``Error: ...`` line on stderr with a non-zero
exit code and no traceback.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import functools
import json
import os
import sys
import tempfile
import threading
import traceback
from typing import NoReturn

import click

# c10d logs every failed store or socket call with a C++ stack trace. When a job stops because a
# rank failed, the survivors' calls fail by design, and those traces would bury the one line
# that says why. Must be set before torch is imported; a user's own setting wins.
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

from gnnbridge.core.errors import GnnBridgeError, record_interrupts, scrubbed


class _Stopped(Exception):
    """Carries a KeyboardInterrupt out of a command: click would print a bare "Aborted!" for it."""


def interruptible(command):
    """Ctrl-C or SIGTERM inside a command ends in the run's own line (what was kept, how to go on)."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except KeyboardInterrupt as exc:
            raise _Stopped(exc) from None

    return wrapper


TRAIN_EXAMPLES = """
\b
Examples:
  gnnbridge train                                   # default experiment, PyG, 1 process
  gnnbridge train --backend dgl --nproc 2 --out runs/a
  gnnbridge train my.yaml --backend pyg --set model.arch=gat --set train.epochs=5
  gnnbridge train --dataset graph.npz --nproc 2 --set sampler.fanouts=[25,10]
  gnnbridge train my.yaml --nproc 4 --timeout 120     # any rank failing stops all within 120 s
  gnnbridge train my.yaml --out runs/x --set train.patience=5   # early stopping on val_acc
  gnnbridge train --resume runs/x --set train.epochs=20          # continue (and extend) runs/x
  gnnbridge train my.yaml --nproc 4 --max-restarts 3 --out runs/y  # a failed rank restarts all, from the checkpoint

\b
Multi-node: start one process per GPU with torchrun or srun; gnnbridge joins the job
(RANK/WORLD_SIZE/MASTER_ADDR or SLURM_PROCID/SLURM_NTASKS) instead of spawning:
  torchrun --nnodes 2 --node-rank $R --nproc-per-node 4 --master-addr HOST --master-port 29500 \\
      --max-restarts 2 -m gnnbridge train reddit-sage --backend pyg --out runs/reddit
  srun -N 2 --ntasks-per-node 4 gnnbridge train my.yaml --backend dgl
"""


class PluginGroup(click.Group):
    """Built-in commands resolve at once; commands from plugins (``register_commands``) are added
    when a name is not built in or the list is shown. Loading plugins imports torch, seconds that
    ``gnnbridge train --help`` should not pay."""

    plugins_added = False

    def get_command(self, ctx, name):
        if name not in self.commands:
            self._add_plugin_commands()
        return super().get_command(ctx, name)

    def list_commands(self, ctx):
        self._add_plugin_commands()
        return super().list_commands(ctx)

    def _add_plugin_commands(self) -> None:
        from gnnbridge.core.plugins import extend_cli

        if not self.plugins_added:
            self.plugins_added = True
            extend_cli(self)


@click.group(cls=PluginGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gnnbridge")
def cli() -> None:
    """Train one GNN experiment on PyG or DGL, on one process or many (DDP)."""


# The options of a run that train declares and tune takes alike (for the runs it starts).
backend_option = click.option("--backend", help="Backend name (see `gnnbridge backends`), e.g. pyg or dgl.")
nproc_option = click.option(
    "--nproc",
    type=int,
    help="Number of training processes (ranks) to spawn on this machine "
    "(not inside torchrun / srun, which start the ranks themselves).",
)
run_device_option = click.option("--device", help="cpu, cuda or auto.")
dataset_option = click.option(
    "--dataset",
    help="A dataset name, a .npz file or a folder prepared with gnnbridge prepare (replaces the experiment's dataset).",
)
config_set_option = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a config key; VALUE is YAML (repeatable), e.g. --set train.epochs=5.",
)
timeout_option = click.option(
    "--timeout", type=float, help="Seconds a rank may wait on its peers before the whole job stops (default 180)."
)


def run_options(command):
    """``--backend``, ``--nproc``, ``--device``, ``--dataset``, ``--set``: how a run is started."""
    for option in (config_set_option, dataset_option, run_device_option, nproc_option, backend_option):
        command = option(command)
    return command


@cli.command(epilog=TRAIN_EXAMPLES)
@click.argument("experiment", required=False)
@run_options
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    help="Run folder (must not hold a run); default: a new folder under runs/.",
)
@timeout_option
@click.option(
    "--max-restarts",
    type=click.IntRange(min=0),
    metavar="K",
    help="When a rank fails, restart every rank up to K times; each restart continues the run "
    "from its latest checkpoint (default 0).",
)
@click.option(
    "--resume",
    type=click.Path(),
    metavar="RUN",
    help="Continue the run folder RUN from its latest checkpoint, in place (--set may extend train.epochs).",
)
@click.option("--quiet", is_flag=True, help="No progress bars.")
@interruptible
def train(experiment, backend, nproc, device, dataset, overrides, out, timeout, max_restarts, resume, quiet) -> None:
    """Train EXPERIMENT (a YAML file or a built-in name; default: sage-synthetic)."""
    from gnnbridge.core.app.train import run

    results = run(
        experiment,
        backend=backend,
        nproc=nproc,
        device=device,
        dataset=dataset,
        overrides=overrides,
        out=out,
        progress=not quiet,
        timeout=timeout,
        resume=resume,
        max_restarts=max_restarts,
    )
    if results is None:  # a rank other than 0 of a torchrun / SLURM job: rank 0 reports
        return
    chosen, last, best = results["metrics_from"], results["last"], results["best"]
    click.echo(
        f"{results['experiment']} on {results['backend']} ({results['world_size']} x {results['device']}), "
        f"{chosen['checkpoint']}.pt (epoch {chosen['epoch'] + 1}"
        + (f", {best['monitor']} {best['value']:.4f}" if chosen["checkpoint"] == "best" else "")
        + f"): {_metrics_line(results['metrics'])}"
    )
    if last["epoch"] != chosen["epoch"]:
        click.echo(f"last epoch {last['epoch'] + 1}: {_metrics_line(last['metrics'])}")
    stop = results["early_stopping"]
    if stop["stopped"]:
        click.echo(f"stopped early after epoch {stop['stopped_after_epoch'] + 1} (train.patience={stop['patience']})")
    click.echo(f"results: {results['run_dir']}/results.json")


TUNE_EXAMPLES = """
\b
Examples:
  gnnbridge tune --space space.yaml --trials 12 --out runs/search     # TPE over the default experiment
  gnnbridge tune my.yaml --space space.yaml --trials 20 --pruner median --nproc 2 --out runs/s
  gnnbridge tune my.yaml --space space.yaml --trials 30 --out runs/s  # again: resumes, then extends to 30
  gnnbridge tune --space space.yaml --trials 40 --storage postgresql://db/optuna --study s1 --out runs/m1
  gnnbridge tune my.yaml --space space.yaml --trials 16 --parallel 4 --nproc 2 --device cuda --out runs/p  # 8 GPUs
  gnnbridge tune --show runs/search                                   # table, best.yaml, plots

\b
space.yaml (any config key; a list is choices, a mapping one range):
  train.lr: {log: [1e-4, 1e-1]}
  model.hidden: [64, 128, 256]
  sampler.fanouts: [[10, 5], [25, 10]]
  model.dropout: {uniform: [0, 0.6]}
  model.layers: {int: [1, 3]}
"""


@cli.command(epilog=TUNE_EXAMPLES)
@click.argument("experiment", required=False)
@click.option("--space", type=click.Path(dir_okay=False),
              help="The search space: YAML, KEY: [choices] or {RANGE: [low, high]}.")  # fmt: skip
@click.option("--trials", type=click.IntRange(min=1), help="Trials the study should hold in all.")
@click.option("--study", help="Study name (default: the experiment's name).")
@click.option("--storage", help="Optuna storage URL (default: sqlite:///DIR/study.db).")
@click.option("--out", type=click.Path(file_okay=False), help="The search folder DIR: DIR/trial-K per trial.")
@click.option("--sampler", type=click.Choice(["tpe", "random", "grid"]), default="tpe", show_default=True)
@click.option("--pruner", type=click.Choice(["none", "median", "halving"]), default="none", show_default=True,
              help="Stop hopeless trials after their first epochs (median, or successive halving).")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="The sampler's seed.")
@click.option("--parallel", type=click.IntRange(min=1), default=1, show_default=True,
              help="Trials at once, each on devices of its own (CUDA: --nproc GPUs each).")  # fmt: skip
@click.option("--show", "show_dir", type=click.Path(file_okay=False), metavar="DIR", help="Show DIR's study, exit.")
@run_options
@timeout_option
@click.option("--progress", is_flag=True, help="Progress bars of each trial's run.")
@interruptible
def tune(experiment, space, trials, study, storage, out, sampler, pruner, seed, parallel, show_dir, **run) -> None:
    """Search EXPERIMENT's settings over SPACE with Optuna: each trial is a train run in DIR/trial-K."""
    from gnnbridge.core.app import tune as tuning

    if show_dir is not None:
        tuning.show(show_dir, say=click.echo)
        return
    missing = [name for name, value in (("--space", space), ("--trials", trials), ("--out", out)) if value is None]
    if missing:
        raise click.UsageError(f"tune needs {', '.join(missing)} (or --show DIR).")
    progress, run["overrides"] = run.pop("progress"), list(run["overrides"])
    tuning.tune(experiment, space=space, trials=trials, out=out, study=study, storage=storage, sampler=sampler,
                pruner=pruner, seed=seed, parallel=parallel, progress=progress, say=click.echo, **run)  # fmt: skip


def _trained(report: dict) -> str:
    """How far the checkpoint had trained: "epoch 3", or "epoch 1, batch 200" inside one."""
    inside = report.get("inside")
    return f"epoch {inside['epoch'] + 1}, batch {inside['batches']}" if inside else f"epoch {report['epoch'] + 1}"


def _metrics_line(m: dict) -> str:
    """Every validation and test figure of a run, named and ordered as its target and family
    reported them: the command line knows no task."""
    return "  ".join(f"{k} {_number(v)}" for k, v in m.items() if k.startswith(("val_", "test_")))


def _number(value) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) else "n/a"


FROM_RUN_EXAMPLES = """
\b
Examples:
  gnnbridge evaluate runs/x                          # the best checkpoint's metrics
  gnnbridge evaluate runs/x --checkpoint latest --json
  gnnbridge evaluate runs/x/checkpoints/best.pt --device cuda
  gnnbridge predict runs/x --out preds.npz           # logits, probs, pred, y and the splits
  gnnbridge predict runs/x --out p.npz --set dataset.path=/data/moved.npz
  gnnbridge predict runs/rec --out top.npz --top-k 20      # link task: 20 best items per user
  gnnbridge predict runs/rec --out s.npz --pairs pairs.npz # link task: scores of given (src, dst)
  gnnbridge predict runs/rec --out e.npz --embeddings      # link task: top 10 and every type's states
  gnnbridge predict runs/shop --dataset data/new-graph --out churn.csv   # by customer_id (from tables)
  gnnbridge predict runs/reviews --pairs pairs.csv --out scored.csv    # by customer_id, product_id
"""

checkpoint_option = click.option(
    "--checkpoint",
    "kind",
    type=click.Choice(["best", "latest"]),
    default="best",
    show_default=True,
    help="Which checkpoint of a run folder to use.",
)
device_option = click.option("--device", help="cpu, cuda or auto (default: the run's device).")
set_option = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a data or eval key (not the model), e.g. --set dataset.path=NEW.npz.",
)
trust_option = click.option(
    "--trust-code",
    is_flag=True,
    help="Import the model class the checkpoint names by import path (model.arch=module:Class); "
    "importing runs that module's code.",
)


@cli.command(epilog=FROM_RUN_EXAMPLES)
@click.argument("target", metavar="RUN|CHECKPOINT")
@checkpoint_option
@device_option
@set_option
@trust_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@interruptible
def evaluate(target, kind, device, overrides, trust_code, as_json) -> None:
    """Metrics of a trained model on every split (a run folder's best checkpoint by default)."""
    from gnnbridge.core.app.inference import evaluate as evaluate_run

    report = evaluate_run(target, kind=kind, device=device, overrides=overrides, trust_code=trust_code)
    if report is None:  # a rank of a job other than rank 0, which prints
        return
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(
        f"{report['checkpoint']} ({_trained(report)}, {report['experiment']} on {report['backend']}): "
        f"{_metrics_line(report['metrics'])}"
    )


@cli.command(epilog=FROM_RUN_EXAMPLES)
@click.argument("target", metavar="RUN|CHECKPOINT")
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False),
    help="The .npz file to write (must not exist); .csv or .parquet: a table by the user's keys (from tables).",
)
@click.option("--dataset", help="Predict on this graph: a .npz, or a folder (e.g. prepare NEW --like DIR).")
@checkpoint_option
@device_option
@set_option
@trust_option
@click.option(
    "--pairs",
    type=click.Path(dir_okay=False),
    help="Link tasks: a .npz with int64 src and dst, or (from tables) a .csv/.parquet of both ends' key columns; "
    "writes each pair's score.",
)
@click.option("--top-k", "top_k", type=int, help="Link tasks: the K best destinations of every source (default 10).")
@click.option(
    "--embeddings",
    is_flag=True,
    help="Also write every node type's final states (embedding__TYPE), from the exact layer-wise pass.",
)
@click.option(
    "--index",
    type=click.Choice(["exact", "hnsw"]),
    default="exact",
    show_default=True,
    help="Link tasks, --top-k: every destination scored (exact) or FAISS's approximate HNSW index (dot decoder).",
)
@interruptible
def predict(target, out, dataset, kind, device, overrides, trust_code, pairs, top_k, embeddings, index) -> None:
    """Class scores for every node (or graph) of the run's dataset, or for a link task the scores
    of given pairs (--pairs) or each source's top destinations (--top-k), written to a .npz file."""
    from gnnbridge.core.app.inference import predict as predict_run

    report = predict_run(
        target,
        out,
        kind=kind,
        dataset=dataset,
        device=device,
        overrides=overrides,
        trust_code=trust_code,
        pairs=pairs,
        top_k=top_k,
        embeddings=embeddings,
        index=index,
    )
    if report is None:  # a rank of a job other than rank 0, which prints
        return
    shape = "x".join(map(str, report["shape"]))
    where = ", ".join(report.get("files", [report["out"]]))
    by = "by their keys" if report["out"].endswith((".csv", ".parquet")) else "node_ids: their ids"
    rows = f" (each machine's own nodes; {by})" if report.get("machines") else ""
    click.echo(
        f"{where}: {', '.join(report['arrays'])} [{shape}]{rows} (from {report['checkpoint']}, {_trained(report)})"
    )


COMPARE_EXAMPLES = """
\b
Examples:
  gnnbridge compare sage-synthetic                     # train on pyg and dgl, one table
  gnnbridge compare gcn-synthetic --nproc 2 --out runs/gcn-both
  gnnbridge compare sage-synthetic --same-batches      # identical batches and weights: loss gap per step
  gnnbridge compare gin-synthetic --same-batches --epochs 5 --tolerance 1e-5
  gnnbridge compare sage-synthetic --dataset data/papers   # a prepared folder (or a .npz, or a name)
"""


@cli.command(epilog=COMPARE_EXAMPLES)
@click.argument("experiment", required=False)
@click.option(
    "--backend", "backends", multiple=True, help="A backend to compare (repeat it); default: every one installed."
)
@click.option("--dataset", help="A dataset name, a .npz file or a prepared folder (replaces the experiment's dataset).")
@click.option("--nproc", type=int, default=1, show_default=True, help="Ranks per backend (side by side).")
@click.option("--device", help="cpu, cuda or auto.")
@click.option(
    "--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a config key, e.g. train.epochs=5."
)
@click.option("--out", type=click.Path(file_okay=False), help="Folder for the runs, compare.json and compare.png.")
@click.option(
    "--same-batches",
    is_flag=True,
    help="Feed every backend the same batches from the same weights (dropout off) and report the loss gap.",
)
@click.option("--epochs", type=int, help="--same-batches: epochs to run (default: the experiment's).")
@click.option(
    "--tolerance", type=float, default=1e-4, show_default=True, help="--same-batches: the largest gap allowed."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
@interruptible
def compare(
    experiment, backends, dataset, nproc, device, overrides, out, same_batches, epochs, tolerance, as_json, quiet
) -> None:
    """Run one experiment on several libraries: side by side (metrics, epoch time, memory), or with
    --same-batches on identical batches and weights (exit code 1 when they disagree)."""
    from gnnbridge.core.app import compare as comparing

    alone = (
        {"--epochs": epochs is not None, "--tolerance": tolerance != 1e-4}
        if not same_batches
        else {"--nproc": nproc != 1, "--out": out is not None}
    )
    misplaced = next((flag for flag, given in alone.items() if given), None)
    if misplaced:
        why = (
            "use --set train.epochs=N side by side"
            if misplaced == "--epochs"
            else "it runs one process and writes nothing"
        )
        raise click.UsageError(
            f"{misplaced} {'needs' if not same_batches else 'does not apply to'} --same-batches ({why})."
        )
    if same_batches:
        report = comparing.same_batches(
            experiment,
            backends=backends,
            epochs=epochs,
            device=device,
            overrides=overrides,
            tolerance=tolerance,
            dataset=dataset,
        )
        click.echo(comparing.as_json(report) if as_json else "\n".join(comparing.verdicts(report)))
        if not report["agree"]:
            sys.exit(1)
        return
    report = comparing.compare(
        experiment,
        backends=backends,
        nproc=nproc,
        device=device,
        overrides=overrides,
        out=out,
        progress=not quiet,
        dataset=dataset,
    )
    if as_json:
        click.echo(comparing.as_json(report))
    else:
        click.echo("\n".join(comparing.table(report)))
        drawn = f" and {report['plot']}" if report["plot"] else ""
        click.echo(f"wrote {report['folder']}/compare.json{drawn}")
    failed = [row["backend"] for row in report["rows"] if "error" in row]
    if failed:
        click.echo(f"Error: the run on {', '.join(failed)} failed (its line is in the table).", err=True)
        sys.exit(1)


@cli.command(
    epilog="""
\b
Examples:
  gnnbridge plot runs/sage-pyg runs/sage-dgl --out sage.png
  gnnbridge plot runs/lr-* --out sweep.png
"""
)
@click.argument("runs", nargs=-1, required=True, metavar="RUN...")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The .png file to write (must not exist).")
@interruptible
def plot(runs, out) -> None:
    """Draw the training loss and validation curves of several runs on one figure."""
    from gnnbridge.core.app.plots import plot as plot_runs

    click.echo(f"wrote {plot_runs(list(runs), out)} ({len(runs)} run{'s' if len(runs) > 1 else ''})")


PORT_EXAMPLES = """
\b
Examples:
  gnnbridge port runs/sage-dgl --to pyg --out runs/sage-pyg   # then: gnnbridge evaluate runs/sage-pyg
  gnnbridge port runs/gin-pyg --to dgl --out runs/gin-dgl --set dataset.path=/data/moved.npz
"""


@cli.command(epilog=PORT_EXAMPLES)
@click.argument("run", metavar="RUN")
@click.option(
    "--to",
    "to",
    required=True,
    metavar="BACKEND",
    help="The backend to move the model to (pyg, dgl, or one a plugin adds: see `gnnbridge backends`).",
)
@click.option(
    "--out", required=True, type=click.Path(file_okay=False), help="The new run folder (must not exist, or be empty)."
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a data key (not the model), e.g. --set dataset.path=NEW.npz.",
)
@trust_option
@interruptible
def port(run, to, out, overrides, trust_code) -> None:
    """Move a trained run to the other library: a new run folder whose checkpoints hold the same
    model in that library's layout (evaluate, predict and train --resume work on it)."""
    from gnnbridge.core.app.port import port as port_run

    report = port_run(run, to, out, overrides=overrides, trust_code=trust_code)
    click.echo(
        f"{report['run_dir']}: {report['from_backend']} -> {report['backend']} "
        f"({', '.join(report['checkpoints'])}.pt); check it with: gnnbridge evaluate {report['run_dir']}"
    )


SERVE_EXAMPLES = """
\b
Examples:
  gnnbridge serve runs/x                              # http://127.0.0.1:8080, the best checkpoint
  gnnbridge serve runs/x --port 9000 --checkpoint latest
  gnnbridge serve runs/rec --max-batch 128 --max-wait-ms 5   # gather concurrent requests into one pass
  curl -s localhost:8080/predict -d '{"nodes": [0, 5, 7]}'
  curl -s localhost:8080/top-k -d '{"sources": [3], "k": 10}'   # link runs
"""


@cli.command(epilog=SERVE_EXAMPLES)
@click.argument("run", metavar="RUN|CHECKPOINT")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every interface).")
@click.option("--port", type=int, default=8080, show_default=True, help="Port to listen on (0: a free one, printed).")
@checkpoint_option
@device_option
@set_option
@trust_option
@click.option("--max-batch", type=click.IntRange(1), default=64, show_default=True, help="Requests per forward pass.")
@click.option(
    "--max-wait-ms",
    type=click.FloatRange(0),
    default=2.0,
    show_default=True,
    help="How long a request waits for others.",
)
@click.option(
    "--max-body", type=click.IntRange(1), default=1 << 20, show_default=True, help="Largest request body, in bytes."
)
def serve(run, host, port, kind, device, overrides, trust_code, max_batch, max_wait_ms, max_body) -> None:
    """Answer predictions over HTTP (JSON): GET /health and /metadata, POST /predict (node ids, or a
    graph you send) and POST /top-k (link runs), with predict's numbers. Needs the serve extra."""
    from gnnbridge.core.app.serving import Served
    from gnnbridge.core.errors import ConfigError

    try:
        from gnnbridge.serving.server import serve as run_server
    except ImportError as exc:
        raise ConfigError(f"serve needs FastAPI and uvicorn ({exc}); pip install 'gnnbridge[serve]'.") from None
    # The checkpoint is read and checked here; the run loads once the server listens.
    served = Served(run, kind=kind, device=device, overrides=overrides, trust_code=trust_code, load=False)
    try:
        say = functools.partial(click.echo, err=False)
        run_server(served, host, port, max_body=max_body, max_batch=max_batch, max_wait_ms=max_wait_ms, say=say)
    finally:
        served.close()


EXPORT_EXAMPLES = """
\b
Examples:
  gnnbridge export runs/sage-pyg --format onnx --out sage.onnx --check    # run by onnxruntime
  gnnbridge export runs/gin-dgl --format torch-export --out gin.pt2       # torch.export.load(...).module()
  gnnbridge export runs/gcn-dgl --format safetensors --out gcn.safetensors  # gnnbridge.load("gcn.safetensors")
  gnnbridge export runs/sage-pyg --format onnx --out sage.onnx --check --dataset data/other.npz
"""


@cli.command(epilog=EXPORT_EXAMPLES)
@click.argument("target", metavar="RUN|CHECKPOINT")
@click.option(
    "--format",
    "fmt",
    required=True,
    metavar="FORMAT",
    help="onnx (.onnx), torch-export (.pt2) or safetensors (.safetensors: the weights, neutral names).",
)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The file to write (must not exist).")
@click.option(
    "--check",
    is_flag=True,
    help="Run the file on the run's graph (and --dataset) and require predict's logits within 1e-4.",
)
@click.option("--dataset", help="With --check: a second graph to compare on (a .npz or a folder).")
@checkpoint_option
@set_option
@interruptible
def export(target, fmt, out, check, dataset, kind, overrides) -> None:
    """The run's model as a file that runs without gnnbridge, PyG or DGL: (x, edge_index) ->
    logits for node tasks, (x, edge_index, batch) -> one row per graph for graph tasks."""
    from gnnbridge.core.app.export import export as export_run

    report = export_run(target, fmt, out, kind=kind, check=check, dataset=dataset, overrides=overrides)
    spec = report["spec"]
    inputs = ", ".join(spec["inputs"])
    checked = "; ".join(f"{name}: within {diff:.1g}" for name, diff in report.get("checked", {}).items())
    outputs = spec["output"] if isinstance(spec["output"], list) else [spec["output"]]
    rows = "G" if spec["task"] == "graph" else "N"
    shown = ", ".join(f"{name} [{rows}, {spec['out_dim']}]" for name in outputs)
    click.echo(
        f"{report['out']}: {spec['arch']} ({spec['trained_on']} run), ({inputs}) -> {shown}"
        + (f"; matches predict ({checked})" if checked else "")
    )


@cli.command(
    epilog="""
\b
Examples:
  gnnbridge backends
  gnnbridge backends --json | jq ".[] | select(.available)"
"""
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def backends(as_json: bool) -> None:
    """List backends: available or not (and why), and their library versions."""
    from gnnbridge.core.plugins import backends as registry

    rows = []
    for entry in registry.entries():
        reason = entry.value.availability()
        rows.append(
            {
                "name": entry.name,
                "available": reason is None,
                "reason": reason,
                "versions": entry.value.versions() if reason is None else {},
                "plugin": entry.plugin,
            }
        )
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        if row["available"]:
            versions = ", ".join(f"{k} {v}" for k, v in row["versions"].items())
            click.echo(f"{row['name']:<8} available    {versions}")
        else:
            click.echo(f"{row['name']:<8} unavailable  {row['reason']}")


@cli.command(
    epilog="""
\b
Examples:
  gnnbridge plugins
  GNNBRIDGE_LOAD_PLUGINS=pyg,samplers gnnbridge plugins   # only these
"""
)
def plugins() -> None:
    """Loaded plugins (JSON): the distribution that installed each, its hooks, what it registered,
    and the plugins left out with why."""
    from gnnbridge.core.plugins import plugin_info

    click.echo(json.dumps(plugin_info(), indent=2))


@cli.command(
    epilog="""
\b
Examples:
  gnnbridge models
  gnnbridge models --json
"""
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def models(as_json: bool) -> None:
    """Model architectures by task and backend (model.arch), and the plugin of each; models for
    heterogeneous graphs (and so task=link) list "hetero" among their tasks."""
    from gnnbridge.core.plugins import models as registry

    if not as_json:
        click.echo(f"{'ARCH':<14} {'TASKS':<22}{'BACKEND':<16} {'PLUGIN':<14} DESCRIPTION")
    _components(registry, as_json, with_tasks=True)


@cli.command(
    epilog="""
\b
Examples:
  gnnbridge samplers
  gnnbridge samplers --json
"""
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def samplers(as_json: bool) -> None:
    """Neighbour samplers (sampler.kind) by backend; auto and native are each backend's own."""
    from gnnbridge.core.plugins import samplers as registry

    if not as_json:
        click.echo(f"{'KIND':<14} {'BACKEND':<16} {'PLUGIN':<14} DESCRIPTION")
        click.echo(
            f"{'auto':<14} {'every backend':<16} {'gnnbridge':<14} the backend's own sampler when it can run, else core"
        )
        native = "the library's own sampler, or one line saying why not"
        click.echo(f"{'native':<14} {'every backend':<16} {'gnnbridge':<14} {native}")
    _components(registry, as_json, with_tasks=False)


def _components(registry, as_json: bool, with_tasks: bool) -> None:
    rows = [
        {
            "name": c.name,
            "backend": "every backend" if c.backend == "*" else c.backend,
            "plugin": c.plugin,
            "tasks": [t.value for t in c.tasks],
            "heterogeneous": c.heterogeneous,
            "description": c.description,
        }
        for c in registry.entries()
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        tasks = f"{','.join(row['tasks'] + (['hetero'] if row['heterogeneous'] else [])):<22}" if with_tasks else ""
        click.echo(f"{row['name']:<14} {tasks}{row['backend']:<16} {row['plugin']:<14} {row['description']}")


@cli.command(
    epilog="""
\b
Examples:
  gnnbridge datasets
  gnnbridge train --dataset pyg:Planetoid --set dataset.options.name=Cora
"""
)
def datasets() -> None:
    """Datasets by name (--dataset NAME), then the libraries whose own dataset classes open as
    LIBRARY:CLASS, each with its plugin."""
    from gnnbridge.core.plugins import dataset_libraries
    from gnnbridge.core.plugins import datasets as registry

    for entry in registry.entries():
        click.echo(f"{entry.name:<22} {entry.description}  [plugin '{entry.plugin}']")
    for entry in dataset_libraries.entries():
        click.echo(f"{entry.name + ':CLASS':<22} {entry.description}  [plugin '{entry.plugin}']")


@cli.command(
    epilog="""
\b
Examples:
  gnnbridge experiments
  gnnbridge config show gin-synthetic      # one of them, every key
"""
)
def experiments() -> None:
    """Built-in experiments with a one-line description."""
    from gnnbridge.core.plugins import experiments as registry

    for entry in registry.entries():
        click.echo(f"{entry.name:<18} {entry.description}")


@cli.group(
    epilog="""
\b
Examples:
  gnnbridge config show sage-synthetic --set model.hidden=128
  gnnbridge config schema > gnnbridge.schema.json
"""
)
def config() -> None:
    """Inspect configs (gnnbridge config show EXPERIMENT) and the experiment file's JSON Schema."""


@config.command(
    epilog="""
\b
Examples:
  gnnbridge config show                                # the default experiment, every key explained
  gnnbridge config show gat-synthetic --backend dgl --set model.heads=8
  gnnbridge config show my.yaml > resolved.yaml        # a complete config file to edit
"""
)
@click.argument("experiment", required=False)
@click.option("--backend", help="Backend name, e.g. pyg or dgl.")
@click.option("--dataset", help="A dataset name, a .npz path or a prepared folder.")
@click.option("--nproc", type=int, help="Ranks on this machine.")
@click.option("--device", help="cpu, cuda or auto.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a config key.")
def show(experiment, backend, dataset, nproc, device, overrides) -> None:
    """Print the config a run would use, as YAML with a comment on every key (checked as train
    checks it before it starts: a config train would refuse is refused here, in the same line)."""
    import contextlib
    import copy

    from gnnbridge.core.app.preflight import check_before_start
    from gnnbridge.core.app.resolve import resolve_config
    from gnnbridge.core.config import annotated_yaml

    resolved = resolve_config(
        experiment, overrides=overrides, backend=backend, nproc=nproc, device=device, dataset=dataset
    )
    with contextlib.redirect_stdout(sys.stderr):  # a dataset loader's chatter is not part of the YAML
        check_before_start(copy.deepcopy(resolved))
    click.echo(annotated_yaml(resolved), nl=False)


@config.command(
    epilog="""
\b
Examples:
  gnnbridge config schema > gnnbridge.schema.json
  # then, first line of an experiment file (editors with the YAML language server validate it):
  # yaml-language-server: $schema=./gnnbridge.schema.json
"""
)
def schema() -> None:
    """Print the JSON Schema of an experiment file: every key with its type, default, choices and
    help line, unknown keys refused (editors validate and complete experiment YAML with it)."""
    from gnnbridge.core.config import schema_json

    click.echo(schema_json(), nl=False)


@cli.command(
    epilog="""
\b
Examples:
  gnnbridge doctor                                     # this machine
  gnnbridge doctor --dataset big.npz --nproc 4         # and a job: /dev/shm, memory, threads for it
"""
)
@click.argument("experiment", required=False)
@click.option(
    "--dataset",
    help="A dataset name, a .npz path or a prepared folder (loaded and checked as train checks it; /dev/shm and "
    "memory against its size).",
)
@click.option("--nproc", type=int, help="Ranks the job will run on this machine.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a config key.")
def doctor(experiment, dataset, nproc, overrides) -> None:
    """Check the environment before a long job: torch, GPUs and NCCL, each backend and its native
    parts, the sampler, threads, a free port, /dev/shm, memory and disk; given an experiment (or
    --dataset, --nproc, --set), everything train checks before it starts, the data included.
    Exit code 1 on a failure."""
    from gnnbridge.core.app.doctor import diagnose
    from gnnbridge.core.app.resolve import resolve_config

    given = experiment or dataset or nproc or overrides
    config = resolve_config(experiment, overrides=overrides, nproc=nproc, dataset=dataset) if given else None
    findings = diagnose(config)
    for f in findings:
        click.echo(f"{f.status:<5} {f.what:<44} {f.detail}" + (f"  -> {f.fix}" if f.fix else ""))
    failed = [f for f in findings if f.status == "fail"]
    if failed:
        click.echo(f"{len(failed)} problem(s) would stop a job; fix them first.", err=True)
        sys.exit(1)


PREPARE_EXAMPLES = """
\b
The source is a folder of .npy files named as the .npz format's arrays (x.npy, edge_index.npy,
y.npy, optional train_idx.npy, val_idx.npy, test_idx.npy; node_ptr.npy for a collection;
x__TYPE.npy, edge_index__SRC__REL__DST.npy ... for a heterogeneous graph), a .npz file (streamed
into the folder beside it, named without .npz) or a dataset name (written into ./NAME).
Derived files go to OUT/prepared/; then train with --dataset OUT.

\b
Examples:
  gnnbridge prepare data/papers                        # then: gnnbridge train --dataset data/papers
  gnnbridge prepare /readonly/papers --out /scratch/papers --dtype float16
  gnnbridge prepare graph.npz                          # writes graph/ beside it
  gnnbridge prepare karate --out data/karate --quiet

\b
From tables (a folder of .parquet or .csv files, a .sqlite/.sqlite3/.db or .duckdb file; see
gnnbridge schema SOURCE): each entity table a node type, each foreign key and edge table a
relation (and its reverse), the label column the task; fitted transforms and key maps kept in
OUT/tables.json and OUT/keys/.
  gnnbridge prepare data/shop --label customers.churned --out data/shop-graph
  gnnbridge prepare shop.duckdb --schema shop.yaml --label reviews.rating --target regression --out g
  gnnbridge prepare shop.sqlite --label customers.churned --on-dangling drop --out g
  gnnbridge prepare new-shop/ --like data/shop-graph --out data/new-graph   # then predict RUN --dataset it
"""


@cli.command(epilog=PREPARE_EXAMPLES)
@click.argument("source", metavar="DIR|FILE.npz|NAME|TABLES")
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    help="Folder for the prepared dataset (default: DIR itself, FILE beside FILE.npz, ./NAME).",
)
@click.option(
    "--dtype",
    type=click.Choice(["float32", "float16", "bfloat16"]),
    default="float32",
    show_default=True,
    help="Store the features as this type (float16 and bfloat16 halve them; training upcasts each batch).",
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--label", metavar="TABLE.COLUMN", help="From tables: the column to predict (an entity or edge table's).")
@click.option("--schema", "schema_file", type=click.Path(dir_okay=False), help="From tables: the schema file to use.")
@click.option(
    "--target", type=click.Choice(["class", "regression", "multilabel"]), help="From tables: the label's form."
)
@click.option(
    "--on-dangling",
    type=click.Choice(["refuse", "drop"]),
    default="refuse",
    show_default=True,
    help="From tables: a foreign key naming no row is refused, or its edge dropped (and counted).",
)
@click.option(
    "--like",
    type=click.Path(file_okay=False),
    help="From tables: new tables read with this prepared folder's schema, encoders and classes (to predict on).",
)
@interruptible
def prepare(source, out, dtype, quiet, label, schema_file, target, on_dangling, like) -> None:
    """Check a dataset once and derive what training needs (CSC topology, counts, converted
    features), recorded in OUT/prepared/manifest.json, so that a run maps its files and starts in
    seconds. A folder changed afterwards is refused until it is prepared again. From tables, the
    folder dataset is written first (OUT is then required)."""
    from gnnbridge.core.app.prepare import prepare as prepare_source
    from gnnbridge.core.storage.prepare import describe

    given = click.get_current_context().get_parameter_source("on_dangling") is not click.core.ParameterSource.DEFAULT
    tables = {"label": label, "schema": schema_file, "target": target, "on_dangling": on_dangling if given else None}
    result = prepare_source(source, out, dtype, not quiet, **tables, like=like)
    click.echo(describe(result))
    for note in result.get("notes", ()):
        click.echo(f"note: {note}")
    if result.get("train"):
        click.echo(f"train: {result['train']}")


SCHEMA_EXAMPLES = """
\b
Prints the schema inferred from SOURCE (a folder of .parquet or .csv files, one per table or a
sub-folder of files per table; a .sqlite/.sqlite3/.db file; a .duckdb file) as YAML: keys, foreign
keys (with their checked counts), entity and edge tables, each column's kind and transform. Edit
it and give it to prepare with --schema.

\b
Examples:
  gnnbridge schema data/shop --label customers.churned
  gnnbridge schema shop.duckdb --label customers.churned --out shop.yaml
  gnnbridge prepare shop.duckdb --schema shop.yaml --out data/shop-graph
"""


@cli.command(name="schema", epilog=SCHEMA_EXAMPLES)
@click.argument("source", metavar="SOURCE")
@click.option("--label", metavar="TABLE.COLUMN", help="The column to predict (recorded as task.label).")
@click.option("--out", type=click.Path(dir_okay=False), help="Write the YAML to this file instead of printing it.")
def schema_command(source, label, out) -> None:
    """Infer the schema of a set of tables: every guess visible and editable."""
    from gnnbridge.tables.schema import infer, to_yaml
    from gnnbridge.tables.sources import open_source

    with open_source(source) as opened:
        text = to_yaml(infer(opened, label), opened.where)
    if out is None:
        click.echo(text, nl=False)
        return
    from pathlib import Path

    from gnnbridge.core import files

    files.replace(Path(out), text)
    click.echo(f"schema: {out}")


PARTITION_EXAMPLES = """
\b
Writes DIR/partitions/K/: partition.json (every machine needs it) and part-0 ... part-(K-1)
(machine M of the job needs part-M only). Then, on K machines:
  torchrun --nnodes K ... -m gnnbridge train --dataset DIR --set dataset.partitions=K

\b
Examples:
  gnnbridge partition data/papers --parts 4                  # METIS if it fits in memory
  gnnbridge partition data/papers --parts 8 --method stream  # one pass, memory bounded
  gnnbridge partition data/papers --parts 4 --task link --set train.seed=1
                      # also cut the link task a run of these settings trains (its split, negatives)
"""


@cli.command(epilog=PARTITION_EXAMPLES)
@click.argument("folder", metavar="DIR")
@click.option("--parts", type=click.IntRange(min=2), required=True, help="How many parts: the machines of the job.")
@click.option(
    "--method",
    type=click.Choice(["auto", "metis", "stream"]),
    default=None,
    help="metis: METIS (pymetis), the graph in memory; stream: one greedy pass, memory bounded; "
    "auto (the default): metis where it fits. With --task link and no --method, an existing partitioning is used.",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="METIS' seed, and the node splits' if DIR has none (a link task's split: --set train.seed).",
)
@click.option(
    "--task",
    type=click.Choice(["node", "link"]),
    default="node",
    show_default=True,
    help="link: also cut the link task of --experiment/--set (its split and negatives) into the parts.",
)
@click.option("--experiment", help="With --task link: the experiment whose link settings to cut (YAML or name).")
@click.option(
    "--set", "overrides", multiple=True, metavar="KEY=VALUE", help="With --task link: a setting, e.g. train.seed=1."
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
@interruptible
def partition(folder, parts, method, seed, task, experiment, overrides, quiet) -> None:
    """Cut a prepared folder into one part per machine: nodes relabelled so that each part owns a
    range of ids (of every node type, for a heterogeneous graph), each part holding its nodes'
    rows, labels, splits and in-edges. Reports the balance of the parts and the share of edges
    that cross them. With --task link, also the link task a run of the given settings trains."""
    from gnnbridge.core.app.prepare import partition as partition_folder
    from gnnbridge.core.storage.linkparts import describe_cut
    from gnnbridge.core.storage.partition import describe

    if task == "node" and (experiment or overrides):
        raise click.UsageError("--experiment and --set choose a link task's settings: give them with --task link.")
    link = None
    if task == "link":  # its settings checked before a partitioning that may take hours
        from gnnbridge.core.app.partitioning import cut_link, link_config

        link = link_config(folder, experiment, overrides)
    # --task link on a folder partitioned already: that partitioning, however it was made
    reuse = link is not None and method is None
    click.echo(describe(partition_folder(folder, parts, method or "auto", seed, progress=not quiet, reuse=reuse)))
    if link is not None:
        click.echo(describe_cut(cut_link(folder, parts, link)))


@cli.command(
    epilog="""
\b
Examples:
  gnnbridge loggers
  gnnbridge train --set "log.to=[tensorboard,csv]"
"""
)
def loggers() -> None:
    """Logger plugins for log.to (e.g. --set log.to=[tensorboard,csv]), with their plugin."""
    from gnnbridge.core.plugins import loggers as registry

    for entry in registry.entries():
        click.echo(f"{entry.name:<14} {entry.description}  [plugin '{entry.plugin}']")


@cli.command(
    epilog="""
\b
Examples:
  gnnbridge targets
  gnnbridge train --dataset graph.npz --set target=regression   # y float32 [N] or [N, T]"""
)
def targets() -> None:
    """What an item can be predicted as (the config's target), with its losses and monitors, and
    the task families (the config's task) each with the kind it runs as."""
    from gnnbridge.core.plugins import families
    from gnnbridge.core.plugins import targets as registry

    for entry in registry.entries():
        t = entry.value
        click.echo(f"{entry.name:<12} {entry.description}  [plugin '{entry.plugin}']")
        click.echo(f"{'':<12} losses: {', '.join(t.losses)}; monitors: {', '.join(t.monitors)}")
    click.echo("\ntask families (task=NAME):")
    for entry in families.entries():
        f = entry.value
        takes = f"; targets: {', '.join(f.targets)}" if f.targets else ""
        click.echo(f"{entry.name:<12} {entry.description}  [plugin '{entry.plugin}']")
        click.echo(f"{'':<12} runs as: {f.kind.value}{takes}")


def main(argv: list[str] | None = None) -> None:
    """Every way a command can end is one line on stderr and an exit code; an exception nobody
    anticipated included (its traceback goes to a file the line names). Without ``argv`` this is
    the ``gnnbridge`` program itself (the console script, ``python -m gnnbridge``), whose process
    is gnnbridge's alone (see :func:`~gnnbridge.core.runtime.launcher.own_this_process`), and
    which ends without Python's teardown (:func:`_exit_now`)."""
    if argv is not None:
        _command(argv)
        return
    from gnnbridge.core.runtime.launcher import own_this_process

    own_this_process()
    try:
        _command(None)
    except SystemExit as exc:
        _exit_now(exc.code)
    _exit_now(0)


def _exit_now(code: object) -> NoReturn:
    """End the program without Python's teardown of every module, which with torch and a GNN
    library imported takes about 1.5 s of CPU, and of the user's wait, after the work is done.
    What a normal exit does that matters is done first, in its order, by the interpreter's own
    functions: thread pools are told to stop (their idle workers wait for work until then) and
    the other non-daemon threads are waited for; the ``atexit`` functions run (logging's flush;
    multiprocessing's, tempfile's and ``weakref.finalize``'s clean-ups; gnnbridge's own); stdout
    and stderr are flushed; the exit code is ``SystemExit``'s (a message: printed, and 1). What
    is skipped is only the collection of what is left, which nothing of gnnbridge's needs: its
    files are closed where they are written."""
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    threading._shutdown()  # noqa: SLF001 - the interpreter's first step at exit
    atexit._run_exitfuncs()  # noqa: SLF001 - and its second
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing more can reach the reader
            stream.flush()
    os._exit(code or 0)


def _command(argv: list[str] | None) -> None:
    from gnnbridge.core.plugins.switches import command_line

    record_interrupts()  # a plugin's own KeyboardInterrupt is then its failure, not a Ctrl-C
    try:
        with command_line():  # (refusals name the flags: --trust-code, not trust_code=True)
            cli.main(args=argv, prog_name="gnnbridge", standalone_mode=False)
    except _Stopped as stopped:
        exc = stopped.args[0]
        click.echo(str(exc) if str(exc) else "Interrupted (Ctrl-C); nothing was written.", err=True)
        sys.exit(getattr(exc, "exit_code", 130))
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        click.echo(f"Error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except GnnBridgeError as exc:
        if not getattr(exc, "quiet", False):  # another rank of this node prints the line
            click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)
    except RecursionError:
        click.echo("Error: the input is nested too deeply to read; a config or data file has a few levels.", err=True)
        sys.exit(1)
    except MemoryError:
        click.echo("Error: out of memory; use a smaller dataset or model (or a machine with more memory).", err=True)
        sys.exit(1)
    except Exception as exc:  # noqa: BLE001 - the last line of defence: never a wall of text
        click.echo(
            f"Error: unexpected {type(exc).__name__}: {_first_line(exc)} (this is a gnnbridge bug; the full "
            f"traceback is in {_save_traceback(exc)}).",
            err=True,
        )
        sys.exit(1)


def _first_line(exc: BaseException) -> str:
    text = scrubbed(str(exc)).strip()
    return text.splitlines()[0][:200] if text else "no message"


def _save_traceback(exc: BaseException) -> str:
    """Write the traceback to a file of its own (the run folder may be what failed)."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    try:
        fd, path = tempfile.mkstemp(prefix=f"gnnbridge-crash-{stamp}-", suffix=".txt")
        with os.fdopen(fd, "w") as f:
            text = f"gnnbridge {' '.join(sys.argv[1:])}\n\n" + "".join(traceback.format_exception(exc))
            f.write(scrubbed(text))
        return path
    except OSError:
        return "nowhere (no temporary folder is writable); rerun with python -X faulthandler"
