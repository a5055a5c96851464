"""The reference model zoo reproduces the published architectures: exact parameter counts, output shapes, and the
structural details (padding mask, causal mask, tied head, rotary embedding) that the counts alone would not catch."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn
from zoo import bert, gpt2, llama, lstm, mobilenet, resnet, small, vit


def unique_parameter_count(model: nn.Module) -> int:
    """Elements of every distinct parameter tensor (a tied weight counts once)."""
    distinct = {id(p): p for _, p in model.named_parameters(remove_duplicate=False)}
    return sum(p.numel() for p in distinct.values())


def build_on_meta(factory: Callable[[], nn.Module]) -> nn.Module:
    with torch.device("meta"):
        return factory()


def encoder_layer_parameters(d: int, ff: int) -> int:
    """One native TransformerEncoderLayer: q/k/v/out projections with biases, two FFN linears, two LayerNorms."""
    attention = 4 * (d * d + d)
    feed_forward = (d * ff + ff) + (ff * d + d)
    norms = 2 * (2 * d)
    return attention + feed_forward + norms


# Published parameter counts (torchvision model cards; Hugging Face checkpoints for BERT-base and GPT-2 small).
PUBLISHED = [
    (resnet.resnet18, 11_689_512),
    (resnet.resnet34, 21_797_672),
    (resnet.resnet50, 25_557_032),
    (resnet.resnet101, 44_549_160),
    (resnet.resnext50_32x4d, 25_028_904),
    (resnet.wide_resnet50_2, 68_883_240),
    (mobilenet.mobilenet_v2, 3_504_872),
    (vit.vit_b_16, 86_567_656),
    (vit.vit_b_32, 88_224_232),
    (vit.vit_l_16, 304_326_632),
    (bert.bert_base, 109_482_240),
    (gpt2.gpt2_small, 124_439_808),
    (llama.llama2_7b, 6_738_415_616),
    (llama.llama2_70b, 68_976_648_192),
]


@pytest.mark.parametrize(("factory", "expected"), PUBLISHED, ids=[f.__name__ for f, _ in PUBLISHED])
def test_published_parameter_counts(factory: Callable[[], nn.Module], expected: int) -> None:
    model = build_on_meta(factory)
    assert unique_parameter_count(model) == expected
    assert all(p.is_meta for p in model.parameters())


def test_vit_b_16_count_by_hand() -> None:
    d, ff, patch, tokens = 768, 3072, 16, 14 * 14 + 1
    conv_proj = 3 * patch * patch * d + d
    class_token_and_positions = d + tokens * d
    final_norm_and_head = 2 * d + (d * 1000 + 1000)
    expected = conv_proj + class_token_and_positions + 12 * encoder_layer_parameters(d, ff) + final_norm_and_head
    assert expected == 86_567_656
    assert unique_parameter_count(build_on_meta(vit.vit_b_16)) == expected


def test_bert_base_count_by_hand() -> None:
    d, ff = 768, 3072
    embeddings = 30522 * d + 512 * d + 2 * d + 2 * d  # word, position, token type, LayerNorm
    pooler = d * d + d
    expected = embeddings + 12 * encoder_layer_parameters(d, ff) + pooler
    assert expected == 109_482_240
    assert unique_parameter_count(build_on_meta(bert.bert_base)) == expected


def test_gpt2_small_count_by_hand_and_tied_head() -> None:
    d, vocab = 768, 50257
    embeddings = vocab * d + 1024 * d
    expected = embeddings + 12 * encoder_layer_parameters(d, 4 * d) + 2 * d  # + ln_f; the head reuses wte
    assert expected == 124_439_808
    model = build_on_meta(gpt2.gpt2_small)
    assert model.lm_head.weight is model.wte.weight
    assert model.lm_head.bias is None
    assert unique_parameter_count(model) == expected
    with_duplicates = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    assert with_duplicates == expected + vocab * d


def test_gpt2_tied_head_shares_updates() -> None:
    model = gpt2.gpt2_small(vocab_size=50, n_positions=8, n_embd=16, n_layer=1, n_head=2)
    with torch.no_grad():
        model.wte.weight[3].fill_(7.0)
    assert torch.equal(model.lm_head.weight[3], torch.full((16,), 7.0))


def test_llama2_7b_count_by_hand() -> None:
    vocab, d, layers, ff = 32000, 4096, 32, 11008
    attention = 4 * d * d  # q, k, v, o without biases
    mlp = 3 * d * ff  # gate, up, down without biases
    norms = 2 * d  # two RMSNorm weights per layer
    expected = vocab * d + layers * (attention + mlp + norms) + d + vocab * d  # + final norm + untied head
    assert expected == 6_738_415_616
    model = build_on_meta(llama.llama_7b)
    assert model.lm_head.weight is not model.embed_tokens.weight
    assert unique_parameter_count(model) == expected


def test_llama2_70b_count_by_hand() -> None:
    vocab, d, layers, ff, kv_width = 32000, 8192, 80, 28672, 8 * 128
    attention = 2 * d * d + 2 * d * kv_width  # q and o full width, k and v for 8 shared heads of 128
    expected = 2 * vocab * d + layers * (attention + 3 * d * ff + 2 * d) + d
    assert expected == 68_976_648_192
    assert unique_parameter_count(build_on_meta(llama.llama2_70b)) == expected


def test_lstm_classifier_count_by_hand() -> None:
    vocab, embed, hidden, classes = 20000, 128, 256, 2

    def lstm_direction(inputs: int) -> int:
        return 4 * hidden * (inputs + hidden) + 2 * 4 * hidden  # input/recurrent weights, two bias vectors

    expected = (
        vocab * embed + 2 * lstm_direction(embed) + 2 * lstm_direction(2 * hidden) + (2 * hidden * classes + classes)
    )
    assert expected == 4_928_514
    assert unique_parameter_count(lstm.lstm_classifier()) == expected


def test_small_model_counts_by_hand() -> None:
    c = 8
    cnn = 3 * c * 9 + 2 * c + 2 * (c * c * 9 + 2 * c) + (c * 10 + 10)  # stem, residual block, classifier
    assert unique_parameter_count(small.small_cnn()) == cnn == 1_506
    d = 32
    transformer = 100 * d + 16 * d + 2 * encoder_layer_parameters(d, 64) + (d * 3 + 3)
    assert unique_parameter_count(small.tiny_transformer()) == transformer == 20_899


def test_mobilenet_width_multiplier_rounds_to_multiples_of_eight() -> None:
    assert mobilenet.make_divisible(32 * 0.5) == 16
    assert mobilenet.make_divisible(24 * 0.35) == 8
    assert mobilenet.make_divisible(1280 * 1.3) == 1664
    assert mobilenet.make_divisible(20) == 24  # 16 would drop more than 10% below 20
    narrow = build_on_meta(lambda: mobilenet.mobilenet_v2(width_mult=0.5))
    assert narrow.features[0][0].out_channels == 16
    assert narrow.classifier[1].in_features == 1280  # the last width never shrinks below 1280


def test_resnet50_puts_the_stride_on_the_3x3_conv() -> None:
    first_of_stage2 = build_on_meta(resnet.resnet50).layer2[0]
    assert first_of_stage2.conv1.stride == (1, 1)
    assert first_of_stage2.conv2.stride == (2, 2)
    assert first_of_stage2.downsample[0].stride == (2, 2)


@pytest.mark.parametrize(
    ("factory", "batch", "classes"),
    [(resnet.resnet18, 2, 1000), (resnet.resnet50, 1, 1000), (mobilenet.mobilenet_v2, 1, 1000)],
    ids=["resnet18", "resnet50", "mobilenet_v2"],
)
def test_convnet_forward_shape_at_64(factory: Callable[[], nn.Module], batch: int, classes: int) -> None:
    model = factory().eval()
    with torch.no_grad():
        logits = model(torch.randn(batch, 3, 64, 64))
    assert logits.shape == (batch, classes)


def small_vit() -> vit.VisionTransformer:
    return vit.vit_b_16(
        image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64, num_classes=10
    )


def test_vit_forward_and_token_layout() -> None:
    model = small_vit().eval()
    assert model.pos_embedding.shape == (1, (32 // 8) ** 2 + 1, 32)
    layer = model.encoder.layers[0]
    assert layer.norm_first and layer.self_attn.batch_first and layer.norm1.eps == 1e-6
    with torch.no_grad():
        logits = model(torch.randn(2, 3, 32, 32))
    assert logits.shape == (2, 10)


def test_vit_rejects_image_size_not_divisible_by_patch() -> None:
    with pytest.raises(ValueError, match="divisible"):
        vit.vit_b_16(image_size=30)


def small_bert() -> bert.BertEncoder:
    return bert.bert_base(
        vocab_size=100, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position_embeddings=16
    )


def test_bert_inputs_are_a_padded_tokenized_batch() -> None:
    (input_ids,), kwargs = bert.bert_inputs(batch=2, seq_len=16)
    mask = kwargs["attention_mask"]
    assert input_ids.dtype == mask.dtype == kwargs["token_type_ids"].dtype == torch.int64
    assert mask.sum(dim=1).tolist() == [12, 16]  # row 0 keeps 3/4 of its tokens, the last row is full
    assert input_ids[:, 0].tolist() == [bert.CLS_ID, bert.CLS_ID]
    assert input_ids[0, 11] == bert.SEP_ID and input_ids[0, 12:].eq(bert.PAD_ID).all()
    assert input_ids[1, 1:15].ge(bert.FIRST_WORDPIECE_ID).all()
    again, _ = bert.bert_inputs(batch=2, seq_len=16)
    assert torch.equal(again[0], input_ids)


def test_bert_forward_shapes_and_padding_mask() -> None:
    model = small_bert().eval()
    (input_ids,), kwargs = bert.bert_inputs(batch=2, seq_len=16, vocab_size=100)
    with torch.no_grad():
        hidden, pooled = model(input_ids, **kwargs)
        other_padding = input_ids.clone()
        other_padding[0, 12:] = 50  # change what sits in the padded slots of row 0
        hidden_other, _ = model(other_padding, **kwargs)
        hidden_unmasked, _ = model(other_padding)
    assert hidden.shape == (2, 16, 32) and pooled.shape == (2, 32)
    assert torch.allclose(hidden[0, :12], hidden_other[0, :12], atol=1e-5)  # padded keys are ignored
    assert not torch.allclose(hidden[0, :12], hidden_unmasked[0, :12], atol=1e-3)  # without the mask they are not


def test_gpt2_forward_shape_and_causality() -> None:
    model = gpt2.gpt2_small(vocab_size=100, n_positions=16, n_embd=32, n_layer=2, n_head=4).eval()
    (input_ids,), kwargs = gpt2.gpt2_inputs(batch=2, seq_len=16, vocab_size=100)
    changed_last = input_ids.clone()
    changed_last[:, -1] = (changed_last[:, -1] + 1) % 100
    with torch.no_grad():
        logits = model(input_ids, **kwargs)
        logits_changed = model(changed_last)
    assert logits.shape == (2, 16, 100)
    assert torch.allclose(logits[:, :-1], logits_changed[:, :-1], atol=1e-5)  # the future is not visible
    assert not torch.allclose(logits[:, -1], logits_changed[:, -1])


def test_gpt2_rejects_sequences_longer_than_its_positions() -> None:
    model = gpt2.gpt2_small(vocab_size=100, n_positions=8, n_embd=16, n_layer=1, n_head=2)
    with pytest.raises(ValueError, match="n_positions"):
        model(torch.zeros(1, 9, dtype=torch.int64))


@pytest.mark.parametrize("num_kv_heads", [None, 2], ids=["multi_head", "grouped_query"])
def test_llama_tiny_forward_shape_and_causality(num_kv_heads: int | None) -> None:
    model = llama.llama_tiny(num_kv_heads=num_kv_heads).eval()
    (input_ids,), _ = llama.llama_inputs(batch=2, seq_len=16, vocab_size=256)
    changed_last = input_ids.clone()
    changed_last[:, -1] = (changed_last[:, -1] + 1) % 256
    with torch.no_grad():
        logits = model(input_ids)
        logits_changed = model(changed_last)
    assert logits.shape == (2, 16, 256)
    assert torch.allclose(logits[:, :-1], logits_changed[:, :-1], atol=1e-5)
    assert isinstance(model.layers[0].input_norm, nn.RMSNorm)
    assert isinstance(model.layers[0].mlp.act, nn.SiLU)


def test_llama_rotary_scores_depend_only_on_relative_position() -> None:
    head_dim = 8
    cos, sin = llama.rotary_tables(12, head_dim, 10000.0, torch.device("cpu"))
    query, key = torch.randn(head_dim), torch.randn(head_dim)

    def score(query_position: int, key_position: int) -> torch.Tensor:
        rotated_query = llama.apply_rotary(query, cos[query_position], sin[query_position])
        rotated_key = llama.apply_rotary(key, cos[key_position], sin[key_position])
        return rotated_query @ rotated_key

    assert torch.allclose(score(5, 2), score(9, 6), atol=1e-5)
    assert not torch.allclose(score(5, 2), score(5, 4), atol=1e-3)


def test_llama_7b_runs_on_the_meta_device() -> None:
    model = build_on_meta(llama.llama_7b)
    (input_ids,), _ = llama.llama_inputs(batch=1, seq_len=8, device="meta")
    logits = model(input_ids)
    assert logits.is_meta and logits.shape == (1, 8, 32000)


def test_lstm_forward_shape() -> None:
    model = lstm.lstm_classifier(vocab_size=50, embed_dim=8, hidden_size=16, num_classes=3).eval()
    (input_ids,), _ = lstm.lstm_inputs(batch=2, seq_len=10, vocab_size=50)
    assert input_ids.min() >= 1  # 0 is the padding id
    with torch.no_grad():
        assert model(input_ids).shape == (2, 3)


def test_small_models_forward_shapes() -> None:
    cnn = small.small_cnn().eval()
    transformer = small.tiny_transformer().eval()
    (input_ids,), _ = small.tiny_transformer_inputs()
    with torch.no_grad():
        assert cnn(torch.randn(1, 3, 32, 32)).shape == (1, 10)
        assert transformer(input_ids).shape == (2, 3)


def test_small_cnn_residual_adds_the_identity() -> None:
    block = small.ResidualBlock(4).eval()
    with torch.no_grad():
        block.bn2.weight.zero_()
        block.bn2.bias.zero_()  # the residual branch now outputs zeros, leaving relu(identity)
        x = torch.randn(1, 4, 5, 5)
        assert torch.equal(block(x), torch.relu(x))
