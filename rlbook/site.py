"""``rlbook book`` (work in progress)."""

from __future__ import annotations


def add_subparser(sub) -> None:
    """Add the ``book`` subcommand to the ``rlbook`` parser's subparsers ``sub``."""
    p = sub.add_parser("book", help="(not yet built)")
    p.set_defaults(fn=lambda args: print("not yet built") or 2)
