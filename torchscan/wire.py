"""The report's wire format as types, held to the shipped JSON Schema by tests/test_wire.py.

Each object of ``report.schema.json`` has a TypedDict here with the same field names and the same required set
(an optional field is ``NotRequired``); enumerations are ``Literal`` types. `Report` is the whole report. A metric
result is `torchscan.results.MetricResult`, re-exported here. The schema describes some fields of ``context`` by
name only (``execution``, ``prior_training``, ``custom_modules``): their types (`Execution`, `PriorTraining`,
`CustomModule`) follow the code that writes them, and the test lists them as not described by the schema.

This module deliberately does not use ``from __future__ import annotations``: under Python 3.11, TypedDict reads
``NotRequired`` only from evaluated annotations, so string annotations would make every field required in
``__required_keys__`` (which the test compares with the schema). Forward references are quoted instead.
"""

from collections.abc import Iterable, Mapping
from typing import Any, Literal, NotRequired, TypeAlias, TypedDict, TypeVar

from .results import ROOT_PATH, MetricResult

__all__ = [
    "ROOT_PATH",
    "AnalysisMode",
    "AttentionKernel",
    "AutocastRegion",
    "BreakdownPart",
    "BufferStatistics",
    "CallBytes",
    "CallFlops",
    "CallKey",
    "CallMetadata",
    "CallReference",
    "CollectiveBytes",
    "CollectiveKinds",
    "Collectives",
    "Context",
    "ContextWarning",
    "CountedOperator",
    "CustomModule",
    "DeviceFlops",
    "Diagnostic",
    "ElidedValue",
    "Execution",
    "FailedValue",
    "FirstStep",
    "IgnoredOperator",
    "KVCache",
    "KeyedValue",
    "LayerBuffers",
    "LayerMemory",
    "LayerMetrics",
    "LayerParameters",
    "LayerRecord",
    "Loss",
    "MappingValue",
    "Memory",
    "MemoryAtPeak",
    "MetaKernels",
    "MetricName",
    "MetricOwners",
    "MetricOwnership",
    "MetricResult",
    "NamedTupleValue",
    "NestedTensorValue",
    "NoneValue",
    "ObjectValue",
    "OperatorBytes",
    "OperatorBytesRow",
    "OperatorFlops",
    "Optimizer",
    "OutputCache",
    "Ownership",
    "Parallel",
    "ParallelCategories",
    "ParallelFit",
    "ParallelFitPoint",
    "ParallelPlanRecord",
    "ParallelStep",
    "ParameterStatistics",
    "PeakAt",
    "PerDevice",
    "Phase",
    "Precision",
    "PriorTraining",
    "Report",
    "ResidentAtStart",
    "SavedByLayer",
    "ScalarValue",
    "SequenceValue",
    "Severity",
    "ShardingPrecision",
    "ShardingUnits",
    "StandIns",
    "TensorValue",
    "Time",
    "TimeLayer",
    "TimeOperator",
    "TimePhase",
    "TimePhases",
    "TimeStatistics",
    "Totals",
    "TracedMemoryMethod",
    "Training",
    "TrainingLayer",
    "TrainingMemory",
    "TrainingMemoryAtPeak",
    "TrainingTotals",
    "UncountedOperator",
    "ValueDescription",
    "call_key",
    "index_by_call",
    "positions_by_call",
]

#: How much a diagnostic matters (each code's default: `torchscan.diagnostics.CODES`).
Severity: TypeAlias = Literal["error", "warning", "info"]
#: A layer call's identity: ``(path, call_index)``.
CallKey: TypeAlias = tuple[str, int]

#: The module-estimate fields, in report order (the keys of `torchscan.results.METRIC_UNITS`).
MetricName: TypeAlias = Literal[
    "module_flops", "macs", "dmas", "receptive_field", "effective_stride", "effective_padding"]
#: What a handler-supplied field covers: this call's own work, or the call with everything under it.
Ownership: TypeAlias = Literal["module_call", "subtree"]
AnalysisMode: TypeAlias = Literal["full", "structure"]
#: ``context.meta_kernels``: the attention kernels of an analysis on meta (`torchscan.calls.meta_kernels`).
MetaKernels: TypeAlias = Literal["accelerator", "math"]
#: The method of every traced-memory section.
TracedMemoryMethod: TypeAlias = Literal["traced_live_tensor_bytes"]


