"""Road-surface change detection for the grip estimator: drop the samples of the previous surface.

The grip fit pools the friction samples of the last ``window`` seconds. After a road change (dry -> wet -> snow)
that window mixes two tire curves, and the estimates stay between the surfaces until the old samples have aged
out. :class:`SurfaceChangeDetector` watches each scope's new samples against the **posterior predictive of the
last published estimate** and, when they no longer follow it, tells the pipeline to keep only the samples
from the change on.

Test statistic: for every sample newer than the data of the reference estimate, the standardised residual

    z_i = (mu_i - f(s_i; theta)) / sqrt(sigma^2 + v_mu_i + f'(s_i)^2 v_s_i + J_i Sigma J_i^T),

f the magic formula (friction paper Eq. 5) at the posterior-mean theta, Sigma the posterior covariance of theta
(first-order propagation through the Jacobian J_i = df/dtheta, Eq. 16), sigma the noise std, v_mu / v_s the
sample's friction and slip variances (the grip likelihood's Var_i). On the surface of the reference the z_i
are roughly N(0, 1); on a new surface whose curve departs from it they drift to one side. A two-sided CUSUM
(Page 1954; Basseville & Nikiforov 1993, Section 2.2)

    S+_i = max(0, S+_{i-1} + z_i - k),   S-_i = max(0, S-_{i-1} - z_i - k)

signals when S+ or S- exceeds ``threshold`` h. ``drift`` k is the allowance per sample (k = delta / 2 is
optimal for a shift of delta standard deviations); h sets the false-alarm rate. The change time is estimated
as the stamp of the first sample of the run that crossed h (the sample after the statistic was last zero),
the maximum-likelihood change point of the CUSUM. The grip pipeline then drops the samples before it from
the scope's fits -- those at friction levels |mu| where the change showed: the old surface's samples below the
lowest |mu| of the samples that drove the CUSUM run (``level``) are kept if they were taken in pure
longitudinal slip, since there the new surface's samples followed the old curve (a tire's pure-slip stiffness
barely depends on the road, and without those low-slip samples the first fit after a change sees one maneuver
only); samples taken at a slip angle under the friction ellipse are dropped at every level, their apparent slip
stiffness depending on the road's friction (grip_pipeline.pure_slip) -- and waits for the next published
estimate as its new reference. :func:`detect_surface_change` is a pure function of the data and the reference,
so a replay whose fits run in other processes (io/replay_parallel.py) detects the same changes as the live node.

What it cannot see: in the linear part of the curve the slip stiffness (B C D) of a tire barely changes with
the road (the simulator's Pac02 scales the peak only), so a change is detected when the new surface's samples
climb far enough up its curve to leave the old posterior's predictive band -- not before. Nothing here imports
rclpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vehcal_ros.models import pacejka


@dataclass(frozen=True)
class SurfaceChangeConfig:
    """Settings of the CUSUM surface-change test (module docstring)."""

    threshold: float = 10.0   #: h, decision threshold of S+ / S- (standard deviations); 0 = detector off
    drift: float = 1.0        #: k, allowance per sample (standard deviations)

    def validate(self) -> None:
        if not 0.0 <= self.threshold <= 1000.0:
            raise ValueError(f"surface_change_threshold must be in [0, 1000] (0 = off), got {self.threshold}")
        if not 0.0 <= self.drift <= 10.0:
            raise ValueError(f"surface_change_drift must be in [0, 10], got {self.drift}")

    @property
    def enabled(self) -> bool:
        return self.threshold > 0.0


@dataclass
class PredictiveReference:
    """The posterior of one published estimate, as the detector uses it."""

    theta: np.ndarray          #: posterior mean of (B, C, D, E, s_h, s_v)
    theta_cov: np.ndarray      #: its posterior covariance, 6 x 6
    sigma: float               #: noise std (friction)
    stamp: float               #: stamp of the newest sample of its data (s); later samples are tested

    @classmethod
    def from_estimate(cls, est, stamp: float) -> PredictiveReference | None:
        """From a :class:`~vehcal_ros.estimation.grip_fit.GripEstimate`; None if its moments are not finite."""
        theta = np.array([est.theta[k] for k in pacejka.THETA_NAMES], dtype=float)
        cov = np.asarray(est.theta_cov, dtype=float)
        sigma = float(est.sigma)
        if not (np.all(np.isfinite(theta)) and cov.shape == (6, 6) and np.all(np.isfinite(cov))
                and math.isfinite(sigma) and math.isfinite(stamp)):
            return None
        return cls(theta, 0.5 * (cov + cov.T), sigma, float(stamp))

    def z_scores(self, slip: np.ndarray, mu: np.ndarray, slip_var: np.ndarray | None = None,
                 mu_var: np.ndarray | None = None, lat: np.ndarray | None = None) -> np.ndarray:
        """Standardised posterior-predictive residuals of samples (module docstring); NaN where undefined.
        ``lat`` (|sin alpha| / rho per sample): the prediction is the friction ellipse's longitudinal share
        (pacejka.combined); the parameter-uncertainty term keeps the pure curve's Jacobian."""
        s = np.ascontiguousarray(slip, dtype=float)
        f = pacejka.mf_curve(s, self.theta)
        slope = pacejka.slope(s, self.theta)
        if lat is not None and np.any(lat > 0.0):
            d = max(float(self.theta[2] + self.theta[5]), 1e-6)   # the curve's maximum, as pacejka.gauss_nll_lat
            for i in np.flatnonzero(lat > 0.0):
                f[i], slope[i] = pacejka.combined(float(s[i]), float(f[i]), float(slope[i]), float(lat[i]) / d)
        jac = pacejka.jacobian(s, self.theta)
        var = self.sigma ** 2 + np.einsum("ij,jk,ik->i", jac, self.theta_cov, jac)
        if mu_var is not None:
            var = var + mu_var
        if slip_var is not None:
            var = var + slope ** 2 * slip_var
        with np.errstate(invalid="ignore", divide="ignore"):
            z = (np.asarray(mu, dtype=float) - f) / np.sqrt(var)
        return np.where(np.isfinite(z) & (var > 0.0), z, np.nan)


@dataclass(frozen=True)
class SurfaceChange:
    """A detected road change."""

    time: float         #: estimated change time (s): the first sample of the CUSUM run that crossed the threshold
    detected_at: float  #: stamp of the sample that crossed it (s)
    level: float        #: |mu| of the lowest sample that drove the run: below it the new surface's samples agreed
    #: with the old curve, so the old surface's pure-slip samples below it are kept (module docstring)


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
    """Test the samples newer than ``reference.stamp`` against its posterior predictive (module docstring);
    None when there is no change (or no reference, or the test is off). A pure function of its arguments: a
    replay that fits in other processes gets the same answer."""
    if not config.enabled or reference is None:
        return None
    new = t > reference.stamp
    if not np.any(new):
        return None
    z = reference.z_scores(slip[new], mu[new], None if slip_var is None else slip_var[new],
                           None if mu_var is None else mu_var[new], None if lat is None else lat[new])
    found = cusum_change(t[new], z, config.threshold, config.drift)
    if found is None:
        return None
    change, at, side = found
    tn = t[new]
    run = (tn >= change) & (tn <= at) & (side * z > config.drift)   # the samples that pushed the statistic up
    level = float(np.min(np.abs(mu[new][run]))) if np.any(run) else 0.0
    return SurfaceChange(change, at, level)
