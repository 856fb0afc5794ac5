"""The reported wheel torques' scale and offset, learnt online from the vehicle's own acceleration (no rclpy).

The tire forces estimated from production sensors (:mod:`~vehcal_ros.estimation.sensing.tire_forces`) take
the ECU's wheel torques T_i at their word. A torque reported 5 % high makes every Fx, so every friction sample,
5 % high: grip overstated. Newton's second law along the body's x axis checks them: the sum of the
non-gravitational external forces is the mass times the accelerometer's specific force f_x (grade and pitch are
in f_x, so they need no model),

    sum_i (Fx_i cos delta_i - Fy_i sin delta_i) - c v^2 = m f_x,

the tires' ground forces along the body less the aerodynamic drag, with delta_i each wheel's heading. The
lateral forces' share is the toe drag: a wheel toed by delta rolling straight on carries Fy ~ C_a delta (its
cornering stiffness C_a) across its heading, so -C_a delta^2 along the body, and on a car with bump steer the toe,
hence this drag, follows the pitch of every launch and stop, in step with the drive torque (Chrono's sedan: toe-in
0.5-4 deg; leaving it out reads its torques 5 % high). It enters as -C Q with Q = sum_i delta_toe,i^2 (rad^2,
the toe of the description's bump-steer table at the wheel travel; estimation/grip/friction_samples.py) and C learnt
(the cornering drag of the steered wheels is small at everyday lateral accelerations and left out). With the reported
torques off by a common scale and offset, T_i,true = k T_i + beta_i, the spin filter's forces Fx^_i miss
(k - 1) T_i / r_i + beta_i / r_i each, so

    z = m f_x - sum_i Fx^_i = (k - 1) S_T + B - c v^2 - C Q + e,     S_T = sum_i T_i / r_i,  B = sum_i beta_i / r_i,

a linear regression on x = (S_T, 1, -v^2, -Q) for theta = (k - 1, B, c, C), with a Gaussian prior
(``TorqueScaleConfig``: k - 1 ~ N(0, 0.2^2), B ~ N(0, 2000^2) N, c ~ N(0.4, 0.4^2) N s^2/m^2, a drag area of
~0.7 m^2, C ~ N(0, 2e5^2) N/rad: a passenger car's cornering stiffness per tire is 4-8e4). A constant toe (no bump
steer) makes Q constant, and C then only splits the intercept with B; k is untouched. The normal equations are
summed per sample and folded every ``fold_period`` into totals that forget with time constant ``memory`` (a mass
or a torque map changes between drives, not within a second). The residual variance comes from the residuals
themselves and is inflated by their correlation (batch means over the fold periods: the spin filter's lag and the
suspension's pitch make neighbouring residuals alike), so the posterior SDs are those of the independent
information.

A description mass off by a factor q (m_desc = q m) is absorbed the same way: k comes out ~q, the corrected
forces are q times the true ones and so are the description's normal loads, so their ratio, the friction, is
right. What it cannot separate is the split between the axles (the CG), which the friction of each axle needs.

Plain floats on the message path (a few multiply-adds per sample); one 4 x 4 solve per fold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

_BLOCK = 15
"""Floats of an open fold: the upper triangle of x x^T (10), x z (4) and z z."""


@dataclass(frozen=True)
class TorqueScaleConfig:
    """Prior and memory of :class:`TorqueScaleEstimator` (SI units)."""

    prior_scale_sd: float = 0.2      #: prior SD of k - 1
    prior_offset_sd: float = 2000.0  #: N, prior SD of the summed offset force B
    prior_drag: float = 0.4          #: N s^2/m^2, prior mean of c = rho CdA / 2 (CdA ~0.7 m^2)
    prior_drag_sd: float = 0.4       #: N s^2/m^2
    prior_toe_drag_sd: float = 2.0e5  #: N/rad, prior SD of the toe-drag coefficient C (prior mean 0)
    memory: float = 600.0            #: s, time constant of the forgetting
    fold_period: float = 1.0         #: s between folds (and the batch length of the residual correlation)
    min_speed: float = 3.0           #: m/s; slower samples are not used (the spin filter's low-speed regime)
    max_sd: float = 0.02             #: the scale corrects the forces once its SD is at most this
    apply: bool = True               #: correct the forces by the learnt scale (False: learn and report only)

    def validate(self) -> None:
        checks = [
            (self.prior_scale_sd > 0 and self.prior_offset_sd > 0 and self.prior_drag_sd > 0
             and self.prior_toe_drag_sd > 0,
             "prior SDs must be > 0"),
            (self.memory > 0 and 0 < self.fold_period <= self.memory, "memory and fold_period must be > 0 s"),
            (self.min_speed >= 0, f"min_speed must be >= 0 m/s, got {self.min_speed}"),
            (0 < self.max_sd < 1, f"max_sd must be in (0, 1), got {self.max_sd}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(f"torque scale: {msg}")


class TorqueScaleEstimator:
    """Feed :meth:`add` one sample per wheel-speed step; read :attr:`scale`, :attr:`scale_sd`, :attr:`offset`,
    :attr:`drag` and :meth:`correction`. ``mass``: the vehicle's total mass from its description, kg."""

    def __init__(self, mass: float, config: TorqueScaleConfig | None = None) -> None:
        self.config = config or TorqueScaleConfig()
        self.config.validate()
        self.mass = float(mass)
        c = self.config
        self._prior_mean = np.array([0.0, 0.0, c.prior_drag, 0.0])
        self._prior_prec = np.diag([c.prior_scale_sd ** -2, c.prior_offset_sd ** -2, c.prior_drag_sd ** -2,
                                    c.prior_toe_drag_sd ** -2])
        self._A = np.zeros((4, 4))      # decayed sum x x^T
        self._b = np.zeros(4)           # decayed sum x z
        self._zz = 0.0                  # decayed sum z^2
        self._n = 0.0                   # decayed count
        self._block = [0.0] * _BLOCK    # the open fold: x x^T (upper triangle, 10), x z (4), z z
        self._block_n = 0
        self._block_t0 = math.nan
        self._last_t = math.nan
        self._batch = [0.0, 0.0, 0.0, 0.0]   # decayed sums: n x fold mean residual^2, residual^2, n, folds
        self.theta = self._prior_mean.copy()
        self.cov = np.linalg.inv(self._prior_prec)
        self.samples = 0                #: samples used since start

    # ------------------------------------------------------------------ input
    def add(self, t: float, f_x: float, fx_sum: float, torque_over_r: float, speed: float,
            toe_sq: float = 0.0) -> None:
        """One sample: time (s), specific force along x (m/s^2), the sum of the estimated Fx (N), S_T = the sum
        of T_i / r_i (N), the vehicle speed (m/s) and Q = the sum of the wheels' squared toe (rad^2). Non-finite
        or slow samples are ignored."""
        if not (math.isfinite(t) and math.isfinite(f_x) and math.isfinite(fx_sum) and math.isfinite(torque_over_r)
                and math.isfinite(speed) and math.isfinite(toe_sq)) or speed < self.config.min_speed:
            return
        if math.isfinite(self._last_t) and t < self._last_t:   # the clock went back: start over
            self.reset()
        self._last_t = t
        if not math.isfinite(self._block_t0):
            self._block_t0 = t
        z = self.mass * f_x - fx_sum
        x0, x2, x3 = torque_over_r, -speed * speed, -toe_sq
        b = self._block   # x = (x0, 1, x2, x3)
        b[0] += x0 * x0
        b[1] += x0
        b[2] += x0 * x2
        b[3] += x0 * x3
        b[4] += 1.0
        b[5] += x2
        b[6] += x3
        b[7] += x2 * x2
        b[8] += x2 * x3
        b[9] += x3 * x3
        b[10] += x0 * z
        b[11] += z
        b[12] += x2 * z
        b[13] += x3 * z
        b[14] += z * z
        self._block_n += 1
        self.samples += 1
        if t - self._block_t0 >= self.config.fold_period:
            self._fold(t)

    def reset(self) -> None:
        """Forget everything learnt (the prior again)."""
        self.__init__(self.mass, self.config)

    # ----------------------------------------------------------------- folding
    def _fold(self, t: float) -> None:
        b, n = self._block, self._block_n
        lam = math.exp(-(t - self._block_t0) / self.config.memory)
        xx = np.array([[b[0], b[1], b[2], b[3]], [b[1], b[4], b[5], b[6]], [b[2], b[5], b[7], b[8]],
                       [b[3], b[6], b[8], b[9]]])
        xz = np.array([b[10], b[11], b[12], b[13]])
        # the fold's mean residual under the current estimate (batch means of the residual correlation)
        theta = self.theta
        rss = b[14] - 2.0 * float(xz @ theta) + float(theta @ xx @ theta)
        mean_r = (b[11] - float(np.array([b[1], b[4], b[5], b[6]]) @ theta)) / n
        self._A = lam * self._A + xx
        self._b = lam * self._b + xz
        self._zz = lam * self._zz + b[14]
        self._n = lam * self._n + n
        s = self._batch
        s[0] = lam * s[0] + n * mean_r * mean_r
        s[1] = lam * s[1] + max(rss, 0.0)
        s[2] = lam * s[2] + n
        s[3] = lam * s[3] + 1.0
        self._block = [0.0] * _BLOCK
        self._block_n = 0
        self._block_t0 = t
        self._solve()

    def _solve(self) -> None:
        """Posterior of theta: the normal equations weighted by the residual variance x its correlation factor,
        plus the prior."""
        theta = (np.linalg.lstsq(self._A, self._b, rcond=None)[0] if self._n > 4 else self.theta)
        rss = self._zz - 2.0 * float(self._b @ theta) + float(theta @ self._A @ theta)
        var = max(rss, 0.0) / max(self._n - 4.0, 1.0)
        if not var > 0.0:
            return
        # batch means: n x Var(fold mean) / per-sample variance estimates the integrated autocorrelation time
        s = self._batch
        inflation = max(1.0, (s[0] / s[3]) / (s[1] / s[2])) if s[1] > 0.0 and s[3] > 0.0 else 1.0
        w = 1.0 / (var * inflation)
        prec = w * self._A + self._prior_prec
        cov = np.linalg.inv(prec)
        self.theta = cov @ (w * self._b + self._prior_prec @ self._prior_mean)
        self.cov = cov

    # ----------------------------------------------------------------- output
    @property
    def scale(self) -> float:
        """k: true torque / reported torque (1 = as reported)."""
        return 1.0 + float(self.theta[0])

    def _sd(self, i: int) -> float:
        return math.sqrt(max(float(self.cov[i, i]), 0.0))

    @property
    def scale_sd(self) -> float:
        return self._sd(0)

    @property
    def offset(self) -> float:
        """B, N: the summed force of the torques' offsets (sum beta_i / r_i), with its SD."""
        return float(self.theta[1])

    @property
    def offset_sd(self) -> float:
        return self._sd(1)

    @property
    def drag(self) -> float:
        """c, N s^2/m^2: the aerodynamic drag coefficient the data give."""
        return float(self.theta[2])

    @property
    def toe_drag(self) -> float:
        """C, N/rad: the toe drag per rad^2 of summed squared toe the data give (~ a tire's cornering stiffness)."""
        return float(self.theta[3])

    @property
    def learnt(self) -> bool:
        """True once the scale's SD is at most ``max_sd``: :meth:`correction` then applies it."""
        return self.scale_sd <= self.config.max_sd

    def correction(self) -> tuple[float, float]:
        """(k - 1, Var(k)) to add to a wheel's force as (k - 1) T_i / r_i: zeros until :attr:`learnt`, and
        always without ``apply``."""
        if not (self.config.apply and self.learnt):
            return 0.0, 0.0
        return float(self.theta[0]), float(self.cov[0, 0])


__all__ = ["TorqueScaleConfig", "TorqueScaleEstimator"]
