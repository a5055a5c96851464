"""Golden engine reports: the JSON report of every benchmark model (``benchmarks/overhead.py``), committed, so that a
change to the engine that moves any byte of a report is seen.

The reports are written as ``json.dumps(report, indent=1)`` with the version fields of ``context`` replaced by
placeholders (they name the machine's torch and Python, not the analysis). Regenerate them after an intended
change of the output (then review the diff and say in the commit which numbers moved and why):

    UPDATE_GOLDEN=1 python -m pytest tests/test_golden_reports.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from torchscan_testing import UPDATE_GOLDEN, golden_text

from torchscan import crawl_module

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "data" / "golden_reports"
#: The benchmark models of ``benchmarks/overhead.py``, but synthetic_10k (synthetic_100 is the same layer, fewer times).
MODELS = ("resnet18", "resnet50", "mobilenet_v2", "bert_base", "transformer", "lstm", "synthetic_100",
          "llama2_70b_meta", "tv_resnet50", "hf_bert_base")
#: The analyses of each model: a full one, and structure mode of two models.
RUNS = [(name, "full") for name in MODELS] + [("resnet50", "structure"), ("bert_base", "structure")]


def benchmark_case(name: str) -> tuple[Any, tuple, dict]:
    """The model and call that ``benchmarks/overhead.py`` measures under ``name``."""
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    import overhead

    return overhead.CASES[name]()


@pytest.mark.parametrize(("name", "mode"), RUNS, ids=[f"{name}-{mode}" for name, mode in RUNS])
def test_engine_report_is_golden(name: str, mode: str) -> None:
    model, args, kwargs = benchmark_case(name)
    text = golden_text(crawl_module(model, args=args, kwargs=kwargs, mode=mode))
    path = GOLDEN / f"{name}.{mode}.json"
    if UPDATE_GOLDEN:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden report {path.name}: run UPDATE_GOLDEN=1 python -m pytest {Path(__file__).name}"
    assert text == path.read_text(encoding="utf-8"), f"{name} ({mode}) differs from {path.name}"
