"""Operator costs of recurrent kernels: oneDNN RNN layers and the fused LSTM/GRU cell kernels.

A layer kernel is priced with the module view's per-step recurrent formula (:mod:`..conventions`) over every
(step, sample) row; a fused cell kernel is the pointwise half of a cell whose gate matmuls ran separately. Real
floating point only. Every packet here is a ``significant`` kernel.
"""

from __future__ import annotations

from typing import Any

from ..conventions import GRU_CELL, LSTM_CELL, CellKind, rnn_cell_kind, step_flops
from .calls import CostFunction, CostTable, OpCost, affine_ops, argument, operand_kind

#: Recurrent-kernel packets -> cost of one call.
COSTS = CostTable()


#: cuDNN-style mode numbers used by ``mkldnn_rnn_layer``.
RNN_MODES: dict[int, CellKind] = {0: rnn_cell_kind("relu"), 1: rnn_cell_kind("tanh"), 2: LSTM_CELL, 3: GRU_CELL}


def _mkldnn_rnn_layer(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    """One layer and direction over every (step, sample) row: the module view's per-step recurrent formula."""
    source, weight_ih, weight_hh = args[0], args[1], args[2]
    mode, hidden_size, has_biases = args[9], args[10], args[12]
    if operand_kind(args[:3], {}, None) != "real" or mode not in RNN_MODES:
        return None
    rows = source.numel() // source.shape[-1] if source.shape[-1] else 0
    row_macs = weight_ih.numel() + weight_hh.numel()
    return OpCost(rows * step_flops(RNN_MODES[mode], hidden_size, row_macs, has_biases), rows * row_macs)


def _fused_cell(cell: CellKind) -> CostFunction:
    """The pointwise half of a cell whose gate matmuls ran separately: gate sums, biases, nonlinearities."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        state = args[2]
        if operand_kind(args[:3], {}, None) != "real":
            return None
        biases = affine_ops(argument(args, kwargs, 3, "input_bias"), argument(args, kwargs, 4, "hidden_bias"))
        return OpCost(state.numel() * (cell.pointwise_flops + cell.gates * biases))
    return cost


COSTS.register(["mkldnn_rnn_layer"], _mkldnn_rnn_layer)
COSTS.register(["_thnn_fused_lstm_cell"], _fused_cell(LSTM_CELL))
COSTS.register(["_thnn_fused_gru_cell"], _fused_cell(GRU_CELL))
