"""Grip by place as files: GeoJSON, CSV and a map figure (matplotlib, Agg backend), for one bag or a fleet.

The input is the replay's ``grip_by_place`` table (``ReplayResult.grip_by_place`` or the replay JSON's
``grip_by_place`` list): dicts with the fields of ``estimation.sensing.position.PLACE_FIELDS`` (``t`` s,
``latitude`` and ``longitude`` deg, ``altitude`` m, ``scope``, ``mu_max``, ``lower``, ``upper``, ``age`` s, ``truth``;
None where unknown). Every file is written atomically (a temporary file in the same directory, renamed onto the name),
so a reader or a crash never sees half a file.

* GeoJSON (RFC 7946): a FeatureCollection with one Point Feature per row, ``coordinates`` = [longitude, latitude,
  altitude] (deg, deg, m: the RFC's order), ``properties`` = every field of the row (plus ``vehicle``, and
  ``drive`` when given, in a fleet map). Rows without a finite latitude and longitude are left out.
* CSV: a header line with the field names (``vehicle`` first in a fleet map, then ``drive`` when the rows name
  their drive), one line per row, empty cells for unknown values.
* Figure (PNG): the track in metres east and north of its mean position (the local ENU frame there, WGS-84;
  models/geodesy.py), each fix coloured by the lowest mu_max lower bound in force over the scopes whose grip is known
  there (grey where none is), and beside it the same track coloured by
  the true mu_max (the lowest over the scopes) when the rows have ground truth.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vehcal_ros.atomic_files import write_atomic
from vehcal_ros.errors import InputError
from vehcal_ros.estimation.sensing.position import PLACE_FIELDS
from vehcal_ros.json_values import finite_or_none
from vehcal_ros.models.geodesy import Geodetic, geodetic_to_enu

FLEET_NAME = "fleet_grip_map"
"""File stem of the fleet map: ``<out_dir>/fleet_grip_map.geojson``, ``.csv``, ``.png``."""

MU_RANGE = (0.0, 1.2)
"""Colour scale of the figures (mu_max, dimensionless)."""


def _clean(row: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """The row's ``fields`` with non-finite numbers as None (strict JSON)."""
    out: dict[str, Any] = {}
    for k in fields:
        v = row.get(k)
        out[k] = finite_or_none(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
    return out


def geojson_document(rows: Sequence[Mapping[str, Any]], fields: Sequence[str] = PLACE_FIELDS) -> dict:
    """The GeoJSON FeatureCollection of ``rows`` (module docstring); ``fields`` are the properties kept."""
    features = []
    for row in rows:
        lat, lon = finite_or_none(row.get("latitude")), finite_or_none(row.get("longitude"))
        if lat is None or lon is None:
            continue
        alt = finite_or_none(row.get("altitude"))
        coords = [lon, lat] if alt is None else [lon, lat, alt]
        features.append({"type": "Feature", "geometry": {"type": "Point", "coordinates": coords},
                         "properties": _clean(row, fields)})
    return {"type": "FeatureCollection", "features": features}


def geojson_text(rows: Sequence[Mapping[str, Any]], fields: Sequence[str] = PLACE_FIELDS) -> str:
    """``geojson_document`` as strict JSON text (no NaN)."""
    return json.dumps(geojson_document(rows, fields), allow_nan=False, indent=None, separators=(",", ":")) + "\n"


def csv_text(rows: Sequence[Mapping[str, Any]], fields: Sequence[str] = PLACE_FIELDS) -> str:
    """CSV text of ``rows``: header ``fields``, empty cells for None and non-finite numbers, floats in full
    precision (``repr``)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(fields)
    for row in rows:
        clean = _clean(row, fields)
        w.writerow(["" if clean[k] is None else repr(clean[k]) if isinstance(clean[k], float) else clean[k]
                    for k in fields])
    return buf.getvalue()


def grip_places(rows: Sequence[Mapping[str, Any]]) -> list[tuple[float, float, float | None, float | None, str]]:
    """(longitude, latitude, lower, truth, vehicle) per place (a vehicle's fix: the rows of one ``vehicle``,
    ``drive`` and ``t``): ``lower`` the lowest lower bound over the scopes whose grip is known there (None: none
    known), ``truth`` the lowest true mu_max (None: not known for every scope)."""
    by: dict[tuple[str, str, float], list[Mapping[str, Any]]] = {}
    for row in rows:
        if finite_or_none(row.get("latitude")) is not None and finite_or_none(row.get("longitude")) is not None:
            key = (str(row.get("vehicle", "")), str(row.get("drive", "")), float(row.get("t", math.nan)))
            by.setdefault(key, []).append(row)
    out = []
    for (vehicle, _, _), group in by.items():
        lowers = [finite_or_none(r.get("lower")) for r in group if finite_or_none(r.get("mu_max")) is not None]
        lowers = [v for v in lowers if v is not None]
        truths = [finite_or_none(r.get("truth")) for r in group]
        truth = min(truths) if all(v is not None for v in truths) else None  # type: ignore[type-var]
        out.append((float(group[0]["longitude"]), float(group[0]["latitude"]), min(lowers) if lowers else None,
                    truth, vehicle))
    return out


def plot_grip_map(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike, title: str | None = None) -> Path:
    """Write the map figure of ``rows`` (module docstring) to ``path`` (PNG, atomically); returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    places = grip_places(rows)
    has_truth = any(p[3] is not None for p in places)
    fig, axes = plt.subplots(1, 2 if has_truth else 1, figsize=(12 if has_truth else 7, 5.5), squeeze=False)
    panels = [("mu_max lower bound in force (lowest over the known scopes)", 2)]
    if has_truth:
        panels.append(("true mu_max (lowest over the scopes)", 3))
    ref = Geodetic(sum(p[1] for p in places) / len(places), sum(p[0] for p in places) / len(places), 0.0) \
        if places else Geodetic(0.0, 0.0, 0.0)
    east, north = {}, {}
    for p in places:
        east[id(p)], north[id(p)], _ = geodetic_to_enu(p[1], p[0], 0.0, ref)
    sc = None
    for ax, (label, k) in zip(axes[0], panels):
        unknown = [p for p in places if p[k] is None]
        known = [p for p in places if p[k] is not None]
        if unknown:
            ax.scatter([east[id(p)] for p in unknown], [north[id(p)] for p in unknown], s=10, c="lightgrey",
                       label="unknown")
        if known:
            sc = ax.scatter([east[id(p)] for p in known], [north[id(p)] for p in known], s=14,
                            c=[p[k] for p in known], cmap="viridis", vmin=MU_RANGE[0], vmax=MU_RANGE[1])
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_xlabel(f"east of {ref.latitude:.5f} N, {ref.longitude:.5f} E (m)")
        ax.set_ylabel("north (m)")
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
        if unknown:
            ax.legend(fontsize=8, loc="best")
    if sc is not None:
        fig.colorbar(sc, ax=list(axes[0]), label="mu_max (-)", shrink=0.85)
    vehicles = sorted({p[4] for p in places if p[4]})
    fig.suptitle(title or (f"Grip by place: {len(vehicles)} vehicles, {len(places)} fixes" if vehicles
                           else f"Grip by place: {len(places)} fixes"))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    path = Path(path)
    write_atomic(path, buf.getvalue())
    return path


def _paths(geojson_path: str | os.PathLike) -> tuple[Path, Path, Path]:
    p = Path(geojson_path)
    if p.suffix.lower() not in (".geojson", ".json"):
        raise InputError(f"{p}: a grip map is written as .geojson (the CSV and PNG go beside it)")
    if not p.parent.is_dir():
        raise InputError(f"{p}: the directory {p.parent} does not exist")
    return p, p.with_suffix(".csv"), p.with_suffix(".png")


def write_grip_map(rows: Sequence[Mapping[str, Any]], geojson_path: str | os.PathLike,
                   title: str | None = None) -> list[Path]:
    """Write one bag's grip-by-place table as ``geojson_path`` (GeoJSON) and, beside it, the same name with
    ``.csv`` and ``.png``; returns the three paths. InputError for a name without ``.geojson``/``.json`` or a
    missing directory."""
    gj, cs, png = _paths(geojson_path)
    write_atomic(gj, geojson_text(rows))
    write_atomic(cs, csv_text(rows))
    plot_grip_map(rows, png, title)
    return [gj, cs, png]


def fleet_rows(rows_by_vehicle: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict]:
    """The vehicles' rows in one table, each with its ``vehicle`` name, vehicles in the mapping's order."""
    return [{"vehicle": str(v), **dict(r)} for v, rows in rows_by_vehicle.items() for r in rows]


def write_fleet_map(rows_by_vehicle: Mapping[str, Sequence[Mapping[str, Any]]],
                    out_dir: str | os.PathLike) -> list[Path]:
    """Write a fleet's grip by place: ``out_dir/fleet_grip_map.geojson``, ``.csv`` and ``.png`` (``vehicle`` as
    an extra property and first CSV column, then ``drive`` when any row has one; ``rows_by_vehicle``: vehicle
    name -> that vehicle's ``grip_by_place`` rows). ``out_dir`` is created if needed. Returns the three paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = fleet_rows(rows_by_vehicle)
    fields = ("vehicle", "drive", *PLACE_FIELDS) if any("drive" in r for r in rows) else ("vehicle", *PLACE_FIELDS)
    gj, cs, png = out / f"{FLEET_NAME}.geojson", out / f"{FLEET_NAME}.csv", out / f"{FLEET_NAME}.png"
    write_atomic(gj, geojson_text(rows, fields))
    write_atomic(cs, csv_text(rows, fields))
    plot_grip_map(rows, png)
    return [gj, cs, png]


__all__ = ["FLEET_NAME", "csv_text", "fleet_rows", "geojson_document", "geojson_text", "plot_grip_map",
           "write_fleet_map", "write_grip_map"]
