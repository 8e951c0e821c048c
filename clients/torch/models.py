"""Meta-Dataset backbones and heads in plain PyTorch (no torchvision).

Backbones map uint8 NHWC images to one embedding vector per image:
  - ``conv4``: 4 x [conv 3x3, 64 filters, BatchNorm, ReLU, max-pool 2], flattened
    (the Prototypical Networks embedding; 64 * (S // 16)^2 features at side S);
  - ``resnet18``: a 7x7/2 stem and 3x3/2 max-pool, basic blocks [2, 2, 2, 2] of
    widths 64/128/256/512, global average pooling to 512 features;
  - ``resnet50``: the same stem, bottleneck blocks [3, 4, 6, 3] of widths
    64/128/256/512 x 4 (stride on the 3x3 convolution, as torchvision's ResNet-50 v1.5),
    global average pooling to 2048 features; its layers carry torchvision's names
    (``conv1``, ``bn1``, ``layer1.0.conv1``, ``layer1.0.downsample.0``, ...), so a
    torchvision ``resnet50`` state dict without ``fc.*`` loads into it unchanged;
  - ``tiny``: three stride-2 3x3 convolutions, ReLU, global average pooling to 64
    features (fast on CPU: tests and the demo).
Inputs are scaled to [-1, 1] as Meta-Dataset does (``clients.torch.backbones.to_model_input``)
and laid out NCHW (channels_last in memory on CUDA, where cuDNN prefers it). The trainer runs backbones under bf16
autocast on CUDA; prototype distances are always computed in float32. Heads:
  - ``prototype_logits``: class means of the support embeddings, logits = negative
    squared Euclidean distance of each query embedding to each prototype;
  - ``LinearHead``: the classifier of MD's non-episodic ('inference-only') baseline.
Every function here is deterministic given the weights; nothing samples data.

Episode batch norm (``clients.batch_norm``): under ``episode_norm(backbone, mode, support,
query)`` every ``RowBatchNorm2d`` takes its moments from the episode's rows as the mode says
(``md``: the support rows' mean and biased variance normalise the support and the query,
the gradient flowing through them, in training and evaluation alike; ``transductive``: each
set its own), never its running statistics; padding rows enter no moment and come out as
zeros. ``running`` is the classifier's batch norm below.

Shape buckets (``clients.buckets``): an episode may arrive padded to a bucket of B rows
whose first n are valid. Under ``valid_rows(backbone, n)`` every batch norm
(``RowBatchNorm2d``) normalises the first n rows exactly as ``nn.BatchNorm2d`` would
normalise the unpadded batch, and updates its running statistics from them alone;
the padding rows come out as zeros. Every other layer treats rows independently, so
the valid rows' embeddings are the unpadded ones (up to float summation order).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

from clients.batch_norm import EPISODE_MOMENTS, check_batch_norm

BACKBONES = ("conv4", "resnet18", "resnet50", "tiny")


class RowBatchNorm2d(nn.BatchNorm2d):
    """``nn.BatchNorm2d`` that, in training with ``valid_rows`` set, takes the batch
    statistics and the running-statistics update from the first ``valid_rows`` rows only.

    Why the first rows and not a masked mean: those rows ARE the unpadded batch, so the
    statistics, unbiased running variance, momentum (or the cumulative average of
    ``momentum=None``) and ``num_batches_tracked`` come from PyTorch's own kernel with
    nothing re-derived (``row_batch_norm``); padding rows come out as zeros and get zero
    gradient. In evaluation mode batch norm is per row and padding needs nothing. Same
    parameters and buffers as ``nn.BatchNorm2d``, so checkpoints and torchvision state
    dicts load unchanged.
    """

    valid_rows: int | None = None
    valid_count: torch.Tensor | None = None  # the compiled step's count (``counted_rows``)
    episode: EpisodeRows | None = None  # ``episode_norm``: the episode's own moments

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.episode is not None:
            return self._episode(x, self.episode)
        if self.valid_count is not None and self.training:
            return self._counted(x, self.valid_count)
        rows = self.valid_rows
        if rows is None or not self.training or rows >= x.shape[0]:
            return super().forward(x)
        self._check_input_dim(x)
        # momentum and num_batches_tracked exactly as nn.BatchNorm2d.forward does them
        factor = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        track = self.track_running_stats
        return row_batch_norm(x, rows, self.running_mean if track else None, self.running_var if track else None,
                              self.weight, self.bias, factor, self.eps)

    def _episode(self, x: torch.Tensor, episode: EpisodeRows) -> torch.Tensor:
        """The episode's rows normalised by their own moments (``episode_batch_norm``); in
        training the running statistics move towards the support's moments (never read)."""
        self._check_input_dim(x)
        update = self.training and self.track_running_stats and self.running_mean is not None
        factor: float | torch.Tensor = 0.0
        if update:
            factor = 0.0 if self.momentum is None else self.momentum
            if self.num_batches_tracked is not None:
                self.num_batches_tracked.add_(1)
                if self.momentum is None:
                    factor = 1.0 / self.num_batches_tracked.float()
        return episode_batch_norm(x, episode, self.weight, self.bias, self.eps,
                                  (self.running_mean, self.running_var, factor) if update else None)

    def _counted(self, x: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        factor = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # the cumulative average: 1 / batches seen, as a tensor (no recompile)
                factor = 1.0 / self.num_batches_tracked.float()
        track = self.track_running_stats
        return counted_batch_norm(x, count, self.running_mean if track else None,
                                  self.running_var if track else None, self.weight, self.bias, factor, self.eps)


def row_batch_norm(x: torch.Tensor, rows: int, running_mean: torch.Tensor | None,
                   running_var: torch.Tensor | None, weight: torch.Tensor | None, bias: torch.Tensor | None,
                   momentum: float, eps: float) -> torch.Tensor:
    """Training-mode ``F.batch_norm`` of ``x[:rows]`` (running statistics updated from
    those rows alone) with rows ``rows:`` set to zero, in one tensor of ``x``'s shape,
    dtype and memory format; the padding rows' gradient is zero.

    Equal to ``torch.cat([F.batch_norm(x[:rows], ...), zeros])`` and to its gradients
    (the same native kernels run on the same rows) without that copy: the kernel writes
    straight into the first rows of the output, and only the padding rows are zeroed.
    """
    if rows < 1:
        raise ValueError(f"valid_rows: got {rows}, expected a positive number of rows")
    if rows * x[0, 0].numel() < 2:
        raise ValueError(f"valid_rows: got {rows} of {tuple(x.shape)}, batch norm in training needs more than "
                         "1 value per channel")
    return _RowBatchNorm.apply(x, weight, bias, running_mean, running_var, rows, momentum, eps)


def _dense(x: torch.Tensor) -> torch.Tensor:
    """``x`` itself when contiguous or channels_last, else a contiguous copy: the output
    and the gradient are allocated like ``x``, so their first rows must be laid out as
    the kernels lay out ``x[:rows]``'s."""
    if x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last):
        return x
    return x.contiguous()


