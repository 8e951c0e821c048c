"""The report card: the Meta-Dataset, VTAB-1k, VTAB+MD, ImageNet-CoG and calibrated tables of
one or more runs on one page, as markdown (the terminal) or as one self-contained HTML file.

Pure arrangement, no arithmetic: each table comes in built and rendered by its own
protocol's registered table (``metrics.registry``, markdown format) and each plot as the
PNG bytes its protocol's plot module wrote, so a card shows exactly the numbers
``sampler-server report --table ...`` shows for the same runs (accuracies in %, as every
table writes them). The runs stand side by side: one column per run in the MD and VTAB
tables, one block of rows per run in the CoG table, as those tables lay them out.

A table whose protocol has no results for any run shown is left out with one line saying
so; the runs that lack one protocol are named under that table in one line
(``lacking_line``), and it shows the runs that have it (so the MD ranks are over the runs
shown in it). The MD table ranks the runs
of one preset: runs of md-v1 and md-v2 (an ``evaluate`` run's ``RUN/md-v1/<learner>`` and
``RUN/md-v2/<learner>``) get one MD table each, titled with its preset. The VTAB+MD table
shows the runs with MD-v2 test episodes, each beside its VTAB-v2 side (an ``evaluate``
run's ``RUN/vtab``), as averages (that paper ranks nothing).

Under the heading: where the numbers come from, and the input convention each run's backbone
was fed (``input_lines``: range, mean, std and whose they are, as its configuration records
them), so a card says whether a checkpoint got its own convention or the default.

The HTML opens with a table of contents linking each table shown (``Section.anchor``),
and each table's plots follow it in a ``<details>`` element, closed: the page shows every
protocol's table within its first screens however many plots there are (18 for eight MD
sources), and a click opens one protocol's plots. It has its CSS inline, the plots as
``data:image/png;base64`` URIs and no script or external resource: it opens in any
browser, offline, and travels as one file.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sampler_server.metrics.baselines.report import CalibratedReport
from sampler_server.metrics.cog.report import CogReport
from sampler_server.metrics.md.report import Report as MdReport
from sampler_server.metrics.md.report import runs_by_preset
from sampler_server.metrics.vtab.report import VtabReport, vtab_md_runs


def md_runs(report: MdReport) -> list[str]:
    """The runs of an MD report with at least one episode's accuracy."""
    return [run for run in report.runs if any(run in by_run for by_run in report.accuracy.values())]


def vtab_runs(report: VtabReport) -> list[str]:
    """The runs of a VTAB report with a result on at least one task of its benchmark."""
    return [run for run in report.runs if report.scores[run].accuracy]


def cog_runs(report: CogReport) -> list[str]:
    """The runs of a CoG report with at least one (level, N) result."""
    return [run for run in report.runs if report.cells[run]]


@dataclass(frozen=True)
class CardTable:
    """One registered table on the card: its registry name, its heading, what its
    results are called (in the lines naming who lacks them) and who has any.
    ``groups(store, runs)``, where given, parts the runs that have results into the
    groups one table each holds (name -> runs; several: one table per group, the name
    in its title and its plots' folder); ``plots_folder`` keeps a table's plots apart
    from another table's of the same names."""

    name: str
    title: str
    results: str
    runs_with_results: Callable[[Any], list[str]]
    groups: Callable[[Any, Sequence[str]], Mapping[str, Sequence[str]]] | None = None
    plots_folder: str = ""


CARD_TABLES = (
    CardTable("md", "Meta-Dataset", "Meta-Dataset episode reports", md_runs, groups=runs_by_preset),
    CardTable("vtab", "VTAB-1k", "VTAB-1k task results", vtab_runs),
    CardTable("vtab-md", "VTAB+MD", "MD-v2 test episode reports", vtab_md_runs, plots_folder="vtab-md"),
    CardTable("cog", "ImageNet-CoG", "ImageNet-CoG results", cog_runs),
)
"""The tables every card shows where their runs have results, in card order; the
calibrated table (``CALIBRATED``) follows them where scratch and max runs exist."""

def calibrated_runs(report: CalibratedReport) -> list[str]:
    """The model runs of a calibrated report with a result at a data regime of some task."""
    calibrated = {run for task in report.calibration["tasks"].values() for run in task["runs"]}
    return [run for run in report.runs if run in calibrated]


