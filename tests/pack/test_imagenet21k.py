"""pack imagenet21k: the Fall 2011 layout (tars read streaming, or folders), --wnids, --shard, bad input."""

from __future__ import annotations

import io
import tarfile
import tempfile
from pathlib import Path

import pytest
from PIL import Image

from sampler_server.cli.main import main
from sampler_server.cli.verify_cmd import verify_store
from sampler_server.core.hierarchy.wordnet import load_synsets
from sampler_server.errors import InputFormatError, InvalidArgument
from sampler_server.fixtures.base import Fixture
from sampler_server.fixtures.imagenet21k import NOT_AN_IMAGE, write_imagenet21k
from sampler_server.pack import sources
from sampler_server.pack.pipeline import PackOptions, PackSummary, run_pack
from sampler_server.pack.plan import ConverterOptions
from sampler_server.store.fingerprint import fingerprint_of_classes
from sampler_server.store.reader import StoreReader, find_stores
from sampler_server.store.record import Encoding

# real synsets; two share the first lemma "crane" (bird n02012849, machine n03126707)
COUNTS = {"n01440764": 5, "n02012849": 3, "n02084071": 4, "n03126707": 2, "n09246464": 6, "n12998815": 3}


def _pack(input_dir: Path, output: Path, **converter: object) -> PackSummary:
    plan = sources.get_converter("imagenet21k").plan(input_dir, ConverterOptions(**converter))  # type: ignore[arg-type]
    return run_pack(plan, output, PackOptions(workers=1, progress=False))


@pytest.fixture(scope="module")
def tars(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    return write_imagenet21k(tmp_path_factory.mktemp("in21k") / "fall11", COUNTS, seed=3)


@pytest.fixture(scope="module")
def packed(tars: Fixture, tmp_path_factory: pytest.TempPathFactory) -> PackSummary:
    return _pack(tars.input_dir, tmp_path_factory.mktemp("data"))


def _tar_members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers()}  # type: ignore[union-attr]


def test_classes_in_wnid_order_named_by_first_lemma_with_counts(tars: Fixture, packed: PackSummary) -> None:
    manifest = packed.manifest
    names = {s.wnid: s.name for s in load_synsets()}
    assert manifest.source == "imagenet21k" and packed.store_dir.name == "imagenet21k"
    assert [c.wnid for c in manifest.classes] == sorted(COUNTS)
    assert [c.name for c in manifest.classes] == [names[w] for w in sorted(COUNTS)]
    assert [c.name for c in manifest.classes].count("crane") == 2  # names repeat, wnids identify
    assert {c.wnid: c.count for c in manifest.classes} == COUNTS
    assert all(c.split is None and c.digest for c in manifest.classes)
    assert manifest.split_rule == "unsplit" and manifest.hierarchy == "wordnet-3.0"
    assert manifest.fingerprint == fingerprint_of_classes("imagenet21k", [c.digest for c in manifest.classes])


def test_records_are_the_members_bytes_sorted_by_member_name(tars: Fixture, packed: PackSummary) -> None:
    reader = StoreReader(packed.store_dir)
    for info in reader.manifest.classes:
        members = _tar_members(tars.input_dir / f"{info.wnid}.tar")
        with tarfile.open(tars.input_dir / f"{info.wnid}.tar") as archive:
            archive_order = archive.getnames()
        assert archive_order != sorted(archive_order) or len(archive_order) < 3  # the fixture shuffles members
        records = [reader.read(i) for i in range(info.start, info.end)]
        assert [r.origin for r in records] == [f"{info.wnid}/{name}" for name in sorted(members)]
        assert [r.origin.split("/")[1] for r in records] == tars.expected["members"][info.wnid]
        assert [r.payload for r in records] == [members[name] for name in sorted(members)]
        assert all(r.encoding is Encoding.JPEG for r in records)


