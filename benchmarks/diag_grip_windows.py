"""What a grip window's friction samples get wrong, against the simulator's truth.

Replays a bag of ``bench_tire_forces.py --bag DIR`` (tire-force topic off, ``force_source: estimated``) with the
bench's grip parameters, records every fit's window (after the road-change rule, before the subsample), and
compares each 0.1 s friction sample with the ground truth of the same block (the truth of the scope's two wheels,
averaged over the block's 100 Hz samples; the wheel is the one whose true friction is nearer the sample's):

* slip and friction errors: bias, SD and SD of the z-scores under the stated variances, per road patch;
* the share of the slip error the two wheels of an axle have in common (the reference speed) and its
  regression on the IMU's jerk / speed (d a_x/dt / u, a_x smoothed over 9 samples): a wheel-centre speed that is
  not the body's at the wheel during load-transfer transients;
* for the windows named by ``--refit T,...``: the fit (the pipeline's configuration, its even subsample of
  ``max_fit_points``, seed 0) of the window as recorded, and with parts of it replaced by the truth: the slips
  (with a negligible variance, and with the stated one), the friction, the slips of the transient blocks only
  (|jerk| > ``--jerk``), the true slips plus fresh white noise of the stated variance (``--noise-seeds`` draws;
  ``--split``: also with the latent slips at the cruise or the excited blocks only), and the recorded window with
  the flat slip prior.
  Windows after a detected road change are refitted on their samples from the change on only.

Usage: python benchmarks/diag_grip_windows.py --vehicle V --bag DIR [--scope rear_axle] [--refit 49.9,59.9]
       python benchmarks/diag_grip_windows.py --description hmmwv_sim --bag BAG [--refit ...]   # shipped defaults
Not a test: a diagnosis aid whose figures benchmarks/README_tire_forces.md quotes.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import bench_tire_forces as bench  # noqa: E402

from vehcal_ros.estimation.grip import pipeline as gp  # noqa: E402
from vehcal_ros.estimation.grip.fit import GripEstimator  # noqa: E402
from vehcal_ros.estimation.grip.latent_slip import latent_slip  # noqa: E402
from vehcal_ros.io import bags  # noqa: E402
from vehcal_ros.io.scenarios import load_scenario  # noqa: E402
from vehcal_ros.records import GroundTruth, ImuSample, OdomSample  # noqa: E402
from vehcal_ros.replay.params import GRIP_NODE, grip_pipeline_from, node_values  # noqa: E402
from vehcal_ros.replay.serial import replay_bag  # noqa: E402


def grip_params(vehicle: str, tmp: Path) -> dict:
    """The bench's grip_estimator parameters for ``vehicle`` (bench_tire_forces.main)."""
    spec = load_scenario("daily_driving", vehicle=vehicle).sensors["wheel_speeds"]
    desc_path, _, geometry = bench.description_file(vehicle, tmp / f"{vehicle}_vehicle.yaml")
    return {"force_source": "estimated", "vehicle": str(desc_path),
            "torque_noise": float(spec.noise_std.get("torque", 0.0)),
            "wheel_speed_noise": float(spec.noise_std.get("omega", 0.0)) or 1e-3, **geometry}


def recorded_windows(bag: Path, params: dict) -> list[dict]:
    """Replay (one process, seed 0) recording each fit's window: scope, stamp, data, detected change."""
    rec: list[dict] = []
    original = gp.GripPipeline.current_surface

    def recording(self, data):
        kept, change = original(self, data)
        last = change.time if change is not None else self.status[data.scope].last_surface_change
        rec.append({"scope": data.scope, "t_end": data.t_end, "kept": kept, "since": last})
        return kept, change

    gp.GripPipeline.current_surface = recording
    try:
        replay_bag(bag, params={"grip_estimator": params}, seed=0, calibration=False, workers=1)
    finally:
        gp.GripPipeline.current_surface = original
    return rec


