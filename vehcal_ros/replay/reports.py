"""Replay report: the figures a vehicle engineer looks at after a bag replay, plus a self-contained index.html.

``write_report(out_dir, result)`` writes, for a :class:`vehcal_ros.replay.results.ReplayResult`:

* ``grip_<scope>.png`` — the friction data (s, mu) of the scope's final fit with the posterior median curve and
  its 5-95 % band, the ML curve and, when known, the true curve (:func:`vehcal_ros.io.grip_plots.plot_grip_fit`,
  in the style of the friction paper's Figs. 17-18);
* ``mu_max.png`` — mu_max over bag time per scope: posterior mean, its credible interval, and the ground truth
  under the scope's wheels when the bag has ``/vehicle/ground_truth``;
* ``calibration/<stage>/`` — posterior, trace, ESS evolution, pair and 8-DOF response plots of each calibrated
  stage (:func:`vehcal_ros.io.calibration_plots.write_report`; the 8-DOF paper's Figs. 5-20, 41);
* ``index.html`` — every figure (inlined as data: URIs, no external assets) and the summary tables (per scope:
  final mu_max mean and interval vs truth; per parameter: mean, std, 94 % HDI, R-hat, bulk ESS).

Everything is written into a temporary directory beside ``out_dir`` and renamed at the end, so a failure leaves
nothing half-written. ``out_dir`` must not exist or be empty.
"""

from __future__ import annotations

import base64
import html
import math
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vehcal_ros.errors import InputError
from vehcal_ros.replay.guards import refusal_summary


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _fmt(x: Any, spec: str = ".3f") -> str:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return "–"
    return format(v, spec) if math.isfinite(v) else "–"