def test_fixture_images_vary_in_size_and_aspect_and_are_deterministic(tars: Fixture, tmp_path: Path) -> None:
    sizes = set()
    for wnid in COUNTS:
        for data in _tar_members(tars.input_dir / f"{wnid}.tar").values():
            sizes.add(Image.open(io.BytesIO(data)).size)
    assert len(sizes) > 10 and any(w > h for w, h in sizes) and any(w < h for w, h in sizes)
    again = write_imagenet21k(tmp_path / "again", COUNTS, seed=3, workers=2)
    for wnid in COUNTS:
        assert (again.input_dir / f"{wnid}.tar").read_bytes() == (tars.input_dir / f"{wnid}.tar").read_bytes()
    other = write_imagenet21k(tmp_path / "other", {"n01440764": 5}, seed=4)
    assert (other.input_dir / "n01440764.tar").read_bytes() != (tars.input_dir / "n01440764.tar").read_bytes()


def test_tars_are_read_streaming_and_nothing_is_extracted(
    tars: Fixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    modes: list[str] = []
    real_open = tarfile.open

    def spying_open(*args: object, **kwargs: object) -> tarfile.TarFile:
        modes.append(str(kwargs.get("mode", args[1] if len(args) > 1 else "r")))
        return real_open(*args, **kwargs)  # type: ignore[arg-type]

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tarfile, "open", spying_open)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setenv("TMPDIR", str(scratch))
    before = sorted(p.relative_to(tars.input_dir) for p in tars.input_dir.rglob("*"))
    summary = _pack(tars.input_dir, tmp_path / "data")
    assert modes == ["r|"] * len(COUNTS)  # one streaming pass per tar
    assert list(scratch.iterdir()) == []
    assert sorted(p.relative_to(tars.input_dir) for p in tars.input_dir.rglob("*")) == before
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["imagenet21k"]
    assert summary.manifest.num_records == sum(COUNTS.values())


def test_folders_give_the_same_store_as_tars(packed: PackSummary, tmp_path: Path) -> None:
    folders = write_imagenet21k(tmp_path / "folders", COUNTS, seed=3, layout="folder")
    assert all(p.is_dir() for p in folders.input_dir.iterdir())
    summary = _pack(folders.input_dir, tmp_path / "data")
    assert summary.manifest.fingerprint == packed.manifest.fingerprint
    assert summary.manifest.classes == packed.manifest.classes
    left, right = StoreReader(summary.store_dir), StoreReader(packed.store_dir)
    assert [(i, r.payload, r.origin) for i, r in left.iter_records()] == [
        (i, r.payload, r.origin) for i, r in right.iter_records()
    ]
    assert summary.manifest.pack_options["layout"] == {"tar": 0, "folder": len(COUNTS)}


def test_wnids_file_packs_a_subset(tars: Fixture, packed: PackSummary, tmp_path: Path) -> None:
    listed = tmp_path / "wnids.txt"
    listed.write_text("# a subset\nn09246464\n\nn01440764  # tench\nn09246464\n")
    summary = _pack(tars.input_dir, tmp_path / "data", wnids=listed)
    assert [c.wnid for c in summary.manifest.classes] == ["n01440764", "n09246464"]
    full = {c.wnid: c.digest for c in packed.manifest.classes}
    assert [c.digest for c in summary.manifest.classes] == [full["n01440764"], full["n09246464"]]
    assert summary.manifest.pack_options["wnids_file"] == "wnids.txt"


def test_shards_are_contiguous_chunks_in_their_own_stores(tars: Fixture, packed: PackSummary, tmp_path: Path) -> None:
    data = tmp_path / "data"
    shards = [_pack(tars.input_dir, data, shard=(index, 4)) for index in range(4)]
    assert [s.store_dir.name for s in shards] == [f"imagenet21k-0000{i}-of-00004" for i in range(4)]
    wnids = sorted(COUNTS)
    assert [[c.wnid for c in s.manifest.classes] for s in shards] == [wnids[0:1], wnids[1:3], wnids[3:4], wnids[4:6]]
    full = {c.wnid: c.digest for c in packed.manifest.classes}
    for summary in shards:
        assert [c.digest for c in summary.manifest.classes] == [full[c.wnid] for c in summary.manifest.classes]
        note = summary.manifest.pack_options["shard"]
        assert note["count"] == 4 and note["input_synsets"] == len(COUNTS)
        assert verify_store(summary.store_dir, progress=False).status == "ok"


