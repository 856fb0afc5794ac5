"""The order in which the calibration stages are chained, and what each stage's fit depends on.

Each stage holds the parameters it does not calibrate at earlier stages' posterior means or, when no earlier stage
calibrated them, at the vehicle description's nominal values. A stage whose fit depends on a held value is
biased by it, and the bias travels to every later stage and to every prediction:

* ``rolling_resistance`` (a straight coast-down, u only) depends on nothing it does not calibrate: its
  least-squares rr moves by < 0.1 % when the held Cx move from 10 300 to 11 079 or the paper's 10 659
  (benchmarks/results/diag_rr_holdout.md, section 1). It runs first.
* ``longitudinal`` (a throttle ramp from rest; u, front and rear wheel speeds) depends on rr: the wheel-spin
  balance ``Jw w_dot = T_d - rr Fz - r Fx`` (Eq. 9) carries rr next to the tire force, and a held rr 0.0175 where
  the vehicle has 0.0123 makes the stage's Cx absorb the difference (on the Chrono HMMWV with its rotating inertia
  the stage cannot fit at all: u RMSE 0.43 against 0.076 m/s).
* ``lateral`` (a ramp steer while coasting; v, yaw rate, roll, roll rate) depends on rr and the Cx through the
  speed: rr sets the coast's deceleration, 0.1 m/s^2 per 0.005 of rr, hence u and the yaw response.

So the chain is rolling resistance -> longitudinal -> lateral (:data:`CHAIN_ORDER`); the 8-DOF paper's order
(longitudinal -> lateral -> rolling resistance, Section 3) calibrates rr last, after the two stages that
depend on it were fitted with a held rr.
"""

from __future__ import annotations

from collections.abc import Iterable

CHAIN_ORDER: tuple[str, ...] = ("rolling_resistance", "longitudinal", "lateral")
"""Stages in dependency order (module docstring)."""

DEPENDS_ON: dict[str, tuple[str, ...]] = {
    "rolling_resistance": (),
    "longitudinal": ("rr",),
    "lateral": ("rr", "Cxf", "Cxr"),
}
"""Per stage: the held parameters its fit depends on (module docstring)."""

CALIBRATED_BY: dict[str, str] = {"rr": "rolling_resistance", "Cxf": "longitudinal", "Cxr": "longitudinal",
                                 "Cyf": "lateral", "Cyr": "lateral", "kphi_f": "lateral", "kphi_r": "lateral",
                                 "bphi": "lateral", "bphi_f": "lateral", "bphi_r": "lateral",
                                 "Jd": "longitudinal"}
"""The stage that calibrates each 8-DOF parameter."""


def missing_dependencies(stage: str, calibrated: Iterable[str]) -> list[str]:
    """Parameters ``stage`` depends on that no earlier stage has calibrated (``calibrated``: their names)."""
    have = set(calibrated)
    return [name for name in DEPENDS_ON.get(stage, ()) if name not in have]


def order_warning(stage: str, calibrated: Iterable[str], nominal: dict[str, float] | None = None) -> str | None:
    """One line naming what ``stage`` holds uncalibrated and which stage to run first, or None if nothing."""
    missing = missing_dependencies(stage, calibrated)
    if not missing:
        return None
    held = ", ".join(f"{n} {nominal[n]:g}" if nominal and n in nominal else n for n in missing)
    first = sorted({CALIBRATED_BY[n] for n in missing}, key=CHAIN_ORDER.index)
    return (f"stage {stage} depends on {held}, held at the vehicle description's nominal value, not calibrated: "
            f"calibrate {' and '.join(first)} first and pass its --json result with --model (chain order: "
            f"{' -> '.join(CHAIN_ORDER)})")
