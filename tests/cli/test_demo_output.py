"""What ``sampler-server demo`` prints where: on the terminal one progress line per leg and
each leg's table, ``demo_console.TERMINAL_BUDGET`` lines at most; in ``<workdir>/demo.log``
all of that and everything else (the data's summaries, every trainer's command line and
output). ``run`` is driven end to end with its heavy parts stood in for: no stores are
packed and no trainer runs, but the jobs are real processes run by the demo's scheduler,
printing as much as the real ones (the CoG leg's 600 lines), and the tables are as long as
the real demo's (counted on a full run: MD 13 lines, VTAB 30, calibrated 22, CoG 19, parity 16;
the card, 119, has their shape: four sections, the lines naming runs a table leaves out)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sampler_server.cli import demo_cmd, demo_tables
from sampler_server.cli import report_cmd  # noqa: F401  (imported here, it binds the real MetricsStore:
# first imported while a test below stands MetricsStore in, it kept the stand-in for the worker's later tests)
from sampler_server.cli.demo_console import TERMINAL_BUDGET, logging_to
from sampler_server.cli.demo_jobs import Job, run_jobs
from sampler_server.cli.main import build_parser
from sampler_server.errors import FailedPrecondition

LEGS = ("data", "md", "vtab", "baselines", "cog", "evaluate", "learners")
TABLE_LINES = {"md": 13, "vtab": 30, "calibrated": 22, "cog": 19, "parity": 16, "learners": 14}
# the card's sections: (title, table lines, runs it leaves out), as the demo's card has them
CARD = (("Meta-Dataset", 15, 3), ("VTAB-1k", 30, 4), ("ImageNet-CoG", 12, 4), ("Calibrated (control baselines)", 22, 5))
TABLE_HEADINGS = {"md": "Meta-Dataset:", "vtab": "VTAB-1k:", "baselines": "control", "cog": "ImageNet-CoG:",
                  "learners": "learners:"}
JOB_LINES = {"md": 20, "vtab": 20, "baselines": 25, "cog": 300, "evaluate": 25, "learners": 20}  # each process's output


def test_the_console_sends_progress_and_tables_to_both_and_everything_else_to_the_log_only(tmp_path, capfd):
    log = tmp_path / "demo.log"
    with logging_to(log) as console:
        console.progress("md", "trained")
        print("a pack's summary")
        sys.stderr.write("a library's warning\n")
        os.write(1, b"written to the file descriptor\n")
        subprocess.run([sys.executable, "-c", "import sys; print('a child'); print('its error', file=sys.stderr)"],
                       check=True)
        console.table("the MD table", "row 1\nrow 2\n")
        console.note("the log alone")
    print("after the block")
    terminal = capfd.readouterr().out.splitlines()
    assert terminal[0].endswith("] md: trained") and terminal[1:] == ["", "== the MD table", "row 1", "row 2",
                                                                       "after the block"]
    written = log.read_text().splitlines()
    for line in ("a pack's summary", "a library's warning", "written to the file descriptor", "a child", "its error",
                 "== the MD table", "row 2", "the log alone"):
        assert line in written
    assert written.index("a pack's summary") < written.index("a child") < written.index("== the MD table")


def _fake_heavy_parts(monkeypatch, tmp_path: Path) -> None:
    """Stores, server, trainer commands and tables stood in for (see the module docstring)."""

    def stores(workdir, classes, images_per_class, workers, quiet, *, vtab=True, cog=True):
        store = workdir / "store"
        for name in ("aircraft", "tfds_svhn_cropped", "imagenet21k-00000-of-00002"):
            (store / name).mkdir(parents=True)
        print("packed aircraft -> ...\n" * 40)  # the packs' summaries: the log's
        return demo_cmd.DemoStores(store, vtab, 1.0, 1.0, ("L1: ranks [0, 4)", "fingerprint 94"))

    class Server:
        returncode = 0

        def close(self):
            pass

        def send_signal(self, signal):
            pass

        def wait(self, timeout=None):
            return 0

    def start_server(store, log, timeout=120.0):
        log.write_text("listening on 127.0.0.1:1 (3 stores)\n")
        return Server(), "127.0.0.1:1"

    real_jobs = demo_cmd.trainer_jobs

    def jobs(args, address, threads):
        return [Job(job.name, job.leg, ("-c", f"print('{job.leg} progress\\n' * {JOB_LINES[job.leg]})"), job.after)
                for job in real_jobs(args, address, threads)]

    def table(name):
        return lambda *args, **kwargs: "\n".join(f"{name} row {i}" for i in range(TABLE_LINES[name]))

    def card(store, workdir, runs):
        sections = ["$ sampler-server report --card ...\n# Report card: demo-eval/cog, ...\n\nmetrics: ..."]
        for title, rows, left_out in CARD:
            left = f"no results (not in this table): {', '.join(f'run{i}' for i in range(left_out))}\n"
            sections.append(f"## {title}\n\n{left}\n" + "\n".join(f"| card {title} row {i} |" for i in range(rows)))
        return "\n\n".join(sections) + "\n\nhtml: card.html\n"

    monkeypatch.setattr(demo_cmd, "build_demo_stores", stores)
    monkeypatch.setattr(demo_cmd, "inspect_run", lambda args: print("aircraft  (source aircraft)\n" * 60))
    monkeypatch.setattr(demo_cmd, "start_server", start_server)
    monkeypatch.setattr(demo_cmd, "trainer_jobs", jobs)
    def md_table(metrics, store, runs, plots_dir):  # the MD leg's, or the learners' (the same function)
        return table("learners" if runs[0].startswith("demo-learners/") else "md")()

    monkeypatch.setattr(demo_tables, "md_table", md_table)
    monkeypatch.setattr(demo_tables, "vtab_table", table("vtab"))
    monkeypatch.setattr(demo_tables, "calibrated_table", table("calibrated"))
    monkeypatch.setattr(demo_tables, "cog_table", table("cog"))
    monkeypatch.setattr(demo_tables, "parity_table", table("parity"))
    monkeypatch.setattr(demo_tables, "card", card)
    monkeypatch.setattr("sampler_server.metrics.store.MetricsStore", lambda path: Server())  # has close()


def test_the_demo_prints_one_progress_line_per_leg_and_its_tables_within_the_budget(tmp_path, capfd, monkeypatch):
    _fake_heavy_parts(monkeypatch, tmp_path)
    workdir = tmp_path / "demo-data"
    args = build_parser().parse_args(["demo", "--workdir", str(workdir)])
    assert args.func(args) == 0
    terminal = capfd.readouterr().out.splitlines()
    assert len(terminal) <= TERMINAL_BUDGET
    progress = [line.split("] ", 1)[1].split(":")[0] for line in terminal if line.startswith("[")]
    assert progress[0] == "data" and sorted(progress) == sorted(LEGS), progress  # each leg once, data first
    headings = [line.split()[1] for line in terminal if line.startswith("== ")]
    assert headings[-2:] == ["framework", "the"] and sorted(headings[:-2]) == sorted(TABLE_HEADINGS.values())
    for leg, heading in TABLE_HEADINGS.items():  # a leg's table right after its progress line
        at = next(i for i, line in enumerate(terminal) if line.startswith("[") and f"] {leg}:" in line)
        assert terminal[at + 1:at + 3] == ["", next(line for line in terminal if line.startswith(f"== {heading}"))]
    for name, lines in TABLE_LINES.items():  # every table whole, once
        assert sum(line.startswith(f"{name} row ") for line in terminal) == lines
    for title, rows, _ in CARD[:-1]:  # the card's tables, but the calibrated one printed above already
        assert sum(line.startswith(f"| card {title} row ") for line in terminal) == rows
    assert not any(line.startswith("| card Calibrated") or "(not in this table)" in line for line in terminal)
    assert "## Calibrated (control baselines)" in terminal  # named, in one line under it
    card_md = (workdir / "card.md").read_text()
    assert card_md.count("(not in this table)") == len(CARD)  # one line a table
    assert "| card Calibrated (control baselines) row 21 |" in card_md
    assert not any("progress" in line or "packed" in line or "(source" in line for line in terminal)
    assert all("(demo scale: " in line for line in terminal if line.startswith(("== Meta", "== VTAB", "== Image")))
    log = (workdir / "demo.log").read_text().splitlines()
    only_here = set(terminal) - set(log)  # the log has the card whole instead of the line naming the calibrated table
    assert len(only_here) == 1 and "the same table as the control baselines' table above" in only_here.pop()
    for leg, lines in JOB_LINES.items():  # every process's output, under its command line
        jobs = sum(line.startswith("$ python -c") and f"'{leg} progress" in line for line in log)
        assert sum(line == f"{leg} progress" for line in log) == lines * jobs and jobs
    assert sum(line.startswith("packed aircraft") for line in log) == 40
    assert terminal[-1].startswith("demo finished in") and str(workdir / "demo.log") in terminal[-1]


def test_a_failed_job_stops_the_demo_with_its_last_lines_on_the_terminal(tmp_path, capfd):
    jobs = [Job("md-torch", "md", ("-c", "import sys; print('line\\n' * 30 + 'the cause'); sys.exit(3)")),
            Job("md-tf", "md", ("-c", "import time; time.sleep(60)")),
            Job("evaluate", "evaluate", ("-c", "print('never')"), after=("md-torch",))]
    with logging_to(tmp_path / "demo.log") as console, pytest.raises(FailedPrecondition, match="md-torch.*status 3"):
        run_jobs(jobs, console, tmp_path / "logs", os.environ, parallel=2)
    terminal = capfd.readouterr().out
    assert "md-torch failed (exit status 3)" in terminal and terminal.rstrip().endswith("the cause")
    assert not (tmp_path / "logs" / "evaluate.log").exists()  # never started; md-tf was stopped, not waited for


def test_jobs_wait_for_what_they_read_and_run_at_most_parallel_at_a_time(tmp_path, capfd):
    marks = tmp_path / "marks"
    marks.mkdir()
    body = ("import os, sys, time; from pathlib import Path; m = Path(sys.argv[1]); (m / sys.argv[2]).touch(); "
            "running = len(list(m.iterdir())); time.sleep(0.5); (m / sys.argv[2]).unlink(); print(running)")
    jobs = [Job(f"j{i}", "leg", ("-c", body, str(marks), f"j{i}"), after=("j0",) if i == 3 else ()) for i in range(4)]
    ended = []
    with logging_to(tmp_path / "demo.log") as console:
        times = run_jobs(jobs, console, tmp_path / "logs", os.environ, parallel=2,
                         on_leg=lambda leg, so_far: ended.append((leg, dict(so_far.seconds))))
    assert all(int((tmp_path / "logs" / f"j{i}.log").read_text()) <= 2 for i in range(4))
    assert sorted(times.seconds) == ["j0", "j1", "j2", "j3"] and [leg for leg, _ in ended] == ["leg"]
    log = (tmp_path / "demo.log").read_text()
    assert log.index("[j0: exit status 0") < log.index(f"$ python -c {body} {marks} j3")


def test_every_trainer_job_is_a_command_its_trainer_accepts(tmp_path):
    from clients.evaluate_args import parse_evaluate_args
    from clients.trainer_args import parse_args, parse_cog_args, parse_transfer_args

    args = build_parser().parse_args(["demo", "--workdir", str(tmp_path)])
    checkpoint = tmp_path / "checkpoints-torch" / "checkpoint.pt"
    checkpoint.parent.mkdir()
    checkpoint.write_bytes(b"")
    jobs = demo_cmd.trainer_jobs(args, "127.0.0.1:1", threads=1)
    assert [job.name for job in jobs] == list(demo_cmd.START_ORDER)
    parsers = {"transfer": parse_transfer_args, "cog": parse_cog_args, "evaluate": parse_evaluate_args}
    for job in jobs:
        framework, command, rest = job.argv[1].split(".")[1], job.argv[2], job.argv[3:]
        parsed = parsers[command](framework, rest) if command in parsers else parse_args(framework, job.argv[2:])
        assert parsed.threads == 1 and parsed.server == "127.0.0.1:1", job.name
    assert {job.name: job.after for job in jobs if job.after} == {"evaluate": ("md-torch",),
                                                                   "control-model": ("md-torch",)}


def test_parallel_defaults_by_cores_and_parses():
    parser = argparse.ArgumentParser()
    demo_cmd.register(parser.add_subparsers())
    assert parser.parse_args(["demo"]).parallel is None
    assert parser.parse_args(["demo", "--parallel", "1"]).parallel == 1
