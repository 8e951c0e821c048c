"""Trainer options declared once (issue 36): what ``evaluate`` accepts of the ``transfer`` and
``cog`` commands reaches them; every option of a command that records a run configuration
is classified by its ``OPERATIONAL``, the server's ``ENVIRONMENT_KEYS`` and ``RUN_KEYS``, and
the trainer's ``RESUME_KEYS``; the typed options need every field of their groups.

The options checked are read from the parsers themselves, not from a list kept here: every
option of the ``evaluate`` parser that the ``transfer`` (``cog``) parser has too, under the
same flag or prefixed (``--vtab-seed`` stands for the transfer command's ``--seed``,
``--cog-batch-size`` for the cog command's ``--batch-size``). A flag added to both commands
is covered at once; this file then asks for a value to give it.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from clients.backbone_contract import BackboneOptions, backbone_group
from clients.determinism import ReproducibilityOptions, reproducibility_group, resolve_determinism
from clients.evaluate_args import PLACEHOLDER_TASK, build_evaluate_parser, cog_namespace, transfer_namespace
from clients.md_train import EVAL_KEYS, RESUME_KEYS
from clients.seeds import COG_BACKBONE_SEED_NAME, backbone_seed, derive_seed
from clients.trainer_args import (COG_OPERATIONAL, OPERATIONAL, TRANSFER_OPERATIONAL, build_cog_parser, build_parser,
                                  build_transfer_parser, cog_groups, train_groups, transfer_groups)
from clients.trainer_options import OptionGroup, Record, Resume, add_groups, option, options_of
from sampler_server.metrics.run_config import RUN_KEYS, is_environment

FRAMEWORK = "torch"  # both frameworks take the same flags (tests/cli/test_help_texts.py builds both)
TARGETS: dict[str, Callable[[str], argparse.ArgumentParser]] = {"transfer": build_transfer_parser,
                                                                 "cog": build_cog_parser}
PREFIXES = {"transfer": "--vtab-", "cog": "--cog-"}
# evaluate's options that the commands have too but that are evaluate's own, and why
OWN = {"--json-summary": "the job writes one summary holding every protocol's",
       "--batch-norm": "it embeds the Meta-Dataset episodes; transfer's is --mode protonet's, which evaluate never runs"}
# given in an argv of their own (with the required options): each excludes another
# (--weights and --init-seed both say where the weights come from)
APART = ("--weights",)


def _values(tmp_path: Path) -> dict[str, list[str]]:
    """A value for each option evaluate hands on, other than the commands' own default."""
    files = {}
    for name, text in (("ca.pem", "ca"), ("cert.pem", "cert"), ("key.pem", "key"), ("token", "s3cret\n"),
                       ("weights.pt", "")):
        files[name] = tmp_path / name
        files[name].write_text(text)
    return {
        "--server": ["127.0.0.1:5"], "--run": ["job"], "--connect-timeout": ["2.5"], "--retries": ["2"],
        "--tls-ca": [str(files["ca.pem"])], "--tls-cert": [str(files["cert.pem"])],
        "--tls-key": [str(files["key.pem"])], "--token-file": [str(files["token"])],
        "--backbone": ["tiny"], "--weights": [str(files["weights.pt"])], "--init-seed": ["3"],
        "--image-size": ["32"], "--input-range": ["0", "1"], "--mean": ["0.1", "0.2", "0.3"],
        "--std": ["0.5", "0.25", "2"],
        "--deterministic": ["on"], "--threads": ["3"],
        "--device": ["cpu"], "--feature-cache": [str(tmp_path / "features")], "--extract-batch-size": ["16"],
        "--precision": ["bf16"],
        "--tasks": ["cifar100", "dtd"], "--vtab-protocol": ["vtab-md"], "--mode": ["linear"], "--lrs": ["0.5"],
        "--steps": ["7"], "--steps-scale": ["0.5"], "--vtab-batch-size": ["8"], "--decay": ["paper"],
        "--warmup": ["0.25"], "--select": ["all-tasks"], "--select-split": ["val200"],
        "--final-split": ["trainval1000"], "--runs": ["2"], "--eval-batch-size": ["32"], "--vtab-seed": ["5"],
        "--regime": ["10"], "--regime-seed": ["2"], "--regime-sampling": ["stratified"],
        "--levels": ["L1", "L2"], "--shots": ["all", "2"], "--seeds": ["7"], "--level-size": ["5"],
        "--min-images": ["3"], "--levels-file": ["levels.pkl"], "--concepts-split-file": ["split.pkl"],
        "--grid": ["3x2"], "--epochs": ["3"], "--cog-batch-size": ["16"],
    }


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


