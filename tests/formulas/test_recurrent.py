"""Recurrent formulas against hand computations (docs/conventions/norm-activation-recurrent.md).

Per hidden unit and step (with bias; sigmoid 4 FLOPs, tanh 1, relu 1):
RNN 1 sum + activation + 2 bias; LSTM 4 sums + 8 bias + 3 sigmoid + 2 tanh + 3 cell + 1 output = 30;
GRU 4 combine + 6 bias + 2 sigmoid + 1 tanh + 4 update = 23.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence
from torchscan_testing import estimate as estimate_call

from torchscan.formulas.modules.recurrent import HANDLERS, METHOD

LSTM_UNIT, GRU_UNIT = 30, 23


def estimate(module: nn.Module, *args, **kwargs) -> dict:
    """The built-in estimate of one call, in the mode the test put the module in."""
    return estimate_call(module, *args, training=None, **kwargs)



def to_meta(value):
    if isinstance(value, torch.Tensor):
        return torch.empty(value.shape, dtype=value.dtype, device="meta")
    if isinstance(value, tuple):
        return tuple(to_meta(item) for item in value)
    return value


def assert_same_on_meta(module: nn.Module, *args) -> dict:
    result = estimate(module, *args)
    assert estimate(copy.deepcopy(module).to("meta"), *to_meta(args)) == result
    for value in result.values():
        if isinstance(value, dict):
            assert value["status"] == "not_applicable" and value["method"] == METHOD
        else:
            assert type(value) is int and value >= 0
    return result


def is_not_applicable(value) -> bool:
    return isinstance(value, dict) and value["status"] == "not_applicable"


def test_lstm_unbatched_five_steps() -> None:
    module = nn.LSTM(4, 3)
    result = assert_same_on_meta(module, torch.randn(5, 4))  # (T, input): unbatched
    assert result["macs"] == 5 * 4 * (4 * 3 + 3 * 3)
    assert result["module_flops"] == 2 * 5 * 4 * (4 * 3 + 3 * 3) + 5 * 3 * LSTM_UNIT
    # input + weights (W_ih 12x4, W_hh 12x3, two biases of 12) + output (5, 3) + h_n (1, 3) + c_n (1, 3)
    assert result["dmas"] == 5 * 4 + (48 + 36 + 24) + 15 + 3 + 3
    assert result["receptive_field"] == 5
    assert result["effective_stride"] == 1
    assert is_not_applicable(result["effective_padding"])


def test_rnn_relu_two_layers_bidirectional_batch_first() -> None:
    module = nn.RNN(4, 3, num_layers=2, nonlinearity="relu", bidirectional=True, batch_first=True)
    result = assert_same_on_meta(module, torch.randn(2, 5, 4))  # 10 (step, sample) rows
    layer0, layer1 = 3 * (4 + 3), 3 * (2 * 3 + 3)  # the second layer reads both directions
    assert result["macs"] == 10 * 2 * (layer0 + layer1)
    # per unit: sum of the two products 1 + relu 1 + two biases 2; 2 layers x 2 directions x 3 units
    assert result["module_flops"] == 2 * 10 * 2 * (layer0 + layer1) + 10 * 2 * 2 * 3 * (1 + 1 + 2)
    weights = 2 * (12 + 9 + 6) + 2 * (18 + 9 + 6)
    assert result["dmas"] == 40 + weights + 2 * 5 * 6 + 4 * 2 * 3
    assert result["receptive_field"] == 5  # every step of a bidirectional layer sees the whole sequence


def test_rnn_tanh_without_bias() -> None:
    result = assert_same_on_meta(nn.RNN(4, 3, bias=False), torch.randn(5, 1, 4))
    assert result["macs"] == 5 * 3 * (4 + 3)
    assert result["module_flops"] == 2 * 105 + 5 * 3 * (1 + 1)  # sum + tanh
    assert result["dmas"] == 20 + (12 + 9) + 15 + 3


def test_gru_with_initial_state() -> None:
    module = nn.GRU(4, 3)
    x, h0 = torch.randn(5, 2, 4), torch.randn(1, 2, 3)
    result = assert_same_on_meta(module, x, h0)
    assert result["macs"] == 10 * 3 * 3 * (4 + 3)
    assert result["module_flops"] == 2 * 630 + 10 * 3 * GRU_UNIT
    assert result["dmas"] == 40 + 6 + (36 + 27 + 18) + 30 + 6


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported")
def test_lstm_projection_with_given_states() -> None:
    module = nn.LSTM(4, 3, num_layers=2, proj_size=2)
    x, h0, c0 = torch.randn(5, 1, 4), torch.randn(2, 1, 2), torch.randn(2, 1, 3)
    result = assert_same_on_meta(module, x, (h0, c0))
    layer0 = 4 * 3 * (4 + 2) + 3 * 2  # gates over input and projected state, then the 3 -> 2 projection
    layer1 = 4 * 3 * (2 + 2) + 3 * 2
    assert result["macs"] == 5 * (layer0 + layer1)
    assert result["module_flops"] == 2 * 5 * (layer0 + layer1) + 5 * 2 * 3 * LSTM_UNIT
    weights = (48 + 24 + 24 + 6) + (24 + 24 + 24 + 6)
    assert result["dmas"] == 20 + 4 + 6 + weights + 5 * 2 + 4 + 6


def test_packed_sequence_counts_only_real_steps() -> None:
    module = nn.GRU(4, 3)
    packed = pack_padded_sequence(torch.randn(5, 2, 4), torch.tensor([5, 3]))  # 8 real (step, sample) rows
    result = estimate(module, packed)
    assert result["macs"] == 8 * 3 * 3 * (4 + 3)
    assert result["module_flops"] == 2 * 504 + 8 * 3 * GRU_UNIT
    assert result["dmas"] == 8 * 4 + 81 + 8 * 3 + 2 * 3
    assert result["receptive_field"] == 5
    meta_packed = pack_padded_sequence(torch.empty(5, 2, 4, device="meta"), torch.tensor([5, 3]))
    assert estimate(copy.deepcopy(module).to("meta"), meta_packed) == result


def test_kwargs_only_call() -> None:
    result = estimate(nn.GRU(4, 3), input=torch.randn(5, 1, 4), hx=torch.randn(1, 1, 3))
    assert result["dmas"] == 20 + 3 + 81 + 15 + 3


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported")
@pytest.mark.parametrize("module", [nn.RNN(3, 5, num_layers=3), nn.GRU(3, 5, bidirectional=True, num_layers=2),
                                    nn.LSTM(3, 5, proj_size=2, bidirectional=True, num_layers=2)])
def test_macs_equal_rows_times_the_weight_matrices(module: nn.Module) -> None:
    result = estimate(module, torch.randn(4, 2, 3))
    matrices = sum(weight.numel() for weight in module.parameters() if weight.dim() == 2)
    assert result["macs"] == 4 * 2 * matrices


def test_training_dropout_between_layers_is_a_lower_bound() -> None:
    module = nn.LSTM(4, 3, num_layers=2, dropout=0.5).train()
    result = estimate(module, torch.randn(5, 1, 4))
    assert result["module_flops"]["status"] == "partial"
    assert result["module_flops"]["known_value"] == estimate(module.eval(), torch.randn(5, 1, 4))["module_flops"]


def test_lstm_cell_without_state() -> None:
    result = assert_same_on_meta(nn.LSTMCell(4, 3), torch.randn(2, 4))
    assert result["macs"] == 2 * 4 * 3 * (4 + 3)
    assert result["module_flops"] == 2 * 168 + 2 * 3 * LSTM_UNIT
    assert result["dmas"] == 8 + 108 + 6 + 6
    assert all(is_not_applicable(result[field])
               for field in ("receptive_field", "effective_stride", "effective_padding"))


def test_lstm_cell_with_state_reads_it() -> None:
    x, h, c = torch.randn(2, 4), torch.randn(2, 3), torch.randn(2, 3)
    assert estimate(nn.LSTMCell(4, 3), x, (h, c))["dmas"] == 8 + 6 + 6 + 108 + 6 + 6


def test_gru_cell_unbatched_with_state() -> None:
    result = assert_same_on_meta(nn.GRUCell(4, 3), torch.randn(4), torch.randn(3))
    assert result["macs"] == 3 * 3 * (4 + 3)
    assert result["module_flops"] == 2 * 63 + 3 * GRU_UNIT
    assert result["dmas"] == 4 + 3 + 81 + 3


def test_rnn_cell_relu() -> None:
    result = assert_same_on_meta(nn.RNNCell(4, 3, nonlinearity="relu"), torch.randn(2, 4))
    assert result["macs"] == 2 * 3 * (4 + 3)
    assert result["module_flops"] == 2 * 42 + 2 * 3 * (1 + 1 + 2)
    assert result["dmas"] == 8 + 27 + 6


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"])
def test_every_recurrent_module_is_registered_with_its_label(name: str) -> None:
    assert HANDLERS[getattr(nn, name)].label == "formula:recurrent"
