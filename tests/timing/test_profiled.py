"""``time=True``: the ``time`` section's shape, its reconciliation (the attributed parts add up to their own total),
its join with the report's layers and operators, its refusals, and the model and global state it leaves as found.

One profiled iteration (``repeats=1``) makes every median the iteration's own value, so the sums are exact up to
the nanosecond rounding of the report. Nothing here depends on how fast anything runs.
"""

from __future__ import annotations

import copy
import gc
import json
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.nn.modules import module as module_globals
from torch.utils.checkpoint import checkpoint
from torchscan_testing import checked

from torchscan import crawl_module, crawl_training_step
from torchscan.timing import profiled

ONE = {"warmup": 1, "repeats": 1}
NANOSECOND = 1e-9


class Residual(nn.Module):
    """Direct work (the ``+``) beside a child call, and a second call of one module."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(16, 16)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.act(self.inner(x)) + x)


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(16, 16), nn.Tanh())
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(checkpoint(self.block, x, use_reentrant=False))


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Dropout(0.5), Residual(), nn.Linear(16, 4))


def keys(rows):
    return [(row["path"], row["call_index"]) for row in rows]


def children(rows, report):
    """Each call's children's rows, by the report's parent references."""
    by_key = {key: [] for key in keys(rows)}
    row_of = dict(zip(keys(rows), rows, strict=True))
    for layer in report["layers"]:
        if layer["parent"] is not None:
            by_key[(layer["parent"]["path"], layer["parent"]["call_index"])].append(
                row_of[(layer["path"], layer["call_index"])])
    return by_key


def median(statistics) -> float:
    return statistics["median"]


def assert_reconciles(report, lines):
    """Self times plus the lines give the kernel total; inclusive = self + the children's inclusive; the operators
    table adds up to the same total."""
    time = report["time"]
    rows = time["layers"]
    tolerance = NANOSECOND * (4 * len(rows) + len(time["operators"]) + 8)
    attributed = sum(median(row["self"]) + median(row.get("backward_self", {"median": 0.0})) for row in rows)
    attributed += sum(median(time[line]) for line in lines)
    assert attributed == pytest.approx(median(time["kernels"]), abs=tolerance)
    assert sum(median(row["time"]) for row in time["operators"]) == pytest.approx(median(time["kernels"]),
                                                                                   abs=tolerance)
    for key, below in children(rows, report).items():
        row = dict(zip(keys(rows), rows, strict=True))[key]
        for own, whole in (("self", "inclusive"), ("backward_self", "backward_inclusive")):
            if own in row:
                expected = median(row[own]) + sum(median(child[whole]) for child in below)
                assert median(row[whole]) == pytest.approx(expected, abs=tolerance)


def test_a_forward_is_timed_per_call_and_reconciles_with_its_kernel_total():
    report = checked(crawl_module(model(), (8,), time=ONE))
    time = report["time"]
    assert (time["version"], time["describes"], time["method"], time["unit"]) == (1, "forward",
                                                                                   "profiler_kernel_time", "seconds")
    assert (time["device"], time["kernel_clock"], time["repeats"], time["warmup"]) == ("cpu", "cpu_operator_time", 1,
                                                                                        1)
    assert time["threads"] == torch.get_num_threads() and time["device_name"]
    assert keys(time["layers"]) == keys(report["layers"])  # joinable, one row per call, in order
    assert ("3.act", 1) in keys(time["layers"])
    assert "loss_forward" not in time and "phases" not in time and "backward_self" not in time["layers"][0]
    assert_reconciles(report, ["outside_layer_calls"])
    assert median(time["kernels"]) > 0 and median(time["measured"]) > 0
    assert median(time["layers"][0]["self"]) == 0  # a Sequential runs no operator of its own
    residual = next(row for row in time["layers"] if row["path"] == "3")
    assert median(residual["self"]) > 0  # its "+" ran directly in it
    # every operator whose FLOPs the report counted has a time under the same name
    counted = {row["operator"] for row in report["operator_flops"]["by_operator"]}
    assert counted <= {row["operator"] for row in time["operators"] if row["phase"] == "forward"}


def test_statistics_over_several_iterations_are_ordered():
    time = crawl_module(model(), (8,), time={"warmup": 0, "repeats": 3})["time"]
    assert time["repeats"] == 3
    for statistics in (time["measured"], time["kernels"], *(row["inclusive"] for row in time["layers"])):
        assert statistics["min"] <= statistics["q1"] <= statistics["median"] <= statistics["q3"] <= statistics["max"]


def test_without_time_the_report_is_unchanged_and_time_adds_only_its_section():
    plain = crawl_module(model(), (8,))
    timed = crawl_module(model(), (8,), time=ONE)
    assert "time" not in plain and list(timed) == [*plain, "time"]
    timed.pop("time")
    assert json.dumps(timed) == json.dumps(plain)


def test_a_training_step_is_timed_by_phase_with_the_backward_filed_under_the_layer_calls():
    report = checked(crawl_training_step(model(), args=(torch.randn(4, 8),), optimizer="adamw", time=ONE))
    time = report["time"]
    assert time["describes"] == "training_step" and keys(time["layers"]) == keys(report["layers"])
    lines = ["outside_layer_calls", "loss_forward", "loss_backward", "engine", "recomputation", "optimizer"]
    assert_reconciles(report, lines)
    phases = time["phases"]
    assert sum(map(median, phases.values())) == pytest.approx(median(time["kernels"]), abs=20 * NANOSECOND)
    assert median(phases["backward"]) > 0 and median(time["optimizer"]) > 0 and median(time["loss_forward"]) > 0
    first = next(row for row in time["layers"] if row["path"] == "0")
    assert median(first["backward_self"]) > 0  # its addmm's node
    assert median(time["recomputation"]) == 0
    assert {row["phase"] for row in time["operators"]} == {"forward", "loss_forward", "backward", "optimizer"}


