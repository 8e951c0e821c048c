"""Regenerate ``sampler_common/wire/gen`` from ``protos/`` (needs grpcio-tools; ``make proto``).

A developer's tool, not part of any installed package: run it as
``python tools/codegen.py`` from anywhere (paths are relative to this file).

protoc writes imports relative to the proto root (``from sampler.v1 import ...``);
the generated tree lives inside a package, so those imports are rewritten to
absolute ones under ``--package``. The output is deterministic for a given
grpcio-tools version; tests/wire/test_codegen.py regenerates it and fails when the
committed tree is stale. ``--protos`` and ``--package`` generate another tree (the
old-proto compatibility test builds a client from a snapshot of earlier protos).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PROTO_ROOT = REPO_ROOT / "protos"
GEN_PACKAGE = "sampler_common.wire.gen"
GEN_DIR = REPO_ROOT / "sampler_common" / "wire" / "gen"


def proto_files(proto_root: Path) -> list[Path]:
    return sorted(proto_root.rglob("*.proto"))


def generate(output: Path, proto_root: Path = PROTO_ROOT, package: str = GEN_PACKAGE) -> list[Path]:
    """Write the Python modules of every .proto under ``proto_root`` into ``output``,
    their cross-imports made absolute under ``package`` (the dotted name ``output``
    is imported as). Returns every file written, sorted."""
    import grpc_tools
    from grpc_tools import protoc

    protos = proto_files(proto_root)
    if not protos:
        raise SystemExit(f"{proto_root}: no .proto files")
    output.mkdir(parents=True, exist_ok=True)
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    code = protoc.main([
        "protoc",
        f"-I{proto_root}",
        f"-I{well_known}",
        f"--python_out={output}",
        f"--pyi_out={output}",
        f"--grpc_python_out={output}",
        *(str(p.relative_to(proto_root)) for p in protos),
    ])
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")
    written = sorted(p for p in output.rglob("*.py*") if p.is_file())
    for directory in sorted({p.parent for p in written} | {output}):
        while True:
            init = directory / "__init__.py"
            if not init.exists():
                init.write_text("")
            if directory == output:
                break
            directory = directory.parent
    top_packages = {p.relative_to(proto_root).parts[0] for p in protos}
    pattern = re.compile(r"^from (" + "|".join(map(re.escape, sorted(top_packages))) + r")((\.\w+)*) import", re.M)
    for path in written:
        text = path.read_text()
        path.write_text(pattern.sub(lambda m: f"from {package}.{m.group(1)}{m.group(2)} import", text))
    return sorted(p for p in output.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=GEN_DIR, help="the tree to (re)write (default: %(default)s)")
    parser.add_argument("--protos", type=Path, default=PROTO_ROOT, help="the proto root (default: %(default)s)")
    parser.add_argument("--package", default=GEN_PACKAGE,
                        help="the dotted package --output is imported as (default: %(default)s)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "gen"
        generate(fresh, args.protos.resolve(), args.package)
        if args.output.exists():
            shutil.rmtree(args.output)
        shutil.copytree(fresh, args.output)
    print(f"generated {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
