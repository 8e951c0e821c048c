"""One converter module per source, each reading that source's original layout.

A converter module defines ``SOURCE`` (the store's source name), ``DESCRIPTION``
(one line for ``--help``), ``ACCEPTS`` (the ``ConverterOptions`` fields it uses) and
``plan(input_dir, options) -> SourcePlan``. It reads annotation files and lists
images; it never decodes images (the pipeline does that, on worker processes).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from sampler_server.errors import NotFound

CONVERTERS: dict[str, str] = {
    "ilsvrc_2012": "sampler_server.pack.sources.ilsvrc",
    "omniglot": "sampler_server.pack.sources.omniglot",
    "aircraft": "sampler_server.pack.sources.aircraft",
    "cu_birds": "sampler_server.pack.sources.cu_birds",
    "dtd": "sampler_server.pack.sources.dtd",
    "quickdraw": "sampler_server.pack.sources.quickdraw",
    "fungi": "sampler_server.pack.sources.fungi",
    "vgg_flower": "sampler_server.pack.sources.vgg_flower",
    "traffic_sign": "sampler_server.pack.sources.traffic_sign",
    "mscoco": "sampler_server.pack.sources.mscoco",
    "image_folder": "sampler_server.pack.sources.image_folder",
    "vtab": "sampler_server.pack.sources.vtab",
    "imagenet21k": "sampler_server.pack.sources.imagenet21k",
}


def available() -> list[str]:
    return [name for name in CONVERTERS if _importable(name)]


def _importable(name: str) -> bool:
    try:
        importlib.import_module(CONVERTERS[name])
    except ModuleNotFoundError:
        return False
    return True


def get_converter(source: str) -> ModuleType:
    if source not in CONVERTERS or not _importable(source):
        raise NotFound(f"unknown source {source!r}; allowed: {', '.join(available())}")
    return importlib.import_module(CONVERTERS[source])
