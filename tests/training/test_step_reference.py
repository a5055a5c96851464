"""The measured reference of a training loop's steps (`torchscan_testing.measured_step_peaks`), checked on itself: on
the four reference models, with AdamW, in float32 and under bfloat16 autocast, the steady state comes at the second
step and is the first step with the optimizer state resident, and PyTorch's ``MemTracker`` counts the same peaks.

Each configuration's loops run once per session (`reference`): six steps, of which ResNet-18 under bfloat16 autocast
takes half the file's time (an AVX2 CPU has no bfloat16 convolution kernel: PyTorch's generic one runs).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pytest
import torch
from torch import nn
from torchscan_testing import REFERENCE_MODELS, measured_step_peaks, memtracker_step_peaks

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}
CONFIGURATIONS = [(name, precision) for name in REFERENCE_MODELS for precision in PRECISIONS]

#: The most ``MemTracker`` may count below the measured peak, in bytes. It sees the outputs of dispatched operators
#: only, but a few scalars are allocated outside any operator or inside one, live at the peak and no operator's
#: output. Found: 12 bytes at every peak in AdamW's update, which is the first step's peak of all four models and the
#: steady one of ResNet-18: in ``exp_avg_sq.sqrt() / bias_correction2_sqrt`` the Python float is wrapped in an
#: 8-byte double tensor before ``aten.div`` is dispatched, and ``aten.div`` casts it to a 4-byte float inside. 48 bytes
#: at GPT-2's steady peak in its backward: six 8-byte tensors that the backward allocates outside any operator. 0 at
#: BERT's and Llama's steady peaks, also in their backward. ``MemTracker`` never counted more than was measured.
SCALARS_UNSEEN_BY_MEMTRACKER = 64


def adamw(parameters: list[torch.Tensor]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(parameters)


def forward_backward_only(parameters: list[torch.Tensor]) -> torch.optim.Optimizer:
    """An optimizer that keeps no state and updates in place (``param.add_(grad, alpha=0)``): a first step under it
    peaks where the same step's forward and backward do."""
    return torch.optim.SGD(parameters, lr=0.0)


def adamw_state_bytes(model: nn.Module) -> int:
    """AdamW's state after its first step: two float32 moments as large as each trainable parameter (the parameters
    stay float32 under autocast) and a float32 scalar ``step`` per parameter (on CPU, not ``capturable``)."""
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    return sum(2 * parameter.nbytes + 4 for parameter in trainable)


@dataclass(frozen=True)
class Reference:
    measured: list[int]  # measured_step_peaks, AdamW, 3 steps
    tracked: list[int]  # memtracker_step_peaks, AdamW, the first and a steady step (2 steps)
    forward_backward: int  # the first step's peak before its optimizer step (under `forward_backward_only`)
    state: int  # AdamW's state bytes


@functools.cache
def reference(name: str, precision: str) -> Reference:
    """The loops of one configuration, run once and shared by the tests."""
    model, args, kwargs, loss = REFERENCE_MODELS[name]()
    dtype = PRECISIONS[precision]
    return Reference(
        measured=measured_step_peaks(model, args, kwargs, loss, adamw, autocast_dtype=dtype),
        tracked=memtracker_step_peaks(model, args, kwargs, loss, adamw, steps=2, autocast_dtype=dtype),
        forward_backward=measured_step_peaks(model, args, kwargs, loss, forward_backward_only, steps=1,
                                             autocast_dtype=dtype)[0],
        state=adamw_state_bytes(model))


@pytest.mark.parametrize(("name", "precision"), CONFIGURATIONS)
def test_the_steady_step_is_the_first_with_the_optimizer_state_resident(name: str, precision: str) -> None:
    """Steps 2 and 3 peak alike: the loop is steady from the second step. The first step creates AdamW's state in
    its optimizer step, before the updates; from the second on the state is resident from the start, so it adds to
    every moment before the optimizer step, and to nothing after (the first step held it there too). Hence the
    steady peak is max(first step's peak, first step's forward-backward peak + state), between the first step's peak
    and that plus the state. It adds the whole state where the first step peaks in its forward or backward; nothing
    where the first step's optimizer step peaks above its forward-backward by the state or more (ResNet-18 at 64 px,
    whose weights outweigh its activations: peak in AdamW's update, parameters, gradients and state all live); part
    of it in between (BERT, GPT-2 and Llama: their first step peaks in AdamW's update, their steady one in the
    backward)."""
    result = reference(name, precision)
    first, second, third = result.measured
    assert second == third
    assert first <= third <= first + result.state
    assert third == max(first, result.forward_backward + result.state)


@pytest.mark.parametrize(("name", "precision"), CONFIGURATIONS)
def test_memtracker_counts_the_measured_peaks(name: str, precision: str) -> None:
    """PyTorch's ``MemTracker`` reaches the measured peaks of the first and the steady step, less the scalars no
    operator outputs."""
    result = reference(name, precision)
    for measured, tracked in zip(result.measured, result.tracked, strict=False):  # steps 1 and 2
        assert 0 <= measured - tracked <= SCALARS_UNSEEN_BY_MEMTRACKER, (result.measured, result.tracked)


# -- the helpers' contract, on a small model --------------------------------------------------------------------------


def small_case() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, 10))
    return model, torch.randn(16, 64, generator=torch.Generator().manual_seed(1))


def total(output: torch.Tensor) -> torch.Tensor:
    return output.sum()


def test_the_callers_model_is_left_as_it_was() -> None:
    """The loops run on a copy: the caller's parameters, buffers, gradients and mode are untouched."""
    model, x = small_case()
    model.eval()
    before = {key: value.clone() for key, value in model.state_dict().items()}
    measured_step_peaks(model, (x,), {}, total, adamw, steps=2)
    memtracker_step_peaks(model, (x,), {}, total, adamw, steps=2)
    after = model.state_dict()
    assert all(torch.equal(before[key], after[key]) for key in before)
    assert all(parameter.grad is None for parameter in model.parameters())
    assert not model.training


def test_gradients_kept_between_steps_are_resident() -> None:
    """With ``zero_grad(set_to_none=False)`` the zeroed gradients live from one step to the next: counted at the
    start of the steps after the first, the peaks still agree with ``MemTracker``'s and are steady from step 2."""
    model, x = small_case()
    kept = measured_step_peaks(model, (x,), {}, total, adamw, set_to_none=False)
    tracked = memtracker_step_peaks(model, (x,), {}, total, adamw, set_to_none=False)
    dropped = measured_step_peaks(model, (x,), {}, total, adamw)
    assert kept[1] == kept[2] and kept[0] == dropped[0]
    assert all(0 <= mine - theirs <= SCALARS_UNSEEN_BY_MEMTRACKER for mine, theirs in zip(kept, tracked, strict=True))
    assert kept[2] >= dropped[2]
