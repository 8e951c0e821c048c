"""Feature extraction on one GPU: a backbone (ResNet-50 at 224 px by default) fed through the
service against the same model on the same images already on the GPU.

Builds a CoG store with the project's fixture and pack tools (``write_imagenet21k`` of
the ``cog_counts`` concepts, each eligible concept's count times ``--scale``, JPEGs whose
shorter side is ``--sides`` px), packed by ``pack imagenet21k`` as each ``--stores`` kind:
``raw`` (default: decoded and resized at pack time with CoG's resize, ``--raw-size S
--raw-resize shorter_bicubic_center_crop``; the server only copies pixels) and ``jpeg``
(the server decodes and resizes every image it serves). Starts ``sampler-server serve``
on 127.0.0.1 and streams every level split ``evaluate`` extracts for CoG (L1..L5, train
and test; level size 6, so the levels hold all 30 eligible concepts) with
StreamCogBatches at ``--image-size`` (the reference's bicubic shorter side and centre
crop). On the GPU: uint8 NHWC -> float NCHW (channels_last strides), /255, ImageNet
mean/std, forward in ``torch.inference_mode`` in ``--precision`` (float32, the default of
``cog`` and ``evaluate``, as the reference extracts; bf16: under bf16 autocast) with the
model channels_last (as the trainers run on CUDA), features back to the host. It prints
images/s of:

- model-only: the same uint8 batches (same sizes, same order) already resident on the
  GPU, so only normalisation, forward and the features' copy back are timed; taken
  after the first store's warm-up pass and again at the end, and on CUDA once more with
  each batch shape replayed as a captured graph, as the commands run our backbones (the
  highest of these is the reference);
- served alone, per store: every batch received as the overlapped run receives it, no
  model; with the share of the time spent waiting for each split's first batch (a
  stream's start) and the rate without that wait;
- through the service, overlapped: each split's stream is received by a thread of its
  own that copies every batch into pinned host memory (one copy) and queues it; the
  next ``--open-ahead`` splits are streamed meanwhile; the main thread sends batches to
  the GPU and features back without waiting, one synchronisation per pass. Also the
  data wait: the share of the time the main thread waited for a batch;
- through the service, serial: one split after another, each batch received, copied,
  embedded and its features back in numpy before the next is taken, as a per-batch
  ``features(uint8 ndarray) -> ndarray`` call (``clients.torch.cog_eval``'s ``extract``)
  runs it;
- the cog command's and evaluate's own extraction: ``CogRun.level_features`` of every split
  in order into a fresh feature cache (its writes included), the next two splits' streams
  opened while one is extracted (``CogRun.open_ahead``) and extracted after it through the
  same stream (``clients.cog_streams``), the backend theirs (``TorchCogBackend``, the
  bench's backbone with ImageNet's mean and std);

and each rate as a ratio to the model-only rate (targets: the commands' extraction at
least ``PRODUCT_TARGET``, served alone at least ``SERVED_TARGET``). Every store serves the same pixels (checked batch by batch). Each figure is
over ``--passes`` passes after one warm-up pass, which also meets every batch shape,
so cuDNN has chosen its kernels.

Run on a GPU: ``.venv/bin/python bench/feature_bench.py`` (``--stores raw jpeg`` adds the
JPEG store; ``--precision bf16`` times bf16 extraction). A CPU smoke run: ``.venv/bin/python bench/feature_bench.py --device cpu
--backbone conv4 --image-size 32 --sides 40 64 --scale 1 --passes 1 --workers 2``.
Dependencies: torch, numpy, grpcio, lmdb, simplejpeg, Pillow, networkx and this repository.
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from clients.cog_eval import AHEAD, extraction_order, splits_after  # noqa: E402

LEVELS = ("L1", "L2", "L3", "L4", "L5")
LEVEL_SIZE = 6  # five levels of 6 concepts: all 30 eligible concepts of ``cog_counts``
MIN_IMAGES = 60  # ``cog_counts``' threshold, times --scale
COG_RESIZE = "shorter_bicubic_center_crop"
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
PRODUCT_TARGET = 0.85  # the commands' extraction against model-only
SERVED_TARGET = 1.3  # served alone against model-only: the server never the ceiling of one GPU


def write_stores(work: Path, scale: int, sides: tuple[int, int], image_size: int, kinds: list[str],
                 workers: int) -> tuple[dict[str, Path], int]:
    """The ``cog_counts`` concepts with each eligible concept's count times ``scale`` (the
    same 30 eligible with ``min_images`` = ``MIN_IMAGES * scale``: the others have fewer
    or are removed by their own rules), written as IN-21K tars and packed once per kind:
    ``jpeg`` keeps the JPEGs (the server decodes and resizes every image it serves),
    ``raw`` holds them decoded and resized at pack time with CoG's resize. ({kind: data
    directory}, images)."""
    from sampler_server.cli.main import main as cli
    from sampler_server.fixtures.cog_counts import ELIGIBLE, cog_counts
    from sampler_server.fixtures.imagenet21k import write_imagenet21k

    counts = {wnid: count * scale if wnid in ELIGIBLE else count for wnid, count in cog_counts().items()}
    original = work / "in21k"
    write_imagenet21k(original, counts, sides=sides, workers=workers)
    stores = {}
    for kind in kinds:
        stores[kind] = work / f"data-{kind}"
        raw = ["--raw-size", str(image_size), "--raw-resize", COG_RESIZE] if kind == "raw" else []
        if cli(["pack", "imagenet21k", "--input", str(original), "--output", str(stores[kind]), "--quiet",
                "--workers", str(workers), *raw]) != 0:
            raise RuntimeError(f"pack imagenet21k ({kind}) failed")
    shutil.rmtree(original)
    return stores, sum(counts.values())


def start_server(data: Path, args: argparse.Namespace) -> tuple[subprocess.Popen, str]:
    """``sampler-server serve`` on 127.0.0.1, port 0; (process, address). This repository
    first on the path, whatever the caller's PYTHONPATH holds (carried wheels)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen(
        [sys.executable, "-m", "sampler_server", "serve", "--data", str(data), "--port", "0", "--workers",
         str(args.workers), "--lookahead-mb", str(args.lookahead_mb), "--shm-mb", str(args.shm_mb)],
        stdout=subprocess.PIPE, stderr=open(data / "server.log", "a"), text=True, env=env)
    line = process.stdout.readline()
    if "listening on" not in line:
        process.kill()
        raise RuntimeError(f"server did not start: {line!r}; its log ends: {(data / 'server.log').read_text()[-2000:]}")
    return process, line.split()[2]


