"""The command line shared by the PyTorch and TensorFlow trainers (framework-free).

Both ``python -m clients.torch`` and ``python -m clients.tf`` take exactly these
arguments, so a run can be repeated in the other framework by changing the module
name only. Parsing validates every value: bad input ends in ONE line on stderr
(``<prog>: error: <what>, got <value>``) and exit status 2, never a traceback.

Names are the server's: ``--sources`` and ``--eval-sources`` take store names or
source kinds and ``--preset`` a benchmark variant, passed to the server unchanged
(it resolves them, or refuses them naming what it serves). ``--preset`` alone trains
on the preset's sources; combined with ``--sources`` it selects whose class splits
apply. What needs one stream per source (evaluation, the baseline's batches) needs
the sources named. ``run_config`` builds the configuration stored with the reports.

Every option is declared once (``clients.trainer_options``): each command's parser is
built from its groups (``train_groups``, ``transfer_groups``, ``cog_groups``), with the
server group (``clients.server_options``), the backbone contract's and reproducibility's
shared by all of them, and each option says how the run configuration treats it: what a
command leaves out is its ``*_OPERATIONAL`` tuple, derived from the declarations. The
connection flags (TLS, tokens, retries) are operational; ``--shape-buckets`` is recorded
(as given, and as resolved under ``shape_buckets``) though padding is exact; so is the
torch trainer's ``--compile`` (resolved under ``compile``).
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from clients import cog_protocol, md_presets, vtab_transfer_protocols
from clients.backbone_contract import NAMED_BACKBONES, backbone_group, check_backbone_group
from clients.batch_norm import BATCH_NORMS
from clients.buckets import DEFAULT_RATIO, SHAPE_BUCKETS
from clients.determinism import reproducibility_group
from clients.feature_cache import default_cache_dir
from clients.flag_types import float_in, int_at_least, positive_float, seed_flag, split_flag, split_metavar
from clients.server_options import SERVER_GROUP, check_server_group
from clients.md_learners import OPTIMIZERS as FINETUNE_OPTIMIZERS
from clients.md_learners import (ADAPTING, BIT_IMAGE_SIZE, EPISODE_HEADS, FINETUNE_LR, FINETUNE_STEPS, MAML_ALPHA,
                                 MAML_EVAL_STEPS, MAML_STEPS, MODELS, episodic, eval_head)
from clients.recipe import OPTIMIZERS
from clients.validation import MD_VALIDATION_SOURCES
from clients.trainer_options import Option, OptionGroup, Record, Resume, add_groups, operational, option
from sampler_common import splits

COMPILE_SETTINGS = ("auto", "on", "off")
"""The torch trainer's ``--compile`` (``clients.torch.compiled.resolve_compile``)."""

FRAMEWORKS = ("torch", "tf")
MD_SPLITS = splits.MD
"""The MD trainer's split flags take Meta-Dataset's names and their aliases (val, validation), as every layer does."""
SELECT_SPLITS = splits.VTAB.within(("val", "val200"))
"""The transfer sweep's validation splits (with ``none``: no sweep); valid and validation name val."""
NO_SWEEP = ("none",)
DEVICES = ("auto", "cpu", "cuda")
RECEIVE_SETTINGS = ("auto", "process", "thread")
"""The MD trainer's ``--receive`` (``clients.receiver``)."""
MD_IMAGE_SIZE = 84
TRANSFER_IMAGE_SIZE = 224


TRAINER_COMMANDS = (
    ("train", "the Meta-Dataset trainer, also run when no command is named: Prototypical Networks on episodes "
              "(or the batch baseline), evaluated on test episodes one source at a time"),
    ("transfer", "VTAB-1k transfer of a backbone: a linear probe, fine-tuning or ProtoNet episodes under a named "
                 "protocol; per-task top-1"),
    ("cog", "ImageNet-CoG linear evaluation of a backbone on the concept levels, per level, N and seed"),
    ("evaluate", "one checkpoint on Meta-Dataset, VTAB-1k and ImageNet-CoG at once, resumable"),
)
"""Each trainer command and its one-line summary, listed by the top-level ``--help``
(``python -m clients.torch`` / ``clients.tf`` dispatch on the same names)."""
HELP_WIDTH = 100
_NAMES_A_DEFAULT = re.compile(r"\bdefault\b", re.IGNORECASE)

COMMAND_MODULES = {"train": "md_train", "transfer": "vtab_transfer", "cog": "cog_eval", "evaluate": "evaluate"}
"""The module of each command under ``clients.torch`` and ``clients.tf``: its ``main`` runs it."""


def command_main(package: str, argv: Sequence[str]) -> tuple[str, Any, list[str]]:
    """(command, its ``main``, its arguments) for ``python -m PACKAGE ARGV``: ``train`` when
    ``argv`` names no command. The command's module (and its framework) is imported with the
    collector held off (``sampler_common.startup``): this runs only as a program's entry."""
    import importlib

    from sampler_common.startup import program_imports

    named = bool(argv) and argv[0] in COMMAND_MODULES
    command = argv[0] if named else "train"
    with program_imports():
        main = importlib.import_module(f"{package}.{COMMAND_MODULES[command]}").main
    return command, main, list(argv[1:] if named else argv)


class TrainerHelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """One default per help line: argparse's ``(default: X)`` is added only where the help
    text names no default of its own and there is one to show (not None); descriptions and
    epilogs keep the lines they were given (wrapped by ``describe``)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or _NAMES_A_DEFAULT.search(action.help or ""):
            return action.help
        return super()._get_help_string(action)


def describe(*paragraphs: str) -> str:
    """Paragraphs wrapped for ``TrainerHelpFormatter`` (which keeps description lines as given)."""
    return "\n\n".join(textwrap.fill(paragraph, HELP_WIDTH) for paragraph in paragraphs)


def commands_help(framework: str) -> str:
    """The commands of ``python -m clients.<framework>``, one line each, for its top-level help."""
    lines = [f"commands (python -m clients.{framework} COMMAND --help shows each one's flags):"]
    for name, summary in TRAINER_COMMANDS:
        lines.append(textwrap.fill(summary, HELP_WIDTH, initial_indent=f"  {name:<10}", subsequent_indent=" " * 12))
    return "\n".join(lines)


class TrainerArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line and whose results are validated."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message.splitlines()[0] if message else 'bad arguments'}\n")

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        parsed, extras = super().parse_known_args(args, namespace)
        _validate(self, parsed)
        return parsed, extras


def _source_name(text: str) -> str:
    if not text or not text.isprintable() or text != text.strip():
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a source name")
    return text


def device_option(help_text: str, forward: Sequence[str] = ()) -> Option:
    """``--device``: every trainer command's, recorded as what the run was computed with."""
    return option("--device", choices=DEVICES, default="auto", record=Record.ENVIRONMENT, resume=Resume.FREE,
                  forward=forward, help=help_text)


