"""The ``evaluate`` command line (``python -m clients.torch evaluate`` / ``clients.tf evaluate``),
the same in both frameworks (framework-free).

It takes the server group and the backbone contract's group of every trainer command
(``--backbone`` required), which protocols to run, and each protocol's knobs:

- Meta-Dataset: ``--presets``, ``--md-sources`` (default: every test source of each preset,
  as the server lists it), ``--episodes`` per source (600), ``--learners``, ``--md-seed``.
- VTAB-1k: the ``transfer`` command's protocol flags under their own names (``--mode``,
  ``--lrs``, ``--steps``, ``--steps-scale``, ``--decay``, ``--warmup``, ``--select``,
  ``--select-split``, ``--final-split``, ``--runs``, ``--eval-batch-size``, ``--regime``,
  ``--regime-seed``, ``--regime-sampling``) and, where ``evaluate`` has a flag of that name
  for another protocol, prefixed: ``--vtab-protocol``, ``--vtab-batch-size``, ``--vtab-seed``.
- ImageNet-CoG: the ``cog`` command's ``--levels``, ``--shots``, ``--seeds``, ``--level-size``,
  ``--min-images``, ``--levels-file``, ``--concepts-split-file``, ``--grid``, ``--epochs``
  and ``--cog-batch-size`` (its ``--batch-size``).

VTAB and CoG flags are handed to those commands' own parsers (``transfer_namespace``,
``cog_namespace``), which validate and resolve them exactly as ``transfer`` and ``cog``
do, so ``evaluate`` runs their protocols with their numbers; a bad value is refused when
``evaluate`` parses, in one line naming the flag. The backbone flags reach every
protocol as given: a flag left out lets each protocol take the backbone's declared
attribute, else its own default (84 px for MD; 224 px for VTAB and CoG; CoG normalises
with ImageNet's mean and std).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from clients import cog_protocol, vtab_transfer_protocols
from clients.backbone_contract import add_backbone_group, check_backbone_group
from clients.determinism import add_reproducibility_group
from clients.flag_types import int_at_least
from clients.md_fixed_features import LEARNERS
from clients.trainer_args import (DEVICES, FRAMEWORKS, MAX_RUN_ID, MD_IMAGE_SIZE, REGIME_SAMPLINGS, SELECTIONS,
                                  TrainerArgumentParser, TrainerHelpFormatter, add_server_group, build_cog_parser,
                                  build_transfer_parser, check_server_group, describe)

PROTOCOLS = ("md", "vtab", "cog")
DEFAULT_PRESETS = ("md-v1",)
MD_EPISODES = 600
MD_EXTRACT_BATCH_SIZE = 256
RUN_SUFFIX_ROOM = 40  # the longest sub-run suffix: "/md-v2/prototypes" and the like
BACKBONE_FLAGS = (("backbone", "--backbone"), ("weights", "--weights"), ("image_size", "--image-size"),
                  ("input_range", "--input-range"), ("mean", "--mean"), ("std", "--std"))
# the same settings in every part of the job (their parsers' defaults would otherwise apply)
REPRODUCIBILITY_FLAGS = (("deterministic", "--deterministic"), ("threads", "--threads"))
# (evaluate's attribute, the transfer command's flag): passed on only when given
VTAB_FLAGS = (("vtab_protocol", "--protocol"), ("mode", "--mode"), ("lrs", "--lrs"), ("steps", "--steps"),
              ("steps_scale", "--steps-scale"), ("vtab_batch_size", "--batch-size"), ("decay", "--decay"),
              ("warmup", "--warmup"), ("select", "--select"), ("select_split", "--select-split"),
              ("final_split", "--final-split"), ("runs", "--runs"), ("eval_batch_size", "--eval-batch-size"),
              ("vtab_seed", "--seed"), ("regime_seed", "--regime-seed"), ("regime_sampling", "--regime-sampling"))
COG_FLAGS = (("levels", "--levels"), ("shots", "--shots"), ("seeds", "--seeds"), ("level_size", "--level-size"),
             ("min_images", "--min-images"), ("levels_file", "--levels-file"),
             ("concepts_split_file", "--concepts-split-file"), ("grid", "--grid"), ("epochs", "--epochs"),
             ("cog_batch_size", "--batch-size"), ("extract_batch_size", "--extract-batch-size"))
PLACEHOLDER_TASK = "placeholder-task"  # the transfer parser needs a task; evaluate names them after ListTasks


def _protocols(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(","))
    unknown = [name for name in names if name not in PROTOCOLS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a comma-separated list of {', '.join(PROTOCOLS)}")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected each protocol once")
    return tuple(name for name in PROTOCOLS if name in names)  # always run in this order


def _name(text: str) -> str:
    if not text or not text.isprintable() or text != text.strip():
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a name as the server spells it")
    return text


class EvaluateArgumentParser(TrainerArgumentParser):
    """One-line errors as the trainer's; validated by ``evaluate``'s rules and, for the VTAB
    and CoG flags, by the ``transfer`` and ``cog`` parsers themselves."""

    framework = "torch"

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        parsed, extras = argparse.ArgumentParser.parse_known_args(self, args, namespace)
        _validate(self, parsed)
        return parsed, extras


def build_evaluate_parser(framework: str) -> argparse.ArgumentParser:
    """The ``evaluate`` command line of ``framework``; the same flags in both frameworks."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework: got {framework!r}, expected one of {', '.join(FRAMEWORKS)}")
    parser = EvaluateArgumentParser(
        prog=f"python -m clients.{framework} evaluate",
        description=describe("Evaluate one checkpoint on every protocol the server serves: Meta-Dataset test "
                             "episodes with frozen features (prototypes and a logistic-regression head), VTAB-1k "
                             "with the transfer command's protocol, ImageNet-CoG with the cog command's linear "
                             "evaluation. Each finished unit is reported at once; running the same command again "
                             "skips what the server holds."),
        formatter_class=TrainerHelpFormatter,
    )
    parser.framework = framework
    add_server_group(parser)
    add_backbone_group(parser, None, "per protocol: MD 84, VTAB and CoG 224", "image side every protocol is "
                       "served at")
    add_reproducibility_group(parser)

    job = parser.add_argument_group("the job")
    job.add_argument("--protocols", type=_protocols, default=PROTOCOLS, metavar="LIST",
                     help="comma-separated protocols to run, of md,vtab,cog")
    job.add_argument("--feature-cache", required=True, metavar="DIR",
                     help="frozen features are cached here, keyed by the weights' sha256, the split's fingerprint "
                          "and the preprocessing; every protocol and later run reuses them")
    job.add_argument("--extract-batch-size", type=int_at_least(1), default=None, metavar="N",
                     help=f"images per backbone forward pass (default: MD {MD_EXTRACT_BATCH_SIZE}, CoG the cog "
                          f"command's {cog_protocol.EXTRACT_BATCH_SIZE})")
    job.add_argument("--device", choices=DEVICES, default="auto", help="auto: a GPU when present, else CPU")
    job.add_argument("--report-batch", type=int_at_least(1), default=50, metavar="N",
                     help="MD episodes per ReportMetrics call")
    job.add_argument("--scratch-run", default=None, type=_name, metavar="RUN",
                     help="with --max-run: the control baselines' scratch run; the job ends with the calibrated "
                          "risks and CCI of the VTAB results against them")
    job.add_argument("--max-run", default=None, type=_name, metavar="RUN", help="the control baselines' max run")
    job.add_argument("--verbose", action="store_true",
                     help="also the protocols' own progress lines (each sweep setting, each CoG trial)")
    job.add_argument("--json-summary", default=None, metavar="PATH", help="write the job's summary as JSON here")

    md = parser.add_argument_group("Meta-Dataset (frozen features, fixed-feature learners)")
    md.add_argument("--presets", nargs="+", type=_name, default=list(DEFAULT_PRESETS), metavar="NAME",
                    help="benchmark variants whose test episodes are evaluated (md-v1, md-v2)")
    md.add_argument("--md-sources", nargs="+", type=_name, default=None, metavar="NAME",
                    help="test sources (default: every test source of each preset, as the server lists it)")
    md.add_argument("--episodes", type=int_at_least(1), default=MD_EPISODES, metavar="N",
                    help="test episodes per source (indices 0..N-1)")
    md.add_argument("--learners", nargs="+", choices=LEARNERS, default=list(LEARNERS),
                    help="prototypes: nearest centroid; logreg: logistic regression on L2-normalised features "
                         "(RFS: lbfgs, C=1, 1000 iterations)")
    md.add_argument("--md-seed", type=int_at_least(0), default=0, help="seed of the test episodes")

    vtab = parser.add_argument_group("VTAB-1k (the transfer command's protocol)")
    vtab.add_argument("--tasks", nargs="+", type=_name, default=None, metavar="TASK",
                      help="VTAB tasks (default: every VTAB-1k task the server lists)")
    vtab.add_argument("--vtab-protocol", choices=tuple(vtab_transfer_protocols.PROTOCOLS), default=None,
                      help=f"the transfer command's --protocol (default: "
                           f"{vtab_transfer_protocols.DEFAULT_PROTOCOL}, the VTAB paper's)")
    vtab.add_argument("--mode", choices=vtab_transfer_protocols.MODES, default=None,
                      help="linear: a probe on frozen features; finetune: every weight (default: the protocol's)")
    for flag, help_text in (("--lrs", "learning rates swept"), ("--steps", "steps swept")):
        vtab.add_argument(flag, nargs="+", default=None, metavar="V", help=f"{help_text} (default: the protocol's)")
    vtab.add_argument("--steps-scale", default=None, metavar="F",
                      help="multiply every step count by F (CPU runs; default 1)")
    vtab.add_argument("--vtab-batch-size", type=int_at_least(1), default=None, metavar="N",
                      help="images per step (default: the protocol's)")
    vtab.add_argument("--decay", choices=tuple(vtab_transfer_protocols.DECAYS), default=None,
                      help="where the rate drops /10 (default: the protocol's)")
    vtab.add_argument("--warmup", default=None, metavar="F", help="warm-up fraction (default: the protocol's)")
    vtab.add_argument("--select", choices=SELECTIONS, default=None, help="selection (default: the protocol's)")
    vtab.add_argument("--select-split", choices=vtab_transfer_protocols.SELECT_SPLITS, default=None,
                      help="the split settings are scored on (default: the protocol's)")
    vtab.add_argument("--final-split", choices=vtab_transfer_protocols.FINAL_SPLITS, default=None,
                      help="what the chosen setting is trained on (default: the protocol's)")
    vtab.add_argument("--runs", type=int_at_least(1), default=None, metavar="N",
                      help="final runs per task, median reported (default: the protocol's)")
    vtab.add_argument("--eval-batch-size", type=int_at_least(1), default=None, metavar="N",
                      help="images per evaluation forward pass (default: the transfer command's)")
    vtab.add_argument("--vtab-seed", type=int_at_least(0), default=None, metavar="S",
                      help="the transfer command's --seed (default 0)")
    vtab.add_argument("--regime", dest="regimes", action="append", type=int_at_least(1), default=None,
                      metavar="N", help="a data regime of N training examples (repeatable; control baselines)")
    vtab.add_argument("--regime-seed", type=int_at_least(0), default=None, metavar="S", help="seed of the regimes")
    vtab.add_argument("--regime-sampling", choices=REGIME_SAMPLINGS, default=None, help="how regimes are drawn")

    cog = parser.add_argument_group("ImageNet-CoG (the cog command's linear evaluation)")
    cog.add_argument("--levels", nargs="+", default=None, metavar="LEVEL",
                     help="levels (default: every level the server lists)")
    cog.add_argument("--shots", nargs="+", default=None, metavar="N",
                     help="training images per concept: 'all' or integers (default: the paper's all 1 2 4 ... 128)")
    cog.add_argument("--seeds", nargs="+", default=None, metavar="S", help="seeds (default: the paper's 1..5)")
    cog.add_argument("--level-size", default=None, metavar="K", help="concepts per level L1..L5 (default 1000)")
    cog.add_argument("--min-images", default=None, metavar="M", help="images a concept needs (default 782)")
    cog.add_argument("--levels-file", default=None, metavar="FILE", help="naver/cog's levels file on the server")
    cog.add_argument("--concepts-split-file", default=None, metavar="FILE",
                     help="naver/cog's concepts split file on the server")
    cog.add_argument("--grid", default=None, metavar="LRxWD", help="search grid (default 6x5)")
    cog.add_argument("--epochs", default=None, metavar="N", help="epochs of every fit (default 100)")
    cog.add_argument("--cog-batch-size", default=None, metavar="N", help="features per SGD step (default 1024)")
    return parser