class Extractor:
    """uint8 NHWC batches on the device -> features, as the trainers run a backbone on CUDA."""

    def __init__(self, backbone: str, image_size: int, device: str, precision: str) -> None:
        import torch

        from clients.torch.models import build_backbone

        self.torch, self.device = torch, torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.bf16 = precision == "bf16"  # as ``TorchFeatures`` takes ``--precision``: autocast on any device
        torch.manual_seed(0)
        self.model = build_backbone(backbone, image_size).to(self.device).eval()
        if self.cuda:
            self.model.to(memory_format=torch.channels_last)
        self.mean = torch.tensor(IMAGENET_MEAN, device=self.device).reshape(1, 3, 1, 1) * 255.0
        self.std = torch.tensor(IMAGENET_STD, device=self.device).reshape(1, 3, 1, 1) * 255.0

    def __call__(self, images, cache: bool = True):
        """uint8 [B, S, S, 3] on the device -> float32 [B, D] on the device (no synchronisation);
        ``cache`` False: autocast keeps no cast weights (inside a captured graph)."""
        torch = self.torch
        x = images.permute(0, 3, 1, 2).float()  # NHWC memory seen as NCHW: channels_last strides
        x = x.sub_(self.mean).div_(self.std)    # (x / 255 - mean) / std with mean, std scaled by 255
        with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.bf16,
                            cache_enabled=cache):
            return self.model(x).float()

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()


