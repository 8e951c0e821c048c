"""``--deterministic`` in PyTorch: the settings ``clients.determinism`` resolves, applied to torch,
and what a torch run records of the machine it ran on.

On: ``torch.use_deterministic_algorithms(True)`` (``set_deterministic_kernels``: an op
without a deterministic kernel raises instead of varying; ``determinism_error`` turns that
into one line, exit 2), cuDNN
deterministic and not benchmarking (benchmarking picks kernels by timing them), and on
CUDA ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (cuBLAS's deterministic workspace), which cuBLAS
reads when CUDA starts: set here when CUDA has not started yet, refused in one line when
it has and the variable is missing. Off: deterministic kernels are switched off again
(the commands run in one process in tests and in ``evaluate``, so a setting is always
made, never left from an earlier run). Either way the intra- and inter-op thread counts
are fixed (``--threads``); torch sets the inter-op count once per process, before any
parallel work, so where it cannot be set the count in force is kept, and the returned
``Determinism`` records the counts actually in force.

Random draws are the commands' own business (each seeds its draws from the run's seed
by name, ``clients.seeds.derive_seed``); this module sets no seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any

import torch

from clients.determinism import Determinism, library_versions, resolve_determinism
from clients.errors import UsageError
from clients.trainer_shell import EXIT_BAD_INPUT

CUBLAS_VARIABLE = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_DETERMINISTIC = (":4096:8", ":16:8")  # the values cuBLAS documents as deterministic; the first is set
_NO_KERNEL = re.compile(r"(\S+) does not have a deterministic implementation")


def apply_determinism(args: argparse.Namespace, device: torch.device) -> Determinism:
    """``--deterministic``/``--threads`` of ``args`` applied for a run on ``device``; the settings in force.
    Call it before any model is built (and, on CUDA, before CUDA starts)."""
    wanted = resolve_determinism(args, accelerated=device.type == "cuda")
    if wanted.enabled and device.type == "cuda":
        _cublas_workspace()
    set_deterministic_kernels(wanted.enabled)
    torch.backends.cudnn.deterministic = wanted.enabled
    if wanted.enabled:
        torch.backends.cudnn.benchmark = False
    torch.set_num_threads(wanted.intra_op_threads)
    if torch.get_num_interop_threads() != wanted.inter_op_threads:
        try:
            torch.set_num_interop_threads(wanted.inter_op_threads)
        except RuntimeError:  # set already, or parallel work has started: the count in force stays
            pass
    return dataclasses.replace(wanted, intra_op_threads=torch.get_num_threads(),
                               inter_op_threads=torch.get_num_interop_threads())


def set_deterministic_kernels(enabled: bool) -> None:
    """``torch.use_deterministic_algorithms(enabled)`` without importing inductor.

    The public call imports ``torch._inductor`` to set inductor's own switch as well: 2.3 s
    of every torch trainer's start-up on an idle 2-core machine, spent before the trainer
    reaches ``--server`` (so before it can say that nothing listens there). That switch
    matters only to a compiled step, and ``clients.torch.compiled`` sets it from this one
    before compiling; where inductor is loaded already, the public call sets both."""
    if "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(enabled)
    else:
        torch._C._set_deterministic_algorithms(enabled)


def _cublas_workspace() -> None:
    value = os.environ.get(CUBLAS_VARIABLE)
    if value in CUBLAS_DETERMINISTIC:
        return
    if torch.cuda.is_initialized():
        raise UsageError(f"argument --deterministic: on needs environment {CUBLAS_VARIABLE}="
                         f"{CUBLAS_DETERMINISTIC[0]} before CUDA starts, but CUDA has started in this process with "
                         f"{CUBLAS_VARIABLE}={value!r}; set it before starting, or pass --deterministic off")
    os.environ[CUBLAS_VARIABLE] = CUBLAS_DETERMINISTIC[0]


def device_name(device: torch.device) -> str:
    """The card's name on CUDA; the CPU's model (``/proc/cpuinfo``), else its architecture."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def torch_record(device: torch.device) -> dict[str, Any]:
    """What a torch run's results may depend on besides its arguments: the library versions
    (``clients.determinism.library_versions``: torch, CUDA and cuDNN as torch was built with)
    and the device's name (``device_name``)."""
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {**library_versions(torch_version=str(torch.__version__), cuda_version=torch.version.cuda,
                               cudnn_version=str(cudnn) if cudnn is not None else None),
            "device_name": device_name(device)}


def nondeterministic_op(error: BaseException | None) -> str | None:
    """The op named by torch's error for an op without a deterministic kernel (raised under
    ``use_deterministic_algorithms(True)``), found in ``error`` or the errors it came from; else None."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        text = str(error)
        if isinstance(error, RuntimeError) and "use_deterministic_algorithms" in text:
            match = _NO_KERNEL.search(text)
            return match.group(1) if match else "an op"
        error = error.__cause__ or error.__context__
    return None


def determinism_error(error: BaseException, determinism: Determinism, device: torch.device) -> UsageError | None:
    """The one line a run ends with when ``error`` is (or came from) an op without a deterministic kernel."""
    op = nondeterministic_op(error)
    if op is None:
        return None
    asked = "on" if determinism.requested == "on" else f"{determinism.requested} (on for {device.type})"
    return UsageError(f"argument --deterministic: {asked}, but {op} has no deterministic kernel on {device}; "
                      "pass --deterministic off to run it (its results may then vary from run to run)")


def classify_determinism(error: BaseException, determinism: Determinism,
                         device: torch.device) -> tuple[int, str] | None:
    """``classify``'s part for determinism: (2, one line) for an op without a deterministic kernel."""
    failure = determinism_error(error, determinism, device)
    return (EXIT_BAD_INPUT, str(failure)) if failure is not None else None


def load_checked(load: Any, determinism: Determinism, device: torch.device) -> Any:
    """``load()`` (a backbone's construction and probe), an op without a deterministic kernel met
    on the way refused at start in one line: the probe's own error message would blame the input size."""
    try:
        return load()
    except Exception as error:
        failure = determinism_error(error, determinism, device)
        if failure is None:
            raise
        raise failure from None
