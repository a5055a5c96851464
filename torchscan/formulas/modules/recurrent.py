"""Module estimates for recurrent layers (RNN, LSTM, GRU) and their single-step cells.

Every time step of every layer and direction multiplies the step input and the previous hidden state by the
stacked gate weights: those matrix-vector products are the MACs (plus LSTM's hidden projection). FLOPs are
2 * MACs plus, per hidden unit and step, the sum of the two gate products, the two bias additions per gate, the
gate nonlinearities (priced by the activation table) and the elementwise state update. An omitted initial state
is zeros that PyTorch still multiplies, so every step is charged in full.

DMAs are counted at the call boundary: inputs (sequence and given states), every weight read once per call, and
outputs (sequence and final states). Per-step hidden states and the sequences passed between stacked layers stay
inside the call and are not counted.
"""

from __future__ import annotations

from math import prod
from typing import Any, cast

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from ...handlers import ModuleCall, ModuleEstimates, ModuleHandler
from ...results import NOT_APPLICABLE, Incomplete
from ...values import tensor_elements
from ..conventions import GRU_CELL, LSTM_CELL, CellKind, rnn_cell_kind, step_flops, step_macs
from ..estimates import NO_SPATIAL_MEANING

METHOD = "formula:recurrent"


def cell_kind(module: nn.RNNBase | nn.RNNCellBase) -> CellKind:
    """The gate structure of a recurrent module or cell."""
    if isinstance(module, (nn.LSTM, nn.LSTMCell)):
        return LSTM_CELL
    if isinstance(module, (nn.GRU, nn.GRUCell)):
        return GRU_CELL
    return rnn_cell_kind(cast(nn.RNN | nn.RNNCell, module).nonlinearity)  # the one other kind HANDLERS registers


def _call_inputs(call: ModuleCall) -> tuple[Any, Any]:
    return call.argument(0, "input"), call.argument(1, "hx", None)


def _parameter_elements(module: nn.Module) -> int:
    return sum(parameter.numel() for parameter in module.parameters())


def estimate_sequence(call: ModuleCall) -> ModuleEstimates:
    """nn.RNN / nn.LSTM / nn.GRU over a padded, batch-first, unbatched or packed sequence.

    ``rows`` is the number of (step, sample) pairs processed: steps x batch, or the rows of a packed sequence's
    data (exactly the sum of its per-step batch sizes). Each layer and direction processes every row once.
    """
    module = cast(nn.RNNBase, call.module)  # HANDLERS registers this formula for RNN, LSTM and GRU only
    source, state = _call_inputs(call)
    if isinstance(source, PackedSequence):
        data, steps = source.data, source.batch_sizes.shape[0]
    else:
        data, steps = source, source.shape[1] if module.batch_first and source.dim() == 3 else source.shape[0]
    rows = prod(data.shape[:-1])
    kind = cell_kind(module)
    directions = 2 if module.bidirectional else 1
    hidden, proj = module.hidden_size, module.proj_size
    output_size = proj or hidden
    layer_inputs = [module.input_size] + [directions * output_size] * (module.num_layers - 1)
    layer_macs = [step_macs(kind, size, hidden, output_size, proj) for size in layer_inputs]
    macs = rows * directions * sum(layer_macs)
    flops = rows * directions * sum(step_flops(kind, hidden, m, module.bias) for m in layer_macs)
    estimates: ModuleEstimates = {
        "module_flops": flops,
        "macs": macs,
        "dmas": tensor_elements(source) + tensor_elements(state) + _parameter_elements(module)
        + tensor_elements(call.output),
        "receptive_field": steps,
        "effective_stride": 1,
        "effective_padding": NOT_APPLICABLE,
    }
    if module.training and module.dropout > 0 and module.num_layers > 1:
        # Dropout between layers draws and applies a random mask that these formulas do not price.
        estimates["module_flops"] = Incomplete(flops)
    return _real_floating_only(estimates, data)


def estimate_cell(call: ModuleCall) -> ModuleEstimates:
    """nn.RNNCell / nn.LSTMCell / nn.GRUCell: one step; no time dimension, so no receptive field."""
    module = cast(nn.RNNCellBase, call.module)  # HANDLERS registers this formula for the three cells only
    source, state = _call_inputs(call)
    rows = prod(source.shape[:-1])
    kind = cell_kind(module)
    hidden = module.hidden_size
    row_macs = step_macs(kind, module.input_size, hidden, hidden)
    estimates: ModuleEstimates = {
        "module_flops": rows * step_flops(kind, hidden, row_macs, module.bias),
        "macs": rows * row_macs,
        "dmas": tensor_elements(source) + tensor_elements(state) + _parameter_elements(module)
        + tensor_elements(call.output),
        **NO_SPATIAL_MEANING,
    }
    return _real_floating_only(estimates, source)


def _real_floating_only(estimates: ModuleEstimates, data: torch.Tensor) -> ModuleEstimates:
    """FLOP and MAC formulas are stated for real floating-point data; other dtypes get no guessed count."""
    if not data.is_floating_point():
        estimates["module_flops"] = None
        estimates["macs"] = None
    return estimates


HANDLERS: dict[type[nn.Module], ModuleHandler] = {
    **{klass: ModuleHandler(estimate_sequence, method=METHOD, memoize=True) for klass in (nn.RNN, nn.LSTM, nn.GRU)},
    **{klass: ModuleHandler(estimate_cell, method=METHOD, memoize=True)
       for klass in (nn.RNNCell, nn.LSTMCell, nn.GRUCell)},
}


#: The aten operators that each formula describes (see `torchscan.inheritance`): the fused layer kernels, and
#: the gate arithmetic and state stacking they decompose into on CPU and meta.
_RECURRENT = ("aten.lstm", "aten.gru", "aten.rnn_tanh", "aten.rnn_relu", "aten.mkldnn_rnn_layer", "aten.lstm_cell",
              "aten.gru_cell", "aten.rnn_tanh_cell", "aten.rnn_relu_cell", "aten._thnn_fused_lstm_cell",
              "aten._thnn_fused_gru_cell", "aten.addmm", "aten.add", "aten.add_", "aten.sub", "aten.mul",
              "aten.mul_", "aten.sigmoid", "aten.sigmoid_", "aten.tanh", "aten.tanh_", "aten.relu", "aten.relu_",
              "aten.stack", "aten.unbind", "aten.select", "aten.unsafe_split", "aten.unsafe_chunk", "aten.cat",
              "aten.chunk", "aten.split", "aten.slice")
OPERATORS: dict[type[nn.Module], tuple[str, ...]] = {klass: _RECURRENT for klass in HANDLERS}