def level_splits() -> list[tuple[str, str]]:
    """(level, split) of every split ``evaluate`` extracts, in its order."""
    return extraction_order(LEVELS)


def served_batches(address: str, args: argparse.Namespace, splits: list[tuple[str, str]]) -> Iterator[np.ndarray]:
    """Every image batch of ``splits``, one stream after another, as received (read-only
    uint8 views)."""
    from clients.core import SamplerClient

    with SamplerClient(address, prefetch=args.prefetch) as client:
        for level, split in splits:
            for batch in client.stream_cog_batches(level, split, batch_size=args.batch_size,
                                                   image_size=args.image_size, level_size=LEVEL_SIZE,
                                                   min_images=MIN_IMAGES * args.scale):
                yield batch.images


def received_batches(address: str, args: argparse.Namespace, splits: list[tuple[str, str]], pinned: bool,
                     first_waits: list[float] | None = None) -> Iterator[Any]:
    """Every batch of ``splits`` in order, as torch uint8 tensors in (pinned) host memory.

    ``args.open_ahead`` + 1 splits are streamed at once, each received by a thread of its
    own that copies each batch out of its message (or shared segment) into host memory,
    one copy, and queues it (``args.queue`` per split): the next splits' streams start,
    and are received, while this one is taken. ``first_waits`` gets, per split, how long
    the taker waited for its first batch."""
    import torch

    from clients.core import SamplerClient

    stop = threading.Event()

    def put(out: queue.Queue, item: Any) -> None:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def receive(client: Any, level: str, split: str, out: queue.Queue) -> None:
        try:
            for batch in client.stream_cog_batches(level, split, batch_size=args.batch_size,
                                                   image_size=args.image_size, level_size=LEVEL_SIZE,
                                                   min_images=MIN_IMAGES * args.scale):
                host = torch.empty(batch.images.shape, dtype=torch.uint8, pin_memory=pinned)
                np.copyto(host.numpy(), batch.images)
                put(out, host)
                if stop.is_set():
                    return
            put(out, None)
        except BaseException as error:  # surfaced in the taker
            put(out, error)

    with SamplerClient(address, prefetch=args.prefetch) as client, \
            ThreadPoolExecutor(args.open_ahead + 1, thread_name_prefix="receive") as receivers:
        opened: deque = deque()
        try:
            for position in range(len(splits)):
                while len(opened) <= args.open_ahead and position + len(opened) < len(splits):
                    out: queue.Queue = queue.Queue(maxsize=args.queue)
                    receivers.submit(receive, client, *splits[position + len(opened)], out)
                    opened.append(out)
                taking, first = opened.popleft(), True
                while True:
                    before = time.perf_counter()
                    item = taking.get()
                    if first and first_waits is not None:
                        first_waits.append(time.perf_counter() - before)
                    first = False
                    if item is None:
                        break
                    if isinstance(item, BaseException):
                        raise item
                    yield item
        finally:
            stop.set()


def transport(address: str) -> str:
    from clients.core import SamplerClient

    with SamplerClient(address) as client:
        return client.transport


def overlapped_pass(extract: Extractor, address: str, args: argparse.Namespace,
                    keep: list | None = None) -> tuple[int, float, float]:
    """(images, seconds, seconds waited for data) of one pass through the service."""
    torch = extract.torch
    started = time.perf_counter()
    batches = received_batches(address, args, level_splits(), pinned=extract.cuda)
    images, waited, features = 0, 0.0, []
    while True:
        before = time.perf_counter()
        host = next(batches, None)
        waited += time.perf_counter() - before
        if host is None:
            break
        on_device = host.to(extract.device, non_blocking=True)
        features.append(extract(on_device).to("cpu", non_blocking=extract.cuda))
        images += host.shape[0]
        if keep is not None:
            keep.append(on_device)
    extract.sync()
    seconds = time.perf_counter() - started
    check(features, images, torch)
    return images, seconds, waited


