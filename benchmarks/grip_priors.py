"""Prior ranges of the grip fit's magic-formula parameters from published tire data.

Reads ``vehcal_ros/data/tire_coefficients.yaml`` (published MF 5.x / PAC2002 / MF 6.1 pure-longitudinal
coefficient sets, split into a PRIOR and a ZOO set by the rule written in that file) and evaluates, for every
PRIOR set, the per-load coefficients of the grip fit's curve

    mu(s) = Fx / Fz = D sin(C atan(B x - E (B x - atan(B x)))) + s_v,   x = s + s_h   (s: slip ratio, -)

over loads Fz = 0.4 .. 1.6 x Fz0' (Fz0' = FNOMIN x LFZO, the file's effective nominal load, N) and road friction
scales 0.1 .. 1.2 (the road scales the friction D, and s_v with it, as PAC2002's LMUX does; slip stiffness,
shape and curvature do not change with the road, as in the simulator's tires and in Pac02):

    dFz = Fz / Fz0' - 1
    C   = PCX1
    D   = (PDX1 + PDX2 dFz) x road                         (peak friction mu_x, -)
    B   = Kx / (C D Fz),  Kx / Fz = (PKX1 + PKX2 dFz) exp(PKX3 dFz)   (1 / slip)
    E   = min(1, (PEX1 + PEX2 dFz + PEX3 dFz^2) (1 - PEX4))  (driving side, s > 0: sgn(s) = +1)
    s_h = PHX1 + PHX2 dFz                                  (slip ratio, -)
    s_v = (PVX1 + PVX2 dFz) x road                         (Svx / Fz, -)

It prints each set's values at the nominal load on a dry road (road scale 1), the min/max over the PRIOR sets,
loads and road scales, and proposed uniform bounds: for the positive scale parameters B, C, D the min/max
multiplied by (1 -/+ ``MARGIN``), for E, s_h, s_v widened by ``MARGIN`` x (max - min) on each side; then rounded
outward to two significant digits, E capped at 1 (the magic formula needs E <= 1).
The ZOO sets are printed for comparison only and never enter the ranges.

Run: ``.venv/bin/python benchmarks/grip_priors.py`` (``--markdown`` prints the tables for docs/grip.md; ``--plot
PNG`` draws every set's mu(s) at 0.4, 1 and 1.6 x Fz0' on a dry road, PRIOR solid and ZOO dashed).
"""

from __future__ import annotations

import argparse
import math
from importlib import resources
from pathlib import Path

import numpy as np
import yaml

LOADS = np.linspace(0.4, 1.6, 25)
"""Relative loads Fz / Fz0' evaluated (-)."""
ROADS = np.linspace(0.1, 1.2, 45)
"""Road friction scales evaluated (-)."""
MARGIN = 0.10
"""Widening of each proposed bound beyond the published min/max: relative for B, C, D, a fraction of (max - min)
for E, s_h, s_v."""
POSITIVE = ("B", "C", "D")
NAMES = ("B", "C", "D", "E", "s_h", "s_v")
CURRENT = {"B": (5.0, 30.0), "C": (0.5, 2.0), "D": (0.2, 2.0), "E": (-2.0, 0.0), "s_h": (-0.05, 0.05),
           "s_v": (-0.3, 0.3)}
"""The grip fit's current uniform bounds (the friction paper's Table 3, vehcal_ros/data/friction.yaml)."""


def load_sets(path: str | Path | None = None) -> dict:
    """The parsed coefficient file (default: the package copy ``vehcal_ros/data/tire_coefficients.yaml``)."""
    if path is None:
        text = resources.files("vehcal_ros").joinpath("data/tire_coefficients.yaml").read_text()
    else:
        text = Path(path).read_text()
    return yaml.safe_load(text)


def check_split(data: dict) -> None:
    """Raise ValueError unless each set's ``split`` follows the file's rule (odd family rank -> prior)."""
    order = list(data["family_order"])
    seen: list[str] = []
    for s in data["sets"]:
        if s["family"] not in seen:
            seen.append(s["family"])
    if seen != order:
        raise ValueError(f"family_order {order} is not the order of first appearance {seen}")
    for s in data["sets"]:
        want = "prior" if order.index(s["family"]) % 2 == 0 else "zoo"
        if s["split"] != want:
            raise ValueError(f"set {s['id']}: split {s['split']!r}, the rule gives {want!r}")


