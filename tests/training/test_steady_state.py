"""The training step a loop repeats: the steady-state step's memory (optimizer state, kept gradients resident), the
first step beside it, the optimizer implementation the device picks, and mixed precision; against hand counts."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from torchscan import crawl_training_step
from torchscan.memory.timeline import MemoryTimeline, TraceMode
from torchscan.schema import validate_report
from torchscan.training.precision import WEIGHT_COPIES, WeightCopies

FLOAT = 4
IN, HIDDEN, OUT, BATCH = 16, 32, 16, 512


def activations_heavy() -> tuple[nn.Module, torch.Tensor]:
    """A small MLP on a large batch: its peak is in the backward, where the optimizer's state adds to it."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT)), torch.randn(BATCH, IN)


def parameter_bytes(model: nn.Module) -> int:
    return sum(parameter.numel() * parameter.element_size() for parameter in model.parameters())


def adamw_state_bytes(model: nn.Module) -> int:
    """Two moments per parameter and one float32 step counter per parameter tensor."""
    return 2 * parameter_bytes(model) + FLOAT * len(list(model.parameters()))


def values(results: dict[str, Any]) -> dict[str, Any]:
    return {name: result["value"] for name, result in results.items()}


def test_the_steady_state_step_holds_the_optimizer_state_through_its_backward():
    model, x = activations_heavy()
    report = crawl_training_step(model, args=(x,), optimizer="adamw", memory=True)
    validate_report(report)
    memory = report["training"]["memory"]
    first, state = memory["first_step"], adamw_state_bytes(model)
    assert memory["describes"] == "steady_state" and memory["zero_grad"] == "set_to_none"
    assert values(memory["resident_at_start"]) == {"optimizer_state": state, "gradients": 0}
    assert memory["phase_at_peak"] == first["phase_at_peak"] == "backward"
    assert memory["peak"]["value"] == first["peak"]["value"] + state
    steady, at_first = values(memory["at_peak"]), values(first["at_peak"])
    assert steady == {**at_first, "optimizer_state": state}
    assert sum(steady.values()) == memory["peak"]["value"]
    assert report["training"]["totals"]["training_peak_bytes"] == memory["peak"]


def test_an_optimizer_bound_step_peaks_in_the_optimizer_in_both_steps():
    """A wide layer on one sample: the optimizer step holds the peak, with the state live in both steps."""
    torch.manual_seed(0)
    model = nn.Linear(256, 256)
    report = crawl_training_step(model, args=(torch.randn(1, 256),), optimizer="adamw", memory=True)
    memory = report["training"]["memory"]
    assert memory["phase_at_peak"] == memory["first_step"]["phase_at_peak"] == "optimizer"
    assert memory["at_peak"]["optimizer_state"]["value"] == adamw_state_bytes(model)
    assert memory["first_step"]["at_peak"]["optimizer_state"]["value"] == adamw_state_bytes(model)


def test_kept_gradients_are_resident_from_the_start_and_the_first_step_is_not_traced():
    model, x = activations_heavy()
    report = crawl_training_step(model, args=(x,), optimizer="adamw", memory=True, zero_grad="zeros")
    validate_report(report)
    memory = report["training"]["memory"]
    assert memory["zero_grad"] == "zeros"
    assert values(memory["resident_at_start"]) == {"optimizer_state": adamw_state_bytes(model),
                                                   "gradients": parameter_bytes(model)}
    assert memory["at_peak"]["gradients"]["value"] == parameter_bytes(model)
    first = memory["first_step"]
    assert first["peak"]["status"] == "unavailable" and first["at_peak"] is None and "zero_grad='zeros'" in first["note"]
    assert all(parameter.grad is None for parameter in model.parameters())


def test_zero_grad_must_be_a_known_policy():
    with pytest.raises(ValueError, match="zero_grad must be one of 'set_to_none', 'zeros', got 'none'"):
        crawl_training_step(nn.Linear(2, 2), args=(torch.randn(1, 2),), zero_grad="none")


def test_the_forward_section_of_a_training_step_counts_what_autograd_saved():
    model, x = activations_heavy()
    report = crawl_training_step(model, args=(x,), optimizer="adamw", memory=True)
    forward = report["memory"]
    at_peak = values(forward["at_peak"])
    assert forward["peak"]["value"] == (at_peak["parameters"] + at_peak["buffers"] + at_peak["inputs"]
                                        + forward["peak_above_start"]["value"])
    assert at_peak["activations"] == forward["peak_above_start"]["value"]


# -- the optimizer the device runs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("device", "as_device", "implementation"), [
    ("cpu", None, "single_tensor"), ("meta", None, "foreach"), ("meta", "cpu", "single_tensor")])
def test_a_named_optimizer_runs_the_implementation_its_device_picks(device: str, as_device: str | None,
                                                                    implementation: str):
    with torch.device(device):
        model = nn.Linear(64, 64)
    report = crawl_training_step(model, args=(torch.randn(4, 64, device=device),), optimizer="adamw",
                                 as_device=as_device)
    assert report["training"]["optimizer"]["implementation"] == implementation


