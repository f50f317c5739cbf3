"""The printed tables and the PNG chart of ``compare.py``'s result (``compare.json``'s content).

Kept apart from the runner so that what is measured and how it is shown can change separately,
and so a saved ``compare.json`` can be shown again:

    python benchmarks/report.py benchmarks/out/compare.json [--png OUT.png]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

PHASE_ROWS = (
    ("sample", "sample"),
    ("gather", "gather"),
    ("h2d", "host-to-device"),
    ("forward", "forward"),
    ("backward", "backward + all-reduce"),
    ("step", "step"),
    ("other", "other (epoch - phases)"),
    ("epoch", "= epoch (training pass)"),
    ("eval", "eval (per-epoch val)"),
)
PHASE_COLORS = {
    "sample": "tab:blue",
    "gather": "tab:orange",
    "h2d": "tab:olive",
    "forward": "tab:green",
    "backward": "tab:red",
    "step": "tab:purple",
    "other": "tab:gray",
    "eval": "tab:cyan",
}


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    return f"{n / 2**30:.2f}G" if n >= 2**30 else f"{n / 2**20:.0f}M"


def fmt_x(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def fmt_f(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def graph_line(g: dict) -> str:
    """The graph in one line: where it came from, its size, and how it was made."""
    made = g["generation"]
    how = (
        "given with --npz"
        if made.get("given")
        else "cached"
        if made.get("cached")
        else f"generated in {made['seconds']:.0f} s, peak {fmt_bytes(made['peak_memory_bytes'])}"
    )
    return (
        f"graph: {Path(g['path']).name} (preset {g['preset']}; {how}): {g['nodes']:,} nodes, "
        f"{g['edges']:,} directed edges, {g['features']} features, {g['classes']} classes, "
        f"{fmt_bytes(g['disk_bytes'])} on disk"
    )


def runner_table(result: dict) -> list[str]:
    """Accuracy, median epoch and eval time with ratios, wall time and memory, one row a runner."""
    n = result["nproc"]
    head = (
        f"{'runner':<17}{'test_acc':>9}{'val_acc':>9}{'epoch_s':>9}{'vs ref':>8}{'eval_s':>9}{'vs ref':>8}"
        f"{'wall_s':>8}{f'mem_{n}r':>9}{'mem_1r':>9}{f'{n}r/1r':>7}{f'{n}r/disk':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in result["rows"]:
        if "epoch_time_s" not in r:
            what = "skipped" if "skipped" in r else "FAILED"
            lines.append(f"{r['runner']:<17}  {what}: {r.get('skipped') or r.get('failed')}")
            continue
        lines.append(
            f"{r['runner']:<17}{fmt_f(r['test_acc'], 4):>9}{fmt_f(r['val_acc'], 4):>9}"
            f"{fmt_f(r['epoch_time_s']):>9}{fmt_x(r['epoch_time_vs_reference']):>8}"
            f"{fmt_f(r['eval_time_s']):>9}{fmt_x(r['eval_time_vs_reference']):>8}{fmt_f(r['wall_time_s'], 1):>8}"
            f"{fmt_bytes(r['peak_memory_bytes']):>9}{fmt_bytes(r['peak_memory_1rank_bytes']):>9}"
            f"{fmt_x(r['memory_n_vs_1']):>7}{fmt_x(r['memory_vs_disk']):>9}"
        )
    return lines


def repeat_lines(result: dict) -> list[str]:
    """Each runner's raw per-repeat numbers, so the spread behind a median is visible."""
    lines = [f"order: {' '.join(result['order'])}"]
    for r in result["rows"]:
        if "epoch_time_s_per_repeat" in r:
            lines.append(
                f"  {r['runner']:<17} epoch_s {' '.join(f'{t:.3f}' for t in r['epoch_time_s_per_repeat'])}"
                f"   eval_s {' '.join(f'{t:.3f}' for t in r['eval_time_s_per_repeat'])}"
            )
    return lines


def phase_table(phases: dict) -> list[str]:
    """gnnbridge's median seconds per epoch by phase, rank 0 and slowest rank, for each backend."""
    if not phases:
        return ["(no gnnbridge phases)"]
    cols = [(name, side) for name in phases for side in ("rank0", "slowest_rank")]
    head = f"{'phase (median s/epoch)':<25}" + "".join(
        f"{n.split('-')[1] + (' r0' if s == 'rank0' else ' slowest'):>13}" for n, s in cols
    )
    lines = [head, "-" * len(head)]
    for key, label in PHASE_ROWS:
        cells = "".join(f"{fmt_f(phases[n][s].get(key), 4):>13}" for n, s in cols)
        lines.append(f"{label:<25}{cells}")
    lines.append(
        f"{'final eval (per run)':<25}"
        + "".join(f"{fmt_f(phases[n]['final_eval'], 4) if s == 'rank0' else '':>13}" for n, s in cols)
    )
    return lines


