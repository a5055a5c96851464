"""``crawl_module(..., memory=True)``: the memory section, checked against hand counts, against the same trace on
``meta``, against ``measure_peak_memory`` of the same forward, and the activation count against fvcore."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from integrations.third_party_models import import_timm, import_torchvision, import_transformers
from torch import nn
from torch.nn import functional
from torchscan_testing import analyze_call

from torchscan import crawl_module, measure_peak_memory, summary
from torchscan.memory.forward import (
    ACTIVATIONS_METHOD,
    METHOD,
    _load_meta_kernels,
    attention_kernel,
    native_attention_reason,
)

FLOAT = 4


def value(result: dict[str, Any], unit: str = "bytes") -> Any:
    assert result["status"] == "complete" and result["unit"] == unit
    assert result["method"] == (METHOD if unit == "bytes" else ACTIVATIONS_METHOD)
    return result["value"]


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def test_a_linear_stack_has_the_bytes_counted_by_hand():
    report = analyze_call(mlp(), torch.randn(2, 8), memory=True)
    memory = report["memory"]
    parameters, inputs = (8 * 16 + 16 + 16 * 4 + 4) * FLOAT, 2 * 8 * FLOAT
    hidden, logits = 2 * 16 * FLOAT, 2 * 4 * FLOAT
    # the peak is after the ReLU: the first Linear's output and the ReLU's output are live together
    at_peak = {name: value(result) for name, result in memory["at_peak"].items()}
    assert at_peak == {"parameters": parameters, "buffers": 0, "inputs": inputs, "activations": 2 * hidden}
    assert value(memory["peak"]) == parameters + inputs + 2 * hidden == sum(at_peak.values())
    assert value(memory["peak_above_start"]) == 2 * hidden
    assert memory["peak_at"] == {"layer": {"path": "1", "call_index": 0}, "operator": "aten.relu",
                                 "operator_index": 2}
    assert memory["device"] == "cpu" and memory["attention_kernel"]["name"] == "none"
    assert value(memory["activations"], "activations") == 2 * 16 + 2 * 4  # the two Linear outputs, in elements
    layers = {layer["path"]: {name: value(result) for name, result in layer["memory"].items()}
              for layer in report["layers"]}
    start = parameters + inputs
    assert layers == {"": {"output_bytes": logits, "live_bytes_at_end": start + logits},
                      "0": {"output_bytes": hidden, "live_bytes_at_end": start + hidden},
                      "1": {"output_bytes": hidden, "live_bytes_at_end": start + 2 * hidden},
                      "2": {"output_bytes": logits, "live_bytes_at_end": start + hidden + logits}}
    assert report["totals"]["forward_peak_bytes"] == memory["peak_above_start"]
    assert report["totals"]["activations"] == memory["activations"]


def test_memory_is_absent_unless_requested_and_the_flag_must_be_a_bool():
    report = analyze_call(mlp(), torch.randn(2, 8))
    assert "memory" not in report and "forward_peak_bytes" not in report["totals"]
    assert all("memory" not in layer for layer in report["layers"])
    with pytest.raises(TypeError, match="memory must be a bool"):
        crawl_module(mlp(), args=(torch.randn(2, 8),), memory="yes")


def test_structure_mode_traces_the_same_memory_as_a_full_analysis():
    full = analyze_call(mlp(), torch.randn(2, 8), memory=True)
    structure = analyze_call(mlp(), torch.randn(2, 8), memory=True, mode="structure")
    assert structure["memory"] == full["memory"]
    assert [layer["memory"] for layer in structure["layers"]] == [layer["memory"] for layer in full["layers"]]


def test_summary_forwards_the_memory_flag(capsys):
    report = summary(mlp(), (8,), memory=True)
    assert value(report["memory"]["peak_above_start"]) > 0
    capsys.readouterr()


def test_a_tied_weight_counts_once_among_the_parameters():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 6), nn.Linear(6, 10, bias=False))
    model[1].weight = model[0].weight
    report = analyze_call(model, torch.tensor([[1, 2, 3]]), memory=True)
    assert value(report["memory"]["at_peak"]["parameters"]) == 10 * 6 * FLOAT


class SmallCNN(nn.Module):
    """Convolutions, pooling and a classifier: the same kernels on CPU and on meta (no batch norm, whose meta
    kernel returns statistics the CPU kernel leaves empty in evaluation mode, and average rather than max pooling,
    which on meta also returns the indices that CPU's inference kernel never makes)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2),
                                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.classifier = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).flatten(1))