def serial_pass(extract: Extractor, address: str, args: argparse.Namespace) -> tuple[int, float, float]:
    """(images, seconds, seconds waited for data): one batch at a time, numpy in and out."""
    torch = extract.torch
    started = time.perf_counter()
    images, waited, features = 0, 0.0, []
    batches = served_batches(address, args, level_splits())
    while True:
        before = time.perf_counter()
        pixels = next(batches, None)
        waited += time.perf_counter() - before
        if pixels is None:
            break
        pixels = pixels if pixels.flags.writeable else np.array(pixels)  # wire arrays are read-only views
        out = extract(torch.from_numpy(pixels).to(extract.device)).cpu().numpy()
        features.append(torch.from_numpy(out))
        images += len(pixels)
    seconds = time.perf_counter() - started
    check(features, images, torch)
    return images, seconds, waited


def command_backend(args: argparse.Namespace, address: str) -> Any:
    """The torch backend ``cog`` and ``evaluate`` extract with, on the bench's backbone and
    levels, the CoG protocol's declared preprocessing (ImageNet's mean and std)."""
    from clients.torch.cog_eval import TorchCogBackend
    from clients.trainer_args import parse_cog_args

    return TorchCogBackend(parse_cog_args("torch", [
        "--server", address, "--run", "feature-bench", "--backbone", args.backbone, "--image-size",
        str(args.image_size), "--level-size", str(LEVEL_SIZE), "--min-images", str(MIN_IMAGES * args.scale),
        "--extract-batch-size", str(args.batch_size), "--precision", args.precision, "--device", args.device,
        "--feature-cache", tempfile.gettempdir(), "--mean", *map(str, IMAGENET_MEAN), "--std", *map(str, IMAGENET_STD)]))


def product_pass(backend: Any, address: str, args: argparse.Namespace) -> tuple[int, float, float]:
    """(images, seconds, seconds waited for a staged batch) of one pass as the ``cog`` and
    ``evaluate`` commands extract: ``CogRun.level_features`` of every level split in order into
    a fresh feature cache (its writes included), the next splits' streams opened while one is
    extracted, as ``cog`` opens them. The seconds waited for features are added to
    ``backend.device_waited``."""
    from clients.cog_cache import FeatureCache
    from clients.cog_eval import CogRun
    from clients.core import SamplerClient

    with tempfile.TemporaryDirectory() as cache, SamplerClient(address, prefetch=args.prefetch) as client:
        run = CogRun(backend, client, lambda line: None)
        run.cache = FeatureCache(cache)
        waits, marks = backend.extractor.stream_waits, backend.extractor.stream_marks
        data, device, first_mark = waits["data"], waits["device"], len(marks)
        started = time.perf_counter()
        images = 0
        try:
            order = extraction_order(LEVELS)
            for level, split in order:
                images += len(run.level_features(level, split, splits_after(order, (level, split))).labels)
        finally:
            run.close_ahead()
        ended = time.perf_counter()
        backend.device_waited = getattr(backend, "device_waited", 0.0) + waits["device"] - device
        # the device's idle stretches outside the extraction's streams (one runs across consecutive
        # splits, ``clients.cog_streams``): from the pass's start (or a stream's last features) to
        # the next stream's first launch, and from the last stream's end to the pass's
        spans = marks[first_mark:]
        idle = sum(b[0] - a[1] for a, b in zip([(0.0, started), *spans], [*spans, (ended, 0.0)]))
        backend.between_splits = getattr(backend, "between_splits", 0.0) + (idle if spans else 0.0)
        backend.streams = getattr(backend, "streams", 0) + len(spans)
        return images, ended - started, waits["data"] - data


