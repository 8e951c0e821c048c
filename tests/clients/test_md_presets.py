"""``--preset md/<learner>/<setting>``: Meta-Dataset's best configurations as trainer flags
(``clients.md_presets``, data in ``clients/md_presets.json``). Each value is checked against
the fact sheet's table of the reference's best gin files (../shared/reference/md_learners.md,
section 5, three significant digits there; the data keeps the files' full digits), each is a
value the trainer's own parser accepts, a flag beside a preset wins and is recorded, and the
torch trainer runs the ProtoNet recipe end to end (shortened) twice to the same weights."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import require_reference

from clients import md_presets
from clients.torch.md_train import main as torch_main
from clients.trainer_args import parse_args, run_config

FACT_SHEET = "md_learners.md"
BACKBONES = {"resnet": "md-resnet18", "wide_resnet": "md-wrn", "four_layer_convnet": "md-conv4"}
BASE = ["--server", "127.0.0.1:1", "--run", "preset", "--device", "cpu"]


def _rounded(value: float) -> float:
    """To the fact sheet's three significant digits."""
    return float(f"{value:.3g}")


def _table_row(text: str, setting: str, learner: str) -> list[str]:
    """The cells of ``learner``'s row in the fact sheet's best-hyperparameter table of ``setting``."""
    section = text.split(f"**{setting}**", 1)[1]
    row = next(line for line in section.splitlines() if line.startswith(f"| {learner} |"))
    return [cell.strip() for cell in row.strip("|").split("|")]


@pytest.mark.parametrize(("name", "setting", "learner"), [("md/protonet/imagenet", "ImageNet-only", "ProtoNet"),
                                                         ("md/protonet/all", "All datasets", "ProtoNet"),
                                                         ("md/matchingnet/imagenet", "ImageNet-only", "MatchingNet"),
                                                         ("md/matchingnet/all", "All datasets", "MatchingNet")])
def test_episodic_presets_are_the_reference_best_files(name, setting, learner):
    text = require_reference(FACT_SHEET).read_text(encoding="utf-8")
    _, backbone, px, init, lr, decay, weight_decay, _ = _table_row(text, setting, learner)
    values = md_presets.md_preset(name).values
    assert values["model"] == name.split("/")[1]
    every, rate = decay.split("/")
    assert values["backbone"] == BACKBONES[backbone] and values["image_size"] == int(px)
    assert _rounded(values["lr"]) == float(lr) and _rounded(values["weight_decay"]) == float(weight_decay)
    assert values["decay_every"] == int(every) and _rounded(values["decay_rate"]) == float(rate)
    assert init == "pretrained" and md_presets.md_preset(name).init_from  # said, since a preset cannot hold it
    assert values["train_episodes"] == 75000 and values["validate_every"] == 500 and values["validate_episodes"] == 600
    assert values["validate_sources"] == ["ilsvrc_2012"] and values["batch_norm"] == "md"  # MD validates on ImageNet
    assert len(values["eval_sources"]) == 10
    all_datasets = "ilsvrc_2012, aircraft, cu_birds, omniglot, quickdraw, vgg_flower, dtd, fungi"
    if setting == "All datasets":
        assert ", ".join(values["sources"]) == all_datasets and all_datasets in text
    else:
        assert values["sources"] == ["ilsvrc_2012"]


def test_the_baseline_preset_is_the_resnet_pretraining():
    text = require_reference(FACT_SHEET).read_text(encoding="utf-8")
    line = text[text.index("**Pre-training"):].split("\n\n", 1)[0]  # its paragraph
    resnet = re.search(r"resnet (\d+) px, lr ([\d.e-]+), wd ([\d.e-]+), linear head", line)
    assert resnet is not None and "50k updates, decay off, from scratch" in line
    preset = md_presets.md_preset("md/baseline/imagenet")
    values = preset.values
    assert (values["model"], values["backbone"], values["image_size"]) == ("baseline", "md-resnet18",
                                                                          int(resnet.group(1)))
    assert _rounded(values["lr"]) == float(resnet.group(2))
    assert _rounded(values["weight_decay"]) == float(resnet.group(3))
    assert (values["train_steps"], values["decay_every"], values["batch_size"]) == (50000, 0, 256)
    assert preset.init_from is None and preset.differs  # 1-NN cosine evaluation is said to differ


@pytest.mark.parametrize(("name", "setting", "learner"), [("md/maml/imagenet", "ImageNet-only", "fo-MAML"),
                                                         ("md/maml/all", "All datasets", "fo-MAML"),
                                                         ("md/protomaml/imagenet", "ImageNet-only", "fo-Proto-MAML"),
                                                         ("md/protomaml/all", "All datasets", "fo-Proto-MAML")])