def test_the_first_memory_analysis_on_meta_reports_only_the_models_operators():
    """The trace's one-time set-up on ``meta`` (loading PyTorch's meta kernels) runs an operator of its own: it must
    not reach the report, or the first such analysis of a process would differ from the next."""
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    call = torch.ones(2, 8, device="meta")
    _load_meta_kernels.cache_clear()  # as in a fresh process
    first = crawl_module(model, args=(call,), memory=True)
    assert first["operator_flops"] == crawl_module(model, args=(call,))["operator_flops"]
    assert first == crawl_module(model, args=(call,), memory=True)


def test_a_convolutional_net_traces_the_same_memory_on_meta_as_on_cpu():
    reports = []
    for device in ("cpu", "meta"):
        torch.manual_seed(0)
        reports.append(crawl_module(SmallCNN().to(device), (3, 32, 32), device=device, memory=True))
    cpu, meta = reports
    assert (cpu["memory"]["device"], meta["memory"]["device"]) == ("cpu", "meta")
    assert {**cpu["memory"], "device": "meta"} == meta["memory"]
    assert [layer["memory"] for layer in cpu["layers"]] == [layer["memory"] for layer in meta["layers"]]


def measured_forward(model: nn.Module, *args: Any) -> int:
    def forward() -> None:
        with torch.no_grad():
            model(*args)
    return measure_peak_memory(forward, device="cpu")["peak_bytes"]


def test_the_traced_forward_peak_of_resnet18_is_within_one_percent_of_the_measured_peak():
    torch.manual_seed(0)
    model = import_torchvision().models.resnet18().eval()
    images = torch.randn(4, 3, 160, 160)
    report = crawl_module(model, args=(images,), memory=True)
    assert value(report["memory"]["peak_above_start"]) == pytest.approx(measured_forward(model, images), rel=0.01)


def small_gpt2() -> nn.Module:
    library = import_transformers()
    torch.manual_seed(0)
    config = library.GPT2Config(vocab_size=1000, n_positions=64, n_embd=128, n_layer=2, n_head=4)
    return library.GPT2LMHeadModel(config).eval()


def test_the_traced_forward_peak_of_a_small_gpt2_is_within_one_percent_and_names_the_attention_kernel():
    model = small_gpt2()
    tokens = torch.randint(0, 1000, (2, 64))
    report = crawl_module(model, args=(tokens,), memory=True)
    memory = report["memory"]
    assert value(memory["peak_above_start"]) == pytest.approx(measured_forward(model, tokens), rel=0.01)
    assert memory["attention_kernel"]["name"] == "flash"  # CPU's fused kernel: no score matrix


def test_on_meta_with_meta_kernels_math_attention_takes_the_math_path_and_the_report_says_so():
    library = import_transformers()
    with torch.device("meta"):
        model = library.GPT2LMHeadModel(library.GPT2Config(vocab_size=1000, n_positions=64, n_embd=128, n_layer=1,
                                                           n_head=4)).eval()
    tokens = torch.zeros(2, 64, dtype=torch.long, device="meta")
    report = crawl_module(model, args=(tokens,), memory=True, meta_kernels="math")
    assert report["memory"]["attention_kernel"]["name"] == "math"
    assert "score matrix is materialized, as asked (meta_kernels='math'" in report["memory"]["attention_kernel"][
        "reason"]
    default = crawl_module(model, args=(tokens,), memory=True)  # float32: CUDA's memory-efficient kernel
    assert default["memory"]["attention_kernel"]["name"] == "efficient"
    assert "assumed on meta (meta_kernels='accelerator'" in default["memory"]["attention_kernel"]["reason"]


def test_an_attention_kernel_name_lists_every_kernel_seen_in_its_reason():
    assert attention_kernel([]) == {"name": "none", "reason": attention_kernel([])["reason"]}
    mixed = attention_kernel(["flash", "math"])
    assert mixed["name"] == "flash" and "flash, math" in mixed["reason"]


def fvcore_activations(model: nn.Module, *args: Any) -> int:
    analysis = pytest.importorskip("fvcore.nn").ActivationCountAnalysis(model, args)
    analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    return int(analysis.total())


@pytest.mark.parametrize("case", ["small_cnn", "resnet18"])
def test_the_activation_count_equals_fvcores(case):
    torch.manual_seed(0)
    model = (SmallCNN() if case == "small_cnn" else import_torchvision().models.resnet18()).eval()
    images = torch.randn(2, 3, 64, 64)
    report = crawl_module(model, args=(images,), memory=True)
    assert value(report["memory"]["activations"], "activations") == fvcore_activations(model, images)


