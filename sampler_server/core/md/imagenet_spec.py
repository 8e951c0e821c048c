"""Glue: a DatasetSpec for WordNet-split sources (ILSVRC-2012) from a manifest with wnids.

An ILSVRC store's manifest lists classes with wnids and no split (the converter
leaves splits to the hierarchy). ``imagenet_spec`` computes them with
``hierarchy.imagenet.build_imagenet_split`` from the shipped WordNet 3.0 graph:
MD: valid = leaves under carnivore, test = leaves under device, train = the rest
(712 / 158 / 130 with the ILSVRC-2012 classes); MD_V2: every class in train. Each
split's internal nodes spanning at least 5 leaves, with NO upper bound, become
``NodeSpec``s sorted by wnid, their leaves sorted class ids: the span cap is a
per-request choice (``EpisodeConfig.max_span_leaves``, default the reference's 392)
that ``md.plan`` applies, so one cached spec per (store, variant) serves every
cap. Splits already present in a manifest are ignored: the hierarchy is the only
authority for these sources. The result is a pure function of the manifest, the
variant and the graph.

``spec_for_manifest`` picks the right builder for any manifest.

Ahead of time: ``precompute_split`` computes both variants' results once (at pack
time) as the bytes of ``hierarchy.precomputed``; ``precomputed_spec`` builds the spec
from them without WordNet or networkx. Both paths share ``spec_from_split``, so the
two specs are equal (tests check it on the ILSVRC-2012 classes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sampler_server.core.hierarchy.imagenet import MIN_SPAN, ImageNetVariant, build_imagenet_split
from sampler_server.core.hierarchy.precomputed import VariantSplit, decode_split, encode_split
from sampler_server.core.hierarchy.wordnet import derived_file_digest
from sampler_server.core.spec import ClassSpec, DatasetSpec, NodeSpec
from sampler_server.core.split import Split
from sampler_server.errors import FailedPrecondition, InvalidArgument

if TYPE_CHECKING:
    import networkx as nx


def parse_variant(variant: ImageNetVariant | str) -> ImageNetVariant:
    try:
        return ImageNetVariant(variant)
    except ValueError:
        allowed = ", ".join(v.value for v in ImageNetVariant)
        raise InvalidArgument(f"imagenet split: got {variant!r}, expected one of {allowed}") from None


def imagenet_spec(
    manifest: Any, *, variant: ImageNetVariant | str = ImageNetVariant.MD, graph: nx.DiGraph | None = None
) -> DatasetSpec:
    """The spec of a WordNet-split store: per-class splits and per-split eligible nodes."""
    return spec_from_split(manifest, split_from_wordnet(manifest, variant=variant, graph=graph))


def split_from_wordnet(
    manifest: Any, *, variant: ImageNetVariant | str = ImageNetVariant.MD, graph: nx.DiGraph | None = None
) -> VariantSplit:
    """Each class's split and each split's candidate nodes, computed from the WordNet graph."""
    variant = parse_variant(variant)
    infos = _wnid_classes(manifest)
    id_of = {str(info.wnid): int(info.id) for info in infos}
    # No upper bound here: a node spans at most every class, and the plan applies the request's cap.
    split_hierarchy = build_imagenet_split(list(id_of), graph=graph, variant=variant, max_span=max(len(id_of), MIN_SPAN))
    split_of: dict[int, Split] = {}
    nodes: dict[Split, tuple[tuple[str, tuple[int, ...]], ...]] = {}
    for split in Split:
        part = split_hierarchy.for_split(split.value)
        for wnid in part.leaves:
            split_of[id_of[wnid]] = split
        listed = ((node.wnid, tuple(sorted(id_of[leaf] for leaf in node.leaves))) for node in part.eligible)
        nodes[split] = tuple(sorted(listed))
    return VariantSplit(splits=tuple(split_of[int(info.id)] for info in infos), nodes=nodes)


def spec_from_split(manifest: Any, result: VariantSplit) -> DatasetSpec:
    """The spec of ``manifest``'s classes split as ``result`` says (from WordNet or precomputed)."""
    infos = _wnid_classes(manifest)
    classes = tuple(
        ClassSpec(
            id=int(info.id),
            name=str(info.name),
            start=int(info.start),
            count=int(info.end) - int(info.start),
            split=result.splits[int(info.id)],
            wnid=str(info.wnid),
            group=None,
        )
        for info in infos
    )
    hierarchy = {split: tuple(NodeSpec(wnid, leaves) for wnid, leaves in result.nodes.get(split, ()))
                 for split in Split}
    return DatasetSpec(
        source=str(manifest.source), fingerprint=str(manifest.fingerprint), classes=classes, hierarchy=hierarchy
    )


