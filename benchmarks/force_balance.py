"""Newton's law along the body's x axis on the 14-DOF simulator's own truth: which sum of tire forces balances the
total mass times the specific force with the body's pitch taken out (the torque scale's premise,
docs/tire_forces.md "Reported torques").

A fixed 24 s program (accelerations, cruise, braking; no steering) from 8 m/s on a dry road. Every 0.1 s the
simulator's outputs give the tires' forces in their own frames (fx, fy), the front wheels' headings psi relative
to the chassis (steer_angle: static toe and bump steer) and the body's specific force and pitch. The script
regresses, on (m (f_x + g sin(pitch)), 1, u^2), the sum of the tire-frame fx and the sum of the body-x components
fx cos(psi) - fy sin(psi), and prints slope, offset (N) and the u^2 coefficient (N s^2/m^2) of each.

Usage:  python benchmarks/force_balance.py [--vehicles sedan hmmwv]
"""

from __future__ import annotations

import argparse

import numpy as np

from vehcal_ros.models.vehicle14.params import load_simulator_params
from vehcal_ros.models.vehicle14.road import RoadMap
from vehcal_ros.models.vehicle14.simulator import Hmmwv14

PROGRAM = ((0.0, 0.4, 0.0), (6.0, 0.1, 0.0), (10.0, 0.0, 0.15), (13.0, 0.6, 0.0), (18.0, 0.05, 0.0))
"""(from s, throttle, brake)."""
DURATION = 24.0


def samples(vehicle: str) -> np.ndarray:
    """Rows (m (f_x + g sin pitch), sum fx, sum of body-x components, u) every 0.1 s of the program."""
    params = load_simulator_params(vehicle)
    sim = Hmmwv14(params, RoadMap.uniform(0.9))
    sim.reset(speed=8.0)
    m, g = params.total_mass, params.gravity
    rows, k = [], 0
    while sim.t < DURATION:
        while k + 1 < len(PROGRAM) and sim.t >= PROGRAM[k + 1][0]:
            k += 1
        sim.step(PROGRAM[k][1], PROGRAM[k][2], 0.0, n_steps=round(0.1 / sim.dt))
        o = sim.outputs()
        psi = np.zeros(4)
        psi[:2] = o["steer_angle"]
        fx, fy = o["fx"], o["fy"]
        rows.append((m * (o["ax"] + g * np.sin(o["pitch"])), fx.sum(), (fx * np.cos(psi) - fy * np.sin(psi)).sum(),
                     o["u"]))
    return np.array(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vehicles", nargs="+", default=["sedan", "hmmwv"])
    args = ap.parse_args()
    print("| vehicle | sum of tire-frame fx: slope, offset N, u^2 | sum of fx cos(psi) - fy sin(psi): slope, offset N, "
          "u^2 |")
    print("|---|---|---|")
    for vehicle in args.vehicles:
        a = samples(vehicle)
        x = np.column_stack([a[:, 0], np.ones(len(a)), a[:, 3] ** 2])
        cells = []
        for y in (a[:, 1], a[:, 2]):
            slope, offset, quad = np.linalg.lstsq(x, y, rcond=None)[0]
            cells.append(f"{slope:.4f}, {offset:.1f}, {quad:.3f}")
        print(f"| {vehicle} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
