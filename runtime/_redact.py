"""`Redactor`: removes secrets from text that came from outside before it is passed on.

A provider's error body may echo the request that caused it: the
``Authorization`` header, an ``x-api-key`` header, a JSON field holding the
key, an HTML page whose title quotes it. Such text becomes a failure message,
which reaches consumers, gateway clients and logs. A `Redactor` is built from
the exact secret values a component holds (an adapter's API keys, a gateway's
token) and removes each of them wherever it occurs; it then removes what
merely looks like a credential (``Bearer <token>``, ``x-api-key: <value>``,
``token <value>``, ``sk-...``), so a key the component does not know about is
caught too.

A redactor is a value: components build one from what they hold and apply it
where provider text turns into an `LlmFailure` (there is no registry of
secrets). Its ``repr`` shows how many secrets it holds, never them.
"""

from __future__ import annotations

import itertools
import json
import re
import urllib.parse
from collections.abc import Iterable

import attrs
import msgspec

from ._chunks import Finish, FinishAborted, FinishError, StreamChunk
from ._errors import LlmError, LlmFailure

__all__ = ["REDACTED", "Redactor", "looks_like_secret"]

#: What a removed secret is replaced with.
REDACTED = "[redacted]"
_ELLIPSIS = "\u2026"
#: The shortest start of a secret removed from the end of a cut message.
_MIN_TAIL = 4

# A credential-looking value: one run of token characters, at least 8 long.
_VALUE = r"[A-Za-z0-9._~+/=\-]{8,}"
_KEYWORD = (
    r"(?i)(\b(?:bearer|basic|token|x-api-key|api[ _-]?key(?: provided)?|access[ _-]?key|"
    r"authorization|secret|password)\b[\"']?"
)
# A keyword, ":" or "=" (quotes around either side allowed), then the value:
# "api key provided: abc-def-ghi", '"x-api-key": "..."', "token=...".
_ASSIGNED = re.compile(_KEYWORD + r"\s*[:=]\s*[\"']?\s*(?:bearer\s+)?)" + _VALUE)
# A keyword and a space only ("Bearer ...", "token ..."): the value must hold a
# digit, so prose such as "token limit" or "Bearer required" stays readable.
_SPACED = re.compile(_KEYWORD + r"\s+(?:bearer\s+)?)(?=[A-Za-z0-9._~+/=\-]*[0-9])" + _VALUE)
# Provider key shapes quoted bare: OpenAI/DeepSeek ``sk-...``, Anthropic ``sk-ant-...``
# (the other documented prefixes are `_PREFIXED`'s).
_KEY_SHAPE = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_*\-]{8,}")

# Key prefixes providers document (case matters): Groq ``gsk_``, Fireworks
# ``fw_``, xAI ``xai-``, Cerebras ``csk-``, Perplexity ``pplx-``, NVIDIA
# ``nvapi-``, Hugging Face ``hf_``, Replicate ``r8_``, GitHub ``ghp_``/
# ``github_pat_`` and co., GitLab ``glpat-``, Together ``tgp_v1_``, Stripe-like
# ``sk_live_``/``sk_test_``; then a random run of 16 or more characters.
_PREFIXED = re.compile(
    r"(?<![A-Za-z0-9])(?:gsk_|fw_|xai-|csk-|pplx-|nvapi-|hf_|r8_|gh[pousr]_|github_pat_|glpat-|tgp_v1_"
    r"|[sr]k_(?:live|test)_|sk-|pk-|rk-)(?P<rest>[A-Za-z0-9_\-]{16,})"
)
# Google API keys (``AIza`` and 35 more) and AWS access key ids (``AKIA``/``ASIA`` and 16).
_FIXED = re.compile(r"(?<![A-Za-z0-9])(?:AIza[0-9A-Za-z_\-]{35}|(?:AKIA|ASIA)[A-Z0-9]{16})")
# A run of letters and digits long enough to be a random key.
_RUN = re.compile(r"[A-Za-z0-9]{20,}")


def _classes(text: str) -> tuple[int, int]:
    """(how many of lower case, upper case and digits ``text`` has, how often it switches)."""
    kinds = [0 if c.islower() else 1 if c.isupper() else 2 for c in text]
    switches = sum(1 for a, b in itertools.pairwise(kinds) if a != b)
    return len(set(kinds)), switches


def _random_looking(run: str) -> bool:
    """Whether a run of letters and digits switches kind as often as a random key does.

    A random base-62 or hex string switches between lower case, upper case
    and digits at about half of its positions; words and UPPER_SNAKE names
    (even CamelCase ones with a year in them) switch a few times at most.
    """
    kinds, switches = _classes(run)
    return kinds >= 2 and switches * 4 >= len(run)


def _random_rest(rest: str) -> bool:
    """Whether what follows a key prefix is random text (a digit, or both cases), not a word."""
    return any(c.isdigit() for c in rest) or (rest.lower() != rest and rest.upper() != rest)


def _prefixed_key(found: re.Match[str]) -> str:
    return REDACTED if _random_rest(found["rest"]) else found[0]


