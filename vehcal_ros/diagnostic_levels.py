"""Health levels of a status as ``diagnostic_msgs/DiagnosticStatus`` numbers them, and a status as plain data: the
pipelines report :class:`HealthReport` values (level, message, key/values), the nodes publish them on
``/diagnostics`` (``nodes.common.diag_status`` wraps the level in bytes). No rclpy."""

from __future__ import annotations

from typing import Any, NamedTuple

OK, WARN, ERROR, STALE = 0, 1, 2, 3


class HealthReport(NamedTuple):
    """One status: ``level`` (:data:`OK`, :data:`WARN`, :data:`ERROR` or :data:`STALE`), ``message`` and
    ``values``, its key/values in the order they are published."""

    level: int
    message: str
    values: dict[str, Any]
