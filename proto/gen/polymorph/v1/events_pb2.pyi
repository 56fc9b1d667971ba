from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Backend(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BACKEND_UNSPECIFIED: _ClassVar[Backend]
    BACKEND_TORCH: _ClassVar[Backend]
    BACKEND_TRITON: _ClassVar[Backend]
    BACKEND_COMPILE: _ClassVar[Backend]

class Phase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PHASE_UNSPECIFIED: _ClassVar[Phase]
    PHASE_PREFILL: _ClassVar[Phase]
    PHASE_DECODE: _ClassVar[Phase]

class CampaignState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CAMPAIGN_STATE_UNSPECIFIED: _ClassVar[CampaignState]
    CAMPAIGN_STATE_RUNNING: _ClassVar[CampaignState]
    CAMPAIGN_STATE_COMPLETED: _ClassVar[CampaignState]
    CAMPAIGN_STATE_FAILED: _ClassVar[CampaignState]

class BenchStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BENCH_STATUS_UNSPECIFIED: _ClassVar[BenchStatus]
    BENCH_STATUS_OK: _ClassVar[BenchStatus]
    BENCH_STATUS_LOAD_ERROR: _ClassVar[BenchStatus]
    BENCH_STATUS_RAISED: _ClassVar[BenchStatus]
    BENCH_STATUS_CRASHED: _ClassVar[BenchStatus]
    BENCH_STATUS_TIMEOUT: _ClassVar[BenchStatus]
    BENCH_STATUS_WRONG_OUTPUT: _ClassVar[BenchStatus]

class VerdictStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERDICT_STATUS_UNSPECIFIED: _ClassVar[VerdictStatus]
    VERDICT_STATUS_PASSED: _ClassVar[VerdictStatus]
    VERDICT_STATUS_FAILED: _ClassVar[VerdictStatus]
BACKEND_UNSPECIFIED: Backend
BACKEND_TORCH: Backend
BACKEND_TRITON: Backend
BACKEND_COMPILE: Backend
PHASE_UNSPECIFIED: Phase
PHASE_PREFILL: Phase
PHASE_DECODE: Phase
CAMPAIGN_STATE_UNSPECIFIED: CampaignState
CAMPAIGN_STATE_RUNNING: CampaignState
CAMPAIGN_STATE_COMPLETED: CampaignState
CAMPAIGN_STATE_FAILED: CampaignState
BENCH_STATUS_UNSPECIFIED: BenchStatus
BENCH_STATUS_OK: BenchStatus
BENCH_STATUS_LOAD_ERROR: BenchStatus
BENCH_STATUS_RAISED: BenchStatus
BENCH_STATUS_CRASHED: BenchStatus
BENCH_STATUS_TIMEOUT: BenchStatus
BENCH_STATUS_WRONG_OUTPUT: BenchStatus
VERDICT_STATUS_UNSPECIFIED: VerdictStatus
VERDICT_STATUS_PASSED: VerdictStatus
VERDICT_STATUS_FAILED: VerdictStatus

class RequestRecord(_message.Message):
    __slots__ = ("arrival_s", "prompt_tokens", "output_tokens", "cached_tokens", "block_hashes", "expert_counts", "model", "tag", "request_id")
    ARRIVAL_S_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    EXPERT_COUNTS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    expert_counts: _containers.RepeatedScalarFieldContainer[int]
    model: str
    tag: str
    request_id: str
    def __init__(self, arrival_s: _Optional[float] = ..., prompt_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., block_hashes: _Optional[_Iterable[int]] = ..., expert_counts: _Optional[_Iterable[int]] = ..., model: _Optional[str] = ..., tag: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ShapeBucket(_message.Message):
    __slots__ = ("phase", "batch_size", "context_len", "weight")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LEN_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    phase: Phase
    batch_size: int
    context_len: int
    weight: float
    def __init__(self, phase: _Optional[_Union[Phase, str]] = ..., batch_size: _Optional[int] = ..., context_len: _Optional[int] = ..., weight: _Optional[float] = ...) -> None: ...

class Quantiles(_message.Message):
    __slots__ = ("p10", "p50", "p90", "p99", "mean")
    P10_FIELD_NUMBER: _ClassVar[int]
    P50_FIELD_NUMBER: _ClassVar[int]
    P90_FIELD_NUMBER: _ClassVar[int]
    P99_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    p10: float
    p50: float
    p90: float
    p99: float
    mean: float
    def __init__(self, p10: _Optional[float] = ..., p50: _Optional[float] = ..., p90: _Optional[float] = ..., p99: _Optional[float] = ..., mean: _Optional[float] = ...) -> None: ...

class TrafficProfile(_message.Message):
    __slots__ = ("profile_id", "window_start_s", "window_end_s", "requests", "prompt_tokens", "output_tokens", "arrival_rate", "burstiness", "prefix_hit_rate", "concurrency", "expert_load", "buckets", "model", "tags")
    PROFILE_ID_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_S_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_S_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ARRIVAL_RATE_FIELD_NUMBER: _ClassVar[int]
    BURSTINESS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_HIT_RATE_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    EXPERT_LOAD_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    profile_id: str
    window_start_s: float
    window_end_s: float
    requests: int
    prompt_tokens: Quantiles
    output_tokens: Quantiles
    arrival_rate: float
    burstiness: float
    prefix_hit_rate: float
    concurrency: float
    expert_load: _containers.RepeatedScalarFieldContainer[float]
    buckets: _containers.RepeatedCompositeFieldContainer[ShapeBucket]
    model: str
    tags: _containers.RepeatedCompositeFieldContainer[TagProfile]
    def __init__(self, profile_id: _Optional[str] = ..., window_start_s: _Optional[float] = ..., window_end_s: _Optional[float] = ..., requests: _Optional[int] = ..., prompt_tokens: _Optional[_Union[Quantiles, _Mapping]] = ..., output_tokens: _Optional[_Union[Quantiles, _Mapping]] = ..., arrival_rate: _Optional[float] = ..., burstiness: _Optional[float] = ..., prefix_hit_rate: _Optional[float] = ..., concurrency: _Optional[float] = ..., expert_load: _Optional[_Iterable[float]] = ..., buckets: _Optional[_Iterable[_Union[ShapeBucket, _Mapping]]] = ..., model: _Optional[str] = ..., tags: _Optional[_Iterable[_Union[TagProfile, _Mapping]]] = ...) -> None: ...

class TagProfile(_message.Message):
    __slots__ = ("tag", "requests", "prompt_tokens", "output_tokens", "arrival_rate", "share", "prefix_hit_rate")
    TAG_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ARRIVAL_RATE_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    PREFIX_HIT_RATE_FIELD_NUMBER: _ClassVar[int]
    tag: str
    requests: int
    prompt_tokens: Quantiles
    output_tokens: Quantiles
    arrival_rate: float
    share: float
    prefix_hit_rate: float
    def __init__(self, tag: _Optional[str] = ..., requests: _Optional[int] = ..., prompt_tokens: _Optional[_Union[Quantiles, _Mapping]] = ..., output_tokens: _Optional[_Union[Quantiles, _Mapping]] = ..., arrival_rate: _Optional[float] = ..., share: _Optional[float] = ..., prefix_hit_rate: _Optional[float] = ...) -> None: ...

class MetricChange(_message.Message):
    __slots__ = ("metric", "before", "after", "ks", "psi", "since_s")
    METRIC_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    KS_FIELD_NUMBER: _ClassVar[int]
    PSI_FIELD_NUMBER: _ClassVar[int]
    SINCE_S_FIELD_NUMBER: _ClassVar[int]
    metric: str
    before: float
    after: float
    ks: float
    psi: float
    since_s: float
    def __init__(self, metric: _Optional[str] = ..., before: _Optional[float] = ..., after: _Optional[float] = ..., ks: _Optional[float] = ..., psi: _Optional[float] = ..., since_s: _Optional[float] = ...) -> None: ...

class DriftEvent(_message.Message):
    __slots__ = ("drift_id", "t_s", "changes", "reference", "current")
    DRIFT_ID_FIELD_NUMBER: _ClassVar[int]
    T_S_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    drift_id: str
    t_s: float
    changes: _containers.RepeatedCompositeFieldContainer[MetricChange]
    reference: TrafficProfile
    current: TrafficProfile
    def __init__(self, drift_id: _Optional[str] = ..., t_s: _Optional[float] = ..., changes: _Optional[_Iterable[_Union[MetricChange, _Mapping]]] = ..., reference: _Optional[_Union[TrafficProfile, _Mapping]] = ..., current: _Optional[_Union[TrafficProfile, _Mapping]] = ...) -> None: ...

class Campaign(_message.Message):
    __slots__ = ("campaign_id", "model", "slots", "trigger", "budget", "state", "profile", "started_unix", "finished_unix", "proposed", "stop_reason", "step_shares", "step_us", "profile_error")
    CAMPAIGN_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    STARTED_UNIX_FIELD_NUMBER: _ClassVar[int]
    FINISHED_UNIX_FIELD_NUMBER: _ClassVar[int]
    PROPOSED_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    STEP_SHARES_FIELD_NUMBER: _ClassVar[int]
    STEP_US_FIELD_NUMBER: _ClassVar[int]
    PROFILE_ERROR_FIELD_NUMBER: _ClassVar[int]
    campaign_id: str
    model: str
    slots: _containers.RepeatedScalarFieldContainer[str]
    trigger: str
    budget: int
    state: CampaignState
    profile: TrafficProfile
    started_unix: float
    finished_unix: float
    proposed: int
    stop_reason: str
    step_shares: _containers.RepeatedCompositeFieldContainer[SlotShare]
    step_us: float
    profile_error: str
    def __init__(self, campaign_id: _Optional[str] = ..., model: _Optional[str] = ..., slots: _Optional[_Iterable[str]] = ..., trigger: _Optional[str] = ..., budget: _Optional[int] = ..., state: _Optional[_Union[CampaignState, str]] = ..., profile: _Optional[_Union[TrafficProfile, _Mapping]] = ..., started_unix: _Optional[float] = ..., finished_unix: _Optional[float] = ..., proposed: _Optional[int] = ..., stop_reason: _Optional[str] = ..., step_shares: _Optional[_Iterable[_Union[SlotShare, _Mapping]]] = ..., step_us: _Optional[float] = ..., profile_error: _Optional[str] = ...) -> None: ...

class SlotShare(_message.Message):
    __slots__ = ("slot", "share", "us_per_step", "floor_us", "headroom")
    SLOT_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    US_PER_STEP_FIELD_NUMBER: _ClassVar[int]
    FLOOR_US_FIELD_NUMBER: _ClassVar[int]
    HEADROOM_FIELD_NUMBER: _ClassVar[int]
    slot: str
    share: float
    us_per_step: float
    floor_us: float
    headroom: float
    def __init__(self, slot: _Optional[str] = ..., share: _Optional[float] = ..., us_per_step: _Optional[float] = ..., floor_us: _Optional[float] = ..., headroom: _Optional[float] = ...) -> None: ...

class StartCampaignRequest(_message.Message):
    __slots__ = ("model", "slots", "budget", "profile")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    model: str
    slots: _containers.RepeatedScalarFieldContainer[str]
    budget: int
    profile: TrafficProfile
    def __init__(self, model: _Optional[str] = ..., slots: _Optional[_Iterable[str]] = ..., budget: _Optional[int] = ..., profile: _Optional[_Union[TrafficProfile, _Mapping]] = ...) -> None: ...

class Candidate(_message.Message):
    __slots__ = ("candidate_id", "campaign_id", "slot", "backend", "source", "agent", "params", "model", "parent_id", "created_unix", "shapes")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    CAMPAIGN_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_FIELD_NUMBER: _ClassVar[int]
    SHAPES_FIELD_NUMBER: _ClassVar[int]
    candidate_id: str
    campaign_id: str
    slot: str
    backend: Backend
    source: str
    agent: str
    params: _containers.ScalarMap[str, str]
    model: str
    parent_id: str
    created_unix: float
    shapes: _containers.RepeatedCompositeFieldContainer[ShapeBucket]
    def __init__(self, candidate_id: _Optional[str] = ..., campaign_id: _Optional[str] = ..., slot: _Optional[str] = ..., backend: _Optional[_Union[Backend, str]] = ..., source: _Optional[str] = ..., agent: _Optional[str] = ..., params: _Optional[_Mapping[str, str]] = ..., model: _Optional[str] = ..., parent_id: _Optional[str] = ..., created_unix: _Optional[float] = ..., shapes: _Optional[_Iterable[_Union[ShapeBucket, _Mapping]]] = ...) -> None: ...

class Timing(_message.Message):
    __slots__ = ("median_us", "p10_us", "p90_us", "runs")
    MEDIAN_US_FIELD_NUMBER: _ClassVar[int]
    P10_US_FIELD_NUMBER: _ClassVar[int]
    P90_US_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    median_us: float
    p10_us: float
    p90_us: float
    runs: int
    def __init__(self, median_us: _Optional[float] = ..., p10_us: _Optional[float] = ..., p90_us: _Optional[float] = ..., runs: _Optional[int] = ...) -> None: ...

class BenchmarkResult(_message.Message):
    __slots__ = ("candidate_id", "campaign_id", "slot", "status", "reason", "candidate", "incumbent", "incumbent_id", "aa_spread", "speedup", "speedup_lo", "speedup_hi", "speedup_vs_reference", "engine_id", "tier", "hardware", "model", "bench_s", "finished_unix", "checked_calls", "timed_calls")
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    CAMPAIGN_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    INCUMBENT_FIELD_NUMBER: _ClassVar[int]
    INCUMBENT_ID_FIELD_NUMBER: _ClassVar[int]
    AA_SPREAD_FIELD_NUMBER: _ClassVar[int]
    SPEEDUP_FIELD_NUMBER: _ClassVar[int]
    SPEEDUP_LO_FIELD_NUMBER: _ClassVar[int]
    SPEEDUP_HI_FIELD_NUMBER: _ClassVar[int]
    SPEEDUP_VS_REFERENCE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BENCH_S_FIELD_NUMBER: _ClassVar[int]
    FINISHED_UNIX_FIELD_NUMBER: _ClassVar[int]
    CHECKED_CALLS_FIELD_NUMBER: _ClassVar[int]
    TIMED_CALLS_FIELD_NUMBER: _ClassVar[int]
    candidate_id: str
    campaign_id: str
    slot: str
    status: BenchStatus
    reason: str
    candidate: Timing
    incumbent: Timing
    incumbent_id: str
    aa_spread: float
    speedup: float
    speedup_lo: float
    speedup_hi: float
    speedup_vs_reference: float
    engine_id: str
    tier: str
    hardware: str
    model: str
    bench_s: float
    finished_unix: float
    checked_calls: int
    timed_calls: int
    def __init__(self, candidate_id: _Optional[str] = ..., campaign_id: _Optional[str] = ..., slot: _Optional[str] = ..., status: _Optional[_Union[BenchStatus, str]] = ..., reason: _Optional[str] = ..., candidate: _Optional[_Union[Timing, _Mapping]] = ..., incumbent: _Optional[_Union[Timing, _Mapping]] = ..., incumbent_id: _Optional[str] = ..., aa_spread: _Optional[float] = ..., speedup: _Optional[float] = ..., speedup_lo: _Optional[float] = ..., speedup_hi: _Optional[float] = ..., speedup_vs_reference: _Optional[float] = ..., engine_id: _Optional[str] = ..., tier: _Optional[str] = ..., hardware: _Optional[str] = ..., model: _Optional[str] = ..., bench_s: _Optional[float] = ..., finished_unix: _Optional[float] = ..., checked_calls: _Optional[int] = ..., timed_calls: _Optional[int] = ...) -> None: ...

class CheckResult(_message.Message):
    __slots__ = ("stage", "passed", "detail", "max_abs_err", "rel_err")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    MAX_ABS_ERR_FIELD_NUMBER: _ClassVar[int]
    REL_ERR_FIELD_NUMBER: _ClassVar[int]
    stage: str
    passed: bool
    detail: str
    max_abs_err: float
    rel_err: float
    def __init__(self, stage: _Optional[str] = ..., passed: _Optional[bool] = ..., detail: _Optional[str] = ..., max_abs_err: _Optional[float] = ..., rel_err: _Optional[float] = ...) -> None: ...

class Verdict(_message.Message):
    __slots__ = ("candidate_id", "campaign_id", "slot", "status", "failed_stage", "reason", "checks", "speedup", "speedup_lo", "speedup_vs_reference", "hardware", "model", "verify_s", "finished_unix")
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    CAMPAIGN_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    FAILED_STAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    SPEEDUP_FIELD_NUMBER: _ClassVar[int]
    SPEEDUP_LO_FIELD_NUMBER: _ClassVar[int]
    SPEEDUP_VS_REFERENCE_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERIFY_S_FIELD_NUMBER: _ClassVar[int]
    FINISHED_UNIX_FIELD_NUMBER: _ClassVar[int]
    candidate_id: str
    campaign_id: str
    slot: str
    status: VerdictStatus
    failed_stage: str
    reason: str
    checks: _containers.RepeatedCompositeFieldContainer[CheckResult]
    speedup: float
    speedup_lo: float
    speedup_vs_reference: float
    hardware: str
    model: str
    verify_s: float
    finished_unix: float
    def __init__(self, candidate_id: _Optional[str] = ..., campaign_id: _Optional[str] = ..., slot: _Optional[str] = ..., status: _Optional[_Union[VerdictStatus, str]] = ..., failed_stage: _Optional[str] = ..., reason: _Optional[str] = ..., checks: _Optional[_Iterable[_Union[CheckResult, _Mapping]]] = ..., speedup: _Optional[float] = ..., speedup_lo: _Optional[float] = ..., speedup_vs_reference: _Optional[float] = ..., hardware: _Optional[str] = ..., model: _Optional[str] = ..., verify_s: _Optional[float] = ..., finished_unix: _Optional[float] = ...) -> None: ...

class KernelPromoted(_message.Message):
    __slots__ = ("candidate_id", "slot", "model", "hardware", "speedup", "speedup_lo", "speedup_vs_reference", "replaces_id", "backend", "source", "campaign_id", "promoted_unix", "signature", "key_id")
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    SPEEDUP_FIELD_NUMBER: _ClassVar[int]
    SPEEDUP_LO_FIELD_NUMBER: _ClassVar[int]
    SPEEDUP_VS_REFERENCE_FIELD_NUMBER: _ClassVar[int]
    REPLACES_ID_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CAMPAIGN_ID_FIELD_NUMBER: _ClassVar[int]
    PROMOTED_UNIX_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    candidate_id: str
    slot: str
    model: str
    hardware: str
    speedup: float
    speedup_lo: float
    speedup_vs_reference: float
    replaces_id: str
    backend: Backend
    source: str
    campaign_id: str
    promoted_unix: float
    signature: bytes
    key_id: str
    def __init__(self, candidate_id: _Optional[str] = ..., slot: _Optional[str] = ..., model: _Optional[str] = ..., hardware: _Optional[str] = ..., speedup: _Optional[float] = ..., speedup_lo: _Optional[float] = ..., speedup_vs_reference: _Optional[float] = ..., replaces_id: _Optional[str] = ..., backend: _Optional[_Union[Backend, str]] = ..., source: _Optional[str] = ..., campaign_id: _Optional[str] = ..., promoted_unix: _Optional[float] = ..., signature: _Optional[bytes] = ..., key_id: _Optional[str] = ...) -> None: ...

class KernelDemoted(_message.Message):
    __slots__ = ("candidate_id", "slot", "model", "hardware", "reason", "demoted_unix", "signature", "key_id")
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DEMOTED_UNIX_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    candidate_id: str
    slot: str
    model: str
    hardware: str
    reason: str
    demoted_unix: float
    signature: bytes
    key_id: str
    def __init__(self, candidate_id: _Optional[str] = ..., slot: _Optional[str] = ..., model: _Optional[str] = ..., hardware: _Optional[str] = ..., reason: _Optional[str] = ..., demoted_unix: _Optional[float] = ..., signature: _Optional[bytes] = ..., key_id: _Optional[str] = ...) -> None: ...

class BoardNote(_message.Message):
    __slots__ = ("note_id", "campaign_id", "agent", "slot", "text", "params", "score", "created_unix")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NOTE_ID_FIELD_NUMBER: _ClassVar[int]
    CAMPAIGN_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_FIELD_NUMBER: _ClassVar[int]
    note_id: str
    campaign_id: str
    agent: str
    slot: str
    text: str
    params: _containers.ScalarMap[str, str]
    score: float
    created_unix: float
    def __init__(self, note_id: _Optional[str] = ..., campaign_id: _Optional[str] = ..., agent: _Optional[str] = ..., slot: _Optional[str] = ..., text: _Optional[str] = ..., params: _Optional[_Mapping[str, str]] = ..., score: _Optional[float] = ..., created_unix: _Optional[float] = ...) -> None: ...

class ExperienceRequest(_message.Message):
    __slots__ = ("model", "hardware", "slots", "exclude_campaign", "per_slot")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_CAMPAIGN_FIELD_NUMBER: _ClassVar[int]
    PER_SLOT_FIELD_NUMBER: _ClassVar[int]
    model: str
    hardware: str
    slots: _containers.RepeatedScalarFieldContainer[str]
    exclude_campaign: str
    per_slot: int
    def __init__(self, model: _Optional[str] = ..., hardware: _Optional[str] = ..., slots: _Optional[_Iterable[str]] = ..., exclude_campaign: _Optional[str] = ..., per_slot: _Optional[int] = ...) -> None: ...

class Experience(_message.Message):
    __slots__ = ("slot", "candidate_id", "params", "speedup", "model", "hardware", "campaign_id", "promoted", "verified")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SLOT_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    SPEEDUP_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    CAMPAIGN_ID_FIELD_NUMBER: _ClassVar[int]
    PROMOTED_FIELD_NUMBER: _ClassVar[int]
    VERIFIED_FIELD_NUMBER: _ClassVar[int]
    slot: str
    candidate_id: str
    params: _containers.ScalarMap[str, str]
    speedup: float
    model: str
    hardware: str
    campaign_id: str
    promoted: bool
    verified: bool
    def __init__(self, slot: _Optional[str] = ..., candidate_id: _Optional[str] = ..., params: _Optional[_Mapping[str, str]] = ..., speedup: _Optional[float] = ..., model: _Optional[str] = ..., hardware: _Optional[str] = ..., campaign_id: _Optional[str] = ..., promoted: _Optional[bool] = ..., verified: _Optional[bool] = ...) -> None: ...

class ExperienceReply(_message.Message):
    __slots__ = ("items", "error")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[Experience]
    error: str
    def __init__(self, items: _Optional[_Iterable[_Union[Experience, _Mapping]]] = ..., error: _Optional[str] = ...) -> None: ...

class SqlRequest(_message.Message):
    __slots__ = ("query", "max_rows", "json_values")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    MAX_ROWS_FIELD_NUMBER: _ClassVar[int]
    JSON_VALUES_FIELD_NUMBER: _ClassVar[int]
    query: str
    max_rows: int
    json_values: bool
    def __init__(self, query: _Optional[str] = ..., max_rows: _Optional[int] = ..., json_values: _Optional[bool] = ...) -> None: ...

class SqlReply(_message.Message):
    __slots__ = ("columns", "types", "rows", "error", "truncated")
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    columns: _containers.RepeatedScalarFieldContainer[str]
    types: _containers.RepeatedScalarFieldContainer[str]
    rows: _containers.RepeatedCompositeFieldContainer[SqlRow]
    error: str
    truncated: bool
    def __init__(self, columns: _Optional[_Iterable[str]] = ..., types: _Optional[_Iterable[str]] = ..., rows: _Optional[_Iterable[_Union[SqlRow, _Mapping]]] = ..., error: _Optional[str] = ..., truncated: _Optional[bool] = ...) -> None: ...

class SqlRow(_message.Message):
    __slots__ = ("values", "is_null", "json_values")
    VALUES_FIELD_NUMBER: _ClassVar[int]
    IS_NULL_FIELD_NUMBER: _ClassVar[int]
    JSON_VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[str]
    is_null: _containers.RepeatedScalarFieldContainer[bool]
    json_values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, values: _Optional[_Iterable[str]] = ..., is_null: _Optional[_Iterable[bool]] = ..., json_values: _Optional[_Iterable[str]] = ...) -> None: ...

class ExportRequest(_message.Message):
    __slots__ = ("dir",)
    DIR_FIELD_NUMBER: _ClassVar[int]
    dir: str
    def __init__(self, dir: _Optional[str] = ...) -> None: ...

class ExportReply(_message.Message):
    __slots__ = ("files", "error")
    FILES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedScalarFieldContainer[str]
    error: str
    def __init__(self, files: _Optional[_Iterable[str]] = ..., error: _Optional[str] = ...) -> None: ...

class ErrorReply(_message.Message):
    __slots__ = ("error",)
    ERROR_FIELD_NUMBER: _ClassVar[int]
    error: str
    def __init__(self, error: _Optional[str] = ...) -> None: ...

class DiscoverRequest(_message.Message):
    __slots__ = ("model", "tier")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    model: str
    tier: str
    def __init__(self, model: _Optional[str] = ..., tier: _Optional[str] = ...) -> None: ...

class EngineAddress(_message.Message):
    __slots__ = ("address", "engine_id", "model", "hardware", "tiers", "error")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    TIERS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    address: str
    engine_id: str
    model: str
    hardware: str
    tiers: _containers.RepeatedScalarFieldContainer[str]
    error: str
    def __init__(self, address: _Optional[str] = ..., engine_id: _Optional[str] = ..., model: _Optional[str] = ..., hardware: _Optional[str] = ..., tiers: _Optional[_Iterable[str]] = ..., error: _Optional[str] = ...) -> None: ...