JSON_SUMMARY = option("--json-summary", default=None, metavar="PATH", record=Record.OPERATIONAL,
                      resume=Resume.FREE, help="write the run summary as JSON here")


def log_every_option(default: int, help_text: str) -> Option:
    return option("--log-every", type=int_at_least(1), default=default, metavar="N", record=Record.OPERATIONAL,
                  resume=Resume.FREE, help=help_text)


# ---- the Meta-Dataset trainer (``python -m clients.torch [train]`` / ``clients.tf``) -----------

_RESULT = {"record": Record.RESULT, "resume": Resume.FREE}  # defines the results; a resume may change it
_SEQUENCE = {"record": Record.RESULT, "resume": Resume.SEQUENCE}  # and fixes the training sequence
_MODEL = {"record": Record.RESULT, "resume": Resume.MODEL}  # and fixes the model
_OPERATIONAL = {"record": Record.OPERATIONAL, "resume": Resume.FREE}


def batch_norm_option(default: str | None, scope: str = "", **record: Any) -> Option:
    """``--batch-norm``, declared once for the trainers, ``transfer --mode protonet`` and
    ``evaluate``'s Meta-Dataset learners (``clients.batch_norm``)."""
    return option("--batch-norm", choices=BATCH_NORMS, default=default, **record,
                  help=f"{scope}episode batch norm: md (Meta-Dataset's: the support set's moments normalise the "
                       "support and the query, gradient through them, no running averages at training or test), "
                       "transductive (support and query each by their own moments), running (support and query "
                       "together in training, running averages at test); clients/batch_norm.py")


ADAPTATION_GROUP = OptionGroup("test-time adaptation (maml, protomaml, finetune)", (
    option("--maml-steps", type=int_at_least(0), default=MAML_STEPS, metavar="N", **_RESULT,
           help="maml, protomaml: inner SGD steps on each training episode's support set"),
    option("--maml-eval-steps", type=int_at_least(0), default=MAML_EVAL_STEPS, metavar="N", **_RESULT,
           help="maml, protomaml: inner steps added at validation and test"),
    option("--maml-alpha", type=positive_float, default=MAML_ALPHA, metavar="A", **_RESULT,
           help="maml, protomaml: the inner steps' size"),
    option("--finetune-steps", type=int_at_least(0), default=FINETUNE_STEPS, metavar="N", **_RESULT,
           help="finetune: steps of a new head (and the backbone, --finetune-all-layers) on each "
                "validation and test episode's support set"),
    option("--finetune-lr", type=positive_float, default=FINETUNE_LR, metavar="LR", **_RESULT,
           help="finetune: their learning rate"),
    option("--finetune-optimizer", choices=FINETUNE_OPTIMIZERS, default="sgd", **_RESULT,
           help="finetune: plain SGD (the reference's step, the batch norms' scale and offset kept), TF1's "
                "Adam (new moments in every episode) or SGD with momentum 0.9"),
    option("--finetune-all-layers", action=argparse.BooleanOptionalAction, default=False, **_RESULT,
           help="finetune: train the backbone too (a copy per episode), not the head alone"),
    option("--classifier", choices=("linear", "cosine"), default="linear", **_RESULT,
           help="baseline, knn, finetune: the form of the training head and of finetune's new head of each "
                "episode: linear (f W + b) or cosine (the cosine of f and each class's weights, times "
                "--cosine-multiplier; no bias)"),
    option("--cosine-multiplier", type=positive_float, default=1.0, metavar="M", **_RESULT,
           help="--classifier cosine: the logits' scale"),
    option("--weight-norm", action=argparse.BooleanOptionalAction, default=False, **_RESULT,
           help="baseline, knn, finetune: a weight-normalised head, W = g v / |v| with g learned (with cosine, only "
                "the features are normalised); g, and a linear head's bias, initialised from the first training "
                "batch's features; finetune's new heads start at g = 1, b = 0"),
))
"""The MAML family's inner loop and the Finetune baseline's test-time training: declared once, in
``train``'s model group and ``evaluate``'s adapting learners (its own defaults, ``clients.evaluate_args``)."""


