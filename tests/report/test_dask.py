"""Builds on a Dask cluster (``--scheduler``): the same output as a local build, failures recorded with the same
stages, lost workers retried then recorded, GPU placement, version checks, shipped code and Ctrl-C.

Everything runs on loopback clusters of two worker processes; one cluster is shared by the tests of this module.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask_cluster
import pytest
from dask_cluster import (
    COMPARED_REGISTRY,
    CTRL_C_REGISTRY,
    CUDA_REGISTRY,
    LoopbackCluster,
    loopback_cluster,
    process_gone,
    tree,
    write_registry,
)
from e2e import ROOT, console_script, run_cli

from torchscan.report.build import BuildOptions, build
from torchscan.report.cli import main
from torchscan.report.registry.parsing import load_registry
from torchscan.report.runs import dask_session as cluster
from torchscan.report.runs.progress import Progress
from torchscan.report.runs.result_cache import ResultCache
from torchscan.report.runs.runner import run_all
from torchscan.report.runs.worker import analyze_run

TIMEOUT = "20"


@pytest.fixture(scope="module")
def shared() -> Iterator[LoopbackCluster]:
    with loopback_cluster() as instance:
        yield instance


def _run(registry_path: Path, shared: LoopbackCluster, tmp_path: Path, function: Any = None,
         **session: Any) -> tuple[dict[str, dict[str, Any]], cluster.DaskExecutor]:
    """Run every entry of a registry on the shared cluster, as ``build`` would; returns the results and executor."""
    registry = load_registry(registry_path)
    executors: list[cluster.DaskExecutor] = []
    with cluster.DaskSession(shared.address, **session) as dask_session:
        def factory(jobs: int, timeout: float) -> cluster.DaskExecutor:
            executors.append(dask_session.executor_factory(jobs, timeout))
            return executors[-1]

        results = run_all(registry.runs, registry.folder, ResultCache(None, tmp_path / "cache"),
                          Progress(io.StringIO()), jobs=2, timeout=float(TIMEOUT), executor_factory=factory,
                          function=function)
    return results, executors[0]


def test_a_local_cluster_build_is_byte_identical_to_a_local_build(tmp_path: Path) -> None:
    registry = write_registry(tmp_path, COMPARED_REGISTRY)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                       os.environ.get("PYTHONPATH")]))}
    env.pop("TORCHSCAN_SCHEDULER", None)
    local = subprocess.Popen([*console_script(), "build", str(registry), "--output", str(tmp_path / "local"),
                              "--jobs", "2", "--timeout", TIMEOUT], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    on_cluster = run_cli("build", registry, "--output", tmp_path / "cluster", "--timeout", TIMEOUT,
                         "--scheduler", "local:2", cwd=tmp_path)
    local_err = local.communicate(timeout=300)[1]
    assert local.returncode == on_cluster.returncode == 1, (local_err, on_cluster.stderr)
    local_files, cluster_files = tree(tmp_path / "local"), tree(tmp_path / "cluster")
    assert sorted(local_files) == sorted(cluster_files)
    assert [name for name in local_files if local_files[name] != cluster_files[name]] == []
    # The same progress lines (in completion order) and the same failures, each with its local stage.
    for stream in (local_err, on_cluster.stderr):
        assert "[5/5]" in stream and "5 runs: 2 complete, 0 partial, 3 failed" in stream
        assert "raises: failed (build: RuntimeError)" in stream
        assert "hangs: failed (timeout: TimeoutError)" in stream
        assert "exits: failed (worker: WorkerDied)" in stream
        assert "FAILED exits: worker stage, WorkerDied: the worker process died without a result (exit code 3)" in stream


def test_lost_workers_are_retried_then_recorded(shared: LoopbackCluster, tmp_path: Path) -> None:
    results = {}
    for name, once in (("killer", "false"), ("flaky", "true")):  # one at a time: a lost worker blames its queue
        registry = write_registry(tmp_path / name, f'[[models]]\nname = "{name}"\nfactory = "dask_models:tiny"\n'
                                  f'input_shape = [4]\nkwargs = {{ log = "{(tmp_path / name).as_posix()}.log", '
                                  f'once = {once} }}\n')
        found, executor = _run(registry, shared, tmp_path, function=dask_cluster.lose_worker)
        results.update(found)
    attempts = {name: (tmp_path / f"{name}.log").read_text().split() for name in ("killer", "flaky")}
    # flaky lost its worker once, Dask retried it, and the retry succeeded.
    assert results["flaky"] == {"status": "ok", "report": {"attempts": 2}} and len(attempts["flaky"]) == 2
    assert set(executor.placements) == {"flaky"}
    # killer lost a worker on each of its allowed_failures + 1 attempts, then became a recorded failure.
    assert len(attempts["killer"]) == dask_cluster.ALLOWED_FAILURES + 1
    error = results["killer"]["error"]
    assert (results["killer"]["status"], error["stage"], error["type"]) == ("failed", "worker", "WorkerDied")
    assert f"lost its Dask worker {dask_cluster.ALLOWED_FAILURES + 1} times" in error["message"]
    # The processes of the killed workers' runs did not outlive them.
    assert all(process_gone(int(pid)) for pid in attempts["killer"] + attempts["flaky"][:1])


def test_cuda_and_memory_runs_go_only_to_the_worker_offering_them(shared: LoopbackCluster, tmp_path: Path) -> None:
    """Two CUDA runs and a CPU run asking for 1 GB: only the worker declaring GPU=1 and MEMORY=2e9 may take them.
    Without CUDA, the CUDA runs fail cleanly in stage build, as in a local build; the memory run succeeds."""
    registry = write_registry(tmp_path, CUDA_REGISTRY)
    gpu_worker = shared.gpu_worker()
    results, executor = _run(registry, shared, tmp_path)
    assert executor.placements == {"big": gpu_worker, "gpu": gpu_worker, "gpu.w8": gpu_worker}
    assert results.pop("big")["status"] == "ok"
    # The analysis ran in the run's own process: the worker itself never imported torch.
    assert not any(shared.client.run(dask_cluster.imported, "torch").values())
    import torch

    if torch.cuda.is_available():  # a machine with a GPU analyzes them
        assert all(result["status"] == "ok" for result in results.values())
        return
    expected = {"stage": "build", "type": "RuntimeError"}
    for result in results.values():
        assert result["status"] == "failed" and expected.items() <= result["error"].items()
        assert result["error"]["message"].startswith('device = "cuda", but ')
    # A local build runs the same function in its own process: the entry fails in the same way, in the same stage.
    gpu_run = next(run for run in load_registry(registry).runs if run.stem == "gpu")
    assert analyze_run(gpu_run.to_job(tmp_path)) == results["gpu"]


def test_the_user_hears_once_when_no_worker_offers_a_resource_a_run_needs() -> None:
    class Client:  # what DaskExecutor asks before submitting: the connected workers and their resources
        def scheduler_info(self, n_workers: int) -> dict[str, Any]:
            return {"workers": {"tcp://a:1": {"resources": {}}, "tcp://b:1": {"resources": {"MEMORY": 8e9}}}}

    notes: list[str] = []
    executor = cluster.DaskExecutor(Client(), 5.0, note=notes.append)
    executor._warn_unplaceable({"MEMORY": 4e9})  # worker b offers enough
    executor._warn_unplaceable({"GPU": 1, "MEMORY": 16e9})
    executor._warn_unplaceable({"GPU": 1})  # said once per request
    assert notes == [
        ("no connected Dask worker offers the resource GPU=1; runs that need it wait until a worker started with "
        "--resources GPU=... joins"),
        ("no connected Dask worker offers the resource MEMORY=16000000000; runs that need it wait until a worker "
        "started with --resources MEMORY=... joins")]


def test_version_mismatch_is_an_error_naming_both_versions(shared: LoopbackCluster, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    registry = write_registry(tmp_path, COMPARED_REGISTRY)
    monkeypatch.setattr(cluster, "client_environment", lambda: {"torch": "1.0.0", "torchscan": "0.0.1"})
    monkeypatch.setenv("TORCHSCAN_SCHEDULER", shared.address)  # the scheduler comes from the environment
    assert main(["build", str(registry), "--output", str(tmp_path / "out")]) == 2
    message = capsys.readouterr().err
    installed = cluster.installed_torch_version()
    assert f"has torch {installed} and torchscan {cluster.__version__}" in message
    assert "the client has torch 1.0.0 and torchscan 0.0.1" in message
    assert not (tmp_path / "out").exists()


def test_a_worker_that_joins_later_with_other_versions_records_its_runs_as_failed(
        shared: LoopbackCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check before submitting sees only the workers present then; each run checks its own worker again."""
    from torchscan.report.runs.dask_task import environment

    job = load_registry(write_registry(tmp_path, CUDA_REGISTRY.replace('"cuda"', '"cpu"'))).runs[0].to_job(tmp_path)
    with cluster.DaskSession(shared.address) as session:
        session.connect()  # every worker matches now
        monkeypatch.setattr(cluster, "client_environment", lambda: {**environment(), "torch": "1.0.0"})
        result = session.executor_factory(1, 5.0).submit(analyze_run, job).result(timeout=60)
    assert (result["status"], result["error"]["stage"], result["error"]["type"]) == (
        "failed", "worker", "EnvironmentMismatch")
    assert "but the client has torch 1.0.0" in result["error"]["message"]


