"""The pack pipeline end to end on the generic converter: content, identity, bad input."""

from __future__ import annotations

import io
import multiprocessing

import numpy as np
import pytest
from conftest import generate_fixture, pack_fixture
from PIL import Image

from sampler_server.assembly.decode import record_pixels
from sampler_server.errors import FailedPrecondition, InputFormatError, InvalidArgument, NotFound
from sampler_server.imaging import ResizeMethod, resize_square, to_rgb_array
from sampler_server.pack.pipeline import PackOptions
from sampler_server.pack.splits import default_split
from sampler_server.store.manifest import Split, load_manifest
from sampler_server.store.reader import StoreReader, find_stores
from sampler_server.store.record import Encoding


@pytest.fixture()
def folder(tmp_path):
    return generate_fixture("image_folder", tmp_path)


def _originals(fixture):
    """origin -> original bytes, for every image the fixture wrote."""
    return {
        p.relative_to(fixture.input_dir).as_posix(): p.read_bytes()
        for p in fixture.input_dir.rglob("*")
        if p.suffix in (".jpg", ".png")
    }


def test_classes_splits_and_byte_exact_records(folder, tmp_path):
    summary = pack_fixture(folder, tmp_path / "store")
    reader = StoreReader(summary.store_dir)
    manifest = reader.manifest
    assert {c.name: c.count for c in manifest.classes} == dict(folder.class_images)
    assert {c.name: c.split for c in manifest.classes} == dict(folder.class_splits)
    # canonical order: train classes, then valid, then test; by name inside a split
    order = [(c.split, c.name) for c in manifest.classes]
    rank = {Split.TRAIN: 0, Split.VALID: 1, Split.TEST: 2}
    assert order == sorted(order, key=lambda x: (rank[x[0]], x[1]))
    originals = _originals(folder)
    seen = set()
    for record_id, record in reader.iter_records():
        assert record.payload == originals[record.origin]
        owner = next(c for c in manifest.classes if c.start <= record_id < c.end)
        assert record.origin.startswith(owner.name + "/")
        seen.add(record.origin)
    assert seen == set(originals)


def test_default_split_rule_counts_and_determinism(folder, tmp_path):
    summary = pack_fixture(folder, tmp_path / "store", use_split_file=False)
    manifest = summary.manifest
    assert manifest.split_rule == "default-70-15-15"
    names = sorted(folder.class_images)
    expected = default_split("image_folder", names)
    assert {c.name: c.split for c in manifest.classes} == expected
    counts = [sum(1 for s in default_split("x", [f"c{i}" for i in range(n)]).values() if s is split)
              for n in (100, 345, 47) for split in Split]
    assert counts == [70, 15, 15, 241, 52, 52, 32, 7, 8]


def test_fingerprint_is_content_not_encoding(folder, tmp_path):
    plain = pack_fixture(folder, tmp_path / "a").manifest.fingerprint
    again = pack_fixture(folder, tmp_path / "b", workers=2).manifest.fingerprint
    small = pack_fixture(folder, tmp_path / "c", max_side=32).manifest.fingerprint
    raw = pack_fixture(folder, tmp_path / "d", raw_size=24).manifest.fingerprint
    assert plain == again == small == raw
    other_split = pack_fixture(folder, tmp_path / "e", use_split_file=False).manifest.fingerprint
    assert other_split != plain
    victim = sorted(folder.input_dir.rglob("*.png"))[0]
    Image.new("RGB", (50, 50), (1, 2, 3)).save(victim)
    assert pack_fixture(folder, tmp_path / "f").manifest.fingerprint != plain


def test_max_side_reencodes_only_what_is_too_large(folder, tmp_path):
    summary = pack_fixture(folder, tmp_path / "store", max_side=48)
    originals = _originals(folder)
    resized = kept = 0
    for _, record in StoreReader(summary.store_dir).iter_records():
        original = Image.open(io.BytesIO(originals[record.origin]))
        assert max(record.width, record.height) <= 48
        if max(original.size) <= 48:
            assert record.payload == originals[record.origin]
            kept += 1
        else:
            decoded = Image.open(io.BytesIO(record.payload))
            assert decoded.size == (record.width, record.height)
            assert decoded.format == original.format
            expected = original.convert("RGB").resize(decoded.size, Image.Resampling.LANCZOS)
            diff = np.abs(np.asarray(decoded.convert("RGB"), np.int16) - np.asarray(expected, np.int16))
            if original.format == "PNG":  # lossless: exactly the Lanczos downscale
                assert diff.max() == 0
            else:  # JPEG quality 95 over noisy synthetic content
                assert diff.mean() < 8
            resized += 1
    assert resized and kept
    assert summary.manifest.pack_options["max_side"] == 48


