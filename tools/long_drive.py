"""Generate a long-drive scenario of any length (config/scenarios/long_drive.yaml is its 1-hour output).

    .venv/bin/python tools/long_drive.py --duration 3600 --out config/scenarios/long_drive.yaml

The drive repeats 60 s surface blocks dry (0.9) -> wet (0.6) -> snow (0.3) after a 15 s launch to 12 m/s.
Every block has excitation for both estimators (the daily_driving drive idles after 160 s):

* grip: a firm acceleration (~0.2 g, ~0.25 g on snow, close to its 0.3 peak), a firm braking, a second
  acceleration and a late braking, all under a PI speed controller;
* 8-DOF calibration: two single lane changes at speed (17 and 15 m/s, opposite phase so the heading returns),
  a 10 s coast-down from 15 m/s (the controller lets go: throttle 0, brake 0, straight), and straight
  throttle applications gaining >= 4 m/s.

The road is a track along x; each block's surface starts where the vehicle is at the block's start. Those
positions come from running the 14-DOF model on the drive (twice: the second run on the first run's road), so
the surfaces line up with the maneuvers over any length (a guess from the target speed drifts by the coasts).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import yaml

LAUNCH = 15.0      # s, 0 -> CRUISE before the first block
BLOCK = 60.0       # s per surface block
CRUISE = 12.0      # m/s at each block boundary
SURFACES = ("dry", "wet", "snow")


def block_targets(t0: float, surface: str) -> list[dict]:
    """Speed-target segments of one block starting at ``t0`` (speed CRUISE at t0 and at t0 + BLOCK)."""
    snow = surface == "snow"
    return [
        {"type": "ramp", "t0": t0 + 3.0, "t1": t0 + (5.0 if snow else 5.5), "to": 16.0 if snow else 17.0},
        {"type": "ramp", "t0": t0 + 16.0, "t1": t0 + 19.0, "to": 10.0 if snow else 9.0},   # firm braking
        {"type": "ramp", "t0": t0 + 22.0, "t1": t0 + 25.0, "to": 15.0},
        {"type": "step", "t0": t0 + 35.0, "value": 14.0},        # coasting (released): ~15 -> 14 m/s in 10 s
        {"type": "ramp", "t0": t0 + 46.0, "t1": t0 + (50.0 if snow else 49.0), "to": 9.0 if snow else 8.0},
        {"type": "ramp", "t0": t0 + 52.0, "t1": t0 + 55.0, "to": CRUISE},
    ]


def block_steering(t0: float, surface: str, k: int) -> list[dict]:
    """Two single lane changes at speed (one sine period each; opposite phases, so the heading returns)."""
    amp = 0.015 if surface == "snow" else 0.02
    phase = 0.0 if k % 2 == 0 else math.pi
    return [
        {"type": "sine", "t0": t0 + 8.0, "t1": t0 + 12.0, "amplitude": amp, "frequency": 0.25, "phase": phase},
        {"type": "sine", "t0": t0 + 28.0, "t1": t0 + 32.0, "amplitude": amp, "frequency": 0.25,
         "phase": phase + math.pi},
    ]


def drive(duration: float, surfaces: tuple[str, ...] = SURFACES) -> tuple[dict, list[tuple[float, str]]]:
    """The driver mapping and the blocks (start time, surface) that start before ``duration``."""
    targets = [{"type": "ramp", "t0": 1.0, "t1": 12.0, "from": 0.0, "to": CRUISE}]
    steering: list[dict] = []
    coast: list[dict] = []
    blocks: list[tuple[float, str]] = []
    k = 0
    while (t0 := LAUNCH + k * BLOCK) < duration:
        surface = surfaces[k % len(surfaces)]
        blocks.append((t0, surface))
        targets += block_targets(t0, surface)
        steering += block_steering(t0, surface, k)
        coast.append({"t0": t0 + 35.0, "t1": t0 + 45.0})
        k += 1
    driver = {"rate": 100, "speed_control": {"kp": 0.3, "ki": 0.05, "coast": coast, "target": targets},
              "steering": steering}
    return driver, blocks


def track(blocks: list[tuple[float, str]], x_at: list[float], x_end: float) -> list[dict]:
    """Contiguous surface intervals along x: block k's surface from x_at[k] to x_at[k + 1]."""
    edges = [-100.0] + [round(x, 1) for x in x_at[1:]] + [round(max(x_end, x_at[-1]) + 1000.0, 1)]
    return [{"surface": s, "x0": edges[i], "x1": edges[i + 1]} for i, (_, s) in enumerate(blocks)]