def _validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if len(args.run) > MAX_RUN_ID - RUN_SUFFIX_ROOM:
        parser.error(f"argument --run: got {len(args.run)} characters, expected at most {MAX_RUN_ID - RUN_SUFFIX_ROOM} "
                     "(evaluate stores each protocol under RUN/<protocol>)")
    for name in ("presets", "md_sources", "learners", "tasks"):
        values = getattr(args, name) or []
        if len(set(values)) != len(values):
            parser.error(f"argument --{name.replace('_', '-')}: got {' '.join(values)}, expected each value once")
    if (args.scratch_run is None) != (args.max_run is None):
        parser.error("arguments --scratch-run/--max-run: expected both (the calibration needs the two controls) "
                     "or neither")
    check_server_group(parser, args)
    image_size = args.image_size  # as given: each protocol resolves its own default
    check_backbone_group(parser, args, MD_IMAGE_SIZE)
    args.image_size = image_size
    framework = getattr(parser, "framework", "torch")
    # the VTAB and CoG flags, checked by their own commands' parsers now (the real tasks come later)
    if "vtab" in args.protocols:
        transfer_namespace(args, framework, [PLACEHOLDER_TASK], args.run, error=parser.error)
    if "cog" in args.protocols:
        cog_namespace(args, framework, args.run, error=parser.error)


