"""Log lines a client cannot forge.

Clients choose many strings that end up in log lines: request ids (`X-Request-Id`, a body's
`request_id`, and the response and engine ids made from it), URL paths, model and LoRA names,
LoRA paths, header values. A newline in one of them would start a new line that looks like any
other; a carriage return or a terminal escape sequence would rewrite what a terminal shows.
`log_text` writes every such character as a visible escape, and `LogLineFormatter` applies it
to the message of every record a process logs, so no log site has to remember to. The
supervisor, which re-emits its children's output line by line, escapes what reaches it too
(`escape_line`), whichever logger (vLLM's included) wrote it.

The escapes are JSON's (`\\n`, `\\r`, `\\t`, `\\u001b`), so a JSON log line stays valid JSON;
backslashes are left alone (an escape written by a client shows as written, and forges no line).
"""

from __future__ import annotations

import logging
import re

# C0 controls (newline, carriage return, escape ...), DEL, C1 controls (U+0085 is a line break
# to some readers, U+009B a terminal's CSI), the Unicode line and paragraph separators, and the
# bidirectional overrides and isolates (text that displays in another order than it reads).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# The same characters as UTF-8 bytes (what the supervisor reads from a child's pipe).
_UNSAFE_BYTES = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xa8-\xae]|\xe2\x81[\xa6-\xa9]")

MAX_MESSAGE = 16 * 1024  # characters of one log message (a 10 MB request id is not logged whole)


def _escape(m: re.Match) -> str:
    c = m.group()
    return _NAMED.get(c) or f"\\u{ord(c):04x}"


def log_text(value: object, limit: int | None = MAX_MESSAGE) -> str:
    """`value` as text safe to put in a log line: control and line-breaking characters
    escaped, at most `limit` characters kept (the rest counted)."""
    text = value if isinstance(value, str) else str(value)
    if limit is not None and len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit} more characters)"
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(_escape, text)


def escape_line(line: bytes) -> bytes:
    """One line of a child's output (UTF-8, its newline removed) with what `log_text` escapes
    escaped; tabs are kept (tracebacks and tables use them)."""
    if _UNSAFE_BYTES.search(line) is None:
        return line
    text = line.decode("utf-8", "replace")
    return "\t".join(log_text(part, None) for part in text.split("\t")).encode()


class LogLineFormatter(logging.Formatter):
    """A Formatter whose messages (the format string with its arguments) pass through
    `log_text`: one record is one line, whatever the arguments hold. A traceback keeps its
    lines; control characters other than newlines are escaped in it too."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = log_text(record.message)
        return super().formatMessage(record)

    def formatException(self, ei) -> str:
        return "\n".join(log_text(line, None) for line in super().formatException(ei).split("\n"))


def install(fmt: str, datefmt: str | None = None) -> None:
    """Every handler of the root logger formats with `LogLineFormatter(fmt, datefmt)`."""
    for handler in logging.getLogger().handlers:
        handler.setFormatter(LogLineFormatter(fmt, datefmt))
