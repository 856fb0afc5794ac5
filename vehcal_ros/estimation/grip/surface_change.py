"""Road-surface change detection for the grip estimator: drop the samples of the previous surface.

The grip fit pools the friction samples of the last ``window`` seconds. After a road change (dry -> wet -> snow)
that window mixes two tire curves, and the estimates stay between the surfaces until the old samples have aged
out. :class:`SurfaceChangeDetector` watches each scope's new samples against the **posterior predictive of the
last published estimate** and, when they no longer follow it, tells the pipeline to keep only the samples
from the change on.

Test statistic. For every sample i of the window, the residual against the reference curve and its noise
variance are

    r_i = mu_i - f(s_i; theta),     w_i = sigma^2 + v_mu_i + f'(s_i)^2 v_s_i,

f the magic formula (friction paper Eq. 5) at the posterior-mean theta, sigma the noise std, v_mu / v_s the
sample's friction and slip variances (the grip likelihood's Var_i). Two things make the r_i of everyday data
unlike independent draws, and a test that ignores them fires on a constant road (once per ~28 s per axle on the
simulated 15-minute dry drive, benchmarks/README_grip_over_time.md):

* **Serial correlation.** The slips share their speed reference's slowly varying error, so neighbouring
  residuals move together (lag-1 correlation 0.7-0.85 at 0.1 s blocks on that drive). The new samples are
  therefore taken in batches of ``batch`` consecutive samples; batch j's weighted mean residual
  b_j = sum a_i r_i / A_j (a_i = 1 / w_i, A_j = sum a_i) has variance phi / A_j, where phi is the
  variance inflation of a batch mean over independent samples, measured on the reference's own samples (those
  of the window up to its stamp) by overlapping batch means, taken at its 90 % upper confidence bound
  (:func:`batch_inflation`; with fewer than ``MIN_BATCHES`` batches of them, phi = ``batch``, the fully
  correlated end). This is the batch-means chart for autocorrelated data (Runger & Willemain 1995,
  J. Quality Technology 27(4)).
* **A shared parameter error.** All new samples see the same error of the reference's theta. Their batch
  residuals are tested as recursive residuals (Brown, Durbin & Evans 1975, J. R. Stat. Soc. B 37, Section 2):
  the reference's posterior N(theta_bar, Sigma) is updated batch by batch with the linearised observation
  b_j = J_j delta + e_j (J_j the batch's weighted mean Jacobian df/dtheta, Eq. 16; e_j ~ N(0, phi / A_j)), a
  Kalman filter on delta = theta - theta_bar, and each batch's one-step-ahead innovation

      e_j = (b_j - J_j m_{j-1}) / sqrt(J_j P_{j-1} J_j^T + phi / A_j)

  is N(0, 1) and independent of the earlier ones while the road is the reference's. A new batch that a curve
  consistent with the reference's data AND the earlier new batches explains is no evidence of a change: a
  reference that extrapolated badly beyond its data is corrected by the update instead of cutting the window.

A two-sided CUSUM (Page 1954; Basseville & Nikiforov 1993, Section 2.2) on the innovations

    S+_j = max(0, S+_{j-1} + e_j - k),   S-_j = max(0, S-_{j-1} - e_j - k)

signals when S+ or S- exceeds ``threshold`` h. ``drift`` k is the allowance per batch (k = delta / 2 is optimal
for a shift of delta standard deviations); h sets the false-alarm rate: with k 0.5 and h 6, Siegmund's
approximation gives a mean run length of ~1290 batches between false alarms of the two-sided test on N(0, 1)
innovations (~43 minutes of samples at 10 per second in batches of 20). The change time is estimated as the
stamp of the first sample of the first batch of the run that crossed h (the batch after the statistic was last
zero), the maximum-likelihood change point of the CUSUM. The grip pipeline then drops the samples before it from
the scope's fits -- those at friction levels |mu| where the change showed: the old surface's samples below the
lowest |mu| of the batches that drove the CUSUM run (``level``) are kept if they were taken in pure
longitudinal slip, since there the new surface's samples followed the old curve (a tire's pure-slip stiffness
barely depends on the road, and without those low-slip samples the first fit after a change sees one maneuver
only); samples taken at a slip angle under the friction ellipse are dropped at every level, their apparent slip
stiffness depending on the road's friction (grip_pipeline.pure_slip) -- and waits for the next published
estimate as its new reference. :func:`detect_surface_change` is a pure function of the data and the reference,
so a replay whose fits run in other processes (replay/parallel.py) detects the same changes as the live node.

What it cannot see: in the linear part of the curve the slip stiffness (B C D) of a tire barely changes with
the road (the simulator's Pac02 scales the peak only), so a change is detected when the new surface's samples
climb far enough up its curve to leave the old posterior's predictive band -- not before. Nothing here imports
rclpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vehcal_ros.inference.quantiles import chi2_quantile
from vehcal_ros.models import pacejka


@dataclass(frozen=True)
class SurfaceChangeConfig:
    """Settings of the CUSUM surface-change test (module docstring)."""

    threshold: float = 6.0    #: h, decision threshold of S+ / S- (innovation standard deviations); 0 = detector off
    drift: float = 0.5        #: k, allowance per batch (innovation standard deviations)
    batch: int = 20           #: consecutive new samples per batch (2 s of samples at 10 per second)

    def validate(self) -> None:
        if not 0.0 <= self.threshold <= 1000.0:
            raise ValueError(f"surface_change_threshold must be in [0, 1000] (0 = off), got {self.threshold}")
        if not 0.0 <= self.drift <= 10.0:
            raise ValueError(f"surface_change_drift must be in [0, 10], got {self.drift}")
        if not 1 <= self.batch <= 1000:
            raise ValueError(f"surface_change_batch must be in [1, 1000], got {self.batch}")

    @property
    def enabled(self) -> bool:
        return self.threshold > 0.0


@dataclass
class PredictiveReference:
    """The posterior of one published estimate, as the detector uses it."""

    theta: np.ndarray          #: posterior mean of (B, C, D, E, s_h, s_v)
    theta_cov: np.ndarray      #: its posterior covariance, 6 x 6 (kept symmetric positive semi-definite)
    sigma: float               #: noise std (friction)
    stamp: float               #: stamp of the newest sample of its data (s); later samples are tested

    def __post_init__(self) -> None:
        """The covariance symmetrised and projected onto the positive semi-definite matrices (its negative
        eigenvalues set to 0): one left indefinite by rounding or a degenerate chain would give a negative
        predictive variance."""
        cov = np.asarray(self.theta_cov, dtype=float)
        lam, vec = np.linalg.eigh(0.5 * (cov + cov.T))
        self.theta_cov = (vec * np.maximum(lam, 0.0)) @ vec.T

    @classmethod
    def from_estimate(cls, est, stamp: float) -> PredictiveReference | None:
        """From a :class:`~vehcal_ros.estimation.grip.fit.GripEstimate`; None if its moments are not finite."""
        theta = np.array([est.theta[k] for k in pacejka.THETA_NAMES], dtype=float)
        cov = np.asarray(est.theta_cov, dtype=float)
        sigma = float(est.sigma)
        if not (np.all(np.isfinite(theta)) and cov.shape == (6, 6) and np.all(np.isfinite(cov))
                and math.isfinite(sigma) and math.isfinite(stamp)):
            return None
        return cls(theta, cov, sigma, float(stamp))

    def residuals(self, slip: np.ndarray, mu: np.ndarray, slip_var: np.ndarray | None = None,
                  mu_var: np.ndarray | None = None, lat: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(r, w, J): residuals mu - f(s; theta), their noise variances sigma^2 + v_mu + f'^2 v_s and the
        Jacobians df/dtheta [n, 6] (module docstring). ``lat`` (|sin alpha| / rho per sample): the prediction
        is the friction ellipse's longitudinal share (pacejka.combined); the Jacobian stays the pure curve's."""
        s = np.ascontiguousarray(slip, dtype=float)
        f = pacejka.mf_curve(s, self.theta)
        slope = pacejka.slope(s, self.theta)
        if lat is not None and np.any(lat > 0.0):
            d = max(float(self.theta[2] + self.theta[5]), 1e-6)   # the curve's maximum, as pacejka.gauss_nll_lat
            for i in np.flatnonzero(lat > 0.0):
                f[i], slope[i] = pacejka.combined(float(s[i]), float(f[i]), float(slope[i]), float(lat[i]) / d)
        w = np.full(s.shape, self.sigma ** 2)
        if mu_var is not None:
            w = w + mu_var
        if slip_var is not None:
            w = w + slope ** 2 * slip_var
        return np.asarray(mu, dtype=float) - f, w, pacejka.jacobian(s, self.theta)

    def innovations(self, r: np.ndarray, w: np.ndarray, jac: np.ndarray, phi: float) -> np.ndarray:
        """Standardised recursive residuals e_j of consecutive batches (rows of ``r``/``w``/``jac`` [n_batches,
        batch(, 6)]; module docstring): the Kalman filter on delta = theta - theta_bar from N(0, Sigma), each
        batch's weighted mean residual observed with variance ``phi`` / A_j."""
        m = np.zeros(6)
        p = self.theta_cov.copy()
        out = np.empty(r.shape[0])
        for j in range(r.shape[0]):
            a = 1.0 / w[j]
            big_a = float(a.sum())
            b = float(a @ r[j]) / big_a
            h = (a @ jac[j]) / big_a
            ph = p @ h
            s = max(float(h @ ph), 0.0) + phi / big_a
            nu = b - float(h @ m)
            out[j] = nu / math.sqrt(s)
            gain = ph / s
            m = m + gain * nu
            p = p - np.outer(gain, ph)
        return out


