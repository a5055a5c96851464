"""A ``concurrent.futures.Executor`` that runs every task in its own ``spawn`` process and can kill it.

``ProcessPoolExecutor`` cannot cancel a running task, and a task that hangs or kills its process would stall or
break the whole pool. Here each task owns one fresh process: a task that runs past ``timeout`` is killed and its
future fails with `TaskTimeout`; a process that dies without answering fails with `WorkerDied`.

The timeout counts from the moment the task starts in its process (after the interpreter has started and the
function's module, torch included, is imported), so a slow machine does not turn start-up into timeouts; start-up
itself gets `STARTUP_ALLOWANCE` seconds more.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

STARTUP_ALLOWANCE = 120.0


class TaskTimeout(TimeoutError):
    """The task ran longer than the executor's timeout and its process was killed."""


class WorkerDied(RuntimeError):
    """The task's process ended without returning a result (a crash, a signal, ``os._exit``)."""


class TaskRaised(RuntimeError):
    """The task raised in its process; the message names the original exception type."""


def _child(connection: Connection, function: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> None:
    _exit_with_parent()
    connection.send(("started", None))
    try:
        outcome = ("ok", function(*args, **kwargs))
    except BaseException as error:  # noqa: BLE001 - reported to the parent, whatever it is
        outcome = ("raised", f"{type(error).__name__}: {error}")
    connection.send(outcome)
    connection.close()


def import_callable(path: str) -> Callable[..., Any]:
    """The module-level function named ``module:qualified.name`` (imported as a side effect)."""
    module_name, _, name = path.partition(":")
    value: Any = importlib.import_module(module_name)
    for part in name.split("."):
        value = getattr(value, part)
    return value


class NamedFunction:
    """A function passed by its import path: pickling it sends only the path, unpickling imports it.

    Handing one to `IsolatedProcessExecutor.submit` keeps the submitting process free of the function's imports
    (a Dask worker then never imports torch), while the run's process still imports them before its timeout starts.
    """

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return import_callable, (self.path,)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The function called here (a run's process receives the function itself, imported when unpickled)."""
        return import_callable(self.path)(*args, **kwargs)


def _exit_with_parent() -> None:
    """End this process as soon as the one that started it is gone (a SIGKILLed build, a lost Dask worker).

    A killed parent cannot kill its children, and nobody would ever read this run's result: without the watch, a
    hanging model would outlive its build forever.
    """
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


@dataclass
class _Task:
    future: Future
    function: Callable[..., Any]
    args: tuple
    kwargs: dict[str, Any]
    process: Any = None
    connection: Connection | None = None
    deadline: float = 0.0
    outcome: Any = field(default=None)

    @property
    def pipe(self) -> Connection:
        """The reading end of the pipe from the task's process, which a started task has."""
        if self.connection is None:
            raise RuntimeError("the task has not started")
        return self.connection


class IsolatedProcessExecutor(Executor):
    """Run each submitted call in a new process (``spawn`` by default), at most ``max_workers`` at a time."""

    def __init__(self, max_workers: int, timeout: float | None = None, start_method: str = "spawn") -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._context = multiprocessing.get_context(start_method)
        self._max_workers = max_workers
        self._timeout = timeout
        self._queue: deque[_Task] = deque()
        self._running: list[_Task] = []
        self._lock = threading.Lock()
        self._wake_reader, self._wake_writer = multiprocessing.Pipe(duplex=False)
        self._shutdown = False
        self._thread = threading.Thread(target=self._loop, name="isolated-executor", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot submit after shutdown")
            self._queue.append(_Task(future, fn, args, kwargs))
        self._wake()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while self._queue:
                    self._queue.popleft().future.cancel()
        self._wake()
        if wait:
            self._thread.join()

    def kill_all(self) -> None:
        """Stop everything now (used on Ctrl-C): queued tasks are cancelled, running processes killed."""
        with self._lock:
            self._shutdown = True
            while self._queue:
                self._queue.popleft().future.cancel()
            for task in self._running:
                if task.process.is_alive():
                    task.process.kill()
        self._wake()

    def _wake(self) -> None:
        self._wake_writer.send_bytes(b"")

    def _loop(self) -> None:
        while True:
            self._start_queued()
            with self._lock:
                if self._shutdown and not self._queue and not self._running:
                    return
                running = list(self._running)
            waitables: list[Any] = [self._wake_reader]
            for task in running:
                waitables.extend([task.connection, task.process.sentinel])
            ready = wait(waitables, timeout=self._next_timeout(running))
            if self._wake_reader in ready:
                while self._wake_reader.poll():
                    self._wake_reader.recv_bytes()
            for task in running:
                self._check(task, ready)

    def _start_queued(self) -> None:
        with self._lock:
            while self._queue and len(self._running) < self._max_workers:
                task = self._queue.popleft()
                if not task.future.set_running_or_notify_cancel():
                    continue
                reader, writer = self._context.Pipe(duplex=False)
                # typeshed types get_context(str) as BaseContext, which lacks the Process every real context has
                task.process = self._context.Process(  # type: ignore[attr-defined]
                    target=_child, args=(writer, task.function, task.args, task.kwargs), daemon=True)
                task.process.start()
                writer.close()
                task.connection = reader
                task.deadline = (time.monotonic() + self._timeout + STARTUP_ALLOWANCE if self._timeout
                                 else float("inf"))
                self._running.append(task)

    def _next_timeout(self, running: list[_Task]) -> float | None:
        if not running or self._timeout is None:
            return None
        return max(0.0, min(task.deadline for task in running) - time.monotonic())

    def _check(self, task: _Task, ready: list[Any]) -> None:
        while task.outcome is None and task.connection in ready and task.pipe.poll():
            try:
                message = task.pipe.recv()
            except (EOFError, OSError):
                message = ("died", None)
            if message[0] == "started":
                task.deadline = time.monotonic() + self._timeout if self._timeout else float("inf")
            else:
                task.outcome = message
        if task.outcome is not None:
            task.process.join(timeout=10)
            if task.process.is_alive():  # answered but cannot exit (a stuck non-daemon thread, say)
                task.process.kill()
                task.process.join()
            self._finish(task, task.outcome)
        elif task.process.sentinel in ready and not task.pipe.poll():
            task.process.join()
            self._finish(task, ("died", None))
        elif time.monotonic() >= task.deadline:
            task.process.kill()
            task.process.join()
            self._finish(task, ("timeout", None))

    def _finish(self, task: _Task, outcome: tuple[str, Any]) -> None:
        kind, value = outcome
        with self._lock:
            self._running.remove(task)
        task.pipe.close()
        if kind == "ok":
            task.future.set_result(value)
        elif kind == "raised":
            task.future.set_exception(TaskRaised(value))
        elif kind == "timeout":
            task.future.set_exception(TaskTimeout(f"timed out after {self._timeout:g} s; the worker was killed"))
        else:
            task.future.set_exception(WorkerDied(f"the worker process died without a result ({_exit_text(task)})"))


def _exit_text(task: _Task) -> str:
    code = task.process.exitcode
    if code is not None and code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
