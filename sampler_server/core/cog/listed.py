"""The 70 concepts the ImageNet-CoG authors removed by hand (Table 2 of the paper).

After the automatic eligibility rules they inspected the remaining unseen concepts
and dropped 70 judged offensive or too ambiguous to label (e.g. "people", "orphan").
The list is a fact of the benchmark, copied from Table 2 (supplementary A.1) in the
table's order, which is wnid order; a test checks it has 70 distinct WordNet 3.0
noun wnids.
"""

from __future__ import annotations

LISTED_WNIDS: tuple[str, ...] = (
    "n00005787", "n00288384", "n00466377", "n00466524", "n00466630",
    "n00474568", "n00475014", "n00475273", "n00475403", "n00483313",
    "n00483409", "n00483508", "n00483848", "n01314388", "n01314663",
    "n01314781", "n01317294", "n01317813", "n01317916", "n01318381",
    "n01318894", "n01321770", "n01322221", "n01323355", "n01323493",
    "n01323599", "n01324431", "n01324610", "n01515303", "n01517966",
    "n01526521", "n01862399", "n01887474", "n01888181", "n02075612",
    "n02152881", "n02153109", "n02156871", "n02157206", "n02236355",
    "n02377063", "n02377291", "n02472987", "n02475078", "n02475669",
    "n02759257", "n02767665", "n02771004", "n03198500", "n03300216",
    "n03349771", "n03393017", "n03443005", "n03680512", "n04164406",
    "n04193377", "n04224543", "n04425804", "n04516354", "n04979002",
    "n06255081", "n06272612", "n06274760", "n07942152", "n08182379",
    "n08242223", "n08578517", "n09828216", "n10300303", "n13918274",
)
"""Table 2's wnids, sorted."""
