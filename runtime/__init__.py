"""llmrt: a trio runtime for streaming LLM calls.

The vocabulary (messages, content blocks, stream chunks, failures), the codec,
the `BlockAssembler` and the `Adapter` contract live here; the runtime itself
(`open_runtime`, `LlmRuntime`, abort signals) lives in `llmrt.actors` and is
re-exported below. This namespace holds what a program calls or types to make
calls and read their streams; the rest has a public module of its own:
`llmrt.images` (attachments, offloading, projection, pricing),
`llmrt.vocabulary` (registering kinds, message ids, block-type checks, request
features), `llmrt.adapter` (what implementing an adapter needs),
`llmrt.testing`; a call's retry policy is `llmrt.actors.retry_policy_of`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._adapter import Adapter as Adapter
from ._assembler import BlockAssembler as BlockAssembler
from ._chunks import BlockEnd as BlockEnd
from ._chunks import BlockStart as BlockStart
from ._chunks import Finish as Finish
from ._chunks import FinishAborted as FinishAborted
from ._chunks import FinishError as FinishError
from ._chunks import FinishMaxTokens as FinishMaxTokens
from ._chunks import FinishReason as FinishReason
from ._chunks import FinishStop as FinishStop
from ._chunks import FinishToolCalls as FinishToolCalls
from ._chunks import ReasoningDelta as ReasoningDelta
from ._chunks import RoutedAttempt as RoutedAttempt
from ._chunks import Routing as Routing
from ._chunks import StreamChunk as StreamChunk
from ._chunks import TextDelta as TextDelta
from ._chunks import TokenUsage as TokenUsage
from ._chunks import ToolCallDelta as ToolCallDelta
from ._chunks import UsageChunk as UsageChunk
from ._codec import decode as decode
from ._codec import decode_chunk as decode_chunk
from ._codec import decode_message as decode_message
from ._codec import decode_request as decode_request
from ._codec import encode as encode
from ._codec import encode_into as encode_into
from ._completion import Completion as Completion
from ._content import ContentBlock as ContentBlock
from ._content import ImageBlock as ImageBlock
from ._content import Message as Message
from ._content import MessageSource as MessageSource
from ._content import ModelSource as ModelSource
from ._content import PluginSource as PluginSource
from ._content import ReasoningBlock as ReasoningBlock
from ._content import ReplayEnvelope as ReplayEnvelope
from ._content import Role as Role
from ._content import TextBlock as TextBlock
from ._content import ToolCallBlock as ToolCallBlock
from ._content import ToolResultBlock as ToolResultBlock
from ._content import ToolSource as ToolSource
from ._content import UserSource as UserSource
from ._content import system_message as system_message
from ._content import tool_result_message as tool_result_message
from ._content import user_message as user_message
from ._errors import DecodeError as DecodeError
from ._errors import ErrorCode as ErrorCode
from ._errors import LlmError as LlmError
from ._errors import LlmFailure as LlmFailure
from ._errors import failure_of as failure_of
from ._request import CallConfigDefaults as CallConfigDefaults
from ._request import GenerateOptions as GenerateOptions
from ._request import JsonObjectFormat as JsonObjectFormat
from ._request import JsonSchemaFormat as JsonSchemaFormat
from ._request import LlmCallConfig as LlmCallConfig
from ._request import ModelInfo as ModelInfo
from ._request import NamedToolChoice as NamedToolChoice
from ._request import ResolvedModelInfo as ResolvedModelInfo
from ._request import ResponseFormat as ResponseFormat
from ._request import ToolChoice as ToolChoice
from ._request import ToolSchema as ToolSchema
from ._retry import DEFAULT_RETRYABLE_CODES as DEFAULT_RETRYABLE_CODES
from ._retry import NEVER_RETRIED_CODES as NEVER_RETRIED_CODES
from ._retry import AlwaysRetryPolicy as AlwaysRetryPolicy
from ._retry import AttemptChunk as AttemptChunk
from ._retry import NormalRetryPolicy as NormalRetryPolicy
from ._retry import ResolvedRetryPolicy as ResolvedRetryPolicy
from ._retry import RetryEvent as RetryEvent
from ._retry import RetryScheduled as RetryScheduled
from ._retry import default_retry_policy as default_retry_policy

if _TYPE_CHECKING:  # answered by `__getattr__`, from the installed metadata
    __version__: str

# The runtime lives in llmrt.actors. Its modules import the vocabulary from the
# defining modules (llmrt._chunks, ...), never from this namespace, so this
# re-export is the only edge between the two packages and the import graph has
# no cycle (tests/test_import_graph.py). Kept last all the same: a module that
# still writes ``from llmrt import X`` finds the vocabulary already bound. The
# public modules beside this namespace are bound too: ``import llmrt`` reaches them.
from . import adapter as adapter
from . import images as images
from . import vocabulary as vocabulary
from .actors import AbortController as AbortController
from .actors import AbortSignal as AbortSignal
from .actors import Call as Call
from .actors import CallNotEnteredError as CallNotEnteredError
from .actors import LlmRuntime as LlmRuntime
from .actors import Middleware as Middleware
from .actors import NotInTrioError as NotInTrioError
from .actors import PreparedCall as PreparedCall
from .actors import RegistrationHandle as RegistrationHandle
from .actors import RuntimeStatistics as RuntimeStatistics
from .actors import open_runtime as open_runtime

__all__ = [
    "DEFAULT_RETRYABLE_CODES",
    "NEVER_RETRIED_CODES",
    "AbortController",
    "AbortSignal",
    "Adapter",
    "AlwaysRetryPolicy",
    "AttemptChunk",
    "BlockAssembler",
    "BlockEnd",
    "BlockStart",
    "Call",
    "CallConfigDefaults",
    "CallNotEnteredError",
    "Completion",
    "ContentBlock",
    "DecodeError",
    "ErrorCode",
    "Finish",
    "FinishAborted",
    "FinishError",
    "FinishMaxTokens",
    "FinishReason",
    "FinishStop",
    "FinishToolCalls",
    "GenerateOptions",
    "ImageBlock",
    "JsonObjectFormat",
    "JsonSchemaFormat",
    "LlmCallConfig",
    "LlmError",
    "LlmFailure",
    "LlmRuntime",
    "Message",
    "MessageSource",
    "Middleware",
    "ModelInfo",
    "ModelSource",
    "NamedToolChoice",
    "NormalRetryPolicy",
    "NotInTrioError",
    "PluginSource",
    "PreparedCall",
    "ReasoningBlock",
    "ReasoningDelta",
    "RegistrationHandle",
    "ReplayEnvelope",
    "ResolvedModelInfo",
    "ResolvedRetryPolicy",
    "ResponseFormat",
    "RetryEvent",
    "RetryScheduled",
    "Role",
    "RoutedAttempt",
    "Routing",
    "RuntimeStatistics",
    "StreamChunk",
    "TextBlock",
    "TextDelta",
    "TokenUsage",
    "ToolCallBlock",
    "ToolCallDelta",
    "ToolChoice",
    "ToolResultBlock",
    "ToolSchema",
    "ToolSource",
    "UsageChunk",
    "UserSource",
    "__version__",
    "decode",
    "decode_chunk",
    "decode_message",
    "decode_request",
    "default_retry_policy",
    "encode",
    "encode_into",
    "failure_of",
    "open_runtime",
    "system_message",
    "tool_result_message",
    "user_message",
]


def __getattr__(name: str) -> object:
    # ``__version__`` is read from the installed metadata on first use: importing
    # ``importlib.metadata`` (email, zipfile, csv) would cost every process's start.
    if name == "__version__":
        from ._identity import app_identity

        return app_identity().version
    # ``llmrt.aio`` (asyncio programs) is loaded on first use: a trio program never imports it.
    if name == "aio":
        import importlib

        return importlib.import_module("llmrt.aio")
    raise AttributeError(f"module 'llmrt' has no attribute {name!r}")
