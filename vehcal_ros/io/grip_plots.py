"""Grip-fit figure in the style of the friction paper's Figs. 17-18 (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def plot_grip_fit(
    path: str | Path, slip: np.ndarray, mu: np.ndarray, estimate, true_theta: np.ndarray | None = None,
    title: str | None = None,
) -> Path:
    """Write a PNG: data points, ML curve, posterior median curve with its 5-95 % band, optional true curve.

    ``estimate`` is a :class:`vehcal_ros.estimation.grip.fit.GripEstimate`; the curves span its slip grid
    (the CLI sets it to cover the data). Returns the written path.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vehcal_ros.models.pacejka import THETA_NAMES, mf_curve

    path = Path(path)
    slip = np.asarray(slip, dtype=float)
    mu = np.asarray(mu, dtype=float)
    grid = np.asarray(estimate.curve.slip, dtype=float)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.fill_between(grid, estimate.curve.q05, estimate.curve.q95, color="tab:blue", alpha=0.25,
                    label="MCMC 5-95 %")
    ax.plot(grid, estimate.curve.q50, "--", color="tab:blue", lw=2,
            label=f"MCMC median ({estimate.prior_mode} prior)")
    theta_ml = np.array([estimate.theta_ml[k] for k in THETA_NAMES])
    ax.plot(grid, mf_curve(grid, theta_ml), "-.", color="tab:green", lw=1.5, label="ML estimate")
    if true_theta is not None:
        ax.plot(grid, mf_curve(grid, np.asarray(true_theta, dtype=float)), "-", color="tab:red", lw=1.5,
                label="reference curve")
    ok = np.isfinite(slip) & np.isfinite(mu)
    ax.plot(slip[ok], mu[ok], ".", color="k", ms=3, alpha=0.6, label=f"data ({int(ok.sum())} points)")
    m = estimate.mu_max
    ax.axhspan(m.lower, m.upper, color="tab:orange", alpha=0.12,
               label=f"mu_max {m.mean:.3f} [{m.lower:.3f}, {m.upper:.3f}] ({m.prob:.0%})")
    ax.set_xlabel("slip ratio s (-)")
    ax.set_ylabel("friction mu = Fx/Fz (-)")
    ax.set_title(title or "Grip fit: magic formula, ML + adaptive Metropolis")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
