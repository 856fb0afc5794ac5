"""Exceptions shared by every layer.

``InputError`` is raised for bad user input (files, columns, parameter values, scenario fields); the CLI turns
it into one line on stderr and a non-zero exit, nodes turn it into a /diagnostics status. Its message must name
the offending file, field or parameter and, for numbers, the allowed range.
"""


class InputError(ValueError):
    """Bad input that the user can fix: the message says what and where."""


class EstimationError(RuntimeError):
    """An estimator could not produce a result it is willing to publish (e.g. too little data, no convergence)."""


class Cancelled(EstimationError):
    """A fit stopped on request (e.g. a node shutting down) before it had a result: nothing to publish."""
