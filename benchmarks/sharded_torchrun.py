"""The analysis's per-device peak against a real 2-process FSDP2 job: ``torchrun``, gloo, two CPU ranks.

Run from the repository root: ``python benchmarks/sharded_torchrun.py [--models mlp llama] [--strategies fsdp
fsdp_no_reshard] [--precisions fp32 bf16] [--collectives {gloo,inplace,both}] [--no-release-wait] [--repeats 5]``.

The parent launches ``python -m torch.distributed.run --nproc-per-node 2`` (rendezvous on 127.0.0.1, a free port)
on this file with ``--worker``. Each of the two ranks joins a real gloo process group, and for every configuration
builds the same model with the same seed (the tests' 4-block MLP and 2-layer transformers Llama with grouped-query
attention, ``tests/parallel/sharded_models.py``), applies PyTorch's real ``fully_shard`` over a 1-D CPU device
mesh of the two ranks exactly as the analysis does (`torchscan.parallel.sharding.shard`: every unit, then the root,
with the plan's ``reshard_after_forward`` and ``MixedPrecisionPolicy``), builds AdamW and runs the loop's own
iteration (`torchscan.parallel.step.loop_step`) three times. The third step is measured as the tests measure their
fake-world reference (``tests/parallel/sharded_models.measured_peak``): the bytes of the distinct storages the rank
holds at its start (its local parameter shards, buffers, inputs, optimizer-state shards) plus
`torchscan.measure_peak_memory` of the step (the CPU allocator's allocation records under the profiler). Each rank
writes its numbers to a JSON file and the collectives really move data between the two processes.

The parent then runs ``torchscan.crawl_training_step(..., optimizer=adamw, parallel=plan)`` with ``world_size`` 2
(FSDP2 on fake-tensor stand-ins over a fake process group, the analyzed rank 0) and prints, per model and plan, the
analysis's ``per_device.peak``, each rank's measured absolute peak, their ratios and PASS / FAIL at 2%.

**gloo's stock collectives** (``--collectives gloo``). What a gloo rank holds that the analysis does not (it stands
for an NCCL job: the fake backend's collectives run in place and keep nothing), found by reading the profiler's
records with the operator each allocation ran under:

- gloo's own buffers: ``_allgather_base_`` gathers into a flat tensor of its own (the full all-gather output) and
  copies it out; ``_reduce_scatter_base_`` clones its input (the full reduce-scatter input), all-reduces the clone on
  a gloo thread (with temporaries of the division by the world size) and the clone lives on until a later
  collective, past the step's end sometimes. Each is one FSDP unit's full parameters or gradients (2.1 MB in the
  fp32 MLP, 9% of its per-device peak).
- timing: gloo runs each collective on one of its worker threads, and the work it holds references FSDP2's
  all-gather output. Sometimes (which rank, step and unit changes from run to run) the profile of the step records
  no free of that buffer at all, neither on the main thread nor on gloo's: it stays in the measured level (one or
  two units' gathered parameters in the runs so far).

**In-place collectives over gloo** (``--collectives inplace``): the same job with NCCL's memory behaviour, through
FSDP2's custom-collective hooks (``FSDPModule.set_custom_all_gather`` / ``set_custom_reduce_scatter`` on every FSDP
module after sharding, `use_inplace_collectives`). FSDP2 allocates its buffers as by default (``torch.empty``); the
all-gather (`InPlaceAllGather`) broadcasts each rank's chunk of FSDP2's own output in place, and the reduce-scatter
(`InPlaceReduceScatter`) reduces each rank's chunk of FSDP2's own input in place onto that rank and copies this
rank's chunk into FSDP2's output (FSDP2 asks for ``AVG``: a ``SUM``, then an in-place division by a cached 0-dim
tensor). Each returns only once gloo has dropped its references to the buffer (`released`): gloo marks a work
complete before its worker thread drops it, and a buffer whose last reference goes on that thread is freed there
with no record in the profile (the timing item above; with ``--no-release-wait`` the in-place runs show it too: three
of the eight plans in one run). These runs isolate the communication library's own staging, which the analysis does
not model because NCCL does not stage through PyTorch's allocator: what is left to compare is FSDP2's, the model's
and the optimizer's memory, which the analysis does model. Their parameters are checked against the stock run's:
both start from the same seed, run the same steps on the same batch, and must end with ``torch.allclose``
parameter shards on each rank (so far they are bitwise equal). In the runs so far every in-place peak equals the
analysis to the byte on both ranks but one, the same in every run and with the stock collectives too: the Llama
``fsdp_no_reshard`` bf16 step peaks inside the loss's ``mean``, whose division by the element count holds an
8-byte CPU scalar (the wrapped Python number) at that moment, 8 bytes above the analysis.

The tables, for each kind of collectives asked for (``both`` by default: each configuration runs with the stock
collectives, then with the in-place ones, in the same job):

1. the third step: the analysis, each rank's measured absolute peak, the ratios and the 2% verdict;
2. the next ``--repeats`` steps, each profiled and read twice: every allocation (as `measure_peak_memory` reads
   them) and without the allocations made inside a collective (any record under a ``c10d::`` operator or a
   ``gloo:`` range, on any thread), min-max over those steps, with the most bytes allocated inside collectives in a
   step (gloo's staging for the stock runs, none for the in-place ones);
3. for the in-place runs, how many collectives returned from gloo while it still held the buffer, and the time
   waited until it let go;
4. with ``both``, the largest difference of each rank's parameter shards between the in-place and the stock run.

The exit status is 1 when a configuration of the in-place runs fails at 2% (with ``--collectives gloo`` alone, of
the stock runs: with ``both`` their staging is printed, not judged) or when the in-place run's parameters are not
``torch.allclose`` to the stock run's.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule

# FSDP2's custom-collective interfaces (``FSDPModule.set_custom_all_gather`` / ``set_custom_reduce_scatter`` take
# them) are not exported from ``torch.distributed.fsdp`` in torch 2.13: their defining module is the only path.
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "site_models"), str(ROOT / "tests" / "integrations"),
                str(ROOT / "tests" / "parallel")]

from sharded_models import MODELS, adamw, storage_bytes  # noqa: E402

from torchscan import crawl_training_step, measure_peak_memory  # noqa: E402
from torchscan.memory.measured import ALLOCATION, peak_of_allocations  # noqa: E402
from torchscan.parallel.fake_world import FakeWorld  # noqa: E402
from torchscan.parallel.plan import parse_plan  # noqa: E402
from torchscan.parallel.sharding import local_tensor, shard, trainable  # noqa: E402
from torchscan.parallel.step import loop_step  # noqa: E402
from torchscan.values import tensors_in  # noqa: E402

WORLD_SIZE = 2
TOLERANCE = 0.02
PRECISIONS: dict[str, dict[str, Any] | None] = {"fp32": None, "bf16": {"param_dtype": "bfloat16"}}
STRATEGIES = ("fsdp", "fsdp_no_reshard")
GLOO, INPLACE = "gloo", "inplace"
COLLECTIVES = {GLOO: "gloo's stock collectives", INPLACE: "in-place collectives over gloo"}


def plan_of(strategy: str, precision: str) -> dict[str, Any]:
    """The plan of one configuration, at world size 2."""
    plan: dict[str, Any] = {"strategy": strategy, "world_size": WORLD_SIZE}
    if PRECISIONS[precision] is not None:
        plan["mixed_precision"] = PRECISIONS[precision]
    return plan


def configurations(options: argparse.Namespace) -> list[tuple[str, str, str]]:
    """(model, strategy, precision) for every combination asked for."""
    return [(model, strategy, precision) for model in options.models for strategy in options.strategies
            for precision in options.precisions]


def collectives_of(options: argparse.Namespace) -> tuple[str, ...]:
    """The collectives asked for, stock gloo first (the in-place run's parameters are checked against it)."""
    return (GLOO, INPLACE) if options.collectives == "both" else (options.collectives,)


# -- in-place collectives ----------------------------------------------------------------------------------------------


class _Completed(dist.Work):
    """A finished `Work`: what the in-place all-gather returns when FSDP2 asks for ``async_op`` (it waits on it)."""

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


# how often `released` found gloo still holding a collective's buffer when the call returned, and for how long;
# ``wait`` False (``--no-release-wait``) returns at once, to show what that costs the measurement
RELEASE = {"wait": True, "collectives": 0, "held": 0, "seconds": 0.0}


def storage_references(tensor: torch.Tensor) -> int:
    """How many tensors (and storage objects) hold ``tensor``'s storage now."""
    return torch._C._storage_Use_Count(tensor.untyped_storage()._cdata)


def released(tensor: torch.Tensor, held: int, timeout: float = 10.0) -> None:
    """Return once ``tensor``'s storage is held by no more references than ``held``, its count before the
    collective. gloo's worker thread drops its work (whose tensors are views of the buffer) after marking it
    complete, so ``wait()`` can return while gloo still holds the buffer (about a third of the calls in the runs so
    far, each for a fraction of a millisecond). FSDP2 drops some buffers soon after their collective (a backward
    all-gather's output right after its copy-out): if FSDP2's reference goes first, the last one goes on gloo's
    thread, the buffer is freed there and the profile records no free of it, so the step's measured level keeps it
    to the end (all-gather outputs and reduce-scatter inputs, one unit's each, in the profiles read). What the
    analysis stands for frees a buffer when FSDP2 drops it. Not waited for with ``--no-release-wait``."""
    began = time.perf_counter()
    RELEASE["collectives"] += 1
    if storage_references(tensor) <= held:
        return
    RELEASE["held"] += 1
    while RELEASE["wait"] and storage_references(tensor) > held:
        if time.perf_counter() - began > timeout:
            raise TimeoutError(f"gloo still holds a collective's buffer after {timeout} s")
        time.sleep(0)
    RELEASE["seconds"] += time.perf_counter() - began


class InPlaceAllGather(AllGather):
    """FSDP2's all-gather with NCCL's memory behaviour over gloo: every rank's chunk is broadcast in place into
    FSDP2's own output (one ``broadcast`` per rank, each a contiguous slice), nothing allocated, nothing kept.

    gloo's ``_allgather_base_`` gathers into a flat tensor of its own and copies it out; a broadcast of a contiguous
    CPU tensor reads and writes that tensor's memory."""

    def allocate(self, size: Any, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(size, dtype=dtype, device=device)  # FSDP2's default

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup,
                 async_op: bool = False) -> dist.Work | None:
        count, held = input_tensor.numel(), storage_references(output_tensor)
        own = output_tensor.narrow(0, group.rank() * count, count)
        if own.data_ptr() != input_tensor.data_ptr():  # FSDP2 copies its shards into its own chunk already
            own.copy_(input_tensor.reshape(-1))
        del own
        for source in range(group.size()):
            dist.broadcast(output_tensor.narrow(0, source * count, count), group_src=source, group=group)
        released(output_tensor, held)
        # synchronous either way; FSDP2 takes a returned work as "asked asynchronously" (it frees the forward's
        # all-gather output at once instead of after the next unit's copy-out), so it gets one when it asked
        return _Completed() if async_op else None


class InPlaceReduceScatter(ReduceScatter):
    """FSDP2's reduce-scatter with NCCL's memory behaviour over gloo: rank ``r``'s chunk of FSDP2's input is reduced
    in place onto rank ``r`` (one ``reduce`` per rank; gloo uses the other ranks' chunks as scratch, which FSDP2
    never reads again), then this rank's chunk is copied into FSDP2's output. Nothing is allocated or kept.

    gloo's ``_reduce_scatter_base_`` clones its input and all-reduces the clone. FSDP2 asks for ``AVG`` on fp32 and
    bf16 gradients (NCCL divides in its kernel): the reduction here is a ``SUM``, divided in place by a cached
    0-dim tensor of the world size (dividing by a Python number would allocate its scalar tensor on each call)."""

    def __init__(self) -> None:
        self.divisors: dict[tuple[int, torch.dtype], torch.Tensor] = {}

    def allocate(self, size: Any, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(size, dtype=dtype, device=device)  # FSDP2's default

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup,
                 op: Any, async_op: bool = False) -> dist.Work | None:
        if op not in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            raise NotImplementedError(f"in-place reduce-scatter: {op} (FSDP2 asks for SUM or AVG without a "
                                      "gradient divide factor)")
        count, size, held = output_tensor.numel(), group.size(), storage_references(input_tensor)
        for destination in range(size):
            dist.reduce(input_tensor.narrow(0, destination * count, count), group_dst=destination,
                        op=dist.ReduceOp.SUM, group=group)
        released(input_tensor, held)
        output_tensor.copy_(input_tensor.narrow(0, group.rank() * count, count))
        if op == dist.ReduceOp.AVG:
            key = (size, output_tensor.dtype)
            if key not in self.divisors:
                self.divisors[key] = torch.tensor(size, dtype=output_tensor.dtype, device=output_tensor.device)
            output_tensor.div_(self.divisors[key])
        return _Completed() if async_op else None


def use_inplace_collectives(model: torch.nn.Module) -> None:
    """Every FSDP module of the sharded ``model`` all-gathers and reduce-scatters with the in-place collectives."""
    all_gather, reduce_scatter = InPlaceAllGather(), InPlaceReduceScatter()
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_custom_all_gather(all_gather)
            module.set_custom_reduce_scatter(reduce_scatter)


# -- each rank ---------------------------------------------------------------------------------------------------------


def worker(options: argparse.Namespace) -> None:
    """One rank of the torchrun job: every configuration with each kind of collectives asked for, the third step
    measured, then ``--repeats`` more steps profiled and read with and without the collectives' own allocations;
    the in-place run's final parameter shards are compared with the stock run's (same seed, same steps)."""
    from torch.distributed.device_mesh import init_device_mesh

    warnings.filterwarnings("ignore")
    RELEASE["wait"] = not options.no_release_wait
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    results = []
    try:
        mesh = init_device_mesh("cpu", (WORLD_SIZE,), mesh_dim_names=("shard",))
        for model_name, strategy, precision in configurations(options):
            plan = parse_plan(plan_of(strategy, precision))
            build, call = MODELS[model_name]
            reference: list[torch.Tensor] | None = None
            for collectives in collectives_of(options):
                args, kwargs, loss = call()  # seeded: every rank gets the same batch, as the analysis's rank does
                model = build()
                shard(model, FakeWorld(plan, rank, mesh))  # the real gloo mesh: shard reads only plan and mesh
                if collectives == INPLACE:
                    use_inplace_collectives(model)
                optimizer = adamw(trainable(model))
                before = dict(RELEASE)
                entry = {"model": model_name, "strategy": strategy, "precision": precision, "rank": rank,
                         "collectives": collectives, "backend": dist.get_backend(),
                         "world_size": dist.get_world_size(),
                         **measure_rank(model, (args, kwargs, loss), optimizer, options.repeats, dist.barrier),
                         "release": {key: RELEASE[key] - before[key] for key in ("collectives", "held", "seconds")}}
                shards = [local_tensor(parameter).detach().clone() for parameter in model.parameters()]
                if collectives == GLOO:
                    reference = shards
                elif reference is not None:
                    entry["parameters"] = compare_parameters(shards, reference)
                results.append(entry)
                del model, optimizer, args, kwargs
    finally:
        dist.destroy_process_group()
    Path(options.out, f"rank{rank}.json").write_text(json.dumps(results, indent=1))


def compare_parameters(shards: list[torch.Tensor], reference: list[torch.Tensor]) -> dict[str, Any]:
    """This rank's parameter shards after the in-place run against the stock run's: the largest absolute and
    relative difference, whether every element is equal and whether all are within ``torch.allclose``'s default
    tolerances (both runs started from the same seed and ran the same steps on the same batch)."""
    absolute = max(float((shard - ref).abs().max()) for shard, ref in zip(shards, reference, strict=True))
    relative = max(float(((shard - ref).abs() / ref.abs().clamp_min(1e-12)).max())
                   for shard, ref in zip(shards, reference, strict=True))
    return {"tensors": len(shards), "max_abs_difference": absolute, "max_rel_difference": relative,
            "equal": all(torch.equal(shard, ref) for shard, ref in zip(shards, reference, strict=True)),
            "allclose": all(torch.allclose(shard.float(), ref.float()) for shard, ref in zip(shards, reference,
                                                                                            strict=True))}


def measure_rank(model: torch.nn.Module, call: Any, optimizer: torch.optim.Optimizer, repeats: int,
                 barrier: Any) -> dict[str, Any]:
    """Two unmeasured steps, the third measured (the bytes at its start plus `measure_peak_memory`), then
    ``repeats`` more read by `split_collective_buffers`; ``barrier()`` lines the ranks up before each."""
    args, kwargs, loss = call

    def step() -> None:
        loop_step(model, args, kwargs, loss, optimizer)

    def at_start() -> int:
        return storage_bytes([*model.parameters(), *model.buffers(), *tensors_in((args, kwargs)),
                              *tensors_in(list(optimizer.state.values()))])

    for _ in range(2):
        step()
    barrier()
    start = at_start()
    measured = measure_peak_memory(step, device="cpu")
    later = []
    for _ in range(repeats):
        barrier()
        begin = at_start()
        split = split_collective_buffers(step)
        later.append({"all": begin + split["all"],
                      "without_collective_buffers": begin + split["without_collective_buffers"],
                      "allocated_in_collectives": split["allocated_in_collectives"]})
    barrier()
    return {"at_start": start, "peak_above_start": measured["peak_bytes"], "peak": start + measured["peak_bytes"],
            "observed": measured["observed"], "repeats": later}


def split_collective_buffers(workload: Any) -> dict[str, int]:
    """The peak above the start of ``workload()`` from the profiler's CPU allocation records, as
    `measure_peak_memory` reads them (``all``), and without the allocations made inside a collective
    (``without_collective_buffers``: under a ``c10d::`` operator or a ``gloo:`` range, on any thread), with the
    bytes those allocations add up to (``allocated_in_collectives``)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        workload()
    found: list[tuple[int, int, int, bool]] = []
    pending = list(reversed(prof.profiler.kineto_results.experimental_event_tree()))
    while pending:
        event = pending.pop()
        pending.extend(reversed(event.children))
        if event.tag == ALLOCATION and event.extra_fields.device.type == "cpu":
            inside, parent = False, event.parent
            while parent is not None and not inside:
                inside = parent.name.startswith(("c10d::", "gloo:"))
                parent = parent.parent
            found.append((event.start_time_ns, event.extra_fields.ptr, event.extra_fields.alloc_size, inside))
    found.sort(key=lambda record: record[0])
    every = [(address, size) for _, address, size, _ in found]
    # a free always passes: a free whose allocation was left out is ignored by peak_of_allocations
    kept = [(address, size) for _, address, size, inside in found if not (inside and size > 0)]
    return {"all": peak_of_allocations(every)[0], "without_collective_buffers": peak_of_allocations(kept)[0],
            "allocated_in_collectives": sum(size for _, _, size, inside in found if inside and size > 0)}


# -- the parent --------------------------------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the rendezvous binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def launch(options: argparse.Namespace, out: str) -> list[dict[str, Any]]:
    """Run the two ranks under torchrun and return both ranks' measurements."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one machine: gloo's pairs over the loopback interface
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(WORLD_SIZE),
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(Path(__file__).resolve()),
               "--worker", "--out", out, "--repeats", str(options.repeats), "--collectives", options.collectives,
               *(["--no-release-wait"] if options.no_release_wait else []), "--models", *options.models,
               "--strategies", *options.strategies, "--precisions", *options.precisions]
    print("$", " ".join(command[1:]), flush=True)
    began = time.perf_counter()
    subprocess.run(command, env=env, check=True, timeout=options.timeout)
    print(f"torchrun: {time.perf_counter() - began:.1f} s", flush=True)
    return [entry for rank in range(WORLD_SIZE)
            for entry in json.loads(Path(out, f"rank{rank}.json").read_text())]


