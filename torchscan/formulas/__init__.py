"""Built-in formulas, by job: module handlers, operator costs, and the native Transformer family.

* :mod:`.modules`: one file per family of ``torch.nn`` layers, each exposing ``HANDLERS``;
* :mod:`.transformer`: native attention, Transformer layers, stacks and ``nn.Transformer``, whose handlers own
  their subtree and price a layer's norms and activation through the built-in lookup they are given;
* :mod:`.operators`: the cost of one dispatched ATen call (operator FLOPs, and the module view's estimates of
  work a module performs directly);
* :mod:`.conventions`: the per-element and per-step counts that all three share.

Built-in handlers are the same type that callers register through ``custom_modules``. This package imports
nothing above it: `torchscan.builtin_handlers` merges its families with the third-party tables of
`torchscan.integrations` into ``DEFAULT_HANDLERS`` and ``builtin_for``.
"""

from __future__ import annotations

from . import transformer
from .modules import activation, conv, embedding, linear, norm, pooling, recurrent, shape

__all__ = ["MODULE_FAMILIES", "transformer"]

#: The families of module handlers, each contributing ``HANDLERS``.
MODULE_FAMILIES = (linear, conv, norm, activation, pooling, shape, embedding, recurrent)