def test_a_fused_attention_counts_its_score_matrix_and_output_like_the_math_path():
    query = torch.randn(2, 4, 8, 16)

    class Attention(nn.Module):
        def forward(self, q: torch.Tensor) -> torch.Tensor:
            return functional.scaled_dot_product_attention(q, q, q)

    counts = [value(crawl_module(Attention(), args=(query.to(device),), memory=True)["memory"]["activations"],
                    "activations") for device in ("cpu", "meta")]
    assert counts == [2 * 4 * 8 * 8 + 2 * 4 * 8 * 16] * 2


@pytest.mark.parametrize(("name", "published"), [("resnet50", 11.1), ("vit_base_patch16_224", 23.9)])
def test_timm_model_card_activations_match_to_their_rounding(name, published):
    timm = import_timm()
    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False).eval()
    report = crawl_module(model, (3, 224, 224), device="meta", memory=True)
    assert round(value(report["memory"]["activations"], "activations") / 1e6, 1) == published


def llama_parameters(layers: int) -> int:
    """Llama-2-7B's parameter count with ``layers`` decoder layers: embedding and LM head (32,000 x 4,096 each),
    per layer four attention projections, three MLP projections and two norms, and the final norm."""
    hidden, intermediate, vocabulary = 4096, 11008, 32000
    per_layer = 4 * hidden * hidden + 3 * hidden * intermediate + 2 * hidden
    return 2 * vocabulary * hidden + layers * per_layer + hidden


def test_a_llama_2_7b_config_on_meta_reports_its_bfloat16_parameters_exactly():
    # Two of the 32 layers keep the test short; benchmarks/memory_llama.py runs all 32 (6,738,415,616 x 2 bytes).
    from zoo.hf_llama import llama2_7b

    assert llama_parameters(32) == 6_738_415_616
    with torch.device("meta"):
        model = llama2_7b(max_position_embeddings=32768, num_hidden_layers=2)
    model = model.to(torch.bfloat16)
    report = crawl_module(model, args=(torch.zeros(1, 16, dtype=torch.long, device="meta"),), memory=True)
    memory = report["memory"]
    assert value(memory["at_peak"]["parameters"]) == llama_parameters(2) * 2
    assert memory["device"] == "meta" and memory["attention_kernel"]["name"] == "flash"  # CUDA's, for bfloat16


class WithHelper(nn.Module):
    """Calls a module that is not one of its submodules (held in a plain list) before its own layer."""

    def __init__(self) -> None:
        super().__init__()
        self.helper = [nn.ReLU()]
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.helper[0](x))


def test_a_call_of_a_module_outside_the_model_does_not_hide_the_next_calls_memory():
    report = analyze_call(WithHelper(), torch.randn(2, 4), memory=True)
    layers = {layer["path"]: layer["memory"] for layer in report["layers"]}
    assert value(layers["fc"]["output_bytes"]) == 2 * 4 * FLOAT


def test_two_analyses_in_two_threads_each_trace_only_their_own_calls():
    """Global module hooks fire for every thread's calls; each analysis keeps to its own thread's."""
    from concurrent.futures import ThreadPoolExecutor

    def analyzed(width: int) -> list[Any]:
        model = nn.Sequential(nn.Conv2d(3, width, 3), nn.Sequential(nn.ReLU(), nn.Flatten()))
        report = crawl_module(model, input_shape=(3, 16, 16), memory=True)
        return [layer["memory"] for layer in report["layers"]]

    alone = {width: analyzed(width) for width in (2, 4)}
    with ThreadPoolExecutor(2) as pool:
        for _ in range(5):
            together = dict(zip((2, 4), pool.map(analyzed, (2, 4)), strict=True))
            assert together == alone


