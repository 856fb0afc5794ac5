"""A synthetic grip drive for the replay and node tests: a known magic-formula curve (friction paper Section 4.1)
under a slip sweep, the grip_estimator parameters that fit it quickly, the replay's published estimates and its
JSON without wall-clock fields, and a live grip_estimator fed the same records over DDS."""

from __future__ import annotations

import json

import numpy as np

from vehcal_ros.models.pacejka import mf_curve
from vehcal_ros.records import Controls, OdomSample, TireForce, WheelSpeeds
from vehcal_ros.replay.params import resolve_params

THETA = np.array([15.4, 1.60, 0.871, -1.09, 0.0, 0.0])
RATE, DURATION, R0, U, PERIOD = 25.0, 10.0, 0.47, 15.0, 3.0
# the friction paper's Table 3 bounds (a car tire like the paper's: the mechanics under test, not the priors); no
# belief publications between the fits (belief_period beyond the drive): the live node's messages are its fits
GRIP = {"r0": R0, "theta_lower": [5.0, 0.5, 0.2, -2.0, -0.05, -0.3], "theta_upper": [30.0, 2.0, 2.0, 0.0, 0.05, 0.3],
        "belief_period": 60.0, "max_peak_slip": 0.15, "fit_period": PERIOD, "n_chains": 4,
        "n_steps": 2000, "max_steps": 2000, "n_ml_starts": 4, "min_points": 20, "max_fit_points": 60,
        "min_new_points": 10, "min_ess": 10.0, "min_ess_tail": 10.0, "max_r_hat": 1.5, "min_excitation": 0.05,
        "average_window": 0.0, "speed_reference": "odometry"}   # the synthetic stream's odometry is its exact speed


def records(seed: int = 2) -> list[tuple[str, object]]:
    """(canonical topic, record) in stamp order from t = 1 / RATE (a live node refuses zero stamps): front and
    rear wheels sweep the slip between 0 and 0.08 every 2 s (rear at 80 %), forces from the curve plus noise."""
    rng = np.random.default_rng(seed)
    out: list[tuple[str, object]] = []
    for i in range(int(DURATION * RATE)):
        t = (i + 1) / RATE
        phase = (t / 2.0) % 1.0
        s = 0.08 * (2 * phase if phase < 0.5 else 2 - 2 * phase)
        slips = np.array([s, s, 0.8 * s, 0.8 * s])
        out.append(("/vehicle/wheel_speeds", WheelSpeeds(t=t, omega=U / (1 - slips) / R0)))
        for w in range(4):
            mu = float(mf_curve(np.array([slips[w]]), THETA)[0]) + 0.02 * rng.standard_normal()
            out.append(("/vehicle/tire_forces", TireForce(t=t, wheel=w, fx=mu * 5000.0, fy=0.0, fz=5000.0)))
        out.append(("/vehicle/odom", OdomSample(t=t, u=U, v=0.0, yaw_rate=0.0, x=U * t)))
        out.append(("/vehicle/controls", Controls(t=t, throttle=0.2, brake=0.0, steering=0.0)))
    return out


def published(result) -> dict[str, list[tuple[float, float, float, float]]]:
    """Per scope, every published estimate as the node's Vector3Stamped carries it: (stamp, mean, lower, upper)."""
    return {s: [(float(a), float(b), float(c), float(d)) for a, b, c, d in zip(g.stamp, g.mean, g.lower, g.upper)]
            for s, g in result.grip.items()}


def numbers(result) -> dict:
    """The result's JSON without wall-clock fields."""
    def strip(o):
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items()
                    if k not in ("elapsed_s", "elapsed_ml_s", "elapsed_mcmc_s", "sampling_s", "realtime_factor",
                                 "bag", "last_fit_s", "wall_s")}
        if isinstance(o, list):
            return [strip(v) for v in o]
        return o
    return strip(json.loads(json.dumps(result.to_dict())))


def live_grip_run(rclpy_context, items: list, replayed, name: str) -> tuple[dict, dict, dict]:
    """A live grip_estimator (GRIP params, sim time) fed ``items`` [(topic, record, arrival time)] over DDS one
    message at a time, /clock stepped to the replay's cycle times (first arrival + k PERIOD; a cycle runs before
    the first record arriving at or after it). Returns the replay's published estimates, the node's per scope
    [(t, mean, lower, upper)] once as many have arrived, and the node's drop counters."""
    from geometry_msgs.msg import Vector3Stamped
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from ros_util import spin_until, wait_for_match
    from rosgraph_msgs.msg import Clock

    from vehcal_ros.models.sensors import ClockTick
    from vehcal_ros.nodes.conversions import to_msg
    from vehcal_ros.nodes.grip_estimator import PARAMS, GripEstimatorNode, latched_qos

    declared = {s.name for s in PARAMS}
    values = resolve_params({"grip_estimator": GRIP})["grip_estimator"]
    node = GripEstimatorNode(context=rclpy_context, parameter_overrides=[
        *[Parameter(k, value=v) for k, v in values.items() if k in declared], Parameter("use_sim_time", value=True)])
    probe = Node(name, context=rclpy_context)
    live: dict[str, list] = {s: [] for s in replayed.grip}
    for scope, got in live.items():
        probe.create_subscription(Vector3Stamped, f"/vehcal/grip/{scope}", got.append, latched_qos())
    pubs = {}
    for topic, rec, _ in items:
        if topic not in pubs:
            pubs[topic] = (topic.rsplit("/", 1)[1], probe.create_publisher(type(to_msg(rec)), topic, 10))
    clock = probe.create_publisher(Clock, "/clock", 10)
    ex = SingleThreadedExecutor(context=rclpy_context)
    ex.add_node(node)
    ex.add_node(probe)
    try:
        assert all(wait_for_match(ex, p) for _, p in pubs.values()) and wait_for_match(ex, clock)
        received = node.pipeline.collector.counters.received
        sent = dict.fromkeys(received, 0)
        # the node's cycle clock starts at sim time 0 and fires when /clock reaches the first tick (>= one
        # period); from then on every period, as the replay's timer (first arrival + k periods)
        tick = items[0][2] + PERIOD
        for topic, rec, arrival in items:
            if arrival >= tick:   # the replay's rule: the cycle runs before the first record at or after its time
                clock.publish(to_msg(ClockTick(tick)))
                assert spin_until(ex, lambda t=tick: node.last_cycle_time >= t - 1e-9 and not node.busy, 60.0), tick
                tick += PERIOD
            key, pub = pubs[topic]
            pub.publish(to_msg(rec))
            sent[key] += 1
            assert spin_until(ex, lambda k=key: received[k] == sent[k], 10.0, step=0.001), (topic, rec.t)
        expected = published(replayed)
        assert spin_until(ex, lambda: all(len(live[s]) >= len(expected[s]) for s in live), 10.0)
        dropped = dict(node.pipeline.collector.counters.dropped)
    finally:
        node.shutdown()
        ex.shutdown()
        node.destroy_node()
        probe.destroy_node()
    got = {s: [(m.header.stamp.sec + m.header.stamp.nanosec * 1e-9, m.vector.x, m.vector.y, m.vector.z)
               for m in msgs] for s, msgs in live.items()}
    return expected, got, dropped