def mf_coefficients(lon: dict, rel_load: np.ndarray, road: np.ndarray) -> dict[str, np.ndarray]:
    """(B, C, D, E, s_h, s_v) of mu(s) = Fx/Fz at s > 0 on the grid rel_load x road (module doc formulas).

    rel_load: Fz / Fz0' (-), shape (n,); road: friction scale (-), shape (m,). Returns arrays of shape (n, m).
    """
    dfz = (np.asarray(rel_load, dtype=float) - 1.0)[:, None]
    r = np.asarray(road, dtype=float)[None, :]
    ones = np.ones_like(dfz * r)
    c = lon["PCX1"] * ones
    d = (lon["PDX1"] + lon["PDX2"] * dfz) * r
    kx = (lon["PKX1"] + lon["PKX2"] * dfz) * np.exp(lon["PKX3"] * dfz)
    b = kx / (c * d)
    e = np.minimum(1.0, (lon["PEX1"] + lon["PEX2"] * dfz + lon["PEX3"] * dfz**2) * (1.0 - lon["PEX4"])) * ones
    sh = (lon["PHX1"] + lon["PHX2"] * dfz) * ones
    sv = (lon["PVX1"] + lon["PVX2"] * dfz) * r
    return {"B": b, "C": c, "D": d, "E": e, "s_h": sh, "s_v": sv}


def coverage(data: dict, split: str, box: dict[str, tuple[float, float]], roads: np.ndarray = ROADS) -> float:
    """Fraction of the (set, load, road) grid points of ``split`` whose six coefficients all lie in ``box``."""
    inside = total = 0
    for s in data["sets"]:
        if s["split"] != split:
            continue
        co = mf_coefficients(s["longitudinal"], LOADS, roads)
        ok = np.ones_like(co["B"], dtype=bool)
        for n in NAMES:
            ok &= (co[n] >= box[n][0]) & (co[n] <= box[n][1])
        inside += int(ok.sum())
        total += ok.size
    return inside / total if total else math.nan


def _round_out(x: float, up: bool) -> float:
    """x rounded away from the interval's inside to two significant digits."""
    if x == 0.0:
        return 0.0
    mag = 10.0 ** (math.floor(math.log10(abs(x))) - 1)
    return round((math.ceil(x / mag) if up else math.floor(x / mag)) * mag, 12)


def ranges(data: dict, split: str = "prior", roads: np.ndarray = ROADS) -> dict[str, tuple[float, float]]:
    """min/max of each coefficient over the sets of ``split``, LOADS and ``roads``."""
    lo = {n: math.inf for n in NAMES}
    hi = {n: -math.inf for n in NAMES}
    for s in data["sets"]:
        if s["split"] != split:
            continue
        co = mf_coefficients(s["longitudinal"], LOADS, roads)
        for n in NAMES:
            lo[n] = min(lo[n], float(co[n].min()))
            hi[n] = max(hi[n], float(co[n].max()))
    return {n: (lo[n], hi[n]) for n in NAMES}


def proposed_bounds(rng: dict[str, tuple[float, float]], margin: float = MARGIN) -> dict[str, tuple[float, float]]:
    """Uniform bounds: B, C, D scaled by (1 -/+ margin), E, s_h, s_v widened by margin x (max - min) per side;
    rounded outward to two significant digits, E <= 1."""
    out = {}
    for n, (a, b) in rng.items():
        if n in POSITIVE:
            a, b = a * (1.0 - margin), b * (1.0 + margin)
        else:
            w = (b - a) * margin
            a, b = a - w, b + w
        lo, hi = _round_out(a, up=False), _round_out(b, up=True)
        if n == "E":
            hi = min(hi, 1.0)
        out[n] = (lo, hi)
    return out


def mu_curve(co: dict[str, np.ndarray], i: int, j: int, slip: np.ndarray) -> np.ndarray:
    """mu(s) of the coefficients ``co`` (from :func:`mf_coefficients`) at grid point (i, j), slip ratios ``slip``."""
    b, c, d, e = (float(co[n][i, j]) for n in ("B", "C", "D", "E"))
    x = slip + float(co["s_h"][i, j])
    return d * np.sin(c * np.arctan(b * x - e * (b * x - np.arctan(b * x)))) + float(co["s_v"][i, j])


def peak_slip_range(data: dict, split: str, roads: np.ndarray) -> tuple[float, float]:
    """min/max over the sets of ``split``, LOADS and ``roads`` of the slip ratio at the curve's maximum (searched
    on s = 0..1 in steps of 1e-4)."""
    slip = np.linspace(0.0, 1.0, 10001)
    lo, hi = math.inf, -math.inf
    for s in data["sets"]:
        if s["split"] != split:
            continue
        co = mf_coefficients(s["longitudinal"], LOADS, roads)
        for i in range(LOADS.size):
            for j in range(roads.size):
                sp = float(slip[int(np.argmax(mu_curve(co, i, j, slip)))])
                lo, hi = min(lo, sp), max(hi, sp)
    return lo, hi