# -- value metadata (``$defs/value``): one TypedDict per kind, told apart by ``kind`` ------------------------------


class TensorValue(TypedDict):
    kind: Literal["tensor"]
    shape: list[int]
    dtype: str
    device: str
    requires_grad: bool


class NestedTensorValue(TypedDict):
    """A nested tensor has no single shape: its rank and number of components instead."""

    kind: Literal["nested_tensor"]
    dim: int
    components: int
    dtype: str
    device: str
    requires_grad: bool


class NoneValue(TypedDict):
    kind: Literal["none"]


class ScalarValue(TypedDict):
    """A scalar by type (``int``, ``float``, ``bool``, ``complex``, ``str``, ``bytes`` or a subclass), never by
    value."""

    kind: Literal["scalar"]
    type: str


class ObjectValue(TypedDict):
    """Anything else, by class name."""

    kind: Literal["object"]
    type: str


class SequenceValue(TypedDict):
    kind: Literal["tuple", "list", "sequence"]
    items: list["ValueDescription"]


class NamedTupleValue(TypedDict):
    """A named tuple's or a dataclass instance's items, keyed by field name."""

    kind: Literal["namedtuple", "dataclass"]
    type: str
    items: list["KeyedValue"]


class MappingValue(TypedDict):
    """Items keyed by key; a key that is not a Python identifier is ``None``."""

    kind: Literal["mapping"]
    items: list["KeyedValue"]


class ElidedValue(TypedDict):
    """A container described no further: it encloses itself (``recursive``) or nests too deep (``truncated``)."""

    kind: Literal["recursive", "truncated"]
    type: str


class FailedValue(TypedDict):
    """The output of a call whose forward raised."""

    kind: Literal["failed"]


class KeyedValue(TypedDict):
    """An item of a named tuple or mapping, or a keyword argument."""

    key: str | None
    value: "ValueDescription"


ValueDescription: TypeAlias = (TensorValue | NestedTensorValue | NoneValue | ScalarValue | ObjectValue | SequenceValue
                               | NamedTupleValue | MappingValue | ElidedValue | FailedValue)


# -- calls (``$defs/call``) ----------------------------------------------------------------------------------------


class KVCache(TypedDict):
    """``inputs.kv_cache``: the key/value cache a call reads, measured before the call appends its positions."""

    bytes: MetricResult
    cache_class: str
    layers: int
    batch_size: int | None
    kv_heads: int | None
    head_dim: int | None
    positions: int | None
    dtype: str | None
    reason: str | None


class CallMetadata(TypedDict):
    """A call's arguments as metadata: the report's ``inputs`` (with ``source``, and ``kv_cache`` for a call that
    passes a cache) and each layer record's ``input`` (without either)."""

    source: NotRequired[Literal["generated", "provided"]]
    args: list[ValueDescription]
    kwargs: list[KeyedValue]
    kv_cache: NotRequired[KVCache]


# -- layer records (``$defs/layer``) -------------------------------------------------------------------------------


class CallReference(TypedDict):
    """A layer call by identity: a record's ``parent``, an owner in ``metric_owners``, ``memory.peak_at.layer``; the
    records of a layer call (in ``layers``, ``training``, ``time``) extend it."""

    path: str
    call_index: int


class LayerParameters(TypedDict):
    """The module's own parameters (children excluded; a shared tensor counts at its first module only)."""

    count: int
    trainable: int
    frozen: int
    bytes: int


class LayerBuffers(TypedDict):
    count: int
    bytes: int


class LayerMetrics(TypedDict, total=False):
    """The module estimates of a call: a field is absent when an ancestor owns it or a composite delegated it."""

    module_flops: MetricResult
    macs: MetricResult
    dmas: MetricResult
    receptive_field: MetricResult
    effective_stride: MetricResult
    effective_padding: MetricResult


class MetricOwnership(TypedDict, total=False):
    module_flops: Ownership
    macs: Ownership
    dmas: Ownership
    receptive_field: Ownership
    effective_stride: Ownership
    effective_padding: Ownership


