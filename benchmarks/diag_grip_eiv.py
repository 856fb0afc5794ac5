"""Where a grip window's bias under slip noise comes from: refits of one recorded window
with parts of it replaced by the simulator's truth, and the default fit's draws reweighted to other likelihoods.

For the window of ``--scope`` ending at ``--refit T`` of a bag written by ``bench_tire_forces.py --bag DIR``:

* ``true slip & true mu`` with the recorded lateral slips, with none (lat = 0) and with the true ones: what the
  model gives on noise-free data;
* ``noise #i, true mu``: the true slips plus white noise of the stated slip variance, the true friction;
* ``noise #i``: the true slips plus noise, the estimated friction, fitted by default (the deconvolved slip
  distribution, each sample at its true slip's posterior mean and variance, the curve linearised there), and the
  same draws importance-weighted to (a) the likelihood exact in the latent slip under the deconvolved
  distribution, p(mu_i | s_i) = sum_k r_ik int N(mu_i; f(t), sigma^2 + v_mu,i) N(t; b_ik, g_ik v_i) dt
  (Gauss-Hermite, 9 nodes), and (b) the same with the true slips of the fitted samples as the slip distribution
  (an oracle; draws thinned to ~1500). Weighted 5 / 95 % quantiles of mu_max and the weights' effective size.

Usage: python benchmarks/diag_grip_eiv.py --vehicle sedan --bag DIR --scope front_axle --refit 69.9 [--noise-seeds 6]
Not a test: a diagnosis aid whose figures benchmarks/README_tire_forces.md quotes.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import diag_grip_windows as dg  # noqa: E402

from vehcal_ros.estimation.grip import pipeline as gp  # noqa: E402
from vehcal_ros.estimation.grip.fit import GripEstimator  # noqa: E402
from vehcal_ros.estimation.grip.latent_slip import SlipMixture, true_slip_distribution  # noqa: E402
from vehcal_ros.models.pacejka import gauss_nll_lat, peak_batch  # noqa: E402
from vehcal_ros.replay.params import GRIP_NODE, grip_pipeline_from, node_values  # noqa: E402

XQ, WQ = np.polynomial.hermite.hermgauss(9)


def curve(t: np.ndarray, th: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """Friction at slips t [1, n, q] for draws th [m, 6]: the magic formula, the friction ellipse where lat > 0."""
    B, C, D, E, sh, sv = (th[:, j][:, None, None] for j in range(6))
    u = B * (t + sh)
    f0 = D * np.sin(C * np.arctan(u - E * (u - np.arctan(u)))) + sv
    ld = lat[None, :, None] / np.maximum(D + sv, 1e-6)
    q = np.sqrt(t * t + f0 * f0 * ld * ld)
    return np.where(ld > 0, f0 * np.abs(t) / np.where(q > 0, q, 1.0), f0)


def nll_exact(th, sig, s, v, mu, vm, lat, mix: SlipMixture) -> np.ndarray:
    """-log p(mu | s, theta, sigma) per draw, exact in the latent slip under ``mix`` (quadrature)."""
    r, _ = mix.responsibilities(s, v)
    tau2 = mix.variances[None, :]
    g = tau2 / (tau2 + v[:, None])
    b = mix.means[None, :] + g * (s[:, None] - mix.means[None, :])
    nodes = (b[:, :, None] + np.sqrt(2 * g * v[:, None])[:, :, None] * XQ[None, None, :]).reshape(s.size, -1)
    logw = np.log(np.maximum((r[:, :, None] * WQ[None, None, :] / np.sqrt(np.pi)).reshape(s.size, -1), 1e-300))
    out = np.empty(th.shape[0])
    for c in range(0, th.shape[0], 200):
        var = sig[c:c + 200, None, None] ** 2 + vm[None, :, None]
        lp = -0.5 * (np.log(2 * np.pi * var) + (mu[None, :, None] - curve(nodes[None], th[c:c + 200], lat)) ** 2
                     / var) + logw[None]
        mx = lp.max(axis=2, keepdims=True)
        out[c:c + 200] = -(mx[..., 0] + np.log(np.exp(lp - mx).sum(axis=2))).sum(axis=1)
    return out


def weighted(mm: np.ndarray, lw: np.ndarray) -> str:
    w = np.exp(lw - lw.max())
    o = np.argsort(mm)
    cw = np.cumsum(w[o]) / w.sum()
    lo, hi = np.interp([0.05, 0.95], cw, mm[o])
    return f"{np.average(mm, weights=w):.3f} [{lo:.3f}, {hi:.3f}] ESS {w.sum() ** 2 / (w ** 2).sum():.0f}/{w.size}"


def window(rec: list[dict], scope: str, t_end: float):
    for r in rec:
        if r["scope"] == scope and abs(r["t_end"] - t_end) < 0.3:
            return r, dg.since_change(r)
    raise SystemExit(f"no {scope} window ending at {t_end} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vehicle", default="sedan")
    ap.add_argument("--bag", required=True)
    ap.add_argument("--scope", default="front_axle")
    ap.add_argument("--refit", type=float, required=True, help="stamp (s) of the window")
    ap.add_argument("--noise-seeds", type=int, default=6)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        params = dg.grip_params(args.vehicle, Path(tmp))
        pipeline = grip_pipeline_from(node_values({"grip_estimator": params}, 0)[GRIP_NODE])
        rec = dg.recorded_windows(Path(args.bag), params)
    truth, _, _ = dg.read_signals(Path(args.bag))
    wheels = [0, 1] if args.scope.startswith("front") else [2, 3]
    r, k = window(rec, args.scope, args.refit)
    tb = dg.block_truth(truth, k.t, k.mu, wheels, pipeline.signal_config.lateral_ratio)
    cfg = dataclasses.replace(pipeline.fit_config, seed=0)
    n_fit = pipeline.max_fit_points

    def fit(d):
        d = gp.subsample(d, n_fit, "even", True)
        return d, GripEstimator(cfg).fit(d.slip, d.mu, slip_var=d.slip_var, mu_var=d.mu_var, lateral=d.lat)

    def show(e) -> str:
        return f"{e.mu_max_mean:.3f} [{e.mu_max_lower:.3f}, {e.mu_max_upper:.3f}]"

    tiny = np.full(k.t.size, 1e-10)
    exact = dataclasses.replace(k, slip=tb[:, 0], slip_var=tiny, mu=tb[:, 1], mu_var=tiny)
    print(f"{args.scope} window ending {r['t_end']:.1f} s, {k.t.size} samples")
    for name, d in (("true slip & true mu, recorded lat", exact),
                    ("true slip & true mu, lat = 0", dataclasses.replace(exact, lat=np.zeros(k.t.size))),
                    ("true slip & true mu, true lat", dataclasses.replace(exact, lat=tb[:, 2]))):
        print(f"  {name:40s} {show(fit(d)[1])}", flush=True)
    idx = np.unique(np.round(np.linspace(0, k.t.size - 1, n_fit)).astype(int)) if k.t.size > n_fit else None
    true_fitted = tb[idx, 0] if idx is not None else tb[:, 0]
    for i in range(args.noise_seeds):
        noisy = tb[:, 0] + np.sqrt(k.slip_var) * np.random.default_rng(i).standard_normal(k.t.size)
        print(f"  noise #{i}, true mu{'':26s} "
              f"{show(fit(dataclasses.replace(k, slip=noisy, mu=tb[:, 1], mu_var=tiny))[1])}", flush=True)
        d, e = fit(dataclasses.replace(k, slip=noisy))
        dr = e.chains.draws.reshape(-1, e.chains.draws.shape[-1])
        th, sig = np.ascontiguousarray(dr[:, :6]), dr[:, 6]
        s, v, mu = (np.asarray(x, dtype=float) for x in (d.slip, d.slip_var, d.mu))
        vm = np.asarray(d.mu_var, dtype=float) if d.mu_var is not None else np.zeros_like(s)
        lat = np.asarray(d.lat, dtype=float) if d.lat is not None else np.zeros_like(s)
        mix = true_slip_distribution(s, v)
        m, w = mix.posterior(s, v)
        nll_a = np.array([gauss_nll_lat(m, mu, np.ascontiguousarray(t), g * g, w, vm, lat) for t, g in zip(th, sig)])
        mm = peak_batch(th)[0]
        sub = slice(None, None, max(1, th.shape[0] // 1500))
        oracle = SlipMixture(np.full(true_fitted.size, 1.0 / true_fitted.size), true_fitted.copy(),
                             np.full(true_fitted.size, 1e-14), 0.0)
        print(f"  noise #{i}: default {show(e)}; exact in the latent slip "
              f"{weighted(mm, nll_a - nll_exact(th, sig, s, v, mu, vm, lat, mix))} (K = {mix.n_components}); "
              f"oracle slip distribution "
              f"{weighted(mm[sub], nll_a[sub] - nll_exact(th[sub], sig[sub], s, v, mu, vm, lat, oracle))}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
