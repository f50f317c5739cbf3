"""Several runs on one figure: the code behind ``gnnbridge plot`` and ``compare.png``.

Each run's ``curves.png`` shows one run; comparing runs (two libraries, two learning rates, a
run and its port) means looking at their curves together, so this draws the training loss and
the monitored validation metric of every run given, one line per run, from their
``results.json``. Nothing is read but those files, and the figure is written beside its target
and linked into place, never over an existing file (:func:`gnnbridge.core.files.publish`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gnnbridge.core import files
from gnnbridge.core.app.rundir import RESULTS
from gnnbridge.core.errors import ConfigError, DataFileNotFoundError, OutputExistsError


def plot(runs: list[str | os.PathLike], out: str | os.PathLike, labels: list[str] | None = None) -> Path:
    """Draw ``runs``' learning curves side by side: loss and the monitored metric per epoch.

    :param runs: run folders.
    :param out: the ``.png`` to write (must not exist).
    :param labels: one legend label per run; default the folder names (with the backend where the
        name does not say it).
    :returns: ``out``, as a :class:`~pathlib.Path`.
    """
    if not runs:
        raise ConfigError("Give at least one run folder to plot, e.g. gnnbridge plot runs/a runs/b --out ab.png.")
    out = Path(out)
    if out.suffix != ".png":
        raise ConfigError(f"--out {out} must end in .png, e.g. --out curves.png.")
    if out.exists() or out.is_symlink():
        raise OutputExistsError(f"'{out}' already exists; choose a new --out (gnnbridge never overwrites a file).")
    results = [_results(Path(run)) for run in runs]
    labels = labels or _labels([Path(r) for r in runs], results)
    with files.reserved(out) as tmp:  # a file where a folder should be, no permission ...: one line
        files.publish(out, tmp, lambda f: _draw(results, labels, f), "plotting")
    return out


def _results(run: Path) -> dict:
    path = run / RESULTS
    if not path.is_file():
        raise DataFileNotFoundError(
            f"'{run}' holds no {RESULTS}; give folders of finished runs (gnnbridge train writes one at the end)."
        )
    try:
        results = json.loads(path.read_text())
        if not results["history"] or "best" not in results:
            raise ValueError
    except (ValueError, KeyError, TypeError, OSError):
        raise DataFileNotFoundError(f"'{path}' is not a gnnbridge results file (no history to draw).") from None
    return results


def _labels(runs: list[Path], results: list[dict]) -> list[str]:
    """The folder names, with the backend where the names alone do not say it."""
    return [
        f"{run.name} ({r['backend']})" if r["backend"] not in run.name else run.name for run, r in zip(runs, results)
    ]


def _draw(results: list[dict], labels: list[str], f) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (ax_loss, ax_val) = plt.subplots(1, 2, figsize=(10, 3.8))
    monitors = sorted({r["best"]["monitor"] for r in results})
    for r, label in zip(results, labels):
        epochs = [h["epoch"] + 1 for h in r["history"]]
        ax_loss.plot(epochs, [h["loss"] for h in r["history"]], marker="o", label=label)
        ax_val.plot(epochs, [h.get(r["best"]["monitor"]) for h in r["history"]], marker="o", label=label)
    ax_loss.set(xlabel="epoch", ylabel="training loss", title="Training loss")
    ax_val.set(xlabel="epoch", ylabel=" / ".join(monitors), title="Validation")
    for ax in (ax_loss, ax_val):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(f, dpi=110, format="png")
    plt.close(fig)
