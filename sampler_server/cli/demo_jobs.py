"""The demo's trainer processes: each a command a user could type, run a few at a time.

A ``Job`` is one ``python -m clients.<framework> ...`` command of one leg. ``run_jobs``
starts them at most ``parallel`` at a time, in the order given, a job waiting for those
it reads (``after``: the torch checkpoint) to have ended. Each job's output goes to its own
file under ``logs/``, appended to the demo's log, under its command line, when it ends,
so the log reads one whole job after another even when two ran at once. When every job
of a leg has ended, ``on_leg`` is called once (the leg's progress line and its table),
after the next jobs have started, so that its work runs beside theirs. A job that fails
stops the rest: the running ones are terminated, and the error names the job, its exit
status and the file holding all it said (``FailedPrecondition``).

Two at a time on two cores, each with one framework thread (``--threads``): a process
with two threads on two cores that it shares with another trainer and the server spends
its time waiting on its own threads (measured: a control-baseline run took 185 s with two
threads against 65 s with one, the same results). Which jobs run together changes no
result: every run is a pure function of its arguments and the server's stores.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sampler_server.cli.demo_console import DemoConsole, tail
from sampler_server.errors import FailedPrecondition


@dataclass(frozen=True)
class Job:
    """One trainer process: its name (a file name), its leg, its arguments after the Python
    executable, and the jobs whose output it reads."""

    name: str
    leg: str
    argv: tuple[str, ...]
    after: tuple[str, ...] = ()

    @property
    def command(self) -> str:
        """As a user types it."""
        return "python " + " ".join(self.argv)


@dataclass
class JobTimes:
    """Wall seconds of each job that ended, by name, and of the whole batch."""

    seconds: dict[str, float] = field(default_factory=dict)
    total: float = 0.0


def run_jobs(jobs: Sequence[Job], console: DemoConsole, logs: Path, env: Mapping[str, str], parallel: int,
             on_leg: Callable[[str, JobTimes], None] | None = None, poll: float = 0.2) -> JobTimes:
    """Run ``jobs`` (see the module's docstring); their wall times by name."""
    names = [job.name for job in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"jobs: got the names {names}, expected each once")
    unknown = {dep for job in jobs for dep in job.after} - set(names)
    if unknown:
        raise ValueError(f"jobs: got after={sorted(unknown)}, expected names of the jobs given")
    logs.mkdir(parents=True, exist_ok=True)
    times, started_all = JobTimes(), time.perf_counter()
    waiting = list(jobs)
    running: dict[str, tuple[Job, subprocess.Popen, float]] = {}
    legs_left = {job.leg: sum(other.leg == job.leg for other in jobs) for job in jobs}

    def launch_ready() -> None:
        for job in list(waiting):
            if len(running) >= max(1, parallel):
                return
            if all(dep in times.seconds for dep in job.after):
                waiting.remove(job)
                with open(logs / f"{job.name}.log", "w", encoding="utf-8") as out:
                    process = subprocess.Popen([sys.executable, *job.argv], stdout=out, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, env=dict(env))
                running[job.name] = (job, process, time.perf_counter())
        if not running and waiting:  # cannot happen for a valid graph; a guard against a silent stall
            raise ValueError(f"jobs: {[job.name for job in waiting]} wait for jobs that never run")

    try:
        launch_ready()
        while running:
            time.sleep(poll)
            ended_legs = []
            for name, (job, process, started) in list(running.items()):
                status = process.poll()
                if status is None:
                    continue
                del running[name]
                seconds = time.perf_counter() - started
                console.note(f"\n$ {job.command}")
                console.note((logs / f"{job.name}.log").read_text(encoding="utf-8", errors="replace").rstrip("\n"))
                console.note(f"[{job.name}: exit status {status} after {seconds:.0f} s]")
                if status != 0:
                    _fail(job, status, console, logs)
                times.seconds[name] = seconds
                legs_left[job.leg] -= 1
                if legs_left[job.leg] == 0:
                    ended_legs.append(job.leg)
            launch_ready()  # before the legs' callbacks: what they print runs beside the next jobs
            for leg in ended_legs:
                times.total = time.perf_counter() - started_all
                if on_leg is not None:
                    on_leg(leg, times)
    finally:
        for _, process, _ in running.values():
            process.terminate()
        for _, process, _ in running.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
    times.total = time.perf_counter() - started_all
    return times


def _fail(job: Job, status: int, console: DemoConsole, logs: Path) -> None:
    """The failed job's last lines on the terminal, then the error that stops the demo."""
    console.say(f"{job.leg}: {job.name} failed (exit status {status}); its last lines:")
    console.say(tail(logs / f"{job.name}.log"))
    raise FailedPrecondition(f"the demo's {job.name} run exited with status {status}; all it said is in "
                             f"{logs / (job.name + '.log')} (and in {console.log_path or 'the demo log'})")


def legs_of(jobs: Sequence[Job]) -> list[str]:
    """The legs of ``jobs`` in the order they first appear."""
    return list(dict.fromkeys(job.leg for job in jobs))
