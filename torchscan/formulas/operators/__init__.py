"""Operator-view formulas: the cost of one dispatched ATen call, by operator family (:mod:`.table` assembles them).

The same costs serve the module view's estimates of work a module performs directly (:mod:`.functional`).
"""
