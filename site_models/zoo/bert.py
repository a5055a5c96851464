"""BERT-base encoder (Devlin et al., 2018, "BERT: Pre-training of Deep Bidirectional Transformers").

Same parameter count as Hugging Face's ``BertModel`` for ``bert-base-uncased`` (109,482,240 parameters): word,
position and token-type embeddings summed and normalized (LayerNorm eps 1e-12), twelve post-norm encoder layers
with GELU feed-forward blocks, and the pooler (Linear + Tanh on the first token). The layers are PyTorch's native
``nn.TransformerEncoderLayer`` (``norm_first=False``), whose parameters match BERT's self-attention, intermediate
and output sub-layers one for one. Pre-training heads are not included, as in ``BertModel``.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["BertEncoder", "bert_base", "bert_inputs"]

CLS_ID, SEP_ID, PAD_ID = 101, 102, 0
FIRST_WORDPIECE_ID = 1000  # ids below are [unused] slots and special tokens in the uncased vocabulary


class BertEncoder(nn.Module):
    """Embeddings, a stack of post-norm encoder layers, and the first-token pooler."""

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        num_layers: int,
        num_heads: int,
        intermediate_size: int,
        max_position_embeddings: int,
        type_vocab_size: int,
        dropout: float,
        layer_norm_eps: float,
    ) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=PAD_ID)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)
        self.embedding_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.embedding_dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(
            d_model=hidden_size,
            nhead=num_heads,
            dim_feedforward=intermediate_size,
            dropout=dropout,
            activation="gelu",
            layer_norm_eps=layer_norm_eps,
            batch_first=True,
            norm_first=False,
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.pooler = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.Tanh())

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(last_hidden_state, pooled_output)``; ``attention_mask`` is 1 for tokens, 0 for padding."""
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        embedded = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )
        hidden = self.embedding_dropout(self.embedding_norm(embedded))
        padding_mask = None if attention_mask is None else attention_mask == 0
        hidden = self.encoder(hidden, src_key_padding_mask=padding_mask)
        return hidden, self.pooler(hidden[:, 0])


def bert_base(
    vocab_size: int = 30522,
    hidden_size: int = 768,
    num_layers: int = 12,
    num_heads: int = 12,
    intermediate_size: int = 3072,
    max_position_embeddings: int = 512,
    type_vocab_size: int = 2,
    dropout: float = 0.1,
    layer_norm_eps: float = 1e-12,
) -> BertEncoder:
    """BERT-base (uncased vocabulary); 109,482,240 parameters. Every size is overridable for small tests."""
    return BertEncoder(
        vocab_size,
        hidden_size,
        num_layers,
        num_heads,
        intermediate_size,
        max_position_embeddings,
        type_vocab_size,
        dropout,
        layer_norm_eps,
    )


def padded_lengths(batch: int, seq_len: int) -> list[int]:
    """Real token counts per row: from 3/4 of ``seq_len`` (row 0) up to full length (last row), at least 2."""
    shortest = max(2, (3 * seq_len) // 4)
    if batch == 1:
        return [shortest]
    return [shortest + (seq_len - shortest) * row // (batch - 1) for row in range(batch)]


def special_ids(vocab_size: int) -> tuple[int, int, int]:
    """``([CLS], [SEP], first ordinary id)``: the uncased vocabulary's ids, or 1, 2, 3 for a tiny test vocabulary."""
    if vocab_size > FIRST_WORDPIECE_ID:
        return CLS_ID, SEP_ID, FIRST_WORDPIECE_ID
    if vocab_size < 4:
        raise ValueError("vocab_size must hold [PAD], [CLS], [SEP] and at least one word")
    return 1, 2, 3


def bert_inputs(
    batch: int = 1, seq_len: int = 128, vocab_size: int = 30522, device: str | torch.device = "cpu", seed: int = 0
) -> tuple[tuple[torch.Tensor], dict[str, torch.Tensor]]:
    """A tokenized, max-length-padded batch: ``[CLS] wordpieces [SEP] [PAD]...`` with its mask and segment ids.

    Ids come from a private seeded generator (the global random state is untouched) and are int64, like a
    tokenizer's output. The last quarter of row 0 is padding, so the padding mask matters even at batch 1.
    """
    if seq_len < 2:
        raise ValueError("seq_len must leave room for [CLS] and [SEP]")
    cls_id, sep_id, first_word_id = special_ids(vocab_size)
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(first_word_id, vocab_size, (batch, seq_len), generator=generator, dtype=torch.int64)
    attention_mask = torch.zeros(batch, seq_len, dtype=torch.int64)
    token_type_ids = torch.zeros(batch, seq_len, dtype=torch.int64)
    for row, length in enumerate(padded_lengths(batch, seq_len)):
        input_ids[row, 0] = cls_id
        input_ids[row, length - 1] = sep_id
        input_ids[row, length:] = PAD_ID
        attention_mask[row, :length] = 1
        token_type_ids[row, length // 2 : length] = 1  # second segment of a sentence pair
    kwargs = {"attention_mask": attention_mask.to(device), "token_type_ids": token_type_ids.to(device)}
    return (input_ids.to(device),), kwargs
