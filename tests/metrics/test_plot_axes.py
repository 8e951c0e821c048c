"""Every plot the reports write, read as a Figure (not pixels): accuracy in percent with
the unit on the axis, whole-number ticks on ways / shots / N axes, each band and error
bar named in the legend, points of fewer than 10 episodes hollow with their n, and the
legend right of the axes, inside the saved image.

Each plot is built from reports stored in a real metrics store, by the report builders
the ``report`` command uses (MD episodes replayed from a packed store)."""

from __future__ import annotations

import json
from statistics import mean

import pytest
from google.protobuf import json_format
from matplotlib.backends.backend_agg import FigureCanvasAgg

from clients.protocols.md import EpisodeSpec
from conftest import generate_fixture, pack_fixture
from sampler_server.catalog.registry import StoreRegistry
from sampler_server.catalog.replay import EpisodeReplayer
from sampler_server.metrics.baselines.plots import calibrated_figures
from sampler_server.metrics.baselines.report import build_calibrated_report
from sampler_server.metrics.cog.plots import cog_figures
from sampler_server.metrics.cog.report import build_cog_report
from sampler_server.metrics.md.plots import md_figures
from sampler_server.metrics.md.report import build_report
from sampler_server.metrics.store import CogResult, MetricsStore, StoredReport, TaskResult
from sampler_server.metrics.vtab.plots import vtab_score_figure
from sampler_server.metrics.vtab.report import build_vtab_report

# ---- what every plot must show ------------------------------------------------------------


def _laid_out(figure):
    """The figure drawn as ``savefig`` draws it (layout applied); its renderer."""
    canvas = FigureCanvasAgg(figure)
    figure.draw(canvas.get_renderer())
    return canvas.get_renderer()


def _legend_texts(axes) -> list[str]:
    legend = axes.get_legend()
    assert legend is not None, "the plot has no legend"
    return [text.get_text() for text in legend.get_texts()]


def _assert_legend_outside(figure) -> None:
    """Right of the axes (covering no data) and inside the figure (nothing cut off in the PNG)."""
    axes = figure.axes[0]
    legend = axes.get_legend()
    assert legend is not None, "the plot has no legend"
    renderer = _laid_out(figure)
    box, data = legend.get_window_extent(renderer), axes.get_window_extent(renderer)
    assert box.x0 >= data.x1, f"legend starts at x={box.x0:.0f} px, inside the axes (right edge {data.x1:.0f} px)"
    assert box.x1 <= figure.bbox.x1 + 0.5 and box.y0 >= -0.5, f"legend {box} leaves the figure {figure.bbox}"


def _assert_integer_ticks(axes) -> None:
    low, high = sorted(axes.get_xlim())
    ticks = [t for t in axes.get_xticks() if low <= t <= high]
    assert ticks and all(float(t).is_integer() for t in ticks), f"x ticks {ticks}: expected whole numbers"


def _line(axes, label: str):
    """The data line labelled ``label``: a plain line, or the line of an error-bar container."""
    lines = [line for line in axes.get_lines() if line.get_label() == label]
    lines += [container.lines[0] for container in axes.containers if container.get_label() == label]
    (line,) = lines
    return line


# ---- Meta-Dataset: accuracy vs ways, precision vs shots -------------------------------------

FIVE_WAY_EPISODES, THREE_WAY_EPISODES = 12, 3


def _wrong(index: int) -> int:
    return index % 3  # 0, 1 or 2 wrong answers: a spread, so the 95% interval has a width


@pytest.fixture(scope="module")
def md(tmp_path_factory):
    """Run "proto": 12 five-way episodes (one point of n=12) and 3 three-way ones (n=3),
    replayed from a packed image_folder store; the run's report and its accuracies by ways."""
    root = tmp_path_factory.mktemp("md-plots")
    pack_fixture(generate_fixture("image_folder", root, num_classes=12, images_per_class=6), root / "data",
                 name="folder")
    replayer = EpisodeReplayer(StoreRegistry.from_data_dir(root / "data"))
    store = MetricsStore(root / "metrics.sqlite")
    accuracies: dict[int, list[float]] = {5: [], 3: []}
    reports = []
    for seed, ways, count in ((1, 5, FIVE_WAY_EPISODES), (2, 3, THREE_WAY_EPISODES)):
        request = EpisodeSpec(sources=("folder",), split="train", seed=seed, image_size=16, ways=ways).to_request()
        for index in range(count):
            episode = replayer.episode(request, seed, index)
            truth = [label for label, ids in enumerate(episode.query) for _ in ids]
            wrong = _wrong(index)
            predicted = [(t + 1) % ways for t in truth[:wrong]] + truth[wrong:]
            accuracy = (len(truth) - wrong) / len(truth)
            accuracies[episode.ways].append(accuracy)
            reports.append(StoredReport(
                run_id="proto", protocol="md-episode", source=episode.source, split="train", index=index, seed=seed,
                fingerprint=episode.fingerprint, metrics={"accuracy": accuracy},
                request=json_format.MessageToDict(request), predicted=tuple(predicted)))
    store.add(reports, run_config_json=json.dumps({"model": "proto"}))
    report = build_report(store, ["proto"], replayer)
    assert not report.mismatches
    return {"figures": dict(md_figures(report)), "accuracies": accuracies, "source": report.episodes[0].source}


