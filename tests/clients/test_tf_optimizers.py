"""The TensorFlow trainers' optimizers take torch's steps: step by step against
``torch.optim`` on the same initial weights and gradient sequence, across learning-rate
changes (where Keras' SGD momentum parts from torch's) and tiny gradients (where Keras'
Adam epsilon-hat parts from torch's eps), to float32 rounding; Keras' own SGD and Adam
fail the same comparison. The optimizers the MD trainer and the transfer learner build
are checked themselves, and a checkpoint written with Keras' Adam restores into ours."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import tensorflow as tf
import torch

from clients.tf.optimizers import TorchAdam, TorchSGD  # noqa: E402

keras = tf.keras
STEPS = 20
# a schedule that changes the rate every 5 steps, up and down
LRS = [0.1] * 5 + [0.02] * 5 + [0.3] * 5 + [0.005] * 5
SHAPES = {"kernel": (4, 3), "bias": (3,)}


def _problem(seed: int = 0) -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    """Initial weights and ``STEPS`` gradients, their scale from 1 down to 1e-6 and back."""
    rng = np.random.RandomState(seed)
    initial = {name: rng.normal(size=shape).astype(np.float32) for name, shape in SHAPES.items()}
    scales = [10.0 ** -(step % 7) for step in range(STEPS)]
    gradients = [{name: (rng.normal(size=shape) * scale).astype(np.float32) for name, shape in SHAPES.items()}
                 for scale in scales]
    return initial, gradients


def _torch_trajectory(make: Callable[[list[Any]], Any], initial: dict[str, np.ndarray],
                      gradients: list[dict[str, np.ndarray]], lrs: list[float]) -> list[dict[str, np.ndarray]]:
    params = {name: torch.nn.Parameter(torch.tensor(value)) for name, value in initial.items()}
    optimizer = make(list(params.values()))
    trajectory = []
    for gradient, lr in zip(gradients, lrs, strict=True):
        for group in optimizer.param_groups:
            group["lr"] = lr
        for name, param in params.items():
            param.grad = torch.tensor(gradient[name])
        optimizer.step()
        trajectory.append({name: param.detach().numpy().copy() for name, param in params.items()})
    return trajectory


def _keras_trajectory(optimizer: Any, initial: dict[str, np.ndarray], gradients: list[dict[str, np.ndarray]],
                      lrs: list[float]) -> list[dict[str, np.ndarray]]:
    variables = {name: keras.Variable(value, name=name) for name, value in initial.items()}
    trajectory = []
    for gradient, lr in zip(gradients, lrs, strict=True):
        optimizer.learning_rate.assign(lr)  # as the transfer learner sets its schedule's rate
        optimizer.apply_gradients([(tf.constant(gradient[name]), variables[name]) for name in variables])
        trajectory.append({name: variable.numpy().copy() for name, variable in variables.items()})
    return trajectory


def _assert_same_steps(keras_optimizer: Any, torch_make: Callable[[list[Any]], Any], lrs: list[float] = LRS) -> None:
    initial, gradients = _problem()
    ours = _keras_trajectory(keras_optimizer, initial, gradients, lrs)
    reference = _torch_trajectory(torch_make, initial, gradients, lrs)
    for step, (mine, theirs) in enumerate(zip(ours, reference, strict=True)):
        for name in SHAPES:
            np.testing.assert_allclose(mine[name], theirs[name], rtol=1e-6, atol=1e-7,
                                       err_msg=f"{type(keras_optimizer).__name__} step {step + 1} {name}")


def test_torch_sgd_takes_torchs_momentum_steps_across_learning_rate_changes():
    _assert_same_steps(TorchSGD(learning_rate=LRS[0], momentum=0.9),
                       lambda params: torch.optim.SGD(params, lr=LRS[0], momentum=0.9))
    _assert_same_steps(TorchSGD(learning_rate=LRS[0], momentum=0.9, weight_decay=1e-2),
                       lambda params: torch.optim.SGD(params, lr=LRS[0], momentum=0.9, weight_decay=1e-2))
    _assert_same_steps(TorchSGD(learning_rate=LRS[0]), lambda params: torch.optim.SGD(params, lr=LRS[0]))


def test_torch_adam_takes_torchs_steps_with_tiny_gradients_and_rate_changes():
    _assert_same_steps(TorchAdam(learning_rate=LRS[0]), lambda params: torch.optim.Adam(params, lr=LRS[0]))
    _assert_same_steps(TorchAdam(learning_rate=LRS[0], beta_1=0.5, beta_2=0.99, epsilon=1e-6, weight_decay=1e-3),
                       lambda params: torch.optim.Adam(params, lr=LRS[0], betas=(0.5, 0.99), eps=1e-6,
                                                       weight_decay=1e-3))


def test_decoupled_torch_adam_takes_torch_adamws_steps():
    _assert_same_steps(TorchAdam(learning_rate=LRS[0], weight_decay=1e-2, decoupled=True),
                       lambda params: torch.optim.AdamW(params, lr=LRS[0], weight_decay=1e-2))


def test_keras_sgd_and_adam_fail_the_same_comparison():
    """The comparison sees the difference the Torch* optimizers remove."""
    sgd = lambda params: torch.optim.SGD(params, lr=LRS[0], momentum=0.9)  # noqa: E731
    with pytest.raises(AssertionError, match="SGD step 6"):  # steps 1-5 agree; 6 is the first at a new rate
        _assert_same_steps(keras.optimizers.SGD(learning_rate=LRS[0], momentum=0.9), sgd)
    with pytest.raises(AssertionError, match="Adam step"):
        _assert_same_steps(keras.optimizers.Adam(learning_rate=LRS[0], epsilon=1e-8),
                           lambda params: torch.optim.Adam(params, lr=LRS[0]))


def _fresh(optimizer: Any) -> Any:
    """A new optimizer of the trainer's class and settings (no state)."""
    return type(optimizer).from_config(optimizer.get_config())


