"""The layers every backbone of ours shares, in plain PyTorch: the batch norm that takes an
episode's own moments or counts a bucket's valid rows (``RowBatchNorm2d``; what each mode
computes: ``clients.batch_norm``; the bucketed layout: ``clients.buckets``) and global average
pooling. ``clients.torch.models`` and ``clients.torch.md_backbones`` build their backbones
from them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.autograd.function import once_differentiable

from clients.batch_norm import EPISODE_MOMENTS, check_batch_norm


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
    values = ((stop - start) * (x.shape[2] * x.shape[3])).to(x.dtype).clamp_min(1)  # no rows: zero moments, not NaN
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
    if isinstance(support, int) and isinstance(query, int):
        return _sliced_episode_batch_norm(x, mode, support, query, weight, bias, eps, running)
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


def _sliced_episode_batch_norm(x: torch.Tensor, mode: str, support: int, query: int, weight: torch.Tensor | None,
                               bias: torch.Tensor | None, eps: float,
                               running: tuple[torch.Tensor, torch.Tensor, float | torch.Tensor] | None) -> torch.Tensor:
    """``episode_batch_norm`` of int row counts (the eager step). On CUDA both modes run
    ``_GroupedMomentsNorm`` (the kernels of ``nn.SyncBatchNorm``). On CPU, ``md``:
    ``_SupportMomentsNorm``, native kernels on slices; ``transductive`` (RelationNet's,
    rarer): reductions over slices in float32 for half-precision inputs."""
    rows = support + query
    if x.is_cuda:
        return _grouped_moments_norm(x, _moment_groups(mode, support, query), weight, bias, eps, running)
    if mode == "md":
        out, mean, variance = _SupportMomentsNorm.apply(x, weight, bias, support, rows, eps)
    else:
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        mean, variance, _ = _moments(xf, 0, support)
        pieces = [_affine(xf[:support], mean, variance, weight, bias, eps)]
        if query:  # an empty query has no moments (NaN ones would reach weight's gradient through the scale)
            query_mean, query_variance, _ = _moments(xf, support, rows)
            pieces.append(_affine(xf[support:rows], query_mean, query_variance, weight, bias, eps))
        if rows < x.shape[0]:
            pieces.append(xf.new_zeros((x.shape[0] - rows, *x.shape[1:])))
        out = torch.cat(pieces).to(x.dtype)
    if running is not None:
        running_mean, running_var, factor = running
        count = support * (x.shape[2] * x.shape[3])
        with torch.no_grad():
            running_mean.mul_(1 - factor).add_(mean.detach() * factor)
            running_var.mul_(1 - factor).add_(variance.detach() * (count / max(count - 1, 1)) * factor)
    return out


def _moment_groups(mode: str, support: int, query: int) -> tuple[tuple[int, int, int], ...]:
    """(first row, end of the rows the moments come from, end of the rows they normalise) per
    set of moments: under ``md`` the support's normalise the support and the query; under
    ``transductive`` each set its own (a query of no rows has none)."""
    rows = support + query
    if mode == "md":
        return ((0, support, rows),)
    return ((0, support, support), (support, rows, rows)) if query else ((0, support, support),)


def _grouped_moments_norm(x: torch.Tensor, groups: tuple[tuple[int, int, int], ...], weight: torch.Tensor | None,
                          bias: torch.Tensor | None, eps: float,
                          running: tuple[torch.Tensor, torch.Tensor, float | torch.Tensor] | None) -> torch.Tensor:
    """``_GroupedMomentsNorm`` and the running statistics moved towards the first group's
    (the support's) moments, unbiased: one kernel (``batch_norm_gather_stats_with_counts``,
    SyncBatchNorm's update) for a float momentum, reductions for the cumulative average."""
    out, mean, invstd = _GroupedMomentsNorm.apply(x, weight, bias, groups, eps)
    if running is not None:
        running_mean, running_var, factor = running
        start, stop, _ = groups[0]
        count = (stop - start) * x.shape[2] * x.shape[3]
        with torch.no_grad():
            if isinstance(factor, float):
                counts = torch.full((1,), count, dtype=mean.dtype, device=x.device)
                torch.batch_norm_gather_stats_with_counts(x, mean.view(1, -1), invstd.view(1, -1), running_mean,
                                                          running_var, factor, eps, counts)
            else:
                variance = invstd.pow(-2) - eps
                running_mean.mul_(1 - factor).add_(mean * factor)
                running_var.mul_(1 - factor).add_(variance * (count / max(count - 1, 1)) * factor)
    return out


class _GroupedMomentsNorm(torch.autograd.Function):
    """An episode's batch norm on CUDA in the kernels ``nn.SyncBatchNorm`` runs, each reading
    x's dtype and memory format directly and accumulating in float32 for half-precision
    inputs: per group (``_moment_groups``) ``batch_norm_stats`` over the moment rows, then
    ``batch_norm_elemt`` over the rows they normalise, written straight into the output;
    padding rows are zeroed. Backward per group: ``batch_norm_backward_reduce`` over the
    normalised rows gives sum dy and sum dy (x - mean) (and the parameters' gradients);
    the moment rows' gradient, which also flows through the moments, is
    ``batch_norm_backward_elemt`` with the moment rows' count; the other rows' is
    w / sigma dy (``batch_norm_elemt`` with mean 0). Seven kernels a layer where
    ``_SupportMomentsNorm``'s float32 slices took about twenty. Not twice differentiable."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                groups: tuple[tuple[int, int, int], ...], eps: float) -> tuple[torch.Tensor, ...]:
        x = _dense(x)
        out = torch.empty_like(x)
        stats: list[torch.Tensor] = []
        for start, moments_stop, stop in groups:
            mean, invstd = torch.batch_norm_stats(x[start:moments_stop], eps)
            torch.batch_norm_elemt(x[start:stop], weight, bias, mean, invstd, eps, out=out[start:stop])
            stats += [mean, invstd]
        end = groups[-1][2]
        if end < x.shape[0]:
            out[end:].zero_()
        ctx.save_for_backward(x, weight, *stats)
        ctx.groups = groups
        ctx.mark_non_differentiable(*stats)
        return out, stats[0], stats[1]

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: torch.Tensor, _mean: torch.Tensor, _invstd: torch.Tensor) -> tuple[Any, ...]:
        x, weight, *stats = ctx.saved_tensors
        layout = torch.channels_last if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous() \
            else torch.contiguous_format
        dy = grad_out.contiguous(memory_format=layout)
        needs = ctx.needs_input_grad
        weight_g, bias_g = bool(needs[1] and weight is not None), bool(needs[2])
        grad_x = torch.empty_like(x)
        grad_weight = grad_bias = None
        for index, (start, moments_stop, stop) in enumerate(ctx.groups):
            mean, invstd = stats[2 * index], stats[2 * index + 1]
            sum_dy, sum_dy_xmu, group_weight, group_bias = torch.batch_norm_backward_reduce(
                dy[start:stop], x[start:stop], mean, invstd, weight, True, weight_g, bias_g)
            count = torch.full((1,), (moments_stop - start) * x.shape[2] * x.shape[3], dtype=torch.int32,
                               device=x.device)
            torch.ops.aten.batch_norm_backward_elemt.out(dy[start:moments_stop], x[start:moments_stop], mean, invstd,
                                                         weight, sum_dy, sum_dy_xmu, count,
                                                         out=grad_x[start:moments_stop])
            if stop > moments_stop:
                torch.batch_norm_elemt(dy[moments_stop:stop], weight, None, torch.zeros_like(mean), invstd, 0.0,
                                       out=grad_x[moments_stop:stop])
            if weight_g:
                grad_weight = group_weight if grad_weight is None else grad_weight + group_weight
            if bias_g:
                grad_bias = group_bias if grad_bias is None else grad_bias + group_bias
        end = ctx.groups[-1][2]
        if end < x.shape[0]:
            grad_x[end:].zero_()
        return grad_x, grad_weight, grad_bias, None, None


class _SupportMomentsNorm(torch.autograd.Function):
    """Meta-Dataset's batch norm of one episode in native kernels: the support rows' mean and
    biased variance (float32 for half-precision inputs) normalise the support and query rows,
    padding rows come out as zeros. Forward: ``var_mean`` of the support slice, then
    ``F.batch_norm`` in inference mode with those moments (one fused pass, x's dtype and memory
    format). Backward: the inference-mode batch-norm backward gives the query rows' gradient
    (w / sigma dy) and the sums the moments need (sum dy, sum dy x-hat over the valid rows);
    the support rows' gradient, which also flows through the moments, is
    w / sigma (dy - (sum dy + x-hat sum dy x-hat) / n), n the support's values per channel,
    computed in float32 and rounded once (a sum of separately rounded bf16 terms cancels
    badly). Not twice differentiable."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, support: int,
                rows: int, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = _dense(x)
        half = x.dtype in (torch.float16, torch.bfloat16)
        variance, mean = torch.var_mean(x[:support].float() if half else x[:support], dim=(0, 2, 3), unbiased=False)
        out = F.batch_norm(x, mean, variance, weight, bias, False, 0.0, eps)
        if rows < x.shape[0]:
            out[rows:] = 0.0
        ctx.save_for_backward(x, weight, mean, variance)
        ctx.support, ctx.rows, ctx.eps = support, rows, eps
        ctx.mark_non_differentiable(mean, variance)
        return out, mean, variance

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: torch.Tensor, _mean: torch.Tensor, _variance: torch.Tensor) -> tuple[Any, ...]:
        x, weight, mean, variance = ctx.saved_tensors
        support, rows, eps = ctx.support, ctx.rows, ctx.eps
        invstd = torch.rsqrt(variance + eps)
        grad_valid, grad_weight, grad_bias = torch.ops.aten.native_batch_norm_backward(
            grad_out[:rows], x[:rows], weight, mean, variance, mean, invstd, False, eps, [True, True, True])
        # grad_weight = sum dy x-hat and grad_bias = sum dy over the valid rows (with no weight, their sums too)
        wide = mean.dtype  # float32 for half-precision inputs, else x's own
        sum_dy = grad_bias if grad_bias is not None else grad_out[:rows].to(wide).sum((0, 2, 3))
        sum_dy_xhat = grad_weight if grad_weight is not None else (
            grad_out[:rows].to(wide) * (x[:rows].to(wide) - mean.view(1, -1, 1, 1)) * invstd.view(1, -1, 1, 1)).sum(
                (0, 2, 3))
        values = support * x.shape[2] * x.shape[3]
        scale = invstd * (weight.to(wide) if weight is not None else 1.0)
        xhat = (x[:support].to(wide) - mean.view(1, -1, 1, 1)) * invstd.view(1, -1, 1, 1)
        support_grad = (grad_out[:support].to(wide) - (sum_dy.view(1, -1, 1, 1) + xhat * sum_dy_xhat.view(1, -1, 1, 1))
                        / values) * scale.view(1, -1, 1, 1)
        grad_x = torch.empty_like(x)
        grad_x[:support] = support_grad
        grad_x[support:rows] = grad_valid[support:]
        grad_x[rows:] = 0.0
        needs = ctx.needs_input_grad
        return (grad_x, grad_weight if needs[1] else None, grad_bias if needs[2] else None, None, None, None)


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


def global_average(x: torch.Tensor) -> torch.Tensor:
    """[N, C, H, W] -> [N, C]: a mean over the spatial axes, not ``adaptive_avg_pool2d``,
    whose CUDA backward has no deterministic kernel (``--deterministic on`` refuses it)."""
    return x.mean((2, 3))


class GlobalAverage(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return global_average(x)