def shared_options(command: str) -> list[tuple[argparse.Action, argparse.Action]]:
    """(evaluate's action, the command's action) for every option of ``command`` that evaluate accepts."""
    target = {flag: action for action in _options(TARGETS[command](FRAMEWORK)) for flag in action.option_strings}
    pairs = []
    for action in _options(build_evaluate_parser(FRAMEWORK)):
        if action.option_strings[0] in OWN:
            continue
        names = ["--" + flag.removeprefix(PREFIXES[command]) if flag.startswith(PREFIXES[command]) else flag
                 for flag in action.option_strings]
        found = [target[name] for name in names if name in target]
        if found:
            pairs.append((action, found[0]))
    return pairs


def _expected(action: argparse.Action, tokens: Sequence[str]) -> Any:
    """What ``action`` (the command's own) makes of ``tokens``, as its parser would."""
    if action.nargs == 0:
        return action.const
    values = [action.type(token) if action.type else token for token in tokens]
    if action.nargs in (None, "?") and not isinstance(action, argparse._AppendAction):
        return values[0]
    return values


def _plain(value: Any) -> Any:
    return [_plain(v) for v in value] if isinstance(value, (list, tuple)) else value


def _namespaces(argv: list[str]) -> dict[str, argparse.Namespace]:
    """The transfer and cog namespaces evaluate builds from ``argv`` (as ``EvaluateJob`` does,
    with its tasks, else the one its parser checks with, and its run)."""
    args = build_evaluate_parser(FRAMEWORK).parse_args(argv)
    return {"transfer": transfer_namespace(args, FRAMEWORK, args.tasks or [PLACEHOLDER_TASK], args.run),
            "cog": cog_namespace(args, FRAMEWORK, args.run)}


def test_every_option_evaluate_shares_with_transfer_and_cog_reaches_them(tmp_path):
    values = _values(tmp_path)
    pairs = {command: shared_options(command) for command in TARGETS}
    assert len(pairs["transfer"]) > 25 and len(pairs["cog"]) > 20, pairs  # the derivation found them
    flags = {action.option_strings[0]: action for found in pairs.values() for action, _ in found}
    missing = sorted(set(flags) - set(values))
    assert not missing, f"give these options a non-default value in _values: {missing}"

    def argv(names: Sequence[str]) -> list[str]:
        return [token for name in names for token in (name, *values[name])]

    required = [flag for flag, action in flags.items() if action.required]
    together = [flag for flag in flags if flag not in APART]
    all_at_once = _namespaces(argv(together))
    apart = {flag: _namespaces(argv([*required, flag])) for flag in APART}
    bare = _namespaces(argv(required))

    wrong = []
    for command, found in pairs.items():
        for action, theirs in found:
            flag = action.option_strings[0]
            got = (apart[flag] if flag in APART else all_at_once)[command]
            want = _plain(_expected(theirs, values[flag]))
            if _plain(getattr(got, theirs.dest, "<missing>")) != want:
                wrong.append(f"{command} {theirs.option_strings[0]} (evaluate {flag} {' '.join(values[flag])}): "
                             f"got {getattr(got, theirs.dest, '<missing>')!r}, expected {want!r}")
            elif flag not in required and _plain(getattr(bare[command], theirs.dest)) == want:
                wrong.append(f"{command} {theirs.option_strings[0]}: {want!r} is what it gets without "
                             f"evaluate {flag}; give that a value that shows it arrives")
    assert not wrong, "\n".join(wrong)


# ---- every option has its decisions -----------------------------------------------------------

def _recording() -> dict[str, tuple[Callable[[str], argparse.ArgumentParser], tuple[OptionGroup, ...], tuple[str, ...]]]:
    """Each command that records a run configuration: its parser, its declared groups and what
    its run configuration leaves out."""
    return {"train": (build_parser, train_groups("torch"), OPERATIONAL),
            "transfer": (build_transfer_parser, transfer_groups(), TRANSFER_OPERATIONAL),
            "cog": (build_cog_parser, cog_groups(), COG_OPERATIONAL)}