class MetricOwners(TypedDict, total=False):
    """For each field covered by an ancestor's inclusive estimate, that ancestor."""

    module_flops: CallReference
    macs: CallReference
    dmas: CallReference
    receptive_field: CallReference
    effective_stride: CallReference
    effective_padding: CallReference


class BreakdownPart(TypedDict):
    """A part of a call's own estimate (scope ``part``): already included in it, never added to a total."""

    part: str
    module: str
    module_flops: NotRequired[MetricResult]
    macs: NotRequired[MetricResult]
    dmas: NotRequired[MetricResult]


class CallFlops(TypedDict):
    """A call's operator FLOPs (``operator_flops``) or backward FLOPs (``training.layers[].backward_flops``)."""

    direct: MetricResult
    inclusive: MetricResult


class CallBytes(TypedDict):
    """A call's operator bytes (``operator_bytes``): the tensors its operators read and wrote, unfused, ``direct``
    and ``inclusive`` like `CallFlops`."""

    direct: MetricResult
    inclusive: MetricResult


class LayerMemory(TypedDict):
    """Only with ``memory=True``."""

    output_bytes: MetricResult
    live_bytes_at_end: MetricResult


class LayerRecord(CallReference):
    """One module call, in the order the calls started; ``(path, call_index)`` identifies it."""

    name: str
    depth: int
    type: str
    leaf: bool
    parent: CallReference | None
    input: CallMetadata
    output: ValueDescription
    parameters: LayerParameters
    buffers: LayerBuffers
    metrics: LayerMetrics
    metric_ownership: NotRequired[MetricOwnership]
    metric_owners: NotRequired[MetricOwners]
    delegated_metrics: NotRequired[list[MetricName]]
    breakdown: NotRequired[list[BreakdownPart]]
    operator_flops: CallFlops
    operator_bytes: NotRequired[CallBytes]
    memory: NotRequired[LayerMemory]


# -- totals and the operator view ----------------------------------------------------------------------------------


class ParameterStatistics(TypedDict):
    """``totals.parameters``: every parameter once."""

    total: int
    trainable: int
    frozen: int
    bytes: int


class BufferStatistics(TypedDict):
    total: int
    bytes: int


class Totals(TypedDict):
    parameters: ParameterStatistics
    buffers: BufferStatistics
    module_flops: MetricResult
    macs: MetricResult
    dmas: MetricResult
    operator_flops: MetricResult
    operator_bytes: NotRequired[MetricResult]
    forward_peak_bytes: NotRequired[MetricResult]
    activations: NotRequired[MetricResult]


class CountedOperator(TypedDict):
    operator: str
    calls: int
    flops: int | float


class UncountedOperator(TypedDict):
    operator: str
    calls: int
    significance: Literal["significant", "minor"]


class IgnoredOperator(TypedDict):
    operator: str
    calls: int
    reason: str


class OperatorFlops(TypedDict):
    """The operator view of a forward (the report's ``operator_flops``) or of what followed it (the training
    section's)."""

    total: MetricResult
    by_operator: list[CountedOperator]
    uncounted: list[UncountedOperator]
    ignored: list[IgnoredOperator]
    custom_formulas: list[str]


class OperatorBytesRow(TypedDict):
    """One operator in one compute dtype: its calls, and their FLOPs and bytes (scope ``model``)."""

    operator: str
    dtype: str | None
    calls: int
    flops: MetricResult
    bytes: MetricResult


class OperatorBytes(TypedDict):
    """The report's ``operator_bytes``: the bytes the forward's operators read and wrote, in the unfused model."""

    method: Literal["operator_tensor_bytes"]
    convention: Literal["unfused"]
    total: MetricResult
    by_operator: list[OperatorBytesRow]


class Diagnostic(TypedDict):
    """Why something is incomplete or failed; ``path`` and ``call_index`` name a layer call, ``operator`` an
    operator."""

    code: str
    severity: Severity
    metric: str | None
    message: str
    path: NotRequired[str]
    call_index: NotRequired[int]
    operator: NotRequired[str]


# -- context -------------------------------------------------------------------------------------------------------


class Execution(TypedDict):
    """``context.execution``: how the forward ran (not described by the schema beyond its name)."""

    mode: Literal["eval", "train", "kept"]
    grad: Literal["no_grad", "enabled"]
    forward_passes: int