def test_the_maml_presets_are_the_reference_best_files(name, setting, learner):
    text = require_reference(FACT_SHEET).read_text(encoding="utf-8")
    _, backbone, px, init, lr, decay, weight_decay, specific = _table_row(text, setting, learner)
    preset = md_presets.md_preset(name)
    values = preset.values
    assert (values["model"], values["backbone"], values["image_size"]) == (name.split("/")[1], BACKBONES[backbone],
                                                                          int(px))
    assert init == "pretrained" and preset.init_from
    assert _rounded(values["lr"]) == float(lr) and _rounded(values["weight_decay"]) == float(weight_decay)
    every, rate = decay.split("/")
    assert values["decay_every"] == int(every) and _rounded(values["decay_rate"]) == float(rate)
    alpha, steps, extra = re.search(r"α ([\d.]+), (\d+) steps?, \+(\d+) at eval", specific).groups()
    assert _rounded(values["maml_alpha"]) == float(alpha)
    assert (values["maml_steps"], values["maml_eval_steps"]) == (int(steps), int(extra))
    assert values["train_episodes"] == 75000 and values["validate_sources"] == ["ilsvrc_2012"]


def test_the_knn_preset_is_the_reference_best_imagenet_file():
    text = require_reference(FACT_SHEET).read_text(encoding="utf-8")
    _, backbone, px, init, lr, decay, weight_decay, specific = _table_row(text, "ImageNet-only", "k-NN")
    preset = md_presets.md_preset("md/knn/imagenet")
    values = preset.values
    assert (values["model"], values["backbone"], values["image_size"]) == ("knn", BACKBONES[backbone], int(px))
    assert init == "scratch" and preset.init_from is None and preset.differs is None
    assert _rounded(values["lr"]) == float(lr) and _rounded(values["weight_decay"]) == float(weight_decay)
    assert decay.startswith("off") and values["decay_every"] == 0
    assert "linear train head, no WN" in specific and "1-NN **cosine**" in specific  # knn's head and distance
    assert (values["train_steps"], values["batch_size"]) == (75000, 256)
    assert values["validate_sources"] == ["ilsvrc_2012"] and len(values["eval_sources"]) == 10


def test_the_weight_normalised_presets_are_the_reference_best_files():
    """k-NN on all datasets trains a cosine head x1 under weight norm; Finetune trains and
    finetunes a weight-normalised linear head, 200 Adam steps at 0.01 on all layers per episode."""
    text = require_reference(FACT_SHEET).read_text(encoding="utf-8")
    _, backbone, px, init, lr, decay, weight_decay, specific = _table_row(text, "All datasets", "k-NN")
    preset = md_presets.md_preset("md/knn/all")
    values = preset.values
    assert (values["model"], values["backbone"], values["image_size"]) == ("knn", BACKBONES[backbone], int(px))
    assert init == "pretrained" and preset.init_from and decay.startswith("off") and values["decay_every"] == 0
    assert _rounded(values["lr"]) == float(lr) and _rounded(values["weight_decay"]) == float(weight_decay)
    assert "cosine train head ×1 + WN" in specific
    assert (values["classifier"], values["cosine_multiplier"], values["weight_norm"]) == ("cosine", 1.0, True)
    assert ", ".join(values["sources"]) == "ilsvrc_2012, aircraft, cu_birds, omniglot, quickdraw, vgg_flower, dtd, fungi"
    for name, setting in (("md/finetune/imagenet", "ImageNet-only"), ("md/finetune/all", "All datasets")):
        _, backbone, px, init, lr, decay, weight_decay, specific = _table_row(text, setting, "Finetune")
        preset = md_presets.md_preset(name)
        values = preset.values
        assert (values["model"], values["backbone"], values["image_size"]) == ("finetune", BACKBONES[backbone],
                                                                              int(px))
        assert init == "pretrained" and preset.init_from and values["decay_every"] == 0
        assert _rounded(values["lr"]) == float(lr) and _rounded(values["weight_decay"]) == float(weight_decay)
        assert (values["classifier"], values["weight_norm"]) == ("linear", True)
        assert (values["finetune_steps"], values["finetune_lr"], values["finetune_optimizer"],
                values["finetune_all_layers"]) == (200, 0.01, "adam", True)
        assert "**Adam**, lr 0.01, **200** steps, **all layers**" in _table_row(text, "ImageNet-only", "Finetune")[-1]
    with pytest.raises(ValueError, match="k-NN baseline's configuration"):
        md_presets.md_preset("md/baseline/all")


@pytest.mark.parametrize(("name", "setting"), [("md/relationnet/imagenet", "ImageNet-only"),
                                               ("md/relationnet/all", "All datasets")])