MIN_BATCHES = 2
"""The reference's own samples give the batch variance inflation phi (module docstring) when they span at least
this many batches; fewer: phi = batch."""

PHI_CONFIDENCE = 0.9
"""phi is taken at this one-sided upper confidence bound of its estimate (module docstring)."""


def batch_inflation(r: np.ndarray, w: np.ndarray, batch: int) -> float:
    """phi, the variance of a mean of ``batch`` consecutive standardised residuals u = r / sqrt(w) (finite, w > 0)
    of the reference's own samples (time order) over 1 / ``batch``: the overlapping-batch-means estimate
    phi_hat = batch * mean_k(M_k^2), M_k the mean of u[k : k + batch] (Meketon & Schmeiser 1984, Proc. Winter
    Simulation Conf.; about chi^2 with 1.5 n / batch degrees of freedom for n samples), raised to its
    :data:`PHI_CONFIDENCE` upper confidence bound phi_hat * dof / chi2_dof(1 - PHI_CONFIDENCE), at least 1.
    A few batches estimate phi poorly (15 batches: +-37 % by disjoint batch means), and an underestimate makes
    the test fire on the noise; the bound pays for that uncertainty with sensitivity instead. ``batch`` when the
    samples span fewer than :data:`MIN_BATCHES` batches."""
    u = r / np.sqrt(w)
    n = u.size
    if n < MIN_BATCHES * batch:
        return float(batch)
    c = np.concatenate([[0.0], np.cumsum(u)])
    means = (c[batch:] - c[:-batch]) / batch
    phi_hat = batch * float(np.mean(means * means))
    dof = 1.5 * n / batch
    return max(1.0, phi_hat * dof / chi2_quantile(1.0 - PHI_CONFIDENCE, dof))


