"""Online effective rolling radius of each axle from free rolling against an independent speed reference.

The slip ratio s = (omega R - v) / max(omega R, v) needs the effective rolling radius R to a precision finer than the
slips it measures: everyday slips are 0.5-2 %, and a 1 % error of R is a 1 % slip offset. The vehicle description
gives R_desc(Fz) = r0 - Fz / kt (m; VehicleDescription.slip_radius_law), which a user rarely knows to 1 % (tire make,
wear, pressure, temperature). This module learns a scale k per axle, R_eff = k R_desc(Fz), from stretches of *free
rolling*: no net wheel torque (|T_axle| / (Fz_axle R) < ``max_mu``, i.e. |Fx/Fz| below ~0.02, so the slip is below
~0.1 %), straight (|yaw rate| and |road-wheel angle| small), steady (|a_x| small) and fast enough (v > 5 m/s) for the
wheel-speed resolution. There omega R_eff = v, hence

    ln v - ln(omega_a R_desc,a) = ln k_a                       (GNSS speed over ground, per axle a)
    ln(omega_d R_desc,d) - ln(omega_u R_desc,u) = ln k_u - ln k_d   (driven d vs undriven u axle, no reference)

The torque gate admits |Fx/Fz| up to ``max_mu``, and inside it the tire still slips in proportion to its force,
s_a = c mu_a (c = Fz/C_x, the slip compliance: the inverse of the normalised longitudinal slip stiffness, ~0.05
for a tire of C_x = 20 Fz). A 0.02 gate lets through slips of ~1e-3, the size of the radius error sought. On a
level road the admitted samples straddle zero force and the slip averages out; on a grade only the coasting
ones pass the a_x gate (specific force = acceleration + g sin(grade)), all on the same side of zero force, and
their slip would read as a radius error (+0.1 % on a 5 % climb: Gustafsson 1997, Automatica 33(6), Eq. 2, the
offset delta that a slip-slope fit must carry beside the slope). Each comparison therefore states the axle's
net longitudinal force per load,

    mu_a = (T_a - 2 rr Fz_a - 2 J_w,a domega_a/dt) / (2 Fz_a R_desc,a)                            (RR-1)

(T_a the axle's net torque, rr the rolling-resistance lever of the description, m, as the force estimator's
spin equation; J_w,a the wheels' spin inertia; domega_a/dt the slope of the axle's local line), and each comparison is
taken with the slip that force implies removed,

    ln v - ln(omega_a R_desc,a) + c mu_a = ln k_a
    ln(omega_d R_desc,d) - ln(omega_u R_desc,u) - c (mu_d - mu_u) = ln k_u - ln k_d                (RR-2)

with c = ``slip_compliance``, from the description's nominal longitudinal slip stiffness. c is not learnt: the
force of one comparison (RR-1) is known only to ~0.002 (torque noise, the slope of 0.1 s of wheel speeds)
against a spread of ~0.003-0.007 among the comparisons the gates admit, and a fit of c through such
errors-in-variables shrinks it towards zero (on the HMMWV's level daily drive to 0.005 +- 0.004, where its true
slips give 0.05), and so would a filter that carries c's doubt as a common error (it fits c implicitly). The
force's own noise enters each comparison unbiased. c's doubt (``slip_compliance_std``) is a common error of
all comparisons: the reported SD of k adds it as c's SD times the mean force of the comparisons used, so a drive
all on one grade widens k's SD by what the correction could be wrong.

Both relations are linear in theta = (ln k_front, ln k_rear), so a two-state Kalman filter on theta is exact (no
linearisation); k = exp(theta) and SD(k) = k SD(theta) (with c's share above). The state drifts as a random walk
(tire wear, pressure and temperature) of ``drift_per_sqrt_hour`` (relative SD per sqrt(hour)).

omega_a is the mean of the axle's left and right |omega| (rad/s): the yaw-rate lever arm (v_wheel = u -/+ r y)
cancels between the two sides. v is the GNSS speed along the path (m/s, the norm of the ENU velocity, climb included),
compared with the wheel speeds *at its header stamp* (the measurement time): the message itself arrives
~0.1 s later, and at 1 m/s^2 that delay would be a 0.1 m/s (~1 %) error, so wheel speeds, net torques, IMU
yaw rate and a_x are kept in a short preallocated ring buffer. The gates read the row interpolated at the stamp;
omega_a is the value at the stamp of a straight line fitted to the axle's rows within ``speed_average`` / 2 of it
(0.1 s: ~10 rows at 100 Hz), which a wheel-speed encoder's quantisation cannot bias (a single coarse sample
would, through the log). The GNSS speed and the two axles' wheel speeds make one 2-vector measurement whose
errors are correlated through the common v: Cov = sigma_v^2 / v^2 [[1, 1], [1, 1]] + diag(var(omega_a) /
omega_a^2 + model_std^2), with sigma_v the receiver's reported per-axis SD (its covariance), var(omega_a) the
fitted value's variance (the larger of the stated per-wheel noise ``wheel_speed_std`` and the rows' pooled
scatter: :meth:`RollingRadiusEstimator._local_fit`) and model_std the relative model error of one comparison
(the free-rolling slip left by rolling resistance and noise in the torque gate). The driven/undriven ratio is
averaged over ``ratio_period`` blocks (one update per block; its variance likewise the larger of the stated
noise's and the blocks' pooled scatter; its forces (RR-1) from the block's mean torques and its rows' slopes).

Sign convention and units: omega rad/s, torque N m (drive positive), Fz N, speeds m/s, a_x m/s^2 (IMU),
yaw rate rad/s. The normal loads are the description's static loads (a production car does not measure Fz;
free rolling has no longitudinal load transfer to speak of). No rclpy, no per-sample numpy allocation.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from dataclasses import dataclass, field

from vehcal_ros.estimation.sensing.buffers import pooled
from vehcal_ros.records import Controls, GnssVelocity, ImuSample, WheelSpeeds

AXLES = ("front_axle", "rear_axle")
REJECT_REASONS = ("nonfinite", "low_speed", "torque", "no_torque", "yaw_rate", "steering", "accel", "no_imu",
                  "unsynced", "stale", "out_of_order")

# ring-buffer columns
_T, _WF, _WR, _TF, _TR, _YAW, _AX, _STEER = range(8)
_NCOL = 8


@dataclass(frozen=True)
class RollingRadiusConfig:
    """Settings of :class:`RollingRadiusEstimator` (SI units; index 0 = front axle, 1 = rear axle)."""

    # the vehicle's quantities have no defaults: from_description, or the slip's own law (grip pipeline)
    r0: float = field(kw_only=True)                    #: m, unloaded (or fixed effective) radius
    kt: tuple[float, float] = field(kw_only=True)      #: N/m, tire vertical stiffness (front, rear)
    radius_mode: str = field(kw_only=True)             #: "load" (R = r0 - Fz/kt) or "fixed" (R = r0)
    fz_static: tuple[float, float] = field(kw_only=True)  #: N per wheel, static normal load (front, rear)
    driven: tuple[bool, bool] = field(kw_only=True)    #: which axles carry drive torque
    steering_gain: float = field(kw_only=True)         #: rad road-wheel angle per unit steering input
    min_speed: float = 5.0        #: m/s; slower samples are rejected (wheel-speed resolution)
    max_mu: float = 0.02          #: |net axle torque| / (Fz_axle R) above this is not free rolling
    max_yaw_rate: float = 0.03    #: rad/s
    max_steer: float = 0.01       #: rad road-wheel angle
    max_ax: float = 0.3           #: m/s^2, |IMU a_x| above this is not steady
    require_torque: bool = True   #: without torque in the wheel-speed records, reject (False: gate on a_x only)
    wheel_speed_std: float = 0.05  #: rad/s, white noise of one wheel's speed
    gnss_std: float = 0.05        #: m/s per axis, used when a GNSS record reports no accuracy
    model_std: float = 3.0e-4     #: relative model error of one comparison (free-rolling slip, gate leakage)
    drift_per_sqrt_hour: float = 0.003  #: relative random-walk SD of k per sqrt(hour)
    prior_k: float = 1.0
    prior_std: float = 0.05       #: relative prior SD of k
    ratio_period: float = 0.1     #: s, block length of the driven/undriven ratio
    min_ratio_samples: int = 5    #: a ratio block with fewer gated samples is dropped
    buffer_seconds: float = 2.0   #: s of wheel-speed history (must exceed the GNSS latency)
    buffer_rate: float = 200.0    #: Hz, upper bound of the wheel-speed rate (sizes the ring buffer)
    sync_tolerance: float = 0.05  #: s, max gap of the wheel-speed samples bracketing a GNSS stamp
    speed_average: float = 0.1    #: s, a GNSS speed is compared with the wheel speeds' mean over this span (centred)
    rr_lever: float = 0.0         #: m, rolling-resistance lever: the free-rolling torque is rr_lever Fz per wheel
    wheel_inertia: tuple[float, float] = (0.0, 0.0)   #: kg m^2 per wheel (front, rear), spin inertia
    slip_compliance: float = 0.05  #: c = Fz / C_x, unit slip per unit Fx/Fz (Eq. RR-2)
    slip_compliance_std: float = 0.04  #: SD of c's doubt (a common error of all comparisons)

    def validate(self) -> None:
        """ValueError naming the field and its allowed range."""
        checks = [
            (0.1 <= self.r0 <= 3.0, f"r0 must be in [0.1, 3] m, got {self.r0}"),
            (len(self.kt) == 2 and all(1e3 <= k <= 1e9 for k in self.kt), f"kt must be 2 values in [1e3, 1e9] N/m, "
             f"got {self.kt}"),
            (self.radius_mode in ("load", "fixed"), f"radius_mode must be load or fixed, got {self.radius_mode!r}"),
            (len(self.fz_static) == 2 and all(0.0 < f < 1e6 for f in self.fz_static),
             f"fz_static must be 2 positive loads in N, got {self.fz_static}"),
            (len(self.driven) == 2 and any(self.driven), f"driven must flag (front, rear), one at least, got "
             f"{self.driven}"),
            (0.5 <= self.min_speed <= 50.0, f"min_speed must be in [0.5, 50] m/s, got {self.min_speed}"),
            (0.0 < self.max_mu <= 0.2, f"max_mu must be in (0, 0.2], got {self.max_mu}"),
            (self.wheel_speed_std >= 0.0 and self.gnss_std > 0.0 and self.model_std >= 0.0,
             "wheel_speed_std, model_std must be >= 0 and gnss_std > 0"),
            (self.drift_per_sqrt_hour >= 0.0, "drift_per_sqrt_hour must be >= 0"),
            (0.5 <= self.prior_k <= 2.0 and 0.0 < self.prior_std <= 0.5, "prior_k in [0.5, 2], prior_std in (0, 0.5]"),
            (0.0 < self.ratio_period <= 10.0, f"ratio_period must be in (0, 10] s, got {self.ratio_period}"),
            (0.2 <= self.buffer_seconds <= 60.0, f"buffer_seconds must be in [0.2, 60] s, got {self.buffer_seconds}"),
            (0.0 < self.sync_tolerance <= 1.0, f"sync_tolerance must be in (0, 1] s, got {self.sync_tolerance}"),
            (0.0 <= self.speed_average <= 1.0, f"speed_average must be in [0, 1] s, got {self.speed_average}"),
            (0.0 <= self.rr_lever < 0.1, f"rr_lever must be in [0, 0.1) m, got {self.rr_lever}"),
            (len(self.wheel_inertia) == 2 and all(0.0 <= j <= 1e4 for j in self.wheel_inertia),
             f"wheel_inertia must be 2 values in [0, 1e4] kg m^2, got {self.wheel_inertia}"),
            (0.0 <= self.slip_compliance <= 1.0, f"slip_compliance must be in [0, 1], got {self.slip_compliance}"),
            (0.0 < self.slip_compliance_std <= 1.0,
             f"slip_compliance_std must be in (0, 1], got {self.slip_compliance_std}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @classmethod
    def from_description(cls, desc, **overrides) -> RollingRadiusConfig:
        """The slip radius law (``VehicleDescription.slip_radius_law``), static loads, driven axles, steering
        ratio and the slip's force terms (:func:`slip_terms`) of a ``VehicleDescription``."""
        fz_f, fz_r = desc.static_wheel_loads()
        mode, r0, kt_f, kt_r = desc.slip_radius_law()
        kw = dict(r0=r0, kt=(kt_f, kt_r), radius_mode=mode, fz_static=(float(fz_f), float(fz_r)),
                  driven=desc.driven,
                  steering_gain=float(desc.steer_gain), **slip_terms(desc))
        kw.update(overrides)
        return cls(**kw)

    def radius_desc(self, axle: int, fz: float | None = None) -> float:
        """The description's rolling radius R_desc(Fz) of ``axle`` (m) at load ``fz`` (N; default static)."""
        if self.radius_mode == "fixed":
            return self.r0
        return self.r0 - (self.fz_static[axle] if fz is None else fz) / self.kt[axle]


