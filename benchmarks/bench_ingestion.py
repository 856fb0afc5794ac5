"""Live ingestion: how many messages per second each estimator node takes over DDS, and where the time goes.

Each node (``grip_estimator``, ``model_calibrator``) is started in its own process the way the launch file
starts it (``python -m vehcal_ros.nodes.<node>``, i.e. its ``main``); an independent publisher process (its own
rclpy node, header stamps = its clock) sends that node's input topics at a fixed rate per topic (wheel speeds,
4 WrenchStamped per step for the tire forces, odometry, IMU, controls) for ``--seconds`` per rate. The grip data
excite a known Pacejka curve, so the grip node's fits run during the measurement. Messages sent are compared with
the ``received_<topic>`` counts on the node's /diagnostics; the node's CPU time over the window (from /proc)
gives messages/s per core.

``--profile`` times the parts of the path in this process (no DDS): deserialisation (rclpy's C conversion of a
serialised message), conversion to a record, the lock, the per-message cycle check and the pipeline append;
the executor's share is the CPU per message measured over DDS minus these.

Run::

    ROS_DOMAIN_ID=28 .venv/bin/python benchmarks/bench_ingestion.py --rates 100,500,1000 --seconds 20
    .venv/bin/python benchmarks/bench_ingestion.py --profile
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "test"))
from ros_util import stop  # noqa: E402  (the tests' subprocess stop)

WHEELS = ("wheel_fl", "wheel_fr", "wheel_rl", "wheel_rr")
NODE_TOPICS = {
    "grip_estimator": ("wheel_speeds", "tire_forces", "odom", "controls"),
    "model_calibrator": ("wheel_speeds", "imu", "odom", "controls"),
    # the floor under any node: an rclpy node on the EventsExecutor whose callbacks only count (``--floor``)
    "floor_typed": ("wheel_speeds", "tire_forces", "odom", "controls"),   # messages deserialised by rclpy
    "floor_raw": ("wheel_speeds", "tire_forces", "odom", "controls"),     # serialised bytes (raw=True)
}
THETA = (15.4, 1.60, 0.871, -1.09, 0.0, 0.0)   # friction paper Section 4.1


# ----------------------------------------------------------------------------------------------- publisher
def _publisher(args: argparse.Namespace) -> None:
    """The independent vehicle: publish ``args.topics`` at ``args.rate`` Hz per topic for ``args.seconds``."""
    import numpy as np
    import rclpy
    from builtin_interfaces.msg import Time
    from geometry_msgs.msg import WrenchStamped
    from nav_msgs.msg import Odometry
    from rclpy.node import Node
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Imu, JointState, Joy

    topics = args.topics.split(",")
    rclpy.init()
    node = Node("ingestion_vehicle")
    qos = qos_profile_sensor_data
    pubs = {}
    if "wheel_speeds" in topics:
        pubs["wheel_speeds"] = node.create_publisher(JointState, "/vehicle/wheel_speeds", qos)
    if "tire_forces" in topics:
        pubs["tire_forces"] = node.create_publisher(WrenchStamped, "/vehicle/tire_forces", qos)
    if "odom" in topics:
        pubs["odom"] = node.create_publisher(Odometry, "/vehicle/odom", qos)
    if "imu" in topics:
        pubs["imu"] = node.create_publisher(Imu, "/vehicle/imu", qos)
    if "controls" in topics:
        pubs["controls"] = node.create_publisher(Joy, "/vehicle/controls", qos)
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline and min(p.get_subscription_count() for p in pubs.values()) == 0:
        time.sleep(0.05)
    time.sleep(2.0)   # discovery of the reverse direction (slow on a loaded machine)

    B, C, D, E, _, _ = THETA
    rng = np.random.default_rng(args.seed)
    dt = 1.0 / args.rate
    n = int(round(args.seconds * args.rate))
    speed, fz, r_eff = 15.0, 5000.0, 0.47 - 5000.0 / 326332.0
    js = JointState(name=list(WHEELS), velocity=[0.0] * 4)
    od = Odometry()
    od.header.frame_id, od.child_frame_id = "odom", "base_link"
    imu = Imu()
    imu.orientation.w = 1.0
    joy = Joy(axes=[0.2, 0.0, 0.0])
    forces = [WrenchStamped() for _ in WHEELS]
    for w, name in zip(forces, WHEELS):
        w.header.frame_id = name
        w.wrench.force.z = fz
    sent = dict.fromkeys(pubs, 0)
    t_wall0 = time.monotonic()
    t_stamp0 = time.time()
    for k in range(n):
        t = t_stamp0 + k * dt
        sec = math.floor(t)
        stamp = Time(sec=int(sec), nanosec=int((t - sec) * 1e9))
        phase = (k * dt / 4.0) % 1.0
        s = 0.06 * (2 * phase if phase < 0.5 else 2 * (1 - phase)) * rng.uniform(0.8, 1.0, 4)
        x = B * s
        mu = D * np.sin(C * np.arctan(x - E * (x - np.arctan(x)))) + rng.normal(0.0, 0.0253, 4)
        if "wheel_speeds" in pubs:
            js.header.stamp = stamp
            js.velocity = [float(v) for v in speed / (1.0 - s) / r_eff]
            pubs["wheel_speeds"].publish(js)
        if "odom" in pubs:
            od.header.stamp = stamp
            od.twist.twist.linear.x = speed
            pubs["odom"].publish(od)
        if "imu" in pubs:
            imu.header.stamp = stamp
            imu.angular_velocity.z = 0.01
            pubs["imu"].publish(imu)
        if "controls" in pubs:
            joy.header.stamp = stamp
            pubs["controls"].publish(joy)
        if "tire_forces" in pubs:
            for i, w in enumerate(forces):
                w.header.stamp = stamp
                w.wrench.force.x = float(mu[i] * fz)
                pubs["tire_forces"].publish(w)
            sent["tire_forces"] += 3
        for key in sent:
            sent[key] += 1
        lag = t_wall0 + (k + 1) * dt - time.monotonic()
        if lag > 0:
            time.sleep(lag)
    wall = time.monotonic() - t_wall0
    print(json.dumps({"sent": sent, "wall_s": wall, "steps": n}), flush=True)
    node.destroy_node()
    rclpy.shutdown()


# ----------------------------------------------------------------------------------------------- floor
def _floor(kind: str) -> None:
    """The cost of taking messages at all: a node with the grip node's subscriptions (same QoS) on the
    EventsExecutor whose callbacks only count; ``typed``: rclpy deserialises each message into its Python class,
    ``raw``: the callback gets the serialised bytes. Publishes ``floor_<kind>: inputs`` with ``received_<topic>``
    every second, as the nodes do."""
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import WrenchStamped
    from nav_msgs.msg import Odometry
    from rclpy.node import Node
    from sensor_msgs.msg import JointState, Joy

    from vehcal_ros.nodes.common import diag_array, diag_status, make_executor
    from vehcal_ros.nodes.grip_estimator import sensor_qos

    rclpy.init()
    node = Node(f"floor_{kind}")
    counts = dict.fromkeys(NODE_TOPICS[f"floor_{kind}"], 0)
    classes = {"wheel_speeds": JointState, "tire_forces": WrenchStamped, "odom": Odometry, "controls": Joy}

    def counter(topic: str):
        def cb(_msg) -> None:
            counts[topic] += 1
        return cb

    for topic, cls in classes.items():
        node.create_subscription(cls, f"/vehicle/{topic}", counter(topic),
                                 sensor_qos(8000 if topic == "tire_forces" else 2000), raw=kind == "raw")
    pub = node.create_publisher(DiagnosticArray, "/diagnostics", 10)
    node.create_timer(1.0, lambda: pub.publish(diag_array(node, [diag_status(
        f"floor_{kind}: inputs", "floor", 0, "counting", {f"received_{t}": n for t, n in counts.items()})])))
    ex = make_executor(node.context)
    ex.add_node(node)
    try:
        while rclpy.ok():
            ex.spin_once(timeout_sec=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        ex.shutdown(timeout_sec=1.0)
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()


# ------------------------------------------------------------------------------------------ orchestrator
def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Diagnostics:
    """A probe node in this process keeping the last /diagnostics status of each name."""

    def __init__(self) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node

        self.ctx = Context()
        rclpy.init(context=self.ctx)
        self.node = Node("ingestion_probe", context=self.ctx)
        self.last: dict[str, dict[str, str]] = {}
        self.history: list[tuple[float, str, dict[str, str]]] = []
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on, 50)
        self.ex = SingleThreadedExecutor(context=self.ctx)
        self.ex.add_node(self.node)

    def _on(self, msg) -> None:
        t = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        for st in msg.status:
            kv = {v.key: v.value for v in st.values}
            kv["_level"], kv["_message"] = str(st.level[0] if isinstance(st.level, bytes) else st.level), st.message
            self.last[st.name] = kv
            self.history.append((t, st.name, kv))

    def spin(self, seconds: float, until=None) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if until is not None and until():
                return True
            self.ex.spin_once(timeout_sec=0.05)
        return until() if until is not None else True

    def close(self) -> None:
        import rclpy

        self.node.destroy_node()
        rclpy.shutdown(context=self.ctx)


def _received(diag: _Diagnostics, name: str, topics: tuple[str, ...], since: float) -> dict[str, float]:
    """Messages the node counted per topic: its ``received_<topic>`` values, else the integral of its rates
    (nodes that only published rates)."""
    last = diag.last.get(name, {})
    if all(f"received_{t}" in last for t in topics):
        return {t: float(last[f"received_{t}"]) for t in topics}
    rows = [(t, kv) for t, n, kv in diag.history if n == name]
    out = dict.fromkeys(topics, 0.0)
    for (t0, _), (t1, kv) in zip(rows, rows[1:]):
        if t1 < since:
            continue
        for tp in topics:
            out[tp] += float(kv.get(f"rate_{tp}_hz", 0.0)) * (t1 - t0)
    return out


def measure(node: str, rate: float, seconds: float, log_dir: Path, extra: list[str]) -> dict:
    """One node, one rate: sent vs received per topic, node CPU, fits completed."""
    topics = NODE_TOPICS[node]
    name = f"{node}: inputs"
    env = dict(os.environ)
    log = open(log_dir / f"{node}_{int(rate)}.log", "w")  # noqa: SIM115
    cmd = ([sys.executable, __file__, "--floor", node.split("_", 1)[1]] if node.startswith("floor_") else
           [sys.executable, "-m", f"vehcal_ros.nodes.{node}", "--ros-args",
            "-p", "diagnostics_period:=1.0", "-p", "stale_timeout:=5.0", *extra])
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    diag = _Diagnostics()
    try:
        if not diag.spin(60.0, until=lambda: name in diag.last):
            raise RuntimeError(f"{node} did not publish /diagnostics (log {log.name})")
        pub = subprocess.Popen([sys.executable, __file__, "--publisher", "--rate", str(rate), "--seconds",
                                str(seconds), "--topics", ",".join(topics)], env=env, stdout=subprocess.PIPE,
                               text=True)
        cpu0 = wall0 = None
        t_start = time.time()
        while pub.poll() is None:
            diag.spin(0.2)
            if cpu0 is None and time.time() - t_start > 1.0:   # discovery done; the stream has started
                cpu0, wall0 = _cpu_seconds(proc.pid), time.monotonic()
        cpu1, wall1 = _cpu_seconds(proc.pid), time.monotonic()
        out = json.loads(pub.stdout.read().strip().splitlines()[-1])
        diag.spin(3.0)   # the last diagnostics after the stream (queues drained)
        received = _received(diag, name, topics, t_start)
        sent = out["sent"]
        drops = {t: 1.0 - received[t] / sent[t] if sent[t] else math.nan for t in topics}
        fits = sum(int(float(kv.get("n_fits", 0))) + int(float(kv.get("n_failed", 0)))
                   for n, kv in diag.last.items() if n.startswith(f"{node}:") and n != name)
        cpu = (cpu1 - cpu0) / max(wall1 - wall0, 1e-9) if cpu0 is not None else math.nan
        total_recv = sum(received.values())
        return {"node": node, "rate_hz": rate, "seconds": seconds, "sent": sent,
                "received": {t: int(round(v)) for t, v in received.items()},
                "drop_pct": {t: round(100.0 * d, 2) for t, d in drops.items()},
                "publisher_wall_s": round(out["wall_s"], 2), "node_cpu_cores": round(cpu, 3),
                "msgs_per_s": round(total_recv / out["wall_s"], 1),
                "msgs_per_cpu_s": round(total_recv / out["wall_s"] / cpu, 1) if cpu > 0 else math.nan,
                "fits_completed": fits,   # fits that ended (published or not) while the stream ran
                "inputs_message": diag.last.get(name, {}).get("_message", ""),
                # the node's own CPU report at the end (cpu_share_10s/60s, cpu_budget, shed_cycles, ...)
                "cpu_status": diag.last.get(f"{node}: cpu", {})}
    finally:
        diag.close()
        stop(proc, timeout=20.0)
        log.close()


# ------------------------------------------------------------------------------------------------ profile
def profile(n: int = 21000) -> dict[str, dict[str, float]]:
    """Microseconds per message of each part of the grip node's path (no DDS), per topic: a 1 kHz stream of
    all four topics interleaved as they arrive (forces need wheel speeds and odometry around their stamps).

    Columns: ``rclpy_deserialise`` (rclpy's conversion of the serialised message into its Python class: the
    typed subscriptions' cost, before raw=True), ``typed_convert`` (that message -> record), ``raw_read`` (the
    serialised bytes -> record, nodes/raw_messages.py: what the nodes do now), ``clock`` (the node's ROS-time
    read), ``lock``, ``cycle_check`` (the per-message schedule check), ``guard_and_append`` (input guard and
    pipeline append under the lock, in stream order), ``whole_callback`` (the node's subscription callback on
    the serialised bytes, in stream order, on a fresh node)."""
    import threading

    import rclpy
    from geometry_msgs.msg import WrenchStamped
    from nav_msgs.msg import Odometry
    from rclpy.context import Context
    from rclpy.serialization import deserialize_message, serialize_message
    from sensor_msgs.msg import JointState, Joy

    from vehcal_ros.nodes import conversions
    from vehcal_ros.nodes.grip_estimator import GripEstimatorNode

    ctx = Context()
    rclpy.init(context=ctx)
    t0 = time.time()
    classes = {"wheel_speeds": JointState, "tire_forces": WrenchStamped, "odom": Odometry, "controls": Joy}
    typed = {"wheel_speeds": conversions.msg_to_wheel_speeds, "tire_forces": conversions.msg_to_tire_force,
             "odom": conversions.msg_to_odom, "controls": conversions.msg_to_controls}
    raw = {"wheel_speeds": conversions.raw_to_wheel_speeds, "tire_forces": conversions.raw_to_tire_force,
           "odom": conversions.raw_to_odom, "controls": conversions.raw_to_controls}
    callbacks = {"wheel_speeds": "_on_wheels", "tire_forces": "_on_force", "odom": "_on_odom",
                 "controls": "_on_controls"}
    stream: list[tuple[str, object, bytes]] = []   # (topic, message, serialised) in arrival order
    for step in range(n // 7):
        ts = t0 + step * 1e-3
        js = JointState(name=list(WHEELS), velocity=[32.0 + 0.01 * (step % 7)] * 4)
        od = Odometry()
        od.twist.twist.linear.x = 15.0
        joy = Joy(axes=[0.2, 0.0, 0.0])
        forces = []
        for w in WHEELS:
            f = WrenchStamped()
            f.header.frame_id = w
            f.wrench.force.x, f.wrench.force.z = 2000.0 + step % 50, 5000.0
            forces.append(f)
        for topic, m in [("wheel_speeds", js), *[("tire_forces", f) for f in forces], ("odom", od),
                         ("controls", joy)]:
            m.header.stamp.sec = int(ts)
            m.header.stamp.nanosec = int((ts % 1.0) * 1e9)
            stream.append((topic, m, serialize_message(m)))
    topics = list(classes)
    count = {t: sum(1 for x in stream if x[0] == t) for t in topics}

    def per_message(fn, items) -> dict[str, float]:
        out = {}
        for t in topics:
            sel = [x for x in items if x[0] == t]
            start = time.thread_time()
            for x in sel:
                fn(x)
            out[t] = (time.thread_time() - start) / len(sel) * 1e6
        return out

    def in_order(node, fn) -> dict[str, float]:
        """Per-topic CPU of ``fn(node, item)`` over the stream in arrival order (timer overhead ~0.1 us)."""
        acc = dict.fromkeys(topics, 0.0)
        for x in stream:
            start = time.thread_time()
            fn(node, x)
            acc[x[0]] += time.thread_time() - start
        return {t: acc[t] / count[t] * 1e6 for t in topics}

    node = GripEstimatorNode(context=ctx)
    fr = node._frames
    cols: dict[str, dict[str, float]] = {}
    cols["rclpy_deserialise_us"] = per_message(lambda x: deserialize_message(x[2], classes[x[0]]), stream)
    cols["typed_convert_us"] = per_message(lambda x: typed[x[0]](x[1], fr), stream)
    cols["raw_read_us"] = per_message(lambda x: raw[x[0]](x[2], fr), stream)
    cols["clock_us"] = per_message(lambda x: node._now(), stream)
    lock = threading.Lock()

    def locking(x) -> None:
        with lock:
            pass

    cols["lock_us"] = per_message(locking, stream)
    cols["cycle_check_us"] = per_message(lambda x: node._tick(1.0), stream)
    records = [(t, raw[t](b, fr)) for t, _, b in stream]

    def feed(nd, x) -> None:
        rec = records[x[3]][1]
        with nd._lock:
            if nd.guard.check(x[0], rec) is None:
                nd.pipeline.add(rec)
            else:
                nd.pipeline.collector.reject(x[0], "guard")

    stream = [(t, m, b, k) for k, (t, m, b) in enumerate(stream)]
    cols["guard_and_append_us"] = in_order(node, feed)
    node.shutdown()
    node.destroy_node()
    fresh = GripEstimatorNode(context=ctx)
    cols["whole_callback_us"] = in_order(fresh, lambda nd, x: getattr(nd, callbacks[x[0]])(x[2]))
    fresh.shutdown()
    fresh.destroy_node()
    rclpy.shutdown(context=ctx)
    return {t: {c: round(v[t], 2) for c, v in cols.items()} for t in topics}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--publisher", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--topics", default="", help=argparse.SUPPRESS)
    ap.add_argument("--floor", choices=("typed", "raw"), help=argparse.SUPPRESS)
    ap.add_argument("--rate", type=float, default=100.0, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--rates", default="100,500,1000", help="rates per topic, Hz (comma separated)")
    ap.add_argument("--seconds", type=float, default=20.0, help="stream length per rate, s")
    ap.add_argument("--nodes", default="grip_estimator,model_calibrator",
                    help="nodes to measure; floor_typed / floor_raw: an rclpy node whose callbacks only count "
                    "(deserialised / serialised messages), the cost of taking messages at all")
    ap.add_argument("--profile", action="store_true", help="time the parts of the path in this process")
    ap.add_argument("--node-args", default="", help="extra ROS arguments for the node, e.g. '-p fit_period:=3600.0' "
                    "(ingestion alone: no fit cycle during the stream)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--label", default="", help="a label stored with the results (e.g. before/after)")
    args = ap.parse_args()
    if args.publisher:
        _publisher(args)
        return
    if args.floor:
        _floor(args.floor)
        return
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    results: dict = {"label": args.label, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     "load_before": os.getloadavg(), "runs": []}
    if args.profile:
        results["profile_us"] = prof = profile()
        for topic, row in prof.items():
            print(f"{topic:13s} " + "  ".join(f"{k} {v:6.2f}" for k, v in row.items()), flush=True)
    else:
        log_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_ingestion_{os.getpid()}"
        log_dir.mkdir(parents=True, exist_ok=True)
        for node in args.nodes.split(","):
            for rate in (float(r) for r in args.rates.split(",")):
                row = measure(node, rate, args.seconds, log_dir, args.node_args.split())
                row["load"] = os.getloadavg()[0]
                results["runs"].append(row)
                print(f"{node:17s} {rate:6.0f} Hz  drops % {row['drop_pct']}  {row['msgs_per_s']:8.1f} msg/s  "
                      f"cpu {row['node_cpu_cores']:.2f} cores  {row['msgs_per_cpu_s']:8.1f} msg/cpu-s  "
                      f"fits {row['fits_completed']}  load {row['load']:.2f}", flush=True)
                if row["cpu_status"]:
                    c = row["cpu_status"]
                    print(f"{'':17s} node's cpu status: share 10 s {c.get('cpu_share_10s')} %, 60 s "
                          f"{c.get('cpu_share_60s')} %, budget {c.get('cpu_budget')}, shed cycles "
                          f"{c.get('shed_cycles')}, stretch {c.get('cycle_stretch')}: {c.get('_message')}", flush=True)
    results["load_after"] = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
