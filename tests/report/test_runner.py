"""The batch runner: isolated worker processes with timeouts, any Executor, and the result cache."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import tasks
import torch_tasks

from torchscan.report.registry.parsing import load_registry
from torchscan.report.runs.isolated_executor import IsolatedProcessExecutor, TaskRaised, TaskTimeout, WorkerDied
from torchscan.report.runs.progress import Progress
from torchscan.report.runs.result_cache import ResultCache
from torchscan.report.runs.runner import run_all

ISOLATION = pytest.mark.parametrize("reuse", [True, False], ids=["warm-workers", "process-per-run"])


@ISOLATION
def test_isolated_executor_survives_raise_hang_and_death(reuse: bool) -> None:
    executor = IsolatedProcessExecutor(max_workers=2, timeout=3, reuse=reuse)
    futures = {name: executor.submit(function, *args) for name, function, args in (
        ("add", tasks.add, (2, 3)), ("boom", tasks.boom, ()), ("hang", tasks.hang, ()), ("die", tasks.die, ()),
        ("segfault", tasks.segfault, ()), ("pid", tasks.pid, ()), ("again", tasks.pid, ()))}
    executor.shutdown(wait=True)
    assert futures["add"].result() == 5
    with pytest.raises(TaskRaised, match="ValueError: boom"):
        futures["boom"].result()
    with pytest.raises(TaskTimeout, match="timed out after 3 s"):
        futures["hang"].result()
    with pytest.raises(WorkerDied, match="exit code 7"):
        futures["die"].result()
    with pytest.raises(WorkerDied, match="killed by signal SIGSEGV"):
        futures["segfault"].result()
    assert os.getpid() not in (futures["pid"].result(), futures["again"].result())
    # Warm workers outlive the calls that raised or returned; the killed and dead ones were replaced.
    assert executor.processes_started == (4 if reuse else 7)
    assert executor.recycled == []
    assert (futures["pid"].result() == futures["again"].result()) == reuse


@ISOLATION
def test_a_worker_killed_from_outside_fails_its_call_and_is_replaced(reuse: bool, tmp_path: Path) -> None:
    executor = IsolatedProcessExecutor(max_workers=1, timeout=60, reuse=reuse)
    try:
        idle = executor.submit(tasks.pid).result(timeout=120)
        if reuse:  # the idle warm worker is killed between two calls: the next call gets a new one
            os.kill(idle, signal.SIGKILL)
        assert executor.submit(tasks.add, 1, 2).result(timeout=120) == 3
        busy = executor.submit(tasks.pid_after, str(tmp_path / "pid"), 600)
        assert _eventually(lambda: (tmp_path / "pid").is_file() and (tmp_path / "pid").read_text())
        os.kill(int((tmp_path / "pid").read_text()), signal.SIGKILL)
        with pytest.raises(WorkerDied, match="killed by signal SIGKILL"):
            busy.result(timeout=60)
        assert executor.submit(tasks.pid).result(timeout=120) not in (idle, int((tmp_path / "pid").read_text()))
    finally:
        executor.shutdown()


def test_a_warm_worker_resets_what_a_call_changed_in_its_process() -> None:
    executor = IsolatedProcessExecutor(max_workers=1, timeout=60, reuse=True)
    try:
        fresh = executor.submit(torch_tasks.global_state).result(timeout=120)
        assert executor.submit(torch_tasks.change_global_state).result(timeout=60) == "changed"
        after = executor.submit(torch_tasks.global_state).result(timeout=60)
    finally:
        executor.shutdown()
    # The same process, and it looks as it did before: hooks, dtype, device, grad, flags, RNG, path, environment.
    assert after == fresh and executor.processes_started == 1 and executor.recycled == []
    assert fresh["hooks"] == 0 and fresh["dtype"] == "torch.float32" and fresh["output"]


@pytest.mark.parametrize(("call", "reason"), [
    (torch_tasks.patch_torch, "the run replaced torch.nn.functional.relu"),
    (torch_tasks.leave_thread, "a thread started by the run is still running")])
def test_a_warm_worker_is_replaced_after_a_call_that_changed_what_cannot_be_reset(call: Callable[[], str],
                                                                                  reason: str) -> None:
    executor = IsolatedProcessExecutor(max_workers=1, timeout=60, reuse=True)
    try:
        executor.submit(call).result(timeout=120)
        assert executor.submit(torch_tasks.relu_is_torchs).result(timeout=120)
    finally:
        executor.shutdown()
    assert executor.recycled == [reason] and executor.processes_started == 2


def test_a_warm_worker_imports_an_edited_user_module_afresh(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "user_module.py").write_text('VALUE = "first"\n')
    executor = IsolatedProcessExecutor(max_workers=1, timeout=60, reuse=True)
    try:
        assert executor.submit(tasks.import_from, str(code), "user_module").result(timeout=120) == "first"
        (code / "user_module.py").write_text('VALUE = "second, edited"\n')
        assert executor.submit(tasks.import_from, str(code), "user_module").result(timeout=60) == "second, edited"
    finally:
        executor.shutdown()
    assert executor.processes_started == 1


def _eventually(condition: Callable[[], Any], within: float = 120.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


REGISTRY = """
[[models]]
name = "a"
factory = "m:f"
input_shape = [4]

