"""llmrt: a trio runtime for streaming LLM calls.

The vocabulary (messages, content blocks, stream chunks, failures), the codec,
the `BlockAssembler` and the `Adapter` contract live here; the runtime itself
(`open_runtime`, `LlmRuntime`, abort signals) lives in `llmrt.actors` and is
re-exported below.
"""

from __future__ import annotations

from ._adapter import Adapter as Adapter
from ._assembler import BlockAssembler as BlockAssembler
from ._attachment import ImageAttachmentAccess as ImageAttachmentAccess
from ._attachment import ImageAttachmentRef as ImageAttachmentRef
from ._attachment import ImageAttachments as ImageAttachments
from ._attachment import ImageRequestTarget as ImageRequestTarget
from ._attachment import ImageVersion as ImageVersion
from ._attachment import fit_image_dimensions as fit_image_dimensions
from ._attachment import image_attachment_ref as image_attachment_ref
from ._attachment import resolve_image_attachment_access as resolve_image_attachment_access
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
from ._content import CONTENT_BLOCK_TYPES as CONTENT_BLOCK_TYPES
from ._content import ContentBlock as ContentBlock
from ._content import ContentBlockType as ContentBlockType
from ._content import ContextSnapshotSection as ContextSnapshotSection
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
from ._content import image_placeholder as image_placeholder
from ._content import new_message_id as new_message_id
from ._content import system_message as system_message
from ._content import tool_result_message as tool_result_message
from ._content import user_message as user_message
from ._errors import DecodeError as DecodeError
from ._errors import ErrorCode as ErrorCode
from ._errors import LlmError as LlmError
from ._errors import LlmFailure as LlmFailure
from ._errors import failure_of as failure_of
from ._features import JSON_OBJECT as JSON_OBJECT
from ._features import JSON_SCHEMA as JSON_SCHEMA
from ._features import REQUEST_FEATURES as REQUEST_FEATURES
from ._features import STRICT_TOOLS as STRICT_TOOLS
from ._features import TOOL_CHOICE as TOOL_CHOICE
from ._features import refuse_unsupported as refuse_unsupported
from ._features import required_features as required_features
from ._identity import AppIdentity as AppIdentity
from ._identity import app_identity as app_identity
from ._identity import attribution_headers as attribution_headers
from ._image_offload import ImageOffloadPolicy as ImageOffloadPolicy
from ._image_offload import base64_length as base64_length
from ._image_offload import image_byte_size as image_byte_size
from ._image_offload import offload_request_images_with_policy as offload_request_images_with_policy
from ._image_offload import offloaded_image_placeholder as offloaded_image_placeholder
from ._image_offload import offloaded_image_prefix_count as offloaded_image_prefix_count
from ._image_offload import request_image_sizes as request_image_sizes
from ._image_offload import request_images as request_images
from ._image_route import DEFAULT_IMAGE_PROJECTION_TIMEOUT as DEFAULT_IMAGE_PROJECTION_TIMEOUT
from ._image_route import DEFAULT_MAX_PROJECTED_IMAGE_BYTES as DEFAULT_MAX_PROJECTED_IMAGE_BYTES
from ._image_route import ImageRequestPolicy as ImageRequestPolicy
from ._image_route import ImageRequestPrice as ImageRequestPrice
from ._image_route import ImageRequestPricing as ImageRequestPricing
from ._image_route import project_request_images as project_request_images
from ._redact import REDACTED as REDACTED
from ._redact import Redactor as Redactor
from ._redact import looks_like_secret as looks_like_secret
from ._request import CallConfigDefaults as CallConfigDefaults
from ._request import ConfigurableProvider as ConfigurableProvider
from ._request import DiscoveredModel as DiscoveredModel
from ._request import GenerateOptions as GenerateOptions
from ._request import JsonObjectFormat as JsonObjectFormat
from ._request import JsonSchemaFormat as JsonSchemaFormat
from ._request import LlmCallConfig as LlmCallConfig
from ._request import ModelContext as ModelContext
from ._request import ModelDiscoveryRequest as ModelDiscoveryRequest
from ._request import ModelInfo as ModelInfo
from ._request import ModelModality as ModelModality
from ._request import ModelReasoningInfo as ModelReasoningInfo
from ._request import NamedToolChoice as NamedToolChoice
from ._request import ProviderInfo as ProviderInfo
from ._request import ReasoningEffortInfo as ReasoningEffortInfo
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
from ._stop_hooks import close_on_stop as close_on_stop
from ._vocab import BUILTIN_BLOCK_TYPES as BUILTIN_BLOCK_TYPES
from ._vocab import register_content_block as register_content_block
from ._vocab import register_finish_reason as register_finish_reason
from ._vocab import register_message_source as register_message_source
from ._vocab import registered_content_blocks as registered_content_blocks
from ._vocab import registered_finish_reasons as registered_finish_reasons
from ._vocab import registered_message_sources as registered_message_sources
from ._vocab import require_block_types as require_block_types
from ._wire import Wire as Wire