def sampler_table(sampler: dict | None) -> list[str]:
    """Edges/s of each sampler at each thread count, and against DGL's at the same count."""
    if not sampler:
        return ["(sampler benchmark not run: --no-sampler-bench)"]
    head = f"{'sampler':<12}{'threads':>8}{'edges/s':>13}{'ms/batch':>10}{'edges/batch':>13}{'vs dgl':>8}"
    lines = [head, "-" * len(head)]
    for r in sampler["results"]:
        if "edges_per_s" not in r:
            lines.append(
                f"{r['sampler']:<12}{r['threads']:>8}  {'skipped' if 'skipped' in r else 'FAILED'}: "
                f"{r.get('skipped') or r.get('failed')}"
            )
            continue
        ratio = sampler["vs_dgl"][r["sampler"]][str(r["threads"])]
        lines.append(
            f"{r['sampler']:<12}{r['threads']:>8}{r['edges_per_s']:>13,.0f}{r['ms_per_batch']:>10.2f}"
            f"{r['edges_per_batch']:>13,.0f}{fmt_x(ratio):>8}"
        )
    return lines


def goal_lines(result: dict) -> list[str]:
    """Every goal of the done criterion with its measured value and PASS / MISS."""
    lines = [
        (
            f"this run: preset {result['graph']['preset']} ({result['graph']['nodes']:,} nodes); each goal is "
            "judged at the scales in brackets"
        )
    ]
    for g in result["goals"]:
        value = "-" if g["value"] is None else f"{g['value']:.2f}{g['unit']}"
        lines.append(f"  {g['status']:<13}{value:>8}  {g['goal']}  [{g['judged_at']}]")
    return lines


def accuracy_line(result: dict) -> str:
    check = result["verdict"]
    tolerance = check.get("tolerance")
    within = f" (within {tolerance:.0%} test accuracy)" if tolerance is not None else ""
    return f"accuracy criterion{within}: " + (
        "PASS" if check["passed"] else "FAIL " + str(check.get("failed") or check.get("reason"))
    )


BUSY_WARN = 0.10  # share of the machine's CPU used by others during a run that makes timings suspect


def load_warning(result: dict) -> list[str]:
    """A warning when other processes used the CPU during any measured run (timings suspect)."""
    measured = result["runs"] + result["one_rank_runs"] + ((result["sampler"] or {}).get("results") or [])
    busy = [
        (r.get("other_cpu_share") or 0.0, r.get("runner") or f"sampler {r['sampler']} x{r['threads']}")
        for r in measured
    ]
    worst = max(busy, key=lambda b: b[0], default=(0.0, None))
    if worst[0] < BUSY_WARN:
        return []
    return [
        (
            f"WARNING: other processes used up to {worst[0]:.0%} of the machine's CPU during a run ({worst[1]}; "
            "other_cpu_share per run in compare.json): timings taken then are not reliable."
        ),
        "",
    ]


def text(result: dict) -> str:
    """Everything, as printed at the end of a run."""
    m = result["machine"]
    parts = [
        graph_line(result["graph"]),
        (
            f"machine: {m['cpus']} CPUs ({m['cpu']}), {fmt_bytes(m['memory_bytes'])} RAM; "
            f"{result['nproc']} ranks, {result['epochs']} epochs, {result['repeats']} repeat(s)"
        ),
        "",
        *runner_table(result),
        "",
        *repeat_lines(result),
        "",
        *phase_table(result["phases"]),
        "",
        *sampler_table(result["sampler"]),
        "",
        *load_warning(result),
        "goals:",
        *goal_lines(result),
        "",
        accuracy_line(result),
    ]
    return "\n".join(parts)


# --------------------------------------------------------------------------- chart