class PriorTraining(TypedDict):
    """``context.prior_training``: the model's training flags before the analysis (not described by the schema
    beyond its name)."""

    root: bool
    training_modules: int
    modules: int


class CustomModule(TypedDict):
    """An entry of ``context.custom_modules`` (not described by the schema beyond its name)."""

    type: str
    method: str
    subtree_metrics: list[MetricName]


class ContextWarning(TypedDict):
    category: str
    message: str


class StandIns(TypedDict):
    """Only with ``as_device``: the analysis ran on fake-tensor stand-ins on ``device``."""

    kind: Literal["fake_tensors"]
    device: str
    model_devices: list[str]


class Context(TypedDict):
    torchscan: str
    torch: str
    python: str
    model_type: str
    execution: Execution
    prior_training: PriorTraining
    devices: list[str]
    dtypes: list[str]
    analysis_mode: AnalysisMode
    custom_modules: list[CustomModule]
    custom_formulas: list[str]
    warnings: NotRequired[list[ContextWarning]]
    stand_ins: NotRequired[StandIns]
    meta_kernels: NotRequired[MetaKernels]


# -- memory (``memory=True``) --------------------------------------------------------------------------------------


class AttentionKernel(TypedDict):
    name: Literal["math", "flash", "efficient", "cudnn", "native_mha", "none"]
    reason: str


class MemoryAtPeak(TypedDict):
    parameters: MetricResult
    buffers: MetricResult
    inputs: MetricResult
    activations: MetricResult


class PeakAt(TypedDict):
    """Where the forward's peak was reached: the innermost open call (``None`` outside any), the operator."""

    layer: CallReference | None
    operator: str | None
    operator_index: int


class OutputCache(TypedDict):
    """A KV cache the forward's output holds: every byte it holds, and those created by the forward live at the peak."""

    cache_class: str
    bytes: MetricResult
    at_peak: MetricResult


class Memory(TypedDict):
    """The report's ``memory`` section: live tensor bytes traced through the forward, and the activation count."""

    method: TracedMemoryMethod
    device: str
    attention_kernel: AttentionKernel
    peak: MetricResult
    peak_above_start: MetricResult
    at_peak: MemoryAtPeak
    peak_at: PeakAt
    activations: MetricResult
    output_cache: NotRequired[OutputCache]
    stand_ins: NotRequired[StandIns]


# -- training (``crawl_training_step``) ----------------------------------------------------------------------------


class Loss(TypedDict):
    source: Literal["default", "callable"]
    description: str


class Optimizer(TypedDict):
    name: str
    type: str
    implementation: str
    counted_on: Literal["meta"]


class AutocastRegion(TypedDict):
    device_type: str
    dtype: str


class Precision(TypedDict):
    """The precision policy of a training step (`torchscan.training.precision`)."""

    policy: Literal["autocast", "uniform", "pure_low_precision", "mixed_parameters"]
    autocast: list[AutocastRegion]
    parameters: list[str]
    gradients: list[str]
    optimizer_state: list[str]
    compute: list[str]


class TrainingTotals(TypedDict):
    forward: MetricResult
    loss_forward: MetricResult
    layers_backward: MetricResult
    loss_backward: MetricResult
    engine: MetricResult
    recomputation: MetricResult
    backward: MetricResult
    optimizer: MetricResult
    step: MetricResult
    training_peak_bytes: NotRequired[MetricResult]


class TrainingLayer(CallReference):
    """A layer call's backward FLOPs, joinable with the report's layer record by ``(path, call_index)``."""

    backward_flops: CallFlops


class TrainingMemoryAtPeak(TypedDict):
    parameters: MetricResult
    gradients: MetricResult
    optimizer_state: MetricResult
    saved_activations: MetricResult
    temporaries: MetricResult
    autocast_weight_copies: MetricResult
    inputs: MetricResult
    buffers: MetricResult


class SavedByLayer(CallReference):
    bytes: MetricResult


Phase = Literal["forward", "backward", "optimizer"]


