"""Keras optimizers that take torch's steps, so both trainers update weights alike.

Keras' and torch's SGD and Adam share a name but not a definition:

- SGD with momentum: Keras keeps ``m = momentum * m - lr * g`` (the learning rate inside
  the buffer), torch ``b = momentum * b + g`` and steps ``-lr * b``. The two agree while
  the learning rate is constant and part ways as soon as it changes (a schedule), since
  Keras' buffer carries the old rates. Keras' ``weight_decay`` is decoupled (subtracted
  from the weights), torch's SGD adds ``weight_decay * w`` to the gradient.
- Adam: Keras adds ``epsilon`` to ``sqrt(v)`` before the bias correction (an epsilon-hat,
  default 1e-7), torch to ``sqrt(v_hat)`` after it (default 1e-8); they differ where the
  gradients are small.

``TorchAdam(decoupled=True)`` is ``torch.optim.AdamW``: the weights shrink by ``lr * wd`` before
the Adam step, and the gradient is left as it is.

``TorchSGD`` and ``TorchAdam`` are Keras optimizers (``apply_gradients``, distribution
strategies, ``tf.train.Checkpoint``) whose ``update_step`` is torch's (``torch.optim.SGD``
with dampening 0, not Nesterov; ``torch.optim.Adam`` without amsgrad), in float32 with
the bias corrections in float64 as torch computes them. Their slots are Keras' own
(``TorchAdam``: ``momentum`` and ``velocity`` per variable, Keras Adam's order), so a
checkpoint written with ``keras.optimizers.Adam`` restores into ``TorchAdam``: the two
keep the same moment estimates, only the step made from them differs.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

keras = tf.keras
ops = keras.ops


def _coupled_decay(gradient: Any, variable: Any, weight_decay: float) -> Any:
    """torch's ``weight_decay``: added to the gradient (``g + wd * w``)."""
    if not weight_decay:
        return gradient
    return ops.add(gradient, ops.multiply(variable, ops.cast(weight_decay, variable.dtype)))


class TorchSGD(keras.optimizers.Optimizer):
    """``torch.optim.SGD(lr, momentum, weight_decay)``: ``g += wd * w``; with momentum
    ``b = momentum * b + g`` (the first step ``b = g``: the buffer starts at zero) and
    ``w -= lr * b``; without, ``w -= lr * g``."""

    def __init__(self, learning_rate: Any = 0.01, momentum: float = 0.0, weight_decay: float = 0.0,
                 name: str = "torch_sgd", **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum: got {momentum}, expected a float in [0, 1)")
        if weight_decay < 0.0:
            raise ValueError(f"weight_decay: got {weight_decay}, expected a float >= 0")
        self.momentum = float(momentum)
        self.coupled_weight_decay = float(weight_decay)

    def build(self, variables: list[Any]) -> None:
        if self.built:
            return
        super().build(variables)
        self.momentums = self.add_optimizer_variables(variables, "momentum") if self.momentum else []

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        lr = ops.cast(learning_rate, variable.dtype)
        step = _coupled_decay(ops.cast(gradient, variable.dtype), variable, self.coupled_weight_decay)
        if self.momentum:
            buffer = self.momentums[self._get_variable_index(variable)]
            self.assign(buffer, ops.add(ops.multiply(buffer, ops.cast(self.momentum, variable.dtype)), step))
            step = buffer
        self.assign_sub(variable, ops.multiply(step, lr))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({"momentum": self.momentum, "weight_decay": self.coupled_weight_decay})
        return config


class TorchAdam(keras.optimizers.Optimizer):
    """``torch.optim.Adam(lr, betas, eps, weight_decay)``: ``g += wd * w``;
    ``m = beta_1 m + (1 - beta_1) g``, ``v = beta_2 v + (1 - beta_2) g^2``;
    ``w -= lr / (1 - beta_1^t) * m / (sqrt(v) / sqrt(1 - beta_2^t) + eps)``. With ``decoupled``,
    ``torch.optim.AdamW``: ``w *= 1 - lr * wd`` first, ``g`` unchanged."""

    def __init__(self, learning_rate: Any = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-8, weight_decay: float = 0.0, decoupled: bool = False,
                 name: str = "torch_adam", **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        for label, beta in (("beta_1", beta_1), ("beta_2", beta_2)):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"{label}: got {beta}, expected a float in [0, 1)")
        if epsilon < 0.0 or weight_decay < 0.0:
            raise ValueError(f"epsilon, weight_decay: got {epsilon}, {weight_decay}, expected floats >= 0")
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)
        self.coupled_weight_decay = 0.0 if decoupled else float(weight_decay)
        self.decoupled_weight_decay = float(weight_decay) if decoupled else 0.0

    def build(self, variables: list[Any]) -> None:
        if self.built:
            return
        super().build(variables)
        self._momentums, self._velocities = self.add_optimizer_variables(variables, ["momentum", "velocity"])

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        dtype = variable.dtype
        if self.decoupled_weight_decay:  # torch AdamW: param.mul_(1 - lr * weight_decay)
            self.assign(variable, ops.multiply(variable, ops.subtract(
                ops.cast(1.0, dtype), ops.multiply(ops.cast(learning_rate, dtype),
                                                   ops.cast(self.decoupled_weight_decay, dtype)))))
        gradient = _coupled_decay(ops.cast(gradient, dtype), variable, self.coupled_weight_decay)
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        # torch: exp_avg.lerp_(g, 1 - beta_1); exp_avg_sq.mul_(beta_2).addcmul_(g, g, value=1 - beta_2)
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), ops.cast(1.0 - self.beta_1, dtype)))
        self.assign(v, ops.add(ops.multiply(v, ops.cast(self.beta_2, dtype)),
                               ops.multiply(ops.multiply(gradient, ops.cast(1.0 - self.beta_2, dtype)), gradient)))
        # the bias corrections in float64, as torch computes them from its step count
        # (tf.constant: keras.ops.cast would round a Python float to float32 first)
        step = tf.cast(self.iterations + 1, tf.float64)
        correction_1 = 1.0 - tf.pow(tf.constant(self.beta_1, tf.float64), step)
        correction_2_sqrt = tf.sqrt(1.0 - tf.pow(tf.constant(self.beta_2, tf.float64), step))
        step_size = ops.cast(tf.cast(learning_rate, tf.float64) / correction_1, dtype)
        denominator = ops.add(ops.divide(ops.sqrt(v), ops.cast(correction_2_sqrt, dtype)),
                              ops.cast(self.epsilon, dtype))
        self.assign_sub(variable, ops.divide(ops.multiply(m, step_size), denominator))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon,
                       "weight_decay": self.coupled_weight_decay or self.decoupled_weight_decay,
                       "decoupled": bool(self.decoupled_weight_decay)})
        return config
