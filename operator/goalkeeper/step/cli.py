"""Placeholder entry point until the agent step lands."""

import sys


def main() -> int:
    print("goalkeeper-step: the agent step is not implemented yet", file=sys.stderr)
    return 2
