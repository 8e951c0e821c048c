"""The control baselines: a task's data regimes (N training examples drawn by a seed).

A regime is drawn by the server (``GetRegime``) and read like a task split: its parts
("train", "val", "trainval") stream as VTAB task batches with ``regime`` set
(``clients.protocols.vtab``); its results are reported as VTAB task results keyed by
role, regime and regime seed.
"""

from __future__ import annotations

from sampler_common.checks import check_seed
from sampler_common.splits import REGIME
from sampler_common.wire.gen.sampler.v1 import sampler_pb2 as pb

from clients.protocols import Rpc


class BaselineCalls(Rpc):
    """Control-baseline calls of ``SamplerClient``."""

    def get_regime(self, task: str, n: int, seed: int, split: str = "train", store: str = "", target: str = "",
                   loss: str = "", sampling: str = "") -> pb.Regime:
        """A data regime of a task without images: the record ids and labels of its ``split``
        ("train" or "val"; "valid" and "validation" read as "val"), its fingerprint, the blind guess
        and the task's default regimes (``n`` = 0: only the default regimes). ``target`` (a numeric
        attribute of the store) adds its regression blind guess under ``loss`` ("l2", the default, or "l1"). ``sampling``:
        "uniform" (the server's default), "stratified" (scikit-learn's StratifiedShuffleSplit into
        train and val, 80/20) or "one-per-class-first" (RegimeRequest.sampling)."""
        request = pb.RegimeRequest(task=task, n=n, seed=check_seed(seed), split=REGIME.canonical(split), store=store,
                                   target=target, loss=loss, sampling=sampling)
        return self.call("GetRegime", request)
