"""The ``evaluate`` command line (``python -m clients.torch evaluate`` / ``clients.tf evaluate``),
the same in both frameworks (framework-free).

It takes the server group and the backbone contract's group of every trainer command
(``--backbone`` required), which protocols to run, and each protocol's knobs:

- Meta-Dataset: ``--presets``, ``--md-sources`` (default: every test source of each preset,
  as the server lists it), ``--episodes`` per source (600), ``--md-learners`` (``--learners``, its
  older name, still accepted: command lines written before the adapting learners keep working),
  ``--md-seed``, and the adapting learners' options, declared once with the trainer's
  (``clients.trainer_args.ADAPTATION_GROUP``) and given evaluate's defaults here
  (``EVALUATE_ADAPTATION``): Meta-Dataset's best test-time settings for a backbone that was never
  meta-trained (../shared/reference/md_learners.md, section 5).
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
``evaluate`` parses, in one line naming the flag. What is handed on, and under which flag,
is declared with each option (its ``forward``, ``clients.trainer_options``): the server,
backbone and reproducibility groups and ``--device`` go to both commands (the run id as each
protocol's sub-run), each protocol's flags to its command. The backbone flags reach every
protocol as given: a flag left out lets each protocol take the backbone's declared
attribute, else its own default (84 px for MD; 224 px for VTAB and CoG; CoG normalises
with ImageNet's mean and std).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

from clients import cog_protocol, vtab_transfer_protocols
from clients.backbone_contract import backbone_group, check_backbone_group
from clients.determinism import reproducibility_group
from clients.feature_cache import default_cache_dir
from clients.flag_types import int_at_least, split_flag, split_metavar
from clients.md_fixed_features import DEFAULT_LEARNERS, LEARNERS
from clients.md_learners import ADAPTING, BIT_IMAGE_SIZE, FINETUNING
from clients.server_options import MAX_RUN_ID, SERVER_GROUP, check_server_group
from clients.trainer_args import (ADAPTATION_GROUP, FRAMEWORKS, MD_IMAGE_SIZE, NO_SWEEP, REGIME_SAMPLINGS, SELECT_SPLITS,
                                  SELECTIONS, TrainerArgumentParser,
                                  TrainerHelpFormatter, batch_norm_option, build_cog_parser, build_transfer_parser,
                                  describe, device_option, precision_option)
from clients.trainer_options import Option, OptionGroup, add_groups, handed_on, option

PROTOCOLS = ("md", "vtab", "cog")
DEFAULT_PRESETS = ("md-v1",)
MD_EPISODES = 600
MD_EXTRACT_BATCH_SIZE = 256
RUN_SUFFIX_ROOM = 40  # the longest sub-run suffix: "/md-v2/prototypes" and the like
PLACEHOLDER_TASK = "placeholder-task"  # the transfer parser needs a task; evaluate names them after ListTasks
ADAPTING_LEARNERS = (*FINETUNING, *ADAPTING)
"""The learners that adapt the backbone's weights on each episode (its images, not cached features)."""
MD_LEARNERS = (*LEARNERS, *ADAPTING_LEARNERS)
EVALUATE_ADAPTATION: dict[str, object] = {
    # best/maml_init_with_proto_inference_{imagenet,all}.gin: one inner step at test (alpha: per preset)
    "maml_steps": 1, "maml_eval_steps": 0, "maml_alpha": None,
    # best/baselinefinetune_{imagenet,all}.gin: 200 Adam steps at 0.01 on all layers, a linear head with weight norm
    "finetune_steps": 200, "finetune_lr": 0.01, "finetune_optimizer": "adam", "finetune_all_layers": True,
    "classifier": "linear", "cosine_multiplier": 1.0, "weight_norm": True,
}
"""evaluate's defaults of the adaptation options: Meta-Dataset's best test-time settings for a
backbone that was never meta-trained (md_learners.md, section 5)."""
PROTOMAML_ALPHAS = {"md-v1": 0.0614, "md-v2": 0.00577}
"""--maml-alpha by preset: MD's Proto-MAML inference, trained on all sources (md-v1's setting) or on
ImageNet alone (md-v2's: VTAB+MD starts every learner from an ImageNet classifier)."""
DEFAULT_PROTOMAML_ALPHA = PROTOMAML_ALPHAS["md-v1"]  # a preset of another name
EVALUATE_HELP = {
    "maml_steps": "maml, protomaml: inner SGD steps on each test episode's support set, with --maml-eval-steps "
                  "(default 1: MD's Proto-MAML inference)",
    "maml_eval_steps": "maml, protomaml: steps added to --maml-steps",
    "maml_alpha": "maml, protomaml: the inner steps' size (default: by preset, MD's Proto-MAML inference: md-v1 "
                  f"{PROTOMAML_ALPHAS['md-v1']} (trained on all sources), md-v2 {PROTOMAML_ALPHAS['md-v2']} "
                  f"(ImageNet only), another {DEFAULT_PROTOMAML_ALPHA})",
}


