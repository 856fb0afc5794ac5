"""The IMU's mounting yaw from ordinary driving: a lateral accelerometer that reads part of the forward one.

An IMU turned on its mount by psi about the vertical axis (its x axis psi to the left of the body's) reads the
body's specific forces (f_x, f_y) as

    f_x' = f_x cos psi + f_y sin psi,        f_y' = -f_x sin psi + f_y cos psi.

Driving straight, the body's lateral specific force is the centripetal u r and a road's crossfall (g times the
slope, a constant over a stretch); the lateral velocity hardly changes. So the lateral residual
e = f_y' - u r = c - sin(psi) f_x + noise, with u the GNSS speed and r the IMU's yaw rate, and the slope of e
against f_x over the launches and brakings of a drive is -sin(psi) (a 1 deg mounting error: -0.0175). The
accelerometer's own biases go into the intercept c.

The regression takes block means over ``block`` seconds of samples at speed (>= ``min_speed``) and driving
straight (|r| <= ``max_yaw_rate``), so that one block's mean is nearly free of the sensors' white noise; its
standard error comes from the blocks' scatter about the line. That error holds only over enough blocks: with 40
(20 s) three of the 32 zoo vehicles' aligned IMUs read 1.4-3.1 deg at 3.3-3.7 standard errors for 2-20 s, with 120
none of them, and the 1 deg fault bags are named after 70-72 s. Once ``min_blocks`` blocks are in and the slope is
beyond ``MOUNT_DOUBT`` and 3 of its standard errors (:attr:`ImuYawMount.named`; it stays named while beyond half
that and 2 standard errors), /diagnostics names the mounting and :meth:`ImuYawMount.corrected`
turns each IMU sample's (f_x, f_y) back by psi: f_x = f_x' cos psi - f_y' sin psi, f_y = f_x' sin psi +
f_y' cos psi. Uncorrected, the lateral acceleration leaks into f_x, which the slips' speed reference integrates
and the force balance's torque scale reads as a scale error of the torques (docs/tire_forces.md).

Plain floats; no numpy per sample, no rclpy.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from vehcal_ros.records import GnssVelocity, ImuSample

MOUNT_DOUBT = math.sin(math.radians(0.5))
"""A slope of the lateral residual against the forward acceleration beyond this (and 3 standard errors) names
and corrects the IMU's mounting yaw: 0.5 deg, a tenth of a lane change's heading and beyond what a bracket built
to its drawing holds (a 1 deg error reads 1.75 % of the forward acceleration sideways)."""


@dataclass(frozen=True)
class ImuMountConfig:
    """Settings of :class:`ImuYawMount` (SI units)."""

    block: float = 0.5            #: s, averaging block
    min_block_samples: int = 10   #: a block with fewer gated samples is dropped
    min_speed: float = 5.0        #: m/s, slower samples are not used (u r and the GNSS speed's noise)
    max_yaw_rate: float = 0.02    #: rad/s, |r| above this is not straight driving
    max_gnss_age: float = 0.5     #: s, the GNSS speed older than this is not used
    min_blocks: int = 120         #: blocks before the mounting may be named (60 s of straight driving at speed)


class ImuYawMount:
    """Online least-squares slope of the IMU's lateral residual against its forward specific force (module
    docstring). Feed IMU and GNSS velocity records in arrival order; read :attr:`slope` (-sin psi),
    :attr:`slope_se` and :attr:`angle_deg` (psi, deg)."""

    def __init__(self, config: ImuMountConfig | None = None) -> None:
        self.config = config or ImuMountConfig()
        self._u = math.nan
        self._u_t = -math.inf
        self._key = -math.inf
        self._bn = 0
        self._bx = self._be = 0.0
        self._n = 0
        self._sx = self._se = self._sxx = self._sxe = self._see = 0.0
        self._cos, self._sin = 1.0, 0.0   # the correction's rotation (identity until the mounting is named)
        self.named = False
        """after ``min_blocks`` blocks the slope went beyond :data:`MOUNT_DOUBT` and 3 standard errors (and has
        stayed beyond half that and 2): named and corrected"""

    def add_gnss(self, rec: GnssVelocity) -> None:
        """The speed over ground (m/s) the centripetal term u r takes."""
        if math.isfinite(rec.t) and math.isfinite(rec.ve) and math.isfinite(rec.vn):
            self._u, self._u_t = rec.speed, rec.t

    def add_imu(self, rec: ImuSample) -> None:
        """One IMU sample into its block; a finished block joins the regression."""
        c = self.config
        t = rec.t
        if not math.isfinite(t):
            return
        key = math.floor(t / c.block)
        if key != self._key:
            self._close_block()
            self._key = key
        u, r = self._u, rec.yaw_rate
        if not (u >= c.min_speed and abs(t - self._u_t) <= c.max_gnss_age and abs(r) <= c.max_yaw_rate
                and math.isfinite(rec.ax) and math.isfinite(rec.ay)):
            return
        self._bn += 1
        self._bx += rec.ax
        self._be += rec.ay - u * r

    def corrected(self, rec: ImuSample) -> ImuSample:
        """``rec`` with (f_x, f_y) turned back by the mounting yaw once it is :attr:`named`; ``rec`` itself
        before."""
        if not self.named:
            return rec
        c, s = self._cos, self._sin
        return dataclasses.replace(rec, ax=rec.ax * c - rec.ay * s, ay=rec.ax * s + rec.ay * c)

    def _close_block(self) -> None:
        n = self._bn
        if n >= self.config.min_block_samples:
            x, e = self._bx / n, self._be / n
            self._n += 1
            self._sx += x
            self._se += e
            self._sxx += x * x
            self._sxe += x * e
            self._see += e * e
            s, se = self._fit()
            if self._n >= self.config.min_blocks and math.isfinite(s):   # named beyond the doubt and 3 SE; kept
                keep = (0.5 * MOUNT_DOUBT, 2.0) if self.named else (MOUNT_DOUBT, 3.0)   # while beyond half, 2 SE
                self.named = abs(s) > max(keep[0], keep[1] * se)
            if self.named:   # psi = -asin(slope): cos psi, sin psi
                sin_psi = -max(-1.0, min(1.0, s))
                self._cos, self._sin = math.sqrt(1.0 - sin_psi * sin_psi), sin_psi
        self._bn, self._bx, self._be = 0, 0.0, 0.0

    @property
    def blocks(self) -> int:
        """Blocks in the regression."""
        return self._n

    def _fit(self) -> tuple[float, float]:
        """(slope, its standard error from the blocks' scatter about the line); nan before 3 blocks with a_x
        varying."""
        n = self._n
        dxx = self._sxx - self._sx * self._sx / n if n >= 3 else 0.0
        if dxx <= 0.0:
            return math.nan, math.nan
        dxe = self._sxe - self._sx * self._se / n
        dee = self._see - self._se * self._se / n
        resid = max(dee - dxe * dxe / dxx, 0.0) / (n - 2)
        return dxe / dxx, math.sqrt(resid / dxx)

    @property
    def slope(self) -> float:
        """-sin(psi): the slope of the lateral residual against f_x (nan before 3 blocks with a_x varying)."""
        return self._fit()[0]

    @property
    def slope_se(self) -> float:
        """Standard error of :attr:`slope` from the blocks' scatter about the line (nan before 3 blocks)."""
        return self._fit()[1]

    @property
    def angle_deg(self) -> float:
        """psi, deg: the IMU's x axis to the left of the body's (positive) or to the right."""
        s = self.slope
        return -math.degrees(math.asin(max(-1.0, min(1.0, s)))) if math.isfinite(s) else math.nan


__all__ = ["ImuMountConfig", "ImuYawMount", "MOUNT_DOUBT"]