class _RowBatchNorm(torch.autograd.Function):
    """Forward: ``native_batch_norm.out`` into ``out[:rows]``; backward:
    ``native_batch_norm_backward`` on the first rows, then one copy into a gradient of
    ``x``'s shape whose padding rows are zero (no PyTorch kernel writes a batch norm's
    input gradient into a given tensor, so that copy is the one left). The native
    kernel is the one ``F.batch_norm`` runs on CPU and for bf16 on CUDA, the trainer's
    case (PyTorch gives cuDNN no bf16); for float32 on CUDA ``F.batch_norm`` would pick
    cuDNN, and this op still runs the native kernel. Not twice differentiable."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                running_mean: torch.Tensor | None, running_var: torch.Tensor | None, rows: int, momentum: float,
                eps: float) -> torch.Tensor:
        x = _dense(x)
        out = torch.empty_like(x)  # x's strides, so out[:rows] is laid out as x[:rows]
        stats = x.new_empty(x.shape[1], dtype=torch.float64 if x.dtype == torch.float64 else torch.float32)
        mean, invstd = stats, torch.empty_like(stats)
        torch.ops.aten.native_batch_norm.out(x[:rows], weight, bias, running_mean, running_var, True, momentum, eps,
                                             out=out[:rows], save_mean=mean, save_invstd=invstd)
        out[rows:].zero_()
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.rows, ctx.eps = rows, eps
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight, mean, invstd = ctx.saved_tensors
        rows = ctx.rows
        mask = list(ctx.needs_input_grad[:3])
        grad_valid, grad_weight, grad_bias = torch.ops.aten.native_batch_norm_backward(
            grad_out[:rows], x[:rows], weight, None, None, mean, invstd, True, ctx.eps, mask)
        grad_x = None
        if mask[0]:
            grad_x = torch.empty_like(x)
            grad_x[:rows].copy_(grad_valid)
            grad_x[rows:].zero_()
        return grad_x, grad_weight, grad_bias, None, None, None, None, None


@dataclass(frozen=True)
class EpisodeRows:
    """An episode's layout in a batch: ``support`` rows, then ``query`` rows, then padding;
    ints (eager) or 0-d integer tensors (a compiled step: one graph for every count)."""

    mode: str  # one of clients.batch_norm.EPISODE_MOMENTS
    support: int | torch.Tensor
    query: int | torch.Tensor


def _moments(x: torch.Tensor, start: int | torch.Tensor, stop: int | torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(mean, biased variance) per channel of rows ``start:stop`` of ``x`` [N, C, H, W] and
    the rows' mask (None for int bounds: a slice), as tensors the gradient flows through."""
    if isinstance(start, int) and isinstance(stop, int):
        variance, mean = torch.var_mean(x[start:stop], dim=(0, 2, 3), unbiased=False)
        return mean, variance, None
    rows = torch.arange(x.shape[0], device=x.device).view(-1, 1, 1, 1)
    mask = (rows >= start) & (rows < stop)
    values = ((stop - start) * (x.shape[2] * x.shape[3])).to(x.dtype)
    mean = torch.where(mask, x, 0.0).sum((0, 2, 3)) / values
    variance = torch.where(mask, x - mean.view(1, -1, 1, 1), 0.0).square().sum((0, 2, 3)) / values
    return mean, variance, mask