def test_daemonic_workers_and_other_torch_releases_are_refused() -> None:
    from torchscan.report.runs.dask_task import environment, environment_problem

    found = {**environment(), "daemon": True}
    problem = environment_problem(found, cluster.client_environment(), "the Dask worker tcp://w:1")
    assert problem is not None and "DASK_DISTRIBUTED__WORKER__DAEMON=False" in problem
    assert environment_problem({**found, "daemon": False}, cluster.client_environment(), "w") is None
    # A CUDA build of the same torch release is fine (a CPU-only client may use GPU workers); another release is not.
    client = {"torch": "2.13.0+cpu", "torchscan": "0.1.0"}
    assert environment_problem({"torch": "2.13.0+cu128", "torchscan": "0.1.0", "daemon": False}, client, "w") is None
    assert "has torch 2.12.0+cu128" in environment_problem(
        {"torch": "2.12.0+cu128", "torchscan": "0.1.0", "daemon": False}, client, "w")


def test_shipped_code_reaches_workers_that_cannot_see_the_registry(shared: LoopbackCluster, tmp_path: Path) -> None:
    folder = tmp_path / "registry"
    registry = write_registry(folder, '[[models]]\nname = "tiny"\nfactory = "dask_models:tiny"\n'
                              'input_shape = [3, 8, 8]\nkwargs = { width = 8 }\n',
                              module="shipped_models_" + os.urandom(4).hex())
    loaded = load_registry(registry)
    moved = tmp_path / "elsewhere"
    with cluster.DaskSession(shared.address, ship_from=folder) as session:
        executor = session.executor_factory(2, float(TIMEOUT))
        shutil.move(folder, moved)  # the jobs still name the old folder, which no longer exists anywhere
        futures = {run.stem: executor.submit(analyze_run, run.to_job(folder)) for run in loaded.runs}
        results = {stem: future.result(timeout=120) for stem, future in futures.items()}
    assert all(result["status"] == "ok" for result in results.values()), results
    assert results["tiny"]["report"]["totals"]["parameters"]["total"] == 224
    # The report came back as plain data: neither the worker nor this test needed torch to receive it.
    assert not any(shared.client.run(dask_cluster.imported, "torch").values())


