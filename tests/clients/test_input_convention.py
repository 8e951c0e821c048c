"""One input convention per checkpoint (issue 39): every trainer command of both frameworks (the
MD trainer, ``transfer``, ``cog``, ``evaluate``) resolves the same range, mean and std for one
backbone, and says whose they are (``Preprocessing.source``): our named backbones' [-1, 1],
torchvision weights' ImageNet statistics, a backbone's own attributes, flags over all of them,
and one default (ImageNet's mean and std on [0, 1]) for a backbone that declares nothing.

``test_evaluate`` checks the same on the tensors each protocol of one ``evaluate`` feeds the model."""

from __future__ import annotations

import pytest
from evaluate_backbones import INPUT_RANGE, MEAN, STD

from clients.backbone_contract import Preprocessing

IMAGENET = ((0.0, 1.0), (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
MINUS_ONE_TO_ONE = ((-1.0, 1.0), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
DECLARED = (INPUT_RANGE, MEAN, STD)  # evaluate_backbones' attributes
COMMANDS = ("train", "transfer", "cog", "evaluate")
PROBES = {"torch": "input_probe_backbones:torch_backbone", "tf": "input_probe_backbones:keras_backbone"}
DECLARING = {"torch": "evaluate_backbones:torch_backbone", "tf": "evaluate_backbones:keras_backbone"}


def _parse(framework: str, command: str, backbone: str, *flags: str):
    from clients.evaluate_args import parse_evaluate_args
    from clients.trainer_args import parse_args, parse_cog_args, parse_transfer_args

    common = ["--server", "h:1", "--run", "r", "--backbone", backbone, *flags]
    if command == "train":
        return parse_args(framework, [*common, "--sources", "folder"])
    if command == "transfer":
        return parse_transfer_args(framework, [*common, "--tasks", "kitti_distance"])
    parse = parse_cog_args if command == "cog" else parse_evaluate_args
    return parse(framework, [*common, "--feature-cache", "c"])


def _resolved(framework: str, backbone: str, *flags: str, commands: tuple[str, ...] = COMMANDS
              ) -> dict[str, Preprocessing]:
    """Each command's preprocessing of ``backbone`` at 16 px."""
    if framework == "torch":
        import torch

        from clients.torch.backbones import load_backbone

        def load(args):
            return load_backbone(args, torch.device("cpu"), 84, "backbone")
    else:
        from clients.tf.backbones import load_backbone

        def load(args):
            return load_backbone(args, 84, "backbone")

    return {command: load(_parse(framework, command, backbone, "--image-size", "16", *flags)).preprocessing
            for command in commands}


def _convention(preprocessing: Preprocessing) -> tuple:
    return (preprocessing.low, preprocessing.high), preprocessing.mean, preprocessing.std


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_every_command_gives_one_backbone_one_convention_and_says_whose(framework):
    cases = {PROBES[framework]: (IMAGENET, "default", COMMANDS),
             "tiny": (MINUS_ONE_TO_ONE, "named backbone", COMMANDS),
             DECLARING[framework]: (DECLARED, "model attributes", ("transfer",))}
    for backbone, (convention, source, commands) in cases.items():
        resolved = _resolved(framework, backbone, commands=commands)
        got = {command: _convention(p) for command, p in resolved.items()}
        assert got == dict.fromkeys(commands, convention), backbone
        assert {p.as_config()["source"] for p in resolved.values()} == {source}, backbone
    # flags win over attributes and over the default, each value on its own
    flagged = _resolved(framework, DECLARING[framework], "--input-range", "-1", "1", "--mean", "0", "0", "0",
                        commands=("cog",))
    assert {(_convention(p), p.source) for p in flagged.values()} == {
        (((-1.0, 1.0), (0.0, 0.0, 0.0), DECLARED[2]), "flags (input_range, mean), model attributes (std)")}
    flagged = _resolved(framework, PROBES[framework], "--input-range", "-1", "1", "--mean", "0", "0", "0", "--std",
                        "1", "1", "1", commands=("train",))
    assert {(_convention(p), p.source) for p in flagged.values()} == {(MINUS_ONE_TO_ONE, "flags")}


def test_torchvision_weights_in_a_named_resnet18_bring_imagenet_statistics_in_every_command(tmp_path):
    import input_probe_backbones as probe
    import torch

    probe.write_torchvision_resnet18(tmp_path / "torchvision.pt")
    commands = ("train", "evaluate")  # evaluate's protocols: test_evaluate, on the tensors fed
    resolved = _resolved("torch", "resnet18", "--weights", str(tmp_path / "torchvision.pt"), commands=commands)
    assert {command: _convention(p) for command, p in resolved.items()} == dict.fromkeys(commands, IMAGENET)
    assert {p.source for p in resolved.values()} == {"torchvision weights"}
    # the flags still win
    flagged = _resolved("torch", "resnet18", "--weights", str(tmp_path / "torchvision.pt"), "--std", "1", "1", "1",
                        commands=("transfer",))
    assert {(_convention(p), p.source) for p in flagged.values()} == {
        ((IMAGENET[0], IMAGENET[1], (1.0, 1.0, 1.0)), "flags (std), torchvision weights (input_range, mean)")}
    # our own resnet18's weights (a plain state dict of it) are a named backbone's
    from clients.torch.models import ResNet18

    torch.save(ResNet18().state_dict(), tmp_path / "ours.pt")
    ours = _resolved("torch", "resnet18", "--weights", str(tmp_path / "ours.pt"), commands=("evaluate",))
    assert {(_convention(p), p.source) for p in ours.values()} == {(MINUS_ONE_TO_ONE, "named backbone")}


def test_torchvision_weights_are_told_from_ours_by_their_names():
    """torchvision's ResNet-18 names are not ours; our resnet50 has torchvision's names but not its ``fc``."""
    from clients.init_weights import layout
    from clients.torch.backbones import torchvision_layout

    resnet50 = [tensor.name for tensor in layout("resnet50", 16)]
    assert not torchvision_layout(resnet50)  # a state dict of our resnet50 (or torchvision's less fc): ours
    assert torchvision_layout([*resnet50, "fc.weight", "fc.bias"])
    assert torchvision_layout([f"module.{name}" for name in (*resnet50, "fc.weight")])  # saved under DDP
    assert not torchvision_layout([tensor.name for tensor in layout("resnet18", 16)])
