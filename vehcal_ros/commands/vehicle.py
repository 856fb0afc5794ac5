"""``vehcal vehicle describe MODEL.yaml [-o OUT]``: the estimators' vehicle description (config/vehicles
schema, docs/vehicle_description.md) derived from a 14-DOF simulator model file (the layout of
``reference/hmmwv.yaml``) or a shipped simulator vehicle (``hmmwv``, ``sedan``): what a user would measure on
the car (io/describe.py). Without ``-o`` the YAML goes to stdout; ``-o`` writes the file atomically.
"""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("vehicle", help="vehicle descriptions (describe a simulator model file)",
                              description=__doc__)
    sub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    sub.required = True
    d = sub.add_parser("describe", help="derive the estimators' description from a simulator model file",
                       description=__doc__)
    d.add_argument("model", metavar="MODEL", help="simulator model file (layout of hmmwv.yaml) or hmmwv / sedan")
    d.add_argument("-o", "--output", metavar="OUT", help="write the description YAML here (default: stdout)")
    d.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import yaml

    from vehcal_ros.estimation.calibration_pipeline import write_atomic
    from vehcal_ros.io.describe import describe_model
    from vehcal_ros.vehicle.description import description_from_dict

    doc = describe_model(args.model)
    description_from_dict(doc, source=f"described from {args.model}")  # the schema's own validation
    text = (f"# Vehicle description derived by `vehcal vehicle describe {args.model}` (docs/vehicle_description.md)\n"
            + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120))
    if args.output:
        write_atomic(args.output, text)
    else:
        print(text, end="")
    return 0
