"""A ``concurrent.futures.Executor`` that runs tasks in supervised ``spawn`` processes and can kill them.

``ProcessPoolExecutor`` cannot cancel a running task, and a task that hangs or kills its process would stall or
break the whole pool. Here a supervisor thread owns the worker processes: a task that runs past ``timeout`` has its
worker killed and its future fails with `TaskTimeout`; a worker that dies without answering fails its task with
`WorkerDied`; either way the next task gets a new worker. The timeout counts from the moment the task starts in its
process (after the function's module, torch included, is imported), so a slow machine does not turn start-up into
timeouts; start-up gets `STARTUP_ALLOWANCE` seconds more.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import pickle
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from .process_state import ProcessState, warn_every_run

STARTUP_ALLOWANCE = 120.0


class TaskTimeout(TimeoutError):
    """The task ran longer than the executor's timeout and its process was killed."""


class WorkerDied(RuntimeError):
    """The task's process ended without returning a result (a crash, a signal, ``os._exit``)."""


class TaskRaised(RuntimeError):
    """The task raised in its process; the message names the original exception type."""


def import_object(path: str) -> Any:
    """The object named ``module:qualified.name``, its module imported (a run's function, an entry's callables)."""
    module_name, _, name = path.partition(":")
    value: Any = importlib.import_module(module_name)
    for part in name.split("."):
        value = getattr(value, part)
    return value


class NamedFunction:
    """A function passed by its import path: pickling it sends only the path, unpickling imports it, so the
    submitting process (a Dask worker) never imports torch, while the run's process does before its timeout starts."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return import_object, (self.path,)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The function called here (a run's process receives the function itself, imported when unpickled)."""
        return import_object(self.path)(*args, **kwargs)


def _exit_with_parent() -> None:
    """End this process as soon as the one that started it is gone (a SIGKILLed build, a lost Dask worker): a
    killed parent cannot kill its children, and a hanging model would otherwise outlive its build forever."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _serve(connection: Connection, reuse: bool) -> None:
    """A worker process: receive a pickled call, answer ``started`` then its outcome; repeat while ``reuse``. A warm
    worker captures the process's state once its first call (and with it torch) is imported, and resets the process
    after every call (`ProcessState`); when something cannot be reset, the outcome says why and the worker ends."""
    _exit_with_parent()
    state: ProcessState | None = None
    while True:
        try:
            message = connection.recv_bytes()
            function, args, kwargs = pickle.loads(message) if message else (None, (), {})
        except (EOFError, OSError):
            return
        except BaseException as error:  # noqa: BLE001 - an unimportable function is the run's failure
            connection.send(("raised", _described(error), "its function could not be imported"))
            return
        if function is None:
            return
        if reuse:
            state = state or ProcessState.capture()
            state.reseed()
        warn_every_run()
        connection.send(("started", None, None))
        kind, value = _called(function, args, kwargs)
        reason = _reset(state) if state is not None else "one process per run"
        connection.send((kind, value, reason))
        if reason is not None:
            return


def _reset(state: ProcessState) -> str | None:
    """`ProcessState.reset`'s answer; a reset that fails ends the worker (the run's own outcome still counts)."""
    try:
        return state.reset()
    except Exception as error:  # noqa: BLE001 - whatever the run left behind, a fresh worker is the way out
        return f"the reset failed ({_described(error)})"


def _called(function: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> tuple[str, Any]:
    try:
        return "ok", function(*args, **kwargs)
    except BaseException as error:  # noqa: BLE001 - reported to the parent, whatever it is
        return "raised", _described(error)


def _described(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


@dataclass
class _Task:
    future: Future
    payload: bytes
    timeout: float | None = None  # seconds the call may run once started (None: no limit)
    outcome: tuple[str, Any, str | None] | None = None
    started: bool = False
    handed_again: bool = False


@dataclass
class _Worker:
    """One worker process, the parent's end of its pipe, and the task it runs (None while idle)."""

    process: Any
    connection: Connection
    task: _Task | None = None
    deadline: float = float("inf")
    served: int = 0


