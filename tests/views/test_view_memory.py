"""The memory view: a report's memory sections (``crawl_module(..., memory=True)`` and the training step's) as the
rows every renderer shows, bytes written with one formatter, and nothing shown for a report that traced none."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchscan_testing import with_memory

from torchscan import crawl_module, crawl_training_step
from torchscan.views import report_view
from torchscan.views.formatting import format_metric
from torchscan.views.memory import memory_view


@pytest.fixture(scope="module")
def report() -> dict:
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    forward = crawl_module(model, (8,))
    forward["training"] = crawl_training_step(model, (8,), optimizer="adamw")["training"]
    return with_memory(forward)


def test_a_report_without_memory_sections_has_no_memory_view() -> None:
    report = crawl_module(nn.Linear(4, 4), (4,))
    assert memory_view(report) is None
    assert [row.label for row in report_view(report).totals if row.view == "memory"] == []


def test_the_forward_peak_is_broken_down_with_shares_of_the_peak(report: dict) -> None:
    forward = memory_view(report).forward
    section = report["memory"]
    assert [part.label for part in forward.parts] == ["Parameters", "Buffers", "Inputs", "Created during the forward"]
    assert [part.bytes.sort for part in forward.parts] == [section["at_peak"][key]["value"] for key in
                                                           ("parameters", "buffers", "inputs", "activations")]
    peak = section["peak"]["value"]
    assert forward.parts[0].share == f"{100 * section['at_peak']['parameters']['value'] / peak:.1f}%"
    assert forward.peak_layer == "layer call 0" and forward.peak_operator == "aten.addmm (operator #3)"
    assert forward.forward_peak.text == format_metric(section["peak_above_start"])
    assert forward.forward_peak.text.endswith("B") and not forward.activations.text.endswith("B")


def test_the_largest_outputs_are_ranked_without_the_root(report: dict) -> None:
    calls = memory_view(report).forward.top_outputs
    assert [(call.label, call.type, call.bytes.text) for call in calls] == [
        ("0", "Linear", "128B"), ("1", "ReLU", "128B"), ("2", "Linear", "16B")]


def test_the_training_peak_is_broken_down_and_names_its_phase(report: dict) -> None:
    training = memory_view(report).training
    assert training.phase == "optimizer" and training.operator == "aten._foreach_addcdiv_"
    assert [part.key for part in training.parts] == ["parameters", "buffers", "gradients", "optimizer_state",
                                                     "saved_activations", "temporaries", "inputs"]
    assert sum(part.bytes.sort for part in training.parts) == report["training"]["memory"]["peak"]["value"]
    assert [call.label for call in training.top_saved] == ["0", "1", "2"]


def test_a_report_with_only_a_traced_training_step_shows_the_step(report: dict) -> None:
    step_only = {key: value for key, value in report.items() if key != "memory"}
    view = memory_view(step_only)
    assert view.forward is None and view.training.phase == "optimizer" and view.device == "cpu"


def test_a_peak_without_an_operator_says_so(report: dict) -> None:
    """An empty forward, or a step whose peak no operator reached, has no operator to name (null in the report)."""
    copy = {**report, "memory": {**report["memory"], "peak_at": {"layer": None, "operator": None,
                                                                 "operator_index": -1}},
            "training": {**report["training"], "memory": {**report["training"]["memory"], "peak_operator": None}}}
    view = memory_view(copy)
    assert view.forward.peak_layer == "outside every layer call" and view.forward.peak_operator == "no operator ran"
    assert view.training.operator == "no operator ran"


def test_memory_totals_and_methods_join_the_report_view(report: dict) -> None:
    view = report_view(report)
    rows = {row.label: row for row in view.totals if row.view == "memory"}
    assert list(rows) == ["Forward peak memory", "Activations"]
    assert rows["Forward peak memory"].method == "traced_live_tensor_bytes"
    assert {"traced_live_tensor_bytes", "fvcore_activation_count"} <= {label for label, _ in view.methods}


def test_an_unknown_category_has_no_share() -> None:
    model = nn.Linear(4, 4)
    report = with_memory(crawl_module(model, (4,)))
    report["memory"]["at_peak"]["inputs"].update(status="unavailable", value=None, known_value=None)
    report["memory"]["peak"].update(status="partial", value=None)
    parts = memory_view(report).forward.parts
    assert {part.share for part in parts} == {"—"}
    assert parts[2].bytes.text == "n/a"


def test_a_trace_on_stand_ins_says_so_beside_its_device() -> None:
    from torchscan.report.output.documents import render_report_file

    with torch.device("meta"):
        model = nn.Linear(8, 4)
    report = crawl_module(model, (8,), memory=True, as_device="cpu")
    view = memory_view(report)
    assert view is not None and view.device == "cpu"
    assert view.stand_ins == "fake-tensor stand-ins of the model's tensors on meta"
    plain = memory_view(crawl_module(nn.Linear(8, 4), (8,), memory=True))
    assert plain is not None and plain.stand_ins == ""
    assert "Traced on `cpu` (fake-tensor stand-ins of the model's tensors on meta)" in render_report_file(report, "md")
    assert ("Traced on <code>cpu</code> (fake-tensor stand-ins of the model&#39;s tensors on meta)"
            in render_report_file(report, "html"))


def test_a_cache_the_output_keeps_alive_is_shown_beside_the_peak(report: dict) -> None:
    from torchscan.report.output.documents import render_report_file

    assert memory_view(report).forward.output_cache is None
    kept = {**report["memory"]["peak_above_start"], "value": 96, "known_value": 96}
    copy = {**report, "memory": {**report["memory"], "output_cache": {
        "cache_class": "DynamicCache", "bytes": {**kept, "value": 128, "known_value": 128}, "at_peak": kept}}}
    cache = memory_view(copy).forward.output_cache
    assert (cache.cache_class, cache.at_peak.text, cache.total.text) == ("DynamicCache", "96B", "128B")
    row = ("| Of which the KV cache the output keeps alive | 96B | the output holds a DynamicCache (128B in all), "
           "which keeps its keys and values alive: a model that returns only its logits peaks lower |")
    assert row in render_report_file(copy, "md")
    assert "<td>Of which the KV cache the output keeps alive</td>" in render_report_file(copy, "html")


def test_the_training_peak_is_the_steady_states_with_the_first_step_beside_it(report: dict) -> None:
    """The headline is the steady state (AdamW's state resident from the start); the first step, which peaks in the
    backward before the state exists, is a second row; both say which step they are in every renderer."""
    from torchscan.report.output.documents import render_report_file

    training = memory_view(report).training
    section = report["training"]["memory"]
    state = section["resident_at_start"]["optimizer_state"]["value"]
    assert training.describes == "steady_state" and training.zero_grad == "set_to_none"
    assert training.peak_label == ("All live bytes at the training step's peak, steady state (optimizer state "
                                   "resident from its start)")
    assert [(part.key, part.bytes.sort) for part in training.resident] == [("optimizer_state", state)]
    first = training.first_step
    assert first is not None and first.traced and (first.phase, first.operator) == ("backward", "aten.mm")
    assert first.peak.sort == training.peak.sort - state
    assert sum(part.bytes.sort for part in first.parts) == first.peak.sort
    markdown = render_report_file(report, "md")
    rows = [f"| {training.peak_label} | {training.peak.text} | optimizer · aten.\\_foreach_addcdiv\\_ |",
            (f"| Resident from the step's start: optimizer state | {training.resident[0].bytes.text} | "
             f"{training.resident[0].share} of that peak |"),
            f"| {first.label} | {first.peak.text} | backward · aten.mm |"]
    assert all(row in markdown for row in rows), markdown
    assert "| Training step, steady state | Optimizer state |" in markdown
    assert "| First training step | Optimizer state | 0B | 0% |" in markdown
    page = render_report_file(report, "html")  # the breakdown drawn as a chart, a bar per peak
    assert f"<td>{first.label}</td>".replace("'", "&#39;") in page
    assert {training.bar_label, first.bar_label} == {"Training step peak, steady state (optimizer)",
                                                     "First training step peak (backward)"}
    assert f"<td>{training.bar_label}</td>" in page and f"<td>{first.bar_label}</td>" in page


def test_a_first_step_that_peaks_alike_is_not_repeated(report: dict) -> None:
    section = report["training"]["memory"]
    alike = {**section, "first_step": {**section["first_step"], "peak": section["peak"],
                                       "phase_at_peak": section["phase_at_peak"]}}
    view = memory_view({**report, "training": {**report["training"], "memory": alike}}).training
    assert view.first_step is None


def test_kept_gradients_leave_the_first_step_untraced_and_say_why() -> None:
    """``zero_grad="zeros"``: the gradients are resident from the start too, and the first step has no figure; its
    row says why instead of showing a number."""
    from torchscan.report.output.documents import render_report_file

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    step = crawl_training_step(model, (8,), optimizer="adamw", memory=True, zero_grad="zeros")
    training = memory_view(step).training
    assert training.zero_grad == "zeros" and [part.key for part in training.resident] == ["optimizer_state",
                                                                                          "gradients"]
    assert "(optimizer state and gradients resident from its start)" in training.peak_label
    first = training.first_step
    assert first is not None and not first.traced and first.peak.text == "n/a" and first.parts == []
    assert first.where == step["training"]["memory"]["first_step"]["note"]
    assert f"| {first.label} | n/a | {first.where} |" in render_report_file(step, "md")


def test_autocast_weight_copies_are_a_part_only_when_the_peak_holds_some(report: dict) -> None:
    """Without autocast the category is an exact zero and no row; with copies at the peak it is a part, and the
    shares still add up to the peak."""
    assert "autocast_weight_copies" not in [part.key for part in memory_view(report).training.parts]
    section = report["training"]["memory"]
    at_peak = {**section["at_peak"]}
    copies = at_peak["temporaries"]["value"] // 2  # the same peak, part of its temporaries now weight copies
    at_peak["autocast_weight_copies"] = {**at_peak["temporaries"], "value": copies, "known_value": copies}
    rest = at_peak["temporaries"]["value"] - copies
    at_peak["temporaries"] = {**at_peak["temporaries"], "value": rest, "known_value": rest}
    cast = {**report, "training": {**report["training"], "memory": {**section, "at_peak": at_peak}}}
    parts = memory_view(cast).training.parts
    assert [part.key for part in parts][:4] == ["parameters", "buffers", "autocast_weight_copies", "gradients"]
    assert sum(part.bytes.sort for part in parts) == section["peak"]["value"]
    assert sum(float(part.share.rstrip("%")) for part in parts) == pytest.approx(100, abs=0.3)


def test_a_step_without_an_optimizer_holds_nothing_from_a_previous_step() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    memory = memory_view(crawl_training_step(model, (8,), memory=True))
    assert memory is not None and memory.training is not None
    assert memory.training.resident == [] and memory.training.first_step is None  # both steps peak alike
    assert memory.training.peak_label.endswith("steady state (nothing left by a previous step)")
