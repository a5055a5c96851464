"""Colours and sizes every chart shares: mid-tone colours that read on light and dark pages, sizes in points."""

#: Text, axes and ticks are drawn in this colour and rewritten to ``currentColor`` afterwards.
INK = "#0a0b0c"
#: Mid-tone colours that read on a white and on a near-black page alike.
PALETTE = ("#4e8ff7", "#f28e2b", "#3aa65a", "#e05d6f", "#9c6ade", "#1fa9b8", "#c9a227", "#d46fb5")
NEUTRAL = "#8c959f"
INCREASE = "#e8702a"
DECREASE = "#4e8ff7"
UNAVAILABLE = "#e5534b"
METRIC_NAMES = {"macs": "MACs", "module_flops": "FLOPs", "dmas": "DMAs"}
WIDTH = 612.0  # points (8.5 in); every chart has this width, heights follow the number of rows
FONT = 8.5
ROW = 15.0  # points per bar of a ranking
