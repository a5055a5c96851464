"""Fixtures shared by the core tests: analyses that are checked like every report, built-in estimates of one
call, and modules whose work no formula knows.

Imported by name (``from torchscan_testing import ...``): ``tests/conftest.py`` puts this folder on ``sys.path``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from torchscan import crawl_module
from torchscan.builtin_handlers import builtin_for
from torchscan.handlers import METRIC_FIELDS, ModuleCall, validate_estimates
from torchscan.schema import validate_report

# -- analyses ---------------------------------------------------------------------------------------------------------

#: How many reports ``tests/conftest.py`` validated in this session (a test proves that its check runs).
VALIDATED = {"reports": 0}


def checked(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` after checking it against the shipped schema, that JSON writes it as is, and that it shares no
    list or dict between two places."""
    validate_report(report)
    json.dumps(report)
    assert_nothing_shared(report)
    return report


def shared_containers(value: Any, path: str = "report", seen: dict[int, str] | None = None
                      ) -> list[tuple[str, str]]:
    """Every list or dict of ``value`` reachable from two paths, as ``(first path, second path)`` pairs."""
    seen = {} if seen is None else seen
    if not isinstance(value, (dict, list)):
        return []
    if id(value) in seen:
        return [(seen[id(value)], path)]
    seen[id(value)] = path
    items = value.items() if isinstance(value, dict) else enumerate(value)
    return [pair for key, item in items for pair in shared_containers(item, f"{path}[{key!r}]", seen)]


def assert_nothing_shared(report: dict[str, Any]) -> None:
    """One edit of a report never changes another place of it: no mutable object is reachable from two paths."""
    shared = shared_containers(report)
    assert not shared, f"{len(shared)} shared lists or dicts, first {shared[0][0]} is {shared[0][1]}"


def analyze(model: nn.Module, *positional: Any, **options: Any) -> dict[str, Any]:
    """``crawl_module(model, *positional, **options)``, its report checked (generated inputs: pass shapes)."""
    return checked(crawl_module(model, *positional, **options))


def analyze_call(model: nn.Module, *args: Any, **options: Any) -> dict[str, Any]:
    """``crawl_module`` on the provided call ``model(*args)``, its report checked."""
    return checked(crawl_module(model, args=args, **options))


# -- built-in estimates of one call ----------------------------------------------------------------------------------


def estimate(module: nn.Module, *args: Any, training: bool | None = False, **kwargs: Any) -> dict[str, Any]:
    """Run ``module`` once under ``no_grad`` (in eval like the crawler, in training mode, or as it is with
    ``training=None``), then price that call with its built-in handler, found by the crawler's one lookup.

    Every field comes back as a report reads it: a complete estimate as its number (or per-dimension list), any
    other as the validated MetricResult. The handler must supply all six fields, each valid.
    """
    if training is not None:
        module.train(training)
    with torch.no_grad():
        output = module(*args, **kwargs)
    handler = builtin_for(type(module))
    assert handler is not None, f"no built-in handler for {type(module).__qualname__}"
    validated = validate_estimates(handler.callback(ModuleCall(module, args, kwargs, output)), handler,
                                   builtin=True)
    assert validated.problems == [] and set(validated.metrics) == METRIC_FIELDS, validated
    return {name: result["value"] if result["status"] == "complete" else result
            for name, result in validated.metrics.items()}


def value(result: Any) -> Any:
    """The number of an estimate as `estimate` returns it: the complete number, or a result's ``value``."""
    return result["value"] if isinstance(result, dict) else result


# -- work no formula knows ---------------------------------------------------------------------------------------------


@torch.library.custom_op("torchscan_tests::opaque", mutates_args=())
def opaque(x: torch.Tensor) -> torch.Tensor:
    """An operator no formula of TorchScan or PyTorch knows (it copies its input)."""
    return x.clone()


@opaque.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


OPAQUE_PACKET = torch.ops.torchscan_tests.opaque
OPAQUE = "torchscan_tests.opaque"


