"""The ``vehcal`` command (docs/cli.md).

Each verb lives in ``vehcal_ros/commands/<verb>.py`` with ``add_parser(subparsers)`` and ``run(args) -> int``;
heavy imports happen inside ``run`` so ``vehcal --help`` stays fast. Bad input gives one line on stderr and
exit status 2; an estimator that cannot produce a result gives exit status 1, and so does a verb whose module cannot
be imported (a broken install: one line naming the verb).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from vehcal_ros import __version__
from vehcal_ros.errors import EstimationError, InputError

#: verbs, each a module under vehcal_ros.commands
VERBS = ("run", "simulate", "replay", "grip", "calibrate", "batch", "demo", "vehicle", "precompile")


class BrokenVerb(RuntimeError):
    """A verb's module (``vehcal_ros.commands.<verb>``) cannot be imported: the installation is broken."""

    def __init__(self, verb: str, cause: ImportError) -> None:
        super().__init__(f"the '{verb}' command cannot be loaded ({type(cause).__name__}: {cause}); "
                         "reinstall vehcal_ros")
        self.verb = verb


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit status 2."""

    def error(self, message: str) -> None:  # noqa: D401 - argparse API
        self.exit(2, f"vehcal: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="vehcal", description="vehcal_ros: grip estimation and 8-DOF model calibration")
    parser.add_argument("--version", action="version", version=f"vehcal_ros {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    sub.required = True
    for module_name in VERBS:
        try:
            module = importlib.import_module(f"vehcal_ros.commands.{module_name}")
        except ImportError as exc:   # a broken install: every verb is part of the package
            raise BrokenVerb(module_name, exc) from exc
        module.add_parser(sub)
    return parser



def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
    except BrokenVerb as exc:
        print(f"vehcal: error: {exc}", file=sys.stderr)
        return 1
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except InputError as exc:
        print(f"vehcal {args.verb}: error: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        name = exc.filename if exc.filename is not None else str(exc)
        print(f"vehcal {args.verb}: error: no such file: {name}", file=sys.stderr)
        return 2
    except IsADirectoryError as exc:
        print(f"vehcal {args.verb}: error: is a directory, expected a file: {exc.filename}", file=sys.stderr)
        return 2
    except PermissionError as exc:
        print(f"vehcal {args.verb}: error: permission denied: {exc.filename}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as exc:   # a binary or non-UTF-8 file where text was expected
        print(f"vehcal {args.verb}: error: a file given is not UTF-8 text ({exc.reason} at byte {exc.start})",
              file=sys.stderr)
        return 2
    except EstimationError as exc:
        print(f"vehcal {args.verb}: failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"vehcal {args.verb}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
