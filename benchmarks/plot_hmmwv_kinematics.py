"""Suspension kinematics curves of the 14-DOF HMMWV (constraint-embedding paper Section 5) as PNG figures.

Writes benchmarks/results/figures/hmmwv_travel.png (wheel-centre travel and spring/shock lengths vs LCA angle),
hmmwv_camber_toe.png (camber and bump steer vs wheel travel, front and rear) and hmmwv_steering.png
(road-wheel
angles of the Pitman linkage vs Pitman-arm angle at static ride height).

    .venv/bin/python benchmarks/plot_hmmwv_kinematics.py [--out benchmarks/figures]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from vehcal_ros.models.vehicle14 import Hmmwv14  # noqa: E402
from vehcal_ros.models.vehicle14.kinematics import corner_state  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "figures"))
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    sim = Hmmwv14()
    geo = sim.geometry
    q_static = sim.outputs()["susp_angle"]
    q = np.linspace(-0.40, 0.25, 261)
    rows = {}
    for name, i in (("front", 0), ("rear", 2)):
        st = [corner_state(geo, i, x) for x in q]
        wc0 = corner_state(geo, i, q_static[i])["wheel_centre"][2]
        rows[name] = {
            "travel": np.array([s["wheel_centre"][2] for s in st]) - wc0,
            "spring": np.array([s["spring_length"] for s in st]),
            "shock": np.array([s["shock_length"] for s in st]),
            "camber": np.degrees([s["camber"] for s in st]),
            "toe": np.degrees([s["toe"] for s in st]),
            "static": q_static[i],
        }
    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, r in rows.items():
        ax[0].plot(q, 1e3 * r["travel"], label=f"{name} wheel centre")
        ax[0].axvline(r["static"], ls=":", c="C0" if name == "front" else "C1")
        ax[1].plot(q, r["spring"], label=f"{name} spring")
        ax[1].plot(q, r["shock"], "--", label=f"{name} shock")
    ax[0].set(
        xlabel="LCA angle from design pose theta (rad)",
        ylabel="wheel travel from static (mm)",
        title="Wheel travel vs LCA angle (dotted: static)",
    )
    ax[1].set(
        xlabel="LCA angle from design pose theta (rad)",
        ylabel="length (m)",
        title="Spring / shock length (Eqs. 28-30)",
    )
    for a in ax:
        a.grid(alpha=0.3)
        a.legend()
    fig.tight_layout()
    fig.savefig(out / "hmmwv_travel.png", dpi=110)
    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, r in rows.items():
        ax[0].plot(1e3 * r["travel"], r["camber"], label=name)
        ax[1].plot(1e3 * r["travel"], r["toe"], label=name)
    ax[0].set(
        xlabel="wheel travel from static (mm, + = bump)",
        ylabel="camber (deg, + = top out)",
        title="Camber vs travel (left wheel)",
    )
    ax[1].set(
        xlabel="wheel travel from static (mm, + = bump)",
        ylabel="toe (deg, + = toe-in)",
        title="Bump steer (left wheel, steering centred)",
    )
    for a in ax:
        a.grid(alpha=0.3)
        a.legend()
    fig.tight_layout()
    fig.savefig(out / "hmmwv_camber_toe.png", dpi=110)
    sig = np.linspace(-0.74, 0.74, 149)
    fl = np.degrees([corner_state(geo, 0, q_static[0], 0.0, s)["steer"] for s in sig])
    fr = np.degrees([corner_state(geo, 1, q_static[1], 0.0, s)["steer"] for s in sig])
    fig, ax = plt.subplots(figsize=(6, 4.2))
    ax.plot(np.degrees(sig), fl, label="front left")
    ax.plot(np.degrees(sig), fr, label="front right")
    ax.plot(np.degrees(sig), 0.5 * (fl + fr), "k--", label="mean (= road_wheel_angle map)")
    ax.set(
        xlabel="Pitman-arm angle (deg)",
        ylabel="road-wheel angle (deg, + = left)",
        title="Pitman steering linkage (Section 5.4), static ride height",
    )
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "hmmwv_steering.png", dpi=110)
    print(
        "wrote", *(str(out / f) for f in ("hmmwv_travel.png", "hmmwv_camber_toe.png", "hmmwv_steering.png"))
    )


if __name__ == "__main__":
    main()
