"""Sweeps in the registry: ``[models.sweep]`` becomes one run per point, with the quantity substituted where the
entry refers to it, and every mistake is named with its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchscan.report.registry.parsing import RegistryError, load_registry

SWEPT = """
[[models]]
name = "gpt"
factory = "zoo:gpt"
kwargs = { n_positions = 1024 }
inputs = "zoo:gpt_inputs"
inputs_kwargs = { seq_len = "{seq_len}", vocab = 5 }
training = { optimizer = "adamw" }

[models.sweep]
name = "seq_len"
values = [512, 128, 256]
default = 256

[[models]]
name = "cnn"
factory = "zoo:cnn"
kwargs = { stem = "{size}" }
input_shape = [3, "{size}", "{size}"]
sweep = { name = "size", from = 128, to = 224, step = 32 }
"""


def load(tmp_path: Path, text: str):
    path = tmp_path / "models.toml"
    path.write_text(text, encoding="utf-8")
    return load_registry(path)


def problems_of(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(RegistryError) as caught:
        load(tmp_path, text)
    return caught.value.problems


def test_a_sweep_becomes_one_run_per_point_with_the_quantity_substituted(tmp_path: Path) -> None:
    registry = load(tmp_path, SWEPT)
    gpt, cnn = registry.entries
    assert gpt.sweep is not None and gpt.sweep.values == (128, 256, 512) and gpt.sweep.default == 256
    # The declared point keeps the entry's stem (its files and budgets read like an unswept entry's).
    assert [run.stem for run in gpt.runs] == ["gpt.seq_len-128", "gpt", "gpt.seq_len-512"]
    assert [run.inputs.kwargs for run in gpt.runs] == [{"seq_len": size, "vocab": 5} for size in (128, 256, 512)]
    assert [(run.quantity, run.size) for run in gpt.runs] == [("seq_len", 128), ("seq_len", 256), ("seq_len", 512)]
    # The training step runs at the declared point only.
    assert [run.training for run in gpt.runs] == [None, {"optimizer": "adamw"}, None]
    assert [run.stem for run in cnn.runs] == ["cnn", "cnn.size-160", "cnn.size-192", "cnn.size-224"]
    assert [run.inputs.shapes for run in cnn.runs] == [[[3, size, size]] for size in (128, 160, 192, 224)]
    assert [run.kwargs for run in cnn.runs] == [{"stem": size} for size in (128, 160, 192, 224)]
    assert cnn.sweep is not None and cnn.sweep.default == 128 and cnn.sweep.range_text == "128–224 (4 points)"


def test_a_point_job_is_the_plain_job_of_its_settings(tmp_path: Path) -> None:
    """The cache key of a point is that of an unswept entry with the same settings: the sweep adds nothing."""
    swept = load(tmp_path, SWEPT).entries[1].runs[1]
    plain = load(tmp_path, '[[models]]\nname = "cnn"\nfactory = "zoo:cnn"\nkwargs = { stem = 160 }\n'
                           "input_shape = [3, 160, 160]\n").runs[0]
    assert {**swept.to_job(tmp_path), "stem": "", "variant": None} == {**plain.to_job(tmp_path), "stem": ""}


@pytest.mark.parametrize(("sweep", "expected"), [
    ('{ name = "seq_len", values = [128, "256"] }', "sweep.values: expected a list of positive integers"),
    ('{ name = "seq_len", values = [128, 256], default = 512 }', "sweep.default: expected one of the sweep's values"),
    ('{ name = "seq_len", values = [128] }', "sweep.values: expected 2 to 64 points"),
    ('{ name = "seq_len", values = [128, 128] }', "sweep.values: each value may appear once"),
    ('{ name = "seq_len", values = [1, 2], from = 1 }', "from/to/step, not both"),
    ('{ name = "seq_len" }', "sweep: expected either values = [...] or from/to/step, got neither"),
    ('{ name = "seq_len", from = 128, to = 200, step = 32 }', "sweep.to: expected a value from + k·step"),
    ('{ name = "seq_len", from = 1, to = 1000, step = 1 }', "from/to/step give 1000 points; at most 64"),
    ('{ name = "seq_len", from = 0, to = 8, step = 4 }', "sweep.from: expected a positive integer, got int 0"),
    ('{ name = "seq len", values = [1, 2] }', "sweep.name: expected the quantity's name"),
    ('{ name = "seq_len", values = [1, 2], stride = 2 }', "sweep.stride: unknown key"),
    ('[1, 2]', "sweep: expected a table"),
])
def test_sweep_mistakes_name_their_key(tmp_path: Path, sweep: str, expected: str) -> None:
    problems = problems_of(tmp_path, f"""
[[models]]
name = "gpt"
factory = "zoo:gpt"
inputs = "zoo:gpt_inputs"
inputs_kwargs = {{ seq_len = "{{seq_len}}" }}
sweep = {sweep}
""")
    assert any(problem.startswith("models[0] (gpt): ") and expected in problem for problem in problems), problems


def test_references_must_name_the_swept_quantity(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, """
[[models]]
name = "cnn"
factory = "zoo:cnn"
input_shape = [3, "{side}", "{size}"]
sweep = { name = "size", values = [32, 64] }

[[models]]
name = "plain"
factory = "zoo:cnn"
input_shape = [3, "{size}", "{size}"]

[[models]]
name = "unused"
factory = "zoo:cnn"
input_shape = [3, 32, 32]
sweep = { name = "size", values = [32, 64] }

[[models]]
name = "both"
factory = "zoo:cnn"
input_shape = [3, "{size}", "{size}"]
sweep = { name = "size", values = [32, 64] }

[[models.variants]]
name = "a"
""")
    assert "models[0] (cnn): input_shape[1]: unknown quantity {side}; the entry sweeps {size}" in problems
    assert "models[1] (plain): input_shape[1]: refers to {size} but the entry declares no [models.sweep]" in problems
    assert any(problem.startswith("models[2] (unused): sweep: the sweep's quantity is used nowhere")
               for problem in problems)
    assert any(problem.startswith("models[3] (both): variants: an entry with a [models.sweep] cannot also have")
               for problem in problems)


def test_a_mistake_shared_by_every_point_is_listed_once(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, """
[[models]]
name = "cnn"
factory = "zoo:cnn"
input_shape = [3, "{size}", "{size}"]
dtype = "float33"
sweep = { name = "size", values = [32, 64, 96] }
""")
    assert sum("unknown dtype 'float33'" in problem for problem in problems) == 1
