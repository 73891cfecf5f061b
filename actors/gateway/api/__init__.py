"""The provider APIs clients already speak, translated to and from llmrt, without I/O.

One module per API: `chat` (OpenAI Chat Completions), `responses` (OpenAI
Responses), `messages` (Anthropic Messages). Each decodes a request body into
`GenerateOptions` (``decode_*``, raising `ApiRequestError` naming the
parameter at fault) and returns a call object whose ``encoder()`` turns llmrt
chunks into that API's server-sent events, whose ``answer()`` turns a
`BlockAssembler` into its non-streaming JSON, and whose ``error()`` answers a
failure in the API's error shape. An HTTP handler reads the body, calls the
decoder, runs ``rt.stream(call.options)`` and writes the encoder's bytes;
`APIS` maps each route's path to its decoder and error shape.
docs/http-api.md describes the translation.
"""

from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from llmrt import LlmError, LlmFailure

from ._errors import ERROR_CLASSES as ERROR_CLASSES
from ._errors import ApiRequestError as ApiRequestError
from ._errors import ErrorAnswer as ErrorAnswer
from ._errors import ErrorClass as ErrorClass
from ._errors import anthropic_error as anthropic_error
from ._errors import error_class as error_class
from ._errors import openai_error as openai_error
from .chat import ChatCall as ChatCall
from .chat import decode_chat as decode_chat
from .messages import MessagesCall as MessagesCall
from .messages import decode_messages as decode_messages
from .responses import ResponsesCall as ResponsesCall
from .responses import decode_responses as decode_responses


@attrs.frozen
class Api:
    """One provider API: its route, its decoder and its error shape."""

    name: str
    path: str
    #: ``decode(body, aliases=...)``: the call, or `ApiRequestError`.
    decode: Callable[..., Any]
    #: The answer of a failure before the stream started (or of a refused request).
    error: Callable[[LlmFailure | LlmError], ErrorAnswer]


CHAT: Final = Api("chat", "/v1/chat/completions", decode_chat, openai_error)
RESPONSES: Final = Api("responses", "/v1/responses", decode_responses, openai_error)
MESSAGES: Final = Api("messages", "/v1/messages", decode_messages, anthropic_error)
#: The APIs by route path.
APIS: Final[Mapping[str, Api]] = {api.path: api for api in (CHAT, RESPONSES, MESSAGES)}

__all__ = [
    "APIS",
    "CHAT",
    "ERROR_CLASSES",
    "MESSAGES",
    "RESPONSES",
    "Api",
    "ApiRequestError",
    "ChatCall",
    "ErrorAnswer",
    "ErrorClass",
    "MessagesCall",
    "ResponsesCall",
    "anthropic_error",
    "decode_chat",
    "decode_messages",
    "decode_responses",
    "error_class",
    "openai_error",
]
