"""JSON-safe values: strict JSON has no NaN or infinity, no numpy scalars and no tuples.

Every JSON and YAML file the package writes (replay results, calibration state, grip maps) passes its values
through :func:`jsonable`; :func:`finite_or_none` is the one-number form.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np


def finite_or_none(x: Any) -> float | None:
    """``x`` as a float, or None when it is not a finite number (strict JSON has no NaN or infinity)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def jsonable(obj: Any) -> Any:
    """A JSON/YAML-safe copy: mappings with str keys, tuples as lists, numpy scalars as Python numbers and
    non-finite floats as None."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        v = float(obj)
        return v if math.isfinite(v) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj
