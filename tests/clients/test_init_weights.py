"""Framework-neutral initial weights (``clients.init_weights``): a pure function of the seed,
in torch's layout, loaded by both frameworks (``--init-seed``, ``--weights FILE.npz``), and
our named backbones compute the same function in torch and tf from them: in evaluation and
in training mode (batch statistics), the moving statistics updated alike."""

from __future__ import annotations

import numpy as np
import pytest

import torch
import tensorflow as tf

from clients import init_weights  # noqa: E402
from clients.determinism import weights_sha256  # noqa: E402
from clients.errors import UsageError  # noqa: E402
from clients.init_weights import layout, neutral_weights, read_npz, write_npz  # noqa: E402
from clients.tf import backbones as tf_backbones  # noqa: E402
from clients.tf import models as tf_models  # noqa: E402
from clients.torch import backbones as torch_backbones  # noqa: E402
from clients.torch import models as torch_models  # noqa: E402
from clients.trainer_args import parse_args  # noqa: E402

# sizes where the ResNets' strided layers see even sides, where Keras "same" would pad (0, 1) or (2, 3)
# (md-resnet18 resizes to 33 first; md-wrn pads its strided layers as Keras "same" does, (0, 1) at 32)
SIZES = {"conv4": 32, "resnet18": 32, "resnet50": 40, "tiny": 32, "md-conv4": 32, "md-resnet18": 32, "md-wrn": 32,
         "md-relationnet-convnet": 32}