def analyzed_peak(model_name: str, plan: dict[str, Any]) -> dict[str, Any]:
    """``crawl_training_step``'s sharded section for one configuration (rank 0 of a fake world of 2)."""
    build, call = MODELS[model_name]
    args, kwargs, loss = call()
    report = crawl_training_step(build(), args=args, kwargs=kwargs, loss=loss, optimizer=adamw, parallel=plan)
    return report["training"]["parallel"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=sorted(MODELS))
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=sorted(PRECISIONS))
    parser.add_argument("--collectives", default="both", choices=(*COLLECTIVES, "both"),
                        help="gloo's stock collectives, the in-place ones over gloo, or both (default)")
    parser.add_argument("--no-release-wait", action="store_true",
                        help="the in-place collectives return when gloo marks its work complete, without waiting for "
                             "gloo to drop its references to the buffer (shows the frees the profiler then misses)")
    parser.add_argument("--repeats", type=int, default=5, help="steps profiled after the measured third one")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds the torchrun job may take")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker:
        worker(options)
        return
    warnings.filterwarnings("ignore")
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs; {WORLD_SIZE} ranks, gloo on 127.0.0.1; the third step "
          "of each configuration measured on each rank", flush=True)
    with tempfile.TemporaryDirectory() as out:
        measured = launch(options, out)
    by_key = {(m["model"], m["strategy"], m["precision"], m["collectives"], m["rank"]): m for m in measured}
    analyses = {key: analyzed_peak(key[0], plan_of(*key[1:]))["per_device"]["peak"]["value"]
                for key in configurations(options)}
    failures = {collectives: peak_table(analyses, by_key, collectives) for collectives in collectives_of(options)}
    for collectives in collectives_of(options):
        repeats_table(analyses, by_key, collectives, options.repeats)
    if INPLACE in collectives_of(options):
        release_table(analyses, by_key, wait=not options.no_release_wait)
    # The verdict: the in-place runs where they ran (the stock runs' staging is printed, not judged), else gloo's.
    failed = failures.get(INPLACE, failures.get(GLOO, 0))
    if options.collectives == "both":
        failed += parameters_table(analyses, by_key)
    sys.exit(1 if failed else 0)