def _affine(x: torch.Tensor, mean: torch.Tensor, variance: torch.Tensor, weight: torch.Tensor | None,
            bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    scale = torch.rsqrt(variance + eps)
    if weight is not None:
        scale = scale * weight.to(x.dtype)
    shift = -mean * scale
    if bias is not None:
        shift = shift + bias.to(x.dtype)
    return x * scale.view(1, -1, 1, 1) + shift.view(1, -1, 1, 1)


def episode_batch_norm(x: torch.Tensor, episode: EpisodeRows, weight: torch.Tensor | None,
                       bias: torch.Tensor | None, eps: float,
                       running: tuple[torch.Tensor, torch.Tensor, float | torch.Tensor] | None = None) -> torch.Tensor:
    """Batch norm of an episode laid out support, query, padding (``EpisodeRows``): under
    ``md`` the support rows' mean and biased variance normalise the support and query rows;
    under ``transductive`` each set is normalised by its own. The gradient flows through the
    moments (MD's ``backprop_through_moments``); padding rows enter no moment and come out
    as zeros. Moments in float32 for half-precision inputs. ``running``: (running mean,
    running variance, momentum factor) moved towards the support's moments (the variance
    unbiased, as PyTorch's update), outside the graph."""
    mode, support, query = episode.mode, episode.support, episode.query
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    mean, variance, support_mask = _moments(xf, 0, support)
    rows = support + query
    if mode == "md":
        out = _affine(xf, mean, variance, weight, bias, eps)
    else:
        query_mean, query_variance, _ = _moments(xf, support, rows)
        in_support = support_mask if support_mask is not None else (
            torch.arange(x.shape[0], device=x.device) < support).view(-1, 1, 1, 1)
        out = torch.where(in_support, _affine(xf, mean, variance, weight, bias, eps),
                          _affine(xf, query_mean, query_variance, weight, bias, eps))
    if isinstance(rows, int):
        if rows < x.shape[0]:
            out = torch.cat([out[:rows], out.new_zeros((x.shape[0] - rows, *out.shape[1:]))])
    else:
        out = torch.where((torch.arange(x.shape[0], device=x.device) < rows).view(-1, 1, 1, 1), out, 0.0)
    if running is not None:
        running_mean, running_var, factor = running
        count = (support if isinstance(support, int) else support.to(torch.float32)) * (x.shape[2] * x.shape[3])
        with torch.no_grad():
            running_mean.mul_(1 - factor).add_(mean.detach() * factor)
            running_var.mul_(1 - factor).add_(variance.detach() * (count / max(count - 1, 1) if isinstance(count, int)
                                                                  else count / (count - 1).clamp_min(1)) * factor)
    return out.to(x.dtype)


def counted_batch_norm(x: torch.Tensor, count: torch.Tensor, running_mean: torch.Tensor | None,
                       running_var: torch.Tensor | None, weight: torch.Tensor | None, bias: torch.Tensor | None,
                       momentum: float | torch.Tensor, eps: float) -> torch.Tensor:
    """``row_batch_norm`` with the row count a 0-d tensor: the same statistics, update and
    zero padding rows, written as reductions over a row mask (in float32, as the native
    kernel accumulates) so that ``torch.compile`` traces it with nothing specialised on
    the count: one compiled graph serves every bucket and every episode in it, where an
    int count would be a guard and a recompilation per value. Equal to ``row_batch_norm``
    up to float summation order (``tests/clients/test_compiled_step.py``)."""
    batch = x.shape[0]
    mask = (torch.arange(batch, device=x.device) < count).view(batch, 1, 1, 1)
    values = count.to(torch.float32) * (x.shape[2] * x.shape[3])
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    values = values.to(xf.dtype)
    mean = torch.where(mask, xf, 0.0).sum((0, 2, 3)) / values
    centred = torch.where(mask, xf - mean.view(1, -1, 1, 1), 0.0)
    variance = centred.square().sum((0, 2, 3)) / values
    if running_mean is not None and running_var is not None:
        with torch.no_grad():  # as the native kernel: momentum-weighted, the variance unbiased
            running_mean.mul_(1 - momentum).add_(mean.detach() * momentum)
            running_var.mul_(1 - momentum).add_(variance.detach() * (values / (values - 1)) * momentum)
    scale = torch.rsqrt(variance + eps)
    if weight is not None:
        scale = scale * weight.to(xf.dtype)
    out = centred * scale.view(1, -1, 1, 1)
    if bias is not None:
        out = torch.where(mask, out + bias.to(xf.dtype).view(1, -1, 1, 1), 0.0)
    return out.to(x.dtype)


@contextlib.contextmanager
def _norms_set(module: nn.Module, attribute: str, value: object) -> Iterator[None]:
    """Within: ``attribute`` of every ``RowBatchNorm2d`` of ``module`` is ``value`` (then None)."""
    norms = [m for m in module.modules() if isinstance(m, RowBatchNorm2d)]
    for norm in norms:
        setattr(norm, attribute, value)
    try:
        yield
    finally:
        for norm in norms:
            setattr(norm, attribute, None)


def counted_rows(module: nn.Module, count: torch.Tensor | None) -> contextlib.AbstractContextManager[None]:
    """Within: the batch norms of ``module`` in training count the first ``count`` rows
    (a 0-d integer tensor on the module's device; ``counted_batch_norm``)."""
    return _norms_set(module, "valid_count", count)


def episode_norm(module: nn.Module, mode: str, support: int | torch.Tensor,
                 query: int | torch.Tensor) -> contextlib.AbstractContextManager[None]:
    """Within: the batch norms of ``module`` normalise each batch as one episode of
    ``support`` then ``query`` rows (then padding) under ``mode`` (``clients.batch_norm``):
    ``md`` or ``transductive`` take the episode's moments (``episode_batch_norm``) in training
    and evaluation; ``running`` is plain batch norm over the support and query rows in
    training (``valid_rows``) and the running statistics in evaluation."""
    if check_batch_norm(mode) in EPISODE_MOMENTS:
        return _norms_set(module, "episode", EpisodeRows(mode, support, query))
    if isinstance(support, int) and isinstance(query, int):
        return _norms_set(module, "valid_rows", support + query)
    return _norms_set(module, "valid_count", support + query)


def adopt_batch_norms(module: nn.Module, mode: str) -> int:
    """Under ``md`` or ``transductive``: every plain ``nn.BatchNorm2d`` of a backbone (a user's
    or torchvision's) becomes a ``RowBatchNorm2d`` (the same parameters and buffers, one more
    behaviour), so it takes the episode's moments too; the number of batch norms that do.
    Another kind of batch norm cannot take them: refused (ValueError naming it)."""
    if check_batch_norm(mode) not in EPISODE_MOMENTS:
        return 0
    adopted = 0
    for name, child in module.named_modules():
        if type(child) is nn.BatchNorm2d:
            child.__class__ = RowBatchNorm2d
        elif isinstance(child, nn.modules.batchnorm._BatchNorm) and not isinstance(child, RowBatchNorm2d):
            raise ValueError(f"batch_norm: got {mode}, but layer {name or '(the model)'} is a "
                             f"{type(child).__name__}, which cannot take an episode's moments; use running")
        adopted += isinstance(child, RowBatchNorm2d)
    return adopted


def valid_rows(module: nn.Module, rows: int | None) -> contextlib.AbstractContextManager[None]:
    """Within: the batch norms of ``module`` count only the first ``rows`` rows of each
    batch (None: all rows, plain batch norm)."""
    return _norms_set(module, "valid_rows", rows)


class Conv4(nn.Module):
    """Four conv blocks of 64 filters; the flattened feature map is the embedding."""

    def __init__(self, image_size: int, width: int = 64) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for _ in range(4):
            layers += [nn.Conv2d(channels, width, 3, padding=1, bias=False), RowBatchNorm2d(width),
                       nn.ReLU(inplace=True), nn.MaxPool2d(2)]
            channels = width
        self.features = nn.Sequential(*layers)
        side = image_size
        for _ in range(4):
            side //= 2
        if side < 1:
            raise ValueError(f"image_size: got {image_size}, expected at least 16 for conv4")
        self.out_dim = width * side * side

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.features(x), 1)


