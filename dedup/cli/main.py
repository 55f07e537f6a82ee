"""Entry point of the ``dedup`` console script (sub-commands are filled in by later work)."""

from __future__ import annotations

import argparse
import sys

from dedup import __version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dedup", description=__doc__)
    parser.add_argument("--version", action="version", version=f"dedup {__version__}")
    parser.parse_args(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