CALIBRATED = CardTable("calibrated", "Calibrated (control baselines)", "VTAB results at a data regime",
                       calibrated_runs)


@dataclass(frozen=True)
class ControlRuns:
    """The scratch and max runs a calibrated table needs, or why there are none."""

    scratch: str | None
    max: str | None
    missing: str = ""  # one line; empty when both were found


def expand_runs(asked: Sequence[str], known: Sequence[str]) -> tuple[str, ...]:
    """Each asked run, or, for a run id with no reports of its own, the runs ``RUN/...`` under
    it (``evaluate`` reports one checkpoint as ``RUN/<preset>/<learner>``, ``RUN/vtab`` and
    ``RUN/cog``), so the card of a checkpoint is asked for by the name it was evaluated as."""
    held = set(known)
    expanded: list[str] = []
    for run in asked:
        under = sorted(other for other in known if other.startswith(run + "/")) if run not in held else []
        for name in under or [run]:
            if name not in expanded:
                expanded.append(name)
    return tuple(expanded)


def control_runs(roles: Mapping[str, str | None]) -> ControlRuns:
    """The one scratch run and the one max run among ``roles`` (run -> role of its VTAB
    results); ``missing`` says what is absent or ambiguous (then both are None)."""
    found = {role: sorted(run for run, r in roles.items() if r == role) for role in ("scratch", "max")}
    for role, runs in found.items():
        if not runs:
            return ControlRuns(None, None, f"no {role} run in the metrics database")
        if len(runs) > 1:
            return ControlRuns(None, None, f"{len(runs)} {role} runs ({', '.join(runs)}); pick one with "
                                           f"--{role} RUN")
    return ControlRuns(found["scratch"][0], found["max"][0])


@dataclass(frozen=True)
class Plot:
    name: str  # the file name its plot module gave it
    png: bytes

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) in pixels, from the PNG's header chunk (IHDR, bytes 16-24)."""
        if self.png[:8] != b"\x89PNG\r\n\x1a\n":
            raise ValueError(f"{self.name}: not a PNG file")
        return int.from_bytes(self.png[16:20], "big"), int.from_bytes(self.png[20:24], "big")


@dataclass(frozen=True)
class Section:
    """One table of the card: ``markdown`` as its renderer wrote it, or empty when the
    table is left out; ``lines`` say why it is left out (one line) or, above a shown
    table, which runs it lacks and what was not checked."""

    title: str
    markdown: str = ""
    lines: tuple[str, ...] = ()
    plots: tuple[Plot, ...] = ()

    @property
    def shown(self) -> bool:
        return bool(self.markdown)

    @property
    def anchor(self) -> str:
        """The HTML id of its heading, which the table of contents links: the title in
        lower case, each run of other characters than letters and digits one ``-``
        ("Meta-Dataset (md-v1)" -> "meta-dataset-md-v1")."""
        words = "".join(c if c.isalnum() else " " for c in self.title.lower()).split()
        return "-".join(words) or "section"


@dataclass(frozen=True)
class Card:
    runs: tuple[str, ...]
    sections: tuple[Section, ...]
    provenance: tuple[str, ...] = ()  # where the numbers come from, one line each (the runs' input conventions too)
    plots_dir: str = ""  # where the PNGs were written (named in the markdown); empty: nowhere kept


def _numbers(values: Sequence[Any]) -> str:
    return " ".join(f"{float(v):g}" for v in values)


def input_lines(configs: Mapping[str, Mapping[str, Any] | None]) -> tuple[str, ...]:
    """One line per input convention among the runs' configurations (their ``preprocessing``,
    as every trainer command records it: range, mean, std and ``source``, whose they are), with
    the runs that share it; a run without one says nothing. ``evaluate``'s runs of one
    checkpoint share one line."""
    runs_of: dict[tuple[str, str], list[str]] = {}
    for run, config in configs.items():
        recorded = (config or {}).get("preprocessing")
        if not isinstance(recorded, Mapping) or not {"input_range", "mean", "std"} <= recorded.keys():
            continue
        low, high = recorded["input_range"]
        numbers = (f"[{float(low):g}, {float(high):g}], mean {_numbers(recorded['mean'])}, "
                   f"std {_numbers(recorded['std'])}")
        source = str(recorded.get("source") or "")
        whose = ("the default for a backbone that declares none" if source == "default"
                 else f"declared by {source}" if source else "not recorded whose")
        runs_of.setdefault((numbers, whose), []).append(run)
    return tuple(f"input of {', '.join(runs)}: {numbers} ({whose})" for (numbers, whose), runs in runs_of.items())


