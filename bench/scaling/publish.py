"""The scaling model's page (markdown) and plot (PNG)."""

from __future__ import annotations

HOROVOD = (512, 0.90)     # Horovod's published figure: ResNet-101, 512 Pascal GPUs, 25 Gbit/s


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs"


BOTH = "both"
HERE_ONLY = "this machine"


def parameter_rows(engine, shm, slots, link, work, params) -> list[str]:
    load = params["machine_start"]["load_average"]
    return [
        "| parameter | value | measured by | applies to |",
        "|---|---|---|---|",
        f"| engine, per collective (2 ranks) | {us(engine.per_collective)} | 4 B allreduce, "
        f"2 ranks, one host | {BOTH} |",
        f"| engine, per extra rank | {us(engine.per_rank)} | 4 B allreduce at 4 ranks less 2 | "
        f"{BOTH} |",
        f"| hooks, per gradient | {us(engine.per_tensor)} | the torch step's hooks at 2 ranks "
        f"(bench/scaling/step_cpu.py), CPU time of the backward thread | {BOTH} |",
        f"| hooks, writing a gradient into its shared slot | "
        f"{1 / engine.per_gradient_byte / 1e9:.2f} GB/s | the same, over the bytes written | "
        f"{HERE_ONLY} (GPUs: a copy in device memory) |",
        f"| engine, reducing between the shared gradient slots | "
        + ", ".join(f"{1 / s.per_byte / 1e9:.2f} GB/s at {n} ranks"
                    for n, s in sorted(slots.items()))
        + f" | the same step, CPU time of the engine's threads | {HERE_ONLY}, the torch step "
        "on one host |",
        f"| shared memory, per collective | {us(shm.alpha)} | 1-64 MiB allreduces on uncached "
        f"buffers, 2 and 4 ranks, least squares | {HERE_ONLY} (GPUs: NVLink) |",
        f"| shared memory, one rank's throughput | {1 / shm.per_byte / 1e9:.2f} GB/s | the same | "
        f"{HERE_ONLY} |",
        f"| cores shared by compute and the engine | {params['machine_start']['cores']} cores | "
        f"the machine | {HERE_ONLY} (a GPU's rank has its own processor) |",
        f"| link, per message | {us(link.alpha)} | 4 B allreduce through the ring, 2 hosts x 1 "
        f"rank, less the negotiation | {BOTH} (GPUs: + wire) |",
        f"| link, negotiation beyond one host's | {us(link.negotiation)} | 4 B allreduce inline, "
        f"2 hosts x 1 rank | {BOTH} |",
        f"| link, payload bandwidth | {link.bandwidth / 1e6:.1f} MB/s "
        f"({link.bandwidth / 1e9 / params['config']['link_GBps'] * 100:.1f} % of "
        f"{params['config']['rate']}) | 1-16 MiB allreduces, 2 hosts x 1 rank, slope | "
        f"{BOTH} (GPUs: the fraction) |",
        f"| step: forward, backward, optimizer | {ms(work.forward)}, "
        f"{ms(sum(t for t, _ in work.backward))} over {len(work.backward)} gradients, "
        f"{ms(work.optimizer)} | bench/scaling/step_compute.py, one thread, "
        f"{params['compute'].get('copies', 1)} at once | {HERE_ONLY} "
        "(GPUs: ResNet-101's stated rate) |",
        "",
        f"Taken {params['machine_end']['time_utc']} on {params['machine_start']['cores']} cores "
        f"({params['machine_start']['cpu']}), load average {load[0]} / {load[1]} / {load[2]} "
        f"at the start; `python bench/scaling/measure.py` ({params['seconds']:.0f} s). "
        "*Applies to*: *this machine* for the check, *both* for the check and the GPU "
        "prediction.",
    ]


def check_rows(points) -> list[str]:
    rows = ["| point | measured | model | model/measured - 1 | measured in |",
            "|---|---|---|---|---|"]
    for p in points:
        note = "" if p.checked else " (shown, not checked)"
        rows.append(f"| {p.name}{note} | {ms(p.measured)} | {ms(p.model)} | "
                    f"{p.error * 100:+.1f} % | {p.source} |")
    return rows


def _grid(corner: str, columns: list[str], rows: dict[str, list[str]]) -> list[str]:
    """A markdown table: ``corner`` above the row labels, one column per ``columns``."""
    lines = [f"| {corner} | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows.items()]
    return lines


def _pct(efficiency: float) -> str:
    return f"{efficiency * 100:.1f} %"


def prediction_rows(curves: dict[str, list[tuple[int, float]]]) -> list[str]:
    counts = [n for n, _ in next(iter(curves.values()))]
    return _grid("setting", [f"{n} GPUs" for n in counts],
                 {label: [_pct(e) for _, e in points] for label, points in curves.items()})


def limit_rows(limits: dict[float, dict[str, float]]) -> list[str]:
    rates = list(limits)
    return _grid("512 GPUs, efficiency", [f"{r:g} Gbit/s" for r in rates],
                 {case: [_pct(limits[r][case]) for r in rates]
                  for case in next(iter(limits.values()))})


def latency_rows(sweeps: dict[float, list[tuple[float, float]]], gpus: int) -> list[str]:
    alphas = [a for a, _ in next(iter(sweeps.values()))]
    return _grid(f"{gpus} GPUs, per message between hosts", [us(a) for a in alphas],
                 {f"{rate:g} Gbit/s": [_pct(e) for _, e in pts] for rate, pts in sweeps.items()})


COUNTS = ("fused allreduces", "largest buffer MiB")    # breakdown entries that are not times


def breakdown_rows(parts: dict[float, dict[str, float]]) -> list[str]:
    rates = list(parts)
    return _grid("512 GPUs, one step", [f"{r:g} Gbit/s" for r in rates],
                 {key: [f"{parts[r][key]:.0f}" if key in COUNTS else ms(parts[r][key])
                        for r in rates]
                  for key in next(iter(parts.values()))})


def plot(points, curves, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    points = [p for p in points if p.checked]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    names = [p.name.replace(", ", "\n", 1) for p in points]
    xs = list(range(len(points)))
    left.axhspan(-15, 15, color="tab:green", alpha=0.12, label="within ±15 %")
    left.bar(xs, [p.error * 100 for p in points], 0.6, color="tab:blue")
    left.axhline(0, color="black", linewidth=0.8)
    left.set_xticks(xs)
    left.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
    left.set_ylabel("model / measured - 1, %")
    worst = max((abs(p.error) * 100 for p in points), default=0)
    left.set_ylim(-max(30, worst + 5), max(30, worst + 5))
    left.set_title("This machine: the model against measured points")
    left.legend(fontsize=8, loc="upper right")
    for label, pts in curves.items():
        right.plot([n for n, _ in pts], [e * 100 for _, e in pts], marker="o",
                   label=f"model, {label}")
    right.plot(*[HOROVOD[0]], [HOROVOD[1] * 100], marker="*", markersize=14, linestyle="",
               color="tab:red", label="Horovod's published 90 %")
    right.set_xscale("log", base=2)
    counts = [n for n, _ in next(iter(curves.values()))]
    right.set_xticks(counts)
    right.set_xticklabels([str(n) for n in counts])
    right.set_xlabel("GPUs")
    right.set_ylabel("scaling efficiency, %")
    right.set_ylim(0, 105)
    right.set_title("ResNet-101, predicted")
    right.grid(True, alpha=0.3)
    right.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