def plan_label(strategy: str, precision: str) -> str:
    """A configuration's plan as the tables print it."""
    return f"{strategy} x{WORLD_SIZE} {precision}"


def peak_table(analyses: dict[tuple[str, str, str], int], by_key: dict[tuple, dict[str, Any]],
               collectives: str) -> int:
    """The third step's measured absolute peak of each rank against the analysis, PASS / FAIL at 2%; returns the
    number of configurations that fail."""
    print(f"\nThe third step, {COLLECTIVES[collectives]} ({collectives})")
    header = (f"{'model':<6} {'plan':<24} {'analysis (rank 0)':>17} {'rank 0 measured':>16} {'rank 1 measured':>16} "
              f"{'ratio r0':>8} {'ratio r1':>8}  2%")
    print(header)
    print("-" * len(header))
    failures = 0
    for (model_name, strategy, precision), analysis in analyses.items():
        ranks = [by_key[(model_name, strategy, precision, collectives, rank)]["peak"] for rank in range(WORLD_SIZE)]
        ratios = [analysis / peak for peak in ranks]
        passed = all(abs(ratio - 1) <= TOLERANCE for ratio in ratios)
        failures += not passed
        exact = " (to the byte)" if all(peak == analysis for peak in ranks) else ""
        print(f"{model_name:<6} {plan_label(strategy, precision):<24} {analysis:>17,} {ranks[0]:>16,} "
              f"{ranks[1]:>16,} {ratios[0]:>8.4f} {ratios[1]:>8.4f}  {'PASS' if passed else 'FAIL'}{exact}",
              flush=True)
    print(f"{len(analyses) - failures} of {len(analyses)} configurations within {TOLERANCE:.0%} on both ranks")
    return failures


