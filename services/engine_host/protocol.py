"""The one typed protocol between the engine host, its harnesses and their sandboxes.

Three kinds of process (see harness.py and sandbox.py): the host service (bus, gRPC, never any
candidate code), a harness per tier (model weights, references, input generation, comparison, clock
and report; never imports candidate code), and sandboxes (one candidate each, nothing trusted inside).
Every message that crosses a process boundary is one of the frozen dataclasses below, sent whole over
a multiprocessing pipe; tensors inside them travel as shared memory (CPU) or CUDA IPC handles (GPU),
so a sandbox writes into buffers the harness owns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from services.common.shapes import Shape

if TYPE_CHECKING:  # no torch import here: a sandbox loads this module before it confines itself
    from services.common.tensors import EncodedTensor


class Status(StrEnum):
    """What happened to a candidate (or a command that ran candidate code): the one status enum."""

    OK = "OK"
    LOAD_ERROR = "LOAD_ERROR"  # did not import, or lacks a valid SLOT/REGION, BACKEND, kernel
    RAISED = "RAISED"  # the kernel raised
    CRASHED = "CRASHED"  # its process died (segfault, device fault, exit)
    TIMEOUT = "TIMEOUT"  # no answer within the per-candidate timeout: killed
    WRONG_OUTPUT = "WRONG_OUTPUT"  # failed the harness's checks (values, contract, written late, cores used)


class InputSource(StrEnum):
    CAPTURED = "captured"  # inputs recorded from real forward passes at traffic shapes
    RANDOM = "random"  # fresh random inputs at the given shapes (odd sizes, stress magnitudes)


@dataclass(frozen=True)
class CandidateCode:
    candidate_id: str
    op: str  # a slot or a region
    source: str


# -- host → harness -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Benchmark:
    candidate: CandidateCode
    shapes: tuple[Shape, ...]
    rounds: int = 0  # 0: the tier's default


@dataclass(frozen=True)
class Install:
    """Put a kernel that passed into the live engine (the one that serves Generate)."""

    candidate: CandidateCode
    warm: bool = False  # call it once first so its JIT is reported apart from the swap


@dataclass(frozen=True)
class Rollback:
    op: str


@dataclass(frozen=True)
class RunOp:
    """Reference and candidate on the same inputs; the verifier judges the outputs."""

    op: str
    candidate: CandidateCode | None  # None: the reference alone
    source: InputSource
    shapes: tuple[Shape, ...] = ()
    seed: int = 0
    max_inputs: int = 0  # 0: all
    repeats: int = 0  # further calls in all, spread over the sets, on fresh inputs, each checked here
    repeats_s: float = 0.0  # stop the repeats after this long (0: no limit)


@dataclass(frozen=True)
class Generate:
    prompt: tuple[int, ...]
    steps: int
    overrides: tuple[CandidateCode, ...] = ()  # unverified: run in a fresh sandbox
    reference_only: bool = False  # every op on its reference: runs in the harness itself
    return_logits: bool = False


@dataclass(frozen=True)
class Profile:
    shapes: tuple[Shape, ...]


@dataclass(frozen=True)
class Capture:
    shapes: tuple[Shape, ...]


@dataclass(frozen=True)
class DecodeRate:
    batch: int
    steps: int = 30
    blocks: int = 3


@dataclass(frozen=True)
class Info:
    pass


@dataclass(frozen=True)
class Exit:
    pass


# -- results --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TimingStats:
    median_us: float
    p10_us: float
    p90_us: float
    runs: int


@dataclass(frozen=True)
class BenchmarkReport:
    status: Status
    reason: str = ""
    incumbent_id: str = "reference"
    shapes: tuple[str, ...] = ()
    incumbent: TimingStats | None = None
    candidate: TimingStats | None = None
    aa_spread: float = 0.0
    speedup: float = 0.0
    speedup_lo: float = 0.0
    speedup_hi: float = 0.0
    per_item: dict[str, float] = field(default_factory=dict)
    per_group: dict[str, dict[str, float]] = field(default_factory=dict)
    per_round: tuple[float, ...] = ()  # each timing round's ratio: the spread behind the interval
    speedup_pooled: float = 0.0  # the ratio of each item's median over all samples (a second estimate)
    checked_calls: int = 0  # timed calls whose outputs the harness checked after timing
    timed_calls: int = 0
    phases: dict[str, float] = field(default_factory=dict)  # seconds: sandbox, load, inputs, check, timing


@dataclass(frozen=True)
class SwapReport:
    status: Status
    error: str = ""
    previous_id: str = ""
    installed_id: str = ""
    swap_s: float = 0.0
    load_s: float = 0.0
    jit_s: float = 0.0
    backend: str = ""  # what the (last) loaded candidate declares: its first call may compile


@dataclass(frozen=True)
class OpRun:
    input_id: str
    reference: EncodedTensor | None = None
    first: EncodedTensor | None = None  # candidate output, output buffers poisoned before the call
    second: EncodedTensor | None = None  # a second call on the same inputs
    inputs_mutated: bool = False
    error: str = ""


@dataclass(frozen=True)
class RunReport:
    status: Status
    error: str = ""
    runs: tuple[OpRun, ...] = ()
    extra_calls: int = 0  # further calls on fresh inputs, each checked in the harness
    extra_failure: str = ""  # the first of those that failed ("" when all passed)
    extra_stopped_by_time: bool = False


@dataclass(frozen=True)
class GenerateReport:
    status: Status
    error: str = ""
    tokens: tuple[int, ...] = ()
    logits: EncodedTensor | None = None  # [steps, V] float32
    seconds: float = 0.0


@dataclass(frozen=True)
class OpTime:
    op: str
    shape: Shape
    median_us: float
    calls_per_step: int
    floor_us: float = 0.0  # bytes its calls move per step / copy bandwidth (0: not estimated)


@dataclass(frozen=True)
class ProfileReport:
    times: tuple[OpTime, ...]
    shape_steps: tuple[ShapeStep, ...]  # each shape's own step time: what tokens/s comes from
    graphs: bool = False
    eager_step_us: dict[str, float] = field(default_factory=dict)
    copy_bandwidth_gb_s: float = 0.0

    @property
    def step_us(self) -> float:
        """The step time weighted over the shapes."""
        weight = sum(st.shape.weight for st in self.shape_steps)
        return sum(st.step_us * st.shape.weight for st in self.shape_steps) / weight if weight > 0 else 0.0


@dataclass(frozen=True)
class ShapeStep:
    shape: Shape
    step_us: float

    @property
    def tokens_per_s(self) -> float:
        return self.shape.batch * self.shape.new_tokens / (self.step_us * 1e-6) if self.step_us > 0 else 0.0


@dataclass(frozen=True)
class CaptureReport:
    captured: tuple[str, ...]
    counts: dict[str, int]


@dataclass(frozen=True)
class RateReport:
    tok_s: float
    rates: tuple[float, ...]
    first_step_s: float
    recaptured: int
    graphs: bool
    capture: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HarnessInfo:
    tier: str
    device: str
    hardware: str
    layers: int
    ops: dict[str, str]  # op → candidate id the live engine holds ("reference" for the native op)
    vocab_size: int
    max_seq: int
    dtype: str
    torch: str
    graphs: bool
    captured: dict[str, int]
    weights: str
    start_stages: dict[str, float]
    containment: dict[str, str]  # what the sandboxes are confined by, measured at the first spawn


# -- one process talking to its parent --------------------------------------------------------------
@dataclass(frozen=True)
class Progress:
    note: str


@dataclass(frozen=True)
class Ready:
    info: Any


@dataclass(frozen=True)
class Fatal:
    text: str


@dataclass(frozen=True)
class Reply:
    result: Any


@dataclass(frozen=True)
class Refused:
    """The command itself was invalid (a bad request, not a candidate failure)."""

    error: str


# -- harness → sandbox ----------------------------------------------------------------------------
@dataclass(frozen=True)
class SandboxSpec:
    device: str
    threads: int
    confinement: Any  # containment.Confinement
    label: str  # "candidate", "live", "e2e": for logs only; the program is the same


@dataclass(frozen=True)
class Load:
    """Load candidates into the sandbox's op table, in order (a sandbox under test gets one; a
    live engine or an end-to-end sandbox also the passed incumbents)."""

    candidates: tuple[CandidateCode, ...]
    warm: bool = False


@dataclass(frozen=True)
class ModelShare:
    """A model built from tensors the harness owns: weights (a copy only sandboxes see) and KV caches."""

    args: Any  # models.llama.ModelArgs
    weights: dict[str, Any]
    caches: tuple[tuple[Any, Any], ...]  # per layer (k_cache, v_cache)
    max_batch: int
    graphs: bool  # CUDA graphs for decode steps (GPU only)


@dataclass(frozen=True)
class AttachModel:
    share: ModelShare


@dataclass(frozen=True)
class OutputMeta:
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Bind:
    """Input sets and output slabs of one work item, shared once; calls then name them by index."""

    item: str
    op: str
    inputs: tuple[tuple[Any, ...], ...]
    outputs: tuple[Any, ...]  # one slab [n_slots, *shape] per op output
    expect: tuple[OutputMeta, ...]
    # decode items on a GPU: a sequence of calls runs as one CUDA graph, as decode steps run in the live
    # engine (timing them eagerly would measure Python and launch overhead that production never pays)
    graphed: bool = False


@dataclass(frozen=True)
class Calls:
    item: str
    calls: tuple[tuple[int, int], ...]  # (input set, output slot) per call, in order


@dataclass(frozen=True)
class CallsDone:
    error: str = ""  # the kernel raised
    contract: str = ""  # an output broke the contract (type, dtype, shape, device, layout)


@dataclass(frozen=True)
class RestoreCaches:
    caches: tuple[tuple[int, Any, Any], ...]  # (layer, k, v) to copy into the model's KV caches


@dataclass(frozen=True)
class Unbind:
    item: str


@dataclass(frozen=True)
class Steps:
    """Decode steps at one batch through the live model (the harness times the round trip)."""

    batch: int
    steps: int


# -- host → harness at spawn ------------------------------------------------------------------------
@dataclass(frozen=True)
class HarnessSpec:
    tier: str
    model: str
    n_layers: int | None  # None: the whole model
    seed: int
    device: str  # "auto", "cpu", "cuda", "cuda:1", ...
    data_dir: str
    max_batch: int = 32
    max_tokens: int = 1024
    max_shapes: int = 4
    threads: int = 1
    rounds: int = 10
    samples: int = 5
    target_sample_s: float = 2e-3
    noise_floor: float = 0.01
    input_sets: int = 3
    capture_shapes: tuple[Shape, ...] = ()
    capture_per_slot: int = 8
    graphs: bool = True  # CUDA graphs per batch bucket for decode steps (CUDA only; the CPU stays eager)
    warm_buckets: tuple[int, ...] = ()  # live-engine buckets captured at start
    max_seq: int = 0  # static KV cache length; 0: the model's own maximum
    checkpoint: str = ""  # a safetensors file with real weights; empty: seeded random weights
    candidate_timeout_s: float = 60.0  # a sandbox silent this long is killed as hung
    sandbox_pool: int = 1  # warm sandboxes kept ready
    sandbox_start_timeout_s: float = 300.0
    sandbox_relax: tuple[str, ...] = ()  # containment measures switched off (containment.MEASURES)
    jit_timeout_s: float = 180.0  # a Triton / torch.compile candidate's first call may take this long
