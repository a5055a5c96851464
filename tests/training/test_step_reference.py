"""The training step a loop repeats, against real loops: on the four reference models (ResNet-18, BERT, GPT-2 and a
Llama with grouped-query attention, `torchscan_testing.REFERENCE_MODELS`), with AdamW, in float32 and under
bfloat16 autocast, ``crawl_training_step``'s steady-state and first-step peaks against the measured absolute peaks of
the third and first steps of a real loop (`torchscan_testing.measured_step_peaks`) and against PyTorch's
``MemTracker`` on the same steps.

Each configuration's loop runs once: three steps, the first and the third measured and tracked together
(`benchmarks/steady_state_reference.py` measures every step: the second already equals the third).
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from torchscan_testing import REFERENCE_MODELS, measured_step_peaks, onednn_enabled

from torchscan import crawl_training_step

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}
#: The issue's tolerance against the measured peaks (the analysis agrees to the byte with ``MemTracker``).
TOLERANCE = 0.005
#: The most the measured peak may exceed ``MemTracker``'s (and the analysis's), in bytes: scalars that are no
#: operator's output. 12 bytes at every peak in AdamW's update (in ``exp_avg_sq.sqrt() / bias_correction2_sqrt`` the
#: Python float becomes an 8-byte double tensor before ``aten.div`` is dispatched, which casts it to a 4-byte float
#: inside); 48 bytes at GPT-2's steady peak in its backward (six 8-byte tensors allocated outside any operator).
SCALARS_OUTSIDE_DISPATCH = 64


def adamw(parameters: list[torch.Tensor]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(parameters)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", REFERENCE_MODELS)
def test_the_steady_and_first_step_peaks_are_those_of_a_real_loop(name: str, precision: str):
    dtype = PRECISIONS[precision]
    model, args, kwargs, loss = REFERENCE_MODELS[name]()
    with onednn_enabled(False), (torch.autocast("cpu", dtype=dtype) if dtype else contextlib.nullcontext()):
        memory = crawl_training_step(model, args=args, kwargs=kwargs, loss=loss, optimizer="adamw",
                                     memory=True)["training"]["memory"]
    peaks = measured_step_peaks(model, args, kwargs, loss, adamw, autocast_dtype=dtype, measured=(0, 2))
    steady, first = memory["peak"]["value"], memory["first_step"]["peak"]["value"]
    assert steady == pytest.approx(peaks.measured[2], rel=TOLERANCE)
    assert first == pytest.approx(peaks.measured[0], rel=TOLERANCE)
    assert (steady, first) == (peaks.tracked[2], peaks.tracked[0])
    for analyzed, measured in ((steady, peaks.measured[2]), (first, peaks.measured[0])):
        assert 0 <= measured - analyzed <= SCALARS_OUTSIDE_DISPATCH
