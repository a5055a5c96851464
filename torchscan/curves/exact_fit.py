"""Exact polynomial fits of integer counts against one integer size, in rational arithmetic.

A cost curve is only worth stating when it is exact, so nothing here is a least-squares estimate: a polynomial of
degree d is solved from d + 1 sampled points with `fractions.Fraction` and accepted only when it reproduces every
other point, and at least two points must be left over to verify it (lowest degree first, degree <= 3). When no
single polynomial holds, the points are split into residue classes of a coarser lattice (convolution strides make
costs quasi-polynomial) or into consecutive ranges, and each piece must pass the same test. The domain of every
piece is the lattice it was found and verified on: ``from``, ``to`` and the ``step`` that the sampled sizes
justify (the greatest common divisor of their differences).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

#: The highest degree a curve may have: costs of the layers TorchScan counts are at most cubic in one size.
MAX_DEGREE = 3
#: Points that must reproduce a polynomial without having been used to solve it.
VERIFYING_POINTS = 2
#: Coarser lattices tried for residue-class pieces, as multiples of the sampled step.
RESIDUE_FACTORS = (2, 4, 8, 16, 32)


@dataclass(frozen=True)
class Piece:
    """One exact polynomial on one lattice, with the sizes that found it and the sizes that verified it."""

    sizes: tuple[int, ...]
    coefficients: tuple[Fraction, ...]
    found_from: tuple[int, ...]

    @property
    def verified_at(self) -> tuple[int, ...]:
        return tuple(size for size in self.sizes if size not in self.found_from)

    def to_json(self) -> dict[str, Any]:
        """The wire form: the lattice ``from``/``to``/``step`` and the coefficients as ``"p/q"`` strings."""
        return {"from": self.sizes[0], "to": self.sizes[-1], "step": lattice_step(self.sizes),
                "coefficients": [str(coefficient) for coefficient in self.coefficients]}


def lattice_step(sizes: Sequence[int]) -> int:
    """The step of the coarsest lattice through every size: the gcd of their differences (1 for a single size)."""
    return math.gcd(*(size - sizes[0] for size in sizes)) or 1


def on_lattice(piece: Mapping[str, Any], size: int) -> bool:
    """Whether ``size`` lies in a piece's domain (wire form): ``from``, ``from + step``, ... up to ``to``."""
    return piece["from"] <= size <= piece["to"] and (size - piece["from"]) % piece["step"] == 0


def evaluate_piece(piece: Mapping[str, Any], size: int) -> Fraction:
    """The value of a piece's polynomial at ``size``, which must lie on the piece's lattice.

    For tests and for displaying a formula; a size off the lattice is refused, because the curve states nothing
    there.
    """
    if not on_lattice(piece, size):
        start, stop, step = piece["from"], piece["to"], piece["step"]
        raise ValueError(f"size {size} is outside the piece's domain: {start}, {start} + {step}, ... up to {stop}")
    return sum((Fraction(c) * size**power for power, c in enumerate(piece["coefficients"])), Fraction(0))


def solve_polynomial(sizes: Sequence[int], values: Sequence[int]) -> tuple[Fraction, ...]:
    """The coefficients (lowest degree first) of the polynomial of degree len(sizes) - 1 through the points.

    Gaussian elimination on the Vandermonde system in exact rationals; the sizes must be distinct.
    """
    rows = [[Fraction(size) ** power for power in range(len(sizes))] + [Fraction(value)]
            for size, value in zip(sizes, values, strict=True)]
    for column in range(len(rows)):
        pivot = next(row for row in range(column, len(rows)) if rows[row][column] != 0)
        rows[column], rows[pivot] = rows[pivot], rows[column]
        for row in range(len(rows)):
            if row != column and rows[row][column] != 0:
                factor = rows[row][column] / rows[column][column]
                rows[row] = [a - factor * b for a, b in zip(rows[row], rows[column], strict=True)]
    return tuple(rows[index][-1] / rows[index][index] for index in range(len(rows)))


def _reproduces(coefficients: Sequence[Fraction], sizes: Sequence[int], values: Sequence[int]) -> bool:
    return all(sum(c * size**power for power, c in enumerate(coefficients)) == value
               for size, value in zip(sizes, values, strict=True))