class OpaqueLeaf(nn.Module):
    """A leaf without a built-in formula that runs only `opaque`: nothing prices its work."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return opaque(x)


class Bessel(nn.Module):
    """A leaf without a built-in formula that runs an operator without any formula: its estimates are lower
    bounds (or unavailable), and its operator FLOPs are uncounted."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.bessel_j0(x)


# -- operator FLOPs of a workload ---------------------------------------------------------------------------------


def operator_flops(workload: Any) -> dict[str, Any]:
    """``measure_flops(workload)`` as ``{operator name: FLOPs}`` of its counted operators, after checking that no
    operator went uncounted (the hand computations of the operator formulas read their rows)."""
    from torchscan import measure_flops

    result = measure_flops(workload)
    assert result["uncounted"] == [], result["uncounted"]
    return {row["operator"]: row["flops"] for row in result["by_operator"]}


def backward_flops(forward: Any, *inputs: torch.Tensor) -> dict[str, Any]:
    """`operator_flops` of the backward of ``forward(*inputs)`` against a gradient of ones (the forward runs
    outside the count)."""
    output = forward(*inputs)
    return operator_flops(lambda: output.backward(torch.ones_like(output)))


# -- documentation ---------------------------------------------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[1] / "docs"


def documented_file(page: str, title: str) -> str:
    """The content of the fenced block titled ``title`` (``title="..."`` on its fence) on ``docs/<page>``."""
    text = (DOCS / page).read_text(encoding="utf-8")
    block = text[text.index(f'title="{title}"'):]
    return block[:block.index("\n```\n")]


# -- memory sections (the contract of crawl_module(..., memory=True) and crawl_training_step) -----------------------

#: The method of every traced byte figure, and of the activation count.
MEMORY_METHOD = "traced_live_tensor_bytes"
ACTIVATION_METHOD = "fvcore_activation_count"


def _bytes(value: int, scope: str = "model") -> dict[str, Any]:
    return {"status": "complete", "value": value, "known_value": value, "unit": "bytes", "scope": scope,
            "method": MEMORY_METHOD}


def tensor_bytes(meta: dict[str, Any] | None) -> int:
    """The bytes of the tensors in recorded value metadata (containers summed, anything else 0)."""
    if not meta:
        return 0
    if meta.get("kind") == "tensor":
        count = 1
        for size in meta["shape"]:
            count *= size
        return count * torch.empty((), dtype=getattr(torch, meta["dtype"])).element_size()
    return sum(tensor_bytes(item.get("value", item)) for item in meta.get("items", []))


