"""Decode steps with a KV cache: the call of one generated token, and the bytes of the cache that call reads.

`decode_step_inputs` builds what ``transformers``' ``generate()`` passes to a causal language model for one new
token; `kv_cache_section` finds such a cache in any analyzed call (by the shape of ``transformers``' Cache API) and
states the bytes of its keys and values, without importing ``transformers``: it is imported only when
`decode_step_inputs` runs, so ``import torchscan`` never imports it.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from ..results import MODEL, complete, unavailable
from ..values import dtype_name

__all__ = ["CACHE_KINDS", "KV_CACHE_METHOD", "decode_step_inputs", "kv_cache_section"]

#: The method label of the KV-cache bytes: the bytes of the key and value tensors the cache holds.
KV_CACHE_METHOD = "key_value_cache_tensors"
KV_CACHE_UNIT = "bytes"
#: The caches `decode_step_inputs` builds (its docstring says how they differ).
CACHE_KINDS = ("dynamic", "static")


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as error:
        raise ImportError("decode_step_inputs needs the transformers package (pip install transformers)") from error
    return transformers


def _check_causal_lm(model: Any, transformers: Any) -> None:
    """A decoder-only ``transformers`` model that generates: ``generate()`` is what a decode step imitates."""
    generates = isinstance(model, transformers.PreTrainedModel) and model.can_generate()
    if not generates or model.config.get_text_config(decoder=True).is_encoder_decoder:
        raise TypeError("model must be a transformers causal language model (a PreTrainedModel that generates, such "
                        f"as LlamaForCausalLM), got {type(model).__name__}")


def _check_count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _check_position_limit(model: Any, positions: int) -> None:
    """The new token's position must exist: a model with learned positions (GPT-2) has none past its limit, and on
    the meta device nothing would fail, so the numbers would describe an impossible call."""
    limit = getattr(model.config.get_text_config(decoder=True), "max_position_embeddings", None)
    if isinstance(limit, int) and positions >= limit:
        raise ValueError(f"context_length {positions}: the new token's position must be below the model's "
                         f"max_position_embeddings ({limit}); raise it in the configuration to analyze longer contexts")


def _filled_cache(model: Any, transformers: Any, positions: int, batch_size: int, device: torch.device,
                  kind: str) -> Any:
    """A cache of ``kind`` built from the model's configuration (its layer types included), each key/value layer
    holding ``positions`` positions of the model's dtype on ``device``; a static cache is preallocated for exactly
    one more position, the step's own."""
    config = model.config.get_text_config(decoder=True)
    if kind == "static":
        cache = transformers.StaticCache(config=model.config, max_cache_len=positions + 1)
        expected = transformers.cache_utils.StaticLayer
    else:
        cache = transformers.DynamicCache(config=model.config)
        expected = transformers.cache_utils.DynamicLayer
    # the key/value heads and head dimension, as the decoder's attention layers compute them
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    for index, layer in enumerate(cache.layers):
        if not isinstance(layer, expected) or cache.is_linear[index]:
            raise ValueError(f"layer {index} of the model's {kind} cache is a {type(layer).__name__}: "
                             "decode_step_inputs fills key/value layers only")
        states = torch.zeros(batch_size, kv_heads, positions, head_dim, dtype=model.dtype, device=device)
        cache.update(states, states.clone(), index)
    return cache


def _accepted_keywords(model: nn.Module) -> set[str]:
    """The keywords ``generate()`` may pass to ``model.forward``: its named parameters, and the flags
    ``use_cache``/``return_dict`` when it takes ``**kwargs`` (``generate()`` passes them to every model)."""
    parameters = inspect.signature(model.forward).parameters
    open_ended = any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters.values())
    return set(parameters) | ({"use_cache", "return_dict"} if open_ended else set())


def decode_step_inputs(model: nn.Module, context_length: int, *, batch_size: int = 1,
                       device: torch.device | str | None = None,
                       cache: str = "dynamic") -> tuple[tuple, dict[str, Any]]:
    """The ``(args, kwargs)`` of one decode step of a ``transformers`` causal language model.

    One new token per sequence after ``context_length`` positions: ``input_ids`` of shape ``(batch_size, 1)``, a
    fresh cache built from the model's configuration and filled with ``context_length`` positions, the
    new token's ``position_ids``, and the flags ``generate()`` sets (``use_cache``, ``logits_to_keep=1``,
    ``return_dict``), each only where the forward takes it; ``cache_position`` only for a forward that names it
    (``transformers`` 5 no longer does). As in ``generate()`` for an unpadded batch, no attention mask is passed.
    ``cache`` is one of `CACHE_KINDS`: ``"dynamic"`` (``generate()``'s default ``DynamicCache``, whose append
    copies each layer's keys and values) or ``"static"`` (a ``StaticCache`` preallocated for ``context_length + 1``
    positions, written in place, as ``generate(cache_implementation="static")`` and compiled serving run it).
    Tensors go to ``device`` (``"meta"`` for a large model), by default the model's. Analyzing the call appends one
    position to the cache (except on stand-ins, ``as_device``, which leave it as it was): build a new call for
    every analysis. Raises ``TypeError`` for a model that is not a causal language model and ``ImportError``
    without ``transformers``.
    """
    transformers = _transformers()
    _check_causal_lm(model, transformers)
    positions = _check_count("context_length", context_length, 0)
    _check_position_limit(model, positions)
    batch = _check_count("batch_size", batch_size, 1)
    if cache not in CACHE_KINDS:
        raise ValueError(f"cache must be one of {', '.join(map(repr, CACHE_KINDS))}, got {cache!r}")
    target = torch.device(device) if device is not None else next(model.parameters()).device
    accepted = _accepted_keywords(model)
    filled = _filled_cache(model, transformers, positions, batch, target, cache)
    kwargs: dict[str, Any] = {"input_ids": torch.zeros(batch, 1, dtype=torch.long, device=target),
                              "cache" if "cache" in accepted else "past_key_values": filled}
    optional = {"position_ids": lambda: torch.full((batch, 1), positions, dtype=torch.long, device=target),
                "cache_position": lambda: torch.arange(positions, positions + 1, device=target),
                "use_cache": lambda: True, "logits_to_keep": lambda: 1, "return_dict": lambda: True}
    kwargs.update({name: make() for name, make in optional.items() if name in accepted})
    return (), kwargs