def slip_terms(desc) -> dict[str, object]:
    """The description's terms of Eq. RR-1 and c's prior: ``rr_lever`` (its nominal ``rr``, m, the force
    estimator's lever), ``wheel_inertia`` (wheel.spin_inertia_*) and ``slip_compliance``, the mean over the axles of
    the static wheel load over the nominal longitudinal slip stiffness (Cxf, Cxr; N per unit slip)."""
    nominal = dict(getattr(desc, "nominal", {}) or {})
    loads = desc.static_wheel_loads()
    stiff = [float(nominal.get(n, 0.0)) for n in ("Cxf", "Cxr")]
    kw: dict[str, object] = {"rr_lever": float(nominal.get("rr", 0.0)),
                             "wheel_inertia": (float(desc.Jw_f), float(desc.Jw_r))}
    if all(c > 0.0 for c in stiff):
        kw["slip_compliance"] = 0.5 * sum(float(f) / c for f, c in zip(loads, stiff))
    return kw


@dataclass
class RollingRadiusState:
    """What the estimator knows: per axle (front, rear) the scale k, its SD, and the sample counters."""

    t: float                                  #: s, stamp of the last update (nan before any)
    k: tuple[float, float]                    #: R_eff / R_desc(Fz)
    sd: tuple[float, float]                   #: SD of k (delta method: k SD(ln k))
    corr: float                               #: correlation of ln k_front and ln k_rear
    force: tuple[float, float] = (math.nan, math.nan)   #: mean Fx/Fz (Eq. RR-1) of the comparisons used per axle
    used: dict[str, int] = field(default_factory=dict)      #: "gnss" comparisons, "ratio" blocks used
    rejected: dict[str, int] = field(default_factory=dict)  #: rejected comparisons / ratio samples by reason


