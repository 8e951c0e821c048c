"""What a pack leaves out that published Meta-Dataset results depend on.

Packing an MD source without its official class-split file (or ILSVRC-2012 without
MD's duplicate lists) still gives a working store, but not the classes the papers
used: its episodes cannot be compared with published numbers. ``reference_warnings``
says so before any file is read, naming the official files and where they live.
Pure: it looks at the source name and the options, never at the input.
"""

from __future__ import annotations

from sampler_server.pack.plan import ConverterOptions

REFERENCE_REPOSITORY = "https://github.com/google-research/meta-dataset"
SPLITS_FOLDER = "meta_dataset/dataset_conversion/splits"
DUPLICATES = tuple(
    f"meta_dataset/dataset_conversion/ImageNet_{other}_duplicates.txt"
    for other in ("CUBirds", "Caltech101", "Caltech256")
)
OFFICIAL_SPLIT_SOURCES = ("aircraft", "cu_birds", "dtd", "fungi", "mscoco", "quickdraw", "vgg_flower")
"""MD sources whose published classes come from a split file the default rule does not
reproduce. Omniglot's split is a rule over alphabets (reproduced exactly), and Traffic
Signs' file puts every class in test, as the default does."""


def reference_warnings(source: str, options: ConverterOptions) -> list[str]:
    """One line per missing official input, empty when the pack matches the reference's."""
    warnings = []
    if source in OFFICIAL_SPLIT_SOURCES and options.class_splits is None:
        warnings.append(
            f"warning: {source} packed without --class-splits: its classes are split by the documented default "
            f"rule, not Meta-Dataset's official split, so results will not match published ones; the official "
            f"file is {SPLITS_FOLDER}/{source}_splits.json in {REFERENCE_REPOSITORY}"
        )
    if source == "ilsvrc_2012" and not options.duplicates:
        warnings.append(
            "warning: ilsvrc_2012 packed without --duplicates: training images that duplicate CUB-200 and Caltech "
            "images stay in, unlike Meta-Dataset's ImageNet, so results will not match published ones; the "
            f"official lists are {', '.join(DUPLICATES)} in {REFERENCE_REPOSITORY} (pass each with --duplicates)"
        )
    return warnings
