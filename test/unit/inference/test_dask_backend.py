"""The Dask backend on a real LocalCluster (127.0.0.1, 2 worker processes): same numbers as the local pool."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import pytest

from vehcal_ros.commands.batch import run_batch
from vehcal_ros.estimation.calibration.brake_fit import (
    BrakeResidual,
    fit_brake,
    synthetic_data,
    synthetic_maneuver,
    write_brake_csv,
)
from vehcal_ros.inference.executors import DaskExecutor, make_executor, map_over_executor

distributed = pytest.importorskip("distributed")
# the scheduler's always-on HTTP endpoint binds 127.0.0.1 (our host); it only warns when 8787 is taken
pytestmark = pytest.mark.filterwarnings("ignore:Port 8787 is already in use:UserWarning")


@pytest.fixture(scope="module")
def cluster():
    cl = distributed.LocalCluster(host="127.0.0.1", processes=True, n_workers=2, threads_per_worker=1,
                                  dashboard_address=None)
    yield cl
    cl.close()


def _spec(cl) -> str:
    return "dask://" + cl.scheduler_address.removeprefix("tcp://")


def _square_or_fail(x: int) -> int:
    if x == 3:
        raise ValueError("three")
    return x * x


def test_dask_fit_equals_local(cluster):
    mv = synthetic_data(2, seed=4, dt=0.005)
    res = BrakeResidual(mv, dt=0.005)
    with make_executor(_spec(cluster)) as ex:
        assert isinstance(ex, DaskExecutor) and ex.max_workers == 2
        dk = fit_brake(mv, residual=res, executor=ex)
        out = map_over_executor(_square_or_fail, [1, 2, 3, 4], ex)
        client = ex.client
    assert client.status == "closed"  # the Client is closed with the executor
    assert [r.value for r in out] == [1, 4, None, 16] and "three" in out[2].error
    with make_executor("local", 2) as ex:
        loc = fit_brake(mv, residual=res, executor=ex)
    assert np.array_equal(dk.x, loc.x) and np.array_equal(dk.cov, loc.cov)
    assert (dk.n_residual_evals, dk.n_jacobian_evals) == (loc.n_residual_evals, loc.n_jacobian_evals)
    assert dk.n_workers == 2


def test_dask_batch_equals_local_batch(cluster, tmp_path):
    files = []
    for k in range(4):
        f = tmp_path / f"day{k}.csv"
        write_brake_csv(str(f), [synthetic_maneuver(u0=17.0 + k, brake_level=0.22 + 0.02 * k, duration=3.0,
                                                    dt=0.005, seed=20 + k, known_x0=False)])
        files.append(str(f))
    dk = run_batch(files, tmp_path / "dask", executor=_spec(cluster), progress=False)
    loc = run_batch(files, tmp_path / "local", executor="local", workers=2, progress=False)
    assert dk.n_ok == loc.n_ok == 4 and dk.workers == 2
    for k in range(4):
        a = json.loads((tmp_path / "dask" / f"day{k}.json").read_text())["result"]
        b = json.loads((tmp_path / "local" / f"day{k}.json").read_text())["result"]
        assert a["x"] == b["x"] and a["cov"] == b["cov"] and a["n_residual_evals"] == b["n_residual_evals"]
    s = json.loads(Path(tmp_path / "dask" / "summary.json").read_text())
    assert s["executor"].startswith("dask://127.0.0.1:") and s["n_ok"] == 4


def test_cluster_shuts_down():
    cl = distributed.LocalCluster(host="127.0.0.1", processes=True, n_workers=2, threads_per_worker=1,
                                  dashboard_address=None)
    host, port = cl.scheduler_address.removeprefix("tcp://").split(":")
    with make_executor(_spec(cl)) as ex:
        assert ex.submit(_square_or_fail, 5).result() == 25
    cl.close()
    assert cl.status.name == "closed"
    with pytest.raises(OSError):
        socket.create_connection((host, int(port)), timeout=1.0).close()