class BasicBlock(nn.Module):
    """Two 3x3 convs with BatchNorm and an identity (or 1x1 projection) shortcut."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = RowBatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = RowBatchNorm2d(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                                          RowBatchNorm2d(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x), inplace=True)


class ResNet18(nn.Module):
    """ResNet-18 body: stem, four stages of two basic blocks, global average pooling."""

    def __init__(self, widths: tuple[int, ...] = (64, 128, 256, 512)) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 7, stride=2, padding=3, bias=False),
                                  RowBatchNorm2d(widths[0]), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, stride=2, padding=1))
        blocks: list[nn.Module] = []
        channels = widths[0]
        for stage, width in enumerate(widths):
            stride = 1 if stage == 0 else 2
            blocks += [BasicBlock(channels, width, stride), BasicBlock(width, width, 1)]
            channels = width
        self.blocks = nn.Sequential(*blocks)
        self.out_dim = channels
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return global_average(self.blocks(self.stem(x)))


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carrying the stride), 1x1 expand by 4, each with BatchNorm, and an
    identity (or 1x1 projection, ``downsample``) shortcut; torchvision's layer names."""

    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int) -> None:
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = RowBatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = RowBatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = RowBatchNorm2d(out_channels)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                                            RowBatchNorm2d(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = F.relu(self.bn2(self.conv2(out)), inplace=True)
        out = self.bn3(self.conv3(out))
        shortcut = x if self.downsample is None else self.downsample(x)
        return F.relu(out + shortcut, inplace=True)


class ResNet50(nn.Module):
    """ResNet-50 body: stem, four stages of [3, 4, 6, 3] bottleneck blocks, global average
    pooling to 2048 features (23,508,032 parameters: torchvision's ``resnet50`` less ``fc``)."""

    def __init__(self, blocks: tuple[int, ...] = (3, 4, 6, 3), widths: tuple[int, ...] = (64, 128, 256, 512)) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 7, stride=2, padding=3, bias=False)
        self.bn1 = RowBatchNorm2d(widths[0])
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        channels = widths[0]
        for stage, (count, width) in enumerate(zip(blocks, widths)):
            layer = []
            for block in range(count):
                layer.append(Bottleneck(channels, width, 2 if stage > 0 and block == 0 else 1))
                channels = width * Bottleneck.expansion
            self.add_module(f"layer{stage + 1}", nn.Sequential(*layer))
        self.out_dim = channels
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x)), inplace=True))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return global_average(x)