def plot(data: dict, path: str | Path) -> None:
    """Figure: each set's mu(s) (s = 0..0.3) at 0.4, 1 and 1.6 x Fz0' on road scale 1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    slip = np.linspace(0.0, 0.3, 301)
    loads = np.array([0.4, 1.0, 1.6])
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), sharey=True)
    colors = [plt.get_cmap("tab20")(k % 20) for k in range(20)]
    for k, s in enumerate(data["sets"]):
        co = mf_coefficients(s["longitudinal"], loads, np.array([1.0]))
        for i, ax in enumerate(axes):
            ax.plot(slip, mu_curve(co, i, 0, slip), ls="-" if s["split"] == "prior" else "--",
                    color=colors[k % len(colors)], label=f"{s['id']} ({s['split']})" if i == 0 else None)
    for i, ax in enumerate(axes):
        ax.set_title(f"Fz = {loads[i]:g} x Fz0', road scale 1")
        ax.set_xlabel("slip ratio s (-)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("mu = Fx / Fz (-)")
    axes[0].legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", default=None, help="coefficient file (default: the package's)")
    ap.add_argument("--markdown", action="store_true", help="print markdown tables (docs/grip.md)")
    ap.add_argument("--plot", default=None, metavar="PNG", help="draw the sets' mu(s) curves to this file")
    args = ap.parse_args(argv)
    data = load_sets(args.file)
    check_split(data)
    if args.plot:
        plot(data, args.plot)
    bar = "|" if args.markdown else " "
    print(f"{bar} set {bar} split {bar} size {bar} Fz0' N {bar} " + f" {bar} ".join(NAMES) + f" {bar} peak mu {bar}")
    if args.markdown:
        print("|---" * (5 + len(NAMES)) + "|")
    for s in data["sets"]:
        co = mf_coefficients(s["longitudinal"], np.array([1.0]), np.array([1.0]))
        fz0 = s["FNOMIN"] * s["LFZO"]
        vals = " ".join(f"{bar} {_fmt(float(co[n][0, 0]))}" for n in NAMES)
        peak = float(co["D"][0, 0] + co["s_v"][0, 0])
        print(f"{bar} {s['id']} {bar} {s['split']} {bar} {s['size']} {bar} {fz0:.0f} {vals} {bar} {peak:.3f} {bar}")
    print()
    rng = ranges(data, "prior")
    rng_015 = ranges(data, "prior", roads=ROADS[ROADS >= 0.15 - 1e-9])
    rng_03 = ranges(data, "prior", roads=ROADS[ROADS >= 0.3 - 1e-9])
    zoo = ranges(data, "zoo")
    bounds = proposed_bounds(rng)
    print(f"PRIOR sets, loads {LOADS[0]:g}-{LOADS[-1]:g} x Fz0', road scales {ROADS[0]:g}-{ROADS[-1]:g}; "
          f"proposed = B, C, D x (1 -/+ {MARGIN:.0%}), E, s_h, s_v +/- {MARGIN:.0%} of the range, rounded outward")
    print(f"{bar} parameter {bar} min {bar} max {bar} max, road >= 0.15 {bar} max, road >= 0.3 {bar} "
          f"proposed lower {bar} proposed upper {bar} current (Table 3) {bar} ZOO sets min..max {bar}")
    if args.markdown:
        print("|---" * 9 + "|")
    for n in NAMES:
        a, b = rng[n]
        print(f"{bar} {n} {bar} {_fmt(a)} {bar} {_fmt(b)} {bar} {_fmt(rng_015[n][1])} {bar} {_fmt(rng_03[n][1])} "
              f"{bar} {_fmt(bounds[n][0])} {bar} {_fmt(bounds[n][1])} {bar} "
              f"{_fmt(CURRENT[n][0])} .. {_fmt(CURRENT[n][1])} {bar} "
              f"{_fmt(zoo[n][0])} .. {_fmt(zoo[n][1])} {bar}")
    print()
    for split in ("prior", "zoo"):
        a1, b1 = peak_slip_range(data, split, np.array([1.0]))
        a, b = peak_slip_range(data, split, ROADS)
        print(f"slip at the curve maximum, {split.upper()} sets: {a1:.3f}..{b1:.3f} at road scale 1, {a:.3f}..{b:.3f} "
              f"over road scales {ROADS[0]:g}-{ROADS[-1]:g}")
    print()
    for split in ("prior", "zoo"):
        print(f"{split.upper()} grid points (set x load x road) with all six coefficients inside: proposed bounds "
              f"{coverage(data, split, bounds):.1%}, current bounds {coverage(data, split, CURRENT):.1%}; "
              f"road >= 0.3 only: {coverage(data, split, bounds, ROADS[ROADS >= 0.3 - 1e-9]):.1%} / "
              f"{coverage(data, split, CURRENT, ROADS[ROADS >= 0.3 - 1e-9]):.1%}")
    print()
    print("proposed lower:", [bounds[n][0] for n in NAMES])
    print("proposed upper:", [bounds[n][1] for n in NAMES])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