def maml_alpha(given: float | None, preset: str) -> float:
    """The inner steps' size of ``preset``'s units: ``--maml-alpha``, else the preset's."""
    return given if given is not None else PROTOMAML_ALPHAS.get(preset, DEFAULT_PROTOMAML_ALPHA)


def _evaluates(declared: Option) -> Option:
    """A trainer adaptation option with evaluate's default (a switch on by default gets its
    ``--no-`` form) and, where the meaning differs, evaluate's help."""
    settings = {**declared.settings, "default": EVALUATE_ADAPTATION.get(declared.dest, declared.settings.get("default"))}
    if settings.get("action") == "store_true":
        settings["action"] = argparse.BooleanOptionalAction
    if declared.dest in EVALUATE_HELP:
        settings["help"] = EVALUATE_HELP[declared.dest]
    return dataclasses.replace(declared, settings=settings)


def _md_learners(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(","))
    unknown = [name for name in names if name not in MD_LEARNERS]
    if unknown or not all(names):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected learners of {', '.join(MD_LEARNERS)} "
                                          "(comma-separated or apart)")
    return names


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


def evaluate_groups() -> tuple[OptionGroup, ...]:
    """The evaluate command's options, the same in both frameworks; ``forward`` names the
    command each VTAB and CoG option is handed to and its flag there."""
    return (
        SERVER_GROUP,
        backbone_group(None, "per protocol: MD 84, VTAB and CoG 224", "image side every protocol is served at"),
        reproducibility_group(seed=0),  # its random weights, saved and loaded by each protocol (seeds.py)
        OptionGroup("the job", (
            option("--protocols", type=_protocols, default=PROTOCOLS, metavar="LIST",
                   help="comma-separated protocols to run, of md,vtab,cog"),
            option("--feature-cache", default=None, metavar="DIR", forward=("cog",),
                   help="frozen features are cached here, keyed by the weights' sha256, the split's fingerprint, "
                        "the preprocessing and the precision; every protocol and later run reuses them "
                        "(default: $XDG_CACHE_HOME/sampler-server/features, else ~/.cache/sampler-server/features; the run's first line names it)"),
            option("--extract-batch-size", type=int_at_least(1), default=None, metavar="N", forward=("cog",),
                   help=f"images per backbone forward pass (default: MD {MD_EXTRACT_BATCH_SIZE}, CoG the cog "
                        f"command's {cog_protocol.EXTRACT_BATCH_SIZE})"),
            device_option("auto: a GPU when present, else CPU", forward=("transfer", "cog")),
            precision_option(forward=("cog",)),  # and Meta-Dataset's frozen features (clients.evaluate)
            option("--report-batch", type=int_at_least(1), default=50, metavar="N",
                   help="MD episodes per ReportMetrics call"),
            option("--scratch-run", default=None, type=_name, metavar="RUN",
                   help="with --max-run: the control baselines' scratch run; the job ends with the calibrated "
                        "risks and CCI of the VTAB results against them"),
            option("--max-run", default=None, type=_name, metavar="RUN", help="the control baselines' max run"),
            option("--verbose", action="store_true",
                   help="also the protocols' own progress lines (each sweep setting, each CoG trial)"),
            option("--json-summary", default=None, metavar="PATH", help="write the job's summary as JSON here"),
        )),
        OptionGroup("Meta-Dataset (test episodes, each learner a run)", (
            option("--presets", nargs="+", type=_name, default=list(DEFAULT_PRESETS), metavar="NAME",
                   help="benchmark variants whose test episodes are evaluated (md-v1, md-v2)"),
            option("--md-sources", nargs="+", type=_name, default=None, metavar="NAME",
                   help="test sources (default: every test source of each preset, as the server lists it)"),
            option("--episodes", type=int_at_least(1), default=MD_EPISODES, metavar="N",
                   help="test episodes per source (indices 0..N-1)"),
            option("--md-learners", "--learners", dest="md_learners", nargs="+", type=_md_learners,
                   default=[DEFAULT_LEARNERS], metavar="LEARNER",
                   help="comma-separated or apart. On frozen features: prototypes: nearest centroid; logreg: "
                        "logistic regression on L2-normalised features (RFS: lbfgs, C=1, 1000 iterations); knn: MD's "
                        "k-NN baseline, the nearest support image by cosine distance; matchingnet: MD's Matching "
                        "Networks, attention over the support images (semi-cosine). Adapting a copy of the "
                        "backbone on each episode: finetune: MD's Finetune baseline (a new head, the --finetune-* "
                        "options); md-transfer: VTAB+MD's MD-Transfer (a cosine head x10, 100 Adam steps at 0.01, "
                        "all layers); bit-md: VTAB+MD's BiT heuristic (500 SGD steps with momentum, batches of "
                        f"512, at {BIT_IMAGE_SIZE} px); maml, protomaml: MD's fo-MAML and fo-Proto-MAML inner loop "
                        "(the --maml-* options). Default: prototypes logreg"),
            option("--md-seed", type=int_at_least(0), default=0, help="seed of the test episodes"),
            option("--md-ways", type=int_at_least(2), default=None, metavar="N",
                   help="fixed ways of the test episodes (default: MD's variable ways, 5 to 50: a source whose "
                        "test split has fewer classes needs this)"),
            option("--md-shots", type=int_at_least(1), default=None, metavar="K",
                   help="fixed support images per class (default: MD variable shots)"),
            option("--md-query", type=int_at_least(1), default=None, metavar="Q",
                   help="fixed query images per class (default: MD, at most 10)"),
            batch_norm_option("md", "the embedding's "),
        )),
        OptionGroup("Meta-Dataset adapting learners (finetune, maml, protomaml)",
                    tuple(_evaluates(declared) for declared in ADAPTATION_GROUP.options),
                    describe("The trainer's flags; evaluate's defaults are Meta-Dataset's best test-time settings "
                             "for a backbone never meta-trained (md-transfer and bit-md are fixed recipes)")),
        OptionGroup("VTAB-1k (the transfer command's protocol)", (
            # handed on as the tasks evaluate runs: these, else every task the server lists
            option("--tasks", nargs="+", type=_name, default=None, metavar="TASK", forward=("transfer",),
                   help="VTAB tasks (default: every VTAB-1k task the server lists)"),
            option("--vtab-protocol", choices=tuple(vtab_transfer_protocols.PROTOCOLS), default=None,
                   forward={"transfer": "--protocol"},
                   help=f"the transfer command's --protocol (default: {vtab_transfer_protocols.DEFAULT_PROTOCOL}, "
                        "the VTAB paper's)"),
            option("--mode", choices=vtab_transfer_protocols.MODES, default=None, forward=("transfer",),
                   help="linear: a probe on frozen features; finetune: every weight (default: the protocol's)"),
            option("--lrs", nargs="+", default=None, metavar="V", forward=("transfer",),
                   help="learning rates swept (default: the protocol's)"),
            option("--steps", nargs="+", default=None, metavar="V", forward=("transfer",),
                   help="steps swept (default: the protocol's)"),
            option("--steps-scale", default=None, metavar="F", forward=("transfer",),
                   help="multiply every step count by F (CPU runs; default 1)"),
            option("--vtab-batch-size", type=int_at_least(1), default=None, metavar="N",
                   forward={"transfer": "--batch-size"}, help="images per step (default: the protocol's)"),
            option("--decay", choices=tuple(vtab_transfer_protocols.DECAYS), default=None, forward=("transfer",),
                   help="where the rate drops /10 (default: the protocol's)"),
            option("--warmup", default=None, metavar="F", forward=("transfer",),
                   help="warm-up fraction (default: the protocol's)"),
            option("--select", choices=SELECTIONS, default=None, forward=("transfer",),
                   help="selection (default: the protocol's)"),
            option("--select-split", type=split_flag(SELECT_SPLITS, NO_SWEEP), default=None,
                   metavar=split_metavar(SELECT_SPLITS, NO_SWEEP), forward=("transfer",), help="the split settings are scored on (default: the protocol's)"),
            option("--final-split", choices=vtab_transfer_protocols.FINAL_SPLITS, default=None,
                   forward=("transfer",), help="what the chosen setting is trained on (default: the protocol's)"),
            option("--runs", type=int_at_least(1), default=None, metavar="N", forward=("transfer",),
                   help="final runs per task, median reported (default: the protocol's)"),
            option("--eval-batch-size", type=int_at_least(1), default=None, metavar="N", forward=("transfer",),
                   help="images per evaluation forward pass (default: the transfer command's)"),
            option("--vtab-seed", type=int_at_least(0), default=None, metavar="S", forward={"transfer": "--seed"},
                   help="the transfer command's --seed (default 0)"),
            option("--regime", dest="regimes", action="append", type=int_at_least(1), default=None, metavar="N",
                   forward=("transfer",),
                   help="a data regime of N training examples (repeatable; control baselines)"),
            option("--regime-seed", type=int_at_least(0), default=None, metavar="S", forward=("transfer",),
                   help="seed of the regimes"),
            option("--regime-sampling", choices=REGIME_SAMPLINGS, default=None, forward=("transfer",),
                   help="how regimes are drawn: uniform (default), stratified (scikit-learn's "
                        "StratifiedShuffleSplit) or one-per-class-first"),
        )),
        OptionGroup("ImageNet-CoG (the cog command's linear evaluation)", (
            option("--levels", nargs="+", default=None, metavar="LEVEL", forward=("cog",),
                   help="levels (default: every level the server lists)"),
            option("--shots", nargs="+", default=None, metavar="N", forward=("cog",),
                   help="training images per concept: 'all' or integers (default: the paper's all 1 2 4 ... 128)"),
            option("--seeds", nargs="+", default=None, metavar="S", forward=("cog",),
                   help="seeds (default: the paper's 1..5)"),
            option("--level-size", default=None, metavar="K", forward=("cog",),
                   help="concepts per level L1..L5 (default 1000)"),
            option("--min-images", default=None, metavar="M", forward=("cog",),
                   help="images a concept needs (default 782)"),
            option("--levels-file", default=None, metavar="FILE", forward=("cog",),
                   help="naver/cog's levels file on the server"),
            option("--concepts-split-file", default=None, metavar="FILE", forward=("cog",),
                   help="naver/cog's concepts split file on the server"),
            option("--grid", default=None, metavar="LRxWD", forward=("cog",), help="search grid (default 6x5)"),
            option("--epochs", default=None, metavar="N", forward=("cog",), help="epochs of every fit (default 100)"),
            option("--cog-batch-size", default=None, metavar="N", forward={"cog": "--batch-size"},
                   help="features per SGD step (default 1024)"),
        )),
    )


