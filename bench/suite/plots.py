"""PNG plots of the suite's results (matplotlib, no display needed)."""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from common import format_bytes  # noqa: E402
from report import job_rows, multihost_rows  # noqa: E402

# one colour per implementation, the same in every plot
COLOURS = {"fuse (gloo)": "tab:blue", "torch.distributed (gloo)": "tab:orange",
           "fuse (mpi)": "tab:green", "mpi4py": "tab:red", "fuse": "tab:blue",
           "DDP": "tab:orange", "1 worker (torch)": "tab:gray"}


def _allreduce_series(w: dict) -> dict[str, tuple[list[int], list[float], list[float]]]:
    """label -> (sizes, seconds per call, GB/s) for the four implementations measured."""
    series = {}
    for prefix, fuse_label, comp, comp_label in (
            ("allreduce_gloo", "fuse (gloo)", "torch.distributed", "torch.distributed (gloo)"),
            ("allreduce_mpi", "fuse (mpi)", "mpi4py", "mpi4py")):
        rows = sorted(job_rows(w, prefix), key=lambda r: r["size_bytes"])
        if not rows:
            continue
        sizes = [r["size_bytes"] for r in rows]
        for key, label in (("fuse", fuse_label), (comp, comp_label)):
            series[label] = (sizes, [r["median"][key] for r in rows],
                             [r["bandwidth_GBps"][key] for r in rows])
    return series


def _size_axis(ax, sizes):
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([format_bytes(s).replace(" ", "") for s in sizes], rotation=45,
                       ha="right")
    ax.set_xlabel("allreduce size (float32, 2 ranks)")
    ax.grid(True, which="major", alpha=0.3)


def allreduce_plots(w: dict, out_dir: str) -> list[str]:
    series = _allreduce_series(w)
    if not series:
        return []
    sizes = sorted({s for v in series.values() for s in v[0]})
    paths = []
    for name, index, ylabel, yscale in (
            ("allreduce_bandwidth.png", 2, "algorithm bandwidth (GB/s, higher is better)",
             "linear"),
            ("allreduce_latency.png", 1, "time per allreduce (s, lower is better)", "log")):
        fig, ax = plt.subplots(figsize=(8, 5))
        for label, values in series.items():
            ax.plot(values[0], values[index], marker="o", label=label, color=COLOURS[label])
        _size_axis(ax, sizes)
        ax.set_yscale(yscale)
        ax.set_ylabel(ylabel)
        ax.set_title("Allreduce, " + ("bandwidth" if index == 2 else "time") + " against size")
        ax.legend()
        fig.tight_layout()
        paths.append(os.path.join(out_dir, name))
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


def _grouped_bars(ax, cases: list[str], groups: dict[str, list[float]]):
    width = 0.8 / len(groups)
    for i, (label, values) in enumerate(groups.items()):
        xs = [k + (i - (len(groups) - 1) / 2) * width for k in range(len(cases))]
        bars = ax.bar(xs, values, width, label=label, color=COLOURS.get(label))
        ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels(cases)
    # head room above the tallest bar, so the legend in one row never covers a bar's label
    ax.set_ylim(0, 1.2 * max(max(v) for v in groups.values()))
    ax.legend(loc="upper center", ncol=len(groups))


def _bar_plot(path: str, cases: list[str], groups: dict[str, list[float]], ylabel: str,
              title: str) -> list[str]:
    fig, ax = plt.subplots(figsize=(8, 5))
    _grouped_bars(ax, cases, groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def _step_time_plot(rows: list[dict], cases: list[str], title: str, path: str) -> list[str]:
    """fuse's and DDP's median step times, side by side per case."""
    return _bar_plot(path, cases, {"fuse": [r["median"]["fuse"] * 1e3 for r in rows],
                                   "DDP": [r["median"]["DDP"] * 1e3 for r in rows]},
                     "step time (ms, lower is better)", title)


def many_small_plot(w: dict, out_dir: str) -> list[str]:
    rows = [r for r in job_rows(w, "torch_step") if r["case"].startswith("step")]
    if not rows:
        return []
    cases = [r["case"].removeprefix("step, ").replace(", ", "\n") for r in rows]
    return _step_time_plot(rows, cases,
                           "ResNet-50 gradient set (161 tensors), 2 workers: fuse vs DDP",
                           os.path.join(out_dir, "many_small.png"))


def training_plot(w: dict, out_dir: str) -> list[str]:
    rows = job_rows(w, "train_cnn")
    if not rows:
        return []
    cases = [f"backward_passes_per_step {r['bpps']}" for r in rows]
    groups = {"1 worker (torch)": [r["median"]["1 worker"] for r in rows],
              "fuse": [r["median"]["fuse"] for r in rows],
              "DDP": [r["median"]["DDP"] for r in rows]}
    return _bar_plot(os.path.join(out_dir, "training.png"), cases, groups,
                     "samples per second, all workers (higher is better)",
                     "Small CNN, synthetic 32x32 images: 1 worker vs 2 workers")


def loaded_plot(w: dict, out_dir: str) -> list[str]:
    rows = job_rows(w, "loaded")
    if not rows:
        return []
    return _step_time_plot(rows, [r["case"].replace(", ", "\n") for r in rows],
                           "fuserun vs torchrun, 2 workers, quiet and beside busy processes",
                           os.path.join(out_dir, "loaded.png"))


def multihost_plot(w: dict, out_dir: str) -> list[str]:
    rows = multihost_rows(w)
    if not rows:
        return []
    return _step_time_plot(rows, [r["case"].replace(", ", "\n") for r in rows],
                           "Across network-namespace hosts: fuse vs DDP",
                           os.path.join(out_dir, "multihost.png"))


def draw_all(results: dict[str, dict], out_dir: str) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for key, draw in (("allreduce", allreduce_plots), ("many_small", many_small_plot),
                      ("training", training_plot), ("loaded", loaded_plot),
                      ("multihost", multihost_plot)):
        if key in results:
            paths += draw(results[key], out_dir)
    return paths
