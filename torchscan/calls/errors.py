"""Notes on an error that the model's forward raised during an analysis, so that it points at the fix.

The exception propagates with its type and message unchanged; ``add_note`` adds (Python prints them under the
message):

- the layer call that raised: the innermost recorded call whose forward failed, as the tracer saw it close
  (``raised in layer call features.3 #0 (Conv2d)``, the root as ``(root)``);
- for generated inputs, when a shape looks like it already includes the batch dimension (a leading 1, or a rank
  error that names the size the model received), that ``input_shape`` excludes it and what to pass instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..results import ROOT_LABEL

if TYPE_CHECKING:
    from ..records import CallParts

#: How the note naming the failing layer call begins.
LAYER_NOTE = "TorchScan: raised in layer call"
#: Words of an error about shapes: the batch hint is given only for such errors.
SHAPE_WORDS = re.compile(r"size|shape|dimension|\bdims?\b|\brank\b|\d+-?D\b|channels|mat1", re.IGNORECASE)
#: A rank in an error message: conv's "Expected 3D (unbatched) or 4D (batched) input", batch norm's "expected 4D input".
RANK = re.compile(r"\b(\d+)-?D\b")


@contextmanager
def forward_error_notes(tracer: Any, source: str, args: tuple) -> Iterator[None]:
    """Notes on an exception raised inside the block (the traced forward): the failing layer call that
    ``tracer.failed`` names and, for generated inputs (``source``), the batch-dimension hint."""
    try:
        yield
    except Exception as error:
        shapes = [tuple(arg.shape)[1:] for arg in args] if source == "generated" else []
        notes = [layer_note(tracer.failed) if tracer.failed is not None else None, batch_note(str(error), shapes)]
        for note in filter(None, notes):
            if note not in getattr(error, "__notes__", ()):
                error.add_note(note)
        raise


def layer_note(parts: CallParts) -> str:
    """``TorchScan: raised in layer call features.3 #0 (Conv2d)``."""
    type_name = parts.type.rpartition(".")[2]
    return f"{LAYER_NOTE} {parts.path or ROOT_LABEL} #{parts.call_index} ({type_name})"


def batch_note(message: str, shapes: list[tuple[int, ...]]) -> str | None:
    """The hint for generated inputs (``shapes`` without the batch dimension TorchScan added) that look like they
    include the batch already, given for an error about shapes; None when nothing suggests it."""
    if not looks_batched(message, shapes):
        return None
    one = len(shapes) == 1
    stripped = [shape[1:] if shape else shape for shape in shapes]
    given, fixed = (shapes[0], stripped[0]) if one else (shapes, stripped)  # written as Python writes them
    sizes = ", ".join(str((1, *shape)) for shape in shapes)
    tensors = ", ".join(f"torch.randn({', '.join(map(str, shape))})" for shape in shapes)
    return (f"TorchScan: input_shape is the shape of one sample, without the batch dimension: TorchScan adds a batch "
            f"of 1, so the model received input of size {sizes}. If {given} already includes the batch, pass "
            f"input_shape={fixed} (the shape without its first dimension), or pass the complete call as "
            f"args=({tensors}{',' if one else ''}).")


def looks_batched(message: str, shapes: list[tuple[int, ...]]) -> bool:
    """Whether an error about shapes suggests that a shape includes the batch: a shape with a leading 1, or an error
    that names, as a rank it accepts, the rank the input would have without the added batch."""
    if not any(shapes) or not SHAPE_WORDS.search(message):
        return False
    ranks = {int(rank) for rank in RANK.findall(message)}
    return any(len(shape) >= 2 and (shape[0] == 1 or len(shape) in ranks) for shape in shapes)
