"""deploy/compose.yaml (one lab host: the sampler and PostgreSQL) agrees with the image and
with serve: every SAMPLER_* variable is a serve option, the stores are mounted read-only
where the image reads them, and metric reports go to the compose PostgreSQL."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
import yaml
from deploy_files import DEPLOY, REPO, dockerfile_stages, load_script

COMPOSE = yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def _interpolated(value: str, variables: dict[str, str]) -> str:
    """Compose's ${NAME}, ${NAME:-default} and ${NAME:?error} with ``variables``."""
    def one(match: re.Match) -> str:
        name, operator, rest = match.group(1), match.group(2) or "", match.group(3) or ""
        if variables.get(name):
            return variables[name]
        assert operator != ":?", f"compose would stop: {name} unset ({rest})"
        return rest if operator == ":-" else ""
    return re.sub(r"\$\{(\w+)(:-|:\?)?([^}]*)\}", one, str(value))


def test_the_sampler_service_runs_the_image_over_read_only_stores() -> None:
    sampler = COMPOSE["services"]["sampler"]
    assert (REPO / "deploy" / sampler["build"]["context"] / sampler["build"]["dockerfile"]).resolve() == \
        (DEPLOY / "Dockerfile").resolve()
    data = dockerfile_stages()["runtime"].env()["SAMPLER_DATA"]
    mounts = [_interpolated(v, {"STORES": "/srv/stores"}) for v in sampler["volumes"]]
    assert f"/srv/stores:{data}:ro" in mounts
    assert all(m.endswith(":ro") for m in mounts), "the sampler writes nothing but its metrics (to PostgreSQL)"
    assert sampler["read_only"] is True and sampler["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_every_variable_is_a_serve_option_and_metrics_go_to_postgres() -> None:
    entrypoint = load_script("entrypoint")
    options = entrypoint.serve_options()
    environment = COMPOSE["services"]["sampler"]["environment"]
    assert set(environment) <= set(options), sorted(set(environment) - set(options))
    values = {name: _interpolated(value, {"POSTGRES_PASSWORD": "pw", "STORES": "/srv/stores"})
              for name, value in environment.items()}
    arguments = entrypoint.arguments_from_environment(values, options)
    assert "--tls-cert" not in arguments and "--log-json" in arguments  # empty variables stay off
    url = urlsplit(values["SAMPLER_METRICS"])
    assert url.scheme == "postgresql" and url.hostname in COMPOSE["services"] and url.port == 5432
    postgres = COMPOSE["services"][url.hostname]
    assert (url.username, url.password, url.path) == (
        postgres["environment"]["POSTGRES_USER"], "pw", "/" + postgres["environment"]["POSTGRES_DB"])
    assert any(v.endswith(":/var/lib/postgresql/data") for v in postgres["volumes"])
    assert "pg_isready" in postgres["healthcheck"]["test"]


def test_compose_stops_without_the_stores_or_a_password() -> None:
    sampler = COMPOSE["services"]["sampler"]
    with pytest.raises(AssertionError, match="POSTGRES_PASSWORD unset"):
        _interpolated(sampler["environment"]["SAMPLER_METRICS"], {})
    with pytest.raises(AssertionError, match="STORES unset"):
        _interpolated(sampler["volumes"][0], {})
