"""An error raised by the model's forward during an analysis keeps its type and message and gains notes that point
at the fix: the layer call that raised, and, for generated inputs that look batched, that ``input_shape`` excludes
the batch dimension."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

from torchscan import crawl_module, crawl_training_step
from torchscan.calls.errors import batch_note

BATCH = "input_shape is the shape of one sample, without the batch dimension"


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2))


def notes_of(raised: pytest.ExceptionInfo) -> list[str]:
    return list(getattr(raised.value, "__notes__", []))


def test_a_torchinfo_style_shape_gets_the_batch_hint_and_the_failing_layer_call() -> None:
    with pytest.raises(RuntimeError) as raised:
        crawl_module(cnn(), (1, 3, 32, 32))
    # PyTorch's own message is unchanged; the notes come under it.
    assert str(raised.value).startswith("Expected 3D (unbatched) or 4D (batched) input to conv2d")
    assert "[1, 1, 3, 32, 32]" in str(raised.value)
    notes = notes_of(raised)
    assert "TorchScan: raised in layer call 0 #0 (Conv2d)" in notes
    hint = next(note for note in notes if BATCH in note)
    assert "the model received input of size (1, 1, 3, 32, 32)" in hint
    assert "If (1, 3, 32, 32) already includes the batch, pass input_shape=(3, 32, 32)" in hint
    assert "args=(torch.randn(1, 3, 32, 32),)" in hint


def test_a_batch_larger_than_one_is_recognized_by_the_rank_the_layer_accepts() -> None:
    with pytest.raises(RuntimeError) as raised:
        crawl_module(cnn(), (8, 3, 32, 32))
    hint = next(note for note in notes_of(raised) if BATCH in note)
    assert "If (8, 3, 32, 32) already includes the batch, pass input_shape=(3, 32, 32)" in hint


def test_the_training_step_and_the_structure_mode_note_the_same() -> None:
    for analyze in (lambda: crawl_training_step(cnn(), (1, 3, 32, 32)),
                    lambda: crawl_module(cnn(), (1, 3, 32, 32), mode="structure"),
                    lambda: crawl_module(cnn(), (1, 3, 32, 32), memory=True)):
        with pytest.raises(RuntimeError) as raised:
            analyze()
        notes = notes_of(raised)
        assert "TorchScan: raised in layer call 0 #0 (Conv2d)" in notes
        assert sum(BATCH in note for note in notes) == 1


def test_no_batch_hint_for_provided_calls_or_errors_that_are_not_about_shapes() -> None:
    with pytest.raises(RuntimeError) as raised:
        crawl_module(cnn(), args=(torch.rand(1, 1, 3, 32, 32),))
    assert notes_of(raised) == ["TorchScan: raised in layer call 0 #0 (Conv2d)"]
    # A correct shape of the wrong width: not about the batch.
    with pytest.raises(RuntimeError) as raised:
        crawl_module(nn.Sequential(nn.Linear(4, 2)), (5,))
    assert notes_of(raised) == ["TorchScan: raised in layer call 0 #0 (Linear)"]
    assert batch_note("this layer cannot run", [(1, 4)]) is None
    assert batch_note("Expected 3D (unbatched) or 4D (batched) input, got [1, 3, 32]", [(3, 32)]) is None
    assert "input_shape=[(3,), (5,)]" in batch_note("size mismatch", [(1, 3), (1, 5)])


class Explodes(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("this layer cannot run")


class Catches(nn.Module):
    """Calls a failing child, handles its error, then fails in its own code."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Explodes()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with contextlib.suppress(ValueError):
            self.inner(x)
        x = self.linear(x)
        raise KeyError("its own mistake")


class Twice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.linear(x)[..., :3])


@pytest.mark.parametrize(("model", "kind", "note"), [
    (nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), Explodes())), ValueError,
     "TorchScan: raised in layer call 1.1 #0 (Explodes)"),
    (Explodes(), ValueError, "TorchScan: raised in layer call (root) #0 (Explodes)"),
    (nn.Sequential(Catches()), KeyError, "TorchScan: raised in layer call 0 #0 (Catches)"),
    (Twice(), RuntimeError, "TorchScan: raised in layer call linear #1 (Linear)"),
], ids=["innermost", "root", "handled-inside", "second-call"])
def test_the_note_names_the_innermost_layer_call_that_raised(model: nn.Module, kind: type, note: str) -> None:
    with pytest.raises(kind) as raised:
        crawl_module(model, (4,))
    assert type(raised.value) is kind
    assert [item for item in notes_of(raised) if "layer call" in item] == [note]
    # The model is left as it was: hooks removed, so a plain call raises without TorchScan's notes.
    with pytest.raises(kind) as plain:
        model(torch.rand(1, 4))
    assert not notes_of(plain)
