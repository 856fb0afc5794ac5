"""What a live estimator lets in: plausibility, stamp sanity and received-vs-expected accounting per input stream.

Every record a node converts passes :meth:`InputGuard.check` before it reaches a pipeline. A record is refused
(and the caller counts it under the returned reason) when

* ``nonfinite``: a field is NaN or infinite;
* ``implausible``: a value lies beyond physical ranges (:data:`LIMITS`: e.g. |Fx| > 1e6 N, |u| > 150 m/s) that no
  road vehicle reaches, so a burst of 1e300 never reaches a buffer or a fit;
* ``zero_stamp``: the header stamp is exactly zero (never filled in);
* ``duplicate`` / ``out_of_order``: the stamp equals / precedes the stream's last accepted one;
* ``stamp_jump``: the stamp is more than ``jump`` seconds behind the stream or ahead of every stream. One such
  stamp is an outlier (a glitching clock, a corrupted header) and is dropped; a second consecutive stamp of the
  stream on the same new timeline confirms a real clock jump (simulator restart, bag loop, a clock set by a day):
  it is counted in ``clock_jumps`` (or, forward by less than a minute, as an interruption of the stream: it fell
  silent) and the stream continues from there (the pipelines then restart their buffers). The jump's first
  message stays counted as ``stamp_jump``.

Streams are keyed per topic, per wheel for the tire forces (four WrenchStamped per time step) and per axle for
the brake pressures. For each stream
the nominal period is learnt from the stamps (the median of the first spacings, then a slow average of the
spacings near it), so a gap of k periods means k - 1 messages were lost between sender and estimator (a
queue overflow, the network, a sender that skipped): ``expected`` = accepted + lost. Gaps longer than
``max_loss_gap`` count as an interruption (a topic that stopped and came back), not as lost messages.
Nothing here imports rclpy: plain Python on scalars, a few microseconds per message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from vehcal_ros.records import (
    BrakePressure,
    Controls,
    DriveTorque,
    ImuSample,
    OdomSample,
    TireForce,
    WheelSpeeds,
)

LIMITS: dict[str, float] = {
    "wheel_speed": 600.0,      # rad/s: 280 m/s at a 0.47 m radius
    "force": 1e6,              # N, any tire-force component
    "speed": 150.0,            # m/s, body velocity components
    "rate": 50.0,              # rad/s, body angular rates
    "accel": 1000.0,           # m/s^2, IMU accelerations (a crash stays below)
    "position": 1e8,           # m, odometry position
    "control": 10.0,           # Joy axes are normalised to [-1, 1]
    "torque": 1e6,             # N m, CAN engine or axle torque
    "gear": 100.0,             # engaged gear number
    "pressure": 1e8,           # Pa, brake line pressure (1000 bar)
}
"""Physical ranges beyond which a value is refused as implausible (generous: any road vehicle stays far inside)."""

REASONS = ("nonfinite", "implausible", "zero_stamp", "duplicate", "out_of_order", "stamp_jump")


def _problem(rec: object) -> str | None:
    """'nonfinite' / 'implausible' / None for one record (its stamp included)."""
    L = LIMITS
    if isinstance(rec, TireForce):
        groups = (((rec.fx, rec.fy, rec.fz), L["force"]),)
    elif isinstance(rec, WheelSpeeds):
        groups = ((tuple(rec.omega), L["wheel_speed"]),)
    elif isinstance(rec, OdomSample):
        groups = (((rec.u, rec.v), L["speed"]), ((rec.yaw_rate,), L["rate"]), ((rec.x, rec.y), L["position"]),
                  ((rec.yaw,), 10.0))
    elif isinstance(rec, ImuSample):
        groups = (((rec.roll_rate, rec.yaw_rate, rec.pitch_rate), L["rate"]),
                  ((rec.ax, rec.ay, rec.az), L["accel"]), ((rec.roll, rec.pitch, rec.yaw), 10.0))
    elif isinstance(rec, Controls):
        groups = (((rec.throttle, rec.brake, rec.steering), L["control"]),)
    elif isinstance(rec, DriveTorque):   # NaN: a joint the message does not carry
        groups = tuple(((v,), L[k]) for v, k in ((rec.engine, "torque"), (rec.gear, "gear"),
                                                 (rec.axle_front, "torque"), (rec.axle_rear, "torque"))
                       if not math.isnan(v))
    elif isinstance(rec, BrakePressure):
        groups = (((rec.pressure,), L["pressure"]),)
    else:
        return None
    t = rec.t
    if not math.isfinite(t):
        return "nonfinite"
    implausible = False
    for values, limit in groups:
        for v in values:
            if not math.isfinite(v):
                return "nonfinite"
            if abs(v) > limit:
                implausible = True
    return "implausible" if implausible else None


@dataclass
class StreamState:
    """One stream's stamps: last accepted, candidate jump, learnt period, counts."""

    last: float = -math.inf
    candidate: float | None = None
    period: float = math.nan
    first_spacings: list[float] = field(default_factory=list)
    accepted: int = 0
    lost: int = 0
    interruptions: int = 0


