"""The control baselines' registration: the "calibrated" table (they report as VTAB tasks
at a data regime, so no parser of their own).

``run_ids`` are the model runs, ``scratch_run`` and ``max_run`` the controls (each run's
stored role must match); the blind guess of each task comes from the context
(``ReportContext.blind_risk``: the server's served labels, or the report command's packed
stores). ``cci_seeds`` picks the CCI: "points" (the default, the reference notebook's) or
"mean" (``core.baselines.calibration``). The report command picks this table with
``--calibrate``.
"""

from __future__ import annotations

from pathlib import Path

from sampler_server.core.baselines.calibration import CCI_SEEDS, DEFAULT_CCI_SEEDS, check_cci_seeds
from sampler_server.metrics import registry
from sampler_server.metrics.baselines.report import CalibratedReport, build_calibrated_report, render_calibrated_report
from sampler_server.metrics.store import MetricsStore

CALIBRATED_ONLY = "{name}: only with table 'calibrated' (got table {table!r})"
CALIBRATED_ONLY_COMMAND = "{flag}: only with --calibrate"


def _build(store: MetricsStore, query: registry.ReportQuery, context: registry.ReportContext) -> CalibratedReport:
    cci_seeds = check_cci_seeds(query.cci_seeds or DEFAULT_CCI_SEEDS)
    return build_calibrated_report(store, list(query.run_ids), query.scratch_run, query.max_run, context.blind_risk,
                                   cci_seeds)


def _plot(report: CalibratedReport, directory: Path, query: registry.ReportQuery) -> list[Path]:
    from sampler_server.metrics.baselines.plots import write_calibrated_plots

    return write_calibrated_plots(report, directory)


def _required(name: str, flag: str, role: str) -> registry.Requirement:
    return registry.Requirement(name, f"{name}: empty; table 'calibrated' needs the {role} run",
                                f"{flag}: required with --calibrate (the {role} run the others are calibrated against)")
TABLES = (
    registry.ReportTable(
        name="calibrated",
        help="the calibrated report of the control baselines: per VTAB task and regime the risk, cR = (R - R_max) / "
        "(R_blind - R_max) and cR_scratch, and each run's CCI; needs --scratch, --max and --data (the blind guess comes "
        "from the packed labels); --plots writes cR-vs-n and cR-vs-cR_scratch plots per task",
        build=_build,
        render=render_calibrated_report,
        options=(
            registry.ReportOption("scratch_run", "--scratch", CALIBRATED_ONLY, CALIBRATED_ONLY_COMMAND, metavar="RUN",
                                  help="--calibrate: the scratch run (role scratch)", names_run=True),
            registry.ReportOption("max_run", "--max", CALIBRATED_ONLY, CALIBRATED_ONLY_COMMAND, metavar="RUN",
                                  help="--calibrate: the max run (role max)", names_run=True),
            registry.ReportOption("cci_seeds", "--cci-seeds", CALIBRATED_ONLY, CALIBRATED_ONLY_COMMAND, choices=CCI_SEEDS,
                                  help="--calibrate: points (default) is the reference notebook's CCI, every (n, seed) "
                                  "of a run its own point against the scratch risk averaged over seeds; mean averages "
                                  "each run over its seeds at each n first"),
        ),
        required=(_required("scratch_run", "--scratch", "scratch"), _required("max_run", "--max", "max")),
        refusal=("{name}: not with table 'calibrated' (it reads VTAB test results at every regime against scratch_run "
                 "and max_run)", "{flag}: not with --calibrate (it reads VTAB test results at every regime)"),
        plot=_plot,
        needs_stores="the blind guess is computed from the packed tasks' labels",
        flag="--calibrate",
    ),
)
PROTOCOLS: tuple[registry.ReportProtocol, ...] = ()  # they report as VTAB tasks (metrics.vtab)
