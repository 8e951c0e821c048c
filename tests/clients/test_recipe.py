"""Meta-Dataset's training recipe in both trainers (``clients.recipe``): the staircase
learning-rate decay is TensorFlow's ``exponential_decay(staircase=True)`` of this run's update
count (a resume continues it), the weight decay is Keras' ``L2`` regulariser of the kernels
added to the loss (no batch-norm parameter, no bias: its gradient is 2 W w on kernels and
nothing elsewhere), and ``--init-from`` starts the backbone, and only it, from a trainer
checkpoint of the same framework, a checkpoint of the run itself taking precedence."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import tensorflow as tf
import torch

from clients.errors import UsageError  # noqa: E402
from clients.protocols.md import EpisodeArrays  # noqa: E402
from clients.recipe import decayed, learning_rate  # noqa: E402
from clients.tf.md_train import TFFramework  # noqa: E402
from clients.torch.md_train import TorchFramework  # noqa: E402
from clients.trainer_args import parse_args  # noqa: E402

ARGV = ["--server", "127.0.0.1:1", "--run", "recipe", "--sources", "a", "--backbone", "conv4", "--image-size", "16",
        "--device", "cpu", "--init-seed", "3", "--threads", "1"]


@given(st.floats(1e-5, 1.0), st.integers(0, 100_000), st.integers(1, 10_000), st.floats(0.01, 1.0))
@example(lr=0.75, update=734, every=1, rate=0.99999)  # CI: 1e-5 apart while the rate was float64's
def test_the_staircase_is_tensorflows_exponential_decay(lr, update, every, rate):
    reference = tf.compat.v1.train.exponential_decay(lr, update, every, rate, staircase=True)
    reference = float(reference() if callable(reference) else reference)  # eager: a function of the step
    assert learning_rate(lr, update, every, rate) == pytest.approx(reference, rel=1e-6, abs=1e-12)  # float32 pow: 1.3e-7 at worst in 3,000 draws
    assert learning_rate(lr, update, 0, rate) == lr  # --decay-every 0: constant, MD's default


def test_the_penalty_is_keras_l2_of_the_kernels_only():
    kernel = np.random.RandomState(0).standard_normal((3, 3, 2, 4)).astype(np.float32)
    assert float(tf.keras.regularizers.L2(0.25)(kernel)) == pytest.approx(0.25 * float((kernel ** 2).sum()), rel=1e-6)
    assert decayed((4, 2, 3, 3)) and decayed((10, 64)) and not decayed((64,)) and not decayed(())


def _episode(rows: int = 12, ways: int = 3) -> EpisodeArrays:
    rng = np.random.RandomState(1)
    images = rng.randint(0, 256, (rows, 16, 16, 3)).astype(np.uint8)
    labels = (np.arange(rows) % ways).astype(np.int64)
    half = rows // 2
    return EpisodeArrays(source="a", split="train", seed=0, index=0, fingerprint="", class_ids=tuple(range(ways)),
                         class_names=tuple("abc"[:ways]), support_images=images[:half], support_labels=labels[:half],
                         query_images=images[half:], query_labels=labels[half:],
                         support_record_ids=tuple(range(half)), query_record_ids=tuple(range(half, rows)),
                         image_size=16, resize="")


def _torch_gradients(*extra: str, update: int = 0) -> tuple[TorchFramework, dict[str, torch.Tensor]]:
    framework = TorchFramework(parse_args("torch", [*ARGV, *extra]))
    framework.build(0)
    framework._draw_index = update  # the update this step is (one process)
    captured: dict[str, torch.Tensor] = {}
    step = framework.optimizer.step

    def recording(*args, **kwargs):
        captured.update({name: p.grad.clone() for name, p in framework.backbone.named_parameters()})
        return step(*args, **kwargs)

    framework.optimizer.step = recording
    framework.train_step(_episode())
    return framework, captured


def test_torch_weight_decay_adds_2w_w_to_kernel_gradients_only_and_the_rate_decays():
    initial = TorchFramework(parse_args("torch", ARGV))
    initial.build(0)
    weights = {name: p.detach().clone() for name, p in initial.backbone.named_parameters()}
    _, plain = _torch_gradients()
    framework, regularised = _torch_gradients("--weight-decay", "0.25", "--decay-every", "4", "--decay-rate", "0.5",
                                              update=9)
    for name, gradient in plain.items():
        expected = gradient + (2 * 0.25 * weights[name] if weights[name].ndim >= 2 else 0.0)
        assert torch.allclose(regularised[name], expected, rtol=1e-5, atol=1e-6), name
    assert framework.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 * 0.5 ** 2)  # update 9 of every 4


def test_tf_weight_decay_and_rate_are_the_recipes():
    framework = TFFramework(parse_args("tf", [*ARGV, "--weight-decay", "0.25", "--decay-every", "4",
                                              "--decay-rate", "0.5"]))
    framework.build(0)
    kernels = [v for v in framework.trainable if len(v.shape) >= 2]
    assert kernels and len(kernels) < len(framework.trainable)  # batch norms' gamma and beta are left out
    expected = 0.25 * sum(float(tf.reduce_sum(tf.square(v))) for v in kernels)
    assert float(framework._regularised(tf.constant(1.0))) == pytest.approx(1.0 + expected, rel=1e-5)
    framework.optimizer.iterations.assign(9)
    assert float(framework.optimizer.learning_rate) == pytest.approx(learning_rate(1e-3, 9, 4, 0.5), rel=1e-6)


@pytest.mark.parametrize("optimizer", ["sgd", "momentum"])
def test_both_frameworks_take_the_same_steps_with_each_optimizer(optimizer):
    """Three steps on one episode from the same --init-seed: the second loss shows the first
    update, the third the momentum buffer; torch's optimizer is the one named."""
    argv = [*ARGV, "--optimizer", optimizer, "--lr", "0.05"]
    losses = {}
    for name, framework in (("torch", TorchFramework(parse_args("torch", argv))),
                            ("tf", TFFramework(parse_args("tf", argv)))):
        framework.build(0)
        losses[name] = [framework.to_floats([framework.train_step(framework.stage(_episode()))[0]])[0]
                        for _ in range(3)]
        if name == "torch":
            assert type(framework.optimizer) is torch.optim.SGD
            assert framework.optimizer.param_groups[0]["momentum"] == (0.9 if optimizer == "momentum" else 0.0)
    assert losses["torch"] == pytest.approx(losses["tf"], rel=1e-4), losses
    assert len(set(losses["torch"])) == 3  # each step moved the weights