def global_average(x: torch.Tensor) -> torch.Tensor:
    """[N, C, H, W] -> [N, C]: a mean over the spatial axes, not ``adaptive_avg_pool2d``,
    whose CUDA backward has no deterministic kernel (``--deterministic on`` refuses it)."""
    return x.mean((2, 3))


class GlobalAverage(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return global_average(x)


class Tiny(nn.Module):
    """Three stride-2 3x3 convolutions with ReLU, global average pooling: 64 features (fast
    on CPU: tests and the demo; no batch norm, so padding rows change nothing)."""

    out_dim = 64

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
            GlobalAverage())

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.body(images)


def build_backbone(name: str, image_size: int) -> nn.Module:
    """A backbone by name; ``out_dim`` is its embedding size at ``image_size``."""
    if name == "conv4":
        return Conv4(image_size)
    if name == "resnet18":
        return ResNet18()
    if name == "resnet50":
        return ResNet50()
    if name == "tiny":
        return Tiny()
    raise ValueError(f"backbone: got {name!r}, expected one of {', '.join(BACKBONES)}")


def prototype_logits(support: torch.Tensor, support_labels: torch.Tensor, query: torch.Tensor,
                     ways: int) -> torch.Tensor:
    """Logits [Nq, ways]: minus the squared distance of each query to each class mean."""
    one_hot = F.one_hot(support_labels, ways).to(support.dtype)           # [Ns, W]
    counts = one_hot.sum(0).clamp_min(1.0).unsqueeze(1)                    # [W, 1]
    prototypes = one_hot.t() @ support / counts                            # [W, D]
    distances = (query.pow(2).sum(1, keepdim=True) - 2.0 * query @ prototypes.t()
                 + prototypes.pow(2).sum(1).unsqueeze(0))
    return -distances