# (seed 0) pinned: a change of names, order, distributions or generator fails here loudly
GOLDEN = {"conv4": "8cbf12428cccc06932d5a4952c7245a49a603aa289bb520618eac65854a4e5bb"}


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """One torch thread: ``make test`` runs two test processes on two cores, and on these small
    batches a second thread only spins waiting for a core (a ResNet-50 forward took 4 times the
    CPU time of one thread)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _argv(framework: str, backbone: str, *extra: str) -> list[str]:
    return ["--server", "h:1", "--run", "r", "--sources", "a", "--device", "cpu", "--backbone", backbone,
            "--image-size", str(SIZES.get(backbone, 32)), *extra]


def _torch_model(backbone: str, weights: dict[str, np.ndarray]) -> torch.nn.Module:
    model = torch_models.build_backbone(backbone, SIZES[backbone])
    model.load_state_dict({name: torch.from_numpy(value) for name, value in weights.items()})
    return model


def _tf_model(backbone: str, weights: dict[str, np.ndarray]):
    model = tf_models.build_backbone(backbone, SIZES[backbone])
    tf_backbones.assign_neutral(model, backbone, SIZES[backbone], weights, "test")
    return model


def _as_torch_features(backbone: str, tf_output: np.ndarray, torch_output: np.ndarray) -> np.ndarray:
    """tf's flattened maps (conv4, md-conv4, md-relationnet-convnet) are (H, W, C), torch's (C, H,
    W): the same features, reordered."""
    if backbone not in ("conv4", "md-conv4", "md-relationnet-convnet"):
        return tf_output
    rows, side = len(tf_output), int(round((torch_output.shape[1] / 64) ** 0.5))
    return tf_output.reshape(rows, side, side, 64).transpose(0, 3, 1, 2).reshape(rows, -1)


# ---- the weights --------------------------------------------------------------------------------


def test_neutral_weights_are_a_function_of_the_seed_and_pinned():
    first, again, other = (neutral_weights("conv4", 84, seed) for seed in (0, 0, 1))
    assert weights_sha256(first.items()) == weights_sha256(again.items())
    assert weights_sha256(first.items()) != weights_sha256(other.items())
    assert weights_sha256(first.items()) == GOLDEN["conv4"]
    # a tensor depends on (seed, name) alone: the same at another side and in no other tensor
    assert all(np.array_equal(first[name], value) for name, value in neutral_weights("conv4", 32, 0).items())
    assert not np.array_equal(first["features.4.weight"][:, :3], first["features.0.weight"])


def test_distributions_are_torch_defaults_and_he_normal():
    conv4 = neutral_weights("conv4", 84, 0)
    bound = 1 / np.sqrt(64 * 9)
    weight = conv4["features.4.weight"]
    assert weight.dtype == np.float32 and np.abs(weight).max() <= bound and np.abs(weight).max() > 0.99 * bound
    assert np.array_equal(conv4["features.1.weight"], np.ones(64, np.float32))
    assert np.array_equal(conv4["features.1.running_var"], np.ones(64, np.float32))
    assert not conv4["features.1.bias"].any() and not conv4["features.1.running_mean"].any()
    assert conv4["features.1.num_batches_tracked"].dtype == np.int64 and conv4["features.1.num_batches_tracked"] == 0
    tiny = neutral_weights("tiny", 32, 0)
    assert np.abs(tiny["body.2.bias"]).max() <= 1 / np.sqrt(16 * 9)  # a bias bounded by its weight's fan-in
    resnet = neutral_weights("resnet18", 32, 0)["blocks.7.conv2.weight"]  # N(0, 2 / (512 * 9))
    assert resnet.std() == pytest.approx(np.sqrt(2 / (512 * 9)), rel=0.01) and abs(resnet.mean()) < 1e-3


# ---- the same function in both frameworks ---------------------------------------------------------


# ResNet-50's 53 layers in float32, batch statistics of 8 images: 1.1e-4 of the features' scale
# on one CPU (training mode), under 1e-4 on another; each framework sums in its own order
FEATURE_TOLERANCE = {"resnet50": 3e-4}


@pytest.mark.parametrize("backbone", tf_models.BACKBONES)
def test_torch_and_tf_compute_the_same_function_from_the_same_weights(backbone):
    weights = neutral_weights(backbone, SIZES[backbone], 3)
    torch_model, tf_model = _torch_model(backbone, weights), _tf_model(backbone, weights)
    # the layout is torch's state dict, and it maps onto every Keras variable, each once
    state = torch_model.state_dict()
    assert list(weights) == list(state)
    assert all(weights[k].dtype == v.numpy().dtype for k, v in state.items())
    mapped = [id(getattr(tf_model.get_layer(t.keras_layer), t.keras_variable))
              for t in layout(backbone, SIZES[backbone]) if t.keras_variable is not None]
    assert sorted(mapped) == sorted(id(v) for v in tf_model.weights)
    images = np.random.RandomState(0).uniform(-1, 1, (8, SIZES[backbone], SIZES[backbone], 3)).astype(np.float32)
    for training in (False, True):
        torch_model.train(training)
        with torch.no_grad():
            expected = torch_model(torch.from_numpy(images).permute(0, 3, 1, 2)).numpy()
        seen = _as_torch_features(backbone, tf_model(images, training=training).numpy(), expected)
        scale = float(np.abs(expected).max())
        assert np.abs(seen - expected).max() <= FEATURE_TOLERANCE.get(backbone, 1e-4) * scale, \
            (training, np.abs(seen - expected).max(), scale)
    # one training step's moving statistics: torch's update (unbiased variance, momentum 0.1)
    for tensor in layout(backbone, SIZES[backbone]):
        if tensor.keras_variable in ("moving_mean", "moving_variance"):
            moved = getattr(tf_model.get_layer(tensor.keras_layer), tensor.keras_variable).numpy()
            np.testing.assert_allclose(moved, state[tensor.name].numpy(), rtol=1e-4, atol=1e-5, err_msg=tensor.name)


def test_strided_layers_pad_like_torch_and_keep_their_variables():
    """The ResNet stem's 7x7/2 convolution at an even side: Keras "same" would pad (2, 3)."""
    model = tf_models.build_backbone("resnet18", 32)
    assert isinstance(model.get_layer("stem_conv"), tf_models.PaddedConv2D)
    assert isinstance(model.get_layer("stem_pool"), tf_models.PaddedMaxPooling2D)
    assert [v.path for v in model.get_layer("stem_conv").weights] == ["stem_conv/kernel"]
    assert len(model.layers) == 68  # no layer added: tf checkpoints name variables by the layer's position


# ---- files and flags ----------------------------------------------------------------------------------


def test_npz_round_trip_and_cli(tmp_path, capsys):
    path = tmp_path / "conv4.npz"
    assert init_weights.main(["--backbone", "conv4", "--image-size", "32", "--seed", "5", "--out", str(path)]) == 0
    assert "24 tensors" in capsys.readouterr().out
    loaded = read_npz(path)
    expected = neutral_weights("conv4", 32, 5)
    assert list(loaded) == list(expected) and all(np.array_equal(loaded[k], v) for k, v in expected.items())
    write_npz(tmp_path / "again.npz", loaded)
    assert weights_sha256(read_npz(tmp_path / "again.npz").items()) == weights_sha256(expected.items())
    (tmp_path / "bad.npz").write_text("not an archive")
    with pytest.raises(ValueError, match="bad.npz: not a NumPy .npz archive"):
        read_npz(tmp_path / "bad.npz")


