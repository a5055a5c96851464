"""Cost across input sizes: exact curves fitted to analyses at several sizes.

`exact_fit` fits exact rational polynomials to integer points and proves them on points held back; `cost_curve`
analyzes a model at each size and fits its totals (`cost_curve`, `fit_curves`, `evaluate_piece`); `schema` ships
and checks the JSON Schema of the result.
"""
