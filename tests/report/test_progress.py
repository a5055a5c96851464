"""Build progress lines: a failed run names the layer whose forward raised, as the run's page does."""

from __future__ import annotations

import io

from torchscan.report.runs.progress import Progress, outcome_label


def failed(layer: str | None = None) -> dict:
    error = {"stage": "forward", "type": "RuntimeError", "message": "shapes do not match"}
    if layer is not None:
        error["layer"] = layer
    return {"status": "failed", "error": error}


def test_a_failed_line_names_the_failing_layer() -> None:
    stream = io.StringIO()
    progress = Progress(stream)
    progress.start(2)
    progress.finished("broken", "failed (forward: RuntimeError)", failed("encoder.layers.1.mlp"))
    progress.finished("root", "failed (forward: RuntimeError)", failed(""))
    assert stream.getvalue().splitlines() == [
        "[1/2] broken: failed (forward: RuntimeError), failing layer encoder.layers.1.mlp",
        "[2/2] root: failed (forward: RuntimeError), failing layer (root)"]


def test_a_failure_without_a_layer_reads_as_before() -> None:
    label = "failed (build: ImportError)"
    assert outcome_label(label, failed(), strict=False) == label
    assert outcome_label(label, None, strict=True) == label