def precompute_split(manifest: Any) -> bytes:
    """Both variants' results for ``manifest``'s classes, from the shipped WordNet graph, as
    the bytes ``precomputed_spec`` reads (``hierarchy.precomputed``).

    Raises:
        FailedPrecondition, InvalidArgument: as ``imagenet_spec`` (a class without a wnid,
            a wnid WordNet does not know, ...).
    """
    results = {variant: split_from_wordnet(manifest, variant=variant) for variant in ImageNetVariant}
    return encode_split(results, wnids=_wnids(manifest), wordnet=derived_file_digest())


def read_precomputed(
    manifest: Any, blob: bytes, *, where: str = "WordNet split"
) -> dict[ImageNetVariant, VariantSplit]:
    """Every variant's result in ``precompute_split``'s bytes, for ``spec_from_split`` (no
    WordNet graph needed).

    Raises:
        SplitFileError: ``blob`` is damaged, of another format, or not computed for these
            classes from the shipped WordNet file by this split algorithm (one line
            naming ``where``).
    """
    _wnid_classes(manifest)
    return decode_split(blob, wnids=_wnids(manifest), wordnet=derived_file_digest(), where=where)


def precomputed_spec(
    manifest: Any, blob: bytes, *, variant: ImageNetVariant | str = ImageNetVariant.MD, where: str = "WordNet split"
) -> DatasetSpec:
    """The spec ``imagenet_spec`` gives, read from ``precompute_split``'s bytes (see
    ``read_precomputed``)."""
    return spec_from_split(manifest, read_precomputed(manifest, blob, where=where)[parse_variant(variant)])


def _wnid_classes(manifest: Any) -> tuple[Any, ...]:
    """The manifest's classes, each checked to carry a wnid."""
    infos = tuple(manifest.classes)
    missing = [info.name for info in infos if not info.wnid]
    if not infos or missing:
        raise FailedPrecondition(
            f"source {manifest.source!r}: a WordNet split needs a wnid on every class"
            + (f"; class {missing[0]!r} has none" if missing else "; the store has no classes")
        )
    return infos


def _wnids(manifest: Any) -> list[str]:
    return [str(info.wnid) for info in manifest.classes]


UNSPLIT_WNID_SOURCES = frozenset({"imagenet21k"})  # wnids, no split, and not MD's WordNet split either


def needs_wordnet_split(manifest: Any) -> bool:
    """True for a store whose classes all carry wnids and none a split (ILSVRC as packed).
    ImageNet-21K looks the same but is split by ImageNet-CoG's levels instead."""
    if manifest.source in UNSPLIT_WNID_SOURCES:
        return False
    infos = tuple(manifest.classes)
    return bool(infos) and all(info.wnid and info.split is None for info in infos)


def spec_for_manifest(manifest: Any, *, imagenet_variant: ImageNetVariant | str = ImageNetVariant.MD) -> DatasetSpec:
    """``imagenet_spec`` for WordNet-split stores, ``DatasetSpec.from_manifest`` for the others."""
    if needs_wordnet_split(manifest):
        return imagenet_spec(manifest, variant=imagenet_variant)
    return DatasetSpec.from_manifest(manifest)