def train_groups(framework: str) -> tuple[OptionGroup, ...]:
    """The train command's options of ``framework`` (``--compile``: torch only)."""
    compile_option = () if framework != "torch" else (
        option("--compile", choices=COMPILE_SETTINGS, default="off", **_RESULT,
               help="torch.compile the embedding step, one graph per bucket shape, kept in --compile-cache; a "
                    "background process compiles each shape the run meets while it trains that shape eager. auto: "
                    "on for our backbones on CUDA without an inner loop, where the compiled step measured faster "
                    "(bench/README.md, Compiled steps)"),
        option("--compile-cache", default=None, metavar="DIR", **_OPERATIONAL,
               help="where --compile keeps what it compiled, for every later run (default: "
                    "$XDG_CACHE_HOME/sampler-server/torch-compile, else ~/.cache/sampler-server/torch-compile; "
                    "the run's first line says how many shapes it holds)"),)
    return (
        SERVER_GROUP,
        OptionGroup("training data", (
            option("--sources", nargs="+", type=_source_name, metavar="NAME", **_SEQUENCE,
                   help="training sources: store names or source kinds (default with --preset: its sources)"),
            option("--preset", type=_source_name, metavar="NAME", **_SEQUENCE,
                   help="benchmark variant whose class splits apply (md-v1, md-v2; the server's list); "
                        "without --sources, protonet trains on its sources; or one of Meta-Dataset's best "
                        f"configurations ({', '.join(md_presets.names())}; clients/md_presets.json), which sets "
                        "every flag of the recipe, the flags given beside it winning"),
            option("--ways", type=int_at_least(2), default=None, metavar="N", **_SEQUENCE,
                   help="fixed ways of training episodes (default: MD variable ways)"),
            option("--shots", type=int_at_least(1), default=None, metavar="K", **_SEQUENCE,
                   help="fixed support images per class of training episodes (default: MD variable shots)"),
            option("--query", type=int_at_least(1), default=None, metavar="Q", **_SEQUENCE,
                   help="fixed query images per class of training episodes (default: MD, at most 10)"),
            option("--seed", type=seed_flag, default=0, **_SEQUENCE, help="seed of the training episodes / batches"),
        )),
        OptionGroup("model and optimisation", (
            option("--model", choices=MODELS, default="protonet", **_MODEL,
                   help="protonet: episodic Prototypical Networks; matchingnet: episodic Matching Networks "
                        "(MD's: semi-cosine attention, no full-context embeddings); relationnet: episodic Relation "
                        "Networks (a relation module on prototype and query maps, MSE loss); maml, protomaml: "
                        "first-order MAML (a zeroed head) and Proto-MAML (the head from the prototypes), adapting "
                        "the whole backbone on each support set; baseline: a classifier trained on plain batches, "
                        "evaluated with prototypes (MD's inference-only baseline); knn: trained as baseline, "
                        "evaluated by the nearest support image (MD's k-NN baseline); finetune: trained as "
                        "baseline, a new head trained on each episode's support set (MD's Finetune baseline)"),
            option("--eval-learner", choices=EPISODE_HEADS, default=None, **_RESULT,
                   help="classify the validation and test episodes with this learner's head instead of the "
                        "model's own (MD's inference-only variants: --model baseline --eval-learner "
                        "protonet|matchingnet|protomaml; VTAB+MD's transfer learners: md-transfer, bit-md at 224 px)"),
            *ADAPTATION_GROUP.options,
            option("--train-episodes", type=int_at_least(0), default=1000, metavar="T", **_RESULT,
                   help="protonet, matchingnet, maml, protomaml: training episodes (indices 0..T-1)"),
            option("--train-steps", type=int_at_least(0), default=1000, metavar="T", **_RESULT,
                   help="baseline, knn, finetune: number of plain training batches"),
            option("--batch-size", type=int_at_least(1), default=64, **_SEQUENCE,
                   help="baseline, knn, finetune: images per batch"),
            option("--optimizer", choices=OPTIMIZERS, default="adam", **_SEQUENCE,
                   help="adam (Meta-Dataset's, for every learner), sgd, or momentum (SGD with momentum 0.9); "
                        "torch's update rules in both frameworks"),
            option("--lr", type=positive_float, default=1e-3, **_RESULT, help="the optimizer's learning rate"),
            option("--weight-decay", type=float_in(0.0, 1.0), default=0.0, metavar="W", **_RESULT,
                   help="an L2 penalty W x (sum of squared kernels) added to the loss, as Meta-Dataset's (coupled, "
                        "not AdamW): convolution and linear kernels; no batch-norm parameter and no bias"),
            option("--decay-every", type=int_at_least(0), default=0, metavar="N", **_RESULT,
                   help="staircase learning-rate decay: lr x rate^floor(update / N) (0: a constant rate, MD's "
                        "default)"),
            option("--decay-rate", type=float_in(0.0, 1.0, low_open=True), default=0.5, metavar="R", **_RESULT,
                   help="the factor of each --decay-every step"),
            option("--init-from", default=None, metavar="CHECKPOINT", **_RESULT,
                   help="start the backbone (only) from this trainer checkpoint (its file or --checkpoint-dir), "
                        "with a fresh optimizer and schedule, as MD's meta-learners start from a pre-trained "
                        "baseline; a checkpoint in --checkpoint-dir takes precedence (a resumed run)"),
            batch_norm_option("md", **_SEQUENCE),
            device_option("auto: CUDA when present, else CPU"),
            option("--shape-buckets", choices=SHAPE_BUCKETS, default="auto", **_RESULT,
                   help="pad episodes to a few batch sizes (masked: what is learned does not change) so the GPU "
                        "meets few shapes; auto: on with a GPU, off on CPU"),
            option("--bucket-ratio", type=float_in(1.0, 2.0, low_open=True), default=DEFAULT_RATIO, metavar="R",
                   **_RESULT, help="the buckets' geometric grid above 64 rows: each size R times the last, rounded "
                                   "up to a multiple of 8; a finer grid pads less and meets more shapes"),
            option("--receive", choices=RECEIVE_SETTINGS, default="auto", **_OPERATIONAL,
                   help="where the training items are received: process (a child process, which takes nothing "
                        "from the training thread's share of the interpreter) or thread (in this process); auto: "
                        "process with a GPU, thread on CPU"),
            *compile_option,
        )),
        backbone_group("conv4", MD_IMAGE_SIZE, "image side the episodes are served at"),
        reproducibility_group(),
        OptionGroup("evaluation", (
            option("--eval-episodes", type=int_at_least(0), default=600, metavar="N", **_RESULT,
                   help="evaluation episodes per source (0: no evaluation)"),
            option("--eval-sources", nargs="+", type=_source_name, default=None, metavar="NAME", **_RESULT,
                   help="sources evaluated one at a time (default: --sources)"),
            option("--eval-split", type=split_flag(MD_SPLITS), default="test", metavar=split_metavar(MD_SPLITS),
                   **_RESULT, help="split of the evaluation episodes (val and validation name valid, as everywhere)"),
            option("--eval-seed", type=seed_flag, default=0, **_RESULT, help="seed of the evaluation episodes"),
            option("--eval-ways", type=int_at_least(2), default=None, metavar="N", **_RESULT,
                   help="fixed ways of the evaluation and validation episodes (default: MD's variable ways, 5 "
                        "to 50: a split with fewer classes needs this)"),
            option("--eval-shots", type=int_at_least(1), default=None, metavar="K", **_RESULT,
                   help="fixed support images per class of the evaluation and validation episodes (default: MD "
                        "variable shots)"),
            option("--eval-query", type=int_at_least(1), default=None, metavar="Q", **_RESULT,
                   help="fixed query images per class of the evaluation and validation episodes (default: MD, at "
                        "most 10)"),
            # evaluating a checkpoint again sends the same configuration
            option("--eval-only", action="store_true", **_OPERATIONAL,
                   help="skip training; evaluate the checkpoint found in --checkpoint-dir"),
            option("--report-batch", type=int_at_least(1), default=50, metavar="N", **_OPERATIONAL,
                   help="evaluation episodes per ReportMetrics call"),
        )),
        OptionGroup("validation (which checkpoint is tested)", (
            option("--validate-every", type=int_at_least(0), default=0, metavar="N", **_RESULT,
                   help="validate before training and every N training episodes / steps, keep the backbone of the "
                        "best validation accuracy and test it, as Meta-Dataset selects its checkpoints (MD: 500; "
                        "0: no validation, the last backbone is tested)"),
            option("--validate-episodes", type=int_at_least(1), default=600, metavar="K", **_RESULT,
                   help="episodes of the valid split per validation source (seed --eval-seed)"),
            option("--validate-sources", nargs="+", type=_source_name, default=None, metavar="NAME", **_RESULT,
                   help="sources validated on; their mean accuracy selects (default: ilsvrc_2012, as MD in both "
                        "training settings)"),
        )),
        OptionGroup("checkpoints and output", (
            option("--checkpoint-dir", default=None, metavar="DIR", **_OPERATIONAL,
                   help="save checkpoints here; resume from the one found here"),
            option("--checkpoint-every", type=int_at_least(1), default=100, metavar="N", **_OPERATIONAL,
                   help="save a checkpoint every N training episodes / steps (and at the end)"),
            log_every_option(20, "progress line on stderr every N training episodes / steps"),
            JSON_SUMMARY,
        )),
    )