def test_raw_size_stores_decoded_resized_pixels(folder, tmp_path):
    summary = pack_fixture(folder, tmp_path / "store", raw_size=20)
    originals = _originals(folder)
    for _, record in StoreReader(summary.store_dir).iter_records():
        assert (record.encoding, record.width, record.height, record.channels) == (Encoding.RAW, 20, 20, 3)
        original = to_rgb_array(Image.open(io.BytesIO(originals[record.origin])))
        expected = resize_square(original, 20, ResizeMethod.BILINEAR)
        stored = np.frombuffer(record.payload, np.uint8).reshape(20, 20, 3)
        if originals[record.origin][:2] == b"\xff\xd8":  # IFAST decode (the reference's) vs Pillow's accurate DCT
            assert np.abs(stored.astype(int) - expected).mean() < 3
        else:  # PNG: lossless, so exactly the align-corners resize of the original
            assert stored.tolist() == expected.tolist()
    assert summary.manifest.pack_options["raw_resize"] == "bilinear"


@pytest.mark.parametrize("method", list(ResizeMethod))
def test_raw_records_are_what_serving_the_encoded_store_gives(folder, tmp_path, method):
    encoded = StoreReader(pack_fixture(folder, tmp_path / "enc").store_dir)
    raw = pack_fixture(folder, tmp_path / "raw", raw_size=20, raw_resize=method)
    assert raw.manifest.pack_options["raw_resize"] == method.value
    assert raw.manifest.fingerprint == encoded.manifest.fingerprint  # --raw-resize is an encoding option
    reader = StoreReader(raw.store_dir)
    for record_id in range(reader.num_records):
        served = record_pixels(encoded.read_value(record_id), 20, method)
        assert reader.read(record_id).payload == served.tobytes()


def test_rerun_with_another_raw_resize_is_refused(folder, tmp_path):
    pack_fixture(folder, tmp_path, raw_size=16)
    with pytest.raises(FailedPrecondition, match="raw_resize=bilinear.*raw_resize=antialias"):
        pack_fixture(folder, tmp_path, raw_size=16, raw_resize="antialias")
    with pytest.raises(FailedPrecondition, match="lossless_derived"):
        pack_fixture(folder, tmp_path, raw_size=16, lossless_derived=True)
    assert pack_fixture(folder, tmp_path, raw_size=16).unchanged


def test_unknown_raw_resize_is_invalid():
    with pytest.raises(InvalidArgument, match="--raw-resize must be one of"):
        PackOptions(raw_size=16, raw_resize="cubic")


def _corrupt(fixture, truncate: bool):
    victim = sorted(fixture.input_dir.rglob("*.jpg"))[1]
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2] if truncate else b"\xff\xd8garbage" + data[40:60])
    return victim


@pytest.mark.parametrize("truncate", [True, False])
def test_bad_image_fails_with_its_path_and_leaves_nothing(folder, tmp_path, truncate):
    victim = _corrupt(folder, truncate)
    output = tmp_path / "store"
    with pytest.raises(InputFormatError) as caught:
        pack_fixture(folder, output)
    assert str(victim) in str(caught.value)
    assert "corrupt or truncated" in str(caught.value)
    assert find_stores(output) == []
    assert [p.name for p in output.iterdir()] == []


def test_bad_image_skipped_is_counted(folder, tmp_path):
    victim = _corrupt(folder, truncate=True)
    summary = pack_fixture(folder, tmp_path / "store", on_error="skip")
    manifest = load_manifest(summary.store_dir)
    assert manifest.num_skipped == 1 == summary.num_skipped
    origin = victim.relative_to(folder.input_dir).as_posix()
    assert manifest.skipped[0]["origin"] == origin
    assert manifest.num_records == folder.num_images - 1