__version__: str = app_identity().version

# The runtime lives in llmrt.actors. Its modules import the vocabulary from the
# defining modules (llmrt._chunks, ...), never from this namespace, so this
# re-export is the only edge between the two packages and the import graph has
# no cycle (tests/test_import_graph.py). Kept last all the same: a module that
# still writes ``from llmrt import X`` finds the vocabulary already bound.
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
from .actors import retry_policy_of as retry_policy_of

__all__ = [
    "AbortController",
    "AbortSignal",
    "Call",
    "CallNotEnteredError",
    "Completion",
    "LlmRuntime",
    "Middleware",
    "NotInTrioError",
    "PreparedCall",
    "RegistrationHandle",
    "RuntimeStatistics",
    "open_runtime",
    "retry_policy_of",
    "NEVER_RETRIED_CODES",
    "AttemptChunk",
    "RetryEvent",
    "RetryScheduled",
    "CONTENT_BLOCK_TYPES",
    "BUILTIN_BLOCK_TYPES",
    "register_content_block",
    "register_finish_reason",
    "register_message_source",
    "registered_content_blocks",
    "registered_finish_reasons",
    "registered_message_sources",
    "require_block_types",
    "close_on_stop",
    "REQUEST_FEATURES",
    "TOOL_CHOICE",
    "JSON_SCHEMA",
    "JSON_OBJECT",
    "STRICT_TOOLS",
    "required_features",
    "refuse_unsupported",
    "NamedToolChoice",
    "ToolChoice",
    "JsonSchemaFormat",
    "JsonObjectFormat",
    "ResponseFormat",
    "Wire",
    "DEFAULT_RETRYABLE_CODES",
    "Adapter",
    "AlwaysRetryPolicy",
    "AppIdentity",
    "BlockAssembler",
    "BlockEnd",
    "BlockStart",
    "CallConfigDefaults",
    "ConfigurableProvider",
    "ContentBlock",
    "ContentBlockType",
    "ContextSnapshotSection",
    "DecodeError",
    "DiscoveredModel",
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
    "LlmCallConfig",
    "LlmError",
    "LlmFailure",
    "Message",
    "MessageSource",
    "ModelContext",
    "ModelDiscoveryRequest",
    "ModelInfo",
    "ModelModality",
    "ModelReasoningInfo",
    "ModelSource",
    "NormalRetryPolicy",
    "PluginSource",
    "ProviderInfo",
    "ReasoningBlock",
    "ReasoningDelta",
    "RoutedAttempt",
    "Routing",
    "ReasoningEffortInfo",
    "REDACTED",
    "Redactor",
    "looks_like_secret",
    "ReplayEnvelope",
    "ResolvedModelInfo",
    "ResolvedRetryPolicy",
    "Role",
    "StreamChunk",
    "TextBlock",
    "TextDelta",
    "TokenUsage",
    "ToolCallBlock",
    "ToolCallDelta",
    "ToolResultBlock",
    "ToolSchema",
    "ToolSource",
    "UsageChunk",
    "UserSource",
    "__version__",
    "app_identity",
    "attribution_headers",
    "decode",
    "decode_chunk",
    "decode_message",
    "decode_request",
    "default_retry_policy",
    "encode",
    "encode_into",
    "failure_of",
    "image_placeholder",
    "new_message_id",
    "system_message",
    "tool_result_message",
    "user_message",
    "ImageAttachmentAccess",
    "ImageAttachmentRef",
    "ImageAttachments",
    "ImageRequestTarget",
    "ImageVersion",
    "fit_image_dimensions",
    "image_attachment_ref",
    "resolve_image_attachment_access",
    "ImageOffloadPolicy",
    "base64_length",
    "image_byte_size",
    "offload_request_images_with_policy",
    "offloaded_image_placeholder",
    "offloaded_image_prefix_count",
    "request_image_sizes",
    "request_images",
    "DEFAULT_IMAGE_PROJECTION_TIMEOUT",
    "DEFAULT_MAX_PROJECTED_IMAGE_BYTES",
    "ImageRequestPolicy",
    "ImageRequestPrice",
    "ImageRequestPricing",
    "project_request_images",
]