def build_parser(framework: str) -> argparse.ArgumentParser:
    """The trainer command line of ``framework`` ('torch' or 'tf'); parsing validates."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework: got {framework!r}, expected one of {', '.join(FRAMEWORKS)}")
    parser = TrainerArgumentParser(
        prog=f"python -m clients.{framework}",
        usage=f"python -m clients.{framework} [train] --server TARGET --run RUN_ID (--sources NAME... | --preset "
              f"NAME) [options]\n       python -m clients.{framework} {{transfer,cog,evaluate}} ... (see below)",
        description=describe(
            "Train a few-shot learner on episodes (or plain batches) from a sampler server, evaluate it on "
            "test episodes one source at a time, and report every evaluation episode to the server.")
        + "\n\n" + commands_help(framework),
        formatter_class=TrainerHelpFormatter,
    )
    add_groups(parser, train_groups(framework), "train")
    return parser


def _validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Cross-argument checks argparse cannot express; each failure is one parser.error line."""
    if md_presets.is_md_preset(args.preset):
        try:
            md_presets.md_preset(args.preset)
        except ValueError as error:
            parser.error(f"argument --preset: {error}")
    if args.sources is None and args.preset is None:
        parser.error("arguments --sources/--preset: expected at least one of them")
    if args.sources is not None and len(set(args.sources)) != len(args.sources):
        parser.error(f"argument --sources: got {' '.join(args.sources)}, expected each source once")
    if args.eval_sources is not None and len(set(args.eval_sources)) != len(args.eval_sources):
        parser.error(f"argument --eval-sources: got {' '.join(args.eval_sources)}, expected each source once")
    adapting = [name for name in (args.model, args.eval_learner) if name in ADAPTING]
    if adapting and args.batch_norm == "running":
        parser.error(f"argument --batch-norm: got running, but {adapting[0]} normalises each support and query pass "
                     "with its own episode's moments, as Meta-Dataset's MAML; expected md or transductive")
    if not episodic(args.model) and any(v is not None for v in (args.ways, args.shots, args.query)):
        parser.error(f"arguments --ways/--shots/--query: shape training episodes, which --model {args.model} "
                     "(trained on plain batches) does not use")
    if args.eval_only and args.eval_episodes == 0:
        parser.error("argument --eval-only: got --eval-episodes 0, so there would be nothing to do")
    if args.eval_only and args.checkpoint_dir is None:
        parser.error("argument --eval-only: expected --checkpoint-dir DIR holding the checkpoint to evaluate")
    if args.validate_sources is not None and not args.validate_every:
        parser.error(f"argument --validate-sources: got {' '.join(args.validate_sources)}, but validation needs "
                     "--validate-every N (N > 0)")
    if args.validate_sources is not None and len(set(args.validate_sources)) != len(args.validate_sources):
        parser.error(f"argument --validate-sources: got {' '.join(args.validate_sources)}, expected each source once")
    check_server_group(parser, args)
    check_backbone_group(parser, args, MD_IMAGE_SIZE)
    if args.eval_learner is not None:
        try:
            eval_head(args.model, args.eval_learner)
        except ValueError as error:
            parser.error(f"argument --eval-learner: {str(error).removeprefix('eval learner: ')}")
    if BIT_IMAGE_SIZE != args.image_size and "bit-md" in (args.model, args.eval_learner):
        parser.error(f"argument --eval-learner: got bit-md at --image-size {args.image_size}, but VTAB+MD runs BiT's "
                     f"heuristic at {BIT_IMAGE_SIZE} px; expected --image-size {BIT_IMAGE_SIZE} (or evaluate "
                     "--md-learners bit-md, which fetches its own episodes)")


