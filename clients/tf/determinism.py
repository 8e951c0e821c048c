"""``--deterministic`` and ``--threads`` in TensorFlow, and what a TensorFlow run records.

``apply_determinism`` runs at the start of every TensorFlow command, before any model is
built: with determinism on (``clients.determinism.resolve_determinism``: ``auto`` is on on
CPU, off on a GPU) it switches on op determinism (TensorFlow then runs only
deterministic kernels and refuses an op that has none); always, it fixes the intra- and
inter-op thread counts and seeds Python's, NumPy's, TensorFlow's and Keras' global
generators from the run's seed by name (``clients.seeds.derive_seed``), so a draw that
no module seeds itself is still the same draw in every run.

Two of these settings are TensorFlow's process-wide state: op determinism cannot be
switched off again once on, and the thread counts cannot change once TensorFlow's
runtime has started (a second command in the same process, as the tests run them). What
the record says is what is in force, read back from TensorFlow, not what was asked.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import re
from pathlib import Path
from typing import Any

import tensorflow as tf
from tensorflow.python.framework import config as tf_framework_config

from clients.determinism import Determinism, library_versions, resolve_determinism
from clients.seeds import derive_seed
from clients.trainer_shell import EXIT_BAD_INPUT

keras = tf.keras

GLOBAL_SEED_NAME = "global"  # the global generators: derive_seed(--seed, GLOBAL_SEED_NAME)
_NODE = re.compile(r"\{\{node ([^}]+)\}\}")
_EAGER_OP = re.compile(r"\[Op:([^\]]+)\]")


def _set_threads(intra: int, inter: int) -> tuple[int, int]:
    """Set the thread counts where TensorFlow still allows it; the counts in force either way
    (0: TensorFlow's own choice, as it was started before this run)."""
    threading = tf.config.threading
    for setter, value in ((threading.set_intra_op_parallelism_threads, intra),
                          (threading.set_inter_op_parallelism_threads, inter)):
        try:
            setter(value)
        except RuntimeError:  # the runtime has started (an earlier command in this process)
            pass
    return threading.get_intra_op_parallelism_threads(), threading.get_inter_op_parallelism_threads()


def op_determinism_enabled() -> bool:
    """Whether TensorFlow's op determinism is in force in this process (it stays on once on)."""
    return bool(tf_framework_config.is_op_determinism_enabled())


def apply_determinism(args: argparse.Namespace, device: str) -> Determinism:
    """The run's determinism settings applied on ``device`` (``/GPU:0``: a GPU run); the
    settings as in force (thread counts read back)."""
    wanted = resolve_determinism(args, accelerated=device.startswith("/GPU"))
    if wanted.enabled:
        tf.config.experimental.enable_op_determinism()
    intra, inter = _set_threads(wanted.intra_op_threads, wanted.inter_op_threads)
    keras.utils.set_random_seed(derive_seed(args.seed, GLOBAL_SEED_NAME))
    return dataclasses.replace(wanted, intra_op_threads=intra, inter_op_threads=inter)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: str) -> str:
    """The hardware behind ``device`` (``/GPU:0``: the card's name; ``/CPU:0``: the processor's)."""
    if device.startswith("/GPU"):
        gpus = tf.config.list_physical_devices("GPU")
        index = int(device.rsplit(":", 1)[1]) if ":" in device else 0
        if index < len(gpus):
            return str(tf.config.experimental.get_device_details(gpus[index]).get("device_name", gpus[index].name))
    return _cpu_name()


def tf_record(device: str) -> dict[str, Any]:
    """What a TensorFlow run's result may depend on besides its arguments: library versions,
    the CUDA/cuDNN TensorFlow was built with (a CUDA build), the device and op determinism in force."""
    build = tf.sysconfig.get_build_info()
    record = library_versions(tensorflow_version=tf.__version__, keras_version=keras.__version__)
    record.update({f"tensorflow_{key}": str(build[key]) for key in ("cuda_version", "cudnn_version") if key in build})
    record.update({"device": device, "device_name": device_name(device), "op_determinism": op_determinism_enabled()})
    return record


def failed_op(error: tf.errors.OpError) -> str:
    """The op an OpError names: the graph node (``{{node X}}``), else the eager op (``[Op:X]``)."""
    message = error.message or ""
    found = _NODE.search(message) or _EAGER_OP.search(message)
    if found:
        return found.group(1)
    return error.op.name if error.op is not None else "an op"


def determinism_failure(error: BaseException) -> tuple[int, str] | None:
    """(exit 2, one line naming the op) for an op that op determinism refuses (no
    deterministic kernel, an unseeded random op, a clock); None for any other error."""
    if not isinstance(error, tf.errors.OpError) or "determinis" not in (error.message or "").lower():
        return None
    first = " ".join((error.message or "").split("\n", 1)[0].split())
    first = re.sub(r"^\{\{function_node [^}]+\}\}\s*", "", first)
    return EXIT_BAD_INPUT, (f"op {failed_op(error)} cannot run deterministically ({first[:300]}); run with "
                            "--deterministic off to allow it")
