"""Regenerate ``sampler_common/wire/gen`` from ``protos/`` (needs grpcio-tools).

protoc writes imports relative to the proto root (``from sampler.v1 import ...``);
the generated tree lives inside this package, so those imports are rewritten to
absolute ones. The output is deterministic for a given grpcio-tools version.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PROTO_ROOT = REPO_ROOT / "protos"
GEN_PACKAGE = "sampler_common.wire.gen"
GEN_DIR = REPO_ROOT / "sampler_common" / "wire" / "gen"


def proto_files() -> list[Path]:
    return sorted(PROTO_ROOT.rglob("*.proto"))


def generate(output: Path) -> list[Path]:
    from grpc_tools import protoc

    output.mkdir(parents=True, exist_ok=True)
    files = [str(p.relative_to(PROTO_ROOT)) for p in proto_files()]
    import grpc_tools

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    code = protoc.main([
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={output}",
        f"--pyi_out={output}",
        f"--grpc_python_out={output}",
        *files,
    ])
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}")
    written = sorted(p for p in output.rglob("*.py*") if p.is_file())
    packages = {p.parent for p in written} | {output}
    for directory in sorted(packages):
        while True:
            init = directory / "__init__.py"
            if not init.exists():
                init.write_text("")
            if directory == output:
                break
            directory = directory.parent
    top_packages = {p.relative_to(PROTO_ROOT).parts[0] for p in proto_files()}
    pattern = re.compile(r"^from (" + "|".join(map(re.escape, sorted(top_packages))) + r")((\.\w+)*) import", re.M)
    for path in written:
        text = path.read_text()
        fixed = pattern.sub(lambda m: f"from {GEN_PACKAGE}.{m.group(1)}{m.group(2)} import", text)
        path.write_text(fixed)
    return sorted(p for p in output.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=GEN_DIR)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "gen"
        generate(fresh)
        if args.output.exists():
            shutil.rmtree(args.output)
        shutil.copytree(fresh, args.output)
    print(f"generated {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
