"""Exact fits: the lowest-degree polynomial with two points to spare, pieces when none holds, points otherwise."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from torchscan.curves.exact_fit import evaluate_piece, fit_points, lattice_step, solve_polynomial


def test_solving_three_points_gives_the_exact_rational_coefficients() -> None:
    assert solve_polynomial([1, 2, 4], [1, 3, 2]) == (Fraction(-8, 3), Fraction(9, 2), Fraction(-5, 6))


def test_a_quadratic_is_found_from_three_points_and_verified_at_the_rest() -> None:
    sizes = [128, 256, 512, 768, 1024]
    fit = fit_points(sizes, [7 + 5 * s + 3 * s * s for s in sizes]).to_json()
    assert fit["kind"] == "polynomial"
    assert fit["pieces"] == [{"from": 128, "to": 1024, "step": 128, "coefficients": ["7", "5", "3"]}]
    assert fit["verified_at"] == [768, 1024]


def test_the_lowest_degree_wins_and_its_leading_coefficient_is_not_zero() -> None:
    fit = fit_points([1, 2, 3, 4, 5], [10, 20, 30, 40, 50]).to_json()
    assert fit["pieces"][0]["coefficients"] == ["0", "10"]
    assert fit["verified_at"] == [3, 4, 5]


def test_unsorted_sizes_are_fitted_in_order() -> None:
    fit = fit_points([5, 1, 3, 2, 4], [25, 1, 9, 4, 16]).to_json()
    assert fit["kind"] == "polynomial" and fit["pieces"][0]["coefficients"] == ["0", "0", "1"]
    assert fit["verified_at"] == [4, 5]


def test_a_polynomial_with_one_point_to_spare_is_not_exact() -> None:
    sizes = [1, 2, 3, 4]
    fit = fit_points(sizes, [s * s for s in sizes]).to_json()
    assert fit["kind"] == "points" and fit["pieces"] == [] and "2 points left to verify" in fit["reason"]


def test_two_sizes_cannot_verify_even_a_constant() -> None:
    assert "needs 1 point to find it and 2 more" in fit_points([1, 2], [5, 5]).to_json()["reason"]


def test_a_quasi_polynomial_gets_one_piece_per_residue_class() -> None:
    sizes = list(range(64, 600, 32))
    fit = fit_points(sizes, [(s // 64) ** 2 for s in sizes]).to_json()
    assert fit["kind"] == "piecewise"
    assert [(piece["from"], piece["to"], piece["step"]) for piece in fit["pieces"]] == [(64, 576, 64), (96, 544, 64)]
    for piece in fit["pieces"]:
        assert all(evaluate_piece(piece, s) == (s // 64) ** 2 for s in range(piece["from"], piece["to"] + 1, 64))


def test_a_change_of_regime_gets_one_piece_per_range() -> None:
    sizes = list(range(200, 241, 4))
    fit = fit_points(sizes, [7 * math.ceil(s / 32) ** 2 + s for s in sizes]).to_json()
    assert fit["kind"] == "piecewise"
    assert [(piece["from"], piece["to"]) for piece in fit["pieces"]] == [(200, 224), (228, 240)]


def test_counts_that_follow_no_polynomial_are_points_with_the_reason() -> None:
    sizes = list(range(1, 9))
    fit = fit_points(sizes, [2**s for s in sizes]).to_json()
    assert fit["kind"] == "points" and "degree <= 3" in fit["reason"]


def test_the_lattice_step_is_the_gcd_of_the_differences() -> None:
    assert lattice_step([128, 256, 1024, 4096]) == 128
    assert lattice_step([200, 210, 240]) == 10
    assert lattice_step([7]) == 1


def test_a_piece_refuses_a_size_outside_its_lattice() -> None:
    piece = {"from": 128, "to": 512, "step": 32, "coefficients": ["1", "1/2"]}
    assert evaluate_piece(piece, 160) == 81
    for size in (96, 544, 150):
        with pytest.raises(ValueError, match="outside the piece's domain"):
            evaluate_piece(piece, size)
