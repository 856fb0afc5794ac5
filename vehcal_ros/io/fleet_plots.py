"""Fleet plot: a vehicle's calibrated parameters over its drives (matplotlib, Agg backend).

One panel per parameter: the posterior mean of each drive with its 90 % interval (io/fleet_summary.py), filled
markers for drives that fitted it, open markers for drives that carried the earlier result, red for a drive
flagged as drift.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from vehcal_ros.estimation.calibration.pipeline import UNITS


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def plot_vehicle(vehicle_id: str, summary: Mapping[str, Any], path: str | os.PathLike) -> str | None:
    """Write the parameters-over-drives PNG of one vehicle's summary (``fleet_summary.vehicle_summary``) to
    ``path`` (temp file + rename); None (nothing written) when no parameter has a value."""
    series = {p: rows for p, rows in (summary.get("parameters") or {}).items()
              if any(r.get("mean") is not None for r in rows)}
    if not series:
        return None
    plt = _pyplot()
    drives = [d["drive"] for d in summary.get("drives", [])]
    index = {d: i for i, d in enumerate(drives)}
    n = len(series)
    fig, axes = plt.subplots(n, 1, figsize=(max(5.0, 0.9 * len(drives) + 3.0), 2.0 * n + 0.6), sharex=True,
                             squeeze=False)
    for ax, (par, rows) in zip(axes[:, 0], series.items()):
        for r in rows:
            if r.get("mean") is None:
                continue
            x, m = index.get(r["drive"], 0), r["mean"]
            lo, hi = r.get("lower"), r.get("upper")
            color = "tab:red" if r.get("drift") else "tab:blue"
            yerr = [[m - lo], [hi - m]] if lo is not None and hi is not None else None
            ax.errorbar([x], [m], yerr=yerr, fmt="o", color=color, capsize=3,
                        mfc=color if r.get("status") in ("fitted", "measured") else "white")
        ax.set_ylabel(f"{par}\n[{UNITS.get(par, '-')}]", fontsize=8)
        ax.grid(alpha=0.3)
    ax = axes[-1, 0]
    ax.set_xticks(range(len(drives)))
    ax.set_xticklabels(drives, rotation=30, ha="right", fontsize=7)
    ax.set_xlabel("drive (oldest first); open marker: carried or confirmed, red: drift flagged")
    fig.suptitle(f"{vehicle_id}: calibrated parameters over drives (mean, 90 % interval)", fontsize=9)
    fig.tight_layout()
    path = os.fspath(path)
    tmp = f"{path}.partial.png"
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)
    return path


__all__ = ["plot_vehicle"]
