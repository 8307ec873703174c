"""For each command's `configure(parser)`: one way to describe a command, its actions and its examples.

Every `--help` then reads alike: a description, the options with their
defaults, and the examples last.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

SettingsT = TypeVar("SettingsT", bound="DataclassInstance")


def describe(parser: argparse.ArgumentParser, description: str, *examples: str) -> None:
    """A command's description and its examples, as every `--help` ends."""
    parser.description = description
    parser.epilog = _examples(examples)


def add_actions(
    parser: argparse.ArgumentParser, *, dest: str = "action", metavar: str = "ACTION"
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """The actions of a command (`fencegate cluster up|down|...`): one of them is required."""
    return parser.add_subparsers(dest=dest, required=True, metavar=metavar)


def add_action(
    actions: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    run: Callable[[argparse.Namespace], int],
    *examples: str,
    help: str,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """An action that runs `run(args)`, with its one-line help, its description and its examples."""
    parser = actions.add_parser(name, help=help, description=description)
    parser.epilog = _examples(examples)
    parser.set_defaults(func=run)
    return parser


def settings_from(cls: type[SettingsT], args: argparse.Namespace) -> SettingsT:
    """`cls(field=args.field, ...)` for every field of the dataclass `cls` that the command line has an
    option for (same name); the others keep their defaults."""
    return cls(**{f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)})


def _examples(examples: Sequence[str]) -> str:
    return ("example:" if len(examples) == 1 else "examples:") + "".join(f"\n  {line}" for line in examples)
