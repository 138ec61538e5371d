"""How the `ingest` command line reads its arguments: usage errors in one line (exit code 2), the global options
every subcommand takes, and arguments that are not text."""

from __future__ import annotations

import argparse
from typing import NoReturn

from ingest_core.core.errors import clipped


class UsageParser(argparse.ArgumentParser):
    """argparse with its usage errors in one line, as the CLI's other errors (exit code 2); subparsers are made
    of the parser's own class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {one_line(message, 300)} (`{self.prog} --help` shows the usage)\n")


def one_line(text: str, limit: int) -> str:
    """`text` (which may hold what was typed) as one printable line of at most about `limit` characters: control
    characters, line breaks and undecodable bytes escaped, as repr() would."""
    return clipped("".join(c if c.isprintable() else repr(c)[1:-1] for c in text), limit)


def add_global_options(parser: argparse.ArgumentParser, *, sub: bool = False) -> None:
    """--metadata-url and -v before the subcommand or anywhere after it: every subparser takes them too. A
    subparser's copy has no default, so it does not overwrite a value given before the subcommand."""
    default = argparse.SUPPRESS if sub else None
    parser.add_argument("--metadata-url", default=default,
                        help="SQLAlchemy URL of the metadata store (default: $INGEST_METADATA_URL)")
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS if sub else False,
                        help="log what happens, librdkafka's lines included")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                add_global_options(child, sub=True)


def not_text(argv: list[str]) -> str | None:
    """The first argument holding bytes the locale's encoding could not decode (Python keeps them as surrogate
    escapes, which no database, name or message can hold), if any."""
    for arg in argv:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return arg
    return None