class FirstStep(TypedDict):
    """The first step's peak; unavailable, with null fields, when gradients are kept (``zero_grad="zeros"``)."""

    peak: MetricResult
    phase_at_peak: Phase | None
    at_peak: TrainingMemoryAtPeak | None
    peak_operator: str | None
    note: str


class ResidentAtStart(TypedDict):
    optimizer_state: MetricResult
    gradients: MetricResult


class TrainingMemory(TypedDict):
    """The step's memory: the peak fields describe the steady-state step, ``first_step`` the first."""

    method: TracedMemoryMethod
    device: str
    attention_kernel: AttentionKernel
    describes: Literal["steady_state"]
    peak: MetricResult
    phase_at_peak: Phase
    at_peak: TrainingMemoryAtPeak
    saved_by_layer: list[SavedByLayer]
    peak_operator: str | None
    first_step: FirstStep
    resident_at_start: ResidentAtStart
    zero_grad: Literal["set_to_none", "zeros"]
    stand_ins: NotRequired[StandIns]


class ParallelCategories(TypedDict):
    """Bytes live on one device by category (`torchscan.parallel.memory`)."""

    sharded_parameters: MetricResult
    unsharded_parameters: MetricResult
    all_gather_buffers: MetricResult
    gradient_shards: MetricResult
    unsharded_gradients: MetricResult
    reduce_scatter_buffers: MetricResult
    optimizer_state: MetricResult
    saved_activations: MetricResult
    temporaries: MetricResult
    inputs: MetricResult
    buffers: MetricResult


class ParallelStep(TypedDict):
    """One traced step on one device."""

    peak: MetricResult
    peak_above_start: MetricResult
    at_start: ParallelCategories
    at_peak: ParallelCategories
    phase_at_peak: Phase | None
    peak_operator: str | None
    operators: int
    untracked_outputs: int


class DeviceFlops(TypedDict):
    """Operator FLOPs one device computes per step, by phase (`torchscan.parallel.flops`)."""

    forward: MetricResult
    backward: MetricResult
    optimizer: MetricResult
    step: MetricResult


class PerDevice(ParallelStep):
    """The steady-state step on one device, its FLOPs, and the first step."""

    flops: DeviceFlops
    first_step: ParallelStep


class ShardingPrecision(TypedDict):
    param_dtype: str | None
    reduce_dtype: str | None
    output_dtype: str | None


class ParallelPlanRecord(TypedDict):
    strategy: Literal["ddp", "fsdp", "fsdp_no_reshard", "hsdp"]
    world_size: int
    shard_group_size: int | None
    shard_size: int
    replicate_size: int
    reshard_after_forward: bool
    mixed_precision: ShardingPrecision
    units: list[str] | None
    activation_checkpointing: bool


class ShardingUnits(TypedDict):
    count: int
    types: list[str]


class CollectiveBytes(TypedDict):
    count: int
    bytes: int
    ring_bytes_sent_per_rank: int


class CollectiveKinds(TypedDict):
    all_gather: CollectiveBytes
    reduce_scatter: CollectiveBytes
    all_reduce: CollectiveBytes


class Collectives(TypedDict):
    convention: str
    unit: Literal["bytes"]
    observed: CollectiveKinds
    formula: CollectiveKinds
    matches: bool


class ParallelFitPoint(TypedDict):
    """One world size of a sizing (`torchscan.parallel.fit.fit_point`)."""

    world_size: int
    per_device_peak: MetricResult
    at_peak: ParallelCategories
    phase_at_peak: Phase | None


class ParallelFit(TypedDict):
    """``training.parallel.fit``: the plan at each of a registry entry's world sizes (`torchscan.fit_devices`)."""

    points: list[ParallelFitPoint]
    smallest_world_size: int | None
    reason: str | None
    device_memory: int
    headroom: float
    usable: int


class Parallel(TypedDict):
    """``training.parallel``: the step sharded by FSDP2 over a fake process group (`torchscan.parallel.step`)."""

    method: TracedMemoryMethod
    plan: ParallelPlanRecord
    rank: int
    stand_ins: StandIns
    units: ShardingUnits
    activation_checkpointing: bool
    optimizer: str
    optimizer_implementation: str
    describes: Literal["steady_state"]
    per_device: PerDevice
    collectives: Collectives
    not_modelled: str
    fit: NotRequired[ParallelFit]


