"""Colours and sizes every chart shares: mid-tone colours that read on light and dark pages, sizes in points."""

import colorsys

#: Text, axes and ticks are drawn in this colour and rewritten to ``currentColor`` afterwards.
INK = "#0a0b0c"
#: Mid-tone colours that read on a white and on a near-black page alike.
PALETTE = ("#4e8ff7", "#f28e2b", "#3aa65a", "#e05d6f", "#9c6ade", "#1fa9b8", "#c9a227", "#d46fb5")
#: More mid-tone colours, each far from the palette's and each other's hues, for catalogs of up to 16 models.
MORE_COLOURS = ("#8c9a1d", "#4c5fd5", "#a5643a", "#35b88f", "#b04ec7", "#6d8fa8", "#e0806a", "#7a6a2e")
NEUTRAL = "#8c959f"
INCREASE = "#e8702a"
DECREASE = "#4e8ff7"
UNAVAILABLE = "#e5534b"
METRIC_NAMES = {"macs": "MACs", "module_flops": "FLOPs", "dmas": "DMAs"}
WIDTH = 612.0  # points (8.5 in); every chart has this width, heights follow the number of rows
FONT = 8.5
ROW = 15.0  # points per bar of a ranking


def distinct_colours(count: int) -> list[str]:
    """``count`` different colours: the palette first, then more chosen ones, then mid-tone hues spread by the golden
    angle (so a catalog of any size gives each model its own colour, and the same catalog always the same ones)."""
    colours = list((PALETTE + MORE_COLOURS)[:count])
    step = 0
    while len(colours) < count:
        hue = (0.11 + step * 0.381966) % 1.0
        lightness, saturation = (0.50, 0.62) if step % 2 == 0 else (0.60, 0.48)
        red, green, blue = colorsys.hls_to_rgb(hue, lightness, saturation)
        colour = f"#{round(red * 255):02x}{round(green * 255):02x}{round(blue * 255):02x}"
        if colour not in colours:
            colours.append(colour)
        step += 1
    return colours