[[models.variants]]
name = "small"

[[models.variants]]
name = "big"
input_shape = [8]

[[models]]
name = "b"
factory = "m:g"
inputs = "m:inputs"
"""


def fake_analysis(job: dict[str, Any]) -> dict[str, Any]:
    """A stand-in for analyze_run: fails for the factory 'm:g', succeeds otherwise."""
    fake_analysis.calls.append(job["stem"])
    if job["factory"] == "m:g":
        return {"status": "failed", "error": {"stage": "build", "type": "ValueError", "message": "no"}}
    return {"status": "ok", "report": {"shape": job["inputs"]["shapes"]}}


fake_analysis.calls = []


def thread_pool(jobs: int, timeout: float) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=jobs)


def test_runner_works_with_any_executor_and_caches_successes(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def f():\n    pass\n")
    registry = load_registry(_write(tmp_path / "models.toml", REGISTRY))
    first, second = tmp_path / "first", tmp_path / "second"
    fake_analysis.calls.clear()
    stream = io.StringIO()
    results = run_all(registry.runs, registry.folder, ResultCache(None, first), Progress(stream), jobs=2, timeout=5,
                      executor_factory=thread_pool, function=fake_analysis)
    assert sorted(fake_analysis.calls) == ["a", "a.big", "b"]
    assert results["a.big"] == {"status": "ok", "report": {"shape": [[8]]}}
    assert results["b"]["status"] == "failed"
    # Only successes are cached; the next build reads them from the previous output folder.
    assert len(list((first / ".torchscan-cache").glob("?" * 64 + ".json"))) == 2
    fake_analysis.calls.clear()
    again = run_all(registry.runs, registry.folder, ResultCache(first, second), Progress(stream), jobs=2, timeout=5,
                    executor_factory=thread_pool, function=fake_analysis)
    assert fake_analysis.calls == ["b"] and again == results
    assert "[1/3] a: cached" in stream.getvalue()
    # Editing the factory's module invalidates the entries that use it.
    (tmp_path / "m.py").write_text("def f():\n    return 1\n")
    fake_analysis.calls.clear()
    run_all(registry.runs, registry.folder, ResultCache(second, tmp_path / "third"), Progress(stream), jobs=2,
            timeout=5, executor_factory=thread_pool, function=fake_analysis)
    assert sorted(fake_analysis.calls) == ["a", "a.big", "b"]
    # --no-cache reads nothing but still stores for the next build.
    fake_analysis.calls.clear()
    run_all(registry.runs, registry.folder, ResultCache(second, tmp_path / "fourth", enabled=False), Progress(stream),
            jobs=2, timeout=5, executor_factory=thread_pool, function=fake_analysis)
    assert sorted(fake_analysis.calls) == ["a", "a.big", "b"]


def test_a_broken_executor_future_becomes_a_recorded_failure(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def f():\n    pass\n")
    registry = load_registry(_write(tmp_path / "models.toml", REGISTRY))

    def raising(job: dict[str, Any]) -> dict[str, Any]:
        raise MemoryError("worker ran out of memory")

    results = run_all(registry.runs, registry.folder, ResultCache(None, tmp_path / "out"), Progress(io.StringIO()),
                      jobs=1, timeout=5, executor_factory=thread_pool, function=raising)
    assert results["a"] == {"status": "failed", "error": {"stage": "worker", "type": "MemoryError",
                                                          "message": "worker ran out of memory"}}


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_rich_on_a_terminal_and_plain_lines_otherwise() -> None:
    from torchscan.report.runs.progress import RichProgress, make_progress

    plain = io.StringIO()
    progress = make_progress(plain)
    assert type(progress) is Progress
    progress.start(2)
    progress.submitted("a")
    progress.finished("a", "ok")
    progress.finished("b", "failed (build: RuntimeError)")
    assert plain.getvalue() == "[1/2] a: ok\n[2/2] b: failed (build: RuntimeError)\n"
    terminal = Terminal()
    rich = make_progress(terminal)
    assert isinstance(rich, RichProgress)
    rich.start(1)
    rich.submitted("[bold]a")  # names are printed literally, never as markup
    rich.finished("[bold]a", "ok")
    rich.stop()
    assert "[bold]a" in terminal.getvalue()


CTRL_C_REGISTRY = """
[[models]]
name = "hangs"
factory = "e2e_models:hangs"
input_shape = [4]

