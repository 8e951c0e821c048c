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
``--tls-ca`` / ``--tls-cert`` / ``--tls-key`` and ``--token-file`` (or the
``SAMPLER_TLS_CA`` / ``SAMPLER_TLS_CERT`` / ``SAMPLER_TLS_KEY`` / ``SAMPLER_TOKEN``
environment, read by the client) reach a server with TLS and tokens; they are
operational, so not part of the run configuration. ``--shape-buckets`` is recorded
in it (as given, and as resolved under ``shape_buckets``) though padding is exact.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from clients import transfer_protocols
from clients.balancing import parse_target
from clients.buckets import SHAPE_BUCKETS

FRAMEWORKS = ("torch", "tf")
MODELS = ("protonet", "baseline")
BACKBONES = ("conv4", "resnet18")
SPLITS = ("train", "valid", "test")
DEVICES = ("auto", "cpu", "cuda")
MAX_RUN_ID = 200  # the metrics store's limit


class TrainerArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line and whose results are validated."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message.splitlines()[0] if message else 'bad arguments'}\n")

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        parsed, extras = super().parse_known_args(args, namespace)
        _validate(self, parsed)
        return parsed, extras


def _int_at_least(minimum: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"got {text!r}, expected an integer >= {minimum}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"got {value}, expected an integer >= {minimum}")
        return value

    parse.__name__ = f"integer>={minimum}"
    return parse


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a positive number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a positive finite number")
    return value


def _address(text: str) -> str:
    """One server (HOST:PORT) or many replicas (dns:///NAME:PORT, ipv4:A:P,B:P,...)."""
    try:
        parse_target(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _run_id(text: str) -> str:
    if not text or len(text) > MAX_RUN_ID or not text.isprintable() or text != text.strip():
        raise argparse.ArgumentTypeError(
            f"got {text!r}, expected 1 to {MAX_RUN_ID} printable characters without surrounding spaces"
        )
    return text


def _readable_file(text: str) -> str:
    try:
        with open(text, "rb"):
            pass
    except OSError as error:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a readable file ({error.strerror or error})") from None
    return text


def _token_file(text: str) -> str:
    _readable_file(text)
    try:
        token = Path(text).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a readable text file ({error})") from None
    if not token or len(token.split()) != 1:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a file holding one token (it holds "
                                         f"{len(token.split())} words)")
    return text


def client_security(args: argparse.Namespace) -> dict[str, Any]:
    """``SamplerClient`` keyword arguments for TLS and the token (None: the client's
    environment defaults apply)."""
    token = Path(args.token_file).read_text(encoding="utf-8").strip() if args.token_file else None
    return {"tls_ca": args.tls_ca, "tls_cert": args.tls_cert, "tls_key": args.tls_key, "token": token}


def _source_name(text: str) -> str:
    if not text or not text.isprintable() or text != text.strip():
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a source name")
    return text


def _add_server_group(parser: argparse.ArgumentParser) -> None:
    """The server, run id and connection flags: the same in every trainer's command line."""
    where = parser.add_argument_group("server and run")
    where.add_argument("--server", required=True, type=_address, metavar="TARGET",
                       help="sampler server: HOST:PORT, or many replicas balanced round-robin: dns:///NAME:PORT "
                       "(every address NAME resolves to) or ipv4:A.B.C.D:PORT,...")
    # --run-id: the same, for torchrun command lines (torchrun's parser takes --run for its own --run-path)
    where.add_argument("--run", "--run-id", dest="run", required=True, type=_run_id, metavar="RUN_ID",
                       help="run id the reports are stored under")
    where.add_argument("--connect-timeout", type=_positive_float, default=10.0, metavar="SECONDS",
                       help="give up connecting to the server after this long (per attempt)")
    where.add_argument("--retries", type=_int_at_least(1), default=5, metavar="N",
                       help="attempts per call or stream before a fault is reported (exit 3)")
    where.add_argument("--tls-ca", type=_readable_file, default=None, metavar="FILE",
                       help="PEM file of the CA that signed the server's certificate: connect over TLS "
                       "(default: $SAMPLER_TLS_CA; neither: plaintext)")
    where.add_argument("--tls-cert", type=_readable_file, default=None, metavar="FILE",
                       help="this client's certificate (PEM), where the server requires client certificates "
                       "(default: $SAMPLER_TLS_CERT)")
    where.add_argument("--tls-key", type=_readable_file, default=None, metavar="FILE",
                       help="the key of --tls-cert (PEM; default: $SAMPLER_TLS_KEY)")
    where.add_argument("--token-file", type=_token_file, default=None, metavar="FILE",
                       help="file holding the bearer token sent with every call (default: the token in "
                       "$SAMPLER_TOKEN; neither: no token)")


def build_parser(framework: str) -> argparse.ArgumentParser:
    """The trainer command line of ``framework`` ('torch' or 'tf'); parsing validates."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework: got {framework!r}, expected one of {', '.join(FRAMEWORKS)}")
    parser = TrainerArgumentParser(
        prog=f"python -m clients.{framework}",
        description=(
            "Train a few-shot learner on episodes (or plain batches) from a sampler server, evaluate it on "
            "test episodes one source at a time, and report every evaluation episode to the server."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    _add_server_group(parser)

    data = parser.add_argument_group("training data")
    data.add_argument("--sources", nargs="+", type=_source_name, metavar="NAME",
                      help="training sources: store names or source kinds (default with --preset: its sources)")
    data.add_argument("--preset", type=_source_name, metavar="NAME",
                      help="benchmark variant whose class splits apply (md-v1, md-v2; the server's list); "
                           "without --sources, protonet trains on its sources")
    data.add_argument("--image-size", type=_int_at_least(8), default=84, metavar="PIXELS", help="image side")
    data.add_argument("--ways", type=_int_at_least(2), default=None, metavar="N",
                      help="fixed ways of training episodes (default: MD variable ways)")
    data.add_argument("--shots", type=_int_at_least(1), default=None, metavar="K",
                      help="fixed support images per class of training episodes (default: MD variable shots)")
    data.add_argument("--query", type=_int_at_least(1), default=None, metavar="Q",
                      help="fixed query images per class of training episodes (default: MD, at most 10)")
    data.add_argument("--seed", type=_int_at_least(0), default=0, help="seed of the training episodes / batches")

    model = parser.add_argument_group("model and optimisation")
    model.add_argument("--model", choices=MODELS, default="protonet",
                       help="protonet: episodic Prototypical Networks; baseline: a classifier trained on plain "
                            "batches, evaluated with prototypes (MD's inference-only baseline)")
    model.add_argument("--backbone", choices=BACKBONES, default="conv4", help="embedding network")
    model.add_argument("--train-episodes", type=_int_at_least(0), default=1000, metavar="T",
                       help="protonet: training episodes (indices 0..T-1)")
    model.add_argument("--train-steps", type=_int_at_least(0), default=1000, metavar="T",
                       help="baseline: number of plain training batches")
    model.add_argument("--batch-size", type=_int_at_least(1), default=64, help="baseline: images per batch")
    model.add_argument("--lr", type=_positive_float, default=1e-3, help="Adam learning rate")
    model.add_argument("--device", choices=DEVICES, default="auto", help="auto: CUDA when present, else CPU")
    model.add_argument("--shape-buckets", choices=SHAPE_BUCKETS, default="auto",
                       help="pad episodes to a few batch sizes (masked: what is learned does not change) so the GPU "
                            "meets few shapes; auto: on with a GPU, off on CPU")

    evaluation = parser.add_argument_group("evaluation")
    evaluation.add_argument("--eval-episodes", type=_int_at_least(0), default=600, metavar="N",
                            help="evaluation episodes per source (0: no evaluation)")
    evaluation.add_argument("--eval-sources", nargs="+", type=_source_name, default=None, metavar="NAME",
                            help="sources evaluated one at a time (default: --sources)")
    evaluation.add_argument("--eval-split", choices=SPLITS, default="test", help="split of the evaluation episodes")
    evaluation.add_argument("--eval-seed", type=_int_at_least(0), default=0, help="seed of the evaluation episodes")
    evaluation.add_argument("--eval-only", action="store_true",
                            help="skip training; evaluate the checkpoint found in --checkpoint-dir")
    evaluation.add_argument("--report-batch", type=_int_at_least(1), default=50, metavar="N",
                            help="evaluation episodes per ReportMetrics call")

    state = parser.add_argument_group("checkpoints and output")
    state.add_argument("--checkpoint-dir", default=None, metavar="DIR",
                       help="save checkpoints here; resume from the one found here")
    state.add_argument("--checkpoint-every", type=_int_at_least(1), default=100, metavar="N",
                       help="save a checkpoint every N training episodes / steps (and at the end)")
    state.add_argument("--log-every", type=_int_at_least(1), default=20, metavar="N",
                       help="progress line on stderr every N training episodes / steps")
    state.add_argument("--json-summary", default=None, metavar="PATH", help="write the run summary as JSON here")
    return parser


def _validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Cross-argument checks argparse cannot express; each failure is one parser.error line."""
    if args.sources is None and args.preset is None:
        parser.error("arguments --sources/--preset: expected at least one of them")
    if args.sources is not None and len(set(args.sources)) != len(args.sources):
        parser.error(f"argument --sources: got {' '.join(args.sources)}, expected each source once")
    if args.eval_sources is not None and len(set(args.eval_sources)) != len(args.eval_sources):
        parser.error(f"argument --eval-sources: got {' '.join(args.eval_sources)}, expected each source once")
    if args.model == "baseline" and any(v is not None for v in (args.ways, args.shots, args.query)):
        parser.error("arguments --ways/--shots/--query: shape training episodes, which --model baseline does not use")
    if args.eval_only and args.eval_episodes == 0:
        parser.error("argument --eval-only: got --eval-episodes 0, so there would be nothing to do")
    if args.eval_only and args.checkpoint_dir is None:
        parser.error("argument --eval-only: expected --checkpoint-dir DIR holding the checkpoint to evaluate")
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.error("arguments --tls-cert/--tls-key: expected both or neither")


def parse_args(framework: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and validate ``argv`` (default: sys.argv[1:]); exits 2 with one line on bad input."""
    return build_parser(framework).parse_args(list(sys.argv[1:] if argv is None else argv))


def eval_sources(args: argparse.Namespace) -> tuple[str, ...]:
    """Sources evaluated one at a time, as named: --eval-sources, else --sources; empty
    means the preset's sources for the evaluation split, which the server lists."""
    if args.eval_sources is not None:
        return tuple(args.eval_sources)
    return tuple(args.sources or ())


# How a run was operated, not what defines its results: left out of the run configuration,
# so evaluating a checkpoint again (--eval-only, another address) sends the same one.
OPERATIONAL = ("server", "connect_timeout", "retries", "eval_only", "report_batch", "checkpoint_dir",
               "checkpoint_every", "log_every", "json_summary", "tls_ca", "tls_cert", "tls_key", "token_file")


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
SELECTIONS = transfer_protocols.SELECTIONS
REGIME_SAMPLINGS = ("uniform", "stratified")  # RegimeRequest.sampling: the paper's random subsample, or classes first
# Flags whose default (None) means "the protocol's value"; given, they override it
PROTOCOL_FLAGS = tuple(transfer_protocols.PROTOCOLS[transfer_protocols.DEFAULT_PROTOCOL].values())


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


class _TransferHelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Defaults shown where there is one; a None default is the protocol's, said in the help."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


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
            transfer_protocols.describe(100),
            textwrap.fill("Warm-up and decay points are fractions of each setting's steps, so --steps-scale (CPU "
                          "runs) scales them with the steps.", 100)]),
        formatter_class=_TransferHelpFormatter,
    )
    _add_server_group(parser)
    protocol_default = "default: the protocol's"

    what = parser.add_argument_group("tasks and model")
    what.add_argument("--tasks", required=True, nargs="+", type=_source_name, metavar="TASK",
                      help="VTAB tasks as the server names them (ListTasks), e.g. cifar100 kitti_distance")
    what.add_argument("--protocol", choices=tuple(transfer_protocols.PROTOCOLS),
                      default=transfer_protocols.DEFAULT_PROTOCOL,
                      help="the whole protocol: vtab (the VTAB paper's lightweight sweep), vtab-md (VTAB+MD's), "
                           "reference-script (task_adaptation's run_all_tasks.sh); see below")
    what.add_argument("--mode", choices=TRANSFER_MODES, default=None,
                      help="linear: probe on frozen features; finetune: all weights; protonet: full-way episodes "
                           f"({protocol_default}: finetune)")
    what.add_argument("--backbone", choices=BACKBONES, default="resnet18", help="embedding network")
    what.add_argument("--init", type=_init_source, default="scratch", metavar="FILE|scratch",
                      help="starting weights: an MD trainer checkpoint, a torchvision state_dict (torch) or Keras "
                           "weights (tf) of the same backbone, or scratch")
    what.add_argument("--image-size", type=_int_at_least(8), default=224, metavar="PIXELS", help="image side")
    what.add_argument("--seed", type=_int_at_least(0), default=0,
                      help="seed of the weights and the batch order (the first final run; the others' are hashed "
                           "from it)")
    what.add_argument("--device", choices=DEVICES, default="auto", help="auto: a GPU when present, else CPU")

    sweep = parser.add_argument_group("the sweep and the final runs (linear, finetune)")
    sweep.add_argument("--lrs", nargs="+", type=_positive_float, default=None, metavar="LR",
                       help=f"SGD (momentum 0.9, no weight decay) learning rates swept ({protocol_default})")
    sweep.add_argument("--steps", nargs="+", type=_int_at_least(1), default=None, metavar="T",
                       help=f"training steps swept ({protocol_default})")
    sweep.add_argument("--steps-scale", type=_positive_float, default=1.0, metavar="F",
                       help="multiply every step count by F (at least 1 step; warm-up and decay points follow), "
                            "for small machines")
    sweep.add_argument("--batch-size", type=_int_at_least(1), default=None,
                       help=f"images per step ({protocol_default})")
    sweep.add_argument("--decay", choices=tuple(transfer_protocols.DECAYS), default=None,
                       help="where the rate drops /10: readme = after 30/60/90%% of the steps (task_adaptation's "
                            "README and run_all_tasks.sh); paper = after 1/3, 2/3 and 9/10 (VTAB Appendix I; "
                            f"9/10 for its 'shortly before the end') ({protocol_default})")
    sweep.add_argument("--warmup", type=_fraction, default=None, metavar="F",
                       help="linear warm-up from 0 over this fraction of the steps (run_all_tasks.sh: 80 of 1000 = "
                            f"0.08) ({protocol_default})")
    sweep.add_argument("--select", choices=SELECTIONS, default=None,
                       help="per-task: each task's best setting (VTAB); all-tasks: one setting, the best mean "
                            f"accuracy over the tasks (VTAB+MD) ({protocol_default})")
    sweep.add_argument("--select-split", choices=transfer_protocols.SELECT_SPLITS, default=None,
                       help="the split each setting (trained on train800) is scored on: val, the task's regular "
                            "validation split (VTAB's 1000-example runs); val200 (the 800/200 variant); none: no "
                            f"sweep, one setting goes straight to the final runs ({protocol_default})")
    sweep.add_argument("--final-split", choices=transfer_protocols.FINAL_SPLITS, default=None,
                       help="what the chosen setting is trained on before the test: train800val200 (VTAB-1k's "
                            f"1000) or trainval1000 (run_all_tasks.sh's) ({protocol_default})")
    sweep.add_argument("--runs", type=_int_at_least(1), default=None, metavar="N",
                       help="final runs (seeds) per task; the test accuracy reported is their median, as the VTAB "
                            f"paper reports ({protocol_default})")
    sweep.add_argument("--eval-batch-size", type=_int_at_least(1), default=256, metavar="N",
                       help="images per evaluation forward pass")

    control = parser.add_argument_group("control baselines (linear, finetune)")
    control.add_argument("--role", choices=ROLES, default="model",
                         help="model: the method under study; scratch: the same architecture from random init "
                              "(--init scratch) on the same regimes; max: random init on all of the task's training "
                              "data (sweep on train, pick on val, retrain on trainval; no --regime)")
    control.add_argument("--regime", dest="regimes", action="append", type=_int_at_least(1), default=None,
                         metavar="N", help="a data regime of N training examples (repeatable): the sweep trains on "
                                           "its train part, picks on its val part, retrains on the whole regime and "
                                           "tests on test (default: VTAB-1k's splits)")
    control.add_argument("--regime-seed", type=_int_at_least(0), default=None, metavar="S",
                         help="seed drawing the regimes (nested across N for one seed; default 0)")
    control.add_argument("--regime-sampling", choices=REGIME_SAMPLINGS, default=None,
                         help="how a regime's N examples are drawn from the task's train split: uniform (the "
                              "control-baselines paper's random subsample) or stratified (one per class first; "
                              "default: uniform)")

    out = parser.add_argument_group("output")
    out.add_argument("--log-every", type=_int_at_least(1), default=100, metavar="N", help="progress every N steps")
    out.add_argument("--json-summary", default=None, metavar="PATH", help="write the run summary as JSON here")
    return parser