def parse_args(framework: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and validate ``argv`` (default: sys.argv[1:]); exits 2 with one line on bad input.
    Under ``--preset md/...`` the preset's values are the defaults (``clients.md_presets``);
    the run then records ``md_preset`` and ``md_preset_overridden``, and ``preset`` is the
    server's benchmark variant the preset names."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(framework)
    peek = argparse.ArgumentParser(add_help=False)
    peek.add_argument("--preset")
    named = peek.parse_known_args(argv)[0].preset
    if not md_presets.is_md_preset(named):
        return parser.parse_args(argv)
    try:
        preset = md_presets.md_preset(named)
    except ValueError as error:
        parser.error(f"argument --preset: {error}")
    parser.set_defaults(**preset.values)
    args = parser.parse_args(argv)
    args.md_preset, args.md_preset_overridden = preset.name, md_presets.overridden(preset, args)
    args.preset = preset.values["preset"]
    return args


def eval_sources(args: argparse.Namespace) -> tuple[str, ...]:
    """Sources evaluated one at a time, as named: --eval-sources, else --sources; empty
    means the preset's sources for the evaluation split, which the server lists."""
    if args.eval_sources is not None:
        return tuple(args.eval_sources)
    return tuple(args.sources or ())


def validation_sources(args: argparse.Namespace) -> tuple[str, ...]:
    """The sources validated on: --validate-sources, else MD's (ImageNet); none without
    --validate-every."""
    if not args.validate_every:
        return ()
    return tuple(args.validate_sources or MD_VALIDATION_SOURCES)


# How a run was operated, not what defines its results: left out of the run configuration,
# so evaluating a checkpoint again (--eval-only, another address) sends the same one; where the
# weights live and the command's fallbacks too: the trainers record the weights' sha256
# (backbone_sha256) and the preprocessing as resolved instead. Declared with each option.
OPERATIONAL = operational(train_groups("torch"))


def run_config(args: argparse.Namespace, extra: dict[str, Any]) -> dict[str, Any]:
    """Every argument that defines the results (by its option name, dashes as underscores;
    not those in ``OPERATIONAL``) plus ``extra`` (framework, versions, device, parameter
    count, ...); JSON-serialisable. Where ``extra`` resolves an argument (``device``), the
    argument as given stays under ``requested_<name>``."""
    config: dict[str, Any] = {key: (list(value) if isinstance(value, tuple) else value)
                              for key, value in sorted(vars(args).items()) if key not in OPERATIONAL}
    config["train_sources"] = list(args.sources or ())
    config["eval_sources"] = list(eval_sources(args))
    for key in set(config) & set(extra):  # e.g. device: 'auto' asked, 'cuda:0' used
        config[f"requested_{key}"] = config[key]
    config.update(extra)
    return config


# ---- the VTAB transfer learner (``python -m clients.torch transfer`` / ``clients.tf transfer``) ----

TRANSFER_MODES = ("linear", "finetune", "protonet")
# Control baselines (issue 12): the method under study, the same architecture from random
# init on the same data regime, and random init on all of the task's training data.
ROLES = ("model", "scratch", "max")
SELECTIONS = vtab_transfer_protocols.SELECTIONS
# RegimeRequest.sampling: a random subsample, sklearn's StratifiedShuffleSplit (the control-baselines
# reference's --stratified), or one per class first
REGIME_SAMPLINGS = vtab_transfer_protocols.REGIME_SAMPLINGS
# Flags whose default (None) means "the protocol's value"; given, they override it
PROTOCOL_FLAGS = tuple(vtab_transfer_protocols.PROTOCOLS[vtab_transfer_protocols.DEFAULT_PROTOCOL].values())


def _init_source(text: str) -> str:
    if text == "scratch":
        return text
    if not Path(text).exists() and not Path(text + ".index").exists():  # a tf.train.Checkpoint prefix
        raise argparse.ArgumentTypeError(f"got {text!r}, expected 'scratch' or an existing checkpoint file "
                                         "(our MD trainers' checkpoint, a torchvision state_dict or Keras weights)")
    return text


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a fraction in [0, 1)") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a fraction in [0, 1)")
    return value


class TransferArgumentParser(TrainerArgumentParser):
    """One-line errors as the trainer's; validated by the transfer learner's own rules."""

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        parsed, extras = argparse.ArgumentParser.parse_known_args(self, args, namespace)
        _validate_transfer(self, parsed)
        return parsed, extras