def plot_mu_max_over_time(path: str | os.PathLike, grip: Mapping[str, Any], title: str | None = None) -> Path:
    """The grip belief in force over bag time per scope (a step with its band; unknown spans the band from 0 to
    the prior's top), the published estimates as points, and the ground-truth trace."""
    plt = _pyplot()
    scopes = list(grip)
    fig, axes = plt.subplots(len(scopes), 1, figsize=(8, 2.6 * max(1, len(scopes))), sharex=True, squeeze=False)
    for ax, scope in zip(axes[:, 0], scopes):
        g = grip[scope]
        if g.truth_t.size:
            ax.plot(g.truth_t, g.truth_mu_max, "-", color="tab:red", lw=1.2, label="ground truth mu_max")
        f = getattr(g, "in_force", None) or {}
        prob = g.interval_prob if math.isfinite(g.interval_prob) else 0.9
        if f:
            floor = np.asarray(f.get("floor", np.zeros(len(f["t"]), dtype=bool)), dtype=bool)
            ax.fill_between(f["t"], f["lower"], f["upper"], where=~floor, step="post", color="tab:blue",
                            alpha=0.25, label=f"in force: {prob:.0%} interval, widened with age")
            if floor.any():
                ax.fill_between(f["t"], f["lower"], f["upper"], where=floor, step="post", color="tab:green",
                                alpha=0.2, label="in force: floor belief (no curve identified)")
            ax.step(f["t"], f["mean"], where="post", color="tab:blue", lw=1.8, label="in force: mean")
        if g.t.size:
            ax.plot(g.t, g.mean, "o", color="tab:blue", ms=3, label="fits published")
        elif not f:
            ax.text(0.5, 0.5, f"no published estimate ({g.message})", transform=ax.transAxes, ha="center",
                    va="center", fontsize=8, wrap=True)
        ax.set_ylabel(f"{scope}\nmu_max (-)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    axes[-1, 0].set_xlabel("bag time (s)")
    fig.suptitle(title or "Grip potential over the replay")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _img(path: Path, root: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    rel = html.escape(str(path.relative_to(root)))
    return (f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{rel}</figcaption></figure>")


def _grip_table(grip: Mapping[str, Any]) -> str:
    rows = []
    for scope, g in grip.items():
        if g.t.size:
            mean, lo, hi, truth = g.mean[-1], g.lower[-1], g.upper[-1], g.truth[-1]
            err = (mean - truth) / truth if math.isfinite(truth) and truth else float("nan")
            covered = ("yes" if lo <= truth <= hi else "no") if math.isfinite(truth) else "–"
        else:
            mean = lo = hi = truth = err = float("nan")
            covered = "–"
        level = {0: "OK", 1: "WARN", 2: "ERROR"}.get(g.level, str(g.level))
        rows.append(f"<tr><td>{html.escape(scope)}</td><td>{g.t.size}</td><td>{_fmt(mean)}</td>"
                    f"<td>[{_fmt(lo)}, {_fmt(hi)}]</td><td>{_fmt(truth)}</td><td>{_fmt(100 * err, '+.1f')}</td>"
                    f"<td>{covered}</td><td>{g.n_fits} / {g.n_failed} / {g.n_not_converged}</td>"
                    f"<td>{level}: {html.escape(g.message)}</td></tr>")
    return ("<table><tr><th>scope</th><th>estimates</th><th>final mu_max</th><th>interval</th><th>truth</th>"
            "<th>error %</th><th>covers truth</th><th>fits / failed / not converged</th><th>status</th></tr>"
            + "".join(rows) + "</table>")


def _calibration_table(calibration: Mapping[str, Any]) -> str:
    rows = []
    for stage, c in calibration.items():
        res = c.final
        if res is None:
            rows.append(f"<tr><td>{html.escape(stage)}</td><td colspan='7'>no accepted calibration "
                        f"({html.escape(c.message)})</td></tr>")
            continue
        items = list(res.parameters.items()) + [(f"sigma_{k}", v) for k, v in res.noise.items()]
        for name, s in items:
            rows.append(f"<tr><td>{html.escape(stage)}</td><td>{html.escape(name)}</td>"
                        f"<td>{_fmt(s.get('mean'), '.5g')}</td><td>{_fmt(s.get('std'), '.3g')}</td>"
                        f"<td>[{_fmt(s.get('hdi_low'), '.5g')}, {_fmt(s.get('hdi_high'), '.5g')}]</td>"
                        f"<td>{_fmt(s.get('r_hat'), '.4f')}</td><td>{_fmt(s.get('ess_bulk'), '.0f')}</td>"
                        f"<td>{'yes' if res.converged else 'no'}</td></tr>")
    return ("<table><tr><th>stage</th><th>parameter</th><th>mean</th><th>std</th><th>94 % HDI</th><th>R-hat</th>"
            "<th>bulk ESS</th><th>stage converged</th></tr>" + "".join(rows) + "</table>")


_CSS = ("body{font-family:sans-serif;margin:1.5em;max-width:1100px}table{border-collapse:collapse;margin:.5em 0 1.5em}"
        "td,th{border:1px solid #bbb;padding:3px 8px;font-size:13px;text-align:right}th{background:#eee}"
        "td:first-child{text-align:left}figure{margin:1em 0}img{max-width:100%}figcaption{font-size:11px;color:#666}"
        "code{background:#f4f4f4}")


def _html(result: Any, root: Path, grip_figs: Sequence[tuple[str, Path]], mu_fig: Path | None,
          cal_figs: Mapping[str, Sequence[Path]], title: str) -> str:
    r = result
    rate = r.bag_duration_s / r.elapsed_s if r.elapsed_s > 0 else float("nan")
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>",
             f"<p>bag <code>{html.escape(str(r.bag))}</code>: {r.n_messages} messages, "
             f"{_fmt(r.bag_duration_s, '.1f')} s of bag time replayed in {_fmt(r.elapsed_s, '.1f')} s "
             f"({_fmt(rate, '.1f')}x real time); seed {html.escape(str(r.seed))}; "
             f"{r.counters.get('grip_cycles', 0)} grip cycles, {r.counters.get('calibration_cycles', 0)} "
             "calibration cycles.</p>"]
    if refusal_summary(r.counters):
        parts.append(f"<p>{html.escape(refusal_summary(r.counters))}</p>")
    if r.calibration_note:
        parts.append(f"<p><em>{html.escape(r.calibration_note)}</em></p>")
    parts.append("<h2>Grip potential</h2>" + _grip_table(r.grip))
    if mu_fig is not None:
        parts.append(_img(mu_fig, root, "mu_max over time"))
    for scope, p in grip_figs:
        parts.append(f"<h3>{html.escape(scope)}: friction data and posterior curve</h3>" + _img(p, root, scope))
    parts.append("<h2>8-DOF model calibration</h2>")
    if r.calibration:
        parts.append(_calibration_table(r.calibration))
        if r.model_parameters:
            parts.append("<h3>model parameters (latest accepted)</h3><table><tr><th>name</th><th>value</th></tr>"
                         + "".join(f"<tr><td>{html.escape(k)}</td><td>{_fmt(v, '.6g')}</td></tr>"
                                   for k, v in r.model_parameters.items()) + "</table>")
        for stage, figs in cal_figs.items():
            parts.append(f"<h3>stage {html.escape(stage)}</h3>" + "".join(_img(p, root, stage) for p in figs))
    else:
        parts.append("<p>no calibration results.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(out_dir: str | os.PathLike, replay_result: Any, *,
                 true_curves: Mapping[str, Sequence[float]] | None = None,
                 title: str = "vehcal replay report") -> list[Path]:
    """Write the report (see the module docstring); returns the written files under ``out_dir``.

    true_curves: scope -> true magic-formula theta (B, C, D, E, s_h, s_v) to draw the true curve, when known.
    """
    from vehcal_ros.io.grip_plots import plot_grip_fit

    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"report directory {out}: exists and is not empty; refusing to overwrite")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"report directory {out}: the parent directory {parent} does not exist")
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=parent))
    done = False
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it 0700; the report is an ordinary directory
        grip_figs: list[tuple[str, Path]] = []
        for scope, g in replay_result.grip.items():
            if g.final is None or g.data is None:
                continue
            theta = (true_curves or {}).get(scope)
            p = plot_grip_fit(tmp / f"grip_{scope}.png", g.data.slip, g.data.mu, g.final,
                              true_theta=None if theta is None else np.asarray(theta, dtype=float),
                              title=f"{scope}: friction data and posterior (t = {_fmt(g.t[-1], '.1f')} s)")
            grip_figs.append((scope, Path(p)))
        mu_fig = plot_mu_max_over_time(tmp / "mu_max.png", replay_result.grip) if replay_result.grip else None
        cal_figs: dict[str, list[Path]] = {}
        for stage, c in replay_result.calibration.items():
            if c.final is None or c.segment is None:
                continue
            from vehcal_ros.io.calibration_plots import write_report as write_stage_report

            cal_figs[stage] = [Path(p) for p in write_stage_report(c.segment, c.final,
                                                                   str(tmp / "calibration" / stage))]
        (tmp / "index.html").write_text(_html(replay_result, tmp, grip_figs, mu_fig, cal_figs, title),
                                        encoding="utf-8")
        written = sorted(p.relative_to(tmp) for p in tmp.rglob("*") if p.is_file())
        if out.exists():
            out.rmdir()  # empty (checked above); a non-empty one appearing meanwhile makes this fail loudly
        os.replace(tmp, out)
        done = True
    finally:
        if not done:
            shutil.rmtree(tmp, ignore_errors=True)
    return [out / p for p in written]


__all__ = ["write_report", "plot_mu_max_over_time"]
