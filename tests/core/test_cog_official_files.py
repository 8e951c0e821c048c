"""naver/cog's level and split pickles: the restricted unpickler refuses code and custom
classes, reads the reference's structure (numpy arrays, numpy 1.x and 2.x names, pickle
protocols 2 to 5), and bad structure is one line naming the file."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from sampler_server.core.cog.official_files import (
    image_key,
    load_restricted,
    parse_concepts_split_file,
    parse_levels_file,
)
from sampler_server.core.cog.official_levels import build_official_split, files_identity
from sampler_server.core.cog.splits import SplitRequest, build_split
from sampler_server.errors import InputFormatError

LEVELS = [["n09246464", "n12998815"], ["n07739125", "n04380346"], ["n02958343", "n04466871"],
          ["n01503061", "n02084071"], ["n03791053", "n07697537"]]


class Custom:
    """A class a pickle could name: never constructed by the reader."""

    def __init__(self, value: str) -> None:
        self.value = value


class RunsCommand:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def reference_split_file(wnids: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """The reference's shape: wnid -> {"train": array of names, "test": array of names}."""
    out = {}
    for i, wnid in enumerate(wnids):
        train = np.array([f"{wnid}/{wnid}_{n}.JPEG" for n in (9, 3, 7, 1)])
        test = np.array([f"/{wnid}/{wnid}_{n}.JPEG" for n in (5, 2)], dtype=object if i % 2 else str)
        out[wnid] = {"train": train, "test": test}
    return out


def test_a_pickle_that_calls_os_system_is_refused_and_never_runs(tmp_path) -> None:
    marker = tmp_path / "ran"
    data = pickle.dumps(RunsCommand(f"touch {marker}"))
    with pytest.raises(InputFormatError) as error:
        load_restricted(data, source="levels.pkl")
    message = str(error.value)
    assert "\n" not in message and message.startswith("levels.pkl: ")
    assert ("posix.system" in message or "os.system" in message) and "a pickle is code" in message
    assert not marker.exists()


def test_a_pickle_of_a_custom_class_is_refused() -> None:
    data = pickle.dumps([[Custom("n01440764")]])
    with pytest.raises(InputFormatError, match=r"^split\.pkl: the pickle names .*Custom, which is not read"):
        load_restricted(data, source="split.pkl")
    with pytest.raises(InputFormatError, match="persistent"):
        load_restricted(b"\x80\x02X\x01\x00\x00\x00aQ.", source="split.pkl")  # BINPERSID


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_the_reference_structure_with_numpy_arrays_is_read(protocol: int) -> None:
    levels = parse_levels_file(pickle.dumps([list(reversed(level)) for level in LEVELS], protocol=protocol),
                               source="levels.pkl")
    assert levels.levels == tuple(tuple(sorted(level)) for level in LEVELS)
    assert levels.concepts("L3") == ("n02958343", "n04466871")
    wnids = [w for level in LEVELS for w in level]
    images = parse_concepts_split_file(pickle.dumps(reference_split_file(wnids), protocol=protocol),
                                       source="split.pkl")
    train, test = images.of("n09246464")
    assert train.tolist() == [f"n09246464/n09246464_{n}.JPEG" for n in (1, 3, 7, 9)]  # sorted, as the reference
    assert test.tolist() == ["/n09246464/n09246464_2.JPEG", "/n09246464/n09246464_5.JPEG"]
    assert image_key("n09246464", test[0]) == "n09246464/n09246464_2.JPEG"
    assert image_key("n09246464", "n09246464_2.JPEG") == "n09246464/n09246464_2.JPEG"


def test_numpy_1_module_names_read_as_numpy_2_ones() -> None:
    data = pickle.dumps({"n09246464": {"train": np.array(["a.JPEG", "b.JPEG"]), "test": np.array(["c.JPEG"])}},
                        protocol=2)
    assert b"numpy._core.multiarray" in data
    old = data.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    parsed = parse_concepts_split_file(old, source="old.pkl")
    assert parsed.of("n09246464")[0].tolist() == ["a.JPEG", "b.JPEG"]


@pytest.mark.parametrize("value, text", [
    ([["n01440764"]] * 4, r"got a list of 4, expected a list of 5 lists of wnids"),
    ([["n01440764"], ["dog"], ["n01443537"], ["n01503061"], ["n02084071"]], r"level L2 holds 'dog'"),
    ([["n01440764", "n01440764"]] + [["n01443537"]] * 4, r"level L1 lists n01440764 twice"),
    ({"L1": []}, r"got a dict, expected a list of 5"),
    ([[1.5]] * 5, r"level L1 holds 1.5"),
    ([np.array([1.0])] * 5, r"a numpy array of dtype float64"),
])
def test_bad_levels_files_are_one_line_naming_the_file(value, text: str) -> None:
    with pytest.raises(InputFormatError, match=r"^lv\.pkl: " + text):
        parse_levels_file(pickle.dumps(value), source="lv.pkl")


@pytest.mark.parametrize("value, text", [
    ([], r"got a list, expected a dict"),
    ({"dog": {"train": [], "test": []}}, r"key 'dog' is not a wnid"),
    ({"n01440764": {"train": ["a"]}}, r"concept n01440764: got \['train'\], expected a dict with keys train and test"),
    ({"n01440764": {"train": ["a", "a"], "test": []}}, r"concept n01440764 train: a is listed twice"),
    ({"n01440764": {"train": ["a"], "test": ["a"]}}, r"concept n01440764: a is in both train and test"),
    ({"n01440764": {"train": np.zeros(2), "test": []}}, r"a numpy array of dtype float64"),
    ({"n01440764": {"train": [3], "test": []}}, r"concept n01440764 train: expected a list or array of file names"),
])
def test_bad_split_files_are_one_line_naming_the_file(value, text: str) -> None:
    with pytest.raises(InputFormatError, match=r"^sp\.pkl: " + text):
        parse_concepts_split_file(pickle.dumps(value), source="sp.pkl")


def test_a_truncated_pickle_is_one_line() -> None:
    with pytest.raises(InputFormatError, match=r"^sp\.pkl: not a readable pickle") as error:
        parse_concepts_split_file(pickle.dumps(reference_split_file(["n01440764"]))[:-9], source="sp.pkl")
    assert "\n" not in str(error.value)


def test_a_split_from_the_files_never_shares_the_computed_levels_fingerprint() -> None:
    levels = parse_levels_file(pickle.dumps(LEVELS), source="levels.pkl")
    records = {w: range(10 * i, 10 * i + 10) for i, w in enumerate(sorted(w for lv in LEVELS for w in lv))}
    request = SplitRequest.parse("L1", "test")
    from_file = build_official_split("sha256:store", levels, None, request, records, None)
    computed = build_split("sha256:store", records, levels.concepts("L1"), request, level_size=2, min_images=1)
    assert from_file.record_ids.tolist() == computed.record_ids.tolist()  # same concepts, the store's partition
    assert from_file.fingerprint != computed.fingerprint
    other = parse_levels_file(pickle.dumps(LEVELS, protocol=2), source="levels.pkl")  # other bytes, same levels
    assert files_identity("sha256:store", other, None) != files_identity("sha256:store", levels, None)


def test_a_pickle_cannot_call_the_array_constructor_itself() -> None:
    data = b"\x80\x02cnumpy\nndarray\nK\x08\x85R."  # numpy.ndarray(8): any shape the pickle likes
    assert pickle.loads(data).shape == (8,)
    with pytest.raises(InputFormatError, match=r"^big\.pkl: not a readable pickle \(it calls numpy.ndarray"):
        load_restricted(data, source="big.pkl")
