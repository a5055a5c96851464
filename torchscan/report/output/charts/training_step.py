"""The training step's chart: the layer calls whose own autograd nodes ran the most backward FLOPs.

Drawn from `torchscan.views.training.TrainingView` (the same rows as the model page's table): one bar per call, its
backward FLOPs in the operator view; calls without counted backward work are not in the view, so none is drawn as zero.
"""

from __future__ import annotations

from ....views.training import TrainingView
from .amounts import amount_of, counted, share_text, shorten, total_of
from .bar_plots import Bar, ranking_canvas
from .chart import Chart
from .style import PALETTE
from .svg_output import draw


def training_chart(training: TrainingView) -> Chart:
    """A ranking of ``training.top_layers`` by backward FLOPs, with its numbers as the text alternative."""
    layers = training.top_layers
    amounts = [amount_of(layer.backward) for layer in layers]
    bars = [Bar(shorten(f"{layer.label} ({layer.type.rpartition('.')[2]})", 48), amount, PALETTE[1])
            for layer, amount in zip(layers, amounts, strict=True) if amount is not None]
    backward = amount_of(next(part.flops for part in training.parts if part.key == "backward"))
    shown = total_of([bar.amount for bar in bars])
    summary = (f"The top {counted(len(bars), 'layer call')} by the backward operator FLOPs of the autograd nodes "
               f"their own forward created: together {share_text(shown, backward) if backward else shown.text} of "
               f"the step's backward.")
    rows = [(str(rank), layer.label, layer.type, layer.backward.text, layer.forward.text, layer.ratio)
            for rank, layer in enumerate(layers, 1)]
    chart = Chart("training-top-calls", "Layer calls with the most backward FLOPs", summary,
                  ("Rank", "Layer call", "Type", "Backward FLOPs", "Forward FLOPs", "Backward / forward"), rows)
    return draw(chart, lambda: ranking_canvas(chart.title, bars, [], "no call has backward FLOPs"))
