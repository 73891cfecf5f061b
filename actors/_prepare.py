"""Exact-model metadata, call-config resolution and prepared (one-shot) calls.

The call path's image step, `project_images`, and the route policy it reads,
`route_image_policy`, are `llmrt.images`' (``runtime/_image_route.py``),
named here too for the call and the runtime.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from llmrt._adapter import Adapter
from llmrt._errors import ErrorCode, LlmError
from llmrt._helpers import revalidated
from llmrt._image_route import project_images as project_images
from llmrt._image_route import route_image_policy as route_image_policy
from llmrt._request import (
    CallConfigDefaults,
    GenerateOptions,
    LlmCallConfig,
    ModelInfo,
    ResolvedModelInfo,
)

__all__ = [
    "validated_model_info",
    "validated_model_list",
    "resolve_config",
    "config_of",
    "apply_config",
    "project_images",
    "route_image_policy",
]

_info_decoder = msgspec.json.Decoder(ResolvedModelInfo)
#: At most this many answers in a `validated_model_info` memo (then it starts over).
MEMO_ENTRIES: Final = 256
_list_decoder = msgspec.json.Decoder(tuple[ModelInfo, ...])


def _invalid(provider: str, what: str) -> LlmError:
    return LlmError(ErrorCode.INVALID_MODEL_INFO, f"provider {provider!r}: {what}")


async def validated_model_info(
    adapter: Adapter,
    provider: str,
    model: str,
    memo: dict[ResolvedModelInfo, ResolvedModelInfo] | None = None,
) -> ResolvedModelInfo:
    """Ask the adapter about one exact model; validate and detach its answer.

    Raises `LlmError` ``INVALID_MODEL_INFO`` when the answer is malformed (wrong
    type, another provider or model id, bad numbers, an unknown default effort).
    Exceptions the adapter raises propagate. Cancellable like any trio call.

    ``memo`` (a registration's, kept by the caller): answers validated before,
    by value. An answer equal to one of them gets that one's detached copy
    without the round trip: the answer is frozen, and whether it is valid
    depends on nothing but its value and the names asked for.
    """
    answer = await adapter.resolve_model(provider, model)
    if type(answer) is not ResolvedModelInfo:
        memo = None  # not memoized (a subclass, or not model info at all)
    if memo is not None:
        try:
            known = memo.get(answer)
        except TypeError:  # a field that cannot be hashed: checked every time
            memo = None
        else:
            if known is not None and known.provider == provider and known.id == model:
                return known
    info = answer
    if not isinstance(info, ResolvedModelInfo):
        raise _invalid(provider, f"resolve_model() returned {type(info).__name__}")
    try:
        # Round trip: checks the field constraints a constructor skips, and detaches.
        info = revalidated(_info_decoder, info)
    except msgspec.ValidationError as exc:
        raise _invalid(
            provider, f"resolve_model({model!r}) returned invalid metadata: {exc}"
        ) from None
    if info.provider != provider or info.id != model:
        raise _invalid(
            provider,
            f"resolve_model({model!r}) described {info.provider!r}/{info.id!r} instead",
        )
    if info.reasoning is not None:
        ids = [effort.id for effort in info.reasoning.efforts]
        if len(set(ids)) != len(ids):
            raise _invalid(provider, f"model {model!r} lists a reasoning effort twice")
        default = info.reasoning.default_effort
        if default is not None and default not in ids:
            raise _invalid(
                provider, f"model {model!r} has a default effort {default!r} it does not list"
            )
    if memo is not None:
        if len(memo) >= MEMO_ENTRIES:
            memo.clear()
        memo[answer] = info
    return info


async def validated_model_list(adapter: Adapter, provider: str) -> tuple[ModelInfo, ...]:
    """The adapter's advisory catalog for ``provider``, validated and detached.

    Raises `LlmError` ``INVALID_MODEL_INFO`` when the answer is not a sequence
    of `ModelInfo` or lists a model under another provider.
    """
    answer = await adapter.list_models(provider)
    # Materialized once: a generator must not be consumed by the check below.
    models = None if isinstance(answer, str | bytes) else _as_tuple(answer)
    if models is None or not all(isinstance(m, ModelInfo) for m in models):
        raise _invalid(provider, "list_models() must return a sequence of ModelInfo")
    try:
        detached = revalidated(_list_decoder, models)
    except msgspec.ValidationError as exc:
        raise _invalid(provider, f"list_models() returned invalid metadata: {exc}") from None
    for model in detached:
        if model.provider != provider:
            raise _invalid(provider, f"list_models() listed {model.id!r} under {model.provider!r}")
    return detached


def _as_tuple(value: Iterable[object]) -> tuple[object, ...] | None:
    try:
        return tuple(value)
    except TypeError:  # not iterable: the adapter broke its contract
        return None


def resolve_config(
    config: LlmCallConfig, info: ResolvedModelInfo
) -> tuple[LlmCallConfig, CallConfigDefaults]:
    """Validate ``config`` against one model and materialize the adapter's defaults.

    ``max_tokens`` is filled only when absent; an explicit reasoning effort must
    be one the model lists (no clamping, no aliasing), else `LlmError`
    ``UNSUPPORTED_REASONING_EFFORT``; an absent effort takes the model's default.
    An output cap that leaves no room in the model's context window (``max_tokens``
    at or above it) is `LlmError` ``CONTEXT_WINDOW_EXCEEDED``: no such request
    can succeed, so it is refused before any I/O.
    """
    updates: dict[str, object] = {}
    max_tokens_default = False
    effort_default = False
    if config.max_tokens is None and info.default_max_tokens is not None:
        updates["max_tokens"] = info.default_max_tokens
        max_tokens_default = True
    reasoning = info.reasoning
    if config.reasoning_effort is not None:
        supported = [] if reasoning is None else [effort.id for effort in reasoning.efforts]
        if config.reasoning_effort not in supported:
            listed = ", ".join(repr(e) for e in supported) or "none"
            raise LlmError(
                ErrorCode.UNSUPPORTED_REASONING_EFFORT,
                f"model {config.model!r} of provider {config.provider!r} does not support "
                f"reasoning effort {config.reasoning_effort!r} (supported: {listed})",
            )
    elif reasoning is not None and reasoning.default_effort is not None:
        updates["reasoning_effort"] = reasoning.default_effort
        effort_default = True
    resolved = msgspec.structs.replace(config, **updates) if updates else config
    window = None if info.context is None else info.context.context_window
    if window is not None and resolved.max_tokens is not None and resolved.max_tokens >= window:
        whose = "the model's default output cap" if max_tokens_default else "max_tokens"
        raise LlmError(
            ErrorCode.CONTEXT_WINDOW_EXCEEDED,
            f"{whose} {resolved.max_tokens} leaves no room in the {window}-token context "
            f"window of model {config.model!r} of provider {config.provider!r}",
        )
    return resolved, CallConfigDefaults(
        reasoning_effort=effort_default, max_tokens=max_tokens_default
    )


def config_of(options: GenerateOptions) -> LlmCallConfig:
    """The call-config fields of a request."""
    return LlmCallConfig(
        provider=options.provider,
        model=options.model,
        reasoning_effort=options.reasoning_effort,
        temperature=options.temperature,
        max_tokens=options.max_tokens,
        stop=options.stop,
    )


def apply_config(options: GenerateOptions, config: LlmCallConfig) -> GenerateOptions:
    """``options`` with its call-config fields taken from ``config``."""
    if config_of(options) == config:
        return options
    return msgspec.structs.replace(
        options,
        provider=config.provider,
        model=config.model,
        reasoning_effort=config.reasoning_effort,
        temperature=config.temperature,
        max_tokens=config.max_tokens,
        stop=config.stop,
    )