# -- the report's field ---------------------------------------------------------------------------------------------


def _is_cache(value: Any) -> bool:
    """Duck typing on ``transformers``' Cache API: per-layer storage, a length and an update. An argument whose
    attribute lookup raises is not a cache (the analysis must not fail on what it merely inspects)."""
    try:
        return isinstance(getattr(value, "layers", None), (list, tuple)) and all(
            callable(getattr(value, name, None)) for name in ("get_seq_length", "update"))
    except Exception:  # noqa: BLE001 -- an argument that cannot be inspected is not a cache
        return False


def _not_plain(cache: Any) -> str | None:
    """Why ``cache`` is not one plain key/value pair per layer covering every position, or ``None``."""
    layers = list(cache.layers)
    flags = {name: list(getattr(cache, name, [False] * len(layers))) for name in ("is_sliding", "is_linear")}
    for index, layer in enumerate(layers):
        kind = type(layer).__name__
        if flags["is_sliding"][index]:
            return f"layer {index} is a sliding-window layer ({kind}): it keeps a window, not every position"
        if flags["is_linear"][index]:
            return f"layer {index} holds linear-attention states ({kind}): the cache is hybrid"
        reason = _uncovered(cache, index, layer)
        if reason is not None:
            return f"layer {index} ({kind}) {reason}"
    return None if layers else "the cache has no layers"


def _uncovered(cache: Any, index: int, layer: Any) -> str | None:
    """Why layer ``index`` lacks a (batch, heads, positions, head_dim) key/value pair of the positions read, or None."""
    keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
    if not (isinstance(keys, torch.Tensor) and isinstance(values, torch.Tensor) and keys.dim() == 4):
        return "holds no key/value tensors of shape (batch, heads, positions, head_dim)"
    if _preallocated(layer, keys):
        return None if keys.shape == values.shape else "holds keys and values of different shapes"
    length = _length(cache, index)
    if not isinstance(length, int):
        return f"has a length that cannot be read here ({length})"
    if keys.shape != values.shape or keys.shape[-2] != length:
        return f"holds keys that do not cover its {length} positions"
    return None


def _preallocated(layer: Any, keys: torch.Tensor) -> bool:
    """Whether ``layer`` is a static (preallocated) layer: its keys span ``max_cache_len`` positions whatever its
    length, and attention reads all of them (the unwritten ones masked), so its tensors are what the step reads."""
    return isinstance(getattr(layer, "max_cache_len", None), int) and keys.shape[-2] == layer.max_cache_len


def _length(cache: Any, index: int) -> int | str:
    """The positions layer ``index`` holds, or why they cannot be read (a tensor count has no value on meta)."""
    try:
        length = cache.get_seq_length(index)
        return length if isinstance(length, int) else int(length)
    except Exception as error:  # noqa: BLE001 -- the analysis must not fail on what it merely inspects
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else 'no value'}"


def _uniform(values: Iterable[Any]) -> Any:
    distinct = set(values)
    return distinct.pop() if len(distinct) == 1 else None


def _kv_cache_field(cache: Any) -> dict[str, Any]:
    """The ``inputs.kv_cache`` object of a call that reads ``cache``."""
    reason = _not_plain(cache)
    field: dict[str, Any] = {"cache_class": type(cache).__name__, "layers": len(cache.layers), "batch_size": None,
                             "kv_heads": None, "head_dim": None, "positions": None, "dtype": None, "reason": reason}
    if reason is not None:
        return {"bytes": unavailable(KV_CACHE_UNIT, MODEL, KV_CACHE_METHOD), **field}
    tensors = [tensor for layer in cache.layers for tensor in (layer.keys, layer.values)]
    shapes = [tuple(tensor.shape) for tensor in tensors]
    field.update({"batch_size": _uniform(s[0] for s in shapes), "kv_heads": _uniform(s[1] for s in shapes),
                  "positions": _uniform(s[2] for s in shapes), "head_dim": _uniform(s[3] for s in shapes),
                  "dtype": _uniform(dtype_name(tensor.dtype) for tensor in tensors)})
    nbytes = sum(tensor.numel() * tensor.element_size() for tensor in tensors)
    return {"bytes": complete(nbytes, KV_CACHE_UNIT, MODEL, KV_CACHE_METHOD), **field}


def kv_cache_section(args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``{"kv_cache": ...}`` for a call that passes a KV cache, measured before the call appends to it; else
    ``{}`` (reports of calls without a cache do not have the field)."""
    cache = next((value for value in (*args, *kwargs.values()) if _is_cache(value)), None)
    return {} if cache is None else {"kv_cache": _kv_cache_field(cache)}
