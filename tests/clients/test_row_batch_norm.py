"""``RowBatchNorm2d`` with ``valid_rows`` set equals the reference it replaced: batch norm
of ``x[:rows]`` then ``torch.cat`` with zeros. Outputs, input gradients, weight and bias
gradients, running statistics and ``num_batches_tracked`` agree over random row counts,
shapes and steps (float32 bitwise here, at most 1e-6 apart allowed), for contiguous and
channels_last inputs, momentum and cumulative averaging, with and without affine
parameters and running statistics; the output keeps the input's layout; gradcheck passes
in float64; the forward writes no full-size copy (no cat); bad row counts are refused."""

from __future__ import annotations

import copy

import pytest

import torch

from torch import nn  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from clients.torch.models import RowBatchNorm2d, row_batch_norm, valid_rows  # noqa: E402

FORMATS = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}


pytestmark = pytest.mark.usefixtures("torch_one_thread")  # conftest: one torch thread per test


def _reference(norm: nn.BatchNorm2d, x: torch.Tensor, rows: int) -> torch.Tensor:
    """The former ``RowBatchNorm2d.forward``: the slice IS the unpadded batch."""
    valid = nn.BatchNorm2d.forward(norm, x[:rows])
    return torch.cat([valid, torch.zeros_like(x[rows:], dtype=valid.dtype)], 0)