def test_init_from_restores_the_backbone_only_and_refuses_what_is_not_a_checkpoint(tmp_path):
    # torch: a checkpoint of another seed's weights becomes the backbone; the head and optimizer stay fresh
    donor = TorchFramework(parse_args("torch", [*ARGV, "--init-seed", "5", "--checkpoint-dir", str(tmp_path / "t")]))
    donor.build(0)
    donor.save(8, {})
    taker = TorchFramework(parse_args("torch", [*ARGV, "--init-from", str(tmp_path / "t")]))
    taker.build(0)
    assert all(torch.equal(a, b) for a, b in zip(donor.backbone.state_dict().values(),
                                                  taker.backbone.state_dict().values()))
    assert not taker.optimizer.state
    with pytest.raises(UsageError, match="argument --init-from: .* is neither a torch trainer checkpoint nor"):
        TorchFramework(parse_args("torch", [*ARGV, "--init-from", str(tmp_path / "none")])).build(0)
    other = TorchFramework(parse_args("torch", [*ARGV, "--backbone", "resnet18", "--init-from", str(tmp_path / "t")]))
    with pytest.raises(UsageError, match="holds another backbone than --backbone resnet18"):
        other.build(0)
    # tf: the same from a tf trainer checkpoint directory
    tf_donor = TFFramework(parse_args("tf", [*ARGV, "--init-seed", "5", "--checkpoint-dir", str(tmp_path / "f")]))
    tf_donor.build(0)
    tf_donor.save(8, {})
    tf_taker = TFFramework(parse_args("tf", [*ARGV, "--init-from", str(tmp_path / "f")]))
    tf_taker.build(0)
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(tf_donor.backbone.variables,
                                                                    tf_taker.backbone.variables))
    assert int(tf_taker.optimizer.iterations) == 0
    with pytest.raises(UsageError, match="argument --init-from: .* is neither a tf trainer checkpoint nor"):
        TFFramework(parse_args("tf", [*ARGV, "--init-from", str(tmp_path / "none")])).build(0)
