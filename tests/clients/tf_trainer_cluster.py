"""The workers of ``python -m clients.tf`` clusters (test_tf_multi_worker.py), forked from this
one process, which imported TensorFlow once: a fresh interpreter importing it costs about 9 s
of CPU, paid here once instead of by each worker of each cluster. Each worker is still a
process of its own, with its own TF_CONFIG and its own TensorFlow runtime: this process
never starts one (it only imports), so each child starts it as a fresh ``python -m
clients.tf`` would, and runs that entry (``clients.tf.__main__``) with the worker's arguments.

On stdin, one JSON line per cluster: ``{"argv": [...], "configs": [TF_CONFIG, ...],
"errors": [path, ...], "timeout": seconds}``; each worker's stderr goes to its path, its
stdout nowhere. On stdout, one JSON line once all have ended: ``{"codes": [...]}`` (a
worker still running at the timeout is killed: -9)."""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import time
import traceback

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # as clients.tf.__main__, before TensorFlow's import
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

from sampler_common.startup import program_imports  # noqa: E402

with program_imports():
    import clients.tf.md_train  # noqa: E402, F401


def _worker(argv: list[str], config: str, errors: str) -> None:
    """In the child: ``python -m clients.tf ARGV`` under ``config``; never returns."""
    code = 1
    try:
        os.dup2(os.open(errors, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        os.environ["TF_CONFIG"] = config
        sys.argv = ["clients.tf", *argv]
        runpy.run_module("clients.tf", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _cluster(argv: list[str], configs: list[str], errors: list[str], timeout: float) -> list[int]:
    sys.stdout.flush()
    sys.stderr.flush()
    pids = []
    for config, path in zip(configs, errors, strict=True):
        pid = os.fork()
        if pid == 0:
            _worker(argv, config, path)
        pids.append(pid)
    codes: dict[int, int] = {}
    deadline = time.monotonic() + timeout
    while len(codes) < len(pids):
        for pid in pids:
            if pid not in codes:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done == pid:
                    codes[pid] = os.waitstatus_to_exitcode(status)
        if len(codes) < len(pids) and time.monotonic() > deadline:
            for pid in set(pids) - set(codes):
                os.kill(pid, signal.SIGKILL)
                codes[pid] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        time.sleep(0.05)
    return [codes[pid] for pid in pids]


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.write(json.dumps({"codes": _cluster(request["argv"], request["configs"], request["errors"],
                                                       request["timeout"])}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
