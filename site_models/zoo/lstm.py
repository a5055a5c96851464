"""A bidirectional LSTM text classifier (the classic "embedding -> BiLSTM -> linear" sentence classifier).

Not one published checkpoint but the standard recurrent baseline for text classification (e.g. Graves and
Schmidhuber, 2005, bidirectional LSTMs): word embeddings, a two-layer bidirectional ``nn.LSTM``, and a linear
classifier on the final hidden states of both directions of the last layer.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["LSTMClassifier", "lstm_classifier", "lstm_inputs"]


class LSTMClassifier(nn.Module):
    """Embedding, stacked bidirectional LSTM, linear head over the concatenated final hidden states."""

    def __init__(
        self, vocab_size: int, embed_dim: int, hidden_size: int, num_layers: int, num_classes: int, dropout: float
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
        self.lstm = nn.LSTM(
            embed_dim,
            hidden_size,
            num_layers=num_layers,
            batch_first=True,
            bidirectional=True,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.classifier = nn.Linear(2 * hidden_size, num_classes)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        _, (final_hidden, _) = self.lstm(self.embedding(input_ids))
        # final_hidden is (num_layers * 2, batch, hidden): the last two rows are the last layer's two directions.
        features = torch.cat([final_hidden[-2], final_hidden[-1]], dim=1)
        return self.classifier(features)


def lstm_classifier(
    vocab_size: int = 20000,
    embed_dim: int = 128,
    hidden_size: int = 256,
    num_layers: int = 2,
    num_classes: int = 2,
    dropout: float = 0.1,
) -> LSTMClassifier:
    """BiLSTM classifier; 4,928,514 parameters with the defaults (see the hand count in the tests)."""
    return LSTMClassifier(vocab_size, embed_dim, hidden_size, num_layers, num_classes, dropout)


def lstm_inputs(
    batch: int = 1, seq_len: int = 64, vocab_size: int = 20000, device: str | torch.device = "cpu", seed: int = 0
) -> tuple[tuple[torch.Tensor], dict[str, torch.Tensor]]:
    """Token ids in ``[1, vocab_size)`` (0 is padding), int64, from a private seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, vocab_size, (batch, seq_len), generator=generator, dtype=torch.int64)
    return (input_ids.to(device),), {}