def transfer_groups() -> tuple[OptionGroup, ...]:
    """The transfer command's options: the same in both frameworks."""
    protocol_default = "default: the protocol's"
    return (
        SERVER_GROUP,
        OptionGroup("tasks and model", (
            option("--tasks", required=True, nargs="+", type=_source_name, metavar="TASK", **_RESULT,
                   help="VTAB tasks as the server names them (ListTasks), e.g. cifar100 kitti_distance"),
            option("--protocol", choices=tuple(vtab_transfer_protocols.PROTOCOLS),
                   default=vtab_transfer_protocols.DEFAULT_PROTOCOL, **_RESULT,
                   help="the whole protocol: vtab (the VTAB paper's lightweight sweep), vtab-md (VTAB+MD's), "
                        "reference-script (task_adaptation's run_all_tasks.sh), control-baselines (the "
                        "transfer-controls reference: AdamW, early stopping on validation loss, flip); see below"),
            option("--mode", choices=TRANSFER_MODES, default=None, **_RESULT,
                   help="linear: probe on frozen features; finetune: all weights; protonet: full-way episodes "
                        f"({protocol_default}: finetune)"),
            option("--init", dest="weights", type=_init_source, metavar="FILE|scratch", **_OPERATIONAL,
                   help=argparse.SUPPRESS),
            option("--seed", type=seed_flag, default=0, **_RESULT,
                   help="seed of the weights and the batch order (the first final run; the others' are hashed "
                        "from it)"),
            device_option("auto: a GPU when present, else CPU"),
            batch_norm_option(None, "--mode protonet's ", **_RESULT),
        )),
        backbone_group("resnet18", TRANSFER_IMAGE_SIZE, "image side the tasks are served at (resized as "
                       "task_adaptation resizes)"),
        reproducibility_group(),
        OptionGroup("the sweep and the final runs (linear, finetune)", (
            option("--optimizer", choices=vtab_transfer_protocols.OPTIMIZERS, default=None, **_RESULT,
                   help="sgd: SGD with momentum 0.9 (VTAB); adamw: AdamW, betas 0.9/0.999, eps 1e-8 (the "
                        f"control-baselines reference) ({protocol_default})"),
            option("--lrs", nargs="+", type=positive_float, default=None, metavar="LR", **_RESULT,
                   help=f"learning rates swept ({protocol_default})"),
            option("--weight-decay", type=float_in(0.0, 1.0), default=None, metavar="W", **_RESULT,
                   help="weight decay on every trained weight: SGD's coupled (g + W w), AdamW's decoupled (w -= "
                        "lr W w) (default: the protocol's; vtab, vtab-md and reference-script take VTAB's, 0.001 "
                        "when --mode finetune trains from random init (--role scratch or max, a named backbone "
                        "without --weights), else 0)"),
            option("--steps", nargs="+", type=int_at_least(1), default=None, metavar="T", **_RESULT,
                   help=f"training steps swept ({protocol_default})"),
            option("--steps-scale", type=positive_float, default=1.0, metavar="F", **_RESULT,
                   help="multiply every step count by F (at least 1 step; warm-up and decay points follow), "
                        "for small machines"),
            option("--batch-size", type=int_at_least(1), default=None, **_RESULT,
                   help=f"images per step ({protocol_default})"),
            option("--decay", choices=tuple(vtab_transfer_protocols.DECAYS), default=None, **_RESULT,
                   help="where the rate drops /10: readme = after 30/60/90%% of the steps (task_adaptation's "
                        "README and run_all_tasks.sh); paper = after 1/3, 2/3 and 9/10 (VTAB Appendix I; "
                        f"9/10 for its 'shortly before the end') ({protocol_default})"),
            option("--warmup", type=_fraction, default=None, metavar="F", **_RESULT,
                   help="linear warm-up from 0 over this fraction of the steps (run_all_tasks.sh: 80 of 1000 = "
                        f"0.08) ({protocol_default})"),
            option("--select", choices=SELECTIONS, default=None, **_RESULT,
                   help="per-task: each task's best setting (VTAB); all-tasks: one setting, the best mean "
                        f"accuracy over the tasks (VTAB+MD) ({protocol_default})"),
            option("--select-split", type=split_flag(SELECT_SPLITS, NO_SWEEP), default=None,
                   metavar=split_metavar(SELECT_SPLITS, NO_SWEEP), **_RESULT,
                   help="the split each setting (trained on train800) is scored on: val, the task's regular "
                        "validation split (VTAB's 1000-example runs); val200 (the 800/200 variant); none: no "
                        f"sweep, one setting goes straight to the final runs ({protocol_default})"),
            option("--final-split", choices=vtab_transfer_protocols.FINAL_SPLITS, default=None, **_RESULT,
                   help="what the chosen setting is trained on before the test: train800val200 (VTAB-1k's "
                        f"1000) or trainval1000 (run_all_tasks.sh's) ({protocol_default})"),
            option("--runs", type=int_at_least(1), default=None, metavar="N", **_RESULT,
                   help="final runs (seeds) per task; the test accuracy reported is their median, as the VTAB "
                        f"paper reports ({protocol_default})"),
            option("--validate-every", type=int_at_least(0), default=None, metavar="K", **_RESULT,
                   help="validate each fit every K steps (scaled by --steps-scale) and at its end, on the "
                        "--select-split (a regime's or --role max's own val part), and test the checkpoint of "
                        "the lowest validation loss, the setting chosen by that loss; needs --final-split none "
                        f"(0: no validation during fits) ({protocol_default})"),
            option("--augment", choices=vtab_transfer_protocols.AUGMENTS, default=None, **_RESULT,
                   help="flip: each training image mirrored left-right with probability 1/2, drawn from "
                        f"--seed, the task, split and regime (finetune only) ({protocol_default})"),
            option("--eval-batch-size", type=int_at_least(1), default=256, metavar="N", **_RESULT,
                   help="images per evaluation forward pass"),
        )),
        OptionGroup("control baselines (linear, finetune)", (
            option("--role", choices=ROLES, default="model", **_RESULT,
                   help="model: the method under study; scratch: the same architecture from random init "
                        "(--init scratch) on the same regimes; max: random init on all of the task's training "
                        "data (sweep on train, pick on val, retrain on trainval; no --regime)"),
            option("--regime", dest="regimes", action="append", type=int_at_least(1), default=None,
                   metavar="N", **_RESULT,
                   help="a data regime of N training examples (repeatable): the sweep trains on its train part, "
                        "picks on its val part, retrains on the whole regime and tests on test (default: "
                        "VTAB-1k's splits)"),
            option("--regime-seed", type=int_at_least(0), default=None, metavar="S", **_RESULT,
                   help="seed drawing the regimes (nested across N for one seed; default 0)"),
            option("--regime-sampling", choices=REGIME_SAMPLINGS, default=None, **_RESULT,
                   help="how a regime's N examples are drawn from the task's train split: uniform (a random "
                        "subsample, nested across N), stratified (scikit-learn's StratifiedShuffleSplit into "
                        "train and val, 80/20, random_state the regime seed: the control-baselines reference's "
                        "--stratified) or one-per-class-first (one example per class first) (default: the "
                        "protocol's: stratified for control-baselines, else uniform)"),
        )),
        OptionGroup("output", (
            log_every_option(100, "progress every N steps"),
            JSON_SUMMARY,
        )),
    )


TRANSFER_OPERATIONAL = operational(transfer_groups())
"""What the transfer command's run configuration leaves out (``clients.vtab_transfer``)."""