def with_memory(report: dict[str, Any], device: str = "cpu") -> dict[str, Any]:
    """A copy of ``report`` with hand-made memory sections in the engine's contract: each layer's output bytes are
    those of its recorded output; the peak is reached at the end of the call with the largest output, where the
    activations live are that output and the one before it. A ``training`` section gains its ``memory`` (the site
    report keeps the step's memory there) and ``totals.training_peak_bytes``."""
    copy = json.loads(json.dumps(report))
    outputs = [tensor_bytes(layer.get("output")) for layer in copy["layers"]]
    live = 0
    for layer, output in zip(copy["layers"], outputs, strict=True):
        live = output + (live if layer["depth"] else 0) // 2
        layer["memory"] = {"output_bytes": _bytes(output, "module_call"),
                           "live_bytes_at_end": _bytes(live, "module_call")}
    top = max(range(len(outputs)), key=lambda index: (outputs[index], -index)) if outputs else None
    activations = outputs[top] + (outputs[top - 1] if top else 0) if top is not None else 0
    at_peak = {"parameters": copy["totals"]["parameters"]["bytes"], "buffers": copy["totals"]["buffers"]["bytes"],
               "inputs": sum(tensor_bytes(value) for value in copy["inputs"]["args"]), "activations": activations}
    peak_at = None if top is None else {"path": copy["layers"][top]["path"], "call_index": copy["layers"][top]["call_index"]}
    count = sum(output // 4 for output in outputs)
    copy["memory"] = {
        "method": MEMORY_METHOD, "device": device,
        "attention_kernel": {"name": "none", "reason": "no attention operator ran"},
        "peak": _bytes(sum(at_peak.values())), "peak_above_start": _bytes(activations),
        "at_peak": {name: _bytes(value) for name, value in at_peak.items()},
        "peak_at": {"layer": peak_at, "operator": "aten.addmm", "operator_index": 3},
        "activations": {**_bytes(count), "unit": "activations", "method": ACTIVATION_METHOD},
    }
    copy["totals"]["forward_peak_bytes"] = _bytes(activations)
    copy["totals"]["activations"] = {**_bytes(count), "unit": "activations", "method": ACTIVATION_METHOD}
    if "training" in copy:
        _add_training_memory(copy, at_peak, outputs, device)
    return copy


def _add_training_memory(report: dict[str, Any], forward: dict[str, int], outputs: list[int], device: str) -> None:
    """The step's memory section, the steady state's (AdamW's state resident from the start): gradients as large as
    the parameters, AdamW's two moments, every output saved (``buffers``, which the engine adds to the contract's
    six categories, holds the buffers), no autocast weight copies. The first step peaks in the backward, lower by
    the optimizer state it has not created yet."""
    parameters = forward["parameters"]
    at_peak = {"parameters": parameters, "gradients": parameters, "optimizer_state": 2 * parameters,
               "saved_activations": sum(outputs), "temporaries": max(outputs, default=0),
               "autocast_weight_copies": 0, "inputs": forward["inputs"], "buffers": forward["buffers"]}
    first_at_peak = {**at_peak, "optimizer_state": 0}
    report["training"]["memory"] = {
        "method": MEMORY_METHOD, "device": device,
        "attention_kernel": {"name": "none", "reason": "no attention operator ran"},
        "describes": "steady_state",
        "peak": _bytes(sum(at_peak.values())), "phase_at_peak": "optimizer",
        "at_peak": {name: _bytes(value) for name, value in at_peak.items()},
        "saved_by_layer": [{"path": layer["path"], "call_index": layer["call_index"], "bytes": _bytes(output)}
                           for layer, output in zip(report["layers"], outputs, strict=True) if output and layer["depth"]],
        "peak_operator": "aten._foreach_addcdiv_",
        "first_step": {"peak": _bytes(sum(first_at_peak.values())), "phase_at_peak": "backward",
                       "at_peak": {name: _bytes(value) for name, value in first_at_peak.items()},
                       "peak_operator": "aten.mm",
                       "note": "the first step of a loop: the optimizer creates its state in its step"},
        "resident_at_start": {"optimizer_state": _bytes(2 * parameters), "gradients": _bytes(0)},
        "zero_grad": "set_to_none",
    }
    report["training"]["totals"]["training_peak_bytes"] = _bytes(sum(at_peak.values()))


# -- golden files -----------------------------------------------------------------------------------------------------

#: ``context`` fields that name the machine's torch, Python and TorchScan, not the analysis: placeholders in golden files.
VERSION_FIELDS = ("torchscan", "torch", "python")
#: ``UPDATE_GOLDEN=1 python -m pytest ...`` rewrites the golden files from the current output (then review the diff).
UPDATE_GOLDEN = bool(os.environ.get("UPDATE_GOLDEN"))


def golden_text(report: dict[str, Any]) -> str:
    """The report as golden files hold it: indented JSON, machine versions replaced by placeholders, and without a
    ``time`` section (measured time is never deterministic: a golden holds what the analysis counted)."""
    context = dict(report["context"])
    for key in VERSION_FIELDS:
        context[key] = f"<{key} version>"
    counted = {key: value for key, value in report.items() if key != "time"}
    return json.dumps({**counted, "context": context}, indent=1) + "\n"


# -- training-step reference: the absolute peaks of real training steps, measured -------------------------------------
#
# The independent reference a steady-state `crawl_training_step` is checked against. `measured_step_peaks` runs a
# real training loop on CPU and measures each step with the allocator's own records (`measure_peak_memory`);
# `memtracker_step_peaks` runs the same loop under PyTorch's `MemTracker`, a second method that shares no code with
# TorchScan (`tests/training/test_step_reference.py` holds the two together). `REFERENCE_MODELS` builds the four
# models they are checked on. Heavy libraries are imported inside the functions: every core test imports this module.

import contextlib  # noqa: E402
import copy  # noqa: E402
import gc  # noqa: E402
from collections.abc import Callable, Iterable, Iterator  # noqa: E402
from typing import NamedTuple  # noqa: E402

#: A step's loss as `crawl_training_step` takes it: the model's output to a scalar tensor.
Loss = Callable[[Any], torch.Tensor]
#: An optimizer factory: the trainable parameters to an optimizer (``lambda p: torch.optim.AdamW(p)``).
MakeOptimizer = Callable[[list[torch.Tensor]], torch.optim.Optimizer]
#: One reference model: ``(model, args, kwargs, loss)``, its step being ``loss(model(*args, **kwargs))``.
ReferenceCase = tuple[nn.Module, tuple, dict[str, Any], Loss]


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """The bytes of the distinct storages behind ``tensors``: a storage shared by views or tied weights counts once."""
    sizes = {}
    for tensor in tensors:
        storage = tensor.untyped_storage()
        sizes[(storage.device, storage.data_ptr())] = storage.nbytes()
    return sum(sizes.values())


def optimizer_state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every tensor of ``optimizer.state`` (AdamW: ``exp_avg``, ``exp_avg_sq`` and the scalar ``step`` per parameter)."""
    from torchscan.values import tensors_in

    return tensors_in(list(optimizer.state.values()))


def resident_tensors(model: nn.Module, optimizer: torch.optim.Optimizer, args: tuple,
                     kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors a training loop holds between two steps: parameters, buffers, the gradients that exist (zeroed
    ones after ``zero_grad(set_to_none=False)``), the optimizer state and the step's inputs."""
    from torchscan.values import tensors_in

    parameters = list(model.parameters())
    gradients = [parameter.grad for parameter in parameters if parameter.grad is not None]
    return [*parameters, *model.buffers(), *gradients, *optimizer_state_tensors(optimizer), *tensors_in((args, kwargs))]


@contextlib.contextmanager
def onednn_enabled(enabled: bool) -> Iterator[None]:
    """oneDNN (``torch.backends.mkldnn.enabled``) switched on or off for the block, then restored."""
    before = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = enabled
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = before


def _autocast(dtype: torch.dtype | None) -> Any:
    """CPU autocast to ``dtype``, or a context that changes nothing for ``None``."""
    return torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()


def step_workload(model: nn.Module, args: tuple, kwargs: dict[str, Any], loss: Loss,
                  optimizer: torch.optim.Optimizer, autocast_dtype: torch.dtype | None = None) -> Callable[[], None]:
    """One training step as a loop's body runs it after ``zero_grad``, PyTorch's AMP recipe: forward and loss under
    ``torch.autocast("cpu", dtype=autocast_dtype)`` when given, backward and ``optimizer.step()`` outside it. The
    output and the loss are locals of the workload, dropped when it returns."""
    def step() -> None:
        with _autocast(autocast_dtype):
            value = loss(model(*args, **kwargs))
        value.backward()
        optimizer.step()
    return step


def _training_loop(model: nn.Module, make_optimizer: MakeOptimizer, steps: int, set_to_none: bool,
                   onednn: bool) -> Iterator[tuple[nn.Module, torch.optim.Optimizer]]:
    """``(copy, optimizer)`` before each of ``steps`` steps of a loop on a deep copy of ``model`` in train mode (the
    caller's model, its gradients and its mode are never touched), once ``zero_grad(set_to_none=set_to_none)`` and a
    garbage collection have run: nothing of the previous step (its output, its loss, a reference cycle) is alive
    when the caller runs the next one. oneDNN is on or off (``onednn``) while the steps run."""
    twin = copy.deepcopy(model).train()
    optimizer = make_optimizer([parameter for parameter in twin.parameters() if parameter.requires_grad])
    with onednn_enabled(onednn):
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=set_to_none)
            gc.collect()
            yield twin, optimizer


