from proto.gen.polymorph.v1 import events_pb2 as _events_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tier(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TIER_UNSPECIFIED: _ClassVar[Tier]
    TIER_FAST: _ClassVar[Tier]
    TIER_SLOW: _ClassVar[Tier]

class InputSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INPUT_SOURCE_UNSPECIFIED: _ClassVar[InputSource]
    INPUT_SOURCE_CAPTURED: _ClassVar[InputSource]
    INPUT_SOURCE_RANDOM: _ClassVar[InputSource]

class RunStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATUS_UNSPECIFIED: _ClassVar[RunStatus]
    RUN_STATUS_OK: _ClassVar[RunStatus]
    RUN_STATUS_LOAD_ERROR: _ClassVar[RunStatus]
    RUN_STATUS_RAISED: _ClassVar[RunStatus]
    RUN_STATUS_CRASHED: _ClassVar[RunStatus]
    RUN_STATUS_TIMEOUT: _ClassVar[RunStatus]
    RUN_STATUS_WRONG_OUTPUT: _ClassVar[RunStatus]
TIER_UNSPECIFIED: Tier
TIER_FAST: Tier
TIER_SLOW: Tier
INPUT_SOURCE_UNSPECIFIED: InputSource
INPUT_SOURCE_CAPTURED: InputSource
INPUT_SOURCE_RANDOM: InputSource
RUN_STATUS_UNSPECIFIED: RunStatus
RUN_STATUS_OK: RunStatus
RUN_STATUS_LOAD_ERROR: RunStatus
RUN_STATUS_RAISED: RunStatus
RUN_STATUS_CRASHED: RunStatus
RUN_STATUS_TIMEOUT: RunStatus
RUN_STATUS_WRONG_OUTPUT: RunStatus

class TensorProto(_message.Message):
    __slots__ = ("shape", "dtype", "data")
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    data: bytes
    def __init__(self, shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SlotState(_message.Message):
    __slots__ = ("slot", "candidate_id", "signature")
    SLOT_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    slot: str
    candidate_id: str
    signature: str
    def __init__(self, slot: _Optional[str] = ..., candidate_id: _Optional[str] = ..., signature: _Optional[str] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("engine_id", "model", "hardware", "device", "tiers", "experiments", "uptime_s")
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    TIERS_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENTS_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    engine_id: str
    model: str
    hardware: str
    device: str
    tiers: _containers.RepeatedCompositeFieldContainer[TierStatus]
    experiments: int
    uptime_s: float
    def __init__(self, engine_id: _Optional[str] = ..., model: _Optional[str] = ..., hardware: _Optional[str] = ..., device: _Optional[str] = ..., tiers: _Optional[_Iterable[_Union[TierStatus, _Mapping]]] = ..., experiments: _Optional[int] = ..., uptime_s: _Optional[float] = ...) -> None: ...

class TierStatus(_message.Message):
    __slots__ = ("tier", "layers", "slots", "worker_restarts", "worker_alive", "worker_start_s", "containment", "live_restarts")
    class ContainmentEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TIER_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    WORKER_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    WORKER_ALIVE_FIELD_NUMBER: _ClassVar[int]
    WORKER_START_S_FIELD_NUMBER: _ClassVar[int]
    CONTAINMENT_FIELD_NUMBER: _ClassVar[int]
    LIVE_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    tier: Tier
    layers: int
    slots: _containers.RepeatedCompositeFieldContainer[SlotState]
    worker_restarts: int
    worker_alive: bool
    worker_start_s: float
    containment: _containers.ScalarMap[str, str]
    live_restarts: int
    def __init__(self, tier: _Optional[_Union[Tier, str]] = ..., layers: _Optional[int] = ..., slots: _Optional[_Iterable[_Union[SlotState, _Mapping]]] = ..., worker_restarts: _Optional[int] = ..., worker_alive: _Optional[bool] = ..., worker_start_s: _Optional[float] = ..., containment: _Optional[_Mapping[str, str]] = ..., live_restarts: _Optional[int] = ...) -> None: ...

class SwapKernelRequest(_message.Message):
    __slots__ = ("candidate", "tier")
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    candidate: _events_pb2.Candidate
    tier: Tier
    def __init__(self, candidate: _Optional[_Union[_events_pb2.Candidate, _Mapping]] = ..., tier: _Optional[_Union[Tier, str]] = ...) -> None: ...

class SwapKernelReply(_message.Message):
    __slots__ = ("ok", "slot", "previous_id", "installed_id", "swap_s", "status", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_ID_FIELD_NUMBER: _ClassVar[int]
    INSTALLED_ID_FIELD_NUMBER: _ClassVar[int]
    SWAP_S_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    slot: str
    previous_id: str
    installed_id: str
    swap_s: float
    status: RunStatus
    error: str
    def __init__(self, ok: _Optional[bool] = ..., slot: _Optional[str] = ..., previous_id: _Optional[str] = ..., installed_id: _Optional[str] = ..., swap_s: _Optional[float] = ..., status: _Optional[_Union[RunStatus, str]] = ..., error: _Optional[str] = ...) -> None: ...

class RollbackRequest(_message.Message):
    __slots__ = ("slot", "tier", "to_candidate_id")
    SLOT_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    TO_CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    slot: str
    tier: Tier
    to_candidate_id: str
    def __init__(self, slot: _Optional[str] = ..., tier: _Optional[_Union[Tier, str]] = ..., to_candidate_id: _Optional[str] = ...) -> None: ...

class BenchmarkRequest(_message.Message):
    __slots__ = ("candidate", "shapes", "tier", "rounds")
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    SHAPES_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    ROUNDS_FIELD_NUMBER: _ClassVar[int]
    candidate: _events_pb2.Candidate
    shapes: _containers.RepeatedCompositeFieldContainer[_events_pb2.ShapeBucket]
    tier: Tier
    rounds: int
    def __init__(self, candidate: _Optional[_Union[_events_pb2.Candidate, _Mapping]] = ..., shapes: _Optional[_Iterable[_Union[_events_pb2.ShapeBucket, _Mapping]]] = ..., tier: _Optional[_Union[Tier, str]] = ..., rounds: _Optional[int] = ...) -> None: ...

class RunSlotRequest(_message.Message):
    __slots__ = ("candidate", "tier", "source", "shapes", "seed", "max_inputs", "repeats", "repeats_s")
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SHAPES_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MAX_INPUTS_FIELD_NUMBER: _ClassVar[int]
    REPEATS_FIELD_NUMBER: _ClassVar[int]
    REPEATS_S_FIELD_NUMBER: _ClassVar[int]
    candidate: _events_pb2.Candidate
    tier: Tier
    source: InputSource
    shapes: _containers.RepeatedCompositeFieldContainer[_events_pb2.ShapeBucket]
    seed: int
    max_inputs: int
    repeats: int
    repeats_s: float
    def __init__(self, candidate: _Optional[_Union[_events_pb2.Candidate, _Mapping]] = ..., tier: _Optional[_Union[Tier, str]] = ..., source: _Optional[_Union[InputSource, str]] = ..., shapes: _Optional[_Iterable[_Union[_events_pb2.ShapeBucket, _Mapping]]] = ..., seed: _Optional[int] = ..., max_inputs: _Optional[int] = ..., repeats: _Optional[int] = ..., repeats_s: _Optional[float] = ...) -> None: ...

class SlotRun(_message.Message):
    __slots__ = ("input_id", "reference", "first", "second", "inputs_mutated", "error")
    INPUT_ID_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    SECOND_FIELD_NUMBER: _ClassVar[int]
    INPUTS_MUTATED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    input_id: str
    reference: TensorProto
    first: TensorProto
    second: TensorProto
    inputs_mutated: bool
    error: str
    def __init__(self, input_id: _Optional[str] = ..., reference: _Optional[_Union[TensorProto, _Mapping]] = ..., first: _Optional[_Union[TensorProto, _Mapping]] = ..., second: _Optional[_Union[TensorProto, _Mapping]] = ..., inputs_mutated: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class RunSlotReply(_message.Message):
    __slots__ = ("slot", "status", "error", "runs", "extra_calls", "extra_failure", "extra_stopped_by_time")
    SLOT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_CALLS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FAILURE_FIELD_NUMBER: _ClassVar[int]
    EXTRA_STOPPED_BY_TIME_FIELD_NUMBER: _ClassVar[int]
    slot: str
    status: RunStatus
    error: str
    runs: _containers.RepeatedCompositeFieldContainer[SlotRun]
    extra_calls: int
    extra_failure: str
    extra_stopped_by_time: bool
    def __init__(self, slot: _Optional[str] = ..., status: _Optional[_Union[RunStatus, str]] = ..., error: _Optional[str] = ..., runs: _Optional[_Iterable[_Union[SlotRun, _Mapping]]] = ..., extra_calls: _Optional[int] = ..., extra_failure: _Optional[str] = ..., extra_stopped_by_time: _Optional[bool] = ...) -> None: ...

class ProfileRequest(_message.Message):
    __slots__ = ("shapes", "tier")
    SHAPES_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    shapes: _containers.RepeatedCompositeFieldContainer[_events_pb2.ShapeBucket]
    tier: Tier
    def __init__(self, shapes: _Optional[_Iterable[_Union[_events_pb2.ShapeBucket, _Mapping]]] = ..., tier: _Optional[_Union[Tier, str]] = ...) -> None: ...

class SlotTime(_message.Message):
    __slots__ = ("slot", "shape", "median_us", "calls_per_step", "floor_us")
    SLOT_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    MEDIAN_US_FIELD_NUMBER: _ClassVar[int]
    CALLS_PER_STEP_FIELD_NUMBER: _ClassVar[int]
    FLOOR_US_FIELD_NUMBER: _ClassVar[int]
    slot: str
    shape: _events_pb2.ShapeBucket
    median_us: float
    calls_per_step: int
    floor_us: float
    def __init__(self, slot: _Optional[str] = ..., shape: _Optional[_Union[_events_pb2.ShapeBucket, _Mapping]] = ..., median_us: _Optional[float] = ..., calls_per_step: _Optional[int] = ..., floor_us: _Optional[float] = ...) -> None: ...

class ShapeStep(_message.Message):
    __slots__ = ("shape", "step_us", "tokens_per_s")
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    STEP_US_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    shape: _events_pb2.ShapeBucket
    step_us: float
    tokens_per_s: float
    def __init__(self, shape: _Optional[_Union[_events_pb2.ShapeBucket, _Mapping]] = ..., step_us: _Optional[float] = ..., tokens_per_s: _Optional[float] = ...) -> None: ...

class ProfileReply(_message.Message):
    __slots__ = ("times", "step_us", "steps", "copy_bandwidth_gb_s")
    TIMES_FIELD_NUMBER: _ClassVar[int]
    STEP_US_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    COPY_BANDWIDTH_GB_S_FIELD_NUMBER: _ClassVar[int]
    times: _containers.RepeatedCompositeFieldContainer[SlotTime]
    step_us: float
    steps: _containers.RepeatedCompositeFieldContainer[ShapeStep]
    copy_bandwidth_gb_s: float
    def __init__(self, times: _Optional[_Iterable[_Union[SlotTime, _Mapping]]] = ..., step_us: _Optional[float] = ..., steps: _Optional[_Iterable[_Union[ShapeStep, _Mapping]]] = ..., copy_bandwidth_gb_s: _Optional[float] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("prompt", "steps", "tier", "overrides", "return_logits", "reference_only")
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    OVERRIDES_FIELD_NUMBER: _ClassVar[int]
    RETURN_LOGITS_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_ONLY_FIELD_NUMBER: _ClassVar[int]
    prompt: _containers.RepeatedScalarFieldContainer[int]
    steps: int
    tier: Tier
    overrides: _containers.RepeatedCompositeFieldContainer[_events_pb2.Candidate]
    return_logits: bool
    reference_only: bool
    def __init__(self, prompt: _Optional[_Iterable[int]] = ..., steps: _Optional[int] = ..., tier: _Optional[_Union[Tier, str]] = ..., overrides: _Optional[_Iterable[_Union[_events_pb2.Candidate, _Mapping]]] = ..., return_logits: _Optional[bool] = ..., reference_only: _Optional[bool] = ...) -> None: ...

class GenerateReply(_message.Message):
    __slots__ = ("status", "error", "tokens", "logits", "seconds")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOGITS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    status: RunStatus
    error: str
    tokens: _containers.RepeatedScalarFieldContainer[int]
    logits: TensorProto
    seconds: float
    def __init__(self, status: _Optional[_Union[RunStatus, str]] = ..., error: _Optional[str] = ..., tokens: _Optional[_Iterable[int]] = ..., logits: _Optional[_Union[TensorProto, _Mapping]] = ..., seconds: _Optional[float] = ...) -> None: ...
