"""The vocabulary's open parts: your own kinds, the block-type check, request features.

Three families are open to plugins (``docs/vocabulary.md``): content blocks,
message sources and finish reasons. A kind is a frozen `Wire` Struct with
the family's tag, registered at import time (`register_content_block`,
`register_message_source`, `register_finish_reason`; the ``registered_*``
functions list them); a `Message` with a source of your own takes its id
from `new_message_id`, as ``llmrt.user_message`` and the other builders do.
An adapter that has no form for a block type refuses the request
(`require_block_types`; `BUILTIN_BLOCK_TYPES`). Optional request
features (`REQUEST_FEATURES`: `TOOL_CHOICE`, `JSON_SCHEMA`, `JSON_OBJECT`,
`STRICT_TOOLS`) are what an adapter declares it sends; the runtime refuses a
request needing another (`required_features`, `refuse_unsupported`).

The everyday vocabulary (messages, blocks, chunks, finish reasons) is in
the top-level ``llmrt`` namespace.
"""

from ._content import CONTENT_BLOCK_TYPES as CONTENT_BLOCK_TYPES
from ._content import ContentBlockType as ContentBlockType
from ._content import ContextSnapshotSection as ContextSnapshotSection
from ._content import new_message_id as new_message_id
from ._features import JSON_OBJECT as JSON_OBJECT
from ._features import JSON_SCHEMA as JSON_SCHEMA
from ._features import REQUEST_FEATURES as REQUEST_FEATURES
from ._features import STRICT_TOOLS as STRICT_TOOLS
from ._features import TOOL_CHOICE as TOOL_CHOICE
from ._features import refuse_unsupported as refuse_unsupported
from ._features import required_features as required_features
from ._vocab import BUILTIN_BLOCK_TYPES as BUILTIN_BLOCK_TYPES
from ._vocab import register_content_block as register_content_block
from ._vocab import register_finish_reason as register_finish_reason
from ._vocab import register_message_source as register_message_source
from ._vocab import registered_content_blocks as registered_content_blocks
from ._vocab import registered_finish_reasons as registered_finish_reasons
from ._vocab import registered_message_sources as registered_message_sources
from ._vocab import require_block_types as require_block_types
from ._wire import Wire as Wire

__all__ = [
    "BUILTIN_BLOCK_TYPES",
    "CONTENT_BLOCK_TYPES",
    "JSON_OBJECT",
    "JSON_SCHEMA",
    "REQUEST_FEATURES",
    "STRICT_TOOLS",
    "TOOL_CHOICE",
    "ContentBlockType",
    "ContextSnapshotSection",
    "Wire",
    "new_message_id",
    "refuse_unsupported",
    "register_content_block",
    "register_finish_reason",
    "register_message_source",
    "registered_content_blocks",
    "registered_finish_reasons",
    "registered_message_sources",
    "require_block_types",
    "required_features",
]
