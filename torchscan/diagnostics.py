"""Diagnostic codes: each defined once, with the one sentence that documents it.

The report-schema page is generated from `CODES`, so the documentation cannot drift from the code.
"""

from __future__ import annotations

from typing import Any

from .wire import Diagnostic, Severity

#: code -> (default severity, documentation sentence)
CODES: dict[str, tuple[Severity, str]] = {
    "unsupported_module": (
        "warning", "A leaf module type has no handler, so its module estimates are a lower bound or unavailable."),
    "unestimated_direct_work": ("warning", (
        "A module call executed an operator directly (outside any child call) that no handler covers and the module "
        "view has no formula for, so the affected metrics are partial.")),
    "uncounted_operator": (
        "warning", "An executed operator has no FLOP formula, so the operator FLOPs are a lower bound."),
    "invalid_handler_result": ("error", (
        "A module handler returned a value that is not a valid estimate; the affected fields are unavailable.")),
    "handler_exception": ("error", (
        "A module handler raised an exception; its fields are unavailable and owned descendants stay covered.")),
    "incomplete_handler_estimate": ("warning", (
        "A module handler returned a partial or unavailable estimate (explicitly or by omitting an owned field).")),
    "module_forward_error": ("error", (
        "A module's forward raised (and an enclosing module caught it); the call has no output and no estimates.")),
    "expanded_atomic_boundary": ("warning", (
        "A registered descendant opened a built-in atomic module whose inclusive formula was dropped; the "
        "descendant counts are a lower bound of the module's work.")),
    "verified_inheritance": ("info", (
        "A class that overrides the forward of a built-in or third-party class keeps its parent's leaf formula for "
        "this call, because the operators the call ran do the work the formula describes (see verified inheritance "
        "in Model support).")),
    "handler_signature_mismatch": ("warning", (
        "A third-party class ran other operators than its built-in formula describes (the library changed its "
        "forward, or a configuration the formula does not cover), so its estimates are lower bounds priced from the "
        "observed operators.")),
    "unsupported_configuration": ("warning", (
        "A module supported by a built-in handler ran in a configuration its formulas do not justify; the affected "
        "metrics are partial or unavailable.")),
    "unobserved_thread": ("error", (
        "Modules ran in threads other than the analysing one, where dispatch is not observed: their work is missing "
        "and every total is a lower bound.")),
    "higher_order_operator": ("warning", (
        "A higher-order operator (torch.cond on meta, while_loop, flex_attention, ...) ran without its inner work "
        "being observed, so the operator FLOPs are a lower bound.")),
    "fused_recurrent_kernel": ("warning", (
        "A fused recurrent layer kernel (oneDNN's or cuDNN's LSTM, GRU or RNN) ran: the products of its gates happen "
        "inside the kernel, outside the activation count's convention, so the activations are a lower bound.")),
    "operator_formula_error": ("error", (
        "An operator FLOP formula raised or returned something other than a non-negative number; the operator is "
        "counted as uncounted.")),
}


def diagnostic(code: str, message: str, *, metric: str | None = None, severity: Severity | None = None,
               **where: Any) -> Diagnostic:
    """Build a diagnostic with a known code; ``where`` holds ``path``/``call_index`` or ``operator``."""
    if code not in CODES:
        raise KeyError(f"unknown diagnostic code {code!r}")
    record: Diagnostic = {"code": code, "severity": severity or CODES[code][0], "metric": metric, "message": message}
    record.update(where)  # type: ignore[typeddict-item]
    return record


def sort_key(item: Diagnostic) -> tuple:
    """A deterministic order: by location, then code, then metric and operator."""
    return (item.get("path", ""), item.get("call_index", -1), item["code"], item.get("metric") or "",
            item.get("operator", ""), item["message"])
