"""``training.parallel``: an entry's sharded training plan, the world sizes to size it at, and the device's memory.

Spelled in ``models.toml`` as a table under the entry's ``training``::

    [models.training]
    optimizer = "adamw"

    [models.training.parallel]
    strategy = "fsdp"              # ddp, fsdp, fsdp_no_reshard, hsdp (torchscan.parallel.plan)
    world_size = 8                 # the declared world size: the catalog's per-device peak
    world_sizes = [1, 2, 4, 8]     # the sizes the model page draws and "fits on" chooses from
    device_memory = "80GB"         # one device's memory
    headroom = 0.1                 # the fraction of it kept free (default 0.1)

with the plan's other keys (``shard_group_size``, ``mixed_precision``, ``units``, ``activation_checkpointing``) as
`torchscan.parallel.plan.parse_plan` reads them. Checked here without importing torch, every mistake named by its
key; the worker passes the plan to ``crawl_training_step(parallel=...)`` and sizes the other world sizes.
"""

from __future__ import annotations

from typing import Any

from ...parallel.plan_keys import DTYPE_ALIASES, KEYS, PRECISION_KEYS, STRATEGIES
from .checks import Checker, describe
from .sweeps import Problem

#: The keys of ``training.parallel`` beyond the plan's own: the sizing of `torchscan.fit_devices`.
SIZING_KEYS = ("world_sizes", "device_memory", "headroom")
PARALLEL_KEYS = (*KEYS, *SIZING_KEYS)
#: The fraction of a device's memory kept free when none is given (`torchscan.fit_devices`'s default).
DEFAULT_HEADROOM = 0.1
#: The most world sizes an entry may ask for: each is one sharded step of the model (seconds to a minute).
MOST_WORLD_SIZES = 12


def parse_parallel(check: Checker, where: str, value: Any) -> dict[str, Any] | None:
    """``training.parallel`` checked: the plan's keys as given, ``world_sizes`` (increasing, the declared size among
    them), ``device_memory`` in bytes and ``headroom``; None when it is not a table."""
    problem = check.problem
    if not isinstance(value, dict):
        problem(where, "expected a table such as { strategy = \"fsdp\", world_size = 8, device_memory = \"80GB\" } "
                f"(the sharded plan of the training step), got {describe(value)}")
        return None
    check.unknown_keys(where, value, PARALLEL_KEYS)
    strategy = _strategy(where, value.get("strategy"), problem)
    world_size = _positive_int(f"{where}.world_size", value.get("world_size"), problem,
                               "the declared world size, an integer >= 1 (the catalog's per-device peak is at it)")
    sizes = _world_sizes(where, value.get("world_sizes"), world_size, problem)
    _shard_group(where, strategy, value.get("shard_group_size"), sizes, problem)
    _mixed_precision(f"{where}.mixed_precision", value.get("mixed_precision"), check)
    _units(f"{where}.units", value.get("units"), problem)
    if not isinstance(value.get("activation_checkpointing", False), bool):
        problem(f"{where}.activation_checkpointing", "expected true or false (recompute each unit's forward in the "
                f"backward), got {describe(value['activation_checkpointing'])}")
    return {**plan_of(value), "world_sizes": sizes,
            "device_memory": _device_memory(where, value.get("device_memory"), check),
            "headroom": _headroom(f"{where}.headroom", value.get("headroom", DEFAULT_HEADROOM), problem)}


def plan_of(parallel: dict[str, Any]) -> dict[str, Any]:
    """The plan `torchscan.parallel.plan.parse_plan` reads, from a checked ``training.parallel``."""
    return {key: parallel[key] for key in KEYS if key in parallel}


def _strategy(where: str, value: Any, problem: Problem) -> str:
    if value not in STRATEGIES:
        expected = f"expected one of {', '.join(map(repr, STRATEGIES))}"
        problem(f"{where}.strategy", f"missing; {expected}" if value is None else f"{expected}, got {describe(value)}")
        return ""
    return str(value)


