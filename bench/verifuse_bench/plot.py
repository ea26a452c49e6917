"""The PNG next to the markdown table: speed-up over eager per model and backend (one panel per
batch x threads), and compile time per model and backend (median over the model's
configurations, log scale). matplotlib is optional: without it the report says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLORS = {"inductor": "#4C72B0", "inductor-nofreeze": "#8FAADC", "inductor-max-autotune": "#2F4B7C",
          "inductor-cpp-wrapper": "#6A8CC7", "openvino": "#55A868", "zentorch": "#C44E52",
          "verifuse": "#8172B2"}


def write_plot(report: dict[str, Any], path: Path) -> dict[str, Any]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        return {"status": "unavailable", "reason": f"matplotlib is not installed or not usable ({type(e).__name__}: "
                                                    f"{e}); `make bench-deps` installs it"}
    try:
        return _draw(report, Path(path), plt)
    except Exception as e:  # a plot must never cost the results
        return {"status": "failed", "reason": f"{type(e).__name__}: {e}"}


def _draw(report: dict[str, Any], path: Path, plt) -> dict[str, Any]:
    results = [e for e in report.get("results", []) if "backends" in e]
    backends = [b for b in report["settings"]["backends"] if b != "eager"]
    models: list[str] = []
    for e in results:
        if e["model"] not in models:
            models.append(e["model"])
    combos: list[tuple[int, int]] = []
    for e in results:
        if (e["batch"], e["threads"]) not in combos:
            combos.append((e["batch"], e["threads"]))
    n_rows = len(combos) + 1
    width = max(8.0, 1.5 + len(models) * (0.16 * max(1, len(backends)) + 0.35))
    fig, axes = plt.subplots(n_rows, 1, figsize=(min(width, 40.0), 3.3 * n_rows), squeeze=False)
    bw = 0.8 / max(1, len(backends))
    xs = list(range(len(models)))
    for row, (batch, threads) in enumerate(combos):
        ax = axes[row][0]
        by_model = {e["model"]: e for e in results if e["batch"] == batch and e["threads"] == threads}
        for j, b in enumerate(backends):
            vals = []
            for m in models:
                e = by_model.get(m)
                v = e["ratios"]["speedup_vs_eager"].get(b) if e else None
                vals.append(v or 0.0)
            ax.bar([x + (j - (len(backends) - 1) / 2) * bw for x in xs], vals, bw, label=b,
                   color=COLORS.get(b))
        ax.axhline(1.0, color="black", linewidth=0.8)
        top = max([p.get_height() for p in ax.patches] + [1.0])
        ax.set_ylim(0, top * 1.3)  # room for the legend
        ax.set_ylabel("speed-up over eager")
        ax.set_title(f"batch {batch}, {threads} thread{'s' if threads > 1 else ''} "
                     "(median latency; > 1 is faster; missing bar = unavailable/failed)", fontsize=9)
        ax.set_xticks(xs)
        ax.set_xticklabels(models, rotation=30, ha="right", fontsize=8)
        ax.legend(fontsize=7, ncol=len(backends), loc="upper left")
        ax.grid(axis="y", alpha=0.3)
    ax = axes[-1][0]
    for j, b in enumerate(backends):
        vals = []
        for m in models:
            cs = sorted(e["backends"][b]["compile_s"] for e in results
                        if e["model"] == m and e["backends"].get(b, {}).get("status") == "ok"
                        and e["backends"][b].get("compile_s"))
            vals.append(cs[len(cs) // 2] if cs else 0.0)
        ax.bar([x + (j - (len(backends) - 1) / 2) * bw for x in xs], vals, bw, label=b, color=COLORS.get(b))
    heights = [p.get_height() for p in ax.patches if p.get_height() > 0]
    if heights:
        ax.set_yscale("log", nonpositive="clip")
        ax.set_ylim(min(heights) / 1.5, max(heights) * 4)  # room for the legend
    ax.set_ylabel("compile s (first call)")
    ax.set_title("compile time per model and backend (median over the model's configurations; log scale)",
                 fontsize=9)
    ax.set_xticks(xs)
    ax.set_xticklabels(models, rotation=30, ha="right", fontsize=8)
    ax.legend(fontsize=7, ncol=len(backends), loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    env = report.get("environment", {})
    fig.suptitle(f"verifuse bench ({', '.join(report.get('suites') or [])}, {report.get('settings', {}).get('dtype', 'float32')}) — {env.get('cpu_model')}, "
                 f"{env.get('isa_summary', '').replace('**', '')}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return {"status": "ok", "path": str(path)}
