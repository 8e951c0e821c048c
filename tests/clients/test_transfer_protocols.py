"""The transfer trainers' named protocols (``transfer --protocol``), without a server: the
default is the VTAB paper's lightweight sweep (fine-tune, {0.1, 0.01} x {2500, 10000}, no
warm-up, per-task selection on ``val``, the median of 3 final runs), ``reference-script``
is task_adaptation's run_all_tasks.sh, each protocol's schedule points are those of its
source, a flag given overrides one value and is named, and bad values are one line.
The runs of each protocol through a real server are in test_transfer.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from clients.core import task_batch_request
from clients.trainer_args import parse_transfer_args
from clients.vtab_transfer_protocols import DECAYS, PROTOCOLS, Schedule

TASK = "kitti_distance"


def _parse(*extra: str):
    return parse_transfer_args("torch", ["--server", "127.0.0.1:1", "--run", "r", "--tasks", TASK, *extra])


# ---- pure parts --------------------------------------------------------------------------------


def test_each_protocols_schedule_points_are_its_sources():
    # the VTAB default: task_adaptation README's 2500-step example (--decay_steps 750,1500,2250), no warm-up
    vtab = Schedule(DECAYS[PROTOCOLS["vtab"].decay], PROTOCOLS["vtab"].warmup)
    assert vtab.points(2500) == {"warmup_steps": 0, "decay_steps": [750, 1500, 2250]}
    assert vtab.points(10000) == {"warmup_steps": 0, "decay_steps": [3000, 6000, 9000]}
    assert vtab.learning_rate(0.1, 0, 2500) == pytest.approx(0.1)  # no warm-up: the first step at the base rate
    assert [vtab.learning_rate(1.0, t, 2500) for t in (750, 751, 1500, 1501, 2250, 2251)] == pytest.approx(
        [1, 0.1, 0.1, 0.01, 0.01, 0.001])
    # --decay paper: VTAB Appendix I's 1/3 and 2/3 (and 9/10 for "shortly before the end")
    assert Schedule(DECAYS["paper"]).points(2500) == {"warmup_steps": 0, "decay_steps": [833, 1667, 2250]}
    # run_all_tasks.sh: 1000 steps, --decay_steps 300,600,900, --warmup_steps 80 (linear from 0)
    script = PROTOCOLS["reference-script"]
    schedule = Schedule(DECAYS[script.decay], script.warmup)
    assert schedule.points(script.steps[0]) == {"warmup_steps": 80, "decay_steps": [300, 600, 900]}
    assert [schedule.learning_rate(1.0, t, 1000) for t in (0, 40, 80, 300, 301, 600, 601, 900, 901, 999)] == (
        pytest.approx([0.0, 0.5, 1, 1, 0.1, 0.1, 0.01, 0.01, 0.001, 0.001]))
    # vtab-md: this project's schedule before protocols were named (8% warm-up, 30/60/90%)
    md = Schedule(DECAYS[PROTOCOLS["vtab-md"].decay], PROTOCOLS["vtab-md"].warmup)
    assert md.points(2500) == {"warmup_steps": 200, "decay_steps": [750, 1500, 2250]}


def test_the_default_protocol_is_the_vtab_papers_lightweight_sweep():
    args = _parse()
    assert args.protocol == "vtab" and args.overridden == []
    assert (args.mode, args.lrs, args.steps, args.batch_size) == ("finetune", [0.1, 0.01], [2500, 10000], 512)
    assert (args.warmup, args.decay, args.select, args.select_split) == (0.0, "readme", "per-task", "val")
    assert (args.final_split, args.runs) == ("train800val200", 3)


def test_reference_script_and_vtab_md_values():
    script = _parse("--protocol", "reference-script")
    assert (script.mode, script.lrs, script.steps, script.batch_size) == ("finetune", [0.01], [1000], 64)
    assert (script.warmup, script.select_split, script.final_split, script.runs) == (0.08, "none", "trainval1000", 1)
    md = _parse("--protocol", "vtab-md")
    assert (md.lrs, md.steps, md.select, md.select_split, md.runs) == ([0.01, 0.001], [2500, 10000], "all-tasks",
                                                                       "val200", 1)


def test_a_flag_overrides_its_protocol_value_and_is_named():
    args = _parse("--protocol", "reference-script", "--batch-size", "512", "--warmup", "0", "--runs", "3")
    assert (args.batch_size, args.warmup, args.runs, args.lrs) == (512, 0.0, 3, [0.01])
    assert args.overridden == ["batch_size", "runs", "warmup"]


def test_regime_sampling_goes_into_both_requests():
    request = task_batch_request(TASK, "train", 8, shuffle=True, regime=8, regime_seed=1, regime_sampling="stratified")
    assert request.regime_sampling == "stratified"
    assert _parse("--regime", "8", "--regime-sampling", "stratified").regime_sampling == "stratified"
    assert _parse("--regime", "8").regime_sampling == "uniform"


@pytest.mark.parametrize(("extra", "words"), [
    (["--protocol", "reference-script", "--lrs", "0.1", "0.01"], ["--lrs", "2 settings", "reference-script",
                                                                  "--select-split"]),
    (["--warmup", "1.5"], ["--warmup", "1.5", "[0, 1)"]),
    (["--regime-sampling", "stratified"], ["--regime-sampling", "stratified", "--regime N"]),
    (["--protocol", "bit"], ["--protocol", "bit", "vtab"]),
])
def test_bad_protocol_arguments_end_in_one_line_and_exit_2(extra, words):
    done = subprocess.run([sys.executable, "-c", "import sys; from clients.trainer_args import parse_transfer_args; "
                           "parse_transfer_args('torch', sys.argv[1:])", "--server", "127.0.0.1:1", "--run", "r",
                           "--tasks", TASK, *extra], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0], done.stderr
    assert all(word in lines[0] for word in words), lines[0]


def test_the_printed_summary_names_the_pixels_trained_on():
    from clients.vtab_transfer import format_summary

    summary = {"run": "r", "mode": "finetune", "protocol": "vtab", "config": {"framework": "torch", "backbone": "conv4"},
               "protocol_values": {"image_size": 224, "resize": "legacy_bilinear"},
               "tasks": {}}
    assert format_summary(summary).splitlines()[0] == "run r: torch vtab finetune conv4, 224 px legacy_bilinear"


def test_weight_decay_is_vtabs_for_runs_from_scratch_and_none_when_fine_tuning():
    """VTAB Appendix I: 0.001 when training from scratch, none when fine-tuning; a linear probe
    trains a head on frozen features (neither): none; a flag overrides it and is named."""
    scratch = _parse("--backbone", "tiny", "--role", "scratch")
    assert (scratch.mode, scratch.weight_decay, scratch.overridden) == ("finetune", 0.001, [])
    assert _parse("--backbone", "tiny", "--role", "max").weight_decay == 0.001
    assert _parse("--backbone", "tiny").weight_decay == 0.001  # a named backbone without --weights: random init
    assert _parse("--backbone", "tiny", "--mode", "linear", "--role", "scratch").weight_decay == 0.0
    given = _parse("--backbone", "tiny", "--role", "scratch", "--weight-decay", "0.01")
    assert (given.weight_decay, given.overridden) == (0.01, ["weight_decay"])