def lowest_degree_fit(sizes: Sequence[int], values: Sequence[int]) -> Piece | None:
    """The lowest-degree polynomial that reproduces every point with `VERIFYING_POINTS` to spare, or ``None``
    (degree d is solved from the first d + 1 sizes, the fewest points that determine it)."""
    for degree in range(min(MAX_DEGREE, len(sizes) - 1 - VERIFYING_POINTS) + 1):
        coefficients = solve_polynomial(sizes[: degree + 1], values[: degree + 1])
        if _reproduces(coefficients, sizes, values):
            return Piece(tuple(sizes), coefficients, tuple(sizes[: degree + 1]))
    return None


def _residue_pieces(sizes: Sequence[int], values: Sequence[int]) -> list[Piece] | None:
    """Pieces, one per residue class of the first coarser lattice on which every class has an exact fit."""
    step = lattice_step(sizes)
    for factor in RESIDUE_FACTORS:
        classes: dict[int, list[int]] = {}
        for index, size in enumerate(sizes):
            classes.setdefault((size - sizes[0]) % (step * factor), []).append(index)
        if len(classes) < 2 or min(map(len, classes.values())) < 1 + VERIFYING_POINTS:
            return None
        pieces = [lowest_degree_fit([sizes[i] for i in members], [values[i] for i in members])
                  for members in classes.values()]
        if all(piece is not None for piece in pieces):
            return sorted((piece for piece in pieces if piece is not None), key=lambda piece: piece.sizes)
    return None


def _range_pieces(sizes: Sequence[int], values: Sequence[int]) -> list[Piece] | None:
    """Pieces on consecutive ranges, each the longest run from its start that has an exact fit; ``None`` when a
    run cannot be fitted (the breakpoints are then where the counts stop following one polynomial)."""
    pieces: list[Piece] = []
    start = 0
    while start < len(sizes):
        best = None
        for stop in range(start + 1 + VERIFYING_POINTS, len(sizes) + 1):
            best = lowest_degree_fit(sizes[start:stop], values[start:stop]) or best
        if best is None:
            return None
        pieces.append(best)
        start += len(best.sizes)
    return pieces if len(pieces) > 1 else None


@dataclass(frozen=True)
class Fit:
    """The outcome for one metric: its kind, its pieces (none for ``points``) and why."""

    kind: str
    pieces: tuple[Piece, ...]
    reason: str

    def to_json(self) -> dict[str, Any]:
        verified = sorted({size for piece in self.pieces for size in piece.verified_at})
        return {"kind": self.kind, "pieces": [piece.to_json() for piece in self.pieces], "verified_at": verified,
                "reason": self.reason}


def _describe(piece: Piece) -> str:
    lattice = piece.to_json()
    return (f"degree {len(piece.coefficients) - 1} on sizes {lattice['from']}, {lattice['from']} + "
            f"{lattice['step']}, ... up to {lattice['to']}: found from {list(piece.found_from)}, verified at "
            f"{list(piece.verified_at)}")


def fit_points(sizes: Sequence[int], values: Sequence[int]) -> Fit:
    """The exact curve through integer counts at distinct sizes: one polynomial, pieces, or the points alone."""
    order = sorted(range(len(sizes)), key=lambda index: sizes[index])
    sizes, values = [sizes[i] for i in order], [values[i] for i in order]
    if len(sizes) < 1 + VERIFYING_POINTS:
        return Fit("points", (), f"{len(sizes)} size(s): even a constant needs 1 point to find it and "
                                 f"{VERIFYING_POINTS} more to verify it")
    single = lowest_degree_fit(sizes, values)
    if single is not None:
        return Fit("polynomial", (single,), "exact polynomial of " + _describe(single))
    pieces = _residue_pieces(sizes, values) or _range_pieces(sizes, values)
    if pieces:
        return Fit("piecewise", tuple(pieces), "no single polynomial of degree <= 3 reproduces every point with "
                                               "two to spare; exact pieces: " + "; ".join(map(_describe, pieces)))
    return Fit("points", (), f"no polynomial of degree <= {MAX_DEGREE} reproduces the {len(sizes)} points with "
                             f"{VERIFYING_POINTS} points left to verify it, on one lattice, per residue class or "
                             "per range")
