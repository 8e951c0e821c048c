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

class Tensor(_message.Message):
    __slots__ = ("dtype", "shape", "data")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    dtype: DType
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, dtype: _Optional[_Union[DType, str]] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

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
    __slots__ = ("sources", "preset_sources")
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    PRESET_SOURCES_FIELD_NUMBER: _ClassVar[int]
    sources: _containers.RepeatedCompositeFieldContainer[SourceSummary]
    preset_sources: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, sources: _Optional[_Iterable[_Union[SourceSummary, _Mapping]]] = ..., preset_sources: _Optional[_Iterable[str]] = ...) -> None: ...

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
    __slots__ = ("image_size", "mode", "resize")
    IMAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    image_size: int
    mode: ImageMode
    resize: ResizeMethod
    def __init__(self, image_size: _Optional[int] = ..., mode: _Optional[_Union[ImageMode, str]] = ..., resize: _Optional[_Union[ResizeMethod, str]] = ...) -> None: ...

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
    __slots__ = ("run_id", "protocol", "source", "split", "seed", "index", "fingerprint", "metrics", "request", "predicted_labels")
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
    def __init__(self, run_id: _Optional[str] = ..., protocol: _Optional[str] = ..., source: _Optional[str] = ..., split: _Optional[_Union[Split, str]] = ..., seed: _Optional[int] = ..., index: _Optional[int] = ..., fingerprint: _Optional[str] = ..., metrics: _Optional[_Mapping[str, float]] = ..., request: _Optional[_Union[EpisodeRequest, _Mapping]] = ..., predicted_labels: _Optional[_Iterable[int]] = ...) -> None: ...

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
    __slots__ = ("run_ids", "format")
    RUN_IDS_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    run_ids: _containers.RepeatedScalarFieldContainer[str]
    format: str
    def __init__(self, run_ids: _Optional[_Iterable[str]] = ..., format: _Optional[str] = ...) -> None: ...

class GetReportResponse(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...