def test_the_fused_multi_head_attention_counts_the_products_of_the_unfused_path():
    """``nn.MultiheadAttention`` in eval under no_grad runs one fused operator; the count is that of the products
    its unfused path runs (in train mode), not zero."""
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(32, 4, batch_first=True)
    tokens = torch.randn(2, 5, 32)

    class Attend(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = attention

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return self.attention(tokens, tokens, tokens, need_weights=False)[0]

    model = Attend()
    fused = crawl_module(model.eval(), args=(tokens,), memory=True)
    ran = {row["operator"] for row in fused["operator_flops"]["by_operator"]}
    assert "aten._native_multi_head_attention" in ran
    unfused = crawl_module(model.train(), args=(tokens,), memory=True)
    # in-projections 3 x 2x5x32, scores 2x4x5x5, attention output and output projection 2 x 2x5x32
    expected = 3 * (2 * 5 * 32) + 2 * 4 * 5 * 5 + 2 * (2 * 5 * 32)
    assert fused["memory"]["activations"]["value"] == unfused["memory"]["activations"]["value"] == expected
    assert fused["memory"]["activations"]["status"] == "complete"



def test_the_fused_multi_head_attention_names_its_kernel_and_the_score_matrix_it_computes_inside():
    """On CPU ``_native_multi_head_attention`` computes the score matrix inside the kernel and frees it before it
    returns: the report names the kernel and those bytes, which the measured peak holds and the trace does not."""
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(64, 4, dim_feedforward=64, batch_first=True).eval()
    tokens = torch.randn(2, 256, 64)
    report = crawl_module(model.self_attn, args=(tokens, tokens, tokens), kwargs={"need_weights": False},
                          memory=True)
    kernel = report["memory"]["attention_kernel"]
    scores = 2 * 4 * 256 * 256 * FLOAT
    assert kernel["name"] == "native_mha"
    assert "on CPU the kernel computes the score matrix inside itself" in kernel["reason"]
    assert f"({scores:,} bytes at the largest here)" in kernel["reason"]

    def attend() -> None:
        with torch.no_grad():
            model.self_attn(tokens, tokens, tokens, need_weights=False)

    measured = measure_peak_memory(attend, device="cpu")["peak_bytes"]
    assert measured - value(report["memory"]["peak_above_start"]) >= scores


def test_vit_b16_takes_the_fused_multi_head_attention_on_cpu_stand_ins_and_the_math_path_on_meta():
    """MultiheadAttention's fast path needs a CPU or CUDA tensor: on meta the unfused path runs (scaled dot product
    attention's math path), on CPU stand-ins the fused operator the real CPU runs."""
    with torch.device("meta"):
        model = import_torchvision().models.vit_b_16().eval()
    tokens = torch.empty(1, 197, 768, device="meta")  # the class token and 14 x 14 patches of 224 px
    on_cpu = crawl_module(model.encoder, args=(tokens,), memory=True, as_device="cpu")
    kernel = on_cpu["memory"]["attention_kernel"]
    assert kernel["name"] == "native_mha"
    assert f"({12 * 197 * 197 * FLOAT:,} bytes at the largest here)" in kernel["reason"]
    on_meta = crawl_module(model.encoder, args=(tokens,), memory=True)
    assert on_meta["memory"]["attention_kernel"]["name"] == "math"
    assert value(on_cpu["memory"]["activations"], "activations") == value(on_meta["memory"]["activations"],
                                                                           "activations")


def test_the_native_attention_reason_depends_on_the_device():
    cuda, meta = native_attention_reason("cuda", 8), native_attention_reason("meta", 8)
    assert "fused scaled_dot_product_attention kernel inside itself" in cuda and "(8 bytes" in cuda
    assert "on meta only its outputs exist" in meta


class RecurrentClassifier(nn.Module):
    """A recurrent layer over 5 steps of 8 features, then a 2-class head on the last step."""

    def __init__(self, layer: type[nn.Module] = nn.LSTM) -> None:
        super().__init__()
        self.recurrent = layer(8, 16, batch_first=True)
        self.head = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.recurrent(x)[0][:, -1])


def test_a_fused_lstm_kernel_makes_the_activation_count_a_lower_bound_and_says_why():
    torch.manual_seed(0)
    report = analyze_call(RecurrentClassifier(), torch.randn(1, 5, 8), memory=True)
    activations = report["memory"]["activations"]
    # oneDNN's LSTM layer computes its gate products inside the kernel: only the head's 2 outputs are seen
    assert activations["status"] == "partial" and activations["known_value"] == 2
    assert report["totals"]["activations"] == activations
    (found,) = [item for item in report["diagnostics"] if item["code"] == "fused_recurrent_kernel"]
    assert (found["severity"], found["metric"], found["path"], found["call_index"]) == (
        "warning", "activations", "recurrent", 0)
    assert found["message"].startswith("aten.mkldnn_rnn_layer ran: its gate products happen inside the kernel")


@pytest.mark.parametrize(("layer", "device"), [(nn.GRU, "cpu"), (nn.RNN, "cpu"), (nn.LSTM, "meta")])
def test_a_recurrent_layer_that_dispatches_its_products_is_counted_exactly(layer, device):
    with torch.device(device):
        model = RecurrentClassifier(layer)
    report = analyze_call(model, torch.randn(1, 5, 8, device=device), memory=True)
    gates = {nn.GRU: 3, nn.RNN: 1, nn.LSTM: 4}[layer] * 16
    # per step, the input's and the hidden state's projections to the gates; then the head
    assert value(report["memory"]["activations"], "activations") == 2 * 5 * gates + 2
    assert not [item for item in report["diagnostics"] if item["code"] == "fused_recurrent_kernel"]
