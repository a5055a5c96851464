"""Pooling, unpooling, resampling and padding handlers against hand computations."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchscan_testing import estimate

from torchscan.formulas.modules.pooling import HANDLERS, METHOD
from torchscan.handlers import closest_handler, validate_estimates


def spatial(estimates: dict) -> tuple:
    return estimates["receptive_field"], estimates["effective_stride"], estimates["effective_padding"]


# --- max and average pooling ---------------------------------------------------------------------------------------

def test_max_pool2d_counts_comparisons_over_the_elements_each_window_reads():
    estimates = estimate(nn.MaxPool2d(3, stride=2, padding=1), torch.ones(1, 2, 7, 7))
    # along each dimension the 4 windows start at -1, 1, 3, 5 and read 2, 3, 3, 2 elements
    reads = 2 * (2 + 3 + 3 + 2) * (2 + 3 + 3 + 2)
    windows = 2 * 4 * 4
    assert estimates == {
        "module_flops": reads - windows,  # m - 1 comparisons per window of m elements
        "macs": 0,
        "dmas": 2 * 7 * 7 + windows,
        "receptive_field": [3, 3],
        "effective_stride": [2, 2],
        "effective_padding": [1, 1],
    }


def test_max_pool_indices_are_written_too():
    estimates = estimate(nn.MaxPool2d(2, return_indices=True), torch.ones(1, 3, 4, 4))
    assert estimates["module_flops"] == 3 * 2 * 2 * (4 - 1)
    assert estimates["dmas"] == 3 * 16 + 3 * 4 + 3 * 4  # input + values + indices


def test_max_pool1d_with_dilation_skips_padded_taps():
    estimates = estimate(nn.MaxPool1d(3, stride=1, padding=1, dilation=2), torch.ones(2, 1, 6))
    # 4 windows starting at -1..2 with taps start, start + 2, start + 4 inside [0, 6): 2, 3, 3, 2 elements
    assert estimates["module_flops"] == 2 * ((2 + 3 + 3 + 2) - 4)
    assert spatial(estimates) == ([2 * (3 - 1) + 1], [1], [1])


def test_max_pool_ceil_mode_counts_the_clipped_last_window():
    estimates = estimate(nn.MaxPool1d(2, stride=2, ceil_mode=True), torch.ones(1, 1, 5))
    assert estimates["module_flops"] == (2 - 1) + (2 - 1) + (1 - 1)  # windows [0, 1], [2, 3], [4]
    assert estimates["dmas"] == 5 + 3


def test_max_pool3d_unbatched():
    estimates = estimate(nn.MaxPool3d((1, 2, 2)), torch.ones(3, 2, 4, 4))
    assert estimates["module_flops"] == 3 * 2 * 2 * 2 * (4 - 1)
    assert spatial(estimates) == ([1, 2, 2], [1, 2, 2], [0, 0, 0])


@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool2d_is_one_flop_per_element_read(count_include_pad):
    pool = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=count_include_pad)
    estimates = estimate(pool, torch.ones(1, 2, 7, 7))
    reads = 2 * (2 + 3 + 3 + 2) * (2 + 3 + 3 + 2)
    assert estimates == {
        "module_flops": reads,  # (m - 1) additions + 1 division = m per window
        "macs": 0,
        "dmas": 2 * 49 + 2 * 16,
        "receptive_field": [3, 3],
        "effective_stride": [2, 2],
        "effective_padding": [1, 1],
    }


def test_avg_pool1d_ceil_mode_and_divisor_override():
    estimates = estimate(nn.AvgPool1d(3, stride=2, ceil_mode=True), torch.ones(1, 1, 6))
    assert estimates["module_flops"] == 3 + 3 + 2  # windows [0, 2], [2, 4], [4, 5]
    override = estimate(nn.AvgPool2d(2, divisor_override=3), torch.ones(1, 1, 4, 4))
    assert override["module_flops"] == 4 * 4  # still (4 - 1) additions + 1 division per window


def test_avg_pool3d():
    estimates = estimate(nn.AvgPool3d(2), torch.ones(1, 1, 4, 4, 4))
    assert estimates["module_flops"] == 8 * 8
    assert spatial(estimates) == ([2, 2, 2], [2, 2, 2], [0, 0, 0])


def test_integer_max_pool_has_no_floating_point_count():
    estimates = estimate(nn.MaxPool2d(2), torch.ones(1, 1, 4, 4, dtype=torch.int64))
    assert estimates["module_flops"]["status"] == "unavailable"
    assert estimates["dmas"] == 16 + 4


def _brute_force_reads(length: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool) -> int:
    out = F.max_pool1d(torch.zeros(1, 1, length), kernel, stride, padding, dilation, ceil_mode).shape[-1]
    return sum(0 <= o * stride - padding + j * dilation < length for o in range(out) for j in range(kernel))


def test_window_reads_match_an_explicit_enumeration():
    for length, kernel, stride, padding, dilation, ceil_mode in itertools.product(
            (5, 8), (2, 3), (1, 2, 3), (0, 1), (1, 2), (False, True)):
        if padding > kernel // 2:
            continue
        pool = nn.MaxPool1d(kernel, stride, padding, dilation, ceil_mode=ceil_mode)
        estimates = estimate(pool, torch.ones(1, 1, length))
        windows = F.max_pool1d(torch.zeros(1, 1, length), kernel, stride, padding, dilation, ceil_mode).shape[-1]
        reads = _brute_force_reads(length, kernel, stride, padding, dilation, ceil_mode)
        assert estimates["module_flops"] == reads - windows


def test_avg_window_reads_match_pytorch_sums_of_ones():
    for length, kernel, stride, padding, ceil_mode in itertools.product((5, 8), (2, 3), (1, 2, 3), (0, 1),
                                                                      (False, True)):
        if padding > kernel // 2:
            continue
        pool = nn.AvgPool1d(kernel, stride, padding, ceil_mode=ceil_mode, count_include_pad=False)
        ones = torch.ones(1, 1, length)
        # with divisor 1 a window of ones sums to the number of input elements it reads (padding adds zeros)
        reads = int(F.avg_pool2d(ones.unsqueeze(-1), (kernel, 1), (stride, 1), (padding, 0), ceil_mode,
                                 divisor_override=1).sum())
        assert estimate(pool, ones)["module_flops"] == reads


def test_lp_pool1d():
    estimates = estimate(nn.LPPool1d(2, 3, stride=2), torch.ones(1, 2, 7))
    windows_per_channel = (7 - 3) // 2 + 1  # 3
    assert estimates == {
        "module_flops": 2 * 7 + 2 * (windows_per_channel * 3),  # a power per input element, then m per window
        "macs": 0,
        "dmas": 2 * 7 + 2 * windows_per_channel,
        "receptive_field": [3],
        "effective_stride": [2],
        "effective_padding": [0],
    }


def test_lp_pool2d_default_stride_is_the_kernel():
    estimates = estimate(nn.LPPool2d(1.5, (2, 3)), torch.ones(1, 1, 4, 6))
    assert estimates["module_flops"] == 24 + 2 * 2 * 6
    assert spatial(estimates) == ([2, 3], [2, 3], [0, 0])


# --- adaptive pooling ----------------------------------------------------------------------------------------------

def test_adaptive_pools_with_non_divisible_sizes():
    inputs = torch.ones(1, 2, 5)
    # windows [floor(i*5/3), ceil((i+1)*5/3)): [0, 2), [1, 4), [3, 5) of sizes 2, 3, 2
    average = estimate(nn.AdaptiveAvgPool1d(3), inputs)
    maximum = estimate(nn.AdaptiveMaxPool1d(3), inputs)
    assert average["module_flops"] == 2 * (2 + 3 + 2)
    assert maximum["module_flops"] == 2 * ((2 - 1) + (3 - 1) + (2 - 1))
    for estimates in (average, maximum):
        assert estimates["macs"] == 0
        assert estimates["dmas"] == 2 * 5 + 2 * 3
        assert spatial(estimates) == ([3], [5 / 3], [0])  # largest window, mean step


def test_adaptive_pool_divisible_sizes_are_ordinary_windows():
    estimates = estimate(nn.AdaptiveAvgPool2d(4), torch.ones(1, 1, 8, 12))
    assert estimates["module_flops"] == 8 * 12
    assert spatial(estimates) == ([2, 3], [2, 3], [0, 0])
    assert all(type(value) is int for value in estimates["effective_stride"])


def test_adaptive_pool2d_with_a_kept_dimension_and_indices():
    estimates = estimate(nn.AdaptiveMaxPool2d((2, None), return_indices=True), torch.ones(1, 1, 5, 7))
    # height: [0, 3), [2, 5); width kept: 7 windows of 1
    assert estimates["module_flops"] == (3 + 3) * 7 - 2 * 7
    assert estimates["dmas"] == 35 + 14 + 14
    assert spatial(estimates) == ([3, 1], [2.5, 1], [0, 0])


def test_adaptive_pool_that_upsamples():
    estimates = estimate(nn.AdaptiveAvgPool1d(3), torch.ones(1, 1, 2))
    # [0, 1), [0, 2), [1, 2)
    assert estimates["module_flops"] == 1 + 2 + 1
    assert spatial(estimates) == ([2], [2 / 3], [0])


def test_adaptive_pool3d():
    estimates = estimate(nn.AdaptiveAvgPool3d((1, 2, 3)), torch.ones(2, 3, 4, 5))
    # depth: one window of 3; height [0, 2), [2, 4); width [0, 2), [1, 4), [3, 5)
    assert estimates["module_flops"] == 2 * 3 * (2 + 2) * (2 + 3 + 2)
    assert spatial(estimates) == ([3, 2, 3], [3, 2, 5 / 3], [0, 0, 0])


def test_adaptive_window_sizes_match_pytorch_indices():
    for length, outputs in itertools.product(range(1, 9), range(1, 9)):
        rising = torch.arange(length, dtype=torch.float32).view(1, 1, -1)
        _, last = F.adaptive_max_pool1d(rising, outputs, return_indices=True)
        _, first = F.adaptive_max_pool1d(-rising, outputs, return_indices=True)
        sizes = (last - first + 1).flatten().tolist()
        average = estimate(nn.AdaptiveAvgPool1d(outputs), rising)
        assert average["module_flops"] == sum(sizes)
        assert average["receptive_field"] == [max(sizes)]


# --- other pools and unpooling -------------------------------------------------------------------------------------

def test_fractional_max_pool2d():
    estimates = estimate(nn.FractionalMaxPool2d(2, output_size=3), torch.ones(1, 2, 7, 7))
    assert estimates == {
        "module_flops": 2 * 3 * 3 * (2 * 2 - 1),
        "macs": 0,
        "dmas": 2 * 49 + 2 * 9,
        "receptive_field": [2, 2],
        "effective_stride": [(7 - 2) / (3 - 1)] * 2,
        "effective_padding": [0, 0],
    }


def test_max_unpool2d_is_a_scatter():
    pooled, indices = F.max_pool2d(torch.ones(1, 2, 6, 6), 2, return_indices=True)
    estimates = estimate(nn.MaxUnpool2d(2), pooled, indices)
    assert estimates == {
        "module_flops": 0,
        "macs": 0,
        "dmas": 2 * 9 + 2 * 9 + 2 * 36,  # values + indices read, output written
        "receptive_field": [1, 1],  # ceil(2 / 2)
        "effective_stride": [0.5, 0.5],
        "effective_padding": [0.5, 0.5],  # (2 - 1 - 0) / 2
    }


def test_max_unpool1d_with_keyword_indices():
    pooled, indices = F.max_pool1d(torch.ones(1, 1, 9), 3, stride=2, return_indices=True)
    estimates = estimate(nn.MaxUnpool1d(3, stride=2), pooled, indices=indices)
    assert estimates["dmas"] == 4 + 4 + 9
    assert spatial(estimates) == ([2], [0.5], [1])


# --- resampling ----------------------------------------------------------------------------------------------------

def test_nearest_upsample_copies():
    estimates = estimate(nn.Upsample(scale_factor=2), torch.ones(1, 2, 3, 3))
    assert estimates == {"module_flops": 0, "macs": 0, "dmas": 2 * 9 + 2 * 36, "receptive_field": [1, 1],
                         "effective_stride": [0.5, 0.5], "effective_padding": [0, 0]}


def test_nearest_to_a_size_steps_by_in_over_out():
    estimates = estimate(nn.Upsample(size=5), torch.ones(1, 1, 3))
    assert spatial(estimates) == ([1], [3 / 5], [0])
    exact = estimate(nn.Upsample(scale_factor=4, mode="nearest-exact"), torch.ones(1, 1, 2))
    assert spatial(exact) == ([1], [0.25], [0])  # output o reads floor((o + 0.5) / 4)


def test_downsampling_that_starts_inside_the_input_has_no_padding_value():
    exact = estimate(nn.Upsample(scale_factor=0.5, mode="nearest-exact"), torch.ones(1, 1, 8))
    assert exact["effective_stride"] == [2.0]
    assert exact["effective_padding"]["status"] == "unavailable"  # output 0 reads input 1: a negative padding
    assert exact["effective_padding"]["method"] == METHOD


def test_linear_modes_weigh_two_taps_per_dimension():
    inputs = torch.ones(1, 2, 3, 3)
    bilinear = estimate(nn.Upsample(scale_factor=2, mode="bilinear"), inputs)
    assert bilinear == {
        "module_flops": 2 * 6 * 6 * (4 + 3),  # 4 taps: 4 multiplies + 3 additions per output element
        "macs": 0,
        "dmas": 2 * 9 + 2 * 36,
        "receptive_field": [2, 2],
        "effective_stride": [0.5, 0.5],  # 1 / scale_factor
        "effective_padding": [0, 0],  # source coordinates are clamped at 0
    }
    linear = estimate(nn.Upsample(size=7, mode="linear", align_corners=True), torch.ones(1, 1, 4))
    assert linear["module_flops"] == 7 * (2 + 1)
    assert spatial(linear) == ([2], [(4 - 1) / (7 - 1)], [0])
    trilinear = estimate(nn.Upsample(scale_factor=(1, 2, 2), mode="trilinear"), torch.ones(1, 1, 2, 2, 2))
    assert trilinear["module_flops"] == 2 * 4 * 4 * (8 + 7)
    assert spatial(trilinear) == ([2, 2, 2], [1.0, 0.5, 0.5], [0, 0, 0])


def test_bicubic_reads_four_taps_and_reaches_before_the_input():
    aligned = estimate(nn.Upsample(size=(5, 7), mode="bicubic", align_corners=True), torch.ones(1, 1, 3, 4))
    assert aligned["module_flops"] == 5 * 7 * (16 + 15)
    assert spatial(aligned) == ([4, 4], [(3 - 1) / (5 - 1), (4 - 1) / (7 - 1)], [1, 1])
    centred = estimate(nn.Upsample(scale_factor=2, mode="bicubic"), torch.ones(1, 1, 4, 4))
    # output 0 samples at 0.5 * (0 + 0.5) - 0.5 = -0.25: taps floor(-0.25) - 1 = -2 .. 1
    assert spatial(centred) == ([4, 4], [0.5, 0.5], [2, 2])


def test_upsampling_subclasses_and_recomputed_scale():
    estimates = estimate(nn.UpsamplingBilinear2d(scale_factor=2), torch.ones(1, 1, 3, 3))
    assert spatial(estimates) == ([2, 2], [(3 - 1) / (6 - 1)] * 2, [0, 0])  # align_corners=True
    nearest = estimate(nn.UpsamplingNearest2d(size=(4, 6)), torch.ones(1, 1, 2, 2))
    assert spatial(nearest) == ([1, 1], [0.5, 2 / 6], [0, 0])
    recomputed = estimate(nn.Upsample(scale_factor=1.5, recompute_scale_factor=True), torch.ones(1, 1, 5))
    assert recomputed["effective_stride"] == [5 / 7]  # the scale is recomputed from the sizes 5 -> 7


def test_area_mode_is_adaptive_average_pooling():
    estimates = estimate(nn.Upsample(size=3, mode="area"), torch.ones(1, 2, 5))
    assert estimates["module_flops"] == 2 * (2 + 3 + 2)
    assert spatial(estimates) == ([3], [5 / 3], [0])


def test_pixel_shuffle_and_unshuffle_copy():
    shuffle = estimate(nn.PixelShuffle(2), torch.ones(1, 8, 3, 3))
    assert shuffle == {"module_flops": 0, "macs": 0, "dmas": 72 + 72, "receptive_field": 1,
                       "effective_stride": 0.5, "effective_padding": 0}
    unshuffle = estimate(nn.PixelUnshuffle(2), torch.ones(1, 2, 4, 4))
    assert unshuffle == {"module_flops": 0, "macs": 0, "dmas": 32 + 32, "receptive_field": 2,
                         "effective_stride": 2, "effective_padding": 0}


# --- padding -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("module,shape,out_elements,leading", [
    (nn.ZeroPad2d((1, 2, 3, 4)), (1, 2, 4, 4), 2 * (4 + 3 + 4) * (4 + 1 + 2), [3, 1]),
    (nn.ConstantPad1d((3, 1), 0.5), (2, 3), 2 * (3 + 3 + 1), [3]),
    (nn.ReflectionPad1d(2), (1, 1, 5), 5 + 4, [2]),
    (nn.ReplicationPad3d((1, 1, 2, 2, 0, 0)), (1, 1, 2, 3, 3), 2 * (3 + 4) * (3 + 2), [0, 2, 1]),
    (nn.CircularPad2d((1, 0, 2, 1)), (1, 1, 3, 3), (3 + 3) * (3 + 1), [2, 1]),
    (nn.ReflectionPad2d(1), (1, 2, 3, 3), 2 * 5 * 5, [1, 1]),
])
def test_padding_layers_copy(module, shape, out_elements, leading):
    estimates = estimate(module, torch.ones(*shape))
    assert estimates == {"module_flops": 0, "macs": 0, "dmas": torch.Size(shape).numel() + out_elements,
                         "receptive_field": 1, "effective_stride": 1, "effective_padding": leading}


def test_cropping_padding_is_unavailable_not_negative():
    estimates = estimate(nn.ConstantPad1d((-1, 2), 0.0), torch.ones(1, 1, 4))
    assert estimates["effective_padding"]["status"] == "unavailable"
    assert estimates["dmas"] == 4 + 5


# --- contract ------------------------------------------------------------------------------------------------------

CASES = [
    (nn.MaxPool2d(3, 2, 1, return_indices=True), (torch.ones(1, 2, 7, 7),)),
    (nn.AvgPool2d(3, 2, 1, ceil_mode=True), (torch.ones(1, 2, 8, 8),)),
    (nn.LPPool1d(2, 3, 2), (torch.ones(1, 2, 9),)),
    (nn.AdaptiveAvgPool2d((3, 2)), (torch.ones(1, 2, 5, 7),)),
    (nn.AdaptiveMaxPool3d(2), (torch.ones(1, 1, 3, 4, 5),)),
    (nn.Upsample(scale_factor=2, mode="bicubic"), (torch.ones(1, 1, 3, 3),)),
    (nn.Upsample(scale_factor=3, mode="nearest"), (torch.ones(1, 1, 3),)),
    (nn.PixelShuffle(3), (torch.ones(1, 9, 2, 2),)),
    (nn.ReplicationPad2d(2), (torch.ones(1, 1, 3, 3),)),
]


def test_meta_device_gives_the_same_numbers():
    for module, args in CASES:
        on_cpu = estimate(module, *args)
        assert estimate(module.to("meta"), *(arg.to("meta") for arg in args)) == on_cpu
    pooled, indices = F.max_pool2d(torch.ones(1, 1, 4, 4), 2, return_indices=True)
    unpool = nn.MaxUnpool2d(2)
    assert estimate(unpool, pooled.to("meta"), indices.to("meta")) == estimate(unpool, pooled, indices)


def test_every_number_is_a_non_negative_int_and_validates():
    shapes = [(1, 2, 5), (2, 1, 6, 7), (1, 1, 4, 5, 6)]
    for shape in shapes:
        dims = len(shape) - 2
        pools = [getattr(nn, f"MaxPool{dims}d")(2, 1, 1), getattr(nn, f"AvgPool{dims}d")(3, 2, 1, True),
                 getattr(nn, f"AdaptiveAvgPool{dims}d")(2), getattr(nn, f"AdaptiveMaxPool{dims}d")(1),
                 getattr(nn, f"ReflectionPad{dims}d")(1), getattr(nn, f"ZeroPad{dims}d")(2),
                 nn.Upsample(scale_factor=2, mode=["linear", "bilinear", "trilinear"][dims - 1], align_corners=True)]
        for module in pools:
            estimates = estimate(module, torch.ones(*shape))
            assert set(estimates) == {"module_flops", "macs", "dmas", "receptive_field", "effective_stride",
                                      "effective_padding"}
            for name in ("module_flops", "macs", "dmas"):
                assert type(estimates[name]) is int and estimates[name] >= 0
            for name in ("receptive_field", "effective_padding"):
                values = estimates[name] if isinstance(estimates[name], list) else [estimates[name]]
                assert all(type(value) is int and value >= 0 for value in values)
            strides = estimates["effective_stride"]
            assert all(value >= 0 for value in (strides if isinstance(strides, list) else [strides]))
            validated = validate_estimates(estimates, closest_handler(type(module), HANDLERS))
            assert not validated.problems
            assert {result["method"] for result in validated.metrics.values()} == {METHOD}
