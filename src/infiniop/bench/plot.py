"""`--plot FILE.png`: GB/s against size per implementation (needs the `plot` extra)."""

from __future__ import annotations


def plot(records: list[dict], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise SystemExit("--plot needs matplotlib: pip install 'infiniop[plot]'") from e
    bw = records[0]["bandwidth"]
    groups: dict[tuple, list[dict]] = {}
    for r in records[1:]:
        if "impls" in r:
            groups.setdefault((r["op"], r["dtype"], r["layout"]), []).append(r)
    groups = {k: v for k, v in groups.items() if len(v) > 1} or groups
    n = len(groups)
    cols = min(3, n) or 1
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, ((op, dtype, layout), rs) in zip(axes.flat, sorted(groups.items())):
        rs = sorted(rs, key=lambda r: r["size"])
        for impl in dict.fromkeys(k for r in rs for k in r["impls"]):  # twin: large sizes only
            have = [r for r in rs if impl in r["impls"]]
            ax.plot([r["size"] for r in have], [r["impls"][impl]["gbps"] for r in have], marker="o",
                    label=impl)
        ceiling = bw[rs[0].get("ceiling", "copy") + "_gbps"]
        ax.axhline(ceiling, color="gray", linestyle="--", linewidth=1,
                   label=f"{rs[0].get('ceiling', 'copy')} ceiling")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{op} {dtype} {layout}", fontsize=10)
        ax.set_xlabel("elements")
        ax.set_ylabel("GB/s")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
