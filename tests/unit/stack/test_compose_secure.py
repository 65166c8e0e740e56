"""docker-compose.secure.yml parses, uses only known settings and takes secrets from files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from app.settings import Settings, load_settings
from app.stack.secure import SERVICE_REDIS_COMMANDS, SERVICE_REDIS_KEYS

ROOT = Path(__file__).resolve().parents[3]
SETTINGS_VARS = {f.metadata["env"] for f in dataclasses.fields(Settings)}
SECRET_VARS = {f.metadata["env"] for f in dataclasses.fields(Settings) if f.metadata.get("secret")}


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.secure.yml").read_text())


def test_app_services_are_secure_and_read_secrets_from_files() -> None:
    compose = _compose()
    declared = set(compose["secrets"])
    for name in ("topics", "worker", "action-service"):
        service = compose["services"][name]
        env = service["environment"]
        assert set(env) <= SETTINGS_VARS
        assert not set(env) & SECRET_VARS, "secrets go in files, not in the environment"
        settings = load_settings({k: str(v) for k, v in env.items()})
        assert settings.kafka_security_protocol == "SASL_SSL"
        assert settings.effective_redis_url.startswith("rediss://")
        for path in (settings.kafka_sasl_password_file, settings.redis_password_file,
                     settings.action_token_file):
            assert path is not None and path.parent == Path("/run/secrets")
            assert path.name in service["secrets"] and path.name in declared


def test_redis_acl_matches_the_local_profile() -> None:
    command = " ".join(_compose()["services"]["redis"]["command"])
    for verb in SERVICE_REDIS_COMMANDS:
        assert f"+{verb.replace('|', chr(92) + '|')}" in command, verb
    for pattern in SERVICE_REDIS_KEYS:
        assert f'"~{pattern}"' in command, pattern
    assert "--user default off" in command and "--port 0" in command
