"""The demo's last leg: ``evaluate`` of the torch checkpoint, then its card (the whole leg runs in ``make demo``)."""

from __future__ import annotations

from sampler_server.cli import demo_cmd


def test_the_evaluate_leg_parses_for_every_protocol_the_demo_serves(tmp_path):
    from clients.evaluate_args import parse_evaluate_args

    weights = tmp_path / "checkpoint.pt"
    weights.write_bytes(b"")
    for protocols in ("md,vtab,cog", "md"):
        args = parse_evaluate_args("torch", ["--server", "127.0.0.1:1", "--run", demo_cmd.EVALUATE_RUN,
                                             "--weights", str(weights), *demo_cmd.EVALUATE, "--protocols", protocols,
                                             "--feature-cache", str(tmp_path / "features"), "--device", "cpu"])
        assert args.md_sources == list(demo_cmd.EVAL_SOURCES) and args.tasks == list(demo_cmd.VTAB_TASKS)
        assert args.protocols == tuple(protocols.split(","))


def test_the_card_names_the_evaluated_run_and_the_control_model_run(tmp_path, capsys, monkeypatch):
    from sampler_server.cli import demo_tables

    seen = []
    monkeypatch.setattr("sampler_server.cli.main.main", lambda argv: seen.append(argv) or print("# Report card") or 0)
    text = demo_tables.card(tmp_path, tmp_path, [demo_cmd.EVALUATE_RUN, "demo-control-model"])
    (argv,) = seen
    assert argv[argv.index("--run") + 1] == demo_cmd.EVALUATE_RUN and "demo-control-model" in argv
    assert "--html" in argv and text.startswith("$ sampler-server report --card") and text.endswith("# Report card\n")
    assert capsys.readouterr().out == ""  # the caller prints it (DemoConsole.table)
