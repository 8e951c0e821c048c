"""Where compiled training steps persist between runs (``--compile-cache``), and which bucket
shapes of a step are already in it.

Why: a compiled step is compiled per bucket shape (one static graph each, the form that beats
the eager step: bench/README.md, "Compiled steps"), and each shape costs 10-35 s of compilation
on a GPU. PyTorch keeps what it compiles (inductor's FX graph cache and AOTAutograd's cache)
in one directory, keyed by the graph, the input shapes, the versions and the device; pointed
at a directory that outlives the run, a second run loads every shape in about a second
instead of compiling it.

The layout under the cache directory:
- ``inductor/``: PyTorch's own caches (``TORCHINDUCTOR_CACHE_DIR``); their keys are PyTorch's,
  so a stale entry is never used, only missed;
- ``shapes/<step key>/<rows>``: one empty file per bucket of rows whose step was compiled into
  ``inductor/``, for the step that ``CompileKey`` names. These are only hints (what to count
  as cached on the run's first line, what the background compiler may skip): a hint that is
  wrong costs a compilation, never a wrong result.

Pure: the standard library only; no torch.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

CACHE_DIR_NAME = Path("sampler-server") / "torch-compile"
INDUCTOR_DIR = "inductor"
SHAPES_DIR = "shapes"


def default_compile_cache() -> Path:
    """``--compile-cache`` when not given: the user's cache directory (``$XDG_CACHE_HOME``,
    else ``~/.cache``), shared by every run, so the same command run again finds its shapes."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / CACHE_DIR_NAME


@dataclass(frozen=True)
class CompileKey:
    """What a compiled step's graphs depend on besides the row count: the model and its input
    convention, the batch norm, the precision, the determinism switch and where it runs."""

    backbone: str
    image_size: int
    preprocessing: str
    batch_norm: str
    precision: str
    deterministic: bool
    device: str  # the device's name (a GPU's model), not its index
    versions: str  # torch's version (and anything else whose change invalidates the code)

    def digest(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


class CompileCache:
    """One ``--compile-cache`` directory: PyTorch's caches and the shapes recorded per step."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @property
    def inductor_dir(self) -> Path:
        return self.root / INDUCTOR_DIR

    def _shapes(self, key: CompileKey) -> Path:
        return self.root / SHAPES_DIR / key.digest()

    def prepare(self) -> None:
        """Create the directories; an unusable path is a ValueError naming it."""
        try:
            self.inductor_dir.mkdir(parents=True, exist_ok=True)
            (self.root / SHAPES_DIR).mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ValueError(f"compile cache: cannot create {self.root}: {error.strerror or error}") from None

    def cached_rows(self, key: CompileKey) -> frozenset[int]:
        """The bucket sizes whose step ``key`` names was compiled into this cache."""
        try:
            names = os.listdir(self._shapes(key))
        except FileNotFoundError:
            return frozenset()
        return frozenset(int(name) for name in names if name.isdigit())

    def record(self, key: CompileKey, rows: int) -> None:
        """Note that the step ``key`` names is compiled for ``rows`` (after PyTorch wrote it)."""
        directory = self._shapes(key)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / str(int(rows))).touch()


def describe_cache(cached: int, root: Path) -> str:
    """The run's first-line words for the compile cache (the shapes it holds are loaded at the
    first step, which takes that step seconds: said here so the pause is not a mystery)."""
    shapes = "1 bucket shape" if cached == 1 else f"{cached} bucket shapes"
    loaded = ", loaded at the first step" if cached else ""
    return f"{shapes} compiled before, in {root}{loaded}"
