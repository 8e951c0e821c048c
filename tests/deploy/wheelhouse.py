"""Wheels of what this environment has installed, so a fresh venv installs offline.

The image installs ``sampler-server[server]`` from an index; a test cannot reach one.
It installs instead from the distributions already in this virtualenv, each packed
back into a wheel (its files as RECORD lists them, under site-packages; scripts are
left out, as pip writes them again from entry_points.txt), with ``--no-index``. What
pip then resolves, version pins included, is what the wheel's metadata asks for.

Each module goes with the bytecode this virtualenv already compiled for it, re-headed as an
unchecked hash-based pyc (PEP 552): pip writes the files with new modification times, so
timestamp pycs would be thrown away and the fresh venv's first ``import torch`` would compile
torch again (15 s of CPU on our 2-core machine, for each venv a test installs).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as metadata
import importlib.util
import re
import struct
import zipfile
from collections.abc import Iterable
from pathlib import Path

from packaging import tags
from packaging.requirements import Requirement

_LEFT_OUT = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}


def wheel_requirements(wheel: Path, extras: Iterable[str]) -> list[Requirement]:
    """The Requires-Dist of a wheel that apply with ``extras`` on this interpreter."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode()
    found = []
    for line in text.splitlines():
        if line.startswith("Requires-Dist:"):
            requirement = Requirement(line.partition(":")[2].strip())
            if _applies(requirement, extras):
                found.append(requirement)
    return found


def closure(requirements: Iterable[Requirement]) -> dict[str, metadata.Distribution]:
    """Installed distributions needed by ``requirements``, transitively, by canonical name."""
    needed: dict[str, metadata.Distribution] = {}
    pending = list(requirements)
    while pending:
        requirement = pending.pop()
        key = canonical(requirement.name)
        if key in needed:
            continue
        distribution = metadata.distribution(requirement.name)
        needed[key] = distribution
        for text in distribution.requires or ():
            nested = Requirement(text)
            if _applies(nested, requirement.extras):
                pending.append(nested)
    return needed


def repack(distribution: metadata.Distribution, directory: Path) -> Path:
    """``distribution`` as a wheel file in ``directory`` (stored, not compressed: it is local)."""
    files = [f for f in distribution.files or () if not str(f).startswith("..")
             and "__pycache__" not in f.parts and f.name not in _LEFT_OUT]
    info = next(f.parts[0] for f in distribution.files if f.parts[0].endswith(".dist-info"))
    wheel_text = Path(distribution.locate_file(f"{info}/WHEEL")).read_text()
    supported = {str(t) for t in tags.sys_tags()}
    tag = next(line.split(":", 1)[1].strip() for line in wheel_text.splitlines()
               if line.startswith("Tag:") and line.split(":", 1)[1].strip() in supported)  # e.g. py3 of py2.py3
    name = re.sub(r"[-_.]+", "_", distribution.metadata["Name"])
    target = directory / f"{name}-{distribution.version}-{tag}.whl"
    records = []
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as archive:
        def add(name: str, data: bytes) -> None:
            archive.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append(f"{name},sha256={digest},{len(data)}")

        for relative in files:
            source = Path(distribution.locate_file(relative))
            data = source.read_bytes()
            add(str(relative), data)
            if relative.suffix == ".py" and (compiled := _unchecked_pyc(source, data)) is not None:
                add(importlib.util.cache_from_source(str(relative)), compiled)
        records.append(f"{info}/RECORD,,")
        archive.writestr(f"{info}/RECORD", "\n".join(records) + "\n")
    return target


def _unchecked_pyc(source: Path, data: bytes) -> bytes | None:
    """The pyc compiled here for ``source``, valid whatever its installed copy's mtime: None
    where there is none, or it is not a timestamp pyc of this very source."""
    try:
        compiled = Path(importlib.util.cache_from_source(str(source))).read_bytes()
    except OSError:
        return None
    if compiled[:4] != importlib.util.MAGIC_NUMBER or len(compiled) < 16:
        return None
    flags, mtime, size = struct.unpack("<III", compiled[4:16])
    stat = source.stat()
    if flags != 0 or mtime != int(stat.st_mtime) & 0xFFFFFFFF or size != len(data) & 0xFFFFFFFF:
        return None
    return compiled[:4] + struct.pack("<I", 0b01) + importlib.util.source_hash(data) + compiled[16:]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _applies(requirement: Requirement, extras: Iterable[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in ("", *extras))