class ProtoNet(nn.Module):
    """A backbone used as Prototypical Networks' embedding (support and query in one pass),
    its batch norms normalising each episode as ``batch_norm`` says (``clients.batch_norm``)."""

    def __init__(self, backbone: nn.Module, batch_norm: str = "md") -> None:
        super().__init__()
        self.backbone = backbone
        self.batch_norm = check_batch_norm(batch_norm)

    def forward(self, support: torch.Tensor, support_labels: torch.Tensor, query: torch.Tensor,
                ways: int) -> torch.Tensor:
        with episode_norm(self.backbone, self.batch_norm, support.shape[0], query.shape[0]):
            embedded = self.backbone(torch.cat([support, query], 0))
        return self._logits(embedded, support_labels, support.shape[0], query.shape[0], ways)

    def packed(self, images: torch.Tensor, labels: torch.Tensor, support: int, query: int,
               ways: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [query, ways], query labels) of an episode in the bucketed layout
        (``clients.buckets``): ``images`` [B, 3, S, S] holds the support rows, the query
        rows, then padding; ``labels`` [B] likewise. Batch norms take no moment from the
        padding and the head sees exactly the unpadded embeddings."""
        with episode_norm(self.backbone, self.batch_norm, support, query):
            embedded = self.backbone(images)
        return self.packed_logits(embedded, labels, support, query, ways)

    def packed_logits(self, embedded: torch.Tensor, labels: torch.Tensor, support: int, query: int,
                      ways: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``packed``'s head on embeddings [B, D] of the bucketed layout (eager or compiled)."""
        return self._logits(embedded, labels[:support], support, query, ways), labels[support:support + query]

    @staticmethod
    def _logits(embedded: torch.Tensor, support_labels: torch.Tensor, support: int, query: int,
                ways: int) -> torch.Tensor:
        # distances in float32 even under autocast: bf16 differences of large squared norms lose the signal
        with torch.autocast(device_type=embedded.device.type, enabled=False):
            embedded = embedded.float()
            return prototype_logits(embedded[:support], support_labels, embedded[support:support + query], ways)


class LinearHead(nn.Module):
    """Classifier over the union of the training classes (the baseline's training head)."""

    def __init__(self, in_dim: int, num_classes: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_dim, num_classes)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.linear(features)


def parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