def test_recomputed_calls_have_their_own_line():
    report = checked(crawl_training_step(Checkpointed(), (16,), time=ONE))
    time = report["time"]
    assert median(time["recomputation"]) > 0
    assert_reconciles(report, ["outside_layer_calls", "loss_forward", "loss_backward", "engine", "recomputation",
                               "optimizer"])


def test_the_model_and_global_state_are_left_as_found():
    subject = model()
    subject.train()
    subject[1].eval()  # mixed flags
    subject[0].weight.grad = grad = torch.ones_like(subject[0].weight)
    state = copy.deepcopy(subject.state_dict())
    hooks = (len(module_globals._global_forward_hooks), len(module_globals._global_forward_pre_hooks),
             len(module_globals._global_forward_hooks_with_kwargs))
    collector = gc.isenabled()
    batch = torch.ones(4, 8)  # given: generated inputs would draw from the RNG
    rng = torch.get_rng_state()
    crawl_module(subject, args=(batch,), time=ONE)
    crawl_training_step(subject, args=(batch,), optimizer="sgd", time=ONE)
    assert [m.training for m in subject.modules()] == [True, True, False, True, True, True, True, True]
    assert all(torch.equal(value, state[name]) for name, value in subject.state_dict().items())
    assert subject[0].weight.grad is grad and subject[4].weight.grad is None
    assert torch.equal(torch.get_rng_state(), rng)
    assert hooks == (len(module_globals._global_forward_hooks), len(module_globals._global_forward_pre_hooks),
                     len(module_globals._global_forward_hooks_with_kwargs))
    assert gc.isenabled() is collector and torch.is_grad_enabled()


@pytest.mark.parametrize(("options", "error", "message"), [
    ({"time": "yes"}, TypeError, "time must be a bool or a mapping"),
    ({"time": {"repeats": 0}}, ValueError, "repeats must be at least 1"),
    ({"time": {"rounds": 2}}, ValueError, "time accepts only 'warmup' and 'repeats'"),
    ({"time": True, "as_device": "cpu"}, ValueError, "stand-ins"),
])
def test_bad_requests_are_refused(options, error, message):
    with pytest.raises(error, match=message):
        crawl_module(model(), (8,), **options)


def test_a_meta_model_has_no_time():
    with torch.device("meta"):
        meta = nn.Linear(8, 4)
    with pytest.raises(ValueError, match="on meta nothing runs"):
        crawl_module(meta, (8,), time=True)
    with pytest.raises(ValueError, match="on meta nothing runs"):
        crawl_training_step(meta, (8,), time=True)


class Event:
    """A profiler event as `attribute` reads it (``torch.autograd.profiler_util.FunctionEvent``'s fields)."""

    def __init__(self, name: str, start: float, end: float, *children: Event, thread: int = 1, sequence_nr: int = -1,
                 scope: int = 0, annotation: bool = False) -> None:
        self.name, self.thread, self.sequence_nr, self.scope = name, thread, sequence_nr, scope
        self.is_user_annotation = annotation
        self.time_range = SimpleNamespace(start=start, end=end, elapsed_us=lambda: end - start)
        self.device_time_total = 0.0
        self.cpu_children = list(children)
        self.cpu_parent = None
        for child in children:
            child.cpu_parent = self


def annotation(name: str, start: float, end: float, *children: Event, thread: int = 1) -> Event:
    return Event(name, start, end, *children, thread=thread, annotation=True)


def test_a_backward_in_another_thread_is_placed_by_its_window_and_filed_by_sequence_number():
    """An accelerator's autograd runs nodes in threads of its own: the node of the forward operator numbered 7 is
    filed under the call that ran that operator, the engine's other work under ``engine``."""
    events = [
        annotation(f"{profiled.ITERATION}0", 0, 100,
                   annotation(f"{profiled.CALL}0", 0, 40,
                              annotation(f"{profiled.CALL}1", 0, 20, Event("aten::addmm", 5, 15, sequence_nr=7)),
                              Event("aten::add", 25, 30, sequence_nr=8)),
                   annotation(profiled.LOSS, 40, 50, Event("aten::sum", 41, 44, sequence_nr=9)),
                   annotation(profiled.BACKWARD, 50, 90),
                   annotation(profiled.OPTIMIZER, 90, 100, Event("aten::add_", 91, 99))),
        Event("aten::ones_like", 51, 52, thread=2),
        Event("autograd::engine::evaluate_function: SumBackward0", 52, 55, thread=2, sequence_nr=9),
        Event("autograd::engine::evaluate_function: AddBackward0", 55, 58, thread=2, sequence_nr=8),
        Event("autograd::engine::evaluate_function: AddmmBackward0", 60, 80,
              Event("AddmmBackward0", 61, 79, Event("aten::mm", 62, 78), scope=1), thread=2, sequence_nr=7),
        Event("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 81, 83, thread=2),
        Event("aten::empty", 200, 201),  # after the iteration: not attributed
    ]
    [times] = profiled.attribute(events, [2], accelerator=False)
    assert times.forward == [5.0, 10.0] and times.backward == [3.0, 20.0]
    assert {name: value for name, value in times.lines.items() if value} == {
        "loss_forward": 3.0, "loss_backward": 3.0, "engine": 3.0, "optimizer": 8.0}
    assert times.total() == (5 + 10) + (3 + 20) + 3 + 3 + 3 + 8  # calls, their backward, the four lines
    assert times.operators[("backward", "aten.mm")] == [1, 16.0]
    assert times.operators[("backward", "autograd.node")] == [1, 2.0]  # its time outside aten.mm
    assert sum(time for _, time in times.operators.values()) == times.total()
