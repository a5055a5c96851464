"""Errors that point at the fix on the site builder's side: ``check`` and ``build`` list every mistake of a registry
in one round, callables included; an entry's ``timeout`` bounds its runs and a run that timed out is not run again
by every build; every command-line argument has its help; an unchanged rebuild says MkDocs did not run."""

from __future__ import annotations

import argparse
import io
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import tasks

from torchscan.report.build import BuildResult
from torchscan.report.cli import main, parser
from torchscan.report.registry.parsing import RegistryError, load_registry
from torchscan.report.runs.isolated_executor import IsolatedProcessExecutor, TaskTimeout
from torchscan.report.runs.progress import Progress
from torchscan.report.runs.result_cache import ResultCache, cache_key, installed_torch_version
from torchscan.report.runs.runner import run_all

MODELS = "from torch import nn\n\n\ndef tiny_cnn():\n    return nn.Linear(4, 2)\n"


def write(folder: Path, registry: str) -> Path:
    (folder / "my_models.py").write_text(MODELS, encoding="utf-8")
    path = folder / "models.toml"
    path.write_text(registry, encoding="utf-8")
    return path


# -- check and build: every mistake in one round ----------------------------------------------------------------------


def test_check_lists_a_misspelled_key_and_a_misspelled_factory_together(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, '[[models]]\nname = "t"\nfactory = "my_models:tiny_cn"\ninput_shpe = [4]\n')
    assert main(["check", str(path)]) == 2
    errors = capsys.readouterr().err
    assert "models[0] (t): input_shpe: unknown key (did you mean 'input_shape'?)" in errors
    assert ("models[0] (t): factory: module 'my_models' (my_models.py) defines no top-level name 'tiny_cn' "
            "(did you mean 'tiny_cnn'?)") in errors
    # A malformed path is reported once, for its form; the lookup skips it.
    path = write(tmp_path, '[[models]]\nname = "t"\nfactory = "my_models.tiny_cnn"\ninput_shape = [4]\n')
    assert main(["check", str(path)]) == 2
    assert "factory: expected \"package.module:callable\"" in capsys.readouterr().err


def test_build_looks_up_the_factory_before_any_worker_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, '[[models]]\nname = "t"\nfactory = "my_models:tiny_cn"\ninput_shape = [4]\n')
    output = tmp_path / "site"
    assert main(["build", str(path), "--output", str(output), "--jobs", "1"]) == 2
    errors = capsys.readouterr().err
    assert "models[0] (t): factory: module 'my_models' (my_models.py) defines no top-level name 'tiny_cn' " \
           "(did you mean 'tiny_cnn'?)" in errors
    assert not output.exists() and not list(tmp_path.glob(".site.build-*"))
    with pytest.raises(RegistryError, match="did you mean 'tiny_cnn'"):
        load_registry(path, lookups=True)
    assert load_registry(path).runs[0].factory == "my_models:tiny_cn"  # without lookups: the structure only


def test_a_failure_page_keeps_the_batch_hint_of_the_analysis(tmp_path: Path) -> None:
    from torchscan.report.runs.worker import analyze_run

    (tmp_path / "convs.py").write_text("from torch import nn\n\n\ndef cnn():\n    return nn.Conv2d(3, 4, 3)\n",
                                       encoding="utf-8")
    (tmp_path / "models.toml").write_text('[[models]]\nname = "cnn"\nfactory = "convs:cnn"\n'
                                          'input_shape = [1, 3, 8, 8]\n', encoding="utf-8")
    run = load_registry(tmp_path / "models.toml", lookups=True).runs[0]
    error = analyze_run(run.to_job(tmp_path))["error"]
    assert (error["stage"], error["type"], error["layer"]) == ("analysis", "RuntimeError", "")
    first, *notes = error["message"].splitlines()
    assert first.startswith("Expected 3D (unbatched) or 4D (batched) input to conv2d")
    # The failing layer is its own field (the page's "Failing layer"); the batch hint follows the message.
    assert len(notes) == 1 and "pass input_shape=(3, 8, 8)" in notes[0]


# -- the timeout key ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ['"10s"', "0", "-5", "true", "inf"])
def test_a_timeout_that_is_not_a_positive_number_of_seconds_names_the_key(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, f'[[models]]\nname = "t"\nfactory = "my_models:tiny_cnn"\ninput_shape = [4]\n'
                           f'timeout = {value}\n')
    with pytest.raises(RegistryError) as raised:
        load_registry(path)
    [problem] = raised.value.problems
    assert problem.startswith("models[0] (t): timeout: expected a positive number of seconds, such as 1800")
    assert "build --timeout sets the default" in problem


def test_an_entry_timeout_reaches_its_runs_but_not_their_cache_key(tmp_path: Path) -> None:
    entry = '[[models]]\nname = "t"\nfactory = "my_models:tiny_cnn"\ninput_shape = [4]\n'
    timed = load_registry(write(tmp_path, entry + "timeout = 90\n\n[[models.variants]]\nname = \"a\"\n"
                                "\n[[models.variants]]\nname = \"b\"\n"))
    assert [run.timeout for run in timed.runs] == [90.0, 90.0]
    job = load_registry(write(tmp_path, entry + "timeout = 90\n")).runs[0].to_job(tmp_path)
    assert job["timeout"] == 90.0
    plain = load_registry(write(tmp_path, entry)).runs[0]
    assert plain.timeout is None and "timeout" not in plain.to_job(tmp_path)
    version = installed_torch_version()
    assert cache_key(job, tmp_path, version) == cache_key(plain.to_job(tmp_path), tmp_path, version)


