"""What the results say: one summary per run and entry, sweep curves, before/after reviews and budgets."""