def build_transfer_parser(framework: str) -> argparse.ArgumentParser:
    """The transfer learner's command line of ``framework``; same flags in both frameworks."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework: got {framework!r}, expected one of {', '.join(FRAMEWORKS)}")
    parser = TransferArgumentParser(
        prog=f"python -m clients.{framework} transfer",
        description=("Transfer a backbone to VTAB-1k tasks under a named protocol (--protocol): a sweep of "
                     "learning rates x steps, each setting scored on a validation split, the chosen one trained "
                     "again on the 1000 examples and tested (the median of --runs seeds); or ProtoNet full-way "
                     "episodes. Per-task top-1 is reported to the server."),
        epilog="\n".join([
            textwrap.fill("protocols (a flag whose default is 'the protocol's' overrides one value; the summary "
                          "records the protocol and every value used):", 100),
            vtab_transfer_protocols.describe(100),
            textwrap.fill("Warm-up and decay points are fractions of each setting's steps, so --steps-scale (CPU "
                          "runs) scales them with the steps.", 100)]),
        formatter_class=TrainerHelpFormatter,
    )
    add_groups(parser, transfer_groups(), "transfer")
    return parser


def _validate_transfer(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Cross-argument checks, then the protocol's values filled in where no flag was given
    (``args.overridden`` names the flags that were)."""
    for name in ("tasks", "lrs", "steps"):
        values = getattr(args, name) or []
        if len(set(values)) != len(values):
            parser.error(f"argument --{name}: got {' '.join(map(str, values))}, expected each value once")
    if args.weights == "scratch":  # --init scratch, the old spelling of no --weights
        args.weights = None
    check_server_group(parser, args)
    check_backbone_group(parser, args, TRANSFER_IMAGE_SIZE)
    regimes = args.regimes or []
    if len(set(regimes)) != len(regimes):
        parser.error(f"argument --regime: got {' '.join(map(str, regimes))}, expected each value once")
    if args.mode == "protonet" and (regimes or args.role != "model"):
        parser.error(f"argument --mode: got protonet, which trains nothing; --role {args.role}"
                     f"{' and --regime' if regimes else ''} need linear or finetune")
    if args.role in ("scratch", "max") and args.weights is not None:
        parser.error(f"argument --weights: got {args.weights!r}, expected none (random init) for --role {args.role}")
    if args.role == "max" and regimes:
        parser.error(f"argument --regime: got {' '.join(map(str, regimes))}, expected none for --role max "
                     "(it trains on all of the task's training data)")
    if args.regime_seed is not None and not regimes:
        parser.error(f"argument --regime-seed: got {args.regime_seed}, expected it only with --regime N")
    if args.regime_sampling is not None and not regimes:
        parser.error(f"argument --regime-sampling: got {args.regime_sampling}, expected it only with --regime N")
    values, overridden = vtab_transfer_protocols.resolve(args.protocol, {k: getattr(args, k) for k in PROTOCOL_FLAGS})
    _check_validation(parser, args, values, overridden)
    if values["select_split"] == "none" and args.mode != "protonet":
        settings = len(values["lrs"]) * len(values["steps"])
        if settings > 1:
            source = "--select-split none" if "select_split" in overridden else f"--protocol {args.protocol}"
            parser.error(f"arguments --lrs/--steps: got {settings} settings, but {source} trains one setting "
                         "without a sweep; add --select-split val or val200 to choose among them")
    for key, value in values.items():
        setattr(args, key, value)
    if args.batch_norm is not None and args.mode != "protonet":
        parser.error(f"argument --batch-norm: got {args.batch_norm}, but --mode {args.mode} trains with the model's "
                     "own batch norm; it applies to --mode protonet's episodes")
    if args.mode == "protonet" and args.batch_norm is None:
        args.batch_norm = "md"  # as Meta-Dataset's learners embed an episode
    if args.weight_decay is None:  # the protocol's rule: VTAB's
        from_scratch = args.weights is None and args.backbone in NAMED_BACKBONES
        args.weight_decay = vtab_transfer_protocols.weight_decay_for(args.mode, from_scratch)
    args.overridden = overridden
    args.regimes = sorted(regimes)
    args.regime_seed = args.regime_seed or 0


def _check_validation(parser: argparse.ArgumentParser, args: argparse.Namespace, values: dict[str, Any],
                      overridden: Sequence[str]) -> None:
    """Early stopping (``--validate-every``) and the final split agree, and flips go with finetuning."""
    if args.mode == "protonet":
        return
    source = {key: f"--{key.replace('_', '-')} {values[key]}" if key in overridden else f"--protocol {args.protocol}"
              for key in ("validate_every", "final_split", "select_split", "augment")}
    if values["validate_every"] and values["final_split"] != "none":
        parser.error(f"argument --validate-every: got {values['validate_every']} ({source['validate_every']}), "
                     f"but --final-split {values['final_split']} ({source['final_split']}) retrains and tests the "
                     "retrained weights; add --final-split none to test the best-validated checkpoint, or "
                     "--validate-every 0")
    if values["final_split"] == "none" and not values["validate_every"]:
        parser.error(f"argument --final-split: got none ({source['final_split']}), which tests the best-validated "
                     "checkpoint of each fit, expected --validate-every K > 0 too")
    if values["validate_every"] and values["select_split"] == "none":
        parser.error(f"argument --validate-every: got {values['validate_every']}, but --select-split none "
                     f"({source['select_split']}) leaves nothing to validate on; add --select-split val or val200")
    if values["validate_every"] and values["select"] == "all-tasks":
        parser.error(f"argument --select: got all-tasks, but --validate-every {values['validate_every']} tests each "
                     "task's own best-validated checkpoint; use --select per-task")
    if values["augment"] != "none" and values["mode"] != "finetune":
        parser.error(f"argument --augment: got {values['augment']} ({source['augment']}), but --mode "
                     f"{values['mode']} embeds each image once with the frozen backbone; use --mode finetune "
                     "or --augment none")