def build_evaluate_parser(framework: str) -> argparse.ArgumentParser:
    """The ``evaluate`` command line of ``framework``; the same flags in both frameworks."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework: got {framework!r}, expected one of {', '.join(FRAMEWORKS)}")
    parser = EvaluateArgumentParser(
        prog=f"python -m clients.{framework} evaluate",
        description=describe("Evaluate one checkpoint on every protocol the server serves: Meta-Dataset test "
                             "episodes (learners on frozen features, and learners adapting a copy of the backbone "
                             "on each episode), VTAB-1k "
                             "with the transfer command's protocol, ImageNet-CoG with the cog command's linear "
                             "evaluation. Each finished unit is reported at once; running the same command again "
                             "skips what the server holds."),
        formatter_class=TrainerHelpFormatter,
    )
    parser.framework = framework
    add_groups(parser, evaluate_groups(), "evaluate")
    return parser


def _validate(parser: EvaluateArgumentParser, args: argparse.Namespace) -> None:
    if len(args.run) > MAX_RUN_ID - RUN_SUFFIX_ROOM:
        parser.error(f"argument --run: got {len(args.run)} characters, expected at most {MAX_RUN_ID - RUN_SUFFIX_ROOM} "
                     "(evaluate stores each protocol under RUN/<protocol>)")
    args.md_learners = [name for names in args.md_learners for name in names]
    for name in ("presets", "md_sources", "md_learners", "tasks"):
        values = getattr(args, name) or []
        if len(set(values)) != len(values):
            parser.error(f"argument --{name.replace('_', '-')}: got {' '.join(values)}, expected each value once")
    if (args.scratch_run is None) != (args.max_run is None):
        parser.error("arguments --scratch-run/--max-run: expected both (the calibration needs the two controls) "
                     "or neither")
    check_server_group(parser, args)
    image_size = args.image_size  # as given: each protocol resolves its own default
    if "bit-md" in args.md_learners and image_size not in (None, BIT_IMAGE_SIZE):
        parser.error(f"argument --md-learners: bit-md runs at {BIT_IMAGE_SIZE} px (VTAB+MD's BiT), but --image-size "
                     f"fixes the backbone's input at {image_size} px; leave bit-md out or give --image-size "
                     f"{BIT_IMAGE_SIZE}")
    check_backbone_group(parser, args, MD_IMAGE_SIZE)
    args.feature_cache = args.feature_cache or str(default_cache_dir())
    args.image_size = image_size
    framework = parser.framework
    # the VTAB and CoG flags, checked by their own commands' parsers now (the real tasks come later)
    if "vtab" in args.protocols:
        transfer_namespace(args, framework, [PLACEHOLDER_TASK], args.run, error=parser.error)
    if "cog" in args.protocols:
        cog_namespace(args, framework, args.run, error=parser.error)


def parse_evaluate_args(framework: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and validate ``argv`` (default: sys.argv[1:]); exits 2 with one line on bad input."""
    return build_evaluate_parser(framework).parse_args(list(sys.argv[1:] if argv is None else argv))