def lacking_line(results: str, runs: Sequence[str]) -> str:
    """The one line under a table naming the runs it leaves out for having none of its
    ``results``, e.g. "no ImageNet-CoG results (not in this table): run-a, run-b"."""
    return f"no {results} (not in this table): {', '.join(runs)}"


def left_out(title: str, why: str) -> Section:
    """A table left out, with the one line saying why."""
    return Section(title, lines=(f"{title}: left out, {why}.",))


# ---- markdown ---------------------------------------------------------------------------------


def render_markdown(card: Card) -> str:
    """The card as markdown: a heading, where the numbers come from, the contents (each
    table shown, linked as the HTML card's), then each table (or the line saying it is left
    out) and, with a plots folder, its plots' names."""
    parts = [f"# Report card: {', '.join(card.runs)}", "\n".join(card.provenance), toc_markdown(card.sections)]
    for section in card.sections:
        if not section.shown:
            parts.append("\n".join(section.lines))
            continue
        body = [f"## {section.title}"]
        if section.lines:
            body.append("\n".join(section.lines))
        body.append(section.markdown.rstrip())
        if card.plots_dir and section.plots:
            body.append(f"plots in {card.plots_dir}: " + ", ".join(plot.name for plot in section.plots))
        parts.append("\n\n".join(body))
    return "\n\n".join(part for part in parts if part) + "\n"


# ---- HTML -------------------------------------------------------------------------------------

STYLE = """
body { font: 14px/1.45 "Liberation Sans", Arial, Helvetica, sans-serif; color: #1b1f24; background: #fff;
       max-width: 1160px; margin: 20px auto; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; padding-bottom: 3px; border-bottom: 2px solid #d7dde4; }
p { margin: 4px 0; }
.provenance, .notes { color: #57606a; font-size: 12px; }
.notes { margin: 6px 0 0; padding-left: 18px; }
.absent { color: #6e7781; font-style: italic; margin: 14px 0; }
.lines { color: #9a6700; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; margin: 6px 0; }
th, td { border: 1px solid #d0d7de; padding: 3px 9px; white-space: nowrap; text-align: left; }
th { background: #eef2f6; }
td.number { text-align: right; }
tr.summary td { background: #f6f8fa; font-weight: bold; }
td.group { background: #fbfcfd; font-weight: bold; vertical-align: top; }
.plots { display: flex; flex-wrap: wrap; gap: 10px; margin-top: 10px; }
details.plots { margin-top: 10px; }
details.plots > summary { cursor: pointer; color: #0b5cad; }
nav.toc { margin: 10px 0 0; padding: 6px 12px; background: #f6f8fa; border: 1px solid #d7dde4; }
nav.toc ol { margin: 2px 0; padding-left: 22px; }
nav.toc a { color: #0b5cad; text-decoration: none; }
figure { margin: 0; flex: 0 1 calc(50% - 5px); }
figure.wide { flex-basis: 100%; }
figure img { display: block; width: 100%; height: auto; border: 1px solid #e4e8ec; }
figcaption { color: #57606a; font-size: 11px; }
"""


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split(" | ")]


def _is_number(cell: str) -> bool:
    head = cell.split(" ", 1)[0].lstrip("+-Δ")
    return head.replace(".", "", 1).isdigit() or cell == "-"


def _is_summary(row: Sequence[str]) -> bool:
    """A row of means, ranks or CCI, which the eye looks for first."""
    return any(cell in ("mean", "CCI") or cell.startswith("average rank") for cell in row[:3])