def bars_with_ratios(ax, rows: list[dict], key: str, ratio_key: str, title: str) -> None:
    """One bar per runner, labelled with its ratio to the reference."""
    done = [r for r in rows if r.get(key) is not None]
    pos = range(len(done))
    bars = ax.bar(list(pos), [r[key] for r in done], color="tab:gray")
    for bar, r in zip(bars, done):
        ax.annotate(
            fmt_x(r.get(ratio_key)),
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set(xticks=list(pos), ylabel="seconds", title=title)
    ax.set_xticklabels([r["runner"] for r in done], rotation=15, fontsize=8)


def accuracy_panel(ax, rows: list[dict]) -> None:
    done = [r for r in rows if r.get("test_acc") is not None]
    pos, width = range(len(done)), 0.38
    ax.bar([p - width / 2 for p in pos], [r["test_acc"] for r in done], width, label="test")
    ax.bar([p + width / 2 for p in pos], [r["val_acc"] for r in done], width, label="val")
    low = min([min(r["test_acc"], r["val_acc"]) for r in done] or [0.1])
    ax.set(
        xticks=list(pos),
        ylabel="accuracy",
        title="Accuracy (full-neighbour inference)",
        ylim=(max(0.0, low - 0.1), 1.0),
    )
    ax.set_xticklabels([r["runner"] for r in done], rotation=15, fontsize=8)
    ax.legend(loc="lower right", fontsize=8)


def phase_panel(ax, phases: dict) -> None:
    """Stacked median seconds per phase: each backend on rank 0 and on its slowest rank."""
    cols = [(name, side) for name in phases for side in ("rank0", "slowest_rank")]
    for i, (name, side) in enumerate(cols):
        bottom = 0.0
        for key in ("sample", "gather", "h2d", "forward", "backward", "step", "other", "eval"):
            value = max(0.0, phases[name][side].get(key, 0.0))
            ax.bar(i, value, bottom=bottom, color=PHASE_COLORS[key], label=key if i == 0 else None)
            bottom += value
    ax.set(xticks=list(range(len(cols))), ylabel="seconds per epoch (median)", title="gnnbridge phases")
    ax.set_xticklabels([f"{n.split('-')[1]}\n{'rank 0' if s == 'rank0' else 'slowest'}" for n, s in cols], fontsize=8)
    ax.legend(fontsize=7, ncol=2)


def sampler_panel(ax, sampler: dict | None) -> None:
    """Edges/s per sampler, one bar per thread count."""
    if not sampler:
        ax.set_title("Sampler throughput (not run)")
        return
    done = [r for r in sampler["results"] if "edges_per_s" in r]
    names = list(dict.fromkeys(r["sampler"] for r in done))
    threads = sampler["threads"]
    width = 0.8 / max(1, len(threads))
    for j, t in enumerate(threads):
        rate = {r["sampler"]: r["edges_per_s"] for r in done if r["threads"] == t}
        ax.bar(
            [i + (j - (len(threads) - 1) / 2) * width for i in range(len(names))],
            [rate.get(n, 0.0) / 1e6 for n in names],
            width,
            label=f"{t} thread{'s' * (t > 1)}",
        )
    ax.set(xticks=list(range(len(names))), ylabel="million sampled edges / s", title="Sampler throughput")
    ax.set_xticklabels(names, fontsize=8)
    ax.legend(fontsize=8)


def memory_panel(ax, result: dict) -> None:
    """Peak memory of one rank and of N ranks per runner, against the dataset's size on disk."""
    done = [r for r in result["rows"] if r.get("peak_memory_bytes")]
    pos, width, n = range(len(done)), 0.38, result["nproc"]
    ax.bar(
        [p - width / 2 for p in pos], [(r["peak_memory_1rank_bytes"] or 0) / 2**30 for r in done], width, label="1 rank"
    )
    ax.bar([p + width / 2 for p in pos], [r["peak_memory_bytes"] / 2**30 for r in done], width, label=f"{n} ranks")
    ax.axhline(
        result["graph"]["disk_bytes"] / 2**30, color="black", linestyle="--", linewidth=1, label="dataset on disk"
    )
    ax.set(xticks=list(pos), ylabel="GiB (summed PSS)", title="Peak memory")
    ax.set_xticklabels([r["runner"] for r in done], rotation=15, fontsize=8)
    ax.legend(fontsize=8)


def panels(result: dict) -> dict:
    """``{name: draw(ax)}``: each panel of the chart, in its order."""
    rows = result["rows"]
    return {
        "epoch": lambda ax: bars_with_ratios(
            ax, rows, "epoch_time_s", "epoch_time_vs_reference", "Training pass per epoch (median)"
        ),
        "eval": lambda ax: bars_with_ratios(
            ax, rows, "eval_time_s", "eval_time_vs_reference", "Final evaluation (median)"
        ),
        "accuracy": lambda ax: accuracy_panel(ax, rows),
        "phases": lambda ax: phase_panel(ax, result["phases"]),
        "sampler": lambda ax: sampler_panel(ax, result["sampler"]),
        "memory": lambda ax: memory_panel(ax, result),
    }


def plot_panels(result: dict, folder: Path, stem: str) -> None:
    """Each panel as its own PNG, ``folder/stem-NAME.png``: the docs show them one at a time, at
    a size that can be read (six panels in one 17-inch chart could not be, at a page's width)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for name, draw in panels(result).items():
        fig, ax = plt.subplots(figsize=(6, 4.5))
        draw(ax)
        fig.tight_layout()
        fig.savefig(folder / f"{stem}-{name}.png", dpi=100)
        plt.close(fig)


def plot(result: dict, path: Path) -> None:
    """All panels in one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(17, 9))
    for ax, draw in zip(axes.flat, panels(result).values()):
        draw(ax)
    g = result["graph"]
    fig.suptitle(
        f"{g['nodes']:,} nodes, {g['edges']:,} edges, {g['features']} features; "
        f"{result['nproc']} ranks, {result['epochs']} epochs, {result['repeats']} repeat(s)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Show a saved compare.json again.")
    parser.add_argument("json", type=Path)
    parser.add_argument("--png", type=Path, help="also draw the chart here")
    parser.add_argument(
        "--panels", type=Path, help="also draw each panel as DIR/<json stem>-NAME.png (the docs' figures)"
    )
    args = parser.parse_args(argv)
    result = json.loads(args.json.read_text())
    print(text(result))
    if args.png:
        plot(result, args.png)
    if args.panels:
        plot_panels(result, args.panels, args.json.stem)


if __name__ == "__main__":
    main()
