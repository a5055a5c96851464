"""The registry is validated as a whole: every mistake is listed with the entry's name, the key and what was
expected, before any model runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchscan.report.registry.parsing import RegistryError, load_registry


def write(tmp_path: Path, text: str, name: str = "models.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def problems_of(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(RegistryError) as caught:
        load_registry(write(tmp_path, text))
    return caught.value.problems


def test_a_valid_registry_with_variants_becomes_one_run_per_variant(tmp_path: Path) -> None:
    registry = load_registry(write(tmp_path, """
[catalog]
title = "Zoo"

[[models]]
name = "cnn"
factory = "models:cnn"
kwargs = { width = 8, depth = 2 }
input_shape = [3, 32, 32]
dtype = "float32"
tags = ["vision"]

[[models.variants]]
name = "w8"

[[models.variants]]
name = "w32"
kwargs = { width = 32 }
input_shape = [3, 64, 64]

[[models]]
name = "tagger"
factory = "models:Tagger.build"
inputs = "models:tagger_inputs"
inputs_kwargs = { length = 12 }
device = "meta"
strict = true
"""))
    assert registry.title == "Zoo" and registry.mkdocs is None and registry.section == "Model catalog"
    assert [run.stem for run in registry.runs] == ["cnn", "cnn.w32", "tagger"]
    first, second, tagger = registry.runs
    assert first.kwargs == {"width": 8, "depth": 2} and first.inputs.shapes == [[3, 32, 32]]
    # A variant changes only the keys it names; kwargs merge key by key.
    assert second.kwargs == {"width": 32, "depth": 2} and second.inputs.shapes == [[3, 64, 64]]
    assert second.inputs.dtypes == ["float32"]
    assert tagger.inputs.callable == "models:tagger_inputs" and tagger.inputs.kwargs == {"length": 12}
    assert (tagger.device, tagger.strict, tagger.variant) == ("meta", True, None)
    job = tagger.to_job(tmp_path)
    assert job["inputs"] == {"callable": "models:tagger_inputs", "kwargs": {"length": 12}}


def test_every_problem_is_reported_at_once_with_entry_name_and_key(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, """
[catalog]
titel = "typo"

[[models]]
name = "my model"
factroy = "my_models:tiny_cnn"
input_shape = [3, 32, 32]
dtype = "float23"

[[models]]
name = "ok"
factory = "not a path"
input_shape = "3x224x224"
device = "gpu"
""")
    assert "catalog: titel: unknown key (did you mean 'title'?); expected one of title, description" in problems
    assert any(p.startswith("models[0] (my model): factroy: unknown key (did you mean 'factory'?)") for p in problems)
    assert any(p.startswith("models[0] (my model): name: expected a URL-safe name") for p in problems)
    assert 'models[0] (my model): factory: missing; expected "package.module:callable"' in problems
    assert any(p.startswith("models[0] (my model): dtype: unknown dtype 'float23'") for p in problems)
    assert any(p.startswith("models[1] (ok): factory: expected \"package.module:callable\"") for p in problems)
    assert any(p.startswith("models[1] (ok): input_shape: expected a shape without the batch dimension")
               and 'got str "3x224x224"' in p for p in problems)
    assert "models[1] (ok): device: expected one of cpu, meta, cuda, got str \"gpu\"" in problems
    assert len(problems) == 8


def test_input_spec_rules(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, """
[[models]]
name = "neither"
factory = "m:f"

[[models]]
name = "both"
factory = "m:f"
input_shape = [4]
inputs = "m:inputs"

[[models]]
name = "callable-with-dtype"
factory = "m:f"
inputs = "m:inputs"
dtype = "int64"

[[models]]
name = "shape-with-inputs-kwargs"
factory = "m:f"
input_shape = [[4], [6]]
dtype = ["float32"]
inputs_kwargs = { n = 1 }
""")
    assert any(p.startswith("models[0] (neither): expected exactly one input spec") and p.endswith("neither was given")
               for p in problems)
    assert any(p.startswith("models[1] (both): expected exactly one input spec") and p.endswith("both were given")
               for p in problems)
    assert any(p.startswith("models[2] (callable-with-dtype): dtype: dtype only applies to generated inputs")
               for p in problems)
    assert "models[3] (shape-with-inputs-kwargs): dtype: expected one dtype per input shape (2), got 1" in problems
    assert any(p.startswith("models[3] (shape-with-inputs-kwargs): inputs_kwargs: inputs_kwargs only applies")
               for p in problems)


def test_names_are_unique_ignoring_case_and_variants_too(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, """
[[models]]
name = "ResNet"
factory = "m:f"
input_shape = [3, 8, 8]

