"""A declared parameter: name, default (its type is the parameter's), range or choices, description, read-only
flag and an extra check, with the validation every node and file reader applies (rclpy-free).

The estimators' parameters are declared next to the configurations they fill
(:mod:`vehcal_ros.estimation.grip.parameters`, :mod:`vehcal_ros.estimation.calibration.parameters`); the nodes
add their topics and scheduling, declare them all with descriptors built from these specs
(:mod:`vehcal_ros.nodes.common`), and docs/nodes.md's tables are generated from them (tools/param_reference.py).
"""

from __future__ import annotations

import array
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ParamSpec:
    """One declared ROS parameter.

    ``lo``/``hi`` bound numbers (inclusive); ``choices`` bounds strings; ``read_only`` parameters can only be
    given at start-up (topic names, buffer sizes). ``check`` is an extra predicate with its own message.
    ``item_type`` is the element type of a list parameter (default: that of the default's first element; needed
    when the default is empty).
    """

    name: str
    default: Any
    description: str
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] | None = None
    read_only: bool = False
    check: Callable[[Any], str | None] | None = field(default=None, compare=False)
    item_type: type | None = None

    def validate(self, value: Any) -> str | None:
        """Return None when ``value`` is allowed, else a message naming the parameter and the allowed range."""
        if isinstance(self.default, bool):
            if not isinstance(value, bool):
                return f"parameter '{self.name}' must be a bool, got {value!r}"
        elif isinstance(self.default, (int, float)) and not isinstance(self.default, bool):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return f"parameter '{self.name}' must be a number, got {value!r}"
            if isinstance(self.default, int) and not isinstance(value, int):
                return f"parameter '{self.name}' must be an integer, got {value!r}"
            if isinstance(self.default, float) and isinstance(value, int):
                return (f"parameter '{self.name}' must be a floating-point number (write {value}.0), "
                        f"got {value!r}")
            if not math.isfinite(float(value)):
                return f"parameter '{self.name}' must be finite, got {value!r}"
            if self.lo is not None and self.hi is not None and not (self.lo <= value <= self.hi):
                return f"parameter '{self.name}' = {value} is out of range [{self.lo}, {self.hi}]"
        elif isinstance(self.default, str):
            if not isinstance(value, str):
                return f"parameter '{self.name}' must be a string, got {value!r}"
            if self.choices and value not in self.choices:
                return f"parameter '{self.name}' = {value!r} is not one of {', '.join(self.choices)}"
        elif isinstance(self.default, (list, tuple)):
            if not isinstance(value, (list, tuple, array.array)):
                return f"parameter '{self.name}' must be a list, got {value!r}"
            item = self.item_type or (type(self.default[0]) if self.default else None)
            if item is not None and not all(_same_kind(v, item) for v in value):
                kind = {bool: "true/false", int: "integers", float: "floating-point numbers", str: "strings"}.get(
                    item, item.__name__)
                hint = " (write whole numbers with a decimal point, e.g. 1000.0)" if item is float else ""
                return f"parameter '{self.name}' must be a list of {kind}{hint}, got {list(value)!r}"
        if self.check is not None:
            return self.check(value)
        return None


def _same_kind(value: Any, item: type) -> bool:
    """Whether a list element is exactly of the list's element type ``item``: an integer array for a double array
    would change the parameter's type (the descriptors allow dynamic typing so that this message, not rclpy's,
    answers), as a scalar integer for a double is refused; bools are never numbers."""
    if item is bool or isinstance(value, bool):
        return isinstance(value, bool) and item is bool
    return isinstance(value, item)


def plain(value: Any) -> Any:
    """A parameter value as the nodes keep it: rclpy hands integer and double arrays as ``array.array``."""
    return list(value) if isinstance(value, (array.array, tuple)) else value