def _positive_int(where: str, value: Any, problem: Problem, what: str) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problem(where, f"missing; expected {what}" if value is None else f"expected {what}, got {describe(value)}")
        return None
    return value


def _world_sizes(where: str, value: Any, declared: int | None, problem: Problem) -> list[int]:
    """The sizes to analyze (the declared one alone by default), increasing; they must include the declared one."""
    if value is None:
        return [] if declared is None else [declared]
    if not _distinct_sizes(value):
        problem(f"{where}.world_sizes", f"expected a list of 1 to {MOST_WORLD_SIZES} distinct integers >= 1 (each "
                f"is one sharded step of the model), got {describe(value)}")
        return [] if declared is None else [declared]
    sizes: list[int] = value
    if declared is not None and declared not in sizes:
        problem(f"{where}.world_sizes", f"must include world_size ({declared}), the declared size the catalog "
                f"shows; got {sizes}")
    return sorted(set(sizes) | ({declared} if declared is not None else set()))


def _distinct_sizes(value: Any) -> bool:
    """A list of 1 to `MOST_WORLD_SIZES` distinct integers >= 1."""
    return isinstance(value, list) and 1 <= len(value) <= MOST_WORLD_SIZES and len(set(value)) == len(value) and all(
        isinstance(size, int) and not isinstance(size, bool) and size >= 1 for size in value)


def _shard_group(where: str, strategy: str, value: Any, sizes: list[int], problem: Problem) -> None:
    """Required for hsdp, where it divides every world size; refused elsewhere."""
    if strategy != "hsdp":
        if value is not None and strategy:
            problem(f"{where}.shard_group_size", f"applies to strategy 'hsdp' only, not {strategy!r}")
        return
    size = _positive_int(f"{where}.shard_group_size", value, problem, "for strategy 'hsdp', the ranks that share one "
                         "sharded copy of the parameters, an integer >= 1 that divides every world size")
    undivided = [world for world in sizes if size is not None and world % size]
    if undivided:
        problem(f"{where}.shard_group_size", f"{size} does not divide world size {undivided[0]}: every world size "
                "must be a whole number of shard groups")


def _mixed_precision(where: str, value: Any, check: Checker) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        check.problem(where, f"expected a table of {', '.join(PRECISION_KEYS)} (FSDP2's MixedPrecisionPolicy), such as "
                f"{{ param_dtype = \"bfloat16\", reduce_dtype = \"float32\" }}, got {describe(value)}")
        return
    check.unknown_keys(where, value, PRECISION_KEYS)
    for key in PRECISION_KEYS:
        name = value.get(key)
        if name is not None and (not isinstance(name, str) or name.removeprefix("torch.") not in DTYPE_ALIASES):
            check.problem(f"{where}.{key}", f"expected a floating dtype name ({', '.join(DTYPE_ALIASES)}), got "
                          f"{describe(name)}")


def _units(where: str, value: Any, problem: Problem) -> None:
    if value is not None and (not isinstance(value, list) or not value
                              or not all(isinstance(unit, str) and unit for unit in value)):
        problem(where, "expected a non-empty list of module class names, such as [\"DecoderLayer\"] (each module of "
                f"that class becomes an FSDP unit), got {describe(value)}")


def _device_memory(where: str, value: Any, check: Checker) -> int | None:
    if value is None:
        check.problem(f"{where}.device_memory", "missing; expected one device's memory, a size such as \"80GB\" "
                      "(what the catalog's \"fits on\" and the model page's chart compare the per-device peak with)")
    return check.memory(f"{where}.device_memory", value)


def _headroom(where: str, value: Any, problem: Problem) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        problem(where, f"expected a fraction from 0 up to 1 (0.1 keeps 10% of the device's memory free for what the "
                f"trace does not hold), got {describe(value)}")
        return DEFAULT_HEADROOM
    return float(value)