def scenario(duration: float, road: list[dict], surfaces: tuple[str, ...] = SURFACES) -> dict:
    driver, _ = drive(duration, surfaces)
    one = len(set(surfaces)) == 1
    return {
        "name": f"constant_{surfaces[0]}" if one else "long_drive",
        "description": (f"{duration / 60:g} min of driving on {surfaces[0]} road only" if one else
                        f"{duration / 60:g} min of driving over repeated dry/wet/snow sections")
                       + ", every 60 s block with firm accelerations and braking, lane changes at speed and a "
                         "coast-down",
        "duration": float(duration), "dt": 0.001, "seed": 0,
        "initial": {"speed": 0.0, "x": 0.0, "y": 0.0, "yaw": 0.0},
        "driver": driver,
        "road": {"default_mu": 0.9, "track": road},
        "sensors": {
            "wheel_speeds": {"rate": 100, "noise_std": 0.05},
            "odom": {"rate": 100, "noise_std": {"u": 0.02, "v": 0.02, "yaw_rate": 0.005}},
            "imu": {"rate": 100, "noise_std": {"roll": 0.002, "roll_rate": 0.002, "yaw_rate": 0.005,
                                               "ax": 0.05, "ay": 0.05, "az": 0.05}},
            "tire_forces": {"rate": 100, "noise_std": {"fx": 30.0, "fy": 30.0, "fz": 50.0}},
            "controls": {"rate": 100}, "ground_truth": {"rate": 100}, "clock": {"rate": 100}},
    }


def positions(data: dict, times: list[float]) -> tuple[list[float], float]:
    """x (m) of the 14-DOF model driven by the scenario at each of ``times`` (ascending), and at the end."""
    from vehcal_ros.io.scenarios import DriverProgram, parse_scenario
    from vehcal_ros.io.simulate import make_model

    sc = parse_scenario(data, source="long_drive")
    sim = make_model(sc)
    prog = DriverProgram(sc.driver)
    per = int(round(0.01 / sc.dt))
    n_end = int(round(sc.duration / sc.dt))
    out, i, out_state = [], 0, sim.outputs()
    for n in range(0, n_end, per):
        t = n * sc.dt
        while i < len(times) and times[i] <= t + 1e-9:
            out.append(float(out_state["x"]))
            i += 1
        sim.step(*prog.inputs_at(t, out_state), n_steps=per)
        out_state = sim.outputs()
    return out, float(out_state["x"])


def generate(duration: float, surfaces: tuple[str, ...] = SURFACES) -> dict:
    if len(set(surfaces)) == 1:   # one surface: the road is one section, no placement needed
        return scenario(duration, [{"surface": surfaces[0], "x0": -100.0, "x1": 1e6}], surfaces)
    _, blocks = drive(duration)
    times = [t for t, _ in blocks]
    guess = [CRUISE * (t - LAUNCH / 2) for t in times]
    data = scenario(duration, track(blocks, guess, guess[-1] + CRUISE * BLOCK))
    for _ in range(2):  # the surfaces change the drive a little: place them on the drive over them
        x_at, x_end = positions(data, times)
        data = scenario(duration, track(blocks, x_at, x_end))
    return data


HEADER = """# Long drive ({minutes:g} min) with excitation all the way through, generated by tools/long_drive.py
# (`tools/long_drive.py --duration S --out FILE` for any length; `vehcal simulate long_drive --duration S` cuts
# this one). 60 s blocks dry (0.9) -> wet (0.6) -> snow (0.3) repeated; each block: firm acceleration
# (~0.2 g; ~0.25 g on snow), lane change at 17 m/s, firm braking, acceleration, lane change at 15 m/s, a 10 s
# coast-down (speed controller released), braking and acceleration back to 12 m/s. Surface starts are where the
# 14-DOF model is at each block's start. Everyday sensor noise (as daily_driving).
"""


CONSTANT_HEADER = """# Constant road ({minutes:g} min on {surface}), made by tools/long_drive.py --surface {surface}.
# The long drive's 60 s blocks (firm acceleration, lane change, firm braking, acceleration, lane change, a 10 s
# coast-down, braking and acceleration back to 12 m/s) on a road that never changes. It checks that widening the
# grip belief for road changes that never come does not eat the answer. Everyday sensor noise (as daily_driving).
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=3600.0, help="s (default 3600)")
    ap.add_argument("--out", type=Path, default=Path("config/scenarios/long_drive.yaml"))
    ap.add_argument("--surface", choices=SURFACES, default=None,
                    help="drive every block on this one surface (the road never changes)")
    args = ap.parse_args()
    if not 60.0 <= args.duration <= 86400.0:
        ap.error(f"--duration {args.duration:g} is out of range [60, 86400] s")
    surfaces = (args.surface,) if args.surface else SURFACES
    data = generate(args.duration, surfaces)
    header = HEADER if args.surface is None else CONSTANT_HEADER
    text = header.format(minutes=args.duration / 60, surface=args.surface)
    text += yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=118)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    print(f"{args.out}: {args.duration:g} s, {len(drive(args.duration)[1])} blocks")


if __name__ == "__main__":
    main()