class StepPeaks(NamedTuple):
    """Each step's absolute peak in bytes, measured (`measured_step_peaks`) and as ``MemTracker`` counts it."""

    measured: list[int | None]
    tracked: list[int | None]


def measured_step_peaks(model: nn.Module, args: tuple, kwargs: dict[str, Any], loss: Loss,
                        make_optimizer: MakeOptimizer, *, steps: int = 3, autocast_dtype: torch.dtype | None = None,
                        set_to_none: bool = True, onednn: bool = False,
                        measured: Iterable[int] | None = None) -> StepPeaks:
    """The absolute peak of each of ``steps`` real training steps on CPU, in bytes, measured and tracked.

    ``measured`` names the steps (from 0) to measure, every one by default; the others run unmeasured (their peaks
    are None), which saves the profiler's and the tracker's time.

    The loop runs on a deep copy of ``model`` in train mode, with one optimizer ``make_optimizer(its trainable
    parameters)``; ``model`` is left as it was. Before each step: ``optimizer.zero_grad(set_to_none=set_to_none)``
    and ``gc.collect()``. The step (`step_workload`): ``loss(model(*args, **kwargs))``, under
    ``torch.autocast("cpu", dtype=autocast_dtype)`` when given, then ``.backward()`` and ``optimizer.step()`` outside
    autocast; its output is dropped once the loss is computed and the loss when the step returns, as a loop's body
    that keeps the loss drops them.

    ``measured``: a step's absolute peak is R + P:
    - R, resident at the start: the bytes of the distinct storages (`storage_bytes`) live after ``zero_grad``: the
      copy's parameters and buffers, its gradients that exist (none with ``set_to_none=True``, zeroed ones
      otherwise), every tensor in ``optimizer.state`` (none before the first step; AdamW's two moments and scalar
      ``step`` after it) and the tensors in ``args`` and ``kwargs``. A tensor the loss creates (fixed targets) is
      allocated in the step, so it is in P;
    - P, above the start: ``measure_peak_memory(step, device="cpu")["peak_bytes"]``, the highest level the CPU
      allocator's records reach above the start (allocations made in the step minus their frees, in time order).
    Nothing resident is freed during a step (``zero_grad`` runs before it; the optimizers update their state in
    place), so R + P is the step's peak of live tensor bytes. (A step that did free a resident tensor would be
    counted as if it stayed live: the CPU records hold no free of a block allocated before them.) The first step
    creates the optimizer state; from the second on it is resident, in R.

    ``tracked``: the same steps as PyTorch's ``MemTracker`` (``torch.distributed._tools.mem_tracker``) counts them,
    the ``"Total"`` bytes on CPU of its peak snapshot. One tracker follows the loop: before the first step it
    ``track_external``s the copy, the optimizer and the input tensors; each step runs in its own ``with tracker:``
    block (inside the measured workload: the tracker allocates no tensor) after ``reset_mod_stats()``, which sets
    the peak to the current total, so each step gets its own absolute peak. ``MemTracker`` counts the storages of
    dispatched operators' outputs until they die; it does not see what a kernel allocates and frees inside one
    operator, nor scalars wrapped outside dispatch.

    ``onednn=False`` (the default) runs the steps with oneDNN off. oneDNN's convolution backward allocates and frees
    a scratch inside the operator that grows with the thread count (ResNet-18 on 2 threads: 75.6 MB for one 3x3
    512-channel convolution, 8 times its weight; its steady step measured 216, 254 and 330 MB on 1, 2 and 4 threads,
    206 MB on each without oneDNN). It is real memory, but no trace of operator outputs (TorchScan, ``MemTracker``)
    can see it, and it would make the reference depend on the machine. ``onednn=True`` measures the CPU's default
    kernels.
    """
    from torch.distributed._tools.mem_tracker import MemTracker

    from torchscan.values import tensors_in
    chosen = set(range(steps) if measured is None else measured)
    tracker, peaks = MemTracker(), StepPeaks([], [])
    for index, (twin, optimizer) in enumerate(_training_loop(model, make_optimizer, steps, set_to_none, onednn)):
        if index == 0:
            tracker.track_external(twin, optimizer, *tensors_in((args, kwargs)))
        step = step_workload(twin, args, kwargs, loss, optimizer, autocast_dtype)
        if index not in chosen:
            step()
            peaks.measured.append(None)
            peaks.tracked.append(None)
            continue
        tracker.reset_mod_stats()
        resident = storage_bytes(resident_tensors(twin, optimizer, args, kwargs))

        def tracked_step(step: Callable[[], None] = step) -> None:
            with tracker:
                step()

        peaks.measured.append(resident + _measured_above_start(tracked_step))
        peaks.tracked.append(int(tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]))
    return peaks


