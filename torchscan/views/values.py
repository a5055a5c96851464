"""Short descriptions of recorded input and output metadata: ``[1, 64, 56, 56]``, ``float32[1, 3] cpu``."""

from __future__ import annotations

from typing import Any


def value_text(meta: dict[str, Any]) -> str:
    """``float32[1, 3, 224, 224] cpu`` for a tensor; containers recursively."""
    if meta["kind"] == "tensor":
        return f"{meta['dtype']}[{', '.join(map(str, meta['shape']))}] {meta['device']}"
    return shape_text(meta, limit=8, detailed=True)


def shape_text(meta: dict[str, Any] | None, limit: int = 3, detailed: bool = False) -> str:
    """A short description of an output: ``[1, 64, 56, 56]``, ``([1, 8], [1, 8])``, ``failed``."""
    if not meta:
        return ""
    kind = meta["kind"]
    if kind == "tensor":
        shape = "[" + ", ".join(str(dim) for dim in meta["shape"]) + "]"
        return f"{meta['dtype']}{shape}" if detailed else shape
    if kind in ("tuple", "list", "sequence", "namedtuple", "mapping"):
        items = meta.get("items", [])
        parts = [shape_text(item.get("value", item), limit, detailed) for item in items[:limit]]
        more = ", …" if len(items) > limit else ""
        opener, closer = ("{", "}") if kind == "mapping" else ("[", "]") if kind == "list" else ("(", ")")
        return opener + ", ".join(parts) + more + closer
    if kind in ("scalar", "object"):
        return meta.get("type", kind)
    return kind
