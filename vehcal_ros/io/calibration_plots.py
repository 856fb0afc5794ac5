"""Report plots of a calibration stage (Unjhawala et al. 2023, doi:10.1115/1.4062199, Figs. 5-11, 13-20, 41).

``write_report(segment, result, out_dir)`` writes PNGs with matplotlib's Agg backend through arviz:
posterior densities with 94 % HDI (Figs. 5, 6, 13, 14), trace plots of all chains (Figs. 10, 19), bulk/tail ESS
evolution (Figs. 11, 20), a pairwise KDE of the model parameters (Fig. 41) and the model responses for 100
prior and 100 posterior draws against the data (Figs. 7-9, 15-18) as 5-95 % bands.
"""

from __future__ import annotations

import os
import warnings

import numpy as np

from vehcal_ros.estimation.calibration.fit import CalibrationResult, Segment, predictive_responses
from vehcal_ros.inference.diagnostics import to_inference_data

_UNITS = {"u": "m/s", "v": "m/s", "yaw_rate": "rad/s", "roll": "rad", "roll_rate": "rad/s", "w_lf": "rad/s",
          "w_lr": "rad/s", "w_rf": "rad/s", "w_rr": "rad/s"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _save(fig_or_axes, path: str) -> str:
    plt = _pyplot()
    fig = fig_or_axes if hasattr(fig_or_axes, "savefig") else np.ravel(fig_or_axes)[0].figure
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_responses(segment: Segment, result: CalibrationResult, path: str, n: int = 100, seed: int = 0) -> str:
    """Data vs 5-95 % bands of ``n`` prior and ``n`` posterior responses and the posterior-mean response."""
    plt = _pyplot()
    pred = predictive_responses(segment, result, n=n, seed=seed)
    chans = list(pred["channels"])
    fig, axes = plt.subplots(len(chans), 1, figsize=(8, 2.4 * len(chans)), sharex=True, squeeze=False)
    t = pred["time"]
    for j, ch in enumerate(chans):
        ax = axes[j, 0]
        ax.plot(t, pred["data"][:, j], ".", ms=2, color="0.4", label="data")
        for key, color in (("prior", "tab:orange"), ("posterior", "tab:blue")):
            lo, hi = np.percentile(pred[key][:, :, j], [5, 95], axis=0)
            ax.fill_between(t, lo, hi, color=color, alpha=0.3, label=f"{key} 5-95 % ({n} draws)")
        ax.plot(t, pred["posterior_mean"][:, j], color="tab:blue", lw=1.2, label="posterior mean")
        ax.set_ylabel(f"{ch} [{_UNITS.get(ch, '')}]")
        ax.set_title(f"{ch}: mean RMSE prior {result.rmse_prior.get(ch, np.nan):.3g}, "
                     f"posterior {result.rmse_posterior.get(ch, np.nan):.3g}", fontsize=9)
    axes[0, 0].legend(fontsize=7, loc="best")
    axes[-1, 0].set_xlabel("time [s]")
    fig.tight_layout()
    return _save(fig, path)


def write_report(segment: Segment, result: CalibrationResult, out_dir: str) -> list[str]:
    """Write the stage's plots into ``out_dir`` (created); returns the file paths."""
    import arviz as az

    _pyplot()
    os.makedirs(out_dir, exist_ok=True)
    idata = to_inference_data(result.draws, result.names)
    model_names = [n for n in result.names if not n.startswith("sigma_")]
    paths = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        paths.append(_save(az.plot_posterior(idata, hdi_prob=0.94), os.path.join(out_dir, "posterior.png")))
        paths.append(_save(az.plot_trace(idata, compact=False), os.path.join(out_dir, "trace.png")))
        paths.append(_save(az.plot_ess(idata, kind="evolution"), os.path.join(out_dir, "ess_evolution.png")))
        if len(model_names) >= 2:
            paths.append(_save(az.plot_pair(idata, var_names=model_names, kind="kde", marginals=True),
                               os.path.join(out_dir, "pair_kde.png")))
    paths.append(plot_responses(segment, result, os.path.join(out_dir, "responses.png")))
    return paths