def _measured_above_start(workload: Callable[[], None]) -> int:
    """``measure_peak_memory(workload, device="cpu")["peak_bytes"]``, which must be complete."""
    from torchscan import measure_peak_memory

    result = measure_peak_memory(workload, device="cpu")
    assert result["status"] == "complete", result
    return int(result["peak_bytes"])


# The four reference models: random weights from configs (nothing downloaded), dropout off and SDPA attention, so
# that every step of a loop allocates the same. Each builder returns a fresh model with the same weights.


def _transformers() -> Any:
    """transformers, imported after torchvision (which it imports) got its Python detection kernels if needed."""
    from zoo.torchvision_ops import ensure_torchvision

    ensure_torchvision()
    import transformers

    return transformers


def _token_ids(batch: int, length: int, vocab: int = 1000) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(1))


def _labels_loss(output: Any) -> torch.Tensor:
    """The loss a ``transformers`` model computed from the ``labels`` it was given."""
    return output.loss


def _classes_loss(output: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over 1000 classes against fixed targets (0, 7, 14, ...), created in the step as a batch's are."""
    targets = torch.arange(output.shape[0]) * 7 % 1000
    return nn.functional.cross_entropy(output, targets)


def reference_resnet18() -> ReferenceCase:
    """torchvision's ResNet-18 (1000 classes), a batch of 4 images of 64 x 64, cross-entropy."""
    from zoo.torchvision_ops import ensure_torchvision

    torch.manual_seed(0)
    model = ensure_torchvision().models.resnet18(weights=None)
    images = torch.randn(4, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    return model, (images,), {}, _classes_loss


def reference_bert() -> ReferenceCase:
    """BERT with 2 layers and its masked-LM head (no pooler), batch 2 of 64 tokens, MLM loss with
    ``labels=input_ids``."""
    transformers = _transformers()
    torch.manual_seed(0)
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=2,
                                     intermediate_size=256, vocab_size=1000, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0, attn_implementation="sdpa")
    ids = _token_ids(2, 64)
    return transformers.BertForMaskedLM(config), (), {"input_ids": ids, "labels": ids}, _labels_loss


def reference_gpt2() -> ReferenceCase:
    """GPT-2 with 2 layers and its LM head (tied to the token embedding), batch 2 of 128 tokens, causal-LM loss with
    ``labels=input_ids``; no KV cache (``use_cache=False``), as in training."""
    transformers = _transformers()
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=1000, n_positions=256,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                                     attn_implementation="sdpa")
    ids = _token_ids(2, 128)
    return transformers.GPT2LMHeadModel(config), (), {"input_ids": ids, "labels": ids}, _labels_loss


def reference_llama() -> ReferenceCase:
    """Llama with 2 layers and grouped-query attention (4 query heads, 2 key-value heads), batch 2 of 64 tokens,
    causal-LM loss with ``labels=input_ids``; no KV cache (``use_cache=False``), as in training."""
    transformers = _transformers()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                                      attention_dropout=0.0, use_cache=False, attn_implementation="sdpa")
    ids = _token_ids(2, 64)
    return transformers.LlamaForCausalLM(config), (), {"input_ids": ids, "labels": ids}, _labels_loss


#: The models a steady-state training-step analysis is checked on, by name; each builder returns
#: ``(model, args, kwargs, loss)``.
REFERENCE_MODELS: dict[str, Callable[[], ReferenceCase]] = {
    "resnet18": reference_resnet18, "bert": reference_bert, "gpt2": reference_gpt2, "llama": reference_llama,
}
