"""Health levels of a status as ``diagnostic_msgs/DiagnosticStatus`` numbers them: the pipelines report them with
their messages, the nodes publish them on ``/diagnostics`` (``nodes.common.diag_status`` wraps them in bytes).
Plain ints, no rclpy."""

OK, WARN, ERROR, STALE = 0, 1, 2, 3