[[models]]
name = "tiny"
factory = "e2e_models:tiny"
input_shape = [3, 8, 8]
"""


@pytest.mark.parametrize("isolation", ["worker", "run"])
def test_ctrl_c_kills_the_workers_and_keeps_the_previous_output(isolation: str, tmp_path: Path) -> None:
    import multiprocessing

    from e2e import write_models

    from torchscan.report.build import BuildOptions, build
    from torchscan.report.runs.runner import executor_factory

    write_models(tmp_path)
    registry = load_registry(_write(tmp_path / "models.toml", CTRL_C_REGISTRY))
    output = tmp_path / "site"
    output.mkdir()
    (output / ".torchscan-build").write_text("previous\n")
    (output / "index.html").write_text("previous build\n")
    before = {path.name: path.read_bytes() for path in output.iterdir()}

    class Interrupting(Progress):
        """Ctrl-C as soon as "tiny" is done, while "hangs" runs in the other worker."""

        def finished(self, stem: str, status: str, result: dict[str, Any] | None = None) -> None:
            super().finished(stem, status, result)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build(registry, BuildOptions(output=output, jobs=2, timeout=600.0), Interrupting(io.StringIO()),
              executor_factory=executor_factory(isolation))
    assert {path.name: path.read_bytes() for path in output.iterdir()} == before
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(".site")) == []
    # Every worker, the hanging run's included, was killed and reaped.
    assert _eventually(lambda: not multiprocessing.active_children(), within=30)


def test_local_workers_get_the_analysis_by_its_import_path_and_the_build_never_imports_torch() -> None:
    """The build process hands local workers `analyze_run` by name: importing it (and torch) there cost a build
    with one changed entry over a second before its run was submitted."""
    code = ("import sys, pickle\n"
            "from torchscan.report.runs.runner import isolated_executor, default_function\n"
            "executor = isolated_executor(1, 5.0)\n"
            "function = default_function(executor)\n"
            "executor.shutdown()\n"
            "payload = pickle.dumps(function)\n"
            "assert 'torch' not in sys.modules, 'the build process imported torch'\n"
            "print(function.path)\n")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           cwd=Path(__file__).resolve().parents[2])
    assert found.stdout.strip() == "torchscan.report.runs.worker:analyze_run"