def parse_evaluate_args(framework: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and validate ``argv`` (default: sys.argv[1:]); exits 2 with one line on bad input."""
    return build_evaluate_parser(framework).parse_args(list(sys.argv[1:] if argv is None else argv))


# ---- the transfer and cog commands' arguments ---------------------------------------------------


def _flags(args: argparse.Namespace, table: Sequence[tuple[str, str]]) -> list[str]:
    """``--flag value...`` for every attribute of ``table`` that was given."""
    argv: list[str] = []
    for name, flag in table:
        value = getattr(args, name, None)
        if value is None:
            continue
        argv.append(flag)
        argv.extend(str(v) for v in value) if isinstance(value, (list, tuple)) else argv.append(str(value))
    return argv


def server_argv(args: argparse.Namespace, run_id: str) -> list[str]:
    argv = ["--server", args.server, "--run", run_id, "--connect-timeout", str(args.connect_timeout),
            "--retries", str(args.retries)]
    for name in ("tls_ca", "tls_cert", "tls_key", "token_file"):
        if getattr(args, name) is not None:
            argv += [f"--{name.replace('_', '-')}", getattr(args, name)]
    return argv


def _parse_as(parser: argparse.ArgumentParser, argv: list[str], prog: str, error: Any) -> argparse.Namespace:
    """``argv`` parsed by another command's parser; its one-line refusal goes to ``error``
    (evaluate's parser.error) when given, else it exits as that parser does."""
    parser.prog = prog
    if error is not None:
        parser.error = error  # type: ignore[method-assign]
    return parser.parse_args(argv)


def transfer_namespace(args: argparse.Namespace, framework: str, tasks: Sequence[str], run_id: str,
                       error: Any = None) -> argparse.Namespace:
    """The ``transfer`` command's parsed arguments for ``tasks`` under ``run_id``: its own
    parser, so its protocol resolution and checks apply unchanged."""
    argv = (server_argv(args, run_id) + ["--tasks", *tasks, "--device", args.device, "--log-every", "1000000"]
            + _flags(args, BACKBONE_FLAGS) + _flags(args, REPRODUCIBILITY_FLAGS) + _flags(args, VTAB_FLAGS))
    for n in args.regimes or ():
        argv += ["--regime", str(n)]
    return _parse_as(build_transfer_parser(framework), argv, f"python -m clients.{framework} evaluate", error)


def cog_namespace(args: argparse.Namespace, framework: str, run_id: str, error: Any = None) -> argparse.Namespace:
    """The ``cog`` command's parsed arguments under ``run_id`` (same feature cache)."""
    argv = (server_argv(args, run_id) + ["--feature-cache", args.feature_cache, "--device", args.device,
                                         "--log-every", "1000000"]
            + _flags(args, BACKBONE_FLAGS) + _flags(args, REPRODUCIBILITY_FLAGS) + _flags(args, COG_FLAGS))
    return _parse_as(build_cog_parser(framework), argv, f"python -m clients.{framework} evaluate", error)
