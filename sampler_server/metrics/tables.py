"""What every report table shares: its formats, its run-list check, one MD-style cell, one
text grid (aligned columns or markdown) and the column headings that name each run's learner."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sampler_server.errors import InvalidArgument
from sampler_server.metrics.ranks import Estimate

FORMATS = ("table", "markdown", "json")


def check_format(fmt: str) -> str:
    """``fmt`` itself when it is one of ``FORMATS``; ``InvalidArgument`` naming them otherwise."""
    if fmt not in FORMATS:
        raise InvalidArgument(f"format: got {fmt!r}, expected one of {', '.join(FORMATS)}")
    return fmt


def check_runs(run_ids: Sequence[str]) -> None:
    """At least one run, none given twice (``InvalidArgument`` naming the first repeated one)."""
    if not run_ids:
        raise InvalidArgument("run: none given; expected at least one run id")
    repeated = sorted({r for r in run_ids if list(run_ids).count(r) > 1})
    if repeated:
        raise InvalidArgument(f"run: {repeated[0]!r} given twice")


def estimate_cell(e: Estimate) -> str:
    """``mean ± ci (episodes)`` in percent, as every Meta-Dataset cell reads (the MD table
    and the MD part of VTAB+MD)."""
    ci = e.ci95
    return f"{100 * e.mean:.2f} ± {100 * ci:.2f} ({e.episodes})" if ci is not None else f"{100 * e.mean:.2f} (1)"


def render_grid(header: Sequence[str], rows: Sequence[Sequence[str]], notes: Sequence[str], fmt: str) -> str:
    """``header`` and ``rows`` as a markdown table (``fmt == "markdown"``) or aligned columns,
    then a blank line and ``notes``, one per line."""
    if fmt == "markdown":
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines + [""] + list(notes))
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(lines + [""] + list(notes))


def learner_of(config: Mapping[str, Any]) -> str | None:
    """The learner a run's configuration names, None where it names none: ``evaluate``'s
    ``learner`` (its runs ``RUN/<preset>/<learner>``), else a trainer's ``model``, with the
    ``eval_learner`` whose head classified its test episodes when that is another one
    (``baseline, protonet head``)."""
    learner = config.get("learner")
    if isinstance(learner, str) and learner:
        return learner
    model, head = config.get("model"), config.get("eval_learner")
    if not isinstance(model, str) or not model:
        return None
    return f"{model}, {head} head" if isinstance(head, str) and head and head != model else model


def column_labels(runs: Sequence[str], learners: Mapping[str, str | None]) -> tuple[dict[str, str], str]:
    """Each run's column heading, and the one note naming the runs where headings shortened them.

    A heading says the learner: a run id that ends with its learner (``RUN/md-v1/knn``) says
    it already, another gets it in brackets (``my-run (protonet)``). When every run ends with
    its learner under one common prefix (the learners of one ``evaluate`` run), the headings
    are the learners alone and the note names the prefix; the run ids stay the JSON's keys.
    """
    says = {run: learners.get(run) is not None and run.rsplit("/", 1)[-1] == learners[run] for run in runs}
    labels = {run: run if says[run] or learners.get(run) is None else f"{run} ({learners[run]})" for run in runs}
    prefix = runs[0].rsplit("/", 1)[0] + "/" if runs and "/" in runs[0] else ""
    if len(runs) > 1 and prefix and all(says.values()) and all(run.startswith(prefix) for run in runs) \
            and all("/" not in run[len(prefix):] for run in runs):
        return {run: run[len(prefix):] for run in runs}, f"columns: the runs {prefix}<column>"
    return labels, ""