class Training(TypedDict):
    """The ``training`` section, versioned on its own."""

    version: Literal[2]
    devices: list[str]
    loss: Loss
    optimizer: Optimizer | None
    precision: Precision
    totals: TrainingTotals
    layers: list[TrainingLayer]
    operator_flops: OperatorFlops
    diagnostics: list[Diagnostic]
    memory: NotRequired[TrainingMemory]
    parallel: NotRequired[Parallel]


# -- time (``time=True``) ------------------------------------------------------------------------------------------


class TimeStatistics(TypedDict):
    """Seconds over the repeated runs (`torchscan.timing.measured.spread`): quartiles by the inclusive method."""

    median: float
    q1: float
    q3: float
    iqr: float
    min: float
    max: float


class TimeLayer(CallReference):
    """A layer call's kernel time, joinable with its layer record by ``(path, call_index)``; the backward fields
    only in a training step's section."""

    self: TimeStatistics
    inclusive: TimeStatistics
    backward_self: NotRequired[TimeStatistics]
    backward_inclusive: NotRequired[TimeStatistics]


TimePhase: TypeAlias = Literal["forward", "loss_forward", "backward", "optimizer"]


class TimeOperator(TypedDict):
    phase: TimePhase
    operator: str
    calls: int
    time: TimeStatistics


class TimePhases(TypedDict):
    forward: TimeStatistics
    loss_forward: TimeStatistics
    backward: TimeStatistics
    optimizer: TimeStatistics


class Time(TypedDict):
    """The ``time`` section (`torchscan.timing.profiled`), versioned on its own."""

    version: Literal[1]
    describes: Literal["forward", "training_step"]
    method: Literal["profiler_kernel_time"]
    kernel_clock: Literal["cpu_operator_time", "device_kernel_time"]
    device: str
    device_name: str
    threads: int | None
    unit: Literal["seconds"]
    warmup: int
    repeats: int
    measured: TimeStatistics
    kernels: TimeStatistics
    outside_layer_calls: TimeStatistics
    loss_forward: NotRequired[TimeStatistics]
    loss_backward: NotRequired[TimeStatistics]
    engine: NotRequired[TimeStatistics]
    recomputation: NotRequired[TimeStatistics]
    optimizer: NotRequired[TimeStatistics]
    phases: NotRequired[TimePhases]
    layers: list[TimeLayer]
    operators: list[TimeOperator]


# -- the report ----------------------------------------------------------------------------------------------------


class Report(TypedDict):
    """What ``crawl_module`` returns (``crawl_training_step`` adds ``training``; ``memory=True`` adds ``memory``,
    ``time=True`` adds ``time``)."""

    schema_version: Literal[1]
    context: Context
    inputs: CallMetadata
    layers: list[LayerRecord]
    totals: Totals
    operator_flops: OperatorFlops
    operator_bytes: NotRequired[OperatorBytes]
    diagnostics: list[Diagnostic]
    training: NotRequired[Training]
    memory: NotRequired[Memory]
    time: NotRequired[Time]


# -- the (path, call_index) index ----------------------------------------------------------------------------------

#: Any record that names a layer call: a `LayerRecord`, `CallReference`, `TrainingLayer` or `SavedByLayer`.
Call = TypeVar("Call", bound=Mapping[str, Any])


def call_key(record: Mapping[str, Any]) -> CallKey:
    """The ``(path, call_index)`` of a record that names a layer call (any TypedDict with both fields)."""
    return record["path"], record["call_index"]


def index_by_call(records: Iterable[Call]) -> dict[CallKey, Call]:
    """The records by ``(path, call_index)``; ``ValueError`` if two records have one key (it must be unique)."""
    index: dict[CallKey, Call] = {}
    for record in records:
        key = call_key(record)
        if key in index:
            raise ValueError(f"more than one layer record for path {key[0]!r}, call_index {key[1]}")
        index[key] = record
    return index


def positions_by_call(records: Iterable[Mapping[str, Any]]) -> dict[CallKey, int]:
    """The position of each record in ``records`` by ``(path, call_index)``; ``ValueError`` on a repeated key."""
    return {key: position for position, key in enumerate(index_by_call(records))}
