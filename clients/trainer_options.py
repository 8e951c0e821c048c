"""Trainer options declared once (framework-free): every option of the trainer commands
(``train``, ``transfer``, ``cog``, ``evaluate``) is one ``Option`` that says everything a
new flag needs decided, in one place:

- its flags and argparse settings (type, default, help): a command's parser is built from
  its ``OptionGroup``s by ``add_groups``, and a group several commands take (the server
  group, the backbone contract's, reproducibility) is declared once and added by each;
- ``record``: what a run's configuration does with the value (``Record``). A command's
  ``operational`` names are what its run configuration leaves out; the server's
  ``ENVIRONMENT_KEYS`` and ``RUN_KEYS`` (``sampler_server.metrics.run_config``) hold the
  recorded names it does not compare, and a test holds them to these declarations;
- ``resume``: what a train checkpoint requires of the value (``Resume``), from which the
  MD trainer's ``RESUME_KEYS`` and ``EVAL_KEYS`` are derived (``resume_keys``);
- ``forward``: for ``evaluate``'s options, the commands the value is handed to and the flag
  it takes there (``--vtab-seed`` is the transfer command's ``--seed``). ``handed_on``
  writes that command's argv from the declarations, so its own parser validates and
  resolves the value as the command itself does.

Adding an option to a command that records a run configuration (train, transfer, cog)
without a ``record`` decision, or to ``train`` without a ``resume`` one, fails when the
parser is built, in one line naming the flag.
"""

from __future__ import annotations

import argparse
import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

COMMANDS = ("train", "transfer", "cog", "evaluate")
RECORDING_COMMANDS = ("train", "transfer", "cog")
"""The commands whose run configuration is built from their parsed options (``evaluate``'s
sub-runs record the transfer and cog commands' namespaces and MD's own settings)."""


class Record(enum.Enum):
    """What a run's configuration does with an option's value."""

    RESULT = "result"  # recorded: it defines the results, a run's reports must agree on it
    ENVIRONMENT = "environment"  # recorded, not compared: what the run was computed with (ENVIRONMENT_KEYS)
    RUN = "run"  # recorded: it names the run (RUN_KEYS)
    OPERATIONAL = "operational"  # left out: how the run was operated, where things live, which work to do


class Resume(enum.Enum):
    """What a train checkpoint requires of an option's value."""

    FREE = "free"  # may differ between the run that saved it and the run that resumes
    SEQUENCE = "sequence"  # fixes the training sequence: resuming needs the same value (RESUME_KEYS)
    MODEL = "model"  # fixes the model: resuming and --eval-only need the same value (RESUME_KEYS, EVAL_KEYS)


@dataclass(frozen=True)
class Option:
    """One option: ``flags`` and the ``settings`` argparse's ``add_argument`` takes, and the
    decisions above (``record``, ``resume``: None where no command that has the option
    asks for one; ``forward``: target command -> its flag)."""

    flags: tuple[str, ...]
    settings: Mapping[str, Any]
    record: Record | None = None
    resume: Resume | None = None
    forward: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.flags or not all(flag.startswith("--") for flag in self.flags):
            raise ValueError(f"flags: got {self.flags!r}, expected one or more --names")
        unknown = sorted(set(self.forward) - set(COMMANDS))
        if unknown:
            raise ValueError(f"{self.flags[0]}: forward got {unknown}, expected commands of {', '.join(COMMANDS)}")

    @property
    def dest(self) -> str:
        """The attribute of the parsed namespace (argparse's rule: the first flag, dashes as underscores)."""
        return str(self.settings.get("dest") or self.flags[0][2:].replace("-", "_"))

    def argv(self, value: Any, flag: str) -> list[str]:
        """``value`` (as parsed) written back as command-line words under ``flag``: nothing for
        None or an unset switch; a repeatable option once per value."""
        if value is None or value is False:
            return []
        if value is True:
            return [flag]
        if self.settings.get("action") == "append":
            return [word for item in value for word in (flag, str(item))]
        if isinstance(value, (list, tuple)):
            return [flag, *map(str, value)]
        return [flag, str(value)]


def option(*flags: str, record: Record | None = None, resume: Resume | None = None,
           forward: Iterable[str] | Mapping[str, str] = (), **settings: Any) -> Option:
    """An ``Option``; ``forward`` names the commands the value goes to under the same flag, or
    maps each to its flag there."""
    targets = dict(forward) if isinstance(forward, Mapping) else {command: flags[0] for command in forward}
    return Option(tuple(flags), settings, record, resume, targets)


@dataclass(frozen=True)
class OptionGroup:
    """A titled group of options as ``--help`` shows them; ``defaults`` are values every
    parsed namespace of the command holds without a flag (its fallbacks), never recorded."""

    title: str
    options: tuple[Option, ...]
    description: str | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)


def add_groups(parser: argparse.ArgumentParser, groups: Sequence[OptionGroup], command: str) -> None:
    """Add ``groups`` to ``command``'s parser, refusing an option that lacks a decision the command needs."""
    if command not in COMMANDS:
        raise ValueError(f"command: got {command!r}, expected one of {', '.join(COMMANDS)}")
    for group in groups:
        if group.defaults:
            parser.set_defaults(**group.defaults)
        added = parser.add_argument_group(group.title, group.description)
        for declared in group.options:
            if command in RECORDING_COMMANDS and declared.record is None:
                raise ValueError(f"{declared.flags[0]}: the {command} command records its options; declare "
                                 "record= (clients.trainer_options.Record)")
            if command == "train" and declared.resume is None:
                raise ValueError(f"{declared.flags[0]}: the train command resumes checkpoints; declare resume= "
                                 "(clients.trainer_options.Resume)")
            added.add_argument(*declared.flags, **declared.settings)


def options_of(groups: Iterable[OptionGroup]) -> tuple[Option, ...]:
    return tuple(declared for group in groups for declared in group.options)


def operational(groups: Iterable[OptionGroup]) -> tuple[str, ...]:
    """The namespace names a command's run configuration leaves out: its ``OPERATIONAL``
    options and its groups' ``defaults``."""
    groups = tuple(groups)
    names = [o.dest for o in options_of(groups) if o.record is Record.OPERATIONAL]
    names += [name for group in groups for name in group.defaults]
    return tuple(dict.fromkeys(names))


def resume_keys(groups: Iterable[OptionGroup], *kinds: Resume) -> tuple[str, ...]:
    """The namespace names of the options whose ``resume`` is one of ``kinds``."""
    return tuple(dict.fromkeys(o.dest for o in options_of(groups) if o.resume in kinds))


def handed_on(groups: Iterable[OptionGroup], args: argparse.Namespace, command: str,
              given: Mapping[str, Any] | None = None) -> list[str]:
    """The argv of ``command`` that carries every option of ``groups`` declared to go there:
    its value in ``args`` (read by name: an option ``args`` lacks raises), or in ``given``,
    which replaces it (evaluate's sub-run and the tasks it lists)."""
    given = given or {}
    declared_options = options_of(groups)
    unknown = sorted(set(given) - {o.dest for o in declared_options if command in o.forward})
    if unknown:
        raise ValueError(f"given: got {unknown}, expected names of options that go to {command}")
    argv: list[str] = []
    for declared in declared_options:
        flag = declared.forward.get(command)
        if flag is not None:
            value = given[declared.dest] if declared.dest in given else getattr(args, declared.dest)
            argv += declared.argv(value, flag)
    return argv