def _bad_input(tmp_path: Path, counts: dict[str, int], **options: object) -> Path:
    return write_imagenet21k(tmp_path / "fall11", counts, **options).input_dir  # type: ignore[arg-type]


def _refused(input_dir: Path, output: Path, **converter: object) -> str:
    with pytest.raises(InputFormatError) as caught:
        _pack(input_dir, output, **converter)
    message = str(caught.value)
    assert "\n" not in message
    assert not output.exists() or find_stores(output) == [] and not any(output.iterdir())
    return message


def test_a_truncated_tar_is_one_line_naming_it_and_nothing_is_written(tmp_path: Path) -> None:
    root = _bad_input(tmp_path, {"n01440764": 3, "n02084071": 4}, truncate="n02084071")
    message = _refused(root, tmp_path / "data")
    assert message.startswith(f"{root / 'n02084071.tar'}: truncated")
    # cut exactly at a member boundary, with no end-of-archive block: tarfile alone would not notice
    whole = root / "n01440764.tar"
    with tarfile.open(whole) as archive:
        last = archive.getmembers()[-1]
    whole.write_bytes(whole.read_bytes()[: last.offset])
    (root / "n02084071.tar").unlink()
    message = _refused(root, tmp_path / "data")
    assert message == f"{whole}: truncated tar: it ends without the end-of-archive block"


def test_a_member_that_is_not_an_image_is_one_line_naming_tar_and_member(tmp_path: Path) -> None:
    root = _bad_input(tmp_path, {"n01440764": 3, "n02084071": 2}, non_image="n02084071")
    message = _refused(root, tmp_path / "data")
    assert message.startswith(f"{root / 'n02084071.tar'}:n02084071_1000000000.JPEG: ")
    assert "not an image at all" in message and "--on-error skip" in message and "0x" not in message
    plan = sources.get_converter("imagenet21k").plan(root, ConverterOptions())
    summary = run_pack(plan, tmp_path / "skipped", PackOptions(workers=1, progress=False, on_error="skip"))
    assert summary.num_skipped == 1 and summary.manifest.num_records == 5
    assert NOT_AN_IMAGE not in [r.payload for _, r in StoreReader(summary.store_dir).iter_records()]


@pytest.mark.parametrize("entry", ["n00000000.tar", "n99999999", "n0144076.tar", "sunset.tar"])
def test_a_name_that_is_not_a_wordnet_noun_synset_is_refused(tmp_path: Path, entry: str) -> None:
    root = _bad_input(tmp_path, {"n01440764": 2})
    if entry.endswith(".tar"):
        (root / entry).write_bytes((root / "n01440764.tar").read_bytes())
    else:
        (root / entry).mkdir()
    message = _refused(root, tmp_path / "data")
    assert message.startswith(f"{root / entry}: '{entry.removesuffix('.tar')}' is not a WordNet 3.0 noun synset")


def test_wnids_file_errors_name_the_file_and_line(tmp_path: Path) -> None:
    root = _bad_input(tmp_path, {"n01440764": 2, "n02084071": 2})
    listed = tmp_path / "wnids.txt"
    listed.write_text("n01440764\nn1234\n")
    assert _refused(root, tmp_path / "data", wnids=listed) == (
        f"{listed}: line 2: 'n1234' is not a WordNet 3.0 noun synset "
        "(expected 'n' + the 8-digit offset of a noun synset, e.g. n01440764)"
    )
    listed.write_text("n01440764\nn09246464\n")
    assert _refused(root, tmp_path / "data", wnids=listed) == (
        f"{listed}: 1 listed synset(s) have no <wnid>.tar or <wnid>/ in {root}: n09246464"
    )
    listed.write_text("# nothing\n")
    assert _refused(root, tmp_path / "data", wnids=listed) == f"{listed}: lists no wnids (one per line expected)"