@dataclass(frozen=True)
class SurfaceChange:
    """A detected road change."""

    time: float         #: estimated change time (s): the first sample of the CUSUM run that crossed the threshold
    detected_at: float  #: stamp of the last sample of the batch that crossed it (s)
    level: float        #: |mu| of the lowest sample of the batches that drove the run: below it the new surface's
    #: samples agreed with the old curve, so the old surface's pure-slip samples below it are kept (module docstring)


def cusum_change(t: np.ndarray, z: np.ndarray, threshold: float, drift: float) -> tuple[float, float, int] | None:
    """Two-sided CUSUM over standardised residuals ``z`` stamped ``t`` (time order; NaN entries are skipped):
    (estimated change time, stamp of the sample that crossed ``threshold``, side +1 / -1), or None when neither
    S+ nor S- exceeds it. The change time is the first sample of the crossing run (the sample after the
    statistic was last zero)."""
    s_pos = s_neg = 0.0
    run_pos = run_neg = math.nan
    for zi, ti in zip(z.tolist(), t.tolist()):
        if zi != zi:   # NaN: a sample the reference cannot score
            continue
        if s_pos == 0.0:
            run_pos = ti
        if s_neg == 0.0:
            run_neg = ti
        s_pos = max(0.0, s_pos + zi - drift)
        s_neg = max(0.0, s_neg - zi - drift)
        if s_pos > threshold:
            return run_pos, ti, 1
        if s_neg > threshold:
            return run_neg, ti, -1
    return None


def detect_surface_change(config: SurfaceChangeConfig, reference: PredictiveReference | None, t: np.ndarray,
                          slip: np.ndarray, mu: np.ndarray, slip_var: np.ndarray | None = None,
                          mu_var: np.ndarray | None = None, lat: np.ndarray | None = None) -> SurfaceChange | None:
    """Test the samples newer than ``reference.stamp`` against the reference (module docstring): batch means,
    their recursive residuals, a two-sided CUSUM; the window's samples up to the stamp give the batch variance
    inflation. None when there is no change (or no reference, or the test is off). A pure function of its
    arguments: a replay that fits in other processes gets the same answer."""
    if not config.enabled or reference is None:
        return None

    r, w, jac = reference.residuals(slip, mu, slip_var, mu_var, lat)
    ok = np.isfinite(r) & np.isfinite(w) & (w > 0.0) & np.all(np.isfinite(jac), axis=1)
    own = ok & (t <= reference.stamp)
    phi = batch_inflation(r[own], w[own], config.batch)
    new = np.flatnonzero(ok & (t > reference.stamp))
    n = new.size // config.batch
    if n == 0:
        return None
    rows = new[: n * config.batch].reshape(n, config.batch)
    e = reference.innovations(r[rows], w[rows], jac[rows], phi)
    found = cusum_change(np.arange(n, dtype=float), e, config.threshold, config.drift)
    if found is None:
        return None
    first, crossed, side = int(found[0]), int(found[1]), found[2]
    run = [j for j in range(first, crossed + 1) if side * e[j] > config.drift]   # the batches that pushed it up
    level = float(np.min(np.abs(mu[rows[run]]))) if run else 0.0
    return SurfaceChange(float(t[rows[first, 0]]), float(t[rows[crossed, -1]]), level)
