"""Module estimates for table lookups: ``Embedding`` and ``EmbeddingBag``.

A lookup does no arithmetic; its cost is memory: the indices read, one table row of D elements read per index,
and the output written. ``EmbeddingBag`` also reduces each bag. Bag boundaries are index values (``offsets``),
which formulas never read, so the reduction is counted the way PyTorch's kernel folds rows into a
zero-initialized output: one operation per looked-up element, which needs only shapes.
"""

from __future__ import annotations

from typing import Any, cast

from torch import nn

from ...handlers import ModuleCall, ModuleHandler
from ...results import POINTWISE_SPATIAL, Incomplete
from ..estimates import NO_SPATIAL_MEANING

METHOD = "formula:embedding"


def _at_least(estimate: Any) -> Any:
    """A complete count turned into a lower bound; an estimate that is already incomplete stays as it is."""
    return estimate if estimate is None or isinstance(estimate, Incomplete) else Incomplete(estimate)


def _renormalized(estimates: dict[str, Any]) -> dict[str, Any]:
    """``max_norm`` first rescales the referenced table rows in place; how many depends on index values.

    That extra work is not modelled, so FLOPs and DMAs become lower bounds of what is already counted.
    """
    return {**estimates, "module_flops": _at_least(estimates["module_flops"]), "dmas": _at_least(estimates["dmas"])}


def estimate_embedding(call: ModuleCall) -> dict[str, Any]:
    """indices read + one row of D elements read per index + the output written; one token in, one token out.

    ``padding_idx`` only matters for gradients: its row is read like any other in the forward pass.
    """
    module, indices = cast(nn.Embedding, call.module), call.argument(0, "input")  # the class HANDLERS names
    rows_read = indices.numel() * module.embedding_dim
    estimates = {"module_flops": 0, "macs": 0, "dmas": indices.numel() + rows_read + call.output.numel(),
                 **POINTWISE_SPATIAL}
    return _renormalized(estimates) if module.max_norm is not None else estimates


def _bag_work(mode: str, elements: int, outputs: int, weighted: bool) -> tuple[int, int]:
    """(FLOPs, MACs): per looked-up element 1 add (sum, mean) or 1 comparison (max); weighted, 1 MAC instead.

    ``mean`` adds 1 division per output element (PyTorch divides empty bags too, by 1).
    """
    if weighted:
        return 2 * elements, elements
    return elements + (outputs if mode == "mean" else 0), 0


def _bag_spatial(indices: Any) -> dict[str, Any]:
    """A 2-D input holds one bag of L tokens per row: the whole row is one window, like global pooling.

    A 1-D input with offsets is a ragged batch of bags: it has no token axis to measure along.
    """
    if indices.dim() == 2:
        tokens = indices.shape[1]
        return {"receptive_field": tokens, "effective_stride": tokens, "effective_padding": 0}
    return dict(NO_SPATIAL_MEANING)


def _skipping_padding_idx(estimates: dict[str, Any], mode: str, outputs: int, known_dmas: int) -> dict[str, Any]:
    """Indices equal to ``padding_idx`` are skipped, a value-dependent number: per-element work is a lower bound.

    What remains known: the divisions of ``mean`` (every bag) and every access except the table rows.
    """
    flops = estimates["module_flops"]
    divisions = outputs if mode == "mean" else 0
    return {**estimates,
            "module_flops": None if flops is None else Incomplete(divisions),
            "macs": Incomplete(0) if estimates["macs"] else 0,
            "dmas": Incomplete(known_dmas)}


def estimate_embedding_bag(call: ModuleCall) -> dict[str, Any]:
    """Lookups reduced per bag: indices, offsets and per-sample weights read, rows read, bag outputs written."""
    module, output = cast(nn.EmbeddingBag, call.module), call.output  # the class HANDLERS names
    indices = call.argument(0, "input")
    offsets, weights = call.argument(1, "offsets", None), call.argument(2, "per_sample_weights", None)
    elements = indices.numel() * module.embedding_dim
    flops, macs = _bag_work(module.mode, elements, output.numel(), weights is not None)
    known_dmas = indices.numel() + sum(extra.numel() for extra in (offsets, weights) if extra is not None)
    known_dmas += output.numel()
    estimates = {"module_flops": flops if output.dtype.is_floating_point else None, "macs": macs,
                 "dmas": known_dmas + elements, **_bag_spatial(indices)}
    if module.padding_idx is not None:
        estimates = _skipping_padding_idx(estimates, module.mode, output.numel(), known_dmas)
    return _renormalized(estimates) if module.max_norm is not None else estimates


HANDLERS: dict[type[nn.Module], ModuleHandler] = {
    nn.Embedding: ModuleHandler(estimate_embedding, method=METHOD, memoize=True),
    nn.EmbeddingBag: ModuleHandler(estimate_embedding_bag, method=METHOD, memoize=True),
}


#: The aten operators that each formula describes (see `torchscan.inheritance`).
OPERATORS: dict[type[nn.Module], tuple[str, ...]] = {
    nn.Embedding: ("aten.embedding", "aten.embedding_renorm_"),
    nn.EmbeddingBag: ("aten._embedding_bag", "aten._embedding_bag_forward_only"),
}
