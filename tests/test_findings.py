"""Findings as a reader needs them: no line repeated for a module called in a loop, and an uncounted operator says
how to count it."""

from __future__ import annotations

import copy

import torch
from torch import nn

from torchscan import crawl_module
from torchscan.findings import findings, incomplete_message


class Bessel(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.bessel_j0(x)


class Loop(nn.Module):
    """One unsupported layer called three times."""

    def __init__(self) -> None:
        super().__init__()
        self.act = Bessel()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(3):
            x = self.linear(self.act(x))
        return x


def test_the_calls_of_a_layer_in_a_loop_share_one_finding() -> None:
    report = crawl_module(Loop(), (4,))
    lines = [f"{item.severity}: {item.summary}" for item in findings(report)]
    assert len(lines) == len(set(lines)) == 3
    unsupported = next(item for item in findings(report) if item.code == "unsupported_module")
    assert unsupported.where == "act (Bessel) in 3 calls (#0, #1, #2)"
    assert (unsupported.call_index, unsupported.calls) == (0, (0, 1, 2))
    message = incomplete_message(report)
    assert message.count("unsupported_module at act (Bessel) in 3 calls") == 1
    # Every record is still in the report: the grouping is the reader's.
    assert sum(item["code"] == "unsupported_module" for item in report["diagnostics"]) == 3


def test_identical_records_give_one_finding() -> None:
    report = crawl_module(nn.Sequential(nn.Linear(4, 4), Bessel()), (4,))
    repeated = copy.deepcopy(report)
    record = next(item for item in repeated["diagnostics"] if item["code"] == "unsupported_module")
    repeated["diagnostics"] += [dict(record), dict(record)]
    assert findings(repeated) == findings(report)
    [single] = [item for item in findings(report) if item.code == "unsupported_module"]
    assert single.where == "1 (Bessel)" and single.calls == ()


def test_an_uncounted_operator_names_custom_mapping_as_the_way_to_count_it() -> None:
    report = crawl_module(nn.Sequential(nn.Linear(4, 4), Bessel()), (4,))
    [uncounted] = [item for item in report["diagnostics"] if item["code"] == "uncounted_operator"]
    assert uncounted["message"] == ("aten.special_bessel_j0 ran 1 uncounted time(s), without a FLOP formula; to count "
                                    "it, pass a formula for it in custom_mapping={torch.ops.aten.special_bessel_j0: "
                                    "formula}")
    counted = crawl_module(nn.Sequential(nn.Linear(4, 4), Bessel()), (4,),
                           custom_mapping={torch.ops.aten.special_bessel_j0: lambda shape, *, out_shape: 1})
    assert not any(item["code"] == "uncounted_operator" for item in counted["diagnostics"])