class RollingRadiusEstimator:
    """Online per-axle rolling-radius scale from free rolling (module docstring).

    Feed it records in arrival order with :meth:`add` (WheelSpeeds, ImuSample, Controls, GnssVelocity; others are
    ignored); read :meth:`state`, :attr:`k`, :meth:`radius`. GNSS records may arrive late (latency) or early: a
    record whose stamp the wheel-speed history does not yet reach waits (up to 32 of them).
    """

    def __init__(self, config: RollingRadiusConfig) -> None:
        self.config = c = config
        c.validate()
        self._cap = int(math.ceil(c.buffer_seconds * c.buffer_rate)) + 2
        self._buf = array("d", bytes(8 * self._cap * _NCOL))   # ring of wheel rows (flat, C doubles), preallocated
        self._head = 0                             # index of the oldest row
        self._n = 0
        self._row = [0.0] * _NCOL                  # interpolation result, reused
        self._rdesc = (c.radius_desc(0), c.radius_desc(1))
        self._fzr = (2.0 * c.fz_static[0] * self._rdesc[0], 2.0 * c.fz_static[1] * self._rdesc[1])  # N m per axle
        self._mu_rr = (c.rr_lever / self._rdesc[0], c.rr_lever / self._rdesc[1])   # Eq. RR-1's rolling resistance
        self._jw2 = (2.0 * c.wheel_inertia[0], 2.0 * c.wheel_inertia[1])             # kg m^2 per axle
        self._yaw = math.nan
        self._ax = math.nan
        self._steer = 0.0
        self._pending: deque[GnssVelocity] = deque(maxlen=32)
        self._scatter = [math.nan, math.nan]       # pooled per-row spin-rate scatter per axle, (rad/s)^2
        self._scatter_n = 0
        self._ratio_scatter = math.nan             # pooled per-sample scatter of the ratio blocks' log ratios
        self._ratio_n = 0
        # Kalman state in ln k: theta (front, rear), covariance [[pff, pfr], [pfr, prr]]
        th0 = math.log(c.prior_k)
        self._th = [th0, th0]
        v0 = (c.prior_std / c.prior_k) ** 2
        self._p = [v0, 0.0, v0]
        self._force_sum = [0.0, 0.0]               # per axle: the forces (Eq. RR-1) of the comparisons used, summed
        self._force_n = [0, 0]
        self._q = c.drift_per_sqrt_hour ** 2 / 3600.0   # (ln k)^2 per s
        self._t_pred = math.nan
        self._t_last = math.nan
        # driven/undriven ratio block
        self._undriven = next((a for a in (0, 1) if not c.driven[a]), None)
        self._block_key = -math.inf
        self._bn = 0
        self._bsum = 0.0
        self._bsq = 0.0
        self._bvar = 0.0
        self._bt = math.nan
        self._bmom = [0.0] * 8   # the block's sums: dt, dt^2, omega_d, omega_u, dt omega_d, dt omega_u, T_d, T_u
        self.used = {"gnss": 0, "ratio": 0}
        self.restarts = 0
        self.rejected = dict.fromkeys(REJECT_REASONS, 0)

    # ------------------------------------------------------------------------------------------------- input
    def add(self, rec: object) -> None:
        """Dispatch one record; unknown record types are ignored."""
        if isinstance(rec, WheelSpeeds):
            self.add_wheel_speeds(rec)
        elif isinstance(rec, GnssVelocity):
            self.add_gnss(rec)
        elif isinstance(rec, ImuSample):
            self.add_imu(rec)
        elif isinstance(rec, Controls):
            self.add_controls(rec)

    def add_imu(self, rec: ImuSample) -> None:
        """Yaw rate (rad/s) and longitudinal acceleration (m/s^2), held until the next wheel-speed row."""
        if math.isfinite(rec.yaw_rate) and math.isfinite(rec.ax):
            self._yaw, self._ax = rec.yaw_rate, rec.ax

    def add_controls(self, rec: Controls) -> None:
        """Steering input -> road-wheel angle (rad), held until the next wheel-speed row."""
        if math.isfinite(rec.steering):
            self._steer = rec.steering * self.config.steering_gain

    def add_wheel_speeds(self, rec: WheelSpeeds) -> None:
        """Append one row to the ring buffer, then serve waiting GNSS records and the ratio block."""
        w = rec.omega
        wf = 0.5 * (abs(w[0]) + abs(w[1]))
        wr = 0.5 * (abs(w[2]) + abs(w[3]))
        tq = rec.torque
        tf, tr = (tq[0] + tq[1], tq[2] + tq[3]) if tq is not None else (math.nan, math.nan)
        t = rec.t
        if not (math.isfinite(t) and math.isfinite(wf) and math.isfinite(wr)):
            self.rejected["nonfinite"] += 1
            return
        buf = self._buf
        if self._n and t <= buf[self._newest() + _T]:
            if t < buf[self._newest() + _T] - self.config.buffer_seconds:
                self.restart()   # the clock went back (a new bag, a restarted simulation): new history
            else:
                self.rejected["out_of_order"] += 1
                return
        if self._n == self._cap:
            self._head = (self._head + 1) % self._cap
            self._n -= 1
        o = ((self._head + self._n) % self._cap) * _NCOL
        buf[o + _T], buf[o + _WF], buf[o + _WR], buf[o + _TF], buf[o + _TR] = t, wf, wr, tf, tr
        buf[o + _YAW], buf[o + _AX], buf[o + _STEER] = self._yaw, self._ax, self._steer
        self._n += 1
        if self._undriven is not None:
            self._ratio_sample(t, wf, wr, o)
        h = 0.5 * self.config.speed_average
        while self._pending and self._pending[0].t + h <= t:
            self._gnss_now(self._pending.popleft())

    def add_gnss(self, rec: GnssVelocity) -> None:
        """A GNSS velocity: compared with the wheel speeds around its header stamp (now, or once the wheel speeds
        reach half ``speed_average`` past it)."""
        if not (math.isfinite(rec.t) and math.isfinite(rec.ve) and math.isfinite(rec.vn)):
            self.rejected["nonfinite"] += 1
            return
        if self._n and rec.t + 0.5 * self.config.speed_average <= self._buf[self._newest() + _T]:
            self._gnss_now(rec)
        else:
            if len(self._pending) == self._pending.maxlen:
                self.rejected["unsynced"] += 1
            self._pending.append(rec)

    # ------------------------------------------------------------------------------------------- processing
    def _newest(self) -> int:
        """Offset of the newest row in the flat ring."""
        return ((self._head + self._n - 1) % self._cap) * _NCOL

    def _interp(self, t: float) -> list[float] | None:
        """The wheel row at ``t``, linearly interpolated into ``self._row``; None when not bracketed."""
        buf, cap, head, n = self._buf, self._cap, self._head, self._n
        if n == 0 or t < buf[head * _NCOL + _T]:
            return None
        lo, hi = 0, n - 1   # bisect over ring positions: largest i with t_i <= t
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if buf[((head + mid) % cap) * _NCOL + _T] <= t:
                lo = mid
            else:
                hi = mid - 1
        a = ((head + lo) % cap) * _NCOL
        out = self._row
        ta = buf[a + _T]
        if lo == n - 1 or ta == t:
            if t - ta > self.config.sync_tolerance:
                return None
            for c in range(_NCOL):
                out[c] = buf[a + c]
            return out
        b = ((head + lo + 1) % cap) * _NCOL
        tb = buf[b + _T]
        if tb - ta > self.config.sync_tolerance:
            return None
        f = (t - ta) / (tb - ta)
        for c in range(_NCOL):
            out[c] = buf[a + c] + f * (buf[b + c] - buf[a + c])
        return out

    def _local_fit(self, t: float) -> tuple[float, float, float, float, float, float, float, float] | None:
        """The axle spin rates at ``t`` from a straight line fitted to the wheel rows within half
        ``speed_average`` of it, the variances of those values, the lines' slopes and the rows' mean net axle
        torques (rad/s, (rad/s)^2, rad/s^2, N m; front then rear each); None with fewer than 3 rows there.

        The variance is the larger of the stated noise's (``wheel_speed_std`` per wheel) and the rows' scatter
        about their lines, pooled over the comparisons (:func:`~vehcal_ros.estimation.sensing.buffers.pooled`: one
        window's scatter, 7 degrees of freedom at 100 Hz, would weight the comparisons by its own error), each
        through the fit's intercept variance. A coarse encoder (a few teeth per sampling period) reports speeds a
        whole tooth apart, far noisier per sample than any stated white noise; its errors telescope over
        consecutive counting windows, so the fitted value is ~sqrt(n) x better than the scatter implies and the
        variance taken is conservative. Plain loops over the ~10 rows; no allocation."""
        h = 0.5 * self.config.speed_average
        buf, cap, head, n = self._buf, self._cap, self._head, self._n
        if n == 0 or t - h < buf[head * _NCOL + _T]:
            return None
        lo, hi = 0, n - 1   # bisect: largest ring position with t_i <= t + h
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if buf[((head + mid) % cap) * _NCOL + _T] <= t + h:
                lo = mid
            else:
                hi = mid - 1
        m = st = stt = sf = sr = sff = srr = stf = st_r = tq_f = tq_r = 0.0
        i = lo
        while i >= 0:
            o = ((head + i) % cap) * _NCOL
            dt = buf[o + _T] - t
            if dt < -h:
                break
            wf, wr = buf[o + _WF], buf[o + _WR]
            m += 1.0
            st += dt
            stt += dt * dt
            sf += wf
            sr += wr
            sff += wf * wf
            srr += wr * wr
            stf += dt * wf
            st_r += dt * wr
            tq_f += buf[o + _TF]
            tq_r += buf[o + _TR]
            i -= 1
        if m < 3.0:
            return None
        dtt = stt - st * st / m        # sum of squared centred times
        if dtt <= 0.0:
            return None
        x0 = -st / m                    # the stamp's offset from the rows' mean time
        c_int = 1.0 / m + x0 * x0 / dtt  # intercept variance per unit row variance
        stated = 0.5 * self.config.wheel_speed_std ** 2   # per row: the mean of two wheels
        self._scatter_n += 1
        wf, var_f, slope_f = self._line_at(0, m, st, dtt, x0, sf, sff, stf)
        wr, var_r, slope_r = self._line_at(1, m, st, dtt, x0, sr, srr, st_r)
        return wf, wr, max(stated, var_f) * c_int, max(stated, var_r) * c_int, slope_f, slope_r, tq_f / m, tq_r / m

    def _line_at(self, axle: int, m: float, st: float, dtt: float, x0: float, s_w: float, s_ww: float,
                 s_tw: float) -> tuple[float, float, float]:
        """(value at the stamp, pooled row scatter, slope) of one axle's line: the sums of its ``m`` rows' spin rates
        ``s_w``, their squares ``s_ww`` and their products with the time offsets ``s_tw``; the scatter about the
        line joins the axle's pool (:func:`~vehcal_ros.estimation.sensing.buffers.pooled`)."""
        mean = s_w / m
        slope = (s_tw - st * mean) / dtt
        resid = max(s_ww - m * mean * mean - slope * slope * dtt, 0.0) / (m - 2.0)
        self._scatter[axle] = pooled(self._scatter[axle], resid, self._scatter_n)
        return mean + slope * x0, self._scatter[axle], slope

    def _count_force(self, axle: int, mu: float) -> None:
        """Add a used comparison's force (Eq. RR-1) to the axle's mean (what c's doubt in :attr:`sd` scales)."""
        self._force_sum[axle] += mu
        self._force_n[axle] += 1

    def _force(self, axle: int, torque: float, spin_rate: float) -> float:
        """Eq. RR-1: the axle's net longitudinal force per load from its net torque (N m; nan: unknown, 0 taken)
        and its wheels' spin acceleration (rad/s^2)."""
        if not math.isfinite(torque):
            return 0.0
        return (torque - self._jw2[axle] * spin_rate) / self._fzr[axle] - self._mu_rr[axle]

    def _gate(self, row, o: int, axles: tuple[int, ...]) -> str | None:
        """Free-rolling gates on the row at offset ``o`` of ``row`` (the ring, or an interpolated row) for
        ``axles``; the first failing reason, or None."""
        c = self.config
        yaw, ax = row[o + _YAW], row[o + _AX]
        if not (math.isfinite(yaw) and math.isfinite(ax)):
            return "no_imu"
        if abs(yaw) > c.max_yaw_rate:
            return "yaw_rate"
        if abs(row[o + _STEER]) > c.max_steer:
            return "steering"
        if abs(ax) > c.max_ax:
            return "accel"
        for a in axles:
            if row[o + _WF + a] * self._rdesc[a] < c.min_speed:
                return "low_speed"
            tq = row[o + _TF + a]
            if not math.isfinite(tq):
                if c.require_torque:
                    return "no_torque"
            elif abs(tq) > c.max_mu * self._fzr[a]:
                return "torque"
        return None

    def _predict(self, t: float) -> None:
        """Random-walk drift of ln k from the last update to ``t``."""
        if math.isfinite(self._t_pred) and t > self._t_pred:
            dq = self._q * (t - self._t_pred)
            self._p[0] += dq
            self._p[2] += dq
        if not math.isfinite(self._t_pred) or t > self._t_pred:
            self._t_pred = t
        self._t_last = t

    def _gnss_now(self, rec: GnssVelocity) -> None:
        c = self.config
        row = self._interp(rec.t)
        if row is None:
            older = self._n and rec.t < self._buf[self._head * _NCOL + _T]
            self.rejected["stale" if older else "unsynced"] += 1
            return
        speed = rec.speed
        if speed < c.min_speed:
            self.rejected["low_speed"] += 1
            return
        ok = []
        reason = None
        for a in (0, 1):
            reason_a = self._gate(row, 0, (a,))
            if reason_a is None:
                ok.append(a)
            else:
                reason = reason or reason_a
        if not ok:
            self.rejected[reason] += 1
            return
        sv = rec.std if rec.std > 0.0 else c.gnss_std
        var_v = (sv / speed) ** 2
        ln_v = math.log(speed)
        fit = self._local_fit(rec.t) if c.speed_average > 0.0 else None
        if fit is None:   # the interpolated row, at the stated noise, without the wheels' spin acceleration
            w = (row[_WF], row[_WR])
            var_spin = (0.5 * c.wheel_speed_std ** 2, 0.5 * c.wheel_speed_std ** 2)
            slope, (tf, tr) = (0.0, 0.0), (row[_TF], row[_TR])
        else:
            w, var_spin, slope, (tf, tr) = (fit[0], fit[1]), (fit[2], fit[3]), (fit[4], fit[5]), (fit[6], fit[7])
        if w[0] <= 0.0 or w[1] <= 0.0:
            self.rejected["low_speed"] += 1
            return
        mu = (self._force(0, tf, slope[0]), self._force(1, tr, slope[1]))
        z = [ln_v - math.log(w[a] * self._rdesc[a]) + c.slip_compliance * mu[a] for a in (0, 1)]   # Eq. RR-2
        var_w = [var_spin[a] / (w[a] * w[a]) + c.model_std ** 2 for a in (0, 1)]
        self._predict(rec.t)
        if len(ok) == 2:
            self._update2(z, var_v, var_w)
        else:
            a = ok[0]
            self._update1((1.0, 0.0) if a == 0 else (0.0, 1.0), z[a], var_v + var_w[a])
        for a in ok:
            self._count_force(a, mu[a])
        self.used["gnss"] += 1

    def _update2(self, z: list[float], var_v: float, var_w: list[float]) -> None:
        """Joint update with H = I and the correlated covariance of the module docstring."""
        pff, pfr, prr = self._p
        s00, s01, s11 = pff + var_v + var_w[0], pfr + var_v, prr + var_v + var_w[1]
        det = s00 * s11 - s01 * s01
        i00, i01, i11 = s11 / det, -s01 / det, s00 / det
        # K = P S^-1
        k00 = pff * i00 + pfr * i01
        k01 = pff * i01 + pfr * i11
        k10 = pfr * i00 + prr * i01
        k11 = pfr * i01 + prr * i11
        e0, e1 = z[0] - self._th[0], z[1] - self._th[1]
        self._th[0] += k00 * e0 + k01 * e1
        self._th[1] += k10 * e0 + k11 * e1
        # P <- (I - K) P
        self._p = [pff - (k00 * pff + k01 * pfr), pfr - (k00 * pfr + k01 * prr), prr - (k10 * pfr + k11 * prr)]

    def _update1(self, h: tuple[float, float], z: float, r: float) -> None:
        """Scalar update of the measurement z = h . theta + noise (variance r)."""
        pff, pfr, prr = self._p
        ph0 = pff * h[0] + pfr * h[1]
        ph1 = pfr * h[0] + prr * h[1]
        s = h[0] * ph0 + h[1] * ph1 + r
        k0, k1 = ph0 / s, ph1 / s
        e = z - (h[0] * self._th[0] + h[1] * self._th[1])
        self._th[0] += k0 * e
        self._th[1] += k1 * e
        self._p = [pff - k0 * ph0, pfr - k0 * ph1, prr - k1 * ph1]

    def _ratio_sample(self, t: float, wf: float, wr: float, o: int) -> None:
        """One gated driven/undriven comparison into the current block; a finished block becomes an update."""
        c = self.config
        key = math.floor(t / c.ratio_period)
        if key != self._block_key:
            self._close_block()
            self._block_key = key
        reason = self._gate(self._buf, o, (0, 1))
        if reason is not None:
            self.rejected[reason] += 1
            return
        u = self._undriven
        d = 1 - u
        wu, wd = (wf, wr) if u == 0 else (wr, wf)
        z = math.log(wd * self._rdesc[d]) - math.log(wu * self._rdesc[u])   # = ln k_u - ln k_d + c (mu_d - mu_u)
        self._bsum += z
        self._bsq += z * z
        self._bvar += 0.5 * c.wheel_speed_std ** 2 * (1.0 / (wd * wd) + 1.0 / (wu * wu))
        self._bn += 1
        self._bt = t
        x = t - key * c.ratio_period
        mom = self._bmom
        mom[0] += x
        mom[1] += x * x
        mom[2] += wd
        mom[3] += wu
        mom[4] += x * wd
        mom[5] += x * wu
        mom[6] += self._buf[o + _TF + d]
        mom[7] += self._buf[o + _TF + u]

    def _close_block(self) -> None:
        c = self.config
        n = self._bn
        if n >= c.min_ratio_samples:
            u = self._undriven
            h = (-1.0, 1.0) if u == 1 else (1.0, -1.0)
            mean = self._bsum / n
            scatter = max(self._bsq - n * mean * mean, 0.0) / (n - 1)   # this block's, pooled as in _local_fit
            self._ratio_n += 1
            self._ratio_scatter = pooled(self._ratio_scatter, scatter, self._ratio_n)
            mom = self._bmom
            sxx = mom[1] - mom[0] * mom[0] / n
            slope_d = (mom[4] - mom[0] * mom[2] / n) / sxx if sxx > 0.0 else 0.0
            slope_u = (mom[5] - mom[0] * mom[3] / n) / sxx if sxx > 0.0 else 0.0
            mu_d, mu_u = self._force(1 - u, mom[6] / n, slope_d), self._force(u, mom[7] / n, slope_u)
            self._predict(self._bt)
            self._update1(h, mean - c.slip_compliance * (mu_d - mu_u),   # Eq. RR-2
                          max(self._bvar / n, self._ratio_scatter) / n + c.model_std ** 2)
            self._count_force(1 - u, mu_d)
            self._count_force(u, mu_u)
            self.used["ratio"] += 1
        self._bn, self._bsum, self._bsq, self._bvar = 0, 0.0, 0.0, 0.0
        self._bmom[:] = (0.0,) * 8

    def restart(self) -> None:
        """Forget the signal history (ring buffer, held IMU/steering, waiting GNSS, the open ratio block) and keep
        what was learnt (k and its covariance): for a clock that jumped back."""
        self._head = self._n = 0
        self._yaw = self._ax = math.nan
        self._steer = 0.0
        self._pending.clear()
        self._block_key = -math.inf
        self._bn, self._bsum, self._bsq, self._bvar = 0, 0.0, 0.0, 0.0
        self._bmom[:] = (0.0,) * 8
        self._t_pred = math.nan
        self.restarts += 1

    def flush(self) -> None:
        """Close the open ratio block (end of a bag)."""
        if self._undriven is not None:
            self._close_block()

    # ------------------------------------------------------------------------------------------------ output
    @property
    def k(self) -> tuple[float, float]:
        """Scale of the effective rolling radius per axle (front, rear): R_eff = k R_desc(Fz)."""
        return math.exp(self._th[0]), math.exp(self._th[1])

    @property
    def sd(self) -> tuple[float, float]:
        """SD of k per axle (front, rear)."""
        kf, kr = self.k
        return kf * math.sqrt(self._p[0] + self._doubt(0)), kr * math.sqrt(self._p[2] + self._doubt(1))

    def _doubt(self, axle: int) -> float:
        """(ln k)^2: c's doubt times the mean force of the axle's comparisons, squared (module docstring)."""
        n = self._force_n[axle]
        return (self.config.slip_compliance_std * self._force_sum[axle] / n) ** 2 if n else 0.0

    def radius(self, wheel: int, fz: float | None = None) -> float:
        """Effective rolling radius of ``wheel`` (0..3, FL FR RL RR) at load ``fz`` (N; default static), m."""
        a = 0 if wheel < 2 else 1
        return self.k[a] * self.config.radius_desc(a, fz)

    def wheel_speed_scatter(self) -> float:
        """rad/s, the per-wheel noise of one wheel-speed sample the free-rolling comparisons show: the larger axle's
        pooled scatter of its rows (two wheels' mean) about their local lines, times sqrt(2); 0 before any."""
        pooled = max((s for s in self._scatter if not math.isnan(s)), default=0.0)
        return math.sqrt(2.0 * pooled)

    def state(self) -> RollingRadiusState:
        """A snapshot (copies of the counters)."""
        pff, pfr, prr = self._p
        return RollingRadiusState(t=self._t_last, k=self.k, sd=self.sd, corr=pfr / math.sqrt(pff * prr),
                                  force=tuple(s / n if n else math.nan for s, n in zip(self._force_sum, self._force_n)),
                                  used=dict(self.used), rejected={k: v for k, v in self.rejected.items() if v})