class IsolatedProcessExecutor(Executor):
    """Run submitted calls in ``spawn`` worker processes, at most ``max_workers`` at a time. With ``reuse`` a worker
    stays warm and runs call after call, its process state reset in between (or the worker replaced when a call
    changed what cannot be reset: ``recycled`` keeps the reasons); without it, every call gets a fresh process.
    Either way a call past ``timeout`` has its worker killed and a dead worker is replaced; ``processes_started``
    counts the processes started."""

    def __init__(self, max_workers: int, timeout: float | None = None, *, reuse: bool = False) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._context = multiprocessing.get_context("spawn")
        self._max_workers = max_workers
        self._timeout = timeout
        self._reuse = reuse
        self._queue: deque[_Task] = deque()
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._wake_reader, self._wake_writer = multiprocessing.Pipe(duplex=False)
        self._shutdown = self._killed = False
        self.processes_started = 0
        self.recycled: list[str] = []
        self._thread = threading.Thread(target=self._loop, name="isolated-executor", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        return self.submit_timed(self._timeout, fn, *args, **kwargs)

    def submit_timed(self, timeout: float | None, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        """`submit` with a timeout of this call's own instead of the executor's (a registry entry's ``timeout``)."""
        future: Future = Future()
        payload = pickle.dumps((fn, args, kwargs))  # a call that cannot be pickled fails here, in the caller
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot submit after shutdown")
            self._queue.append(_Task(future, payload, timeout))
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
        """Stop everything now (used on Ctrl-C): queued tasks are cancelled, every worker process killed."""
        with self._lock:
            self._shutdown = self._killed = True
            while self._queue:
                self._queue.popleft().future.cancel()
            for worker in self._workers:
                if worker.process.is_alive():
                    worker.process.kill()
        self._wake()

    def kill(self, future: Future) -> None:
        """Kill the worker running ``future``'s call (its future then fails with `WorkerDied`); cancel it if queued."""
        future.cancel()
        with self._lock:
            for worker in self._workers:
                if worker.task is not None and worker.task.future is future and worker.process.is_alive():
                    worker.task.handed_again = True  # killed on purpose: never handed to another worker
                    worker.process.kill()
        self._wake()

    def _wake(self) -> None:
        self._wake_writer.send_bytes(b"")

    def _loop(self) -> None:
        while True:
            self._assign_queued()
            with self._lock:
                workers = list(self._workers)
                if self._shutdown and not self._queue and all(worker.task is None for worker in workers):
                    break
            waitables: list[Any] = [self._wake_reader]
            for worker in workers:
                waitables.append(worker.process.sentinel)
                if worker.task is not None:
                    waitables.append(worker.connection)
            ready = wait(waitables, timeout=self._next_timeout(workers))
            while self._wake_reader.poll():
                self._wake_reader.recv_bytes()
            for worker in workers:
                if worker.task is not None:
                    self._check_busy(worker, worker.task, ready)
                elif worker.process.sentinel in ready:  # an idle worker that died (killed from outside): forget it
                    self._retire(worker)
        self._stop_idle_workers()

    def _assign_queued(self) -> None:
        with self._lock:
            while self._queue:
                worker = next((worker for worker in self._workers if worker.task is None), None)
                if worker is None and len(self._workers) >= self._max_workers:
                    return
                task = self._queue.popleft()
                if task.handed_again or task.future.set_running_or_notify_cancel():
                    self._hand(task, worker or self._start_worker())

    def _start_worker(self) -> _Worker:
        parent, child = self._context.Pipe(duplex=True)
        process = self._context.Process(target=_serve, args=(child, self._reuse), daemon=True)
        process.start()
        child.close()
        self.processes_started += 1
        worker = _Worker(process, parent)
        self._workers.append(worker)
        return worker

    def _hand(self, task: _Task, worker: _Worker) -> None:
        """Send the task to the worker (to a fresh one when the idle worker turns out to be gone)."""
        try:
            worker.connection.send_bytes(task.payload)
        except OSError:
            self._retire(worker)
            worker = self._start_worker()
            worker.connection.send_bytes(task.payload)
        worker.task = task
        worker.served += 1
        worker.deadline = time.monotonic() + task.timeout + STARTUP_ALLOWANCE if task.timeout else float("inf")

    def _next_timeout(self, workers: list[_Worker]) -> float | None:
        deadline = min((worker.deadline for worker in workers if worker.task is not None), default=float("inf"))
        return None if deadline == float("inf") else max(0.0, deadline - time.monotonic())

    def _check_busy(self, worker: _Worker, task: _Task, ready: list[Any]) -> None:
        """Read the busy worker's messages; finish its task when it answered, died or ran past its deadline."""
        silent = False  # the pipe closed without an outcome: the worker died
        while not silent and task.outcome is None and worker.connection in ready and worker.connection.poll():
            silent = not self._receive(worker, task)
        if task.outcome is not None:
            self._finish(worker, task, task.outcome)
        elif silent or (worker.process.sentinel in ready and not worker.connection.poll()):
            worker.process.join()
            if not self._hand_again(worker, task):
                self._finish(worker, task, ("died", _exit_text(worker.process), "it died"))
        elif time.monotonic() >= worker.deadline:
            worker.process.kill()
            worker.process.join()
            self._finish(worker, task, ("timeout", None, "it was killed"))

    def _receive(self, worker: _Worker, task: _Task) -> bool:
        """Read one message of the worker's; False when its pipe closed instead (it died)."""
        try:
            kind, value, reason = worker.connection.recv()
        except (EOFError, OSError):
            return False
        if kind == "started":
            task.started = True
            worker.deadline = time.monotonic() + task.timeout if task.timeout else float("inf")
        else:
            task.outcome = (kind, value, reason)
        return True

    def _hand_again(self, worker: _Worker, task: _Task) -> bool:
        """Queue a task again, once, when the warm worker it was handed to was already dying (killed while idle):
        the task never started there. A worker's first task that kills it before starting is not retried."""
        if task.started or task.handed_again or worker.served < 2 or self._killed:
            return False
        task.handed_again = True
        worker.task = None
        self._retire(worker)
        with self._lock:
            self._queue.appendleft(task)
        return True

    def _finish(self, worker: _Worker, task: _Task, outcome: tuple[str, Any, str | None]) -> None:
        kind, value, reason = outcome
        worker.task = None
        if reason is not None:
            if self._reuse and kind in ("ok", "raised"):
                self.recycled.append(reason)
            self._retire(worker)
        if kind == "ok":
            task.future.set_result(value)
        elif kind == "raised":
            task.future.set_exception(TaskRaised(value))
        elif kind == "timeout":
            task.future.set_exception(TaskTimeout(f"timed out after {task.timeout:g} s; the worker was killed"))
        else:
            task.future.set_exception(WorkerDied(f"the worker process died without a result ({value})"))

    def _retire(self, worker: _Worker) -> None:
        """Let the worker's process end (killed when it does not within seconds) and forget it."""
        worker.process.join(timeout=10)
        if worker.process.is_alive():  # answered but cannot exit (a stuck non-daemon thread, say)
            worker.process.kill()
            worker.process.join()
        worker.connection.close()
        with self._lock:
            if worker in self._workers:
                self._workers.remove(worker)

    def _stop_idle_workers(self) -> None:
        for worker in list(self._workers):
            with contextlib.suppress(OSError):  # a worker that is gone needs no goodbye
                worker.connection.send_bytes(b"")
        for worker in list(self._workers):
            self._retire(worker)


def _exit_text(process: Any) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