def test_empty_class_fails_or_is_dropped(folder, tmp_path):
    empty = folder.input_dir / "zz_empty"
    empty.mkdir()
    with pytest.raises(InputFormatError, match="zz_empty: class has no images"):
        pack_fixture(folder, tmp_path / "a", use_split_file=False)
    summary = pack_fixture(folder, tmp_path / "b", use_split_file=False, on_error="skip")
    assert summary.empty_classes == ["zz_empty"]
    assert "zz_empty" not in {c.name for c in summary.manifest.classes}


def test_split_file_errors_name_the_file_and_class(folder, tmp_path):
    split_file = folder.split_file
    text = split_file.read_text()
    split_file.write_text(text.replace('"class_00"', '"no_such_class"'))
    with pytest.raises(InputFormatError, match=r"_splits.json: unknown class 'no_such_class'"):
        pack_fixture(folder, tmp_path / "a")
    split_file.write_text("{not json")
    with pytest.raises(InputFormatError, match="not a valid JSON class-splits file"):
        pack_fixture(folder, tmp_path / "a")
    split_file.write_text(text.replace('"class_00",', ""))
    with pytest.raises(InputFormatError, match="classes in no split: 'class_00'"):
        pack_fixture(folder, tmp_path / "a")


def test_existing_store_is_never_silently_replaced(folder, tmp_path):
    output = tmp_path / "store"
    first = pack_fixture(folder, output)
    again = pack_fixture(folder, output)
    assert again.unchanged and again.manifest.fingerprint == first.manifest.fingerprint
    with pytest.raises(FailedPrecondition, match="packed with"):
        pack_fixture(folder, output, raw_size=16)
    with pytest.raises(FailedPrecondition, match="already holds a different image_folder store"):
        pack_fixture(folder, output, use_split_file=False)
    assert load_manifest(output / "image_folder").fingerprint == first.manifest.fingerprint
    replaced = pack_fixture(folder, output, use_split_file=False, overwrite=True)
    assert load_manifest(output / "image_folder").fingerprint == replaced.manifest.fingerprint
    (output / "other").mkdir()
    (output / "other" / "file.txt").write_text("x")
    with pytest.raises(FailedPrecondition, match="is not a store"):
        pack_fixture(folder, output, name="other")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_side": 0}, "--max-side must be in"),
        ({"raw_size": 10_000}, "--raw-size must be in"),
        ({"max_side": 10, "raw_size": 10}, "exclude each other"),
        ({"on_error": "ignore"}, "--on-error must be"),
        ({"workers": -1}, "--workers must be"),
        ({"name": "../x"}, "--name must be"),
    ],
)
def test_bad_pack_options(kwargs, message):
    with pytest.raises(InvalidArgument, match=message):
        PackOptions(**kwargs)


def test_missing_input_and_unknown_source(tmp_path):
    from sampler_server.pack import sources
    from sampler_server.pack.plan import ConverterOptions

    with pytest.raises(InputFormatError, match="missing input directory"):
        sources.get_converter("image_folder").plan(tmp_path / "nope", ConverterOptions())
    with pytest.raises(NotFound, match="unknown source 'imagenet'"):
        sources.get_converter("imagenet")
    with pytest.raises(InvalidArgument, match="--labels does not apply to source 'image_folder'"):
        sources.get_converter("image_folder").plan(tmp_path, ConverterOptions(labels=tmp_path / "l.txt"))


def _read_all(reader: StoreReader) -> list[bytes]:
    return reader.read_values(list(range(reader.num_records)))


def test_reader_is_shareable_across_processes(folder, tmp_path):
    summary = pack_fixture(folder, tmp_path / "store")
    reader = StoreReader(summary.store_dir)
    expected = _read_all(reader)  # opens LMDB in the parent before forking
    with multiprocessing.get_context("fork").Pool(2) as pool:
        results = pool.map(_read_all, [reader, reader])
    assert results == [expected, expected]
    with pytest.raises(InvalidArgument, match="allowed: 0 to"):
        reader.read(reader.num_records)