@pytest.mark.parametrize("backbone", ["conv4", "tiny"])
def test_both_frameworks_load_the_file_and_the_seed_alike(tmp_path, backbone):
    path = tmp_path / "w.npz"
    write_npz(path, neutral_weights(backbone, SIZES[backbone], 7))
    device = torch.device("cpu")
    by_seed = torch_backbones.load_backbone(parse_args("torch", _argv("torch", backbone, "--init-seed", "7")),
                                            device, 84, "backbone")
    by_file = torch_backbones.load_backbone(parse_args("torch", _argv("torch", backbone, "--weights", str(path))),
                                            device, 84, "backbone")
    default = torch_backbones.load_backbone(parse_args("torch", _argv("torch", backbone)), device, 84, "backbone")
    assert by_seed.fingerprint == by_file.fingerprint != default.fingerprint
    tf_seed = tf_backbones.load_backbone(parse_args("tf", _argv("tf", backbone, "--init-seed", "7")), 84, "backbone")
    tf_file = tf_backbones.load_backbone(parse_args("tf", _argv("tf", backbone, "--weights", str(path))), 84,
                                         "backbone")
    assert tf_seed.fingerprint == tf_file.fingerprint
    images = np.random.RandomState(1).randint(0, 256, (4, SIZES[backbone], SIZES[backbone], 3)).astype(np.uint8)
    torch_features = torch_backbones.TorchFeatures(by_file, device, 4).features(images)
    tf_features = _as_torch_features(backbone, tf_backbones.TFFeatures(tf_file, 4).features(images), torch_features)
    assert np.abs(tf_features - torch_features).max() <= 1e-4 * np.abs(torch_features).max()


def test_a_file_that_does_not_fit_is_refused_with_one_line(tmp_path):
    path = tmp_path / "tiny.npz"
    write_npz(path, neutral_weights("tiny", 32, 0))
    with pytest.raises(UsageError) as error:
        tf_backbones.load_backbone(parse_args("tf", _argv("tf", "conv4", "--weights", str(path))), 84, "backbone")
    assert "does not fit --backbone conv4" in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(UsageError) as error:
        torch_backbones.load_backbone(parse_args("torch", _argv("torch", "conv4", "--weights", str(path))),
                                      torch.device("cpu"), 84, "backbone")
    assert "does not fit --backbone conv4" in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_init_seed_refusals(framework, tmp_path, capsys):
    path = tmp_path / "w.npz"
    write_npz(path, neutral_weights("conv4", 32, 0))
    with pytest.raises(SystemExit):
        parse_args(framework, _argv(framework, "conv4", "--init-seed", "0", "--weights", str(path)))
    assert "argument --init-seed: not with --weights" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(framework, [*_argv(framework, "conv4"), "--backbone", "os:getcwd", "--init-seed", "0"])
    assert "is not a named backbone" in capsys.readouterr().err


def test_a_neutral_linear_head_gives_the_same_logits_over_conv4_in_both_frameworks():
    """tf's conv4 flattens (H, W, C): the head's columns are permuted so the logits are torch's."""
    weights, head = neutral_weights("conv4", 32, 2), init_weights.neutral_head(256, 7, 2)
    torch_model, tf_model = _torch_model("conv4", weights), _tf_model("conv4", weights)
    torch_head = torch_models.LinearHead(256, 7)
    torch_head.load_state_dict({name: torch.from_numpy(value) for name, value in head.items()})
    tf_head = tf_models.build_head(7, 256)
    tf_backbones.assign_neutral_head(tf_head, "conv4", 32, head)
    images = np.random.RandomState(4).uniform(-1, 1, (5, 32, 32, 3)).astype(np.float32)
    with torch.no_grad():
        expected = torch_head(torch_model.eval()(torch.from_numpy(images).permute(0, 3, 1, 2))).numpy()
    seen = tf_head(tf_model(images, training=False)).numpy()
    assert np.abs(seen - expected).max() <= 1e-4 * np.abs(expected).max()
