from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Split(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SPLIT_UNSPECIFIED: _ClassVar[Split]
    SPLIT_TRAIN: _ClassVar[Split]
    SPLIT_VALID: _ClassVar[Split]
    SPLIT_TEST: _ClassVar[Split]

class ImageMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IMAGE_MODE_UNSPECIFIED: _ClassVar[ImageMode]
    IMAGE_MODE_DECODED: _ClassVar[ImageMode]
    IMAGE_MODE_ENCODED: _ClassVar[ImageMode]

class ResizeMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESIZE_METHOD_UNSPECIFIED: _ClassVar[ResizeMethod]
    RESIZE_METHOD_BILINEAR: _ClassVar[ResizeMethod]
    RESIZE_METHOD_ANTIALIAS: _ClassVar[ResizeMethod]
    RESIZE_METHOD_FAST_BILINEAR: _ClassVar[ResizeMethod]
    RESIZE_METHOD_TF2_BILINEAR: _ClassVar[ResizeMethod]
    RESIZE_METHOD_SHORTER_BICUBIC_CENTER_CROP: _ClassVar[ResizeMethod]
    RESIZE_METHOD_LEGACY_BILINEAR: _ClassVar[ResizeMethod]

class DType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DTYPE_UNSPECIFIED: _ClassVar[DType]
    DTYPE_UINT8: _ClassVar[DType]
    DTYPE_INT32: _ClassVar[DType]
    DTYPE_INT64: _ClassVar[DType]
    DTYPE_FLOAT32: _ClassVar[DType]

class Encoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENCODING_UNSPECIFIED: _ClassVar[Encoding]
    ENCODING_RAW: _ClassVar[Encoding]
    ENCODING_JPEG: _ClassVar[Encoding]
    ENCODING_PNG: _ClassVar[Encoding]
    ENCODING_PPM: _ClassVar[Encoding]
    ENCODING_OTHER: _ClassVar[Encoding]

class EpisodePart(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EPISODE_PART_UNSPECIFIED: _ClassVar[EpisodePart]
    EPISODE_PART_SUPPORT: _ClassVar[EpisodePart]
    EPISODE_PART_QUERY: _ClassVar[EpisodePart]
SPLIT_UNSPECIFIED: Split
SPLIT_TRAIN: Split
SPLIT_VALID: Split
SPLIT_TEST: Split
IMAGE_MODE_UNSPECIFIED: ImageMode
IMAGE_MODE_DECODED: ImageMode
IMAGE_MODE_ENCODED: ImageMode
RESIZE_METHOD_UNSPECIFIED: ResizeMethod
RESIZE_METHOD_BILINEAR: ResizeMethod
RESIZE_METHOD_ANTIALIAS: ResizeMethod
RESIZE_METHOD_FAST_BILINEAR: ResizeMethod
RESIZE_METHOD_TF2_BILINEAR: ResizeMethod
RESIZE_METHOD_SHORTER_BICUBIC_CENTER_CROP: ResizeMethod
RESIZE_METHOD_LEGACY_BILINEAR: ResizeMethod
DTYPE_UNSPECIFIED: DType
DTYPE_UINT8: DType
DTYPE_INT32: DType
DTYPE_INT64: DType
DTYPE_FLOAT32: DType
ENCODING_UNSPECIFIED: Encoding
ENCODING_RAW: Encoding
ENCODING_JPEG: Encoding
ENCODING_PNG: Encoding
ENCODING_PPM: Encoding
ENCODING_OTHER: Encoding
EPISODE_PART_UNSPECIFIED: EpisodePart
EPISODE_PART_SUPPORT: EpisodePart
EPISODE_PART_QUERY: EpisodePart

class Tensor(_message.Message):
    __slots__ = ("dtype", "shape", "data", "segment")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    dtype: DType
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    segment: SharedSegment
    def __init__(self, dtype: _Optional[_Union[DType, str]] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ..., segment: _Optional[_Union[SharedSegment, _Mapping]] = ...) -> None: ...

class SharedSegment(_message.Message):
    __slots__ = ("name", "offset", "size")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    name: str
    offset: int
    size: int
    def __init__(self, name: _Optional[str] = ..., offset: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...

class EncodedImages(_message.Message):
    __slots__ = ("data", "encoding", "width", "height", "channels")
    DATA_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    data: _containers.RepeatedScalarFieldContainer[bytes]
    encoding: _containers.RepeatedScalarFieldContainer[Encoding]
    width: _containers.RepeatedScalarFieldContainer[int]
    height: _containers.RepeatedScalarFieldContainer[int]
    channels: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, data: _Optional[_Iterable[bytes]] = ..., encoding: _Optional[_Iterable[_Union[Encoding, str]]] = ..., width: _Optional[_Iterable[int]] = ..., height: _Optional[_Iterable[int]] = ..., channels: _Optional[_Iterable[int]] = ...) -> None: ...

class ListSourcesRequest(_message.Message):
    __slots__ = ("preset", "split")
    PRESET_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    preset: str
    split: Split
    def __init__(self, preset: _Optional[str] = ..., split: _Optional[_Union[Split, str]] = ...) -> None: ...

class SourceSummary(_message.Message):
    __slots__ = ("name", "source", "fingerprint", "num_records", "train_classes", "valid_classes", "test_classes", "hierarchy", "raw_size", "preset", "raw_resize")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    NUM_RECORDS_FIELD_NUMBER: _ClassVar[int]
    TRAIN_CLASSES_FIELD_NUMBER: _ClassVar[int]
    VALID_CLASSES_FIELD_NUMBER: _ClassVar[int]
    TEST_CLASSES_FIELD_NUMBER: _ClassVar[int]
    HIERARCHY_FIELD_NUMBER: _ClassVar[int]
    RAW_SIZE_FIELD_NUMBER: _ClassVar[int]
    PRESET_FIELD_NUMBER: _ClassVar[int]
    RAW_RESIZE_FIELD_NUMBER: _ClassVar[int]
    name: str
    source: str
    fingerprint: str
    num_records: int
    train_classes: int
    valid_classes: int
    test_classes: int
    hierarchy: str
    raw_size: int
    preset: str
    raw_resize: ResizeMethod
    def __init__(self, name: _Optional[str] = ..., source: _Optional[str] = ..., fingerprint: _Optional[str] = ..., num_records: _Optional[int] = ..., train_classes: _Optional[int] = ..., valid_classes: _Optional[int] = ..., test_classes: _Optional[int] = ..., hierarchy: _Optional[str] = ..., raw_size: _Optional[int] = ..., preset: _Optional[str] = ..., raw_resize: _Optional[_Union[ResizeMethod, str]] = ...) -> None: ...

class ListSourcesResponse(_message.Message):
    __slots__ = ("sources", "preset_sources", "server")
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    PRESET_SOURCES_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    sources: _containers.RepeatedCompositeFieldContainer[SourceSummary]
    preset_sources: _containers.RepeatedScalarFieldContainer[str]
    server: ServerSettings
    def __init__(self, sources: _Optional[_Iterable[_Union[SourceSummary, _Mapping]]] = ..., preset_sources: _Optional[_Iterable[str]] = ..., server: _Optional[_Union[ServerSettings, _Mapping]] = ...) -> None: ...

class ServerSettings(_message.Message):
    __slots__ = ("lookahead_bytes", "decode_workers")
    LOOKAHEAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    DECODE_WORKERS_FIELD_NUMBER: _ClassVar[int]
    lookahead_bytes: int
    decode_workers: int
    def __init__(self, lookahead_bytes: _Optional[int] = ..., decode_workers: _Optional[int] = ...) -> None: ...

class DescribeSourceRequest(_message.Message):
    __slots__ = ("name", "preset")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PRESET_FIELD_NUMBER: _ClassVar[int]
    name: str
    preset: str
    def __init__(self, name: _Optional[str] = ..., preset: _Optional[str] = ...) -> None: ...

class ClassDescription(_message.Message):
    __slots__ = ("class_id", "name", "split", "num_records", "wnid", "group")
    CLASS_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    NUM_RECORDS_FIELD_NUMBER: _ClassVar[int]
    WNID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    class_id: int
    name: str
    split: Split
    num_records: int
    wnid: str
    group: str
    def __init__(self, class_id: _Optional[int] = ..., name: _Optional[str] = ..., split: _Optional[_Union[Split, str]] = ..., num_records: _Optional[int] = ..., wnid: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class SourceDescription(_message.Message):
    __slots__ = ("summary", "classes")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    summary: SourceSummary
    classes: _containers.RepeatedCompositeFieldContainer[ClassDescription]
    def __init__(self, summary: _Optional[_Union[SourceSummary, _Mapping]] = ..., classes: _Optional[_Iterable[_Union[ClassDescription, _Mapping]]] = ...) -> None: ...

class EpisodeConfig(_message.Message):
    __slots__ = ("num_ways", "num_support", "num_query", "all_classes", "min_ways", "max_ways_upper_bound", "max_num_query", "max_support_set_size", "max_support_size_contrib_per_class", "min_log_weight", "max_log_weight", "min_examples_in_class", "ignore_hierarchy_probability", "max_span_leaves")
    NUM_WAYS_FIELD_NUMBER: _ClassVar[int]
    NUM_SUPPORT_FIELD_NUMBER: _ClassVar[int]
    NUM_QUERY_FIELD_NUMBER: _ClassVar[int]
    ALL_CLASSES_FIELD_NUMBER: _ClassVar[int]
    MIN_WAYS_FIELD_NUMBER: _ClassVar[int]
    MAX_WAYS_UPPER_BOUND_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_QUERY_FIELD_NUMBER: _ClassVar[int]
    MAX_SUPPORT_SET_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_SUPPORT_SIZE_CONTRIB_PER_CLASS_FIELD_NUMBER: _ClassVar[int]
    MIN_LOG_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_LOG_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MIN_EXAMPLES_IN_CLASS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_HIERARCHY_PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    MAX_SPAN_LEAVES_FIELD_NUMBER: _ClassVar[int]
    num_ways: int
    num_support: int
    num_query: int
    all_classes: bool
    min_ways: int
    max_ways_upper_bound: int
    max_num_query: int
    max_support_set_size: int
    max_support_size_contrib_per_class: int
    min_log_weight: float
    max_log_weight: float
    min_examples_in_class: int
    ignore_hierarchy_probability: float
    max_span_leaves: int
    def __init__(self, num_ways: _Optional[int] = ..., num_support: _Optional[int] = ..., num_query: _Optional[int] = ..., all_classes: _Optional[bool] = ..., min_ways: _Optional[int] = ..., max_ways_upper_bound: _Optional[int] = ..., max_num_query: _Optional[int] = ..., max_support_set_size: _Optional[int] = ..., max_support_size_contrib_per_class: _Optional[int] = ..., min_log_weight: _Optional[float] = ..., max_log_weight: _Optional[float] = ..., min_examples_in_class: _Optional[int] = ..., ignore_hierarchy_probability: _Optional[float] = ..., max_span_leaves: _Optional[int] = ...) -> None: ...

class ImageOptions(_message.Message):
    __slots__ = ("image_size", "mode", "resize", "same_host_token")
    IMAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    SAME_HOST_TOKEN_FIELD_NUMBER: _ClassVar[int]
    image_size: int
    mode: ImageMode
    resize: ResizeMethod
    same_host_token: str
    def __init__(self, image_size: _Optional[int] = ..., mode: _Optional[_Union[ImageMode, str]] = ..., resize: _Optional[_Union[ResizeMethod, str]] = ..., same_host_token: _Optional[str] = ...) -> None: ...

class EpisodeRequest(_message.Message):
    __slots__ = ("sources", "preset", "split", "config", "seed", "images")
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    PRESET_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    sources: _containers.RepeatedScalarFieldContainer[str]
    preset: str
    split: Split
    config: EpisodeConfig
    seed: int
    images: ImageOptions
    def __init__(self, sources: _Optional[_Iterable[str]] = ..., preset: _Optional[str] = ..., split: _Optional[_Union[Split, str]] = ..., config: _Optional[_Union[EpisodeConfig, _Mapping]] = ..., seed: _Optional[int] = ..., images: _Optional[_Union[ImageOptions, _Mapping]] = ...) -> None: ...

class StreamEpisodesRequest(_message.Message):
    __slots__ = ("request", "start_index", "count", "index_step")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    START_INDEX_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    INDEX_STEP_FIELD_NUMBER: _ClassVar[int]
    request: EpisodeRequest
    start_index: int
    count: int
    index_step: int
    def __init__(self, request: _Optional[_Union[EpisodeRequest, _Mapping]] = ..., start_index: _Optional[int] = ..., count: _Optional[int] = ..., index_step: _Optional[int] = ...) -> None: ...

class GetEpisodeRequest(_message.Message):
    __slots__ = ("request", "index")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    request: EpisodeRequest
    index: int
    def __init__(self, request: _Optional[_Union[EpisodeRequest, _Mapping]] = ..., index: _Optional[int] = ...) -> None: ...

class EpisodeClass(_message.Message):
    __slots__ = ("class_id", "name", "wnid", "num_support", "num_query")
    CLASS_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    WNID_FIELD_NUMBER: _ClassVar[int]
    NUM_SUPPORT_FIELD_NUMBER: _ClassVar[int]
    NUM_QUERY_FIELD_NUMBER: _ClassVar[int]
    class_id: int
    name: str
    wnid: str
    num_support: int
    num_query: int
    def __init__(self, class_id: _Optional[int] = ..., name: _Optional[str] = ..., wnid: _Optional[str] = ..., num_support: _Optional[int] = ..., num_query: _Optional[int] = ...) -> None: ...

class Episode(_message.Message):
    __slots__ = ("source", "split", "seed", "index", "fingerprint", "store_fingerprint", "config_hash", "classes", "support_record_ids", "query_record_ids", "support_labels", "query_labels", "support_images", "query_images", "support_encoded", "query_encoded", "image_size", "resize", "last", "preset")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    STORE_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    CONFIG_HASH_FIELD_NUMBER: _ClassVar[int]
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    SUPPORT_RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    QUERY_RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    SUPPORT_LABELS_FIELD_NUMBER: _ClassVar[int]
    QUERY_LABELS_FIELD_NUMBER: _ClassVar[int]
    SUPPORT_IMAGES_FIELD_NUMBER: _ClassVar[int]
    QUERY_IMAGES_FIELD_NUMBER: _ClassVar[int]
    SUPPORT_ENCODED_FIELD_NUMBER: _ClassVar[int]
    QUERY_ENCODED_FIELD_NUMBER: _ClassVar[int]
    IMAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    PRESET_FIELD_NUMBER: _ClassVar[int]
    source: str
    split: Split
    seed: int
    index: int
    fingerprint: str
    store_fingerprint: str
    config_hash: str
    classes: _containers.RepeatedCompositeFieldContainer[EpisodeClass]
    support_record_ids: _containers.RepeatedScalarFieldContainer[int]
    query_record_ids: _containers.RepeatedScalarFieldContainer[int]
    support_labels: Tensor
    query_labels: Tensor
    support_images: Tensor
    query_images: Tensor
    support_encoded: EncodedImages
    query_encoded: EncodedImages
    image_size: int
    resize: ResizeMethod
    last: bool
    preset: str
    def __init__(self, source: _Optional[str] = ..., split: _Optional[_Union[Split, str]] = ..., seed: _Optional[int] = ..., index: _Optional[int] = ..., fingerprint: _Optional[str] = ..., store_fingerprint: _Optional[str] = ..., config_hash: _Optional[str] = ..., classes: _Optional[_Iterable[_Union[EpisodeClass, _Mapping]]] = ..., support_record_ids: _Optional[_Iterable[int]] = ..., query_record_ids: _Optional[_Iterable[int]] = ..., support_labels: _Optional[_Union[Tensor, _Mapping]] = ..., query_labels: _Optional[_Union[Tensor, _Mapping]] = ..., support_images: _Optional[_Union[Tensor, _Mapping]] = ..., query_images: _Optional[_Union[Tensor, _Mapping]] = ..., support_encoded: _Optional[_Union[EncodedImages, _Mapping]] = ..., query_encoded: _Optional[_Union[EncodedImages, _Mapping]] = ..., image_size: _Optional[int] = ..., resize: _Optional[_Union[ResizeMethod, str]] = ..., last: _Optional[bool] = ..., preset: _Optional[str] = ...) -> None: ...

class StreamBatchesRequest(_message.Message):
    __slots__ = ("source", "split", "seed", "batch_size", "start_index", "count", "index_step", "images", "preset")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    START_INDEX_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    INDEX_STEP_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    PRESET_FIELD_NUMBER: _ClassVar[int]
    source: str
    split: Split
    seed: int
    batch_size: int
    start_index: int
    count: int
    index_step: int
    images: ImageOptions
    preset: str
    def __init__(self, source: _Optional[str] = ..., split: _Optional[_Union[Split, str]] = ..., seed: _Optional[int] = ..., batch_size: _Optional[int] = ..., start_index: _Optional[int] = ..., count: _Optional[int] = ..., index_step: _Optional[int] = ..., images: _Optional[_Union[ImageOptions, _Mapping]] = ..., preset: _Optional[str] = ...) -> None: ...

class Batch(_message.Message):
    __slots__ = ("source", "split", "seed", "index", "epoch", "fingerprint", "record_ids", "labels", "images", "encoded", "num_classes", "last", "preset")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    ENCODED_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    PRESET_FIELD_NUMBER: _ClassVar[int]
    source: str
    split: Split
    seed: int
    index: int
    epoch: int
    fingerprint: str
    record_ids: _containers.RepeatedScalarFieldContainer[int]
    labels: Tensor
    images: Tensor
    encoded: EncodedImages
    num_classes: int
    last: bool
    preset: str
    def __init__(self, source: _Optional[str] = ..., split: _Optional[_Union[Split, str]] = ..., seed: _Optional[int] = ..., index: _Optional[int] = ..., epoch: _Optional[int] = ..., fingerprint: _Optional[str] = ..., record_ids: _Optional[_Iterable[int]] = ..., labels: _Optional[_Union[Tensor, _Mapping]] = ..., images: _Optional[_Union[Tensor, _Mapping]] = ..., encoded: _Optional[_Union[EncodedImages, _Mapping]] = ..., num_classes: _Optional[int] = ..., last: _Optional[bool] = ..., preset: _Optional[str] = ...) -> None: ...

class MetricReport(_message.Message):
    __slots__ = ("run_id", "protocol", "source", "split", "seed", "index", "fingerprint", "metrics", "request", "predicted_labels", "task", "task_split", "examples", "cog_level", "shots", "role", "regime", "regime_seed")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_LABELS_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    TASK_SPLIT_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    COG_LEVEL_FIELD_NUMBER: _ClassVar[int]
    SHOTS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    REGIME_FIELD_NUMBER: _ClassVar[int]
    REGIME_SEED_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    protocol: str
    source: str
    split: Split
    seed: int
    index: int
    fingerprint: str
    metrics: _containers.ScalarMap[str, float]
    request: EpisodeRequest
    predicted_labels: _containers.RepeatedScalarFieldContainer[int]
    task: str
    task_split: str
    examples: int
    cog_level: str
    shots: int
    role: str
    regime: int
    regime_seed: int
    def __init__(self, run_id: _Optional[str] = ..., protocol: _Optional[str] = ..., source: _Optional[str] = ..., split: _Optional[_Union[Split, str]] = ..., seed: _Optional[int] = ..., index: _Optional[int] = ..., fingerprint: _Optional[str] = ..., metrics: _Optional[_Mapping[str, float]] = ..., request: _Optional[_Union[EpisodeRequest, _Mapping]] = ..., predicted_labels: _Optional[_Iterable[int]] = ..., task: _Optional[str] = ..., task_split: _Optional[str] = ..., examples: _Optional[int] = ..., cog_level: _Optional[str] = ..., shots: _Optional[int] = ..., role: _Optional[str] = ..., regime: _Optional[int] = ..., regime_seed: _Optional[int] = ...) -> None: ...

class ReportMetricsRequest(_message.Message):
    __slots__ = ("reports", "run_config_json")
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    RUN_CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    reports: _containers.RepeatedCompositeFieldContainer[MetricReport]
    run_config_json: str
    def __init__(self, reports: _Optional[_Iterable[_Union[MetricReport, _Mapping]]] = ..., run_config_json: _Optional[str] = ...) -> None: ...

class ReportMetricsResponse(_message.Message):
    __slots__ = ("stored", "duplicates")
    STORED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    stored: int
    duplicates: int
    def __init__(self, stored: _Optional[int] = ..., duplicates: _Optional[int] = ...) -> None: ...

class GetReportRequest(_message.Message):
    __slots__ = ("run_ids", "format", "table", "vtab_benchmark", "vtab_split", "baseline_run", "scratch_run", "max_run", "cci_seeds")
    RUN_IDS_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    VTAB_BENCHMARK_FIELD_NUMBER: _ClassVar[int]
    VTAB_SPLIT_FIELD_NUMBER: _ClassVar[int]
    BASELINE_RUN_FIELD_NUMBER: _ClassVar[int]
    SCRATCH_RUN_FIELD_NUMBER: _ClassVar[int]
    MAX_RUN_FIELD_NUMBER: _ClassVar[int]
    CCI_SEEDS_FIELD_NUMBER: _ClassVar[int]
    run_ids: _containers.RepeatedScalarFieldContainer[str]
    format: str
    table: str
    vtab_benchmark: str
    vtab_split: str
    baseline_run: str
    scratch_run: str
    max_run: str
    cci_seeds: str
    def __init__(self, run_ids: _Optional[_Iterable[str]] = ..., format: _Optional[str] = ..., table: _Optional[str] = ..., vtab_benchmark: _Optional[str] = ..., vtab_split: _Optional[str] = ..., baseline_run: _Optional[str] = ..., scratch_run: _Optional[str] = ..., max_run: _Optional[str] = ..., cci_seeds: _Optional[str] = ...) -> None: ...

class GetReportResponse(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: str
    def __init__(self, task: _Optional[str] = ...) -> None: ...

class TaskSplitSize(_message.Message):
    __slots__ = ("split", "size", "available", "reason")
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    split: str
    size: int
    available: bool
    reason: str
    def __init__(self, split: _Optional[str] = ..., size: _Optional[int] = ..., available: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class TaskSummary(_message.Message):
    __slots__ = ("task", "group", "store", "tfds", "num_classes", "splits", "tfds_split_sizes", "store_fingerprint")
    class TfdsSplitSizesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TASK_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    TFDS_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    SPLITS_FIELD_NUMBER: _ClassVar[int]
    TFDS_SPLIT_SIZES_FIELD_NUMBER: _ClassVar[int]
    STORE_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    task: str
    group: str
    store: str
    tfds: str
    num_classes: int
    splits: _containers.RepeatedCompositeFieldContainer[TaskSplitSize]
    tfds_split_sizes: _containers.ScalarMap[str, int]
    store_fingerprint: str
    def __init__(self, task: _Optional[str] = ..., group: _Optional[str] = ..., store: _Optional[str] = ..., tfds: _Optional[str] = ..., num_classes: _Optional[int] = ..., splits: _Optional[_Iterable[_Union[TaskSplitSize, _Mapping]]] = ..., tfds_split_sizes: _Optional[_Mapping[str, int]] = ..., store_fingerprint: _Optional[str] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskSummary]
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskSummary, _Mapping]]] = ...) -> None: ...

class StreamTaskBatchesRequest(_message.Message):
    __slots__ = ("task", "split", "seed", "batch_size", "start_index", "count", "images", "shuffle", "store", "regime", "regime_seed", "regime_sampling")
    TASK_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    START_INDEX_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    SHUFFLE_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    REGIME_FIELD_NUMBER: _ClassVar[int]
    REGIME_SEED_FIELD_NUMBER: _ClassVar[int]
    REGIME_SAMPLING_FIELD_NUMBER: _ClassVar[int]
    task: str
    split: str
    seed: int
    batch_size: int
    start_index: int
    count: int
    images: ImageOptions
    shuffle: bool
    store: str
    regime: int
    regime_seed: int
    regime_sampling: str
    def __init__(self, task: _Optional[str] = ..., split: _Optional[str] = ..., seed: _Optional[int] = ..., batch_size: _Optional[int] = ..., start_index: _Optional[int] = ..., count: _Optional[int] = ..., images: _Optional[_Union[ImageOptions, _Mapping]] = ..., shuffle: _Optional[bool] = ..., store: _Optional[str] = ..., regime: _Optional[int] = ..., regime_seed: _Optional[int] = ..., regime_sampling: _Optional[str] = ...) -> None: ...

class TaskBatch(_message.Message):
    __slots__ = ("task", "split", "seed", "index", "epoch", "fingerprint", "record_ids", "labels", "images", "encoded", "num_classes", "last", "shuffle", "split_fingerprint", "split_size", "store", "image_size", "resize")
    TASK_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    ENCODED_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    SHUFFLE_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    SPLIT_SIZE_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    task: str
    split: str
    seed: int
    index: int
    epoch: int
    fingerprint: str
    record_ids: _containers.RepeatedScalarFieldContainer[int]
    labels: Tensor
    images: Tensor
    encoded: EncodedImages
    num_classes: int
    last: bool
    shuffle: bool
    split_fingerprint: str
    split_size: int
    store: str
    image_size: int
    resize: ResizeMethod
    def __init__(self, task: _Optional[str] = ..., split: _Optional[str] = ..., seed: _Optional[int] = ..., index: _Optional[int] = ..., epoch: _Optional[int] = ..., fingerprint: _Optional[str] = ..., record_ids: _Optional[_Iterable[int]] = ..., labels: _Optional[_Union[Tensor, _Mapping]] = ..., images: _Optional[_Union[Tensor, _Mapping]] = ..., encoded: _Optional[_Union[EncodedImages, _Mapping]] = ..., num_classes: _Optional[int] = ..., last: _Optional[bool] = ..., shuffle: _Optional[bool] = ..., split_fingerprint: _Optional[str] = ..., split_size: _Optional[int] = ..., store: _Optional[str] = ..., image_size: _Optional[int] = ..., resize: _Optional[_Union[ResizeMethod, str]] = ...) -> None: ...

class StreamTaskEpisodeRequest(_message.Message):
    __slots__ = ("task", "images", "chunk_size", "start_index", "support_split", "query_split", "store")
    TASK_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    CHUNK_SIZE_FIELD_NUMBER: _ClassVar[int]
    START_INDEX_FIELD_NUMBER: _ClassVar[int]
    SUPPORT_SPLIT_FIELD_NUMBER: _ClassVar[int]
    QUERY_SPLIT_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    task: str
    images: ImageOptions
    chunk_size: int
    start_index: int
    support_split: str
    query_split: str
    store: str
    def __init__(self, task: _Optional[str] = ..., images: _Optional[_Union[ImageOptions, _Mapping]] = ..., chunk_size: _Optional[int] = ..., start_index: _Optional[int] = ..., support_split: _Optional[str] = ..., query_split: _Optional[str] = ..., store: _Optional[str] = ...) -> None: ...

class TaskEpisodeChunk(_message.Message):
    __slots__ = ("task", "index", "part", "offset", "record_ids", "labels", "images", "encoded", "num_classes", "support_size", "query_size", "num_chunks", "fingerprint", "support_fingerprint", "query_fingerprint", "support_split", "query_split", "last", "store", "image_size", "resize")
    TASK_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    ENCODED_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    SUPPORT_SIZE_FIELD_NUMBER: _ClassVar[int]
    QUERY_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    SUPPORT_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    QUERY_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    SUPPORT_SPLIT_FIELD_NUMBER: _ClassVar[int]
    QUERY_SPLIT_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    task: str
    index: int
    part: EpisodePart
    offset: int
    record_ids: _containers.RepeatedScalarFieldContainer[int]
    labels: Tensor
    images: Tensor
    encoded: EncodedImages
    num_classes: int
    support_size: int
    query_size: int
    num_chunks: int
    fingerprint: str
    support_fingerprint: str
    query_fingerprint: str
    support_split: str
    query_split: str
    last: bool
    store: str
    image_size: int
    resize: ResizeMethod
    def __init__(self, task: _Optional[str] = ..., index: _Optional[int] = ..., part: _Optional[_Union[EpisodePart, str]] = ..., offset: _Optional[int] = ..., record_ids: _Optional[_Iterable[int]] = ..., labels: _Optional[_Union[Tensor, _Mapping]] = ..., images: _Optional[_Union[Tensor, _Mapping]] = ..., encoded: _Optional[_Union[EncodedImages, _Mapping]] = ..., num_classes: _Optional[int] = ..., support_size: _Optional[int] = ..., query_size: _Optional[int] = ..., num_chunks: _Optional[int] = ..., fingerprint: _Optional[str] = ..., support_fingerprint: _Optional[str] = ..., query_fingerprint: _Optional[str] = ..., support_split: _Optional[str] = ..., query_split: _Optional[str] = ..., last: _Optional[bool] = ..., store: _Optional[str] = ..., image_size: _Optional[int] = ..., resize: _Optional[_Union[ResizeMethod, str]] = ...) -> None: ...

class ListCogLevelsRequest(_message.Message):
    __slots__ = ("level_size", "min_images", "levels_file", "concepts_split_file")
    LEVEL_SIZE_FIELD_NUMBER: _ClassVar[int]
    MIN_IMAGES_FIELD_NUMBER: _ClassVar[int]
    LEVELS_FILE_FIELD_NUMBER: _ClassVar[int]
    CONCEPTS_SPLIT_FILE_FIELD_NUMBER: _ClassVar[int]
    level_size: int
    min_images: int
    levels_file: str
    concepts_split_file: str
    def __init__(self, level_size: _Optional[int] = ..., min_images: _Optional[int] = ..., levels_file: _Optional[str] = ..., concepts_split_file: _Optional[str] = ...) -> None: ...

class CogLevelSummary(_message.Message):
    __slots__ = ("level", "wnids", "train_size", "test_size", "similarity_min", "similarity_max", "store", "store_fingerprint")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    WNIDS_FIELD_NUMBER: _ClassVar[int]
    TRAIN_SIZE_FIELD_NUMBER: _ClassVar[int]
    TEST_SIZE_FIELD_NUMBER: _ClassVar[int]
    SIMILARITY_MIN_FIELD_NUMBER: _ClassVar[int]
    SIMILARITY_MAX_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    STORE_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    level: str
    wnids: _containers.RepeatedScalarFieldContainer[str]
    train_size: int
    test_size: int
    similarity_min: float
    similarity_max: float
    store: str
    store_fingerprint: str
    def __init__(self, level: _Optional[str] = ..., wnids: _Optional[_Iterable[str]] = ..., train_size: _Optional[int] = ..., test_size: _Optional[int] = ..., similarity_min: _Optional[float] = ..., similarity_max: _Optional[float] = ..., store: _Optional[str] = ..., store_fingerprint: _Optional[str] = ...) -> None: ...

class ListCogLevelsResponse(_message.Message):
    __slots__ = ("levels", "level_size", "eligible", "min_images", "levels_fingerprint", "unavailable")
    class UnavailableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LEVELS_FIELD_NUMBER: _ClassVar[int]
    LEVEL_SIZE_FIELD_NUMBER: _ClassVar[int]
    ELIGIBLE_FIELD_NUMBER: _ClassVar[int]
    MIN_IMAGES_FIELD_NUMBER: _ClassVar[int]
    LEVELS_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    levels: _containers.RepeatedCompositeFieldContainer[CogLevelSummary]
    level_size: int
    eligible: int
    min_images: int
    levels_fingerprint: str
    unavailable: _containers.ScalarMap[str, str]
    def __init__(self, levels: _Optional[_Iterable[_Union[CogLevelSummary, _Mapping]]] = ..., level_size: _Optional[int] = ..., eligible: _Optional[int] = ..., min_images: _Optional[int] = ..., levels_fingerprint: _Optional[str] = ..., unavailable: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CogSplitRequest(_message.Message):
    __slots__ = ("level", "split", "shots", "seed", "level_size", "min_images", "levels_file", "concepts_split_file")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    SHOTS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    LEVEL_SIZE_FIELD_NUMBER: _ClassVar[int]
    MIN_IMAGES_FIELD_NUMBER: _ClassVar[int]
    LEVELS_FILE_FIELD_NUMBER: _ClassVar[int]
    CONCEPTS_SPLIT_FILE_FIELD_NUMBER: _ClassVar[int]
    level: str
    split: str
    shots: int
    seed: int
    level_size: int
    min_images: int
    levels_file: str
    concepts_split_file: str
    def __init__(self, level: _Optional[str] = ..., split: _Optional[str] = ..., shots: _Optional[int] = ..., seed: _Optional[int] = ..., level_size: _Optional[int] = ..., min_images: _Optional[int] = ..., levels_file: _Optional[str] = ..., concepts_split_file: _Optional[str] = ...) -> None: ...

class CogSplit(_message.Message):
    __slots__ = ("level", "split", "shots", "seed", "record_ids", "labels", "num_classes", "fingerprint", "store", "wnids", "partitions")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    SHOTS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    WNIDS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    level: str
    split: str
    shots: int
    seed: int
    record_ids: _containers.RepeatedScalarFieldContainer[int]
    labels: _containers.RepeatedScalarFieldContainer[int]
    num_classes: int
    fingerprint: str
    store: str
    wnids: _containers.RepeatedScalarFieldContainer[str]
    partitions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, level: _Optional[str] = ..., split: _Optional[str] = ..., shots: _Optional[int] = ..., seed: _Optional[int] = ..., record_ids: _Optional[_Iterable[int]] = ..., labels: _Optional[_Iterable[int]] = ..., num_classes: _Optional[int] = ..., fingerprint: _Optional[str] = ..., store: _Optional[str] = ..., wnids: _Optional[_Iterable[str]] = ..., partitions: _Optional[_Iterable[str]] = ...) -> None: ...

class StreamCogBatchesRequest(_message.Message):
    __slots__ = ("split", "batch_size", "start_index", "count", "images")
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    START_INDEX_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    split: CogSplitRequest
    batch_size: int
    start_index: int
    count: int
    images: ImageOptions
    def __init__(self, split: _Optional[_Union[CogSplitRequest, _Mapping]] = ..., batch_size: _Optional[int] = ..., start_index: _Optional[int] = ..., count: _Optional[int] = ..., images: _Optional[_Union[ImageOptions, _Mapping]] = ...) -> None: ...

class CogBatch(_message.Message):
    __slots__ = ("level", "split", "shots", "seed", "index", "record_ids", "labels", "images", "encoded", "num_classes", "split_size", "split_fingerprint", "fingerprint", "last", "store", "image_size", "resize")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    SHOTS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    ENCODED_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    SPLIT_SIZE_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    level: str
    split: str
    shots: int
    seed: int
    index: int
    record_ids: _containers.RepeatedScalarFieldContainer[int]
    labels: Tensor
    images: Tensor
    encoded: EncodedImages
    num_classes: int
    split_size: int
    split_fingerprint: str
    fingerprint: str
    last: bool
    store: str
    image_size: int
    resize: ResizeMethod
    def __init__(self, level: _Optional[str] = ..., split: _Optional[str] = ..., shots: _Optional[int] = ..., seed: _Optional[int] = ..., index: _Optional[int] = ..., record_ids: _Optional[_Iterable[int]] = ..., labels: _Optional[_Union[Tensor, _Mapping]] = ..., images: _Optional[_Union[Tensor, _Mapping]] = ..., encoded: _Optional[_Union[EncodedImages, _Mapping]] = ..., num_classes: _Optional[int] = ..., split_size: _Optional[int] = ..., split_fingerprint: _Optional[str] = ..., fingerprint: _Optional[str] = ..., last: _Optional[bool] = ..., store: _Optional[str] = ..., image_size: _Optional[int] = ..., resize: _Optional[_Union[ResizeMethod, str]] = ...) -> None: ...

class RegimeRequest(_message.Message):
    __slots__ = ("task", "n", "seed", "split", "store", "target", "loss", "sampling")
    TASK_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    task: str
    n: int
    seed: int
    split: str
    store: str
    target: str
    loss: str
    sampling: str
    def __init__(self, task: _Optional[str] = ..., n: _Optional[int] = ..., seed: _Optional[int] = ..., split: _Optional[str] = ..., store: _Optional[str] = ..., target: _Optional[str] = ..., loss: _Optional[str] = ..., sampling: _Optional[str] = ...) -> None: ...

class RegressionBlindGuess(_message.Message):
    __slots__ = ("target", "loss", "prediction", "test_risk", "test_examples")
    TARGET_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    PREDICTION_FIELD_NUMBER: _ClassVar[int]
    TEST_RISK_FIELD_NUMBER: _ClassVar[int]
    TEST_EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    target: str
    loss: str
    prediction: float
    test_risk: float
    test_examples: int
    def __init__(self, target: _Optional[str] = ..., loss: _Optional[str] = ..., prediction: _Optional[float] = ..., test_risk: _Optional[float] = ..., test_examples: _Optional[int] = ...) -> None: ...

class BlindGuess(_message.Message):
    __slots__ = ("label", "test_accuracy", "test_error", "test_examples")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    TEST_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    TEST_ERROR_FIELD_NUMBER: _ClassVar[int]
    TEST_EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    label: int
    test_accuracy: float
    test_error: float
    test_examples: int
    def __init__(self, label: _Optional[int] = ..., test_accuracy: _Optional[float] = ..., test_error: _Optional[float] = ..., test_examples: _Optional[int] = ...) -> None: ...

class Regime(_message.Message):
    __slots__ = ("task", "n", "seed", "split", "record_ids", "labels", "num_classes", "fingerprint", "pool_split", "pool_size", "blind", "default_regimes", "store", "regression", "sampling")
    TASK_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    POOL_SPLIT_FIELD_NUMBER: _ClassVar[int]
    POOL_SIZE_FIELD_NUMBER: _ClassVar[int]
    BLIND_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_REGIMES_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    REGRESSION_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    task: str
    n: int
    seed: int
    split: str
    record_ids: _containers.RepeatedScalarFieldContainer[int]
    labels: _containers.RepeatedScalarFieldContainer[int]
    num_classes: int
    fingerprint: str
    pool_split: str
    pool_size: int
    blind: BlindGuess
    default_regimes: _containers.RepeatedScalarFieldContainer[int]
    store: str
    regression: RegressionBlindGuess
    sampling: str
    def __init__(self, task: _Optional[str] = ..., n: _Optional[int] = ..., seed: _Optional[int] = ..., split: _Optional[str] = ..., record_ids: _Optional[_Iterable[int]] = ..., labels: _Optional[_Iterable[int]] = ..., num_classes: _Optional[int] = ..., fingerprint: _Optional[str] = ..., pool_split: _Optional[str] = ..., pool_size: _Optional[int] = ..., blind: _Optional[_Union[BlindGuess, _Mapping]] = ..., default_regimes: _Optional[_Iterable[int]] = ..., store: _Optional[str] = ..., regression: _Optional[_Union[RegressionBlindGuess, _Mapping]] = ..., sampling: _Optional[str] = ...) -> None: ...

class SameHostRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SameHostOffer(_message.Message):
    __slots__ = ("probe_segment", "reason")
    PROBE_SEGMENT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    probe_segment: str
    reason: str
    def __init__(self, probe_segment: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...