def receive_pass(address: str, args: argparse.Namespace, pinned: bool) -> tuple[int, float, float]:
    """(images, seconds, seconds waited for the splits' first batches) of one pass received
    as the overlapped pass receives it, no model: what the service delivers alone."""
    started = time.perf_counter()
    images, first_waits = 0, []
    for host in received_batches(address, args, level_splits(), pinned, first_waits):
        images += host.shape[0]
    return images, time.perf_counter() - started, sum(first_waits)


def model_pass(extract: Extractor, resident: list) -> tuple[int, float, float]:
    """(images, seconds, 0) of one pass over the uint8 batches already on the device."""
    torch = extract.torch
    extract.sync()
    started = time.perf_counter()
    features = [extract(on_device).to("cpu", non_blocking=extract.cuda) for on_device in resident]
    extract.sync()
    seconds = time.perf_counter() - started
    check(features, sum(len(x) for x in resident), torch)
    return sum(len(x) for x in resident), seconds, 0.0


def graphed_model_pass(extract: Extractor, resident: list, graphs: Any) -> tuple[int, float, float]:
    """``model_pass`` with each batch shape met before replayed as one captured CUDA graph
    (``clients.torch.graphed``, as the commands' extraction runs our backbones): the GPU's
    rate without the launching thread's per-kernel cost."""
    from clients.torch.graphed import GraphedForward

    torch = extract.torch
    extract.sync()
    started = time.perf_counter()
    features = []
    for on_device in resident:
        graph = graphs.runner(tuple(on_device.shape),
                              lambda: GraphedForward(lambda batch: extract(batch, cache=False), on_device))
        output = graph(on_device) if graph is not None else extract(on_device)
        features.append(output.to("cpu", non_blocking=True))  # in stream order, before the next replay
    extract.sync()
    seconds = time.perf_counter() - started
    check(features, sum(len(x) for x in resident), torch)
    return sum(len(x) for x in resident), seconds, 0.0


def check(features: list, images: int, torch) -> None:
    """Every image got a finite feature vector (read after the pass's synchronisation)."""
    joined = torch.cat(features)
    if joined.shape[0] != images or not bool(torch.isfinite(joined).all()):
        raise RuntimeError(f"features {tuple(joined.shape)} for {images} images, or not all finite")


