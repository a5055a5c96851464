"""The one built-in lookup: class-keyed ``torch.nn`` formulas, qualified names and family rules in one MRO walk,
with the same rules as every built-in (caller registrations first, no handler for a subclass that overrides
``forward``), and without importing any of the libraries it recognizes."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from torchscan import ModuleHandler, crawl_module
from torchscan.builtin_handlers import DEFAULT_HANDLERS, builtin_for, find_builtin_handler
from torchscan.inheritance import InheritedHandler
from torchscan.integrations import lookup, timm, transformers
from torchscan.integrations.lookup import FAMILY_RULES, THIRD_PARTY_HANDLERS, qualified_name
from torchscan.results import SUMMABLE_METRICS

ROOT = Path(__file__).resolve().parents[2]
LIBRARIES = ("transformers", "timm", "torchvision")


def named(module: str, name: str, base: type = nn.Module, **members: object) -> type:
    """A class that claims to live in ``module``: how the lookup sees a library's class, without the library."""
    members.setdefault("forward", lambda self, x: x)
    return type(name, (base,), {"__module__": module, "__qualname__": name, **members})


def test_importing_and_running_torchscan_imports_none_of_the_libraries() -> None:
    script = (
        "import sys, json, torch\n"
        "import torchscan\n"
        "from torchscan.integrations import lookup\n"
        "report = torchscan.crawl_module(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU()), (4,))\n"
        "assert report['totals']['macs']['status'] == 'complete'\n"
        f"print(json.dumps(sorted(name for name in sys.modules if name.split('.')[0] in {LIBRARIES!r})))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_a_class_is_found_by_its_qualified_name() -> None:
    silu = named("transformers.activations", "SiLUActivation")
    assert qualified_name(silu) == "transformers.activations.SiLUActivation"
    assert find_builtin_handler(silu, DEFAULT_HANDLERS) is transformers.HANDLERS[qualified_name(silu)]
    assert find_builtin_handler(named("my_project.activations", "SiLUActivation"), DEFAULT_HANDLERS) is None


@pytest.mark.parametrize(("name", "handler"), [
    ("NewModelRMSNorm", transformers.RMS_NORM),
    ("NewModelRotaryEmbedding", transformers.ROTARY),
    ("NewModelScaledWordEmbedding", transformers.SCALED_WORD_EMBEDDING),
])
def test_family_rules_match_classes_of_transformers_models_by_name(name: str, handler: object) -> None:
    inside = named("transformers.models.new_model.modeling_new_model", name)
    assert find_builtin_handler(inside, DEFAULT_HANDLERS) is handler
    assert find_builtin_handler(named("transformers.activations", name), DEFAULT_HANDLERS) is None
    assert find_builtin_handler(named("other.models.new_model", name), DEFAULT_HANDLERS) is None


def test_a_qualified_name_wins_over_a_family_rule() -> None:
    gemma = named("transformers.models.gemma.modeling_gemma", "GemmaRMSNorm")
    assert find_builtin_handler(gemma, DEFAULT_HANDLERS) is transformers.GEMMA_RMS_NORM


def test_a_subclass_keeps_the_handler_unless_it_overrides_forward() -> None:
    base = named("timm.layers.norm", "LayerNorm", nn.LayerNorm, forward=nn.LayerNorm.forward)
    keeps = type("LayerNormNoBias", (base,), {})
    overrides = type("FusedLayerNorm", (base,), {"forward": lambda self, x: x})
    assert find_builtin_handler(base, DEFAULT_HANDLERS) is timm.LAYER_NORM
    assert find_builtin_handler(keeps, DEFAULT_HANDLERS) is timm.LAYER_NORM
    # The nearest class with a handler decides: nn.LayerNorm's formula is not a fallback for an overriding subclass.
    assert find_builtin_handler(overrides, DEFAULT_HANDLERS) is None


def test_class_keyed_built_ins_and_third_party_handlers_form_one_mro_walk() -> None:
    """A library class deriving from a torch.nn class gets its own handler (nearest first); an unregistered one
    that overrides the base's forward gets none; one that keeps it gets the torch.nn handler."""
    registered = named("timm.layers.norm", "LayerNorm", nn.LayerNorm)
    unregistered_override = named("other.norms", "LayerNorm", nn.LayerNorm)
    unregistered_keep = type("PlainLayerNorm", (nn.LayerNorm,), {"__module__": "other.norms"})
    assert find_builtin_handler(registered, DEFAULT_HANDLERS) is timm.LAYER_NORM
    assert find_builtin_handler(unregistered_override, DEFAULT_HANDLERS) is None
    assert find_builtin_handler(unregistered_keep, DEFAULT_HANDLERS) is DEFAULT_HANDLERS[nn.LayerNorm]


def test_builtin_for_is_the_one_lookup_and_sees_third_party_handlers() -> None:
    """The crawler and the native layers find built-ins through ``builtin_for``, which is this MRO walk."""
    silu = named("transformers.activations", "SiLUActivation")
    assert builtin_for(silu) is transformers.HANDLERS[qualified_name(silu)]
    assert builtin_for(named("timm.layers.norm", "LayerNorm", nn.LayerNorm)) is timm.LAYER_NORM
    assert builtin_for(nn.LayerNorm) is DEFAULT_HANDLERS[nn.LayerNorm]
    inherited = builtin_for(named("other.norms", "LayerNorm", nn.LayerNorm))
    assert isinstance(inherited, InheritedHandler)  # checked call by call (tests/test_inheritance.py)
    assert inherited.parent is nn.LayerNorm and inherited.callback is DEFAULT_HANDLERS[nn.LayerNorm].callback


def _layer_norm(self: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    return nn.functional.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


def test_a_native_layer_does_not_price_a_child_with_a_third_party_formula_it_cannot_check() -> None:
    """A native Transformer layer prices its norms on meta tensors of their shapes (its fused path never calls
    them), so no operator check vouches for a third-party formula there: the layer's counts become lower bounds
    naming the norm. The same class on its own is checked against the operators it ran, and complete."""
    timm_layer_norm = named("timm.layers.norm", "LayerNorm", nn.LayerNorm, forward=_layer_norm)
    alone = crawl_module(timm_layer_norm(16), (5, 16), strict=True)
    assert alone["layers"][0]["metrics"]["module_flops"]["method"] == "formula:timm.norm"
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    layer.norm1 = timm_layer_norm(16)
    report = crawl_module(layer, (5, 16))
    assert {report["totals"][name]["status"] for name in SUMMABLE_METRICS} == {"partial"}
    messages = [item["message"] for item in report["diagnostics"] if item["code"] == "unsupported_configuration"]
    assert len(messages) == len(SUMMABLE_METRICS)
    assert all("norm1 (timm.layers.norm.LayerNorm) has no built-in formula that a native layer can apply" in message
               for message in messages)


def test_caller_registrations_take_precedence_field_by_field() -> None:
    silu = named("transformers.activations", "SiLUActivation", forward=lambda self, x: nn.functional.silu(x))
    model = nn.Sequential(nn.Linear(4, 4), silu())
    caller = ModuleHandler(lambda call: {"module_flops": 1})
    report = crawl_module(model, (4,), custom_modules={silu: caller}, strict=True)
    metrics = report["layers"][-1]["metrics"]
    assert metrics["module_flops"]["value"] == 1
    assert metrics["module_flops"]["method"].startswith("custom_module_handler:")
    assert metrics["dmas"] == {"status": "complete", "value": 8, "known_value": 8, "unit": "DMAs",
                               "scope": "module_call", "method": "formula:transformers.activation"}


def test_every_library_module_lists_handlers_by_qualified_name_and_rules() -> None:
    assert set(THIRD_PARTY_HANDLERS) == {name for library in lookup.LIBRARIES for name in library.HANDLERS}
    assert all(name.count(".") >= 2 for name in THIRD_PARTY_HANDLERS)
    assert all(rule.description and rule.handler.method.startswith("formula:") for rule in FAMILY_RULES)
    assert [rule.name for rule in FAMILY_RULES] == [rule.name for rule in transformers.RULES]


#: Names kept for library versions other than the installed one: the class now lives or is called elsewhere.
FORMER_NAMES = {
    "transformers.activations.PytorchGELUTanh": "an alias of GELUTanh since transformers 4.56",
    "transformers.modeling_utils.Conv1D": "moved to transformers.pytorch_utils in 4.39",
}


@pytest.mark.parametrize("name", sorted(THIRD_PARTY_HANDLERS))
def test_every_qualified_name_is_a_class_of_the_installed_library_with_its_own_forward(name: str) -> None:
    from third_party_models import import_timm, import_torchvision, import_transformers

    {"transformers": import_transformers, "timm": import_timm, "torchvision": import_torchvision,
     "torch": lambda: torch}[name.split(".")[0]]()
    module_name, _, class_name = name.rpartition(".")
    klass = getattr(importlib.import_module(module_name), class_name, None)
    if name in FORMER_NAMES:
        assert klass is None or qualified_name(klass) != name
        return
    assert isinstance(klass, type) and issubclass(klass, nn.Module) and qualified_name(klass) == name
    assert find_builtin_handler(klass, DEFAULT_HANDLERS) is THIRD_PARTY_HANDLERS[name]
