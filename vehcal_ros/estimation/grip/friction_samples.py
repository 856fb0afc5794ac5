"""From vehicle signals to friction samples (s, mu) per scope (docs/grip.md).

For each tire-force sample of wheel i at header time t, the wheel speed omega_i and the odometry (u, v, r) are
interpolated at t; the wheel-centre longitudinal speed is the body velocity at the wheel position
(yaw-rate lever arm) rotated into the wheel heading (steering angle at the front)::

    vx_i = u - r * y_i,   vy_i = v + r * x_i,   v_i = vx_i cos(delta_i) + vy_i sin(delta_i)

the slip ratio is Eq. (3) of the friction paper, s = (omega R - v) / max(omega R, v), with the rolling radius R
either fixed or load dependent (R = r0 - Fz / kt; from a vehicle description, its effective rolling radius,
VehicleDescription.slip_radius_law), and the friction is Eq. (1), mu = Fx/Fz.

Toe and slip angle (e.g. the published sedan). The wheel heading delta_i also carries the wheel's toe from
the vehicle description (``suspension.toe_in_front/rear``: static toe and bump steer over wheel travel; toe-in
turns a left wheel right): delta_i = delta - side_i toe_i(z). The front wheel travel z is taken from the IMU:
z = L (pitch + grade - pitch_at_rest) + travel_per_ax a_x (the body's pitch over the wheelbase, plus the rear
suspension's and the tires' deflection under the longitudinal load transfer; the rear's travel is taken as 0).
The IMU's pitch holds the road's grade as well as the body's pitch on its suspension: on a 5 % grade it would read
as 0.16 m of front travel on a 3.3 m wheelbase, a toe from the far end of the bump-steer table. The grade is
taken out once it is known to GRADE_MAX_SD: read from the IMU's pitch while the vehicle stands (pitch_at_rest -
pitch), then followed with the GNSS climb angle atan(v_up / v_horizontal) in a scalar Kalman filter, a random walk
of GRADE_WALK (0 without either: a receiver that reports no vertical velocity and a drive that starts moving).
With ``combined_slip = "ellipse"`` each sample also carries its slip angle alpha_i = atan(v_y / v_x) in the
wheel's heading, as ``lat`` = |sin alpha| / lateral_ratio (block-averaged signed per wheel, then its modulus):
the grip fit then models the sample's friction as the friction ellipse's longitudinal share of the pure-slip
curve (models/pacejka.py ``combined``). On Chrono's sedan (toe-in 0.5-4 deg while driving) these angles match
the simulator's true slip angles to ~0.05 deg (test/unit/models/test_combined_slip.py).
With ``combined_slip = "mf"`` (a tire with MF2002 combined-slip coefficients, the HMMWV's Pac02) the friction
of each raw sample is divided by the tire's longitudinal weighting at its slip angle and slip ratio,
G_xa = cos(C_xa atan(B_xa (alpha + S_Hxa) - E_xa (...))) / cos(C_xa atan(B_xa S_Hxa - E_xa (...))),
B_xa = r_Bx1 / sqrt(1 + (r_Bx2 kappa)^2) (Pacejka, Tire and Vehicle Dynamics, 3rd ed., Eqs. 4.E50-E57 with
r_Bx3 = 0; :func:`combined_weight`), and its variance by G_xa^2: the weighting does not depend on the road, so the
sample becomes a pure-slip sample and the fit's model is the paper's. The HMMWV's static toe (1.06 deg front)
alone makes G_xa = 0.975: without it every front sample sits 2.5 % below the pure-slip curve, and where the
data reach the peak (snow) the intervals were narrow and low (0.290 [0.286, 0.295] vs 0.299).

Samples are gated (finite values, speed, normal load, steering / lateral usage, |s| range) and counted by
reason. The gated samples of each wheel are then averaged over blocks of ``average_window`` seconds (one friction
sample per wheel and block). At everyday excitation the slip is a few 1e-3 while wheel-speed and odometry noise
give a per-sample slip noise of ~3e-3: regressing mu on so noisy a slip flattens the apparent curve
(errors-in-variables) and biases mu_max low. A 0.1 s block of 100 Hz samples cuts that noise ~3x while the
slip of ordinary driving changes over seconds. Braking samples are those whose *force* is negative (mu < 0):
the sign of mu is known far better than the sign of a slip near zero. They are mirrored to (-s, -mu), kept in a
separate ``*_braking`` scope, or dropped; a mirrored or traction sample may keep a small negative slip (noise
around zero), which the fit keeps as it is.
Estimated tire forces (``force_source: estimated``, estimation/sensing/tire_forces.py) carry variances; each
friction sample gets ``mu_var`` by the delta method, Var(mu) = (Var(Fx) + mu^2 Var(Fz)) / Fz^2, and a block
average the variance of its mean: the Fx part through the filter's lag-one error correlation
(:func:`~vehcal_ros.estimation.sensing.tire_forces.block_variance_factor`), the Fz part (constants, slowly
varying) as fully correlated. Transducer samples have ``mu_var`` 0.
The speed reference (u, v, r) is the odometry's twist, the GNSS/IMU filter's estimate
(estimation/sensing/speed_reference.py) or, with ``speed_reference = "undriven_wheels"``, the free-rolling speed of the
undriven axle (:func:`~vehcal_ros.estimation.sensing.speed_reference.undriven_axle_speed`) at each wheel-speed stamp:
its wheels' rolling radius by the same law as the driven wheels' (at their newest normal load), their heading
with steering and toe, the IMU's yaw rate and v = r l_r: the driven wheels' slips take it. It is not formed while
the driver brakes (brake above :data:`REFERENCE_BRAKE`: the undriven wheels slip too). The undriven wheels' own
slips take the GNSS/IMU reference where the car has GNSS (alive within :data:`GNSS_STALE`); without it they have
no slip to fit (zero by construction; counted as ``reference_wheel``) and their friction goes to the floor
beliefs only, like the samples the radius gate holds back.
Tire-force samples wait in a short queue until wheel speed and odometry bracket their stamp, so topics may
arrive in any order; a sample that cannot be bracketed within ``sync_tolerance`` is dropped as unsynced.
Nothing here imports rclpy: nodes and bag replay feed the same :class:`GripDataCollector`.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vehcal_ros.estimation.sensing.buffers import RollingBuffer, pooled
from vehcal_ros.estimation.sensing.speed_reference import (
    SPEED_REFERENCES,
    GnssImuSpeed,
    ReferenceSpeed,
    SpeedReferenceConfig,
    undriven_axle_speed,
)
from vehcal_ros.estimation.sensing.tire_forces import block_variance_factor
from vehcal_ros.records import (
    WHEELS,
    Controls,
    GnssVelocity,
    ImuSample,
    OdomSample,
    TireForce,
    WheelSpeeds,
)
from vehcal_ros.vehicle.description import VehicleDescription, load_description

SCOPE_MODES = ("axle", "wheel", "vehicle")
BRAKING_MODES = ("mirror", "separate", "drop", "keep")
RADIUS_MODES = ("fixed", "load")
SLIP_GEOMETRY = ("wheel_x", "wheel_y", "driven", "steering_gain", "radius_mode", "r0", "kt", "kt_rear")
"""The :class:`GripSignalConfig` fields that are vehicle facts: no defaults, from the vehicle description."""


def slip_geometry(vehicle: VehicleDescription) -> dict[str, Any]:
    """The slip geometry (:data:`SLIP_GEOMETRY`) of the vehicle description ``vehicle``: wheel positions from the
    CM (``cg``, ``track``), the driven axles, the steering gain and the effective rolling radius of the slips
    (:meth:`~vehcal_ros.vehicle.description.VehicleDescription.slip_radius_law`: ``tire.rolling_radius`` when
    given, load-independent; else the description's ``r0 - Fz/kt`` at the static loads, falling by a third of the
    deflection as the load changes)."""
    v = vehicle
    mode, r0_slip, kt_f, kt_r = v.slip_radius_law()
    return {"wheel_x": (v.a, v.a, -v.b, -v.b), "wheel_y": (v.cf / 2, -v.cf / 2, v.cr / 2, -v.cr / 2),
            "driven": v.driven, "steering_gain": float(v.steer_gain),
            "radius_mode": mode, "r0": r0_slip, "kt": kt_f, "kt_rear": kt_r}


@dataclass(frozen=True)
class GripSignalConfig:
    """How signals become friction samples. Lengths in m, speeds in m/s, forces in N, times in s."""

    scope: str = "axle"                  #: "axle" (front_axle, rear_axle), "wheel" (one per wheel) or "vehicle"
    wheel_names: tuple[str, ...] = WHEELS
    steered: tuple[bool, ...] = (True, True, False, False)
    # the slip geometry (SLIP_GEOMETRY): vehicle facts with no defaults, from the vehicle description
    # (from_description; estimation/grip/pipeline.py's vehicle_geometry with the node's overrides)
    wheel_x: tuple[float, ...] = field(kw_only=True)     #: longitudinal wheel positions from the CM
    wheel_y: tuple[float, ...] = field(kw_only=True)     #: lateral wheel positions (left positive)
    driven: tuple[bool, bool] = field(kw_only=True)      #: (front, rear) axle driven (the description's driveline)
    steering_gain: float = field(kw_only=True)           #: rad of road-wheel angle per unit steering input
    radius_mode: str = field(kw_only=True)               #: "fixed" (R = r0) or "load" (R = r0 - Fz / kt)
    r0: float = field(kw_only=True)                      #: unloaded (or fixed effective) rolling radius
    kt: float = field(kw_only=True)                      #: tire vertical stiffness, N/m (front wheels)
    kt_rear: float = field(kw_only=True)                 #: tire vertical stiffness of the rear wheels, N/m (0 = kt)
    min_speed: float = 3.0                #: slower samples are dropped (slip is ill-defined near standstill)
    min_fz: float = 500.0                 #: lighter-loaded samples are dropped (mu = Fx/Fz blows up)
    max_abs_slip: float = 0.3
    max_steer: float = 0.05               #: rad road-wheel angle; larger -> combined slip, dropped
    max_lateral_mu: float = 0.15          #: |Fy/Fz| above this -> combined slip, dropped
    #: rad: a sample fitted as pure slip (``combined_slip`` "none") whose kinematic slip angle (the wheel's heading
    #: with steering and toe against its velocity) is larger is combined slip, dropped. The per-wheel lateral
    #: force is not known with estimated forces (the toe's lateral forces cancel in the lateral acceleration), so
    #: this is the gate that sees a toe-in wheel. At 1.5 deg the MF2002 weighting G_xa of the HMMWV's Pac02 (r_Bx1
    #: 11.1, r_Cx1 0.975) is 0.96: the pure-slip fit of such samples reads the peak at most ~4 % low.
    max_slip_angle: float = 0.026
    braking: str = "keep"                 #: "keep", "mirror", "separate" or "drop" samples with Fx < 0
    sync_tolerance: float = 0.05          #: max distance from a wheel-speed / odometry sample to interpolate
    window: float = 30.0                  #: friction samples older than this (vs the newest) are forgotten
    capacity: int = 4000                  #: size bound of each scope's sample buffer
    max_gap: float = 5.0                  #: a jump in stamps larger than this restarts the buffers
    average_window: float = 0.1           #: s, per-wheel block averaging of the friction samples (0 = none)
    toe_front: tuple[tuple[float, float], ...] = ((0.0, 0.0),)  #: (wheel travel m, toe-in rad) rows, front
    toe_rear: tuple[tuple[float, float], ...] = ((0.0, 0.0),)   #: the same, rear (travel taken as 0)
    pitch_at_rest: float = 0.0            #: rad, IMU pitch standing on a level floor (front travel reference)
    travel_per_ax: float = 0.0            #: m per m/s^2: front travel beyond L (pitch - pitch_at_rest) per a_x
    combined_slip: str = "none"           #: "none", "ellipse" (samples carry |sin alpha| / lateral_ratio) or "mf"
    combined_coefficients: tuple[float, ...] = ()  #: "mf": (r_Bx1, r_Bx2, r_Cx1, r_Ex1, r_Hx1) of the tire
    lateral_ratio: float = 1.0            #: the tire's lateral / longitudinal friction peak
    speed_reference: str = "odometry"     #: "odometry" (its twist), "gnss_imu" or "undriven_wheels" (speed_reference)
    accel_std: float = 0.05               #: m/s^2, IMU a_x white noise (the gnss_imu speed filter)

    @classmethod
    def from_description(cls, vehicle: str | VehicleDescription | None = None, **settings: Any) -> GripSignalConfig:
        """The settings ``settings`` (the defaults for the rest) with the slip geometry of the vehicle description
        ``vehicle`` (a name, a file or a description; None: the package's default vehicle)."""
        return cls(**slip_geometry(load_description(vehicle)), **settings)

    def validate(self) -> None:
        """Raise ValueError naming the field and its allowed range."""
        n = len(self.wheel_names)
        checks = [
            (self.scope in SCOPE_MODES, f"scope must be one of {SCOPE_MODES}, got {self.scope!r}"),
            (self.braking in BRAKING_MODES, f"braking must be one of {BRAKING_MODES}, got {self.braking!r}"),
            (self.radius_mode in RADIUS_MODES, f"radius_mode must be one of {RADIUS_MODES}"),
            (n == 4, f"wheel_names must name 4 wheels (FL, FR, RL, RR), got {n}"),
            (len(self.wheel_x) == n and len(self.wheel_y) == n and len(self.steered) == n,
             "wheel_x, wheel_y and steered must have one entry per wheel"),
            (0.1 <= self.r0 <= 2.0, f"r0 must be in [0.1, 2.0] m, got {self.r0}"),
            (1e4 <= self.kt <= 1e7, f"kt must be in [1e4, 1e7] N/m, got {self.kt}"),
            (0.0 < self.max_slip_angle <= 1.0, f"max_slip_angle must be in (0, 1] rad, got {self.max_slip_angle}"),
            (self.kt_rear == 0.0 or 1e4 <= self.kt_rear <= 1e7, f"kt_rear must be 0 or in [1e4, 1e7] N/m, "
             f"got {self.kt_rear}"),
            (0.0 <= self.min_speed <= 50.0, f"min_speed must be in [0, 50] m/s, got {self.min_speed}"),
            (0.0 <= self.min_fz <= 1e5, f"min_fz must be in [0, 1e5] N, got {self.min_fz}"),
            (0.0 < self.max_abs_slip <= 1.0, f"max_abs_slip must be in (0, 1], got {self.max_abs_slip}"),
            (0.0 < self.sync_tolerance <= 1.0, f"sync_tolerance must be in (0, 1] s, got {self.sync_tolerance}"),
            (1.0 <= self.window <= 3600.0, f"window must be in [1, 3600] s, got {self.window}"),
            (10 <= self.capacity <= 1_000_000, f"capacity must be in [10, 1e6], got {self.capacity}"),
            (0.0 <= self.average_window <= 1.0, f"average_window must be in [0, 1] s, got {self.average_window}"),
            (self.combined_slip in COMBINED_SLIP,
             f"combined_slip must be one of {', '.join(COMBINED_SLIP)}, got {self.combined_slip!r}"),
            (self.combined_slip != "mf" or (len(self.combined_coefficients) == 5
                                            and all(map(math.isfinite, self.combined_coefficients))),
             "combined_coefficients must be 5 finite values (r_Bx1, r_Bx2, r_Cx1, r_Ex1, r_Hx1) with "
             "combined_slip mf"),
            (0.2 <= self.lateral_ratio <= 3.0, f"lateral_ratio must be in [0.2, 3], got {self.lateral_ratio}"),
            (-0.5 <= self.pitch_at_rest <= 0.5, f"pitch_at_rest must be in [-0.5, 0.5] rad, got {self.pitch_at_rest}"),
            (0.0 <= self.travel_per_ax <= 0.1, f"travel_per_ax must be in [0, 0.1] m s^2/m, got {self.travel_per_ax}"),
            (len(self.toe_front) > 0 and len(self.toe_rear) > 0, "toe_front / toe_rear need at least one row"),
            (self.speed_reference in SPEED_REFERENCES,
             f"speed_reference must be one of {', '.join(SPEED_REFERENCES)}, got {self.speed_reference!r}"),
            (self.speed_reference != "undriven_wheels" or not all(self.driven),
             "speed_reference undriven_wheels needs an undriven axle, and the vehicle drives both "
             "(driveline.driven_axles [front, rear]): use gnss_imu"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    def scopes(self) -> tuple[str, ...]:
        base = {"axle": ("front_axle", "rear_axle"), "wheel": tuple(self.wheel_names),
                "vehicle": ("vehicle",)}[self.scope]
        if self.braking == "separate":
            return base + tuple(f"{s}_braking" for s in base)
        return base

    def scope_of(self, wheel: int) -> str:
        if self.scope == "wheel":
            return self.wheel_names[wheel]
        if self.scope == "vehicle":
            return "vehicle"
        return "front_axle" if wheel < 2 else "rear_axle"


def _interp(x: float, xs: tuple[float, ...], ys: tuple[float, ...]) -> float:
    """``np.interp`` for one scalar on a short increasing table (held at the ends), without numpy objects."""
    k = bisect.bisect_right(xs, x)
    if k == 0:
        return ys[0]
    if k == len(xs):
        return ys[-1]
    x0, x1 = xs[k - 1], xs[k]
    return ys[k - 1] + (ys[k] - ys[k - 1]) * (x - x0) / (x1 - x0)


@dataclass
class ScopeData:
    """A snapshot of one scope's friction samples (copies, safe to hand to a worker thread)."""

    scope: str
    t: np.ndarray
    slip: np.ndarray
    mu: np.ndarray
    slip_var: np.ndarray | None = None   #: variance of each slip (block averages; 0 = unknown)
    mu_var: np.ndarray | None = None     #: variance of each mu (estimated forces; 0 = transducer data)
    lat: np.ndarray | None = None        #: |sin alpha| / lateral_ratio of each sample (0 = pure longitudinal slip)
    slip_is_latent: bool = False         #: slip/slip_var are already each true slip's posterior mean/variance
    #: (deconvolved over the whole window by grip_pipeline.subsample): the fit must not deconvolve again
    #: (t, mu, mu_var) of the window's friction samples taken while the rolling radius was still being learnt:
    #: no slip, so no fit, but what they transmitted bounds mu_max from below (grip_pipeline floor beliefs)
    floor_only: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    #: relative SD of a friction-scale error common to the window's samples that the force balance shows (set by
    #: the grip pipeline's snapshot: :meth:`~vehcal_ros.estimation.grip.pipeline.GripPipeline.scale_doubt`)
    scale_error: float = 0.0

    @property
    def t_end(self) -> float:
        """Stamp of the newest sample with a slip; of the newest :attr:`floor_only` sample without one."""
        if self.t.size:
            return float(self.t[-1])
        if self.floor_only is not None and self.floor_only[0].size:
            return float(self.floor_only[0][-1])
        return float("nan")


COMBINED_SLIP = ("none", "ellipse", "mf")
"""How a sample's slip angle enters: not at all, the friction ellipse in the fit, or MF2002 weights on the data."""

GRADE_PRIOR_SD = 0.05
"""rad, prior SD of the road grade before the first GNSS climb angle (a 5 % grade)."""
GRADE_WALK = 3e-4
"""rad per sqrt(m) travelled, random walk of the road grade in its scalar Kalman filter: a road's grade changes
over tens of metres, not while the vehicle stands. With a receiver's vertical velocity noise (the message's stated
SD, else 0.05 m/s: 0.005 rad at 10 m/s) at 10 Hz the filter's SD settles near 0.0013 rad at 10 m/s (3.5 mm of
front travel on a 2.7 m wheelbase), and it follows a change of grade within ~2 s."""
GRADE_MAX_SD = 0.002
"""rad: the grade is taken out of the IMU pitch while its filter's SD is below this (0 otherwise, as on a level
road): a first climb angle at 3 m/s carries 0.017 rad of noise, 4.6 cm of front travel on a 2.7 m wheelbase; at
this SD the error is 5 mm, 0.2 deg of toe on the sedan's bump steer (0.7 rad/m)."""
_GRADE_MAX_VAR = GRADE_MAX_SD ** 2
GRADE_REST_STD = 0.0015
"""rad: SD of the grade read from the IMU's pitch while the vehicle stands (pitch_at_rest - pitch): the IMU's
orientation error and the body's pitch on its suspension under the holding brakes."""
REST_OMEGA = 0.2
"""rad/s: every wheel slower than this (~0.1 m/s) is a standing vehicle."""
REFERENCE_BRAKE = 0.02
"""Brake input (0..1) above which the undriven wheels are braked and no longer a speed reference: about the
pedal's free travel (the driver's foot resting on it brakes nothing)."""
REFERENCE_SLIP_SD = 5e-4
"""SD of a free-rolling wheel's own slip about its mean, the undriven-wheel reference's error common to a 0.1 s
block (its wheel-speed noise is in the block's scatter): rolling resistance makes the wheel roll at s = -f_r / (Kx /
Fz); with f_r 0.008-0.03 (dry asphalt to snow; Wong, *Theory of Ground Vehicles*, 4th ed., Table 1.2) and
Kx / Fz 12-25 (the PRIOR tire sets at their nominal loads, docs/grip.md "Prior ranges from published tire data"),
both uniform, s has mean -1.07e-3 (a common offset, which the fit's s_h takes) and SD 4.3e-4 (Monte Carlo of the
two: its load, speed and road changes within a drive), rounded up."""
GNSS_STALE = 2.0
"""s: with ``undriven_wheels``, the undriven wheels' samples take the GNSS/IMU reference while it has released an
estimate within this long (its release lags ~0.2 s); beyond, they count toward floor beliefs only."""
YAW_RATE_MAX_AGE = 0.1
"""s: an IMU yaw rate older than this (against the wheel-speed stamp) is not used by the undriven-wheel
reference, which then takes r = 0 (the steering gate keeps such samples near straight running)."""
GRADE_VU_STD = 0.05
"""m/s, vertical velocity noise of a GNSS velocity that states no covariance."""


def combined_weight(coefficients: tuple[float, ...], kappa: float, alpha: float) -> float:
    """MF2002 longitudinal combined-slip weighting G_xa(kappa, alpha) = Fx / Fx0 (Pacejka, Tire and Vehicle
    Dynamics, 3rd ed., Eqs. 4.E50-E57; r_Bx3 = 0, r_Ex2 = 0): ``coefficients`` = (r_Bx1, r_Bx2, r_Cx1, r_Ex1,
    r_Hx1); alpha in rad. 1 at alpha = 0; independent of the road's friction."""
    rbx1, rbx2, rcx1, rex1, rhx1 = coefficients
    b = rbx1 / math.sqrt(1.0 + (rbx2 * kappa) ** 2)
    return _weight_shape(b, rcx1, rex1, alpha + rhx1) / _weight_shape(b, rcx1, rex1, rhx1)


def _weight_shape(b: float, c: float, e: float, x: float) -> float:
    """cos(C atan(B x - E (B x - atan(B x)))): the MF2002 weighting's shape."""
    bx = b * x
    return math.cos(c * math.atan(bx - e * (bx - math.atan(bx))))


GATE_REASONS = ("nonfinite", "low_speed", "low_load", "steering", "lateral", "slip_angle", "slip_range",
                "braking_dropped", "unsynced", "out_of_order", "unknown_wheel", "partial_block", "implausible",
                "zero_stamp", "duplicate", "stamp_jump", "malformed_wheel_speeds", "malformed_odom",
                "malformed_controls", "radius_unlearnt", "reference_wheel")


@dataclass
class CollectorCounters:
    """Samples accepted and dropped, by reason (counts since start)."""

    received: dict[str, int] = field(default_factory=lambda: {"wheel_speeds": 0, "tire_forces": 0,
                                                              "odom": 0, "controls": 0,
                                                              "tire_forces_estimated": 0})
    accepted: int = 0      #: raw samples that passed every gate and reached a buffer (alone or in a block)
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GATE_REASONS, 0))

    @property
    def n_dropped(self) -> int:
        return sum(self.dropped.values())


class _Series:
    """A short stamped series for interpolation (wheel speeds, odometry, steering)."""

    def __init__(self, columns: tuple[str, ...], capacity: int, max_gap: float) -> None:
        self.buf = RollingBuffer(columns, capacity=capacity, window=10.0, max_gap=max_gap)

    def at(self, t: float, tol: float, cols: tuple[int, ...]) -> list[float] | None:
        """Columns ``cols`` (0 = first value column) linearly interpolated at ``t``; None if ``t`` is not bracketed
        within ``tol``. Reads the ring in place: no copy of the series and no array per sample."""
        buf = self.buf
        n = len(buf)
        if n == 0:
            return None
        k = buf.index_at_or_after(t)
        after = buf.row(k) if k < n else None
        if after is not None and (after[0] == t or (k == 0 and after[0] - t <= tol)):
            return [float(after[c + 1]) for c in cols]
        if k == 0:
            return None
        before = buf.row(k - 1)
        if after is None:
            return [float(before[c + 1]) for c in cols] if t - before[0] <= tol * 0.2 else None
        t0, t1 = float(before[0]), float(after[0])
        if min(t - t0, t1 - t) > tol:
            return None
        w = (t - t0) / (t1 - t0)
        return [(1.0 - w) * float(before[c + 1]) + w * float(after[c + 1]) for c in cols]


def _friction(rec: TireForce) -> tuple[float, float, float]:
    """(mu, Var(mu)'s Fx part, its Fz part) of a tire-force record: mu = Fx / Fz, the variances by the delta
    method."""
    mu = rec.fx / rec.fz
    inv_fz2 = 1.0 / (rec.fz * rec.fz)
    return mu, rec.fx_var * inv_fz2, mu * mu * rec.fz_var * inv_fz2


class _Block:
    """Running sums of one wheel's gated (slip, mu) samples in the current averaging block."""

    __slots__ = ("n", "slip", "mu", "slip2", "var_fx", "var_fz", "rho", "speed", "lat", "ref_var")

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.n, self.slip, self.mu, self.slip2 = 0, 0.0, 0.0, 0.0
        self.var_fx, self.var_fz, self.rho, self.speed, self.lat = 0.0, 0.0, 0.0, 0.0, 0.0
        self.ref_var = 0.0

    def add(self, slip: float, mu: float, var_fx: float = 0.0, var_fz: float = 0.0, rho: float = 0.0,
            speed: float = 1.0, lat: float = 0.0, ref_var: float = 0.0) -> None:
        self.n += 1
        self.ref_var += ref_var
        self.lat += lat
        self.speed += speed
        self.slip += slip
        self.mu += mu
        self.slip2 += slip * slip
        self.var_fx += var_fx
        self.var_fz += var_fz
        self.rho += rho

    def mu_var(self) -> float:
        """Variance of the block's mean mu: the Fx part of the members' mu variances through the filter's error
        correlation, the Fz part fully correlated (see the module docstring)."""
        n = self.n
        if self.var_fx == 0.0 and self.var_fz == 0.0:
            return 0.0
        return (self.var_fx / n) * block_variance_factor(self.rho / n, n) / n + self.var_fz / n

    def mean_var(self) -> tuple[float, float, float]:
        """(mean slip, mean mu, variance of the mean slip from the within-block scatter)."""
        n = self.n
        s = self.slip / n
        var = max(self.slip2 - n * s * s, 0.0) / (n - 1) / n if n > 1 else 0.0
        return s, self.mu / n, var


class GripDataCollector:
    """Turns wheel-speed, tire-force, odometry (and optionally control) records into per-scope (s, mu) buffers."""

    def __init__(self, config: GripSignalConfig) -> None:
        self.config = config
        self.config.validate()
        c = self.config
        self.counters = CollectorCounters()
        #: per axle (front, rear): the learnt scale k of the rolling radius, R = k R(Fz)
        #: (estimation/sensing/rolling_radius.py)
        self.radius_scale = [1.0, 1.0]
        #: True while a speed reference is present but k is not yet known well enough: samples are dropped
        self.radius_gate = False
        self._wheel = _Series(tuple(f"w{i}" for i in range(4)), capacity=2048, max_gap=c.max_gap)
        #: the speed reference at its stamps: u, v, r and u's variance (0 for odometry)
        self._odom = _Series(("u", "v", "r", "u_var"), capacity=2048, max_gap=c.max_gap)
        self.speed = (GnssImuSpeed(SpeedReferenceConfig(accel_std=c.accel_std,
                                                        rear_distance=max(0.0, -min(c.wheel_x))))
                      if c.speed_reference in ("gnss_imu", "undriven_wheels") else None)
        #: undriven_wheels: the undriven axle's rolling speed at the wheel-speed stamps, the driven wheels' reference
        self._rolling = _Series(("u", "v", "r", "u_var"), capacity=2048, max_gap=c.max_gap)
        #: called with each speed-reference sample (t, u): the pipeline's odometer
        self.on_speed = None
        self._steer = _Series(("steering",), capacity=512, max_gap=c.max_gap)
        self._controls = (0.0, 0.0)        # the newest (steering, brake)
        #: the undriven wheels whose rolling speed is the slips' reference (speed_reference undriven_wheels)
        self._undriven = (tuple(i for i in range(4) if not c.driven[0 if i < 2 else 1])
                          if c.speed_reference == "undriven_wheels" else ())
        self._ref_x = tuple(float(c.wheel_x[i]) for i in self._undriven)   # their positions
        self._ref_y = tuple(float(c.wheel_y[i]) for i in self._undriven)
        self._fz = [math.nan] * 4           # per wheel: the newest normal load (N), the reference's radius
        self._yaw = (-math.inf, 0.0)        # the newest IMU (stamp, yaw rate)
        self._pitch = _Series(("pitch", "ax"), capacity=512, max_gap=c.max_gap)
        #: road grade angle (rad, + uphill) from the GNSS climb angle, its variance and the time of its last update
        self.grade = 0.0
        self._grade_var = GRADE_PRIOR_SD ** 2
        self._grade_t = -math.inf
        self._standing = False   # the newest wheel speeds are all below REST_OMEGA
        self._toe = [tuple(tuple(float(x) for x in col)
                           for col in np.asarray(c.toe_front if i < 2 else c.toe_rear, dtype=float).T)
                     for i in range(4)]   # (travel, toe) as Python floats: read per sample without numpy
        self._side = [1.0 if y >= 0.0 else -1.0 for y in c.wheel_y]
        self._wheelbase = max(c.wheel_x) - min(c.wheel_x)
        self._max_sin_alpha = math.sin(c.max_slip_angle)
        self._pending: deque[TireForce] = deque(maxlen=8192)
        self._buffers = {s: RollingBuffer(("slip", "mu", "slip_var", "mu_var", "lat"), capacity=c.capacity,
                                          window=c.window,
                                          max_gap=c.max_gap, allow_equal=True) for s in c.scopes()}
        #: per scope: (mu, mu_var) of the samples taken while the radius gate held them back (floor beliefs only)
        self._floor_only = {s: RollingBuffer(("mu", "mu_var"), capacity=c.capacity, window=c.window,
                                             max_gap=c.max_gap, allow_equal=True) for s in c.scopes()}
        self._wx = tuple(float(x) for x in c.wheel_x)   # wheel positions as Python floats: read per sample
        self._wy = tuple(float(y) for y in c.wheel_y)
        self.last_stamp: dict[str, float] = {}
        self._blocks = [_Block() for _ in range(4)]   # per wheel: the block being averaged
        self._floor_blocks = [_Block() for _ in range(4)]   # per wheel: the radius-gated samples of that block
        self._block_key = -math.inf                   # index of the current averaging block (t // window)
        self._block_seen = [0] * 4                    # per wheel: tire-force samples (gated or not) in the block
        self._within_q = [math.nan] * 4               # per wheel: running per-sample speed-error variance, (m/s)^2
        self._within_n = [0] * 4                      # per wheel: blocks in it

    # ------------------------------------------------------------------ input
    def add(self, record: object) -> None:
        """Dispatch one record (WheelSpeeds, TireForce, OdomSample, Controls, ImuSample, GnssVelocity); other
        records are ignored."""
        if isinstance(record, TireForce):
            self.add_tire_force(record)
        elif isinstance(record, WheelSpeeds):
            self.add_wheel_speeds(record)
        elif isinstance(record, OdomSample):
            self.add_odom(record)
        elif isinstance(record, Controls):
            self.add_controls(record)
        elif isinstance(record, ImuSample):
            self.add_imu(record)
        elif isinstance(record, GnssVelocity):
            self.add_gnss(record)

    def reject(self, topic: str, reason: str) -> None:
        """Count a message of ``topic`` refused before it became a sample (malformed, implausible, bad stamp)."""
        c = self.counters
        c.received[topic] = c.received.get(topic, 0) + 1
        c.dropped[reason] = c.dropped.get(reason, 0) + 1

    def add_wheel_speeds(self, rec: WheelSpeeds) -> None:
        self.counters.received["wheel_speeds"] += 1
        self._stamp("wheel_speeds", rec.t)
        self._standing = all(abs(w) < REST_OMEGA for w in rec.omega)   # False on a NaN wheel
        self._append(self._wheel, rec.t, rec.omega)
        if self._undriven:
            self._reference_from_wheels(rec)
        self._drain()

    def _reference_from_wheels(self, rec: WheelSpeeds) -> None:
        """The speed reference at a wheel-speed stamp from the undriven wheels (module docstring); none while
        braking, before a normal load of each is known, or on a non-finite input."""
        c = self.config
        t = rec.t
        steering, brake = self._controls
        if brake > REFERENCE_BRAKE:
            return
        t_yaw, r = self._yaw
        if not abs(t - t_yaw) <= YAW_RATE_MAX_AGE:
            r = 0.0
        delta = steering * c.steering_gain
        rolling, heading = [], []
        for i in self._undriven:
            rolling.append(rec.omega[i] * self._slip_radius(i, self._fz[i]) * self.radius_scale[0 if i < 2 else 1])
            heading.append((delta if c.steered[i] else 0.0) - self._side[i] * self.toe_in(i, t))
        v = r * max(0.0, -min(c.wheel_x))   # kinematic: no slip angle at the rear axle
        u = undriven_axle_speed(rolling, heading, self._ref_x, self._ref_y, r, v)
        if not math.isfinite(u):   # NaN until each undriven wheel has a load
            return
        self._append(self._rolling, t, (u, v, r, (REFERENCE_SLIP_SD * u) ** 2))
        if self.on_speed is not None and not self._gnss_alive(t):   # the odometer: GNSS/IMU while it runs
            self.on_speed(t, u)

    def _slip_radius(self, wheel: int, fz: float) -> float:
        """Wheel ``wheel``'s rolling radius law (m) at normal load ``fz`` (N): fixed r0 or r0 - Fz/kt (front kt, rear
        kt_rear when set); the callers apply the axle's learnt scale."""
        c = self.config
        radius = c.r0
        if c.radius_mode == "load":
            radius -= fz / (c.kt if wheel < 2 or c.kt_rear <= 0.0 else c.kt_rear)
        return radius

    def _gnss_alive(self, t: float) -> bool:
        """Whether the GNSS/IMU reference has released an estimate within :data:`GNSS_STALE` s before ``t``."""
        return t - self._odom.buf.last_time <= GNSS_STALE

    def add_odom(self, rec: OdomSample) -> None:
        """Odometry: the speed reference with ``speed_reference`` odometry, otherwise only counted."""
        self.counters.received["odom"] += 1
        self._stamp("odom", rec.t)
        if self.config.speed_reference != "odometry":
            return
        self._append(self._odom, rec.t, (rec.u, rec.v, rec.yaw_rate, 0.0))
        if self.on_speed is not None:
            self.on_speed(rec.t, rec.u)
        self._drain()

    def add_gnss(self, rec: GnssVelocity) -> None:
        """GNSS velocity: the road grade (:meth:`_update_grade`) and, with ``speed_reference`` gnss_imu, an
        update of the speed filter, whose released estimates become the speed reference."""
        self._update_grade(rec)
        if self.speed is None:
            return
        self.counters.received["gnss"] = self.counters.received.get("gnss", 0) + 1
        self._use_speeds(self.speed.add_gnss(rec))

    def _update_grade(self, rec: GnssVelocity) -> None:
        """One step of the grade's scalar Kalman filter (a random walk of :data:`GRADE_WALK` per metre, prior
        :data:`GRADE_PRIOR_SD`) with the climb angle atan(v_up / v_horizontal) of a GNSS velocity moving at 3 m/s
        or more, whose noise is the vertical velocity's (``std``, else :data:`GRADE_VU_STD`) over the speed."""
        h = math.hypot(rec.ve, rec.vn)
        if not (math.isfinite(rec.t) and math.isfinite(rec.vu) and h >= 3.0) or rec.t <= self._grade_t:
            return
        if math.isfinite(self._grade_t):   # the distance since the last update, at this speed
            self._grade_var = min(self._grade_var + GRADE_WALK ** 2 * h * (rec.t - self._grade_t),
                                  GRADE_PRIOR_SD ** 2)
        noise = ((rec.std if rec.std > 0.0 else GRADE_VU_STD) / h) ** 2
        gain = self._grade_var / (self._grade_var + noise)
        self.grade += gain * (math.atan2(rec.vu, h) - self.grade)
        self._grade_var *= 1.0 - gain
        self._grade_t = rec.t

    def _use_speeds(self, speeds: list[ReferenceSpeed]) -> None:
        for s in speeds:
            self._append(self._odom, s.t, (s.u, s.v, s.r, s.u_var))
            if self.on_speed is not None:
                self.on_speed(s.t, s.u)
        if speeds:
            self._drain()

    def add_controls(self, rec: Controls) -> None:
        self.counters.received["controls"] += 1
        self._stamp("controls", rec.t)
        self._append(self._steer, rec.t, (rec.steering,))
        if math.isfinite(rec.steering) and math.isfinite(rec.brake):
            self._controls = (rec.steering, rec.brake)

    def add_imu(self, rec: ImuSample) -> None:
        """Body pitch and longitudinal acceleration (front wheel travel, hence the toe of the bump steer). A bad
        sample is skipped silently here (the force estimator and the nodes' input guard count IMU rejects); the
        toe then falls back to the last bracketing samples or to the static toe."""
        self.counters.received["imu"] = self.counters.received.get("imu", 0) + 1
        self._pitch.buf.append(rec.t, (rec.pitch, rec.ax))
        if self._standing and math.isfinite(rec.pitch) and math.isfinite(rec.t):   # the grade under a standing car
            self.grade = self.config.pitch_at_rest - rec.pitch
            self._grade_var = GRADE_REST_STD ** 2
            self._grade_t = max(self._grade_t, rec.t)
        if math.isfinite(rec.t) and math.isfinite(rec.yaw_rate):
            self._yaw = (rec.t, rec.yaw_rate)
        if self.speed is not None:
            self.speed.add_imu(rec)

    def add_tire_force(self, rec: TireForce, estimated: bool = False) -> None:
        """A measured (or, ``estimated``, a force-estimator's) tire-force sample."""
        topic = "tire_forces_estimated" if estimated else "tire_forces"
        self.counters.received[topic] += 1
        self._stamp(topic, rec.t)
        if not 0 <= rec.wheel < 4:
            self.counters.dropped["unknown_wheel"] += 1
            return
        if not all(math.isfinite(x) for x in (rec.t, rec.fx, rec.fy, rec.fz)):
            self.counters.dropped["nonfinite"] += 1
            return
        self._fz[rec.wheel] = rec.fz
        self._pending.append(rec)
        self._drain()

    def _stamp(self, topic: str, t: float) -> None:
        if math.isfinite(t):
            self.last_stamp[topic] = max(t, self.last_stamp.get(topic, -math.inf))

    def _append(self, series: _Series, t: float, values) -> None:
        if series.buf.append(t, values):
            return
        if not (math.isfinite(t) and all(math.isfinite(v) for v in values)):
            self.counters.dropped["nonfinite"] += 1
        else:
            self.counters.dropped["out_of_order"] += 1

    # ------------------------------------------------------------ processing
    def _reference(self, wheel: int, t: float) -> _Series | None:
        """The speed reference series of ``wheel``'s samples: the odometry's or GNSS/IMU's; with
        ``undriven_wheels`` the undriven axle's rolling speed for a driven wheel, and for an undriven wheel the
        GNSS/IMU's while it is alive, else None (the sample then counts toward floor beliefs only)."""
        if not self._undriven:
            return self._odom
        if wheel not in self._undriven:
            return self._rolling
        return self._odom if self._gnss_alive(t) else None

    def _drain(self) -> None:
        """Turn every pending tire-force sample whose stamp is bracketed by wheel speed and its speed reference."""
        tol = self.config.sync_tolerance
        while self._pending:
            rec = self._pending[0]
            ref = self._reference(rec.wheel, rec.t)
            if ref is None:   # an undriven wheel without GNSS: its slip is the reference's own
                self._pending.popleft()
                self._advance_blocks(rec.t)
                self._block_seen[rec.wheel] += 1
                self.counters.dropped["reference_wheel"] += 1
                omega = self._wheel.at(rec.t, tol, (rec.wheel,))
                if rec.fz >= self.config.min_fz and omega is not None and omega[0] * self.config.r0 >= \
                        self.config.min_speed:
                    self._floor_sample(rec)
                continue
            horizon = min(self._wheel.buf.last_time, ref.buf.last_time)
            if rec.t > horizon:
                # not yet bracketed; give up on it only when it is far older than the newest data
                newest = max(self._wheel.buf.last_time, ref.buf.last_time)
                if math.isfinite(newest) and (newest - rec.t > 10 * tol or rec.t - newest > 10.0):
                    self._pending.popleft()
                    self.counters.dropped["unsynced"] += 1
                    continue
                break
            self._pending.popleft()
            self._advance_blocks(rec.t)
            self._block_seen[rec.wheel] += 1
            omega = self._wheel.at(rec.t, tol, (rec.wheel,))
            odom = ref.at(rec.t, tol, (0, 1, 2, 3))
            if omega is None or odom is None:
                self.counters.dropped["unsynced"] += 1
                continue
            self._process(rec, omega[0], odom)

    def _process(self, rec: TireForce, omega: float, odom: list[float]) -> None:
        c = self.config
        u, v, r, u_var = odom
        i = rec.wheel
        if rec.fz < c.min_fz:
            self.counters.dropped["low_load"] += 1
            return
        if u < c.min_speed:
            self.counters.dropped["low_speed"] += 1
            return
        if self.radius_gate:
            self.counters.dropped["radius_unlearnt"] += 1
            self._floor_sample(rec)
            return
        delta = 0.0
        if c.steered[i]:
            st = self._steer.at(rec.t, 1.0, (0,))
            if st is not None:
                delta = float(st[0]) * c.steering_gain
        if abs(delta) > c.max_steer:
            self.counters.dropped["steering"] += 1
            return
        if abs(rec.fy / rec.fz) > c.max_lateral_mu:
            self.counters.dropped["lateral"] += 1
            return
        vx = u - r * self._wy[i]
        vy = v + r * self._wx[i]
        heading = delta - self._side[i] * self.toe_in(i, rec.t)
        ch, sh = math.cos(heading), math.sin(heading)
        v_wheel = vx * ch + vy * sh
        sin_alpha = (vy * ch - vx * sh) / math.hypot(vx, vy)   # alpha = atan(v_y / v_x) in the wheel's heading
        if c.combined_slip == "none":   # fitted as pure slip: gated at max_slip_angle, then no angle
            if abs(sin_alpha) > self._max_sin_alpha:
                self.counters.dropped["slip_angle"] += 1
                return
            sin_alpha = 0.0
        radius = self._slip_radius(i, rec.fz) * self.radius_scale[0 if i < 2 else 1]
        v_roll = omega * radius
        denom = max(v_roll, v_wheel)
        if not (math.isfinite(denom) and denom > 0.0 and v_wheel >= c.min_speed):
            self.counters.dropped["low_speed"] += 1
            return
        slip = (v_roll - v_wheel) / denom
        mu, var_fx, var_fz = _friction(rec)
        if c.combined_slip == "mf":   # the pure-slip friction of the sample (module docstring)
            g = combined_weight(c.combined_coefficients, slip, math.asin(max(-1.0, min(1.0, sin_alpha))))
            mu, var_fx, var_fz, sin_alpha = mu / g, var_fx / (g * g), var_fz / (g * g), 0.0
        if not (math.isfinite(slip) and math.isfinite(mu)):
            self.counters.dropped["nonfinite"] += 1
            return
        if abs(slip) > c.max_abs_slip:
            self.counters.dropped["slip_range"] += 1
            return
        if c.average_window > 0.0:
            self._blocks[i].add(slip, mu, var_fx, var_fz, rec.fx_rho, denom, sin_alpha, u_var / (denom * denom))
        else:
            self._store(i, rec.t, slip, mu, u_var / (denom * denom), 1, var_fx + var_fz,
                        abs(sin_alpha) / c.lateral_ratio)

    def _floor_sample(self, rec: TireForce) -> None:
        """A sample held back by the radius gate (past the load and speed gates) that passes the lateral one
        (any steering: |Fx/Fz| is friction the road transmitted whatever the slip angle) keeps its friction for
        floor beliefs: averaged per block like every sample, stored without a slip (:attr:`ScopeData.floor_only`)."""
        c = self.config
        if abs(rec.fy / rec.fz) > c.max_lateral_mu:
            return
        mu, var_fx, var_fz = _friction(rec)
        if not (math.isfinite(mu) and math.isfinite(var_fx) and math.isfinite(var_fz)):
            return
        if c.average_window > 0.0:
            self._floor_blocks[rec.wheel].add(0.0, mu, var_fx, var_fz, rec.fx_rho)
        else:
            self._floor_only[c.scope_of(rec.wheel)].append(rec.t, (abs(mu), var_fx + var_fz))

    def toe_squares(self, t: float) -> float:
        """The sum over the four wheels of the squared toe (rad^2) at ``t`` (:meth:`toe_in`, the front travel
        looked up once): what the toe drag of the torque-scale regression grows with
        (estimation/sensing/torque_scale.py)."""
        front = self._front_travel(t)
        total = 0.0
        for wheel in range(4):
            z, toe = self._toe[wheel]
            v = toe[0] if len(z) == 1 else _interp(front if wheel < 2 else 0.0, z, toe)
            total += v * v
        return total

    def _front_travel(self, t: float) -> float:
        """Front wheel travel (m, + = bump) at ``t`` from the IMU's pitch and longitudinal acceleration
        (:meth:`toe_in`); 0 when no IMU sample is bracketed."""
        p = self._pitch.at(t, self.config.sync_tolerance, (0, 1))
        if p is None:
            return 0.0
        grade = self.grade if self._grade_var <= _GRADE_MAX_VAR else 0.0
        return self._wheelbase * (p[0] + grade - self.config.pitch_at_rest) + self.config.travel_per_ax * p[1]

    def toe_in(self, wheel: int, t: float) -> float:
        """Toe-in (rad) of ``wheel`` at ``t``: the description's toe table at the wheel travel, front
        L (pitch + grade - pitch_at_rest) + travel_per_ax a_x (the body's pitch on its suspension over the
        wheelbase, the IMU's pitch less the road grade, plus the rear suspension's and the tires' deflection under
        the longitudinal load transfer; the static toe when no IMU sample is bracketed), rear 0 (its travel is
        small beside the front's: the rear springs are stiffer)."""
        z, toe = self._toe[wheel]
        if len(z) == 1:
            return toe[0]
        return _interp(self._front_travel(t) if wheel < 2 else 0.0, z, toe)

    def _store(self, wheel: int, t: float, slip: float, mu: float, slip_var: float, n: int,
               mu_var: float = 0.0, lat: float = 0.0) -> None:
        """Put one (block-averaged) friction sample of ``n`` raw samples into its scope's buffer."""
        c = self.config
        scope = c.scope_of(wheel)
        if mu < 0.0 and c.braking != "keep":  # braking force (see the module docstring)
            if c.braking == "drop":
                self.counters.dropped["braking_dropped"] += n
                return
            if c.braking == "separate":
                scope = f"{scope}_braking"
            slip, mu = -slip, -mu
        if self._buffers[scope].append(t, (slip, mu, slip_var, mu_var, lat)):
            self.counters.accepted += n
        else:
            self.counters.dropped["out_of_order"] += n

    def _advance_blocks(self, t: float) -> None:
        """Close the averaging blocks when a tire-force stamp enters a new block (or the clock restarts)."""
        w = self.config.average_window
        if w <= 0.0 or not math.isfinite(t):
            return
        key = math.floor(t / w)
        if key == self._block_key:
            return
        restart = key < self._block_key or (key - self._block_key) * w > self.config.max_gap
        for i, block in enumerate(self._blocks):
            if block.n > 0:
                if restart or block.n < 0.5 * self._block_seen[i]:
                    self.counters.dropped["partial_block"] += block.n   # an edge of a gated stretch, or stale
                else:
                    slip, mu, var = block.mean_var()
                    # the speed reference's own error is common to the block's samples: its variance adds
                    noise = self._slip_noise(i, var, block.n, block.speed / block.n) + block.ref_var / block.n
                    self._store(i, (self._block_key + 0.5) * w, slip, mu, noise, block.n,
                                block.mu_var(), abs(block.lat / block.n) / self.config.lateral_ratio)
            block.clear()
            fb = self._floor_blocks[i]
            if fb.n > 0 and not restart and fb.n >= 0.5 * self._block_seen[i]:
                self._floor_only[self.config.scope_of(i)].append((self._block_key + 0.5) * w,
                                                                 (abs(fb.mu / fb.n), fb.mu_var()))
            fb.clear()
            self._block_seen[i] = 0
        self._block_key = key

    def _slip_noise(self, wheel: int, within: float, n: int, speed: float) -> float:
        """Variance of a block's mean slip (slip^2). A sample's slip error is a speed error (wheel speed x radius,
        odometry) divided by the speed, so its variance is pooled in speed units, (m/s)^2, over the wheel's blocks
        (the mean of the first 20 blocks, then a running mean over ~20) and scaled back by the block's mean speed
        and size: steadier than one block's 10-sample scatter (9 degrees of freedom), and it follows a change of
        speed at once. (The former block-to-block scatter counted real slip changes and the slower blocks' noise
        as noise: 1.5-2.7x the true error sd on accel_coast against the simulator's true slips; this is within
        10 % there.)"""
        sp2 = speed * speed
        if n > 1:
            q = within * n * sp2
            k = self._within_n[wheel] = self._within_n[wheel] + 1
            self._within_q[wheel] = pooled(self._within_q[wheel], q, k)
        w = self._within_q[wheel]
        return within if math.isnan(w) else w / (n * sp2)

    def flush(self) -> None:
        """Close the open averaging blocks now (end of a bag): full blocks are stored, partial ones counted."""
        if math.isfinite(self._block_key):
            self._advance_blocks((self._block_key + 1.5) * self.config.average_window)

    # ---------------------------------------------------------------- output
    def scopes(self) -> tuple[str, ...]:
        return tuple(self._buffers)

    def snapshot(self, scope: str) -> ScopeData:
        a = self._buffers[scope].array()
        f = None
        if len(self._floor_only[scope]):   # those within the window of the newest sample of either kind
            f = self._floor_only[scope].array()
            f = f[f[:, 0] >= max(f[-1, 0], a[-1, 0] if a.size else -math.inf) - self.config.window]
        return ScopeData(scope=scope, t=a[:, 0], slip=a[:, 1], mu=a[:, 2], slip_var=a[:, 3], mu_var=a[:, 4],
                         lat=a[:, 5], floor_only=None if f is None else (f[:, 0], f[:, 1], f[:, 2]))

    def recent(self, scope: str, t0: float) -> ScopeData:
        """The scope's samples stamped at or after ``t0`` (a copy of those only)."""
        a = self._buffers[scope].since(t0)
        return ScopeData(scope=scope, t=a[:, 0], slip=a[:, 1], mu=a[:, 2], slip_var=a[:, 3], mu_var=a[:, 4],
                         lat=a[:, 5])

    def fill(self) -> dict[str, int]:
        """Samples currently buffered per scope."""
        return {s: len(b) for s, b in self._buffers.items()}