def grid_html(markdown: str) -> str:
    """A table as ``tables.render_grid`` writes it in markdown (header, ``|---|`` row, body
    rows, blank line, notes) as an HTML table and a list of notes. Runs of equal
    first-column cells (a VTAB group, a CoG run) become one cell spanning them."""
    lines = markdown.splitlines()
    rows = [_cells(line) for line in lines if line.startswith("|")]
    notes = [line.strip() for line in lines if line.strip() and not line.startswith("|")]
    if not rows:
        return "".join(f"<p>{html.escape(note)}</p>" for note in notes)
    header, body = rows[0], rows[2:]
    out = ["<div class=\"scroll\"><table>", "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"]
    for i, row in enumerate(body):
        span = 1
        while i + span < len(body) and body[i + span][0] == row[0]:
            span += 1
        first_of_run = i == 0 or body[i - 1][0] != row[0]
        cells = []
        if first_of_run:
            cells.append(f"<td class=\"group\" rowspan=\"{span}\">{html.escape(row[0])}</td>" if span > 1
                         else f"<td>{html.escape(row[0])}</td>")
        cells += [f"<td class=\"number\">{html.escape(c)}</td>" if _is_number(c) else f"<td>{html.escape(c)}</td>"
                  for c in row[1:]]
        attribute = " class=\"summary\"" if _is_summary(row) else ""
        out.append(f"<tr{attribute}>" + "".join(cells) + "</tr>")
    out.append("</table></div>")
    if notes:
        out.append("<ul class=\"notes\">" + "".join(f"<li>{html.escape(note)}</li>" for note in notes) + "</ul>")
    return "\n".join(out)


WIDE = 2.0
"""Width over height from which a plot takes the page's width (the VTAB per-task bars);
narrower ones stand two in a row."""


def _plot_html(plot: Plot) -> str:
    data = base64.b64encode(plot.png).decode("ascii")
    name = html.escape(plot.name)
    width, height = plot.size
    wide = " class=\"wide\"" if width >= WIDE * height else ""
    return (f"<figure{wide}><img src=\"data:image/png;base64,{data}\" width=\"{width}\" height=\"{height}\" "
            f"alt=\"{name}\"><figcaption>{name}</figcaption></figure>")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def toc_markdown(sections: Sequence[Section]) -> str:
    """One line of contents: a link to each table shown (with two or more; empty otherwise)."""
    shown = [section for section in sections if section.shown]
    if len(shown) < 2:
        return ""
    return "Contents: " + " · ".join(f"[{section.title}](#{section.anchor})" for section in shown)


def toc_html(sections: Sequence[Section]) -> str:
    """The table of contents: a link to each table shown, with how many plots it has."""
    items = "".join(f"<li><a href=\"#{section.anchor}\">{html.escape(section.title)}</a>"
                    + (f" ({_plural(len(section.plots), 'plot')})" if section.plots else "") + "</li>"
                    for section in sections if section.shown)
    return f"<nav class=\"toc\"><strong>Contents</strong><ol>{items}</ol></nav>" if items else ""


def render_html(card: Card) -> str:
    """The card as one HTML page (inline CSS, PNGs as data URIs, no script): the heading,
    where the numbers come from, the table of contents, then each table with its plots
    under a closed ``<details>``."""
    title = html.escape(f"Report card: {', '.join(card.runs)}")
    out = ["<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">", f"<title>{title}</title>",
           f"<style>{STYLE}</style></head><body>", f"<h1>{title}</h1>"]
    out += [f"<p class=\"provenance\">{html.escape(line)}</p>" for line in card.provenance]
    out.append(toc_html(card.sections))
    for section in card.sections:
        if not section.shown:
            out += [f"<p class=\"absent\">{html.escape(line)}</p>" for line in section.lines]
            continue
        out.append(f"<section id=\"{section.anchor}\"><h2>{html.escape(section.title)}</h2>")
        out += [f"<p class=\"lines\">{html.escape(line)}</p>" for line in section.lines]
        out.append(grid_html(section.markdown))
        if section.plots:
            out.append(f"<details class=\"plots\"><summary>{html.escape(section.title)}: "
                       f"{_plural(len(section.plots), 'plot')}</summary><div class=\"plots\">"
                       + "".join(_plot_html(plot) for plot in section.plots) + "</div></details>")
        out.append("</section>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