def test_the_md_trainers_optimizer_is_torchs_adam():
    from clients.tf.md_train import TFFramework
    from clients.trainer_args import parse_args

    args = parse_args("tf", ["--server", "h:1", "--run", "r", "--sources", "a", "--image-size", "16",
                             "--device", "cpu", "--lr", "0.05"])
    framework = TFFramework(args)
    framework.build(0)
    _assert_same_steps(_fresh(framework.optimizer), lambda params: torch.optim.Adam(params, lr=args.lr),
                       lrs=[args.lr] * STEPS)


def test_the_transfer_learners_optimizer_is_torchs_sgd_with_momentum():
    from clients.tf.vtab_transfer import TFTransferLearner
    from clients.trainer_args import parse_transfer_args
    from clients.vtab_transfer_protocols import MOMENTUM

    args = parse_transfer_args("tf", ["--server", "h:1", "--run", "r", "--tasks", "kitti_distance", "--backbone",
                                      "conv4", "--image-size", "16", "--device", "cpu", "--mode", "linear"])
    learner = TFTransferLearner(args)
    learner.reset(3, 0)
    _assert_same_steps(_fresh(learner.optimizer),
                       lambda params: torch.optim.SGD(params, lr=LRS[0], momentum=MOMENTUM))


def test_the_control_baselines_transfer_optimizer_is_torchs_adamw():
    """The control-baselines reference's AdamW (lr 1e-4, weight decay 1e-4, torch's betas and eps)."""
    from clients.tf.vtab_transfer import TFTransferLearner
    from clients.trainer_args import parse_transfer_args

    args = parse_transfer_args("tf", ["--server", "h:1", "--run", "r", "--tasks", "kitti_distance", "--backbone",
                                      "tiny", "--image-size", "16", "--device", "cpu",
                                      "--protocol", "control-baselines"])
    assert (args.optimizer, args.lrs, args.weight_decay) == ("adamw", [1e-4], 1e-4)
    learner = TFTransferLearner(args)
    learner.reset(3, 0)
    _assert_same_steps(_fresh(learner.optimizer),
                       lambda params: torch.optim.AdamW(params, lr=LRS[0], weight_decay=1e-4))


def test_a_keras_adam_checkpoint_restores_into_torch_adam(tmp_path):
    def model() -> Any:
        return keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])

    old, old_optimizer = model(), keras.optimizers.Adam(1e-2)
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(old(tf.ones((4, 3))) ** 2)
        old_optimizer.apply_gradients(zip(tape.gradient(loss, old.trainable_variables), old.trainable_variables))
    path = tf.train.Checkpoint(model=old, optimizer=old_optimizer).save(str(tmp_path / "ckpt"))

    new, new_optimizer = model(), TorchAdam(1e-2)
    new_optimizer.build(new.trainable_variables)
    tf.train.Checkpoint(model=new, optimizer=new_optimizer).restore(path).assert_existing_objects_matched()
    assert int(new_optimizer.iterations.numpy()) == 3
    assert len(new_optimizer.variables) == len(old_optimizer.variables)
    for mine, theirs in zip(new_optimizer.variables, old_optimizer.variables, strict=True):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
