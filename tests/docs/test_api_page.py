"""docs/api.md names every public name of the clients, and only those, each with its signature.

Public is what the page says it is: the names in ``__all__`` of ``clients.core``,
``clients.torch`` and ``clients.tf``, and the public methods and properties of
``SamplerClient`` (the one class whose methods are the API). Each has a heading of its
dotted name in backticks (``### `clients.torch.EpisodeDataset` ``); under it, a callable's
signature as ``name(params)`` in inline code, parameter names and defaults without
annotations, as ``api_signature`` renders it. A name added, removed or re-signed in the
code and not on the page (or the reverse) fails here."""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable

import pytest
from doc_blocks import REPO_ROOT

PAGE = "docs/api.md"
MODULES = ("clients.core", "clients.torch", "clients.tf")
HEADING = re.compile(r"^#{3,4} `(?P<name>clients\.[\w.]+)`\s*$")


def api_signature(name: str, target: Callable) -> str:
    """``name(a, b, *, c=1)``: what the page shows of a callable (classes: their constructor)."""
    parts, starred = [], False
    for parameter in inspect.signature(target).parameters.values():
        if parameter.name == "self":  # a method, shown as called on an instance
            continue
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            parts.append(f"*{parameter.name}")
            starred = True
        elif parameter.kind is inspect.Parameter.VAR_KEYWORD:
            parts.append(f"**{parameter.name}")
        else:
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY and not starred:
                parts.append("*")
                starred = True
            default = "" if parameter.default is inspect.Parameter.empty else f"={parameter.default!r}"
            parts.append(f"{parameter.name}{default}")
    return f"{name}({', '.join(parts)})"


def public_api() -> dict[str, str | None]:
    """Dotted name -> the signature the page must show (None: a constant or a property)."""
    found: dict[str, str | None] = {}
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            found[f"{module_name}.{name}"] = api_signature(name, value) if callable(value) else None
    client = importlib.import_module("clients.core").SamplerClient
    for name in dir(client):
        if name.startswith("_"):
            continue
        static = inspect.getattr_static(client, name)
        found[f"clients.core.SamplerClient.{name}"] = (
            None if isinstance(static, property) else api_signature(f"SamplerClient.{name}", getattr(client, name)))
    return found


def page_sections() -> dict[str, str]:
    """Dotted name of each heading -> the text under it, up to the next heading."""
    sections: dict[str, str] = {}
    current, fenced = None, False
    for line in (REPO_ROOT / PAGE).read_text().split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        if line.startswith("#") and not fenced:
            match = HEADING.match(line)
            current = match["name"] if match else None
            if current is not None:
                assert current not in sections, f"{PAGE}: {current} has two headings"
                sections[current] = ""
        elif current is not None:
            sections[current] += line + "\n"
    return sections


@pytest.fixture(scope="module")
def api() -> dict[str, str | None]:
    return public_api()


def test_every_public_name_has_its_entry(api):
    missing = sorted(set(api) - set(page_sections()))
    assert not missing, f"{PAGE} lacks an entry (### `name`) for: {missing}"


def test_the_page_names_nothing_that_does_not_exist(api):
    unknown = sorted(set(page_sections()) - set(api))
    assert not unknown, f"{PAGE} has entries for names that are not public (or do not exist): {unknown}"


def test_each_entry_shows_the_current_signature(api):
    sections = page_sections()
    stale = [f"{name}: expected `{signature}`" for name, signature in sorted(api.items())
             if signature is not None and name in sections and f"`{signature}`" not in sections[name]]
    assert not stale, f"{PAGE} shows another signature than the code's:\n" + "\n".join(stale)


def test_the_page_is_linked_from_the_docs_index():
    assert "](api.md)" in (REPO_ROOT / "docs" / "README.md").read_text()
