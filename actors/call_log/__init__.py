"""The call log: every request as its adapter received it, and everything it sent back.

Off by default. ``open_runtime(call_log=CallLogSettings(directory="calls"))``
(or a directory, or any `CallLogSink`) keeps one record per call; ``llmrt
serve --call-log DIR`` and ``[call_log]`` in ``llmrt.toml`` turn it on for a
gateway; ``llmrt log show ID`` and ``llmrt log tail`` print calls from it.
See docs/call-log.md.
"""

from ._log import CallLog as CallLog
from ._log import CallRecorder as CallRecorder
from ._read import assemble as assemble
from ._read import find_record as find_record
from ._read import read_records as read_records
from ._record import FORMAT_VERSION as FORMAT_VERSION
from ._record import CallRecord as CallRecord
from ._record import LogRecord as LogRecord
from ._record import RetryAttemptRecord as RetryAttemptRecord
from ._record import RetryRecord as RetryRecord
from ._record import RoutedRecord as RoutedRecord
from ._record import decode_record as decode_record
from ._record import request_digest as request_digest
from ._settings import CallLogSettings as CallLogSettings
from ._sink import CallLogSink as CallLogSink
from ._sink import JsonLinesSink as JsonLinesSink
from ._sink import log_files as log_files

__all__ = [
    "FORMAT_VERSION",
    "CallLog",
    "CallLogSettings",
    "CallLogSink",
    "CallRecord",
    "CallRecorder",
    "JsonLinesSink",
    "LogRecord",
    "RetryAttemptRecord",
    "RetryRecord",
    "RoutedRecord",
    "assemble",
    "decode_record",
    "find_record",
    "log_files",
    "read_records",
    "request_digest",
]
