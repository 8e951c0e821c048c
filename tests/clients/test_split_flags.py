"""One split vocabulary in the trainers too: a split flag takes ``sampler_common.splits``' names
and the validation split's aliases (valid, val, validation), as the client, the server and the
CLI do, and refuses anything else in one line listing what is accepted (exit 2)."""

from __future__ import annotations

import json

import pytest

from clients.evaluate_args import parse_evaluate_args
from clients.trainer_args import parse_args, parse_transfer_args

MD = ["--server", "127.0.0.1:1", "--run", "r", "--sources", "folder"]
TRANSFER = ["--server", "127.0.0.1:1", "--run", "r", "--tasks", "kitti_distance"]


@pytest.mark.parametrize("framework", ["torch", "tf"])
@pytest.mark.parametrize("name", ["valid", "val", "validation"])
def test_the_eval_split_takes_every_name_of_the_validation_split(framework, name):
    assert parse_args(framework, [*MD, "--eval-split", name]).eval_split == "valid"


@pytest.mark.parametrize("name", ["val", "valid", "validation"])
def test_the_transfer_and_evaluate_select_split_take_the_aliases_of_val(name):
    assert parse_transfer_args("torch", [*TRANSFER, "--select-split", name]).select_split == "val"
    assert parse_transfer_args("torch", [*TRANSFER, "--select-split", "none", "--lrs", "0.1", "--steps", "5"]
                               ).select_split == "none"
    evaluated = parse_evaluate_args("torch", ["--server", "127.0.0.1:1", "--run", "r", "--backbone", "tiny",
                                              "--feature-cache", "c", "--select-split", name])
    assert evaluated.select_split == "val"


def test_a_bad_split_is_one_line_listing_the_accepted_names_and_exit_2(capsys):
    with pytest.raises(SystemExit) as raised:
        parse_args("torch", [*MD, "--eval-split", "validaton"])
    assert raised.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "--eval-split: got 'validaton', expected one of train, valid, test (or val, validation for valid)" in err
    with pytest.raises(SystemExit):
        parse_transfer_args("torch", [*TRANSFER, "--select-split", "train800"])
    assert "expected one of val, val200 (or valid, validation for val), or none" in capsys.readouterr().err


def test_a_trainer_evaluates_on_the_split_named_validation(served, tmp_path, torch_one_thread):
    from clients.torch.md_train import main

    summary = tmp_path / "summary.json"
    assert main(["--server", served.address, "--run", "eval-validation", "--sources", "folder", "--image-size", "16",
                 "--backbone", "tiny", "--train-episodes", "0", "--eval-episodes", "2", "--eval-split",
                 "validation", "--threads", "1", "--json-summary", str(summary)]) == 0
    result = json.loads(summary.read_text())
    assert result["config"]["eval_split"] == "valid" and result["eval"]["folder"]["episodes"] == 2