class InputGuard:
    """Per-stream checks and accounting (see the module docstring). Not thread safe: call under the node's lock.

    Args:
        jump: a stamp this far (s) behind its stream or ahead of all streams is a jump candidate.
        max_loss_gap: a longer gap (s) is an interruption, not lost messages.
    """

    def __init__(self, jump: float = 1.0, max_loss_gap: float = 0.5) -> None:
        self.jump = float(jump)
        self.max_loss_gap = float(max_loss_gap)
        self.streams: dict[tuple[str, int], StreamState] = {}
        self.newest = -math.inf
        self.clock_jumps = 0
        self._last_jump_to = math.nan

    def check(self, topic: str, rec: object) -> str | None:
        """None if ``rec`` (arrived on ``topic``) may go on to the pipeline, else the reason it is refused."""
        problem = _problem(rec)
        if problem is not None:
            return problem
        t = rec.t  # type: ignore[attr-defined]
        if t == 0.0:
            return "zero_stamp"
        key = (topic, rec.wheel if isinstance(rec, TireForce) else rec.axle if isinstance(rec, BrakePressure) else -1)
        s = self.streams.get(key)
        if s is None:
            s = self.streams[key] = StreamState()
        if s.accepted and (t < s.last - self.jump or t > max(self.newest, s.last) + self.jump):
            if s.candidate is not None and s.candidate < t <= s.candidate + self.jump:
                self._confirm_jump(s, t)        # a second stamp on the new timeline: a real clock jump
            else:
                s.candidate = t
                return "stamp_jump"
        elif t == s.last:
            return "duplicate"
        elif t < s.last:
            return "out_of_order"
        else:
            self._count_gap(s, t)
        s.candidate = None
        s.last = t
        s.accepted += 1
        if t > self.newest:
            self.newest = t
        return None

    def _confirm_jump(self, s: StreamState, t: float) -> None:
        if 0.0 < t - s.last <= 60.0:
            s.interruptions += 1               # forward by less than a minute: the stream (or all) fell silent
        elif not abs(t - self._last_jump_to) <= max(self.jump, 5.0):   # once per jump, not once per stream
            self.clock_jumps += 1
            self._last_jump_to = t
        if t < self.newest:
            self.newest = t
        s.last = -math.inf

    def _count_gap(self, s: StreamState, t: float) -> None:
        if not math.isfinite(s.last):
            return
        dt = t - s.last
        p = s.period
        if math.isnan(p):                      # learning: the median of the first 15 spacings
            s.first_spacings.append(dt)
            if len(s.first_spacings) >= 15:
                s.period = sorted(s.first_spacings)[7]
                s.first_spacings = []
            return
        if dt > self.max_loss_gap:
            s.interruptions += 1
        elif dt >= 1.5 * p:
            s.lost += int(round(dt / p)) - 1
        elif dt >= 0.5 * p:
            s.period = p + 0.01 * (dt - p)

    def totals(self) -> dict[str, dict[str, int]]:
        """Per topic: accepted, lost (gaps in the stamps), expected (= accepted + lost), interruptions."""
        out: dict[str, dict[str, int]] = {}
        for (topic, _), s in self.streams.items():
            row = out.setdefault(topic, {"accepted": 0, "lost": 0, "expected": 0, "interruptions": 0})
            row["accepted"] += s.accepted
            row["lost"] += s.lost
            row["expected"] += s.accepted + s.lost
            row["interruptions"] += s.interruptions
        return out


__all__ = ["InputGuard", "LIMITS", "REASONS", "StreamState"]
