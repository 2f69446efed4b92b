#!/usr/bin/env python3
"""bench.json (mlabench) -> bench.png with matplotlib: per shape, the latency on a log axis
(ours modeled, the cascade modeled where a prefix is shared, aiter's code objects on the same
model with --aiter-dir, aiter and the seed's kernel as published), the fraction of the HBM ceiling the modeled time achieves, and the bytes moved.
Every series says whether it is modeled, measured or published.

    python3 bench/plot.py out/bench/bench.json out/bench/bench.png
"""
import json
import sys


def series(bench):
    """(panel, label, values per shape) for every plotted series; None where a shape has no value."""
    shapes = bench["shapes"]
    ceiling = {m["name"]: m["hbm_bytes_per_s"] for m in bench["machines"]}
    product = {"gfx942": "MI300X", "gfx950": "MI355X"}
    ceilings = ", ".join(f"{n} {b / 1e12:.1f} TB/s" for n, b in ceiling.items())

    def get(path, s):
        for key in path:
            if not isinstance(s, dict) or key not in s:
                return None
            s = s[key]
        return s

    def fraction(s):
        tbps = get(["modeled", "modeled_tbps"], s)
        machine = product.get(s["shape"].split()[0])
        return None if tbps is None or machine not in ceiling else tbps * 1e12 / ceiling[machine]

    def moved_mb(s):
        b = get(["measured", "bytes"], s)
        return None if b is None else (b["read"] + b["written"]) / 1e6

    return [
        ("latency", "ours, per-request plan (modeled)", [get(["modeled", "modeled_total_us"], s) for s in shapes]),
        ("latency", "ours, shared-prefix cascade (modeled)",
         [get(["shared_prefix", "cascade", "modeled_total_us"], s) for s in shapes]),
        ("latency", "aiter's code objects, same model (modeled; mlabench --aiter-dir)",
         [get(["aiter", "modeled", "modeled_total_us"], s) for s in shapes]),
        ("latency", "aiter (published, seed 001)", [get(["published_seed001", "aiter_us"], s) for s in shapes]),
        ("latency", "seed 001's kernel (published)", [get(["published_seed001", "ours_us"], s) for s in shapes]),
        ("ceiling", "modeled bandwidth / achievable HBM ceiling (modeled; " + ceilings + ")", [fraction(s) for s in shapes]),
        ("bytes", "global bytes read + written (measured, emulator counters)", [moved_mb(s) for s in shapes]),
        ("bytes", "KV bytes read, shared-prefix cascade (measured, emulator counters)",
         [None if get(["shared_prefix", "cascade", "kv_read_bytes"], s) is None
          else get(["shared_prefix", "cascade", "kv_read_bytes"], s) / 1e6 for s in shapes]),
    ]


def plot(bench, out_png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [s["name"] for s in bench["shapes"]]
    x = list(range(len(names)))
    panels = {"latency": 0, "ceiling": 1, "bytes": 2}
    fig, axes = plt.subplots(3, 1, figsize=(max(8, 0.45 * len(names) + 3), 11), sharex=True)
    markers = iter("os^vDP*X")
    for panel, label, values in series(bench):
        pts = [(i, v) for i, v in zip(x, values) if v is not None]
        if not pts:
            continue
        ax = axes[panels[panel]]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=next(markers), linestyle="none", label=label)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("us per layer")
    axes[0].set_title("MLA decode per shape: modeled (machine model, docs/performance.md) vs published")
    axes[1].set_ylabel("fraction of the ceiling")
    axes[1].set_ylim(0, 1.05)
    axes[2].set_yscale("log")
    axes[2].set_ylabel("MB")
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    axes[2].set_xticks(x)
    axes[2].set_xticklabels(names, rotation=60, ha="right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)


def main(argv):
    if len(argv) != 3:
        print("usage: plot.py BENCH_JSON OUT_PNG", file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        bench = json.load(f)
    try:
        plot(bench, argv[2])
    except ImportError as e:
        print(f"plot.py: {e}: install python3-matplotlib (scripts/setup.sh does)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