def read_signals(bag: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(truth rows t, slip x4, slip angle x4, fx x4, fz x4, mu_max x4; IMU t, a_x; odometry t, u)."""
    truth, imu, odom = [], [], []
    for _, r in bags.read_bag(bag):
        if isinstance(r, GroundTruth) and r.fx is not None:
            truth.append(np.concatenate([[r.t], r.slip, r.slip_angle, r.fx, r.fz, r.mu_max]))
        elif isinstance(r, ImuSample):
            imu.append((r.t, r.ax))
        elif isinstance(r, OdomSample):
            odom.append((r.t, r.u))
    return np.array(truth), np.array(imu), np.array(odom)


BLOCK = 0.1
"""s, the collector's ``average_window`` (the bench's): a block stamped t holds the samples of [t - 0.05, t + 0.05)."""


def block_truth(truth: np.ndarray, t: np.ndarray, mu: np.ndarray, wheels: list[int], rho: float,
                shift: float = 0.0) -> np.ndarray:
    """Per sample (true slip, true friction, true |sin alpha| / rho) of its block [t - 0.05, t + 0.05) moved by
    ``shift`` s, of the wheel whose true friction is nearer the sample's. The truth is interpolated linearly to
    ten points spread over the block and averaged, so that a ground truth slower than the blocks (the CommonRoad
    drives' 20 Hz) is centred on the block as the 100 Hz truth of the built-in simulator is."""
    T = truth[:, 0]
    grid = (t[:, None] + shift) + BLOCK * ((np.arange(10) + 0.5) / 10 - 0.5)   # (samples, 10)
    cands = []
    for w in wheels:
        slip = np.interp(grid, T, truth[:, 1 + w]).mean(axis=1)
        fric = np.interp(grid, T, truth[:, 9 + w] / truth[:, 13 + w]).mean(axis=1)
        lat = np.interp(grid, T, np.abs(np.sin(truth[:, 5 + w]))).mean(axis=1) / rho
        cands.append(np.column_stack([slip, fric, lat]))
    pick = np.argmin(np.abs(np.stack([c[:, 1] for c in cands]) - mu[None, :]), axis=0)
    return np.stack(cands)[pick, np.arange(t.size)]


def jerk_at(imu: np.ndarray, t: np.ndarray, reduce=np.mean) -> np.ndarray:
    """d a_x / dt (a_x smoothed over 9 samples) reduced over each block [t - 0.05, t + 0.05)."""
    ax = np.convolve(imu[:, 1], np.ones(9) / 9, "same")
    jerk = np.gradient(ax, imu[:, 0])
    return np.array([reduce(jerk[(imu[:, 0] >= tj - BLOCK / 2 - 1e-9) & (imu[:, 0] < tj + BLOCK / 2 - 1e-9)])
                     for tj in t])


def sample_errors(rec: list[dict], scope: str, truth, imu, odom, rho: float) -> None:
    """Print the slip / friction error figures of every distinct sample of ``scope``'s windows."""
    seen = {}
    for r in rec:
        if r["scope"] == scope:
            k = r["kept"]
            for i in range(k.t.size):
                seen[(round(k.t[i], 3), round(k.slip[i], 7))] = (k.t[i], k.slip[i], k.mu[i], k.slip_var[i],
                                                                  k.mu_var[i])
    a = np.array(sorted(seen.values()))
    wheels = [0, 1] if scope.startswith("front") else [2, 3]
    tb = block_truth(truth, a[:, 0], a[:, 2], wheels, rho)
    es, em = a[:, 1] - tb[:, 0], a[:, 2] - tb[:, 1]
    changes = np.flatnonzero(np.abs(np.diff(truth[:, 17 + wheels[0]])) > 0.05)
    print(f"{scope}: {a.shape[0]} samples; truth road changes at {np.round(truth[changes + 1, 0], 2).tolist()} s")
    for name, m in (("all", np.ones(a.shape[0], bool)), ("|mu| > 0.1", np.abs(tb[:, 1]) > 0.1)):
        print(f"  {name:10s} slip err {np.mean(es[m]):+.5f} sd {np.std(es[m]):.5f} "
              f"(z-SD {np.std(es[m] / np.sqrt(a[m, 3])):.2f}) | mu err {np.mean(em[m]):+.4f} sd {np.std(em[m]):.4f} "
              f"(z-SD {np.std(em[m] / np.sqrt(a[m, 4])):.2f})")
    excited = np.abs(tb[:, 1]) > 0.05
    rms = {}
    for shift in np.arange(-0.06, 0.0601, 0.01):
        sh = block_truth(truth, a[excited, 0], a[excited, 2], wheels, rho, shift)
        rms[round(float(shift), 2)] = (np.sqrt(np.mean((a[excited, 2] - sh[:, 1]) ** 2)),
                                       np.sqrt(np.mean((a[excited, 1] - sh[:, 0]) ** 2)))
    print("  RMS error of the excited samples (|mu| > 0.05) against the truth moved by shift s (mu, slip): "
          + ", ".join(f"{k:+.2f}: {v[0]:.4f} / {v[1]:.5f}" for k, v in rms.items()))
    stamps, idx = np.unique(np.round(a[:, 0], 3), return_inverse=True)
    pairs = [np.flatnonzero(idx == k) for k in range(stamps.size)]
    pairs = [p for p in pairs if p.size == 2]
    mean = np.array([es[p].mean() for p in pairs])
    half = np.array([(es[p[0]] - es[p[1]]) / 2 for p in pairs])
    common = max(mean.var() - half.var(), 0.0)
    print(f"  slip error shared by the axle's two wheels: {common / (common + 2 * half.var()):.2f} of its variance")
    u = np.interp(a[:, 0], odom[:, 0], odom[:, 1])
    x = jerk_at(imu, a[:, 0]) / u
    for name, m in (("all", np.ones(a.shape[0], bool)), ("|jerk| > 2 m/s^3", np.abs(x * u) > 2.0)):
        if m.sum() > 2:
            slope = np.cov(x[m], es[m])[0, 1] / np.var(x[m])
            print(f"  slip err on jerk/u, {name}: n {m.sum()}, corr {np.corrcoef(x[m], es[m])[0, 1]:+.2f}, "
                  f"slope {slope:.4f} s^2")


def since_change(r: dict):
    """A recorded window's samples from its detected road change on (all of them without a change)."""
    k = r["kept"]
    if not np.isfinite(r["since"]):
        return k
    keep = k.t >= r["since"]
    return dataclasses.replace(k, **{f.name: getattr(k, f.name)[keep] for f in dataclasses.fields(k)
                                     if isinstance(getattr(k, f.name), np.ndarray)})


def refits(rec: list[dict], scope: str, times: list[float], pipeline, truth, imu, rho: float, jerk: float,
           noise_seeds: int, split: bool = False) -> None:
    """Refit the named windows with parts replaced by the truth (module docstring)."""
    wheels = [0, 1] if scope.startswith("front") else [2, 3]

    def show(e):
        return f"{e.mu_max_mean:.3f} [{e.mu_max_lower:.3f}, {e.mu_max_upper:.3f}]"

    for r in rec:
        if r["scope"] != scope or not any(abs(r["t_end"] - x) < 0.3 for x in times):
            continue
        k = since_change(r)
        tb = block_truth(truth, k.t, k.mu, wheels, rho)
        transient = jerk_at(imu, k.t, lambda v: np.max(np.abs(v))) > jerk
        tiny = np.full(k.t.size, 1e-10)
        variants = [("as recorded", k), ("true slip", dataclasses.replace(k, slip=tb[:, 0], slip_var=tiny)),
                    ("true slip, stated slip_var", dataclasses.replace(k, slip=tb[:, 0])),
                    ("true mu", dataclasses.replace(k, mu=tb[:, 1], mu_var=tiny)),
                    (f"true slip at |jerk| > {jerk:g}",
                     dataclasses.replace(k, slip=np.where(transient, tb[:, 0], k.slip)))]
        for s in range(noise_seeds):
            noisy = tb[:, 0] + np.sqrt(k.slip_var) * np.random.default_rng(s).standard_normal(k.t.size)
            variants.append((f"true slip + white noise #{s}", dataclasses.replace(k, slip=noisy)))
            variants.append((f"true slip + white noise #{s}, flat", dataclasses.replace(k, slip=noisy)))
        config = dataclasses.replace(pipeline.fit_config, seed=0)
        variants.append(("flat slip prior", k))
        if split:   # which samples' deconvolution moves the fit: latent slips at |true mu| < 0.05 or >= 0.05 only
            for s in range(noise_seeds):
                noisy = tb[:, 0] + np.sqrt(k.slip_var) * np.random.default_rng(s).standard_normal(k.t.size)
                d = gp.subsample(dataclasses.replace(k, slip=noisy), pipeline.max_fit_points, "even", False)
                low = np.abs(block_truth(truth, d.t, d.mu, wheels, rho)[:, 1]) < 0.05
                m, w = latent_slip(d.slip, d.slip_var)
                for part, where in (("cruise", low), ("excited", ~low)):
                    variants.append((f"noise #{s}, deconvolved at {part} only, flat",
                                     dataclasses.replace(d, slip=np.where(where, m, d.slip),
                                                         slip_var=np.where(where, w, d.slip_var))))
        print(f"{scope} window ending {r['t_end']:.1f} s ({k.t.size} samples since {r['since']:.2f} s, "
              f"{transient.sum()} transient):")
        for name, d in variants:
            cfg = dataclasses.replace(config, slip_prior="flat") if "flat" in name else config
            d = gp.subsample(d, pipeline.max_fit_points, "even", cfg.slip_prior == "deconvolved")
            e = GripEstimator(cfg).fit(d.slip, d.mu, slip_var=d.slip_var, mu_var=d.mu_var, lateral=d.lat)
            print(f"  {name:30s} {show(e)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vehicle", default="hmmwv")
    ap.add_argument("--bag", required=True, help="a bag written by bench_tire_forces.py --bag DIR (same vehicle)")
    ap.add_argument("--description", default=None,
                    help="replay with the shipped defaults and this vehicle description (name or file) instead of "
                         "the bench's parameters: any simulated bag with a ground-truth topic, e.g. "
                         "grip_over_time.py's")
    ap.add_argument("--forces", default="estimated", choices=("estimated", "measured"),
                    help="with --description: the force source of the replay (measured: the tire-force topic)")
    ap.add_argument("--scope", default="front_axle")
    ap.add_argument("--refit", default="", help="stamps (s) of windows to refit, comma separated")
    ap.add_argument("--jerk", type=float, default=2.0, help="m/s^3: a block with |d a_x/dt| above is transient")
    ap.add_argument("--noise-seeds", type=int, default=2)
    ap.add_argument("--split", action="store_true",
                    help="also refit the noisy true slips with the latent slips at the cruise (|true mu| < 0.05) or "
                         "the excited blocks only (the other samples as measured, flat prior)")
    args = ap.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        params = ({"force_source": args.forces, "vehicle": args.description} if args.description
                  else grip_params(args.vehicle, Path(tmp)))
        pipeline = grip_pipeline_from(node_values({"grip_estimator": params}, 0)[GRIP_NODE])
        rec = recorded_windows(Path(args.bag), params)
    truth, imu, odom = read_signals(Path(args.bag))
    rho = pipeline.signal_config.lateral_ratio
    sample_errors(rec, args.scope, truth, imu, odom, rho)
    if args.refit:
        refits(rec, args.scope, [float(x) for x in args.refit.split(",")], pipeline, truth, imu, rho, args.jerk,
               args.noise_seeds, args.split)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
