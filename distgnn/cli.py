"""The ``distgnn`` command line: one subcommand per pipeline stage (see README)."""
from __future__ import annotations

import argparse
import faulthandler
import importlib
import signal
import sys
import textwrap

from distgnn.errors import DistgnnError, os_error_line
from distgnn.host_memory import fix_mmap_threshold
from distgnn.progress import set_quiet

#: Subcommand modules under distgnn.commands; each defines ``register(subparsers)`` which adds its
#: parser and sets ``func`` (called with the parsed arguments).
COMMANDS = ("fetch", "inspect", "partition", "verify", "train", "predict", "launch", "report",
            "scaling_model")


class HelpFormatter(argparse.HelpFormatter):
    """Wraps help text at spaces only, so option names and design.md anchors (``--fresh-copies``,
    ``docs/design.md#compact-rows``) are never split across lines."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose subcommand parsers use the same formatter."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="distgnn",
        description="Full-batch distributed GNN training on CPU clusters.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=Parser)
    for name in COMMANDS:
        importlib.import_module(f"distgnn.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    fix_mmap_threshold()
    # `kill -USR1 PID` prints every thread's Python stack to stderr (a run that seems stuck)
    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (OSError, ValueError, AttributeError):
        pass  # stderr without a file descriptor (main() called in-process, e.g. under pytest)
    parser = build_parser()
    args = parser.parse_args(argv)
    set_quiet(getattr(args, "quiet", False))
    try:
        result = args.func(args)
    except DistgnnError as exc:
        print(f"distgnn {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # full disk, permissions, vanished files: say which file and why
        print(f"distgnn {args.command}: error: {os_error_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"distgnn {args.command}: interrupted", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