def test_the_relationnet_presets_are_the_reference_best_files(name, setting):
    """Both files are the same numbers (the fact sheet says so); transductive batch norm; the
    weight decay counted twice, as the reference's loss counts its regulariser twice."""
    text = require_reference(FACT_SHEET).read_text(encoding="utf-8")
    _, backbone, px, init, lr, decay, weight_decay, specific = _table_row(text, setting, "RelationNet")
    preset = md_presets.md_preset(name)
    values = preset.values
    assert (values["model"], values["backbone"], values["image_size"]) == ("relationnet", BACKBONES[backbone],
                                                                          int(px))
    assert init == "pretrained" and preset.init_from and "transductive BN" in specific
    assert values["batch_norm"] == "transductive"
    every, rate = decay.split("/")
    assert values["decay_every"] == int(every) and _rounded(values["decay_rate"]) == float(rate)
    assert _rounded(values["lr"]) == float(lr) and _rounded(values["weight_decay"] / 2) == float(weight_decay)
    assert "counts **twice**" in text and "counted twice" in preset.origins["weight_decay"]
    assert values["train_episodes"] == 75000 and values["validate_sources"] == ["ilsvrc_2012"]


@pytest.mark.parametrize("name", md_presets.names())
def test_every_value_is_one_the_parser_takes_from_the_command_line(name):
    preset = md_presets.md_preset(name)
    assert set(preset.values) == set(preset.origins) and all(preset.origins.values())
    args = parse_args("torch", [*BASE, "--preset", name])
    assert args.md_preset == name and args.md_preset_overridden == [] and args.preset == preset.values["preset"]
    spelled = [*BASE]
    for key, value in preset.values.items():
        flag = f"--{key.replace('_', '-')}"
        if isinstance(value, bool):
            spelled += [flag if value else f"--no-{flag[2:]}"]
        else:
            spelled += [flag, *map(str, value)] if isinstance(value, list) else [flag, str(value)]
        assert (list(getattr(args, key)) if isinstance(getattr(args, key), tuple) else getattr(args, key)) == \
            (value if key != "preset" else preset.values["preset"]), key
    given = parse_args("torch", spelled)  # the same values typed as flags parse to the same arguments
    assert {key: getattr(given, key) for key in preset.values} == {key: getattr(args, key) for key in preset.values}


def test_flags_beside_a_preset_win_and_are_recorded(capsys):
    args = parse_args("tf", [*BASE, "--preset", "md/protonet/all", "--lr", "0.01", "--train-episodes", "20"])
    assert (args.lr, args.train_episodes, args.decay_every) == (0.01, 20, 100)
    config = run_config(args, {})
    assert config["md_preset"] == "md/protonet/all" and config["md_preset_overridden"] == ["lr", "train_episodes"]
    assert config["preset"] == "md-v1" and config["weight_decay"] == md_presets.md_preset("md/protonet/all").values[
        "weight_decay"]
    for bad, said in (("md/crosstransformer/imagenet", "expected a server benchmark variant (md-v1, md-v2) or one of "
                                                  "md/protonet/imagenet, md/protonet/all, md/baseline/imagenet"),
                      ("md/baseline/all", "--preset md/knn/all")):
        with pytest.raises(SystemExit) as stop:
            parse_args("torch", [*BASE, "--preset", bad])
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"argument --preset: got {bad}" in err and said in err


@pytest.mark.slow
@pytest.mark.usefixtures("torch_one_thread")
def test_the_protonet_recipe_runs_end_to_end_and_again_to_the_same_weights(served, tmp_path: Path, capfd):
    """md-resnet18 with the recipe's schedule, weight decay and validation, on the fixture's
    store, its sources and sizes given beside the preset (the store is not ImageNet)."""
    summaries = []
    for attempt in range(2):
        summary = tmp_path / f"{attempt}.json"
        argv = ["--server", served.address, "--run", f"preset-{attempt}", "--preset", "md/protonet/imagenet",
                "--sources", "folder", "--validate-sources", "folder", "--eval-sources", "folder", "--image-size", "16",
                "--ways", "3", "--shots", "2", "--query", "2", "--train-episodes", "2", "--validate-every", "2",
                "--validate-episodes", "2", "--eval-episodes", "2", "--decay-every", "1", "--threads", "1",
                "--json-summary", str(summary), "--device", "cpu"]
        assert torch_main(argv) == 0
        summaries.append(json.loads(summary.read_text()))
    first, second = summaries
    assert first["ranks"][0]["parameter_digest"] == second["ranks"][0]["parameter_digest"]
    assert first["config"]["result_sha256"] == second["config"]["result_sha256"]
    assert first["validation"] == second["validation"]
    assert [v["update"] for v in first["validation"]["validations"]] == [0, 2]
    config = first["config"]
    assert (config["backbone"], config["batch_norm"]) == ("md-resnet18", "md")
    assert config["md_preset"] == "md/protonet/imagenet"
    assert config["lr"] == md_presets.md_preset("md/protonet/imagenet").values["lr"]
    assert config["tested_update"] == first["validation"]["best_update"]
    err = capfd.readouterr().err
    assert "preset md/protonet/imagenet: meta-dataset learn/gin/best/prototypical_imagenet.gin; given beside it: " \
           "--decay-every, --eval-episodes" in err
    assert "without --init-from this run trains from scratch" in err
