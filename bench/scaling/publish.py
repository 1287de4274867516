"""The scaling model's page (markdown) and plot (PNG)."""

from __future__ import annotations

HOROVOD = (512, 0.90)     # Horovod's published figure: ResNet-101, 512 Pascal GPUs, 25 Gbit/s


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs"


def parameter_rows(engine, shm, link, work, params) -> list[str]:
    load = params["machine_start"]["load_average"]
    return [
        "| parameter | value | measured by |",
        "|---|---|---|",
        f"| engine, per collective (2 ranks) | {us(engine.per_collective)} | 4 B allreduce, "
        "2 ranks, one host |",
        f"| engine, per extra rank | {us(engine.per_rank)} | 4 B allreduce at 4 ranks less 2 |",
        f"| engine, per tensor | {us(engine.per_tensor)} | bursts of 1, 32, 161 tiny "
        "allreduces, slope |",
        f"| shared memory, per collective | {us(shm.alpha)} | 1-64 MiB allreduces, "
        "2 and 4 ranks, least squares |",
        f"| shared memory, one rank's throughput | {1 / shm.per_byte / 1e9:.2f} GB/s | the same |",
        f"| link, per message | {us(link.alpha)} | 4 B allreduce through the ring, 2 hosts x 1 "
        "rank, less the negotiation |",
        f"| link, negotiation beyond one host's | {us(link.negotiation)} | 4 B allreduce inline, "
        "2 hosts x 1 rank |",
        f"| link, payload bandwidth | {link.bandwidth / 1e6:.1f} MB/s "
        f"({link.bandwidth / 1e9 / params['config']['link_GBps'] * 100:.1f} % of "
        f"{params['config']['rate']}) | 1-16 MiB allreduces, 2 hosts x 1 rank, slope |",
        f"| step: forward, backward, optimizer | {ms(work.forward)}, "
        f"{ms(sum(t for t, _ in work.backward))} over {len(work.backward)} gradients, "
        f"{ms(work.optimizer)} | bench/scaling/step_compute.py, one thread |",
        "",
        f"Taken {params['machine_end']['time_utc']} on {params['machine_start']['cores']} cores "
        f"({params['machine_start']['cpu']}), load average {load[0]} / {load[1]} / {load[2]} "
        f"at the start; `python bench/scaling/measure.py` ({params['seconds']:.0f} s).",
    ]


def check_rows(points) -> list[str]:
    rows = ["| point | measured | model | model/measured - 1 | measured in |",
            "|---|---|---|---|---|"]
    for p in points:
        note = "" if p.checked else " (shown, not checked)"
        rows.append(f"| {p.name}{note} | {ms(p.measured)} | {ms(p.model)} | "
                    f"{p.error * 100:+.1f} % | {p.source} |")
    return rows


def prediction_rows(curves: dict[str, list[tuple[int, float]]]) -> list[str]:
    counts = [n for n, _ in next(iter(curves.values()))]
    rows = ["| setting | " + " | ".join(f"{n} GPUs" for n in counts) + " |",
            "|---|" + "---|" * len(counts)]
    for label, points in curves.items():
        rows.append(f"| {label} | " + " | ".join(f"{e * 100:.1f} %" for _, e in points)
                    + " |")
    return rows


def limit_rows(limits: dict[float, dict[str, float]]) -> list[str]:
    rates = list(limits)
    rows = ["| 512 GPUs, efficiency | " + " | ".join(f"{r:g} Gbit/s" for r in rates) + " |",
            "|---|" + "---|" * len(rates)]
    for case in next(iter(limits.values())):
        rows.append(f"| {case} | " + " | ".join(f"{limits[r][case] * 100:.1f} %" for r in rates)
                    + " |")
    return rows


def latency_rows(sweeps: dict[float, list[tuple[float, float]]], gpus: int) -> list[str]:
    alphas = [a for a, _ in next(iter(sweeps.values()))]
    rows = [f"| {gpus} GPUs, per message between hosts | " + " | ".join(us(a) for a in alphas)
            + " |", "|---|" + "---|" * len(alphas)]
    for rate, pts in sweeps.items():
        rows.append(f"| {rate:g} Gbit/s | " + " | ".join(f"{e * 100:.1f} %" for _, e in pts)
                    + " |")
    return rows


def breakdown_rows(parts: dict[float, dict[str, float]]) -> list[str]:
    rates = list(parts)
    rows = ["| 512 GPUs, one step | " + " | ".join(f"{r:g} Gbit/s" for r in rates) + " |",
            "|---|" + "---|" * len(rates)]
    for key in next(iter(parts.values())):
        cells = []
        for r in rates:
            v = parts[r][key]
            cells.append(f"{v:.0f}" if key in ("fused allreduces", "largest buffer MiB")
                         else ms(v))
        rows.append(f"| {key} | " + " | ".join(cells) + " |")
    return rows


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
