"""Rendering once: an entry's reports, charts and pages are reused from the render cache while their inputs are
unchanged, drawn again when they change, and the output is the same bytes with or without the cache and whether
one process or a pool drew them."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from builds import REGISTRY, build_into, drawn_counts, overridden_templates, setup_registry
from e2e import write_models

from torchscan.report.output.render_cache import RENDER_FOLDER
from torchscan.report.runs.result_cache import CACHE_FOLDER


def render_entries(site: Path) -> list[Path]:
    return sorted((site / CACHE_FOLDER / RENDER_FOLDER).glob("*.json.gz"))


def test_an_unchanged_rebuild_reuses_every_drawing_and_gives_the_same_bytes(tmp_path: Path) -> None:
    setup_registry(tmp_path)
    cold, progress = build_into(tmp_path, "site")
    assert drawn_counts(progress) == (4, 0)
    assert re.search(r"TorchScan [\d.]+ s \(analysis [\d.]+ s, rendering [\d.]+ s, writing [\d.]+ s\), "
                     r"MkDocs [\d.]+ s", progress)
    warm, progress = build_into(tmp_path, "site")
    assert drawn_counts(progress) == (0, 4)
    assert warm == cold
    uncached, progress = build_into(tmp_path, "uncached", use_cache=False)
    assert drawn_counts(progress) == (4, 0) and uncached == cold
    # Five stored drawings: the four entries and the catalog; a rebuild keeps only the ones it used.
    assert len(render_entries(tmp_path / "site")) == 5


def test_a_pool_of_processes_draws_the_same_bytes_as_one_process(tmp_path: Path) -> None:
    setup_registry(tmp_path)
    alone, _ = build_into(tmp_path, "alone", jobs=1)
    pooled, progress = build_into(tmp_path, "pooled", jobs=2)
    assert drawn_counts(progress) == (4, 0)
    assert pooled == alone


#: Four entries (a pool draws from four on) with every part a model page can have: a sweep (its cost curves, its
#: JSON and its points' table), a training step, and the memory every analysis traces.
DRAWN = """
[[models]]
name = "swept"
factory = "e2e_models:tiny"
input_shape = [3, "{size}", "{size}"]
sweep = { name = "size", values = [6, 8, 10], default = 8 }

[[models]]
name = "trained"
factory = "e2e_models:tiny"
input_shape = [3, 8, 8]
training = { optimizer = "sgd" }

[[models]]
name = "plain"
factory = "e2e_models:tiny"
kwargs = { width = 2 }
input_shape = [3, 8, 8]

[[models]]
name = "tagger"
factory = "e2e_models:tagger"
inputs = "e2e_models:tagger_inputs"
"""


def test_two_jobs_build_sweeps_training_steps_and_memory_as_one_job_does(tmp_path: Path) -> None:
    write_models(tmp_path)
    (tmp_path / "models.toml").write_text(DRAWN, encoding="utf-8")
    alone, _ = build_into(tmp_path, "alone", jobs=1)
    pooled, progress = build_into(tmp_path, "pooled", jobs=2)
    assert drawn_counts(progress) == (4, 0)
    for files in (alone, pooled):
        assert "reports/swept.sweep.json" in files and b"Cost against size" in files["models/swept.html"]
        assert b"Forward peak" in files["models/trained.html"] and b"Training step" in files["models/trained.html"]
    assert sorted(pooled) == sorted(alone)
    assert [path for path in alone if pooled[path] != alone[path]] == []
    # What the pool stored in the render cache is what one process draws: a one-job rebuild reuses it as is.
    rebuilt, progress = build_into(tmp_path, "pooled", jobs=1)
    assert drawn_counts(progress) == (0, 4) and rebuilt == alone


def test_corrupt_or_mislabelled_cache_entries_are_drawn_again(tmp_path: Path) -> None:
    setup_registry(tmp_path)
    cold, _ = build_into(tmp_path, "site")
    entries = render_entries(tmp_path / "site")
    entries[0].write_bytes(b"not gzip")
    stored = json.loads(gzip.decompress(entries[1].read_bytes()))
    stored["key"] = "another"
    entries[1].write_bytes(gzip.compress(json.dumps(stored).encode()))
    again, progress = build_into(tmp_path, "site")
    drawn, reused = drawn_counts(progress)
    assert drawn + reused == 4 and drawn >= 1  # the two bad files: entries (redrawn) or the catalog (redrawn)
    assert again == cold
    assert drawn_counts(build_into(tmp_path, "site")[1]) == (0, 4)


def test_a_changed_template_or_result_is_drawn_again(tmp_path: Path) -> None:
    setup_registry(tmp_path)
    build_into(tmp_path, "site")
    overrides = overridden_templates(tmp_path)
    files, progress = build_into(tmp_path, "site", templates=overrides)
    assert drawn_counts(progress) == (4, 0)
    assert b"Overridden footer." in files["models/second.html"]
    (tmp_path / "models.toml").write_text(REGISTRY.replace("width = 3", "width = 5"), encoding="utf-8")
    _, progress = build_into(tmp_path, "site", templates=overrides)
    assert drawn_counts(progress) == (1, 3)