def looks_like_secret(value: str) -> bool:
    """Whether ``value`` looks like an API key or token rather than a name.

    True for a documented key prefix followed by a random-looking run
    (``gsk_...``, ``fw_...``, ``xai-...``, ``sk-...``, ``AIza...``, ...) and
    for any run of 20 or more letters and digits that mixes lower case,
    upper case and digits the way random text does. Names such as
    ``GROQ_API_KEY``, ``deepseek-official`` or ``MyCompanyKey2024`` are not.
    Used to refuse such values where a name belongs (``api_key_env``,
    ``preset``) without echoing them. Pure; never raises.
    """
    if not isinstance(value, str) or len(value) < 16:
        return False
    if any(_random_rest(found["rest"]) for found in _PREFIXED.finditer(value)):
        return True
    if _FIXED.search(value):
        return True
    return any(_random_looking(run) for run in _RUN.findall(value))


def _variants(secret: str) -> tuple[str, ...]:
    """The forms a secret takes when echoed: as is, JSON-escaped, URL-encoded."""
    forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret)[1:-1].replace("/", "\\/")}
    forms.add(urllib.parse.quote(secret, safe=""))
    forms.add(urllib.parse.quote_plus(secret, safe=""))
    return tuple(forms)


def _secrets(values: Iterable[str | None]) -> tuple[str, ...]:
    found: set[str] = set()
    for value in values:
        if value:
            found.update(_variants(value))
    # Longest first: a secret that contains another is removed whole.
    return tuple(sorted(found, key=len, reverse=True))


@attrs.frozen(repr=False)
class Redactor:
    """Removes the given secret values, then credential-looking phrases, from text.

    ``Redactor(secrets)`` takes the exact values to remove (empty and None
    entries are skipped); ``Redactor()`` removes only the phrasings. Values
    are matched as given, JSON-escaped and URL-encoded, and a message that
    was cut short inside a secret loses the secret's start (4 characters or
    more) too. Pure, no I/O; safe to share between tasks.
    """

    _secrets: tuple[str, ...] = attrs.field(default=(), converter=_secrets, alias="secrets")
    _exact: re.Pattern[str] | None = attrs.field(init=False, eq=False)

    def __attrs_post_init__(self) -> None:
        exact = re.compile("|".join(map(re.escape, self._secrets))) if self._secrets else None
        # Frozen attrs classes allow this one write, in their own post-init.
        object.__setattr__(self, "_exact", exact)

    def __repr__(self) -> str:
        return f"Redactor(<{len(self._secrets)} secret forms>)"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("a Redactor holds secrets and is not picklable")

    def with_secrets(self, secrets: Iterable[str | None]) -> Redactor:
        """A redactor that removes this one's secrets and ``secrets`` too."""
        return Redactor((*self._secrets, *secrets))

    def redact(self, text: str) -> str:
        """``text`` with every secret and credential-looking phrase replaced by ``[redacted]``."""
        if self._exact is not None:
            text = self._cut_tail(self._exact.sub(REDACTED, text))
        text = _ASSIGNED.sub(r"\1" + REDACTED, text)
        text = _SPACED.sub(r"\1" + REDACTED, text)
        text = _KEY_SHAPE.sub(REDACTED, text)
        text = _PREFIXED.sub(_prefixed_key, text)
        return _FIXED.sub(REDACTED, text)

    @property
    def holds_values(self) -> bool:
        """Whether this redactor removes any exact secret value (not only phrasings)."""
        return self._exact is not None

    def redact_values(self, text: str) -> str:
        """``text`` without the secret values (and their forms); phrasings are left alone.

        For long text that is mostly not provider prose (a call log record):
        a substring check per form first, so clean text costs no regex pass.
        """
        exact = self._exact
        if exact is None or not any(secret in text for secret in self._secrets):
            return text
        return exact.sub(REDACTED, text)

    def _cut_tail(self, text: str) -> str:
        """Remove the start of a secret where a message was cut short (``…`` or not)."""
        body = text.removesuffix(_ELLIPSIS)
        for secret in self._secrets:
            for size in range(min(len(secret) - 1, len(body)), _MIN_TAIL - 1, -1):
                if body.endswith(secret[:size]):
                    return body[: len(body) - size] + REDACTED + text[len(body) :]
        return text

    def failure(self, failure: LlmFailure) -> LlmFailure:
        """``failure`` with its message and request id redacted (the same object if clean)."""
        message = self.redact(failure.message)
        request_id = failure.request_id
        if request_id is not None:
            request_id = self.redact(request_id)
        if message == failure.message and request_id == failure.request_id:
            return failure
        return msgspec.structs.replace(failure, message=message, request_id=request_id)

    def error(self, exc: LlmError) -> LlmError:
        """``exc`` itself if its failure is clean, else a new `LlmError` with the redacted one."""
        failure = self.failure(exc.failure)
        return exc if failure is exc.failure else LlmError.from_failure(failure)

    def chunk(self, chunk: StreamChunk) -> StreamChunk:
        """A finish carrying a failure, redacted; every other chunk as it is."""
        return self.finish(chunk) if type(chunk) is Finish else chunk

    def finish(self, finish: Finish) -> Finish:
        """``finish`` with its failure redacted (the same object when nothing changed)."""
        reason = finish.reason
        if type(reason) is FinishError:
            failure = self.failure(reason.failure)
            if failure is not reason.failure:
                return Finish(reason=FinishError(failure=failure))
        elif type(reason) is FinishAborted:
            failure = self.failure(reason.failure)
            if failure is not reason.failure:
                return Finish(reason=FinishAborted(failure=failure))
        return finish