def test_md_accuracy_vs_ways_in_percent_with_named_ci_and_few_episode_points(md):
    figure = md["figures"]["ways_all.png"]
    axes = figure.axes[0]
    assert axes.get_xlabel() == "ways" and axes.get_ylabel() == "query accuracy (%)"
    means = {ways: 100 * mean(values) for ways, values in md["accuracies"].items()}
    line = _line(axes, "proto")
    assert list(line.get_xdata()) == [3, 5]
    assert list(line.get_ydata()) == pytest.approx([means[3], means[5]])  # percent, not a 0-1 fraction
    _assert_integer_ticks(axes)
    texts = _legend_texts(axes)
    assert "95% CI over episodes" in texts
    assert "n < 10 episodes (n shown)" in texts
    notes = [(text.get_text(), tuple(text.xy)) for text in axes.texts]
    assert notes == [("n=3", (3, pytest.approx(means[3])))]  # the 12-episode point carries no note
    hollow = [line for line in axes.get_lines() if line.get_markerfacecolor() == "white"]
    assert [(list(h.get_xdata()), list(h.get_ydata())) for h in hollow] == [([3], [pytest.approx(means[3])])]
    _assert_legend_outside(figure)
    assert sorted(md["figures"]) == sorted(
        ["ways_all.png", "shots_all.png", f"ways_{md['source']}.png", f"shots_{md['source']}.png"])


def test_md_precision_vs_shots_in_percent_with_named_ci(md):
    figure = md["figures"]["shots_all.png"]
    axes = figure.axes[0]
    assert axes.get_xlabel() == "shots (bin start)" and axes.get_ylabel() == "class precision (%)"
    ys = _line(axes, "proto").get_ydata()
    assert max(ys) > 1 and all(0 <= y <= 100 for y in ys)  # percent: these precisions are between 0.5 and 1
    _assert_integer_ticks(axes)
    assert "95% CI over classes" in _legend_texts(axes)
    for text in axes.texts:  # each note names the n of a point drawn hollow
        assert text.get_text().startswith("n=") and int(text.get_text()[2:]) < 10
    _assert_legend_outside(figure)


# ---- ImageNet-CoG: accuracy vs level, relative to a baseline, vs N ----------------------------

COG = {  # (run, level, N) -> top-1 per seed 1, 2, ...
    ("model", "IN-1K", 0): [0.80, 0.82, 0.81], ("model", "L1", 0): [0.70, 0.72, 0.74],
    ("model", "L1", 2): [0.30, 0.34, 0.32], ("model", "L1", 8): [0.50, 0.52, 0.48],
    ("r50", "IN-1K", 0): [0.76, 0.78, 0.77], ("r50", "L1", 0): [0.66, 0.68, 0.64],
    ("r50", "L1", 2): [0.28, 0.30, 0.26], ("r50", "L1", 8): [0.44, 0.46, 0.42],
}


@pytest.fixture(scope="module")
def cog(tmp_path_factory):
    store = MetricsStore(tmp_path_factory.mktemp("cog-plots") / "metrics.sqlite")
    for (run, level, shots), accuracies in COG.items():
        store.add_cog_results([CogResult(run, level, shots, seed, accuracy, 5_000)
                               for seed, accuracy in enumerate(accuracies, start=1)],
                              run_config_json=json.dumps({"backbone": run}))
    return dict(cog_figures(build_cog_report(store, ["model"], baseline="r50"), per_shots=True))


def test_cog_accuracy_vs_level_names_its_std_error_bars(cog):
    figure = cog["cog_levels_all.png"]
    axes = figure.axes[0]
    assert axes.get_ylabel() == "top-1 accuracy (%)"
    assert list(_line(axes, "model").get_ydata()) == pytest.approx([81.0, 72.0])  # IN-1K, L1 in percent
    assert [t.get_text() for t in axes.get_xticklabels()] == ["IN-1K", "L1"]
    assert "error bar: std over seeds" in _legend_texts(axes)
    _assert_legend_outside(figure)


def test_cog_relative_plot_is_in_percentage_points_and_names_its_bars(cog):
    figure = cog["cog_levels_all_relative.png"]
    axes = figure.axes[0]
    assert axes.get_ylabel() == "top-1 minus baseline (% points)"
    assert list(_line(axes, "model").get_ydata()) == pytest.approx([4.0, 6.0])
    texts = _legend_texts(axes)
    assert "r50 (baseline)" in texts and "error bar: run's std over seeds" in texts
    _assert_legend_outside(figure)