def timed(passes: int, one: Callable[[], tuple[int, float, float]]) -> tuple[float, float]:
    """(images/s, share of the time waiting for data) over ``passes`` passes."""
    images = seconds = waited = 0.0
    for _ in range(passes):
        n, s, w = one()
        images, seconds, waited = images + n, seconds + s, waited + w
    return images / seconds, waited / seconds


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", default="resnet50", choices=["conv4", "resnet18", "resnet50"])
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=128, help="images per served batch (the cog command's "
                        "--extract-batch-size default)")
    parser.add_argument("--passes", type=int, default=3, help="timed passes over every level split, per figure")
    parser.add_argument("--scale", type=int, default=10, help="images per eligible concept: cog_counts' times this")
    parser.add_argument("--sides", type=int, nargs=2, default=[224, 320], metavar=("MIN", "MAX"),
                        help="shorter side of the generated JPEGs (the longer follows aspects 1:3 to 3:1)")
    parser.add_argument("--stores", nargs="+", default=["raw"], choices=["raw", "jpeg"],
                        help="raw: decoded and resized at pack time (pack --raw-size S --raw-resize "
                        f"{COG_RESIZE}); jpeg: the server decodes and resizes every image it serves")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--precision", default="float32", choices=["float32", "bf16"],
                        help="feature extraction, as cog's and evaluate's --precision (float32: theirs by default)")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2),
                        help="serve --workers (and the store writer's processes)")
    parser.add_argument("--lookahead-mb", type=int, default=256, metavar="MB",
                        help="serve --lookahead-mb: batches prepared ahead, all streams together (a 224-px batch of "
                        "128 is 19 MB and a stream prepares 3 ahead)")
    parser.add_argument("--shm-mb", type=int, default=256, metavar="MB",
                        help="serve --shm-mb: same-host segments, all streams together (beyond it pixels go in the "
                        "messages)")
    parser.add_argument("--prefetch", type=int, default=4, help="client prefetch (messages in flight)")
    parser.add_argument("--queue", type=int, default=4, help="received batches held ready, per open stream")
    parser.add_argument("--open-ahead", type=int, default=AHEAD, metavar="N",
                        help="splits whose streams are opened, and received, ahead of the one being taken (0: one "
                        "after another; the cog command's and evaluate's: %(default)s)")
    args = parser.parse_args(argv)
    if args.open_ahead < 0:
        parser.error(f"--open-ahead: got {args.open_ahead}, expected at least 0")
    for name in ("image_size", "batch_size", "passes", "scale", "workers", "prefetch", "queue"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: got {getattr(args, name)}, expected at least 1")
    if not 1 <= args.sides[0] <= args.sides[1]:
        parser.error(f"--sides: got {args.sides}, expected 1 <= MIN <= MAX")
    return args


def measure_store(extract: Extractor, address: str, args: argparse.Namespace, kind: str,
                  resident: list, model_rates: list[float]) -> dict[str, float]:
    """One store's figures; the warm-up pass fills ``resident`` (the first store: then the
    model-only rate is taken too) or is checked against it (the same pixels from every store)."""
    torch = extract.torch
    kept: list = []
    with torch.inference_mode():
        images, seconds, _ = overlapped_pass(extract, address, args, keep=kept)
        if not resident:
            resident.extend(kept)
        elif len(kept) != len(resident) or not all(torch.equal(a, b) for a, b in zip(kept, resident)):
            raise RuntimeError(f"the {kind} store served other pixels than the {args.stores[0]} store")
        del kept
        if not model_rates:
            model_rates.append(timed(args.passes, lambda: model_pass(extract, resident))[0])
        print(f"{kind} store: transport {transport(address)}; warm-up pass {images} images in {len(resident)} "
              f"batches, {images / seconds:.0f} images/s", flush=True)
        figures = {"images": images}
        figures["received"], figures["first_waits"] = timed(
            args.passes, lambda: receive_pass(address, args, extract.cuda))
        figures["overlapped"], figures["overlapped_wait"] = timed(
            args.passes, lambda: overlapped_pass(extract, address, args))
        figures["serial"], figures["serial_wait"] = timed(args.passes, lambda: serial_pass(extract, address, args))
        backend = command_backend(args, address)
        product_pass(backend, address, args)  # warm-up (cuDNN picks its kernels)
        backend.device_waited, backend.between_splits, backend.streams, started = 0.0, 0.0, 0, time.perf_counter()
        figures["product"], figures["product_wait"] = timed(args.passes, lambda: product_pass(backend, address, args))
        seconds = time.perf_counter() - started
        figures["product_device_wait"] = backend.device_waited / seconds
        figures["between_splits"] = backend.between_splits / seconds
        figures["streams"] = backend.streams / args.passes
        figures["within_splits"] = figures["product"] / (1 - figures["between_splits"]) if extract.cuda else 0.0
    return figures


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("feature_bench: --device cuda, but torch finds no CUDA device (use --device cpu)", file=sys.stderr)
        return 2
    if args.device == "cuda":
        torch.backends.cudnn.benchmark = True
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    work = Path(tempfile.mkdtemp(prefix="feature-bench-"))
    resident: list = []
    results: dict[str, dict[str, float]] = {}
    models: list[float] = []
    try:
        started = time.perf_counter()
        stores, stored = write_stores(work, args.scale, tuple(args.sides), args.image_size, args.stores, args.workers)
        print(f"stores: {stored} JPEGs (shorter side {args.sides[0]}-{args.sides[1]} px) written and packed as "
              f"{', '.join(args.stores)} in {time.perf_counter() - started:.1f} s; serve --workers {args.workers} "
              f"--lookahead-mb {args.lookahead_mb} --shm-mb {args.shm_mb} on {os.cpu_count()} cores; "
              f"{args.backbone} at {args.image_size} px on {device_name}, {args.precision}, channels_last "
              f"{'on' if args.device == 'cuda' else 'off'}; "
              f"batches of {args.batch_size} over L1..L5 train and test, one stream a split, {args.open_ahead} "
              "opened ahead", flush=True)
        extract = Extractor(args.backbone, args.image_size, args.device, args.precision)
        for kind in args.stores:
            process, address = start_server(stores[kind], args)
            try:
                results[kind] = measure_store(extract, address, args, kind, resident, models)
            finally:
                process.terminate()
                process.wait()
                log = (stores[kind] / "server.log").read_text()
                if "Traceback" in log:
                    print(log[log.index("Traceback"):][:3000], file=sys.stderr)
        with torch.inference_mode():
            models.append(timed(args.passes, lambda: model_pass(extract, resident))[0])
            if extract.cuda:
                from clients.torch.graphed import ShapeGraphs

                graphs: ShapeGraphs = ShapeGraphs()
                graphed_model_pass(extract, resident, graphs)  # meets each shape once: the next pass captures
                graphed = timed(args.passes, lambda: graphed_model_pass(extract, resident, graphs))[0]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    where = "GPU" if args.device == "cuda" else "CPU"
    print(f"model-only (the same uint8 batches resident on the {where}): {models[0]:.0f} images/s after the first "
          f"warm-up, {models[1]:.0f} at the end", end="")
    if args.device == "cuda":
        models.append(graphed)
        print(f"; each batch shape replayed as a captured CUDA graph {graphed:.0f} images/s", end="")
    print(" (the ratios below are to the highest)")
    model = max(models)
    for kind, r in results.items():
        print(f"{kind} store, served alone (received and copied out, no model): {r['received']:.0f} images/s, "
              f"{r['received'] / args.workers:.0f} per serve worker; {r['first_waits']:.1%} of the time waiting for "
              f"the splits' first batches, {r['received'] / (1 - r['first_waits']):.0f} images/s without that wait")
        print(f"{kind} store, through the service: overlapped {r['overlapped']:.0f} images/s (data wait "
              f"{r['overlapped_wait']:.1%}), serial {r['serial']:.0f} images/s (data wait {r['serial_wait']:.1%}), "
              f"the cog command's and evaluate's own extraction {r['product']:.0f} images/s (waiting for a staged "
              f"batch {r['product_wait']:.1%} of the time, for features {r['product_device_wait']:.1%})")
        if r["within_splits"]:
            splits = len(level_splits())
            print(f"{kind} store, the commands' extraction: {r['between_splits']:.1%} of the time outside its "
                  f"streams (the device idle before a stream's first launch and after its last features; "
                  f"{splits} splits of {r['images'] / splits:.0f} images on average, {r['streams']:.0f} streams a "
                  f"pass); {r['within_splits']:.0f} images/s without it, "
                  f"{r['within_splits'] / model:.2f} of model-only: the rate on splits too long for their starts "
                  "to count (CoG's levels hold about 1,000 concepts each)")
    for kind, r in results.items():
        print(f"feature extraction, {kind} store: {args.backbone} {args.image_size}px on {device_name}, "
              f"{args.precision}: model-only {model:.0f} images/s; as ratios to it: the cog command's and "
              f"evaluate's own extraction {r['product'] / model:.2f} (target >= {PRODUCT_TARGET}), served alone "
              f"{r['received'] / model:.2f} (target >= {SERVED_TARGET}), through the service overlapped "
              f"{r['overlapped'] / model:.2f}, serial {r['serial'] / model:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