def repeats_table(analyses: dict[tuple[str, str, str], int], by_key: dict[tuple, dict[str, Any]], collectives: str,
                  repeats: int) -> None:
    """The later steps' range of both readings of each profile, and the most bytes allocated inside collectives."""
    print(f"\nThe next {repeats} steps on each rank, {COLLECTIVES[collectives]}, each profile read twice: every "
          "allocation (as measure_peak_memory reads them) and without those made inside a collective; min-max, and "
          "the most bytes allocated inside collectives in one step")
    header = (f"{'model':<6} {'plan':<24} {'analysis':>11} {'rank 0 all':>23} {'rank 0 w/o coll.':>23} "
              f"{'rank 1 all':>23} {'rank 1 w/o coll.':>23} {'in coll. r0':>11} {'in coll. r1':>11}")
    print(header)
    print("-" * len(header))
    for (model_name, strategy, precision), analysis in analyses.items():
        cells, inside = [], []
        for rank in range(WORLD_SIZE):
            later = by_key[(model_name, strategy, precision, collectives, rank)]["repeats"]
            for key in ("all", "without_collective_buffers"):
                values = [repeat[key] for repeat in later]
                cells.append(f"{min(values):>11,}-{max(values):>11,}")
            inside.append(f"{max(repeat['allocated_in_collectives'] for repeat in later):>11,}")
        print(f"{model_name:<6} {plan_label(strategy, precision):<24} {analysis:>11,} {' '.join(cells)} "
              f"{' '.join(inside)}", flush=True)