def test_cog_accuracy_vs_n_has_a_tick_at_each_n_measured(cog):
    figure = cog["cog_shots_model.png"]
    axes = figure.axes[0]
    assert axes.get_ylabel() == "top-1 accuracy (%)"
    assert [t.get_text() for t in axes.get_xticklabels()] == ["2", "8", "all"]
    assert list(axes.get_xticks()) == [1.0, 3.0, 4.0]  # log2 N, "all" one step right of the largest N
    assert list(_line(axes, "L1").get_ydata()) == pytest.approx([32.0, 50.0, 72.0])
    assert "error bar: std over seeds" in _legend_texts(axes)
    _assert_legend_outside(figure)


# ---- control baselines: cR vs n, cR_f vs cR_scratch -----------------------------------------


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """A max run, a scratch run and a model run with two seeds at n = 20 (risks as fractions)."""
    store = MetricsStore(tmp_path_factory.mktemp("calibrated-plots") / "metrics.sqlite")
    store.add_task_results([TaskResult("max", "cifar100", "test", 0.9, 1000, role="max")])
    store.add_task_results([TaskResult("scratch", "cifar100", "test", 1 - risk, 1000, regime=n, regime_seed=1,
                                       role="scratch") for n, risk in ((10, 0.74), (20, 0.5), (40, 0.26))])
    store.add_task_results([TaskResult("model", "cifar100", "test", 1 - risk, 1000, regime=n, regime_seed=seed,
                                       role="model")
                            for n, seed, risk in ((10, 1, 0.34), (20, 1, 0.3), (20, 2, 0.22), (40, 1, 0.18))])
    report = build_calibrated_report(store, ["model"], "scratch", "max", lambda task: 0.9)
    return dict(calibrated_figures(report))


def test_calibrated_risk_vs_n_ticks_at_the_regimes_and_names_the_seed_dots(calibrated):
    figure = calibrated["calibrated_n_cifar100.png"]
    axes = figure.axes[0]
    assert axes.get_ylabel() == "calibrated risk cR"  # a fraction by definition, not an accuracy
    assert list(axes.get_xticks()) == [10, 20, 40]
    assert [t.get_text() for t in axes.get_xticklabels()] == ["10", "20", "40"]
    assert "dot: one seed (line: mean)" in _legend_texts(axes)
    _assert_legend_outside(figure)


def test_calibrated_against_scratch_keeps_its_legend_off_the_data(calibrated):
    figure = calibrated["calibrated_scratch_cifar100.png"]
    axes = figure.axes[0]
    assert axes.get_ylabel() == "cR_f (mean over seeds at each n)"
    assert _legend_texts(axes)[0] == "diagonal (= scratch)"
    _assert_legend_outside(figure)


# ---- VTAB: per-task bars ----------------------------------------------------------------------


def test_vtab_bars_are_percent_with_group_means_named(tmp_path):
    store = MetricsStore(tmp_path / "metrics.sqlite")
    store.add_task_results([TaskResult("probe", task, "test", accuracy, 500)
                            for task, accuracy in (("cifar100", 0.5), ("dtd", 0.7), ("eurosat", 0.9))])
    figure = vtab_score_figure(build_vtab_report(store, ["probe"]).scores["probe"])
    axes = figure.axes[0]
    assert axes.get_ylabel() == "top-1 accuracy (%)"
    assert sorted(patch.get_height() for patch in axes.patches) == pytest.approx([50.0, 70.0, 90.0])
    texts = _legend_texts(axes)
    assert "dashed: group mean" in texts
    assert any(text.startswith("vtab-v1 mean 70.0 *") for text in texts)
    assert axes.get_ylim() == (0, 100)
    _assert_legend_outside(figure)


# ---- count axes with one value or a few: ticks at the counts, never 4.8 ... 5.2 --------------


def _visible_xticks(axes) -> list[float]:
    low, high = sorted(axes.get_xlim())
    return [float(t) for t in axes.get_xticks() if low <= t <= high]


def test_a_count_axis_with_one_value_has_one_tick_at_it():
    from sampler_server.metrics.md.plots import robustness_figure, series

    figure = robustness_figure(series([("a", 5, 0.7), ("a", 5, 0.8), ("b", 5, 0.6)]), "ways", "query accuracy",
                               "accuracy vs ways", "episodes")
    _laid_out(figure)
    assert _visible_xticks(figure.axes[0]) == [5.0]
    assert [t.get_text() for t in figure.axes[0].get_xticklabels()] == ["5"]


def test_a_count_axis_with_two_close_values_has_whole_number_ticks_only():
    from sampler_server.metrics.md.plots import robustness_figure, series

    figure = robustness_figure(series([("a", 5, 0.7), ("a", 6, 0.8)]), "ways", "query accuracy", "accuracy vs ways",
                               "episodes")
    _laid_out(figure)
    _assert_integer_ticks(figure.axes[0])
    assert {5.0, 6.0} <= set(_visible_xticks(figure.axes[0]))
