"""The `goalkeeper` command line: a thin dispatcher over the subcommand modules."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _crds(args: argparse.Namespace) -> int:
    from goalkeeper import crds

    if args.check:
        stale = crds.stale_files(args.out)
        for path in stale:
            print(f"{path} differs from the generated CRD; run `goalkeeper crds`", file=sys.stderr)
        return 1 if stale else 0
    if args.stdout:
        sys.stdout.write(crds.render_all())
        return 0
    for path in crds.write_all(args.out):
        print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="goalkeeper", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    crds_cmd = sub.add_parser("crds", help="write the CRDs generated from the models")
    crds_cmd.add_argument("--out", default="crds", help="folder to write into (default: crds)")
    crds_cmd.add_argument("--check", action="store_true", help="fail when the files differ")
    crds_cmd.add_argument("--stdout", action="store_true", help="print instead of writing")
    crds_cmd.set_defaults(func=_crds)
    from goalkeeper.devcluster.cli import register as register_cluster

    register_cluster(sub)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