def parse_transfer_args(framework: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and validate the transfer command line; exits 2 with one line on bad input."""
    return build_transfer_parser(framework).parse_args(list(sys.argv[1:] if argv is None else argv))


# ---- the ImageNet-CoG linear evaluation (``python -m clients.torch cog`` / ``clients.tf cog``) ----


def _cog_shots(text: str) -> int:
    if text == "all":
        return 0
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected 'all' or an integer >= 1") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"got {value}, expected 'all' or an integer >= 1")
    return value


def _grid(text: str) -> tuple[int, int]:
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected LRxWD, two integers >= 1 such as 6x5")
    return int(parts[0]), int(parts[1])


def _level(text: str) -> str:
    if not text or not text.isprintable() or text != text.strip():
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a level name such as IN-1K or L3")
    return text


class CogArgumentParser(TrainerArgumentParser):
    """One-line errors as the trainer's; validated by the CoG evaluation's own rules."""

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        parsed, extras = argparse.ArgumentParser.parse_known_args(self, args, namespace)
        _validate_cog(self, parsed)
        return parsed, extras


PRECISIONS = ("float32", "bf16")
"""``--precision``: the dtype of frozen feature extraction (float32, the reference's; bf16 autocast)."""


def precision_option(forward: Sequence[str] = ()) -> Option:
    """``--precision``: the feature extraction of ``cog`` and ``evaluate``, recorded as what defines
    the results (bf16 features are not float32 ones; the feature caches key by it)."""
    return option("--precision", choices=PRECISIONS, default="float32", record=Record.RESULT, forward=forward,
                  help="feature extraction: float32 (the reference's, naver/cog) or bf16 (torch autocast on the "
                       "device; TensorFlow extracts in float32 only)")


def cog_groups() -> tuple[OptionGroup, ...]:
    """The cog command's options: the same in both frameworks. What selects work (levels,
    N, seeds) or names a place is left out of its run configuration, and ``--backbone`` as
    given too: the configuration records the backbone by name and weights' sha256."""
    return (
        SERVER_GROUP,
        OptionGroup("levels and subsets", (
            option("--levels", nargs="+", type=_level, default=None, metavar="LEVEL", record=Record.OPERATIONAL,
                   help="levels to evaluate (default: every level the server lists: IN-1K when served, L1..L5)"),
            option("--shots", nargs="+", type=_cog_shots, default=list(cog_protocol.DEFAULT_SHOTS), metavar="N",
                   record=Record.OPERATIONAL,
                   help="training images per concept: 'all' (0 below) or an integer; the paper's all 1 2 4 ... "
                        "128"),
            option("--seeds", nargs="+", type=int_at_least(1), default=list(cog_protocol.DEFAULT_SEEDS),
                   metavar="S", record=Record.OPERATIONAL,
                   help="seeds of the few-shot subsets, validation splits and fits"),
            option("--level-size", type=int_at_least(0), default=0, metavar="K", record=Record.RESULT,
                   help="concepts per level L1..L5, passed to the server (0: the paper's 1000)"),
            option("--min-images", type=int_at_least(0), default=0, metavar="M", record=Record.RESULT,
                   help="images a concept needs to be eligible, passed to the server (0: the paper's 782)"),
            option("--levels-file", default=None, metavar="FILE", record=Record.RESULT,
                   help="naver/cog's cog_levels_mapping_file.pkl as a path on the server (absolute or relative "
                        "to its data directory): L1..L5 are its concepts (--level-size, --min-images unused)"),
            option("--concepts-split-file", default=None, metavar="FILE", record=Record.RESULT,
                   help="with --levels-file: naver/cog's cog_concepts_split_file.pkl on the server: each "
                        "concept's train and test images are the file's"),
        )),
        backbone_group(None, cog_protocol.IMAGE_SIZE, "S: the server resizes the shorter side to S (bicubic) and "
                       "crops the centre S x S", backbone_record=Record.OPERATIONAL),
        reproducibility_group(seed=0),  # the MD trainer's random weights at --seed 0
        OptionGroup("features", (
            option("--feature-cache", default=None, metavar="DIR", record=Record.OPERATIONAL,
                   help="features are cached here, keyed by the weights' sha256, split fingerprint, "
                        "preprocessing and precision " "(default: $XDG_CACHE_HOME/sampler-server/features, else ~/.cache/sampler-server/features; the run's first line names it)"),
            option("--extract-batch-size", type=int_at_least(1), default=cog_protocol.EXTRACT_BATCH_SIZE,
                   metavar="N", record=Record.OPERATIONAL,
                   help="images per StreamCogBatches batch and backbone forward pass"),
            precision_option(),
            device_option("auto: a GPU when present, else CPU"),
        )),
        OptionGroup("the linear classifier", (
            option("--epochs", type=int_at_least(1), default=cog_protocol.EPOCHS, record=Record.RESULT,
                   help="epochs of every fit (cosine decay)"),
            option("--batch-size", type=int_at_least(1), default=cog_protocol.BATCH_SIZE, record=Record.RESULT,
                   help="features per SGD step"),
            option("--grid", type=_grid, default=cog_protocol.DEFAULT_GRID, metavar="LRxWD", record=Record.RESULT,
                   help="search points: learning rates log-spaced over [0.1, 100] x weight decays log-spaced "
                        "over [1e-12, 1e-4] (6x5 = 30 trials, the paper's budget)"),
        )),
        OptionGroup("output", (
            log_every_option(50, "progress line every N extraction batches"),
            JSON_SUMMARY,
        )),
    )


COG_OPERATIONAL = operational(cog_groups())
"""What the cog command's run configuration leaves out (``clients.cog_eval``)."""


def build_cog_parser(framework: str) -> argparse.ArgumentParser:
    """The CoG evaluation's command line of ``framework``; the same flags in both frameworks."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework: got {framework!r}, expected one of {', '.join(FRAMEWORKS)}")
    parser = CogArgumentParser(
        prog=f"python -m clients.{framework} cog",
        description=describe("ImageNet-CoG linear evaluation of a backbone: features of each level's train and "
                             "test splits extracted once (cached), a linear classifier per (level, N, seed) with "
                             "learning rate and weight decay chosen on the 20% validation split, test top-1 "
                             "reported to the server."),
        formatter_class=TrainerHelpFormatter,
    )
    add_groups(parser, cog_groups(), "cog")
    return parser


def _validate_cog(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for name in ("levels", "shots", "seeds"):
        values = getattr(args, name)
        if values is not None and len(set(values)) != len(values):
            shown = " ".join("all" if name == "shots" and v == 0 else str(v) for v in values)
            parser.error(f"argument --{name}: got {shown}, expected each value once")
    check_server_group(parser, args)
    check_backbone_group(parser, args, cog_protocol.IMAGE_SIZE)
    args.feature_cache = args.feature_cache or str(default_cache_dir())
    if args.concepts_split_file and not args.levels_file:
        parser.error("argument --concepts-split-file: expected --levels-file too (its images are of that file's "
                     "concepts)")
    args.grid = tuple(args.grid)


def parse_cog_args(framework: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and validate the CoG command line; exits 2 with one line on bad input."""
    return build_cog_parser(framework).parse_args(list(sys.argv[1:] if argv is None else argv))