def test_the_local_executor_takes_a_timeout_per_call() -> None:
    executor = IsolatedProcessExecutor(max_workers=2, timeout=600, reuse=True)
    try:
        hung = executor.submit_timed(1, tasks.hang)
        assert executor.submit(tasks.add, 2, 3).result(timeout=120) == 5
        with pytest.raises(TaskTimeout, match=r"timed out after 1 s"):
            hung.result(timeout=180)
    finally:
        executor.shutdown()


def test_the_runner_gives_an_entry_its_own_timeout(tmp_path: Path) -> None:
    registry = load_registry(write(tmp_path, '[[models]]\nname = "slow"\nfactory = "my_models:tiny_cnn"\n'
                                             'input_shape = [4]\ntimeout = 1\n'))

    def local(jobs: int, timeout: float) -> Executor:
        assert timeout == 600  # the build's default; the entry's own goes with its run
        return IsolatedProcessExecutor(max_workers=jobs, timeout=timeout)

    results = run_all(registry.runs, registry.folder, ResultCache(None, tmp_path / "out"), Progress(io.StringIO()),
                      jobs=1, timeout=600, executor_factory=local, function=tasks.hang_job)
    assert results["slow"]["error"] == {"stage": "timeout", "type": "TimeoutError",
                                        "message": "timed out after 1 s; the worker was killed"}


def times_out(job: dict[str, Any]) -> dict[str, Any]:
    times_out.calls.append(job["stem"])
    raise TaskTimeout(f"timed out after {job.get('timeout', 5):g} s; the worker was killed")


times_out.calls = []


def in_process(jobs: int, timeout: float) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=jobs)


def test_a_run_that_timed_out_is_not_run_again_until_asked(tmp_path: Path) -> None:
    registry = load_registry(write(tmp_path, '[[models]]\nname = "slow"\nfactory = "my_models:tiny_cnn"\n'
                                             'input_shape = [4]\ntimeout = 5\n'))
    outputs = iter(tmp_path / f"build{index}" for index in range(10))

    def build(previous: Path | None, timeout: float = 60, **options: Any) -> tuple[dict[str, Any], str]:
        times_out.calls.clear()
        lines = io.StringIO()
        current = next(outputs)
        results = run_all(registry.runs, registry.folder, ResultCache(previous, current, **options), Progress(lines),
                          jobs=1, timeout=timeout, executor_factory=in_process, function=times_out)
        build.last = current
        return results, lines.getvalue()

    first, _ = build(None)
    assert times_out.calls == ["slow"] and first["slow"]["error"]["stage"] == "timeout"
    again, progress = build(build.last)
    # Kept as failed, without a run: the same failure, and the progress line says why and how to retry.
    assert times_out.calls == [] and again == first
    assert ("[1/1] slow: failed (timeout: TimeoutError), cached: not run again until its inputs change, a longer "
            "timeout or --retry-failed") in progress
    build(build.last)  # still kept through a further build
    assert times_out.calls == []
    build(build.last, retry_failed=True)
    assert times_out.calls == ["slow"]
    # A longer timeout runs it again: the entry's own timeout is what counts, not the build's default.
    registry = load_registry(write(tmp_path, '[[models]]\nname = "slow"\nfactory = "my_models:tiny_cnn"\n'
                                             'input_shape = [4]\ntimeout = 30\n'))
    build(build.last)
    assert times_out.calls == ["slow"]
    build(build.last, enabled=False)  # --no-cache runs it too
    assert times_out.calls == ["slow"]


# -- the command line and the progress lines ------------------------------------------------------------------------


def _arguments(command: argparse.ArgumentParser) -> list[tuple[str, argparse.Action]]:
    found = []
    for action in command._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _arguments(sub)
        found.append((command.prog, action))
    return found


def test_every_argument_of_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    arguments = _arguments(parser())
    assert {prog.split()[-1] for prog, _ in arguments} >= {"build", "render", "diff", "check"}
    missing = [f"{prog}: {action.dest}" for prog, action in arguments
               if not action.help or action.help == argparse.SUPPRESS]
    assert missing == []
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    assert "the models.toml registry" in capsys.readouterr().out


def test_the_timing_line_says_mkdocs_did_not_run_when_the_site_was_kept() -> None:
    ran = BuildResult(Path("site"), catalog=None, timings={"analysis": 1.0, "rendering": 0.5, "mkdocs": 4.2,  # type: ignore[arg-type]
                                                           "writing": 0.2})
    assert ran.timing_line() == "TorchScan 1.7 s (analysis 1.0 s, rendering 0.5 s, writing 0.2 s), MkDocs 4.2 s"
    kept = BuildResult(Path("site"), catalog=None, timings={"analysis": 1.0, "rendering": 0.5,  # type: ignore[arg-type]
                                                            "site kept": 0.4, "writing": 0.2})
    assert kept.timing_line() == ("TorchScan 2.1 s (analysis 1.0 s, rendering 0.5 s, site kept 0.4 s, writing 0.2 s), "
                                  "MkDocs not run")