def _validate_transfer(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Cross-argument checks, then the protocol's values filled in where no flag was given
    (``args.overridden`` names the flags that were)."""
    for name in ("tasks", "lrs", "steps"):
        values = getattr(args, name) or []
        if len(set(values)) != len(values):
            parser.error(f"argument --{name}: got {' '.join(map(str, values))}, expected each value once")
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.error("arguments --tls-cert/--tls-key: expected both or neither")
    regimes = args.regimes or []
    if len(set(regimes)) != len(regimes):
        parser.error(f"argument --regime: got {' '.join(map(str, regimes))}, expected each value once")
    if args.mode == "protonet" and (regimes or args.role != "model"):
        parser.error(f"argument --mode: got protonet, which trains nothing; --role {args.role}"
                     f"{' and --regime' if regimes else ''} need linear or finetune")
    if args.role in ("scratch", "max") and args.init != "scratch":
        parser.error(f"argument --init: got {args.init!r}, expected scratch (random init) for --role {args.role}")
    if args.role == "max" and regimes:
        parser.error(f"argument --regime: got {' '.join(map(str, regimes))}, expected none for --role max "
                     "(it trains on all of the task's training data)")
    if args.regime_seed is not None and not regimes:
        parser.error(f"argument --regime-seed: got {args.regime_seed}, expected it only with --regime N")
    if args.regime_sampling is not None and not regimes:
        parser.error(f"argument --regime-sampling: got {args.regime_sampling}, expected it only with --regime N")
    values, overridden = transfer_protocols.resolve(args.protocol, {k: getattr(args, k) for k in PROTOCOL_FLAGS})
    if values["select_split"] == "none" and args.mode != "protonet":
        settings = len(values["lrs"]) * len(values["steps"])
        if settings > 1:
            source = "--select-split none" if "select_split" in overridden else f"--protocol {args.protocol}"
            parser.error(f"arguments --lrs/--steps: got {settings} settings, but {source} trains one setting "
                         "without a sweep; add --select-split val or val200 to choose among them")
    for key, value in values.items():
        setattr(args, key, value)
    args.overridden = overridden
    args.regimes = sorted(regimes)
    args.regime_seed = args.regime_seed or 0
    args.regime_sampling = args.regime_sampling or REGIME_SAMPLINGS[0]


def parse_transfer_args(framework: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and validate the transfer command line; exits 2 with one line on bad input."""
    return build_transfer_parser(framework).parse_args(list(sys.argv[1:] if argv is None else argv))