[[models.variants]]
name = "a"

[[models.variants]]
name = "A"

[[models]]
name = "resnet"
factory = "m:f"
input_shape = [3, 8, 8]
""")
    assert any(p.startswith("models[1] (resnet): name: duplicate name; models[0] is already called that")
               for p in problems)
    assert any(p.startswith("models[0] (ResNet): variants[1] (A).name: duplicate variant name 'A'") for p in problems)


@pytest.mark.parametrize("position", [0, 1])
def test_a_variant_may_not_take_the_name_of_the_last_good_files(tmp_path: Path, position: int) -> None:
    variants = ['name = "base"', 'name = "Last-Good"']
    if position == 0:
        variants.reverse()
    problems = problems_of(tmp_path, """
[[models]]
name = "resnet"
factory = "m:f"
input_shape = [3, 8, 8]
""" + "".join(f"\n[[models.variants]]\n{variant}\n" for variant in variants))
    expected = (f"models[0] (resnet): variants[{position}] (Last-Good).name: variant name 'Last-Good' is reserved: "
                "its files (resnet.last-good.json, .html) would clash with those of the last good report that a build "
                "keeps for 'resnet' when it fails; choose another name")
    assert problems == [expected]


def test_plain_values_only_and_other_structural_mistakes(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, """
[site]
mkdocs = "missing/mkdocs.yml"

[[models]]
name = "dated"
factory = "m:f"
kwargs = { when = 2024-01-01, nested = { ok = 1, at = 10:00:00 } }
input_shape = [4]
tags = "vision"
strict = "yes"
variants = []
""")
    assert "site.mkdocs: 'missing/mkdocs.yml' does not exist (relative to models.toml's folder)" in problems
    assert any(p.startswith("models[0] (dated): kwargs.when: expected strings, numbers, booleans, arrays or tables")
               for p in problems)
    assert any(p.startswith("models[0] (dated): tags: expected a list of non-empty strings") for p in problems)
    assert any(p.startswith("models[0] (dated): strict: expected true or false") for p in problems)
    assert any(p.startswith("models[0] (dated): variants: expected a non-empty array of tables") for p in problems)


def test_file_level_errors(tmp_path: Path) -> None:
    assert problems_of(tmp_path, "[catalog]\ntitle = \"no models\"\n") == [
        "models: expected at least one [[models]] table (an array of tables), got nothing"]
    (problem,) = problems_of(tmp_path, "[[models]\nname = 1\n")
    assert problem.startswith("invalid TOML: ")
    with pytest.raises(RegistryError) as caught:
        load_registry(tmp_path / "absent.toml")
    assert caught.value.problems == ["file not found"]


def test_site_mkdocs_path_is_relative_to_the_registry(tmp_path: Path) -> None:
    (tmp_path / "docs-site").mkdir()
    (tmp_path / "docs-site" / "mkdocs.yml").write_text("site_name: x\n")
    registry = load_registry(write(tmp_path, """
[site]
mkdocs = "docs-site/mkdocs.yml"
section = "Costs"

[[models]]
name = "m"
factory = "m:f"
input_shape = [4]
"""))
    assert registry.mkdocs == (tmp_path / "docs-site" / "mkdocs.yml").resolve()
    assert registry.section == "Costs"


def test_the_project_registry_is_valid_and_every_callable_exists() -> None:
    """site_models/models.toml: at least 12 entries, the families the catalog promises, nothing missing."""
    from torchscan.report.registry.callables import callable_problem

    registry = load_registry(Path(__file__).resolve().parents[2] / "site_models" / "models.toml")
    assert len(registry.entries) >= 12 and registry.mkdocs is not None and registry.mkdocs.name == "mkdocs.yml"
    factories = {entry.factory.partition(":")[0] for entry in registry.entries}
    assert {"zoo.resnet", "zoo.mobilenet", "zoo.vit", "zoo.bert", "zoo.gpt2", "zoo.lstm", "zoo.llama",
            "native_transformer"} <= factories
    assert any(entry.device == "meta" and entry.factory == "zoo.llama:llama_7b" for entry in registry.entries)
    targets = {entry.factory for entry in registry.entries}
    targets |= {run.inputs.callable for run in registry.runs if run.inputs.callable}
    assert [callable_problem(target, registry.folder) for target in sorted(targets)] == [None] * len(targets)
