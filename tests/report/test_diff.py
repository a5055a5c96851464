"""Review-ready diffs through the console script: percentages beside every delta, a title naming the models, a
warning (and, on request, an exit status) for two different models, and ``--fail-if`` budgets for CI gates."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch
from e2e import run_cli
from torch import nn
from torchscan_testing import documented_file

from torchscan import crawl_module
from torchscan.report.review.budgets import check_budgets, parse_budget, percent_change
from torchscan.report.review.report_diff import percent_text

SEQUENTIAL = "torch.nn.modules.container.Sequential"


class Bessel(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.bessel_j0(x)


MODELS = {
    # 16*16 + 16*4 = 320 MACs, 340 parameters.
    "base": lambda: nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 4)),
    # 16*32 + 32*4 = 640 MACs (+100%), 676 parameters.
    "grown": lambda: nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 4)),
    # One more 4->2 layer: +8 MACs (+2.5%), +10 parameters.
    "slight": lambda: nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 4), nn.Linear(4, 2)),
    "other": lambda: nn.Linear(16, 4),
    "partial": lambda: nn.Sequential(nn.Linear(16, 16), Bessel()),
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("diff")
    for name, build in MODELS.items():
        (folder / f"{name}.json").write_text(json.dumps(crawl_module(build(), (16,))), encoding="utf-8")
    return folder


def diff(folder: Path, before: str, after: str, output: str, *options: str):
    return run_cli("diff", f"{before}.json", f"{after}.json", "--output", output, *options, cwd=folder)


def test_every_delta_has_its_percent_change_beside_it(reports: Path) -> None:
    result = diff(reports, "base", "grown", "grown.md")
    assert result.returncode == 0, result.stderr
    text = (reports / "grown.md").read_text(encoding="utf-8")
    assert "| Quantity | View | Before | After | Delta | % | Change |" in text
    assert "| Parameters | structure | 340 | 676 | +336 | +98.8% | increased |" in text
    assert "| MACs | module view | 320 | 640 | +320 | +100.0% | increased |" in text
    assert "| FLOPs | operator view | 660 | 1.32k | +656 | +99.4% | increased |" in text
    assert "MACs 256 → 512 (+256, +100.0%)" in text  # the changed layer call's own estimate
    assert "parameters 272 → 544 (+272, +100.0%)" in text
    assert "| 0 | Linear | changed | 256 | 512 | +256 | +100.0% |" in text  # the per-layer ranking
    result = diff(reports, "base", "grown", "grown.html")
    assert result.returncode == 0, result.stderr
    html = (reports / "grown.html").read_text(encoding="utf-8")
    assert '<th class="num">%</th>' in html and '<td class="num">+320</td><td class="num">+100.0%</td>' in html


def test_an_unknown_delta_has_an_unknown_percentage(reports: Path) -> None:
    assert diff(reports, "base", "partial", "partial.md").returncode == 0
    text = (reports / "partial.md").read_text(encoding="utf-8")
    assert "| MACs | module view | 320 | ≥256 | unknown (a side is incomplete) | unknown | unknown |" in text


def test_the_default_title_names_the_reports_not_their_class(reports: Path) -> None:
    """Outside a built site a report is named by its file; two files of one name (two revisions) by that name."""
    assert diff(reports, "base", "grown", "same.md").returncode == 0
    assert (reports / "same.md").read_text(encoding="utf-8").startswith("# base → grown\n")
    assert diff(reports, "base", "other", "two.html").returncode == 0
    assert "<title>base → other — TorchScan diff</title>" in (reports / "two.html").read_text(encoding="utf-8")
    (reports / "head").mkdir(exist_ok=True)
    (reports / "head" / "base.json").write_bytes((reports / "grown.json").read_bytes())
    assert diff(reports, "base", "head/base", "revisions.md").returncode == 0
    assert (reports / "revisions.md").read_text(encoding="utf-8").startswith("# base: before / after\n")
    assert diff(reports, "base", "grown", "titled.md", "--title", "PR #12").returncode == 0
    assert (reports / "titled.md").read_text(encoding="utf-8").startswith("# PR #12\n")


def test_two_different_models_are_flagged_and_can_fail_the_command(reports: Path) -> None:
    warning = (f"The two reports are of different models: before is {SEQUENTIAL}, after is "
               "torch.nn.modules.linear.Linear.")
    result = diff(reports, "base", "other", "models.md")
    assert result.returncode == 0 and f"warning: {warning}" in result.stderr
    text = (reports / "models.md").read_text(encoding="utf-8")
    assert f"> **Warning:** {warning}" in text
    assert text.index("**Warning:**") < text.index("| Quantity |")  # read before the numbers, inside the snippet
    strict = diff(reports, "base", "other", "models.html", "--require-same-model")
    assert strict.returncode == 3, strict.stderr
    assert "error: --require-same-model: the two reports are of different models" in strict.stderr
    html = (reports / "models.html").read_text(encoding="utf-8")  # the review is still written, for the reviewer
    assert 'role="alert"' in html and warning in html
    same = diff(reports, "base", "grown", "same-model.md", "--require-same-model")
    assert same.returncode == 0 and "warning" not in same.stderr
    assert "Warning" not in (reports / "same-model.md").read_text(encoding="utf-8")


def test_a_budget_within_limits_passes_and_an_exceeded_one_fails(reports: Path) -> None:
    met = diff(reports, "base", "slight", "met.md", "--fail-if", "macs>+5%")
    assert met.returncode == 0, met.stderr
    assert "budget met: macs>+5%: MACs (module view): 320 → 328 (+8, +2.5%)" in met.stdout
    exceeded = diff(reports, "base", "grown", "exceeded.md", "--fail-if", "macs>+5%")
    assert exceeded.returncode == 1
    assert "budget exceeded: macs>+5%: MACs (module view): 320 → 640 (+320, +100.0%)" in exceeded.stderr
    text = (reports / "exceeded.md").read_text(encoding="utf-8")  # written anyway, with the verdict in it
    assert "| `macs>+5%` | **exceeded** | MACs (module view): 320 → 640 (+320, +100.0%) |" in text  # plain text


def test_the_review_opens_with_one_verdict_line(reports: Path) -> None:
    """Budgets decide the verdict when given; otherwise it says what changed. Markdown gets a Totals heading."""
    assert diff(reports, "base", "slight", "verdict.md", "--fail-if", "macs>+5%").returncode == 0
    text = (reports / "verdict.md").read_text(encoding="utf-8")
    assert text.startswith("# base → slight\n\n**Budgets met**: 1 of 1 budget met; parameters +2.9%, "
                           "MACs +2.5%, ")
    assert text.index("**Budgets met**") < text.index("## Totals\n") < text.index("| Quantity |")
    assert "; layer calls: 1 changed, 1 added, 0 removed\n" in text  # the root's output changed
    assert diff(reports, "base", "grown", "verdict.html", "--fail-if", "macs>+5%", "--fail-if", "dmas>0").returncode
    html = (reports / "verdict.html").read_text(encoding="utf-8")
    header = html[html.index("<header>"):html.index("</header>")]
    assert 'data-verdict="failed"' in header and '<strong class="s-failed">Budgets not met</strong>: 0 of 2 budgets' \
        in header
    assert diff(reports, "base", "base", "same.html").returncode == 0
    html = (reports / "same.html").read_text(encoding="utf-8")
    assert ('<strong class="s-info">No changes</strong>: every total unchanged; layer calls: 0 changed, 0 added, '
            '0 removed</p>') in html
    assert diff(reports, "base", "grown", "changed.md").returncode == 0
    assert "**Changed**: parameters +98.8%, MACs +100.0%" in (reports / "changed.md").read_text(encoding="utf-8")


def test_several_budgets_are_each_checked_and_reported(reports: Path) -> None:
    result = diff(reports, "base", "slight", "several.html", "--fail-if", "macs > +5%", "--fail-if",
                  "parameters>5", "--fail-if", "dmas<-1%")
    assert result.returncode == 1
    assert "budget met: macs>+5%" in result.stdout and "budget met: dmas<-1%" in result.stdout
    assert "budget exceeded: parameters>5: Parameters (structure): 340 → 350 (+10, +2.9%)" in result.stderr
    html = (reports / "several.html").read_text(encoding="utf-8")
    assert '<section id="budgets">' in html and '<td class="mono">parameters&gt;5</td><td class="s-failed">' in html


def test_a_budget_that_cannot_be_checked_fails_the_gate(reports: Path) -> None:
    result = diff(reports, "base", "partial", "unknown.md", "--fail-if", "macs>+5%", "--fail-if", "parameters>0")
    assert result.returncode == 1
    assert ("budget cannot be checked: macs>+5%: MACs (module view): the delta is unknown (a side is incomplete or "
            "was not requested)") in result.stderr
    assert "budget met: parameters>0" in result.stdout  # 340 -> 272 parameters


@pytest.mark.parametrize("budget, message", [
    ("macs>>5%", "expected METRIC OP LIMIT, such as 'macs>+5%'"),
    ("macs+5%", "expected METRIC OP LIMIT"),
    ("macs>5x", ("optional suffix: k (or K), M, G, T, B (billions for parameters, bytes for a byte total), kB (or "
                "KB), MB, GB, TB (byte totals only, powers of 1000) or % (relative to before)")),
    ("macs>2MB", "'MB' is a byte suffix; macs is not counted in bytes"),
    ("activations>2MB", "'MB' is a byte suffix; activations is not counted in bytes"),
    ("macs>1.81B", "'B' (billions) is the parameter count's suffix; macs writes billions as 'G'"),
    ("flops>5%", "'flops' is ambiguous: module_flops is the module view, operator_flops the operator view"),
    ("latency<2", ("unknown metric 'latency'; expected one of parameters, module_flops, macs, dmas, operator_flops, "
                  "forward_peak_bytes, activations, training_peak_bytes")),
])
def test_a_malformed_budget_is_a_usage_error(reports: Path, budget: str, message: str) -> None:
    result = diff(reports, "base", "grown", "never.md", "--fail-if", budget)
    assert result.returncode == 2
    assert "argument --fail-if" in result.stderr and message in result.stderr
    assert not (reports / "never.md").exists()


# -- the budget grammar and percentages, without the console script ---------------------------------------------

@pytest.mark.parametrize("text, metric, op, limit, relative", [
    ("macs>+5%", "macs", ">", 5.0, True),
    (" module_flops >= 1.5M ", "module_flops", ">=", 1.5e6, False),
    ("operator_flops<-2.5%", "operator_flops", "<", -2.5, True),
    ("parameters<=2k", "parameters", "<=", 2000.0, False),
    ("dmas>1e3", "dmas", ">", 1000.0, False),
    ("macs>.5G", "macs", ">", 5e8, False),
])
def test_budget_grammar(text: str, metric: str, op: str, limit: float, relative: bool) -> None:
    budget = parse_budget(text)
    assert (budget.metric, budget.op, budget.limit, budget.relative) == (metric, op, limit, relative)
    assert budget.text == "".join(text.split())


@pytest.mark.parametrize("text, limit", [
    ("parameters>8B", 8e9),  # parameters as model cards (and every view) write billions
    ("parameters>8.03B", 8.03e9),
    ("macs>8.97k", 8970.0),
    ("macs>8.97K", 8970.0),  # K read as k
    ("dmas<=4.39M", 4.39e6),
    ("module_flops>1.81G", 1.81e9),
    ("operator_flops>2T", 2e12),
    ("parameters>+204M", 2.04e8),
    ("macs<−2.5%", -2.5),  # the minus sign the views write for a decrease
])
def test_a_budget_reads_numbers_as_the_views_write_them(text: str, limit: float) -> None:
    assert parse_budget(text).limit == pytest.approx(limit)


def comparison(before: float, after: float, status: str = "complete") -> dict:
    def result(value: float, result_status: str) -> dict:
        return {"status": result_status, "value": value if result_status == "complete" else None,
                "known_value": value, "unit": "MACs", "scope": "model", "method": "sum_of_layer_estimates"}

    delta = ({"status": "complete", "value": after - before, "unit": "MACs"} if status == "complete"
             else {"status": "unavailable", "value": None, "unit": "MACs"})
    return {"totals": {"macs": {"before": result(before, "complete"), "after": result(after, status),
                                "delta": delta}}}


@pytest.mark.parametrize("budget, before, after, status", [
    ("macs>+5%", 100, 105, "met"),       # exactly at the limit: not more than 5%
    ("macs>=+5%", 100, 105, "exceeded"),
    ("macs>+5%", 0, 1, "exceeded"),      # growth from zero is unbounded
    ("macs>+5%", 0, 0, "met"),
    ("macs<-10%", 100, 89, "exceeded"),  # a gate against a drop (a layer lost by accident)
    ("macs>10", 100, 111, "exceeded"),
    ("macs>10", 100, 110, "met"),
])
def test_budget_checks(budget: str, before: float, after: float, status: str) -> None:
    (check,) = check_budgets([parse_budget(budget)], comparison(before, after))
    assert check.status == status and check.failed is (status != "met")


def test_a_lower_bound_leaves_a_budget_unknown() -> None:
    (check,) = check_budgets([parse_budget("macs<+1000%")], comparison(100, 101, status="partial"))
    assert check.status == "unknown" and check.failed and check.delta is None


@pytest.mark.parametrize("before, delta, text", [
    (100, 5, "+5.0%"), (100, -50, "−50.0%"), (3, 0, "0%"), (0, 7, "new"), (10_000, 1, "+0.01%"),
    (10**9, 1, "+<0.001%"), (1, 12_345, "+1,234,500.0%"), ([3, 3], [2, 2], ""),
])
def test_percent_text(before, delta, text) -> None:
    assert percent_text(before, delta) == text


def test_percent_change_from_zero() -> None:
    assert percent_change(0, 3) == math.inf and percent_change(0, -3) == -math.inf and percent_change(0, 0) == 0


# -- the documentation's CI example stays true ------------------------------------------------------------------

CLI_PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_the_ci_example_uses_options_and_budgets_that_exist() -> None:
    workflow = documented_file("cli.md", ".github/workflows/model-cost.yml")
    budgets = re.findall(r'--fail-if "([^"]+)"', workflow)
    assert budgets == ["macs>+5%", "parameters>1M"]
    assert [parse_budget(budget).limit for budget in budgets] == [5.0, 1e6]
    assert "--require-same-model" in workflow and "torchscan-report diff before.json after.json" in workflow


def test_the_documented_usage_error_is_the_real_one(reports: Path) -> None:
    page = CLI_PAGE.read_text(encoding="utf-8")
    documented = next(line for line in page.splitlines() if line.startswith("torchscan-report diff: error:"))
    result = diff(reports, "base", "grown", "never.md", "--fail-if", "macs>>5%")
    assert result.stderr.splitlines()[-1] == documented
