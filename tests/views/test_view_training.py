"""The training view's words: the optimizer with the implementation that ran, and the precision policy, read from
the ``training`` section (version 2) so that every renderer states them alike."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchscan import crawl_training_step
from torchscan.views.training import optimizer_text, precision_text, training_view


def precision(policy: str, parameters: list[str], gradients: list[str] | None = None,
              optimizer_state: list[str] | None = None, autocast: list[dict] | None = None) -> dict:
    """A ``training.precision`` field; gradients and optimizer state default to the parameters' dtypes."""
    return {"policy": policy, "autocast": autocast or [], "parameters": parameters,
            "gradients": parameters if gradients is None else gradients,
            "optimizer_state": parameters if optimizer_state is None else optimizer_state,
            "compute": sorted({region["dtype"] for region in autocast or []}) or parameters}


@pytest.mark.parametrize(("field", "words"), [
    (precision("uniform", ["float32"]), "float32"),
    (precision("uniform", ["float32"], optimizer_state=[]), "float32"),  # no optimizer: nothing else to name
    (precision("pure_low_precision", ["bfloat16"]), "pure bfloat16"),
    (precision("pure_low_precision", ["bfloat16"], optimizer_state=["float32"]),
     "pure low precision: bfloat16 parameters and gradients, float32 optimizer state"),
    (precision("autocast", ["float32"], autocast=[{"device_type": "cpu", "dtype": "bfloat16"}]),
     "autocast bfloat16 on cpu, float32 parameters, gradients and optimizer state"),
    (precision("autocast", ["float32"], autocast=[{"device_type": "cpu", "dtype": "bfloat16"},
                                                  {"device_type": "cuda", "dtype": "float16"}]),
     "autocast bfloat16 on cpu and float16 on cuda, float32 parameters, gradients and optimizer state"),
    (precision("mixed_parameters", ["bfloat16", "float32"], optimizer_state=["float32"]),
     "mixed parameter dtypes: bfloat16/float32 parameters and gradients, float32 optimizer state"),
    (precision("uniform", [], optimizer_state=[]), "no floating-point tensors trained"),
])
def test_the_precision_policy_reads_as_words(field: dict, words: str) -> None:
    assert precision_text(field) == words


def test_the_optimizer_names_its_class_and_the_implementation_that_ran() -> None:
    adamw = {"name": "adamw", "type": "torch.optim.adamw.AdamW", "implementation": "foreach", "counted_on": "meta"}
    assert optimizer_text(adamw) == "adamw (torch.optim.adamw.AdamW, foreach)"
    assert optimizer_text({**adamw, "implementation": "foreach+single_tensor"}) == (
        "adamw (torch.optim.adamw.AdamW, foreach + single_tensor)")  # param groups that differ
    assert optimizer_text(None) == "none"


def test_a_step_states_what_it_ran() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    view = training_view(crawl_training_step(model, (8,), optimizer="adamw"))
    assert view is not None and view.optimizer == "adamw (torch.optim.adamw.AdamW, single_tensor)"  # CPU's default
    assert view.precision == "float32"
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = training_view(crawl_training_step(model, (8,), optimizer="adamw"))
    assert mixed is not None
    assert mixed.precision == "autocast bfloat16 on cpu, float32 parameters, gradients and optimizer state"