def _close(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and torch.allclose(a, b, rtol=0, atol=1e-6)


def _norm(channels: int, generator: torch.Generator, **options) -> RowBatchNorm2d:
    norm = RowBatchNorm2d(channels, **options)
    if norm.affine:
        with torch.no_grad():
            norm.weight.copy_(torch.randn(channels, generator=generator))
            norm.bias.copy_(torch.randn(channels, generator=generator))
    return norm


@pytest.mark.parametrize("layout", FORMATS)
@pytest.mark.parametrize("options", [{}, {"momentum": None}, {"affine": False}, {"track_running_stats": False},
                                     {"momentum": 0.3, "eps": 1e-3}], ids=str)
def test_equals_the_cat_reference(layout: str, options: dict):
    generator = torch.Generator().manual_seed(13)
    for trial in range(4):
        channels = int(torch.randint(1, 6, (1,), generator=generator))
        batch = int(torch.randint(3, 12, (1,), generator=generator))
        height, width = (int(v) for v in torch.randint(1, 6, (2,), generator=generator))
        norm = _norm(channels, generator, **options)
        reference = copy.deepcopy(norm)
        for _ in range(3):  # running statistics and the cumulative average over steps
            rows = int(torch.randint(1, batch, (1,), generator=generator))
            rows = max(rows, 2) if height * width == 1 else rows  # one value per channel is refused by both
            x = torch.randn(batch, channels, height, width, generator=generator)
            x = x.contiguous(memory_format=FORMATS[layout])
            x_row, x_ref = x.clone().requires_grad_(), x.clone().requires_grad_()
            upstream = torch.randn(x.shape, generator=generator)

            with valid_rows(norm, rows):
                out = norm(x_row)
            expected = _reference(reference, x_ref, rows)
            (out * upstream).sum().backward()
            (expected * upstream).sum().backward()

            case = f"trial {trial} rows {rows} of {tuple(x.shape)}"
            assert _close(out, expected), case
            assert out.stride() == x.stride(), case  # the input's layout, channels_last kept
            assert torch.count_nonzero(out[rows:]) == 0 and torch.count_nonzero(x_row.grad[rows:]) == 0, case
            assert _close(x_row.grad, x_ref.grad), case
            for (name, a), b in zip(norm.named_parameters(), reference.parameters(), strict=True):
                assert _close(a.grad, b.grad), (case, name)
            for (name, a), b in zip(norm.named_buffers(), reference.buffers(), strict=True):
                assert torch.equal(a, b) if name == "num_batches_tracked" else _close(a, b), (case, name)
            norm.zero_grad(set_to_none=True)
            reference.zero_grad(set_to_none=True)
        if norm.track_running_stats:
            assert int(norm.num_batches_tracked) == 3


def test_bf16_input_with_float32_parameters_as_under_autocast():
    generator = torch.Generator().manual_seed(5)
    norm = _norm(6, generator)
    reference = copy.deepcopy(norm)
    x = torch.randn(10, 6, 4, 4, generator=generator).bfloat16().contiguous(memory_format=torch.channels_last)
    x_row, x_ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    upstream = torch.randn(x.shape, generator=generator)
    with valid_rows(norm, 7):
        out = norm(x_row)
    expected = _reference(reference, x_ref, 7)
    (out.float() * upstream).sum().backward()
    (expected.float() * upstream).sum().backward()
    assert out.dtype == expected.dtype == torch.bfloat16
    assert x_row.grad.dtype == torch.bfloat16 and norm.weight.grad.dtype == torch.float32
    assert torch.equal(out, expected) and torch.equal(x_row.grad, x_ref.grad)
    assert torch.allclose(norm.weight.grad, reference.weight.grad, rtol=0, atol=1e-6)
    assert torch.allclose(norm.running_var, reference.running_var, rtol=0, atol=1e-6)


def test_gradient_layout_differs_from_the_input():
    """A downstream op may hand back a contiguous gradient for a channels_last output."""
    generator = torch.Generator().manual_seed(7)
    norm = _norm(3, generator)
    reference = copy.deepcopy(norm)
    x = torch.randn(6, 3, 3, 5, generator=generator).contiguous(memory_format=torch.channels_last)
    x_row, x_ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    upstream = torch.randn(x.shape, generator=generator)
    with valid_rows(norm, 4):
        (norm(x_row).contiguous() * upstream).sum().backward()
    (_reference(reference, x_ref, 4).contiguous() * upstream).sum().backward()
    assert _close(x_row.grad, x_ref.grad) and _close(norm.weight.grad, reference.weight.grad)


def test_non_dense_input():
    generator = torch.Generator().manual_seed(8)
    norm = _norm(4, generator)
    reference = copy.deepcopy(norm)
    x = torch.randn(7, 4, 5, 10, generator=generator)[..., ::2]  # neither contiguous nor channels_last
    with valid_rows(norm, 5):
        out = norm(x)
    assert _close(out, _reference(reference, x, 5))


def test_gradcheck_float64():
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(4, 3, 2, 2, generator=generator, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(3, generator=generator, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(3, generator=generator, dtype=torch.float64, requires_grad=True)
    for layout in FORMATS.values():
        x_layout = x.detach().contiguous(memory_format=layout).requires_grad_()
        assert torch.autograd.gradcheck(lambda x, w, b: row_batch_norm(x, 3, None, None, w, b, 0.1, 1e-5),
                                        (x_layout, weight, bias))
    assert torch.autograd.gradcheck(lambda x: row_batch_norm(x, 2, None, None, None, None, 0.1, 1e-5), (x,))


def test_plain_batch_norm_when_every_row_counts_or_in_evaluation():
    generator = torch.Generator().manual_seed(4)
    norm = _norm(3, generator)
    plain = nn.BatchNorm2d(3)
    plain.load_state_dict(norm.state_dict())
    x = torch.randn(6, 3, 2, 2, generator=generator)
    for rows in (None, 6, 9):
        with valid_rows(norm, rows):
            assert torch.equal(norm(x), plain(x))
    norm.eval(), plain.eval()
    with valid_rows(norm, 2):
        assert torch.equal(norm(x), plain(x))
    assert all(torch.equal(a, b) for a, b in zip(norm.buffers(), plain.buffers(), strict=True))


class _Ops(TorchDispatchMode):
    """Records each aten call with the shapes of the tensors it returns."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, list[tuple[int, ...]]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        outputs = result if isinstance(result, (tuple, list)) else (result,)
        self.calls.append((str(func), [tuple(t.shape) for t in outputs if isinstance(t, torch.Tensor)]))
        return result


def test_no_full_size_copy():
    """The point of the op: the forward writes the valid rows in place (no cat, no
    full-size zeros); the backward copies the valid rows' gradient once."""
    norm = RowBatchNorm2d(4)
    x = torch.randn(10, 4, 3, 3, requires_grad=True)
    with _Ops() as ops, valid_rows(norm, 7):
        out = norm(x)
    names = [name for name, _ in ops.calls]
    assert "aten.native_batch_norm.out" in names
    assert not any(name.startswith(("aten.cat", "aten.zeros", "aten.copy_")) for name in names), names
    with _Ops() as ops:
        out.sum().backward()
    copies = [shapes for name, shapes in ops.calls if name.startswith("aten.copy_")]
    assert copies == [[(7, 4, 3, 3)]], ops.calls
    assert not any(name.startswith(("aten.cat", "aten.zeros", "aten.slice_backward")) for name, _ in ops.calls)


@pytest.mark.parametrize(("rows", "shape", "words"), [(0, (4, 2, 3, 3), "positive"),
                                                      (1, (4, 2, 1, 1), "more than 1 value per channel")])
def test_bad_rows_are_refused(rows: int, shape: tuple[int, ...], words: str):
    norm = RowBatchNorm2d(shape[1])
    with valid_rows(norm, rows), pytest.raises(ValueError, match=f"valid_rows: got {rows}.*{words}"):
        norm(torch.randn(shape))