def release_table(analyses: dict[tuple[str, str, str], int], by_key: dict[tuple, dict[str, Any]], wait: bool) -> None:
    """How many of each rank's in-place collectives returned while gloo still held a view of the buffer (over all
    its steps), and the seconds spent waiting for gloo to drop it."""
    print(f"\nIn-place collectives whose buffer gloo still held when the call returned, of all of them, per rank"
          f"{', and the time waited until it dropped them' if wait else ' (not waited for: --no-release-wait)'}")
    header = f"{'model':<6} {'plan':<24} {'held r0':>11} {'held r1':>11} {'waited r0':>10} {'waited r1':>10}"
    print(header)
    print("-" * len(header))
    for model_name, strategy, precision in analyses:
        counts = [by_key[(model_name, strategy, precision, INPLACE, rank)]["release"] for rank in range(WORLD_SIZE)]
        held = [f"{count['held']}/{count['collectives']}" for count in counts]
        waited = [f"{1e3 * count['seconds']:.2f} ms" if wait else "-" for count in counts]
        print(f"{model_name:<6} {plan_label(strategy, precision):<24} {held[0]:>11} {held[1]:>11} {waited[0]:>10} "
              f"{waited[1]:>10}", flush=True)


def parameters_table(analyses: dict[tuple[str, str, str], int], by_key: dict[tuple, dict[str, Any]]) -> int:
    """Each rank's parameter shards after the in-place run against the stock run's; returns the number of
    configurations where a rank's are not ``torch.allclose``."""
    print("\nParameter shards after the in-place run against the stock run's (same seed, same steps): the largest "
          "absolute difference on each rank, bitwise equal, allclose (torch's default tolerances)")
    header = f"{'model':<6} {'plan':<24} {'max |diff| r0':>13} {'max |diff| r1':>13} {'equal':>6} {'allclose':>8}"
    print(header)
    print("-" * len(header))
    failures = 0
    for model_name, strategy, precision in analyses:
        checks = [by_key[(model_name, strategy, precision, INPLACE, rank)]["parameters"] for rank in range(WORLD_SIZE)]
        equal, close = all(check["equal"] for check in checks), all(check["allclose"] for check in checks)
        failures += not close
        print(f"{model_name:<6} {plan_label(strategy, precision):<24} {checks[0]['max_abs_difference']:>13.3g} "
              f"{checks[1]['max_abs_difference']:>13.3g} {'yes' if equal else 'no':>6} {'yes' if close else 'no':>8}",
              flush=True)
    return failures


if __name__ == "__main__":
    main()