def test_a_callable_keeps_its_own_implementation():
    with torch.device("meta"):
        model = nn.Linear(64, 64)
    report = crawl_training_step(model, args=(torch.randn(4, 64, device="meta"),),
                                 optimizer=lambda params: torch.optim.AdamW(params, foreach=False))
    assert report["training"]["optimizer"]["implementation"] == "single_tensor"


def test_foreach_adamw_holds_a_parameter_sized_temporary_that_the_single_tensor_loop_does_not():
    """``_foreach_sqrt`` of every second moment at once: a temporary as large as all parameters together, where the
    single-tensor loop holds the square root of one parameter at a time."""
    with torch.device("meta"):
        model = nn.Sequential(*(nn.Linear(256, 256, bias=False) for _ in range(4)))
    x = torch.randn(1, 256, device="meta")
    temporaries = {}
    for name, optimizer in (("foreach", "adamw"), ("single", lambda p: torch.optim.AdamW(p, foreach=False))):
        report = crawl_training_step(model, args=(x,), optimizer=optimizer, memory=True)
        assert report["training"]["memory"]["phase_at_peak"] == "optimizer"
        temporaries[name] = report["training"]["memory"]["at_peak"]["temporaries"]["value"]
    assert temporaries["foreach"] >= parameter_bytes(model) > temporaries["single"]


# -- mixed precision ---------------------------------------------------------------------------------------------------


def test_autocast_runs_the_forward_low_and_the_rest_outside_it_and_says_so():
    model, x = activations_heavy()
    plain = crawl_training_step(model, args=(x,), optimizer="adamw", memory=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = crawl_training_step(model, args=(x,), optimizer="adamw", memory=True)
        assert torch.is_autocast_enabled("cpu")  # the caller's region is as it was
    validate_report(mixed)
    assert mixed["training"]["precision"] == {
        "policy": "autocast", "autocast": [{"device_type": "cpu", "dtype": "bfloat16"}], "parameters": ["float32"],
        "gradients": ["float32"], "optimizer_state": ["float32"], "compute": ["bfloat16"]}
    assert plain["training"]["precision"]["policy"] == "uniform"
    # float32: the hidden activation the ReLU and the second Linear save; under autocast the same in bfloat16, plus
    # the bfloat16 copy of the input that the first Linear saves (the float32 input itself existed before the step)
    saved = {report is plain: sum(row["bytes"]["value"] for row in report["training"]["memory"]["saved_by_layer"])
             for report in (plain, mixed)}
    assert saved == {True: BATCH * HIDDEN * FLOAT, False: BATCH * HIDDEN * 2 + BATCH * IN * 2}
    assert mixed["training"]["memory"]["at_peak"]["gradients"] == plain["training"]["memory"]["at_peak"]["gradients"]


def test_autocast_weight_copies_are_their_own_category():
    """The casts of leaf tensors that require grad are what autocast caches: a Linear's weight and bias."""
    layer, x = nn.Linear(64, 64), torch.randn(8, 64)
    timeline = MemoryTimeline(None)
    copies = WeightCopies(timeline)

    class Both:
        def record(self, *event: Any) -> None:
            timeline.record(*event)
            copies.record(*event)

    with torch.autocast("cpu", dtype=torch.bfloat16), TraceMode(Both()):
        layer(x)
        live = timeline.live_at(len(timeline.operators) - 1)
    timeline.close()
    assert live[WEIGHT_COPIES] == (64 * 64 + 64) * 2


def test_pure_low_precision_is_named():
    model = nn.Linear(8, 8).to(torch.bfloat16)
    report = crawl_training_step(model, args=(torch.randn(2, 8, dtype=torch.bfloat16),), optimizer="adamw")
    precision = report["training"]["precision"]
    assert precision["policy"] == "pure_low_precision"
    assert precision["parameters"] == precision["gradients"] == precision["optimizer_state"] == ["bfloat16"]


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_answering_element_wise_operators_on_meta_changes_no_number(device: str, monkeypatch: pytest.MonkeyPatch):
    """`MetaElementwise` skips the meta kernels of the optimizer's element-wise operators (single-tensor AdamW
    on a CPU model, ``foreach`` on a meta one): the report is the same as with the kernels run."""
    from contextlib import nullcontext

    from torchscan.training import step

    with torch.device(device):
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))
    x = torch.randn(8, 16, device=device)
    fast = crawl_training_step(model, args=(x,), optimizer="adamw", memory=True)
    monkeypatch.setattr(step, "MetaElementwise", nullcontext)
    slow = crawl_training_step(model, args=(x,), optimizer="adamw", memory=True)
    assert fast["training"] == slow["training"]
    assert fast["training"]["optimizer"]["implementation"] == ("foreach" if device == "meta" else "single_tensor")