# ---- the transfer and cog commands' arguments ---------------------------------------------------

QUIET = ["--log-every", "1000000"]  # the job logs each unit once; its own flags speak for the protocols


def _parse_as(parser: argparse.ArgumentParser, argv: list[str], prog: str, error: Any) -> argparse.Namespace:
    """``argv`` parsed by another command's parser; its one-line refusal goes to ``error``
    (evaluate's parser.error) when given, else it exits as that parser does."""
    parser.prog = prog
    if error is not None:
        parser.error = error  # type: ignore[method-assign]
    return parser.parse_args(argv)


def transfer_namespace(args: argparse.Namespace, framework: str, tasks: Sequence[str], run_id: str,
                       error: Any = None) -> argparse.Namespace:
    """The ``transfer`` command's parsed arguments for ``tasks`` under ``run_id``: every option
    declared to go there, parsed by its own parser, so its protocol resolution and checks
    apply unchanged."""
    argv = handed_on(evaluate_groups(), args, "transfer", {"run": run_id, "tasks": list(tasks)}) + QUIET
    return _parse_as(build_transfer_parser(framework), argv, f"python -m clients.{framework} evaluate", error)


def cog_namespace(args: argparse.Namespace, framework: str, run_id: str, error: Any = None) -> argparse.Namespace:
    """The ``cog`` command's parsed arguments under ``run_id`` (same feature cache)."""
    argv = handed_on(evaluate_groups(), args, "cog", {"run": run_id}) + QUIET
    return _parse_as(build_cog_parser(framework), argv, f"python -m clients.{framework} evaluate", error)