def test_empty_inputs_are_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "README.txt").write_text("no synsets here\n")
    assert _refused(empty, tmp_path / "data") == (
        f"{empty}: holds no synsets (expected one <wnid>.tar or <wnid>/ folder per synset)"
    )
    root = _bad_input(tmp_path, {"n01440764": 2})
    with tarfile.open(root / "n02084071.tar", "w"):
        pass
    assert _refused(root, tmp_path / "data") == f"{root / 'n02084071.tar'}: holds no images"
    (root / "n02084071.tar").unlink()
    (root / "n02084071").mkdir()
    assert _refused(root, tmp_path / "data") == f"{root / 'n02084071'}: holds no images"
    (root / "n01440764").mkdir()
    assert "synset n01440764 is given twice" in _refused(root, tmp_path / "data")


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_shard_names_and_errors(tars: Fixture, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "data")
    code, out, _ = _cli(capsys, "pack", "imagenet21k", "--input", str(tars.input_dir), "--output", data,
                        "--shard", "1/2", "--name", "in21k", "--quiet", "--workers", "1")
    assert code == 0 and f"-> {data}/in21k-00001-of-00002" in out
    for shard, expected in (("2/2", "got 2/2, expected I/N with 1 <= N <= 99999 and 0 <= I < N"),
                            ("1-2", "--shard: got '1-2', expected I/N")):
        code, _, err = _cli(capsys, "pack", "imagenet21k", "--input", str(tars.input_dir), "--output", data,
                            "--shard", shard)
        assert code == 2 and expected in err and len(err.strip().splitlines()) == 1
    code, _, err = _cli(capsys, "pack", "imagenet21k", "--input", str(tars.input_dir), "--output", data,
                        "--shard", "0/7", "--quiet")
    assert code == 2 and "shard 0/7 is empty: 6 synsets to pack" in err
    code, _, err = _cli(capsys, "pack", "image_folder", "--input", str(tars.input_dir), "--output", data,
                        "--wnids", str(tmp_path))
    assert code == 2 and "--wnids does not apply to source 'image_folder'" in err


def test_other_sources_refuse_the_imagenet21k_options(tmp_path: Path) -> None:
    for field, value in (("wnids", tmp_path / "w.txt"), ("shard", (0, 2))):
        with pytest.raises(InvalidArgument, match=f"--{field} does not apply to source 'ilsvrc_2012'"):
            sources.get_converter("ilsvrc_2012").plan(tmp_path, ConverterOptions(**{field: value}))  # type: ignore[arg-type]


def test_fixtures_command_writes_a_counts_file_in_either_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    counts = tmp_path / "counts.json"
    counts.write_text('{"n02084071": 3, "n01440764": 2}')
    code, out, _ = _cli(capsys, "fixtures", "imagenet21k", "--output", str(tmp_path / "f"), "--counts", str(counts),
                        "--layout", "folder")
    assert code == 0 and "imagenet21k: 2 classes, 5 images" in out
    assert sorted(len(list(p.iterdir())) for p in (tmp_path / "f" / "imagenet21k").iterdir()) == [2, 3]
    code, out, _ = _cli(capsys, "fixtures", "imagenet21k", "--output", str(tmp_path / "t"), "--classes", "3")
    assert code == 0 and sorted(p.name for p in (tmp_path / "t" / "imagenet21k").iterdir()) == [
        "n01440764.tar", "n02084071.tar", "n09246464.tar"]
    counts.write_text('{"n02084071": 3, "n99999999": 2}')
    code, _, err = _cli(capsys, "fixtures", "imagenet21k", "--output", str(tmp_path / "g"), "--counts", str(counts))
    assert code == 2 and "counts: 'n99999999' is not a WordNet 3.0 noun synset" in err
    code, _, err = _cli(capsys, "fixtures", "image_folder", "--output", str(tmp_path / "h"), "--layout", "folder")
    assert code == 2 and "--counts and --layout apply to imagenet21k only" in err