@pytest.mark.parametrize("isolation", ["worker", "run"])
def test_ctrl_c_cancels_the_runs_and_keeps_the_previous_output(shared: LoopbackCluster, tmp_path: Path,
                                                               isolation: str) -> None:
    log = tmp_path / "hangs.log"
    registry = load_registry(write_registry(tmp_path, CTRL_C_REGISTRY.replace("LOG", log.as_posix())))
    output = tmp_path / "site"
    output.mkdir()
    (output / ".torchscan-build").write_text("previous\n")
    (output / "index.html").write_text("previous build\n")
    before = tree(output)

    class Interrupting(Progress):
        """Ctrl-C once every run is submitted and the hanging one is running on its worker."""

        def submitted(self, stem: str) -> None:
            super().submitted(stem)
            if len(self.started) == len(registry.runs):
                assert _eventually(log.exists, within=120)
                raise KeyboardInterrupt

    with cluster.DaskSession(shared.address, isolation=isolation) as session, pytest.raises(KeyboardInterrupt):
        build(registry, BuildOptions(output=output, jobs=2, timeout=600.0), Interrupting(io.StringIO()),
              executor_factory=session.executor_factory)
    assert tree(output) == before
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(".site")) == []
    # The hanging run was cancelled on its worker: its process is gone, no run process is left on any worker.
    assert process_gone(int(log.read_text().split()[0]))
    assert _eventually(lambda: not any(shared.client.run(dask_cluster.child_processes).values()))
    assert _eventually(lambda: not shared.client.run_on_scheduler(dask_cluster.scheduler_tasks, cluster.RUN_KEY))


def test_missing_distributed_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    registry = write_registry(tmp_path, COMPARED_REGISTRY)
    monkeypatch.setitem(sys.modules, "distributed", None)  # what `import distributed` does when it is absent
    assert main(["build", str(registry), "--output", str(tmp_path / "out"), "--scheduler", "local:2"]) == 2
    assert 'pip install "torchscan[dask]"' in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("value", "where"), [("local:0", "--scheduler"), ("localhost:8786", "--scheduler"),
                                              ("local:two", "TORCHSCAN_SCHEDULER")])
def test_a_bad_scheduler_is_a_usage_error(value: str, where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    registry = write_registry(tmp_path, COMPARED_REGISTRY)
    arguments = ["build", str(registry), "--output", str(tmp_path / "out")]
    if where == "TORCHSCAN_SCHEDULER":
        monkeypatch.setenv(where, value)
    else:
        arguments += [where, value]
    with pytest.raises(SystemExit) as exit_info:
        main(arguments)
    assert exit_info.value.code == 2
    message = capsys.readouterr().err
    assert "--scheduler" in message and "TORCHSCAN_SCHEDULER" in message and repr(value) in message


def test_ship_code_needs_a_scheduler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("TORCHSCAN_SCHEDULER", raising=False)
    registry = write_registry(tmp_path, COMPARED_REGISTRY)
    assert main(["build", str(registry), "--output", str(tmp_path / "out"), "--ship-code"]) == 2
    assert "--ship-code only applies with --scheduler" in capsys.readouterr().err


def test_an_unreachable_scheduler_is_a_clear_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with cluster.DaskSession(f"tcp://127.0.0.1:{port}", connect_timeout=2) as session, \
            pytest.raises(cluster.ClusterError, match=f"cannot use the Dask scheduler tcp://127.0.0.1:{port}"):
        session.executor_factory(1, 5.0)


def _eventually(condition: Any, within: float = 20.0) -> bool:
    import time

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.3)
    return False
