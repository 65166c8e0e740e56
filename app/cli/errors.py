"""Expected failures of every command, each turned into one line: what went wrong, what to do."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click

from app.settings import SettingsError, load_settings
from app.transactions.logfile import LogFileError

#: What to do when a service does not answer; said once here so every command says the same.
KAFKA_HINT = "run `fraudstream stack up` or set KAFKA_BOOTSTRAP"
REDIS_HINT = "run `fraudstream stack up` or set REDIS_URL"
VERBOSE_HINT = "(-v before the command shows the traceback)"


@dataclass(frozen=True, slots=True)
class Rule:
    """One kind of expected failure: which exceptions it covers and the line that explains it."""

    name: str
    matches: Callable[[BaseException], bool]
    explain: Callable[[BaseException], str]


def _kafka_address() -> str:
    try:
        return load_settings().effective_kafka_bootstrap
    except SettingsError:
        return "the configured broker"


def _redis_address() -> str:
    try:
        return load_settings().effective_redis_url
    except SettingsError:
        return "the configured Redis"


def _module_is(exc: BaseException, *prefixes: str) -> bool:
    """True when any class in exc's MRO comes from a module starting with one of `prefixes`.

    Matching by module keeps this table free of imports of aiokafka, redis or pyarrow, which
    most commands never load.
    """
    return any(cls.__module__.startswith(prefixes) for cls in type(exc).__mro__)


def _is_kafka_unreachable(exc: BaseException) -> bool:
    return type(exc).__name__ in ("KafkaConnectionError", "NoBrokersAvailable") and _module_is(
        exc, "aiokafka", "kafka")


def _is_kafka_error(exc: BaseException) -> bool:
    return _module_is(exc, "aiokafka.errors", "kafka.errors")


def _is_redis_unreachable(exc: BaseException) -> bool:
    return _module_is(exc, "redis.exceptions") and type(exc).__name__ in (
        "ConnectionError", "TimeoutError", "BusyLoadingError")


def _is_arrow(exc: BaseException) -> bool:
    return _module_is(exc, "pyarrow")


def _missing_path(exc: BaseException) -> str:
    name = getattr(exc, "filename", None)
    if not name:
        return f"file not found: {exc}"
    path = Path(os.fsdecode(name))
    parent = path.parent
    if not parent.is_dir():
        return f"directory {parent} does not exist: create it (mkdir -p {parent}) or choose " \
               f"another path"
    return f"{path} does not exist: check the path"


def _address_in_use(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


#: The table, checked in order; the first rule that matches explains the failure.
RULES: tuple[Rule, ...] = (
    Rule("settings", lambda e: isinstance(e, SettingsError),
         lambda e: f"{e}: fix or unset it (`fraudstream --help` lists every variable)"),
    Rule("kafka-unreachable", _is_kafka_unreachable,
         lambda e: f"cannot reach Kafka at {_kafka_address()}: {KAFKA_HINT}"),
    Rule("timeout", lambda e: isinstance(e, TimeoutError) and not _module_is(e, "redis"),
         lambda e: f"timed out ({_first_line(e) if str(e) else 'no answer'}): is the stack "
                   f"healthy? `fraudstream stack status`; Kafka at {_kafka_address()}"),
    Rule("kafka-error", _is_kafka_error,
         lambda e: f"Kafka at {_kafka_address()} refused the request: {_first_line(e)}"),
    Rule("redis-unreachable", _is_redis_unreachable,
         lambda e: f"cannot reach Redis at {_redis_address()}: {REDIS_HINT}"),
    Rule("unreadable-log", lambda e: isinstance(e, LogFileError),
         lambda e: f"{e}: pass a .jsonl log or a Parquet log from `fraudstream generate`"),
    Rule("unreadable-file", _is_arrow,
         lambda e: f"cannot read the file: {_first_line(e)}"),
    Rule("missing-path", lambda e: isinstance(e, FileNotFoundError), _missing_path),
    Rule("permission", lambda e: isinstance(e, PermissionError),
         lambda e: f"permission denied: {getattr(e, 'filename', None) or e}"),
    Rule("is-a-directory", lambda e: isinstance(e, IsADirectoryError),
         lambda e: f"{getattr(e, 'filename', None) or e} is a directory, a file is expected"),
    Rule("address-in-use", _address_in_use,
         lambda e: f"{_first_line(e)}: stop what uses that port or choose another port "
                   f"(see the command's --help)"),
)


def require_parent_dir(path: Path | None, option: str) -> None:
    """Refuse an output path whose directory does not exist, before any work is done."""
    if path is not None and not path.parent.is_dir():
        raise click.ClickException(f"{option}: directory {path.parent} does not exist: create "
                                   f"it (mkdir -p {path.parent}) or choose another path")


def explain(exc: BaseException) -> str | None:
    """The one line that explains an expected failure, or None for a bug (keep its traceback).

    An error raised `from` another is explained by its cause when it has no rule itself.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for rule in RULES:
            if rule.matches(current):
                return rule.explain(current)
        current = current.__cause__
    return None


def rule_name(exc: BaseException) -> str | None:
    """Which rule explains `exc` (for tests), or None."""
    for rule in RULES:
        if rule.matches(exc):
            return rule.name
    return None