@pytest.mark.parametrize("command", ["train", "transfer", "cog"])
def test_operational_environment_and_run_keys_classify_every_option(command):
    """Every option the command's parser takes (both frameworks) is a declared one, and where its
    value goes is decided: left out of the run configuration (the command's OPERATIONAL), or
    recorded as what the run was computed with (the server's ENVIRONMENT_KEYS), as its name
    (RUN_KEYS), or as what defines its results (neither)."""
    build, groups, left_out = _recording()[command]
    declared = {o.flags: o for o in options_of(groups)}
    if command == "train":
        declared.update({o.flags: o for o in options_of(train_groups("tf"))})
    for framework in ("torch", "tf"):
        # a switch's --no- form (BooleanOptionalAction) belongs to its declaration
        taken = {tuple(flag for flag in a.option_strings if not flag.startswith("--no-"))
                 for a in _options(build(framework))}
        assert taken <= set(declared), f"{command} options without a declaration: {sorted(taken - set(declared))}"
    wrong = []
    for flags, declared_option in declared.items():
        name, record = declared_option.dest, declared_option.record
        if record is None:
            wrong.append(f"{flags[0]}: no record decision")
        elif (name in left_out) != (record is Record.OPERATIONAL):
            wrong.append(f"{flags[0]}: {record}, but {'in' if name in left_out else 'not in'} {command}'s OPERATIONAL")
        elif record is not Record.OPERATIONAL and is_environment(name) != (record is Record.ENVIRONMENT):
            wrong.append(f"{flags[0]}: {record}, but the server's ENVIRONMENT_KEYS "
                         f"{'hold' if is_environment(name) else 'lack'} {name!r}")
        elif record is not Record.OPERATIONAL and (name in RUN_KEYS) != (record is Record.RUN):
            wrong.append(f"{flags[0]}: {record}, but the server's RUN_KEYS {'hold' if name in RUN_KEYS else 'lack'} "
                         f"{name!r}")
    assert not wrong, "\n".join(wrong)


def test_resume_keys_classify_every_option_of_the_trainer():
    """A train checkpoint's RESUME_KEYS (and --eval-only's EVAL_KEYS) are the options that say
    they fix the training sequence or the model; every other option says it may change."""
    options = {o.dest: o for framework in ("torch", "tf") for o in options_of(train_groups(framework))}
    assert all(o.resume is not None for o in options.values()), [o.flags for o in options.values() if o.resume is None]
    resumed = {name for name, o in options.items() if o.resume in (Resume.SEQUENCE, Resume.MODEL)}
    model = {name for name, o in options.items() if o.resume is Resume.MODEL}
    assert set(RESUME_KEYS) == resumed | {"framework"} and set(EVAL_KEYS) == model | {"framework"}
    assert {"sources", "seed", "batch_size", "model", "backbone", "image_size"} <= resumed
    assert model == {"model", "backbone", "image_size"}


def test_an_option_without_its_decisions_is_refused_when_the_parser_is_built():
    bare = OptionGroup("new", (option("--new-knob", type=int, default=1, help="a knob"),))
    for command in ("train", "transfer", "cog"):
        with pytest.raises(ValueError, match=r"^--new-knob: the \w+ command (records its options|resumes checkpoints); "
                                             "declare (record|resume)="):
            add_groups(argparse.ArgumentParser(), (bare,), command)
    recorded = OptionGroup("new", (option("--new-knob", type=int, default=1, record=Record.RESULT, help="a knob"),))
    with pytest.raises(ValueError, match="^--new-knob: the train command resumes checkpoints; declare resume="):
        add_groups(argparse.ArgumentParser(), (recorded,), "train")
    add_groups(argparse.ArgumentParser(), (recorded,), "cog")  # cog resumes nothing
    add_groups(argparse.ArgumentParser(), (bare,), "evaluate")  # evaluate records each protocol's sub-run instead


# ---- typed options: a dropped option raises -------------------------------------------------

def test_the_typed_options_hold_their_groups_fields_and_need_every_one():
    backbone = backbone_group(None, 224, "side")
    assert {f.name for f in dataclasses.fields(BackboneOptions)} == (
        {o.dest for o in backbone.options} | set(backbone.defaults))
    assert {f.name for f in dataclasses.fields(ReproducibilityOptions)} == {
        o.dest for o in reproducibility_group().options}
    args = build_transfer_parser(FRAMEWORK).parse_args(["--server", "h:1", "--run", "r", "--tasks", "t",
                                                        "--init-seed", "3", "--threads", "2"])
    assert BackboneOptions.from_args(args).init_seed == 3
    assert ReproducibilityOptions.from_args(args) == ReproducibilityOptions(deterministic="auto", threads=2)
    del args.init_seed
    with pytest.raises(AttributeError, match="init_seed"):
        BackboneOptions.from_args(args)
    with pytest.raises(AttributeError, match="threads"):
        resolve_determinism(argparse.Namespace(deterministic="on"), accelerated=False)
    with pytest.raises(ValueError, match="^deterministic: got 'sometimes', expected one of auto, on, off$"):
        ReproducibilityOptions(deterministic="sometimes", threads=None)


def test_a_command_without_seed_draws_from_seed_0_and_records_no_seed():
    args = build_cog_parser(FRAMEWORK).parse_args(["--server", "h:1", "--run", "r", "--backbone", "tiny",
                                                   "--feature-cache", "f"])
    assert args.seed == 0 and "seed" in COG_OPERATIONAL
    assert backbone_seed(args.seed, COG_BACKBONE_SEED_NAME, "tiny") == derive_seed(0, "backbone", "tiny")
