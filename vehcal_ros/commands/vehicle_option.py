"""``--vehicle NAME|FILE`` shared by the CLI verbs: validates the description and sets the
``vehicle`` parameter of the nodes that take one in a params mapping ``{node: {param: value}}``."""

from __future__ import annotations

import argparse
from typing import Any

VEHICLE_NODES = ("model_calibrator", "grip_estimator")
"""Nodes whose ``vehicle`` parameter ``--vehicle`` sets (the simulator's is set by its own verb options); both take
every vehicle fact from it (the grip estimator's slip geometry, rolling radius, steering, toe and force-estimator
constants; the calibrator's model constants and priors)."""


def add_vehicle_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vehicle", metavar="NAME|FILE", default=None,
                   help="vehicle description: a name in config/vehicles/ (hmmwv, sedan) or a YAML file "
                        "(docs/vehicle_description.md), the only vehicle input needed; default: the params' (hmmwv)")


def apply_vehicle(params: dict[str, dict[str, Any]], vehicle: str | None,
                  nodes: tuple[str, ...] = VEHICLE_NODES) -> dict[str, dict[str, Any]]:
    """``params`` with ``vehicle`` set on ``nodes`` (validated first: a bad name or file is one InputError)."""
    if not vehicle:
        return params
    from vehcal_ros.vehicle.description import load_description

    load_description(vehicle)
    out = {k: dict(v) for k, v in params.items()}
    for node in nodes:
        out.setdefault(node, {})["vehicle"] = str(vehicle)
    return out
