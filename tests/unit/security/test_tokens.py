"""Action-service tokens: several at once, from files, read-only, dev token loopback-only."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.main import cli
from app.security.secret import SecretError
from app.security.tokens import LOCAL_DEV_TOKEN, client_token, is_loopback, service_tokens
from app.settings import load_settings


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"])
def test_loopback_hosts(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "example.com", ""])
def test_other_hosts(host):
    assert not is_loopback(host)


def test_no_token_on_a_public_address_is_refused_in_one_line():
    with pytest.raises(SecretError) as info:
        service_tokens(load_settings({}), "0.0.0.0")
    assert "\n" not in str(info.value) and "FRAUDSTREAM_ACTION_TOKEN" in str(info.value)


def test_no_token_on_loopback_is_the_dev_token():
    tokens = service_tokens(load_settings({}), "127.0.0.1")
    assert tokens.dev and tokens.access(LOCAL_DEV_TOKEN) == "write"
    assert client_token(load_settings({})) == LOCAL_DEV_TOKEN


def test_configured_tokens_replace_the_dev_token():
    tokens = service_tokens(load_settings({"FRAUDSTREAM_ACTION_TOKEN": "new-1, old-2"}), "0.0.0.0")
    assert not tokens.dev
    assert tokens.access("new-1") == "write" and tokens.access("old-2") == "write"
    assert tokens.access(LOCAL_DEV_TOKEN) is None and tokens.access("") is None


def test_tokens_from_files(tmp_path: Path):
    write = tmp_path / "tokens"
    write.write_text("# rotated 2026-11\nfile-a\n\nfile-b\n")
    read = tmp_path / "read"
    read.write_text("reader\n")
    settings = load_settings({"FRAUDSTREAM_ACTION_TOKEN": "env-a",
                              "FRAUDSTREAM_ACTION_TOKEN_FILE": str(write),
                              "FRAUDSTREAM_ACTION_READ_TOKEN_FILE": str(read)})
    tokens = service_tokens(settings, "0.0.0.0")
    assert [tokens.access(t) for t in ("env-a", "file-a", "file-b", "reader", "x")] == [
        "write", "write", "write", "read", None]
    assert client_token(settings) == "env-a"


def test_unreadable_or_empty_token_file_names_the_variable_not_the_content(tmp_path: Path):
    with pytest.raises(SecretError, match="FRAUDSTREAM_ACTION_TOKEN_FILE"):
        service_tokens(load_settings({}, action_token_file=tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n")
    with pytest.raises(SecretError, match="holds no token"):
        service_tokens(load_settings({}, action_token_file=empty))


def test_empty_token_is_refused():
    with pytest.raises(SecretError, match="must not be empty"):
        service_tokens(load_settings({}, action_token=" , "))


def test_a_token_cannot_be_both_full_and_read_only():
    with pytest.raises(SecretError, match="overlap"):
        service_tokens(load_settings({}, action_token="a,b", action_read_token="b"))


def test_client_needs_a_token_for_a_remote_service():
    remote = load_settings({}, action_service_url="https://actions.bank.example")
    with pytest.raises(SecretError, match="actions.bank.example"):
        client_token(remote)
    assert client_token(remote.replace(action_token="t1,t0")) == "t1"


def test_secrets_stay_out_of_repr():
    settings = load_settings({}, action_token="tok-SECRET", action_read_token="ro-SECRET",
                             kafka_sasl_password="kafka-SECRET", redis_password="redis-SECRET")
    assert "SECRET" not in repr(settings)
    assert "SECRET" not in repr(service_tokens(settings))


def test_cli_refuses_a_public_address_without_a_token(monkeypatch):
    for name in ("FRAUDSTREAM_ACTION_TOKEN", "FRAUDSTREAM_ACTION_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(cli, ["action-service", "--host", "0.0.0.0", "--port", "1"])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "FRAUDSTREAM_ACTION_TOKEN" in lines[0], result.output


def test_worker_without_a_token_for_a_remote_service_stops_in_one_line(monkeypatch):
    monkeypatch.delenv("FRAUDSTREAM_ACTION_TOKEN", raising=False)
    monkeypatch.delenv("FRAUDSTREAM_ACTION_TOKEN_FILE", raising=False)
    monkeypatch.setenv("FRAUDSTREAM_ACTION_SERVICE_URL", "http://actions.internal:8088")
    result = CliRunner().invoke(cli, ["worker"])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "actions.internal" in lines[0], result.output


def test_named_tokens_carry_their_name_and_unnamed_ones_a_derived_one(tmp_path: Path):
    write = tmp_path / "tokens"
    write.write_text("alice:tok-alice\ntok-plain\n")
    settings = load_settings({"FRAUDSTREAM_ACTION_TOKEN_FILE": str(write),
                              "FRAUDSTREAM_ACTION_READ_TOKEN": "bob:tok-bob"})
    tokens = service_tokens(settings, "0.0.0.0")
    assert tokens.identify("tok-alice") == ("write", "alice")
    assert tokens.identify("tok-bob") == ("read", "bob")
    access, name = tokens.identify("tok-plain")  # type: ignore[misc]
    assert access == "write" and name.startswith("token-") and "tok-plain" not in name
    assert name == tokens.identify("tok-plain")[1]  # type: ignore[index]  # stable
    assert tokens.identify("alice:tok-alice") is None and tokens.identify("alice") is None
    assert tokens.access("tok-alice") == "write"
    assert client_token(settings) == "tok-alice"  # the dispatcher sends the token, not the name


def test_the_dev_token_is_named_dev():
    assert service_tokens(load_settings({}), "127.0.0.1").identify(LOCAL_DEV_TOKEN) == (
        "write", "dev")
