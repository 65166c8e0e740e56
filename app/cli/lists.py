"""`fraudstream lists add | remove | show`: the allow/block lists, through the action service."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import click

_KIND = click.Choice(["card", "merchant"])


def _call(method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """One request to the action service (FRAUDSTREAM_ACTION_SERVICE_URL, the first full-access
    token); an error answer becomes one line naming the field."""
    return _request(method, path, body, {})


def _request(method: str, path: str, body: dict[str, Any] | None,
             headers: dict[str, str]) -> dict[str, Any]:
    from app.security.tokens import client_token
    from app.settings import load_settings

    settings = load_settings()
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"{settings.action_service_url}{path}", data=data, method=method,
        headers={"Authorization": f"Bearer {client_token(settings)}",
                 "Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - configured URL
            return json.loads(response.read())  # type: ignore[no-any-return]
    except urllib.error.HTTPError as exc:
        try:
            answer = json.loads(exc.read())
        except ValueError:
            answer = {"error": exc.reason, "field": None}
        field = f" (field: {answer['field']})" if answer.get("field") else ""
        if answer.get("position"):
            pos = answer["position"]
            field += f" at line {pos['line']}, column {pos['column']}"
        raise click.ClickException(f"the action service answered {exc.code}: "
                                   f"{answer.get('error')}{field}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise click.ClickException(
            f"the action service at {settings.action_service_url} is not reachable ({reason}); "
            "start it (`fraudstream action-service`) or set FRAUDSTREAM_ACTION_SERVICE_URL"
        ) from None


def _path(kind: str, entity_id: str) -> str:
    return f"/v1/lists/{kind}/{urllib.parse.quote(entity_id, safe='')}"


@click.group("lists")
def lists() -> None:
    """Allow and block lists of cards and merchants (allow: a model freeze becomes an alert;
    block: the card's next transaction freezes it). Written through the action service to the
    compacted control topic, which every worker follows."""


@lists.command("add")
@click.argument("list_name", metavar="allow|block", type=click.Choice(["allow", "block"]))
@click.argument("kind", type=_KIND)
@click.argument("entity_id")
@click.option("--reason", required=True, help="Why (recorded with the entry).")
def add(list_name: str, kind: str, entity_id: str, reason: str) -> None:
    """Put a card or merchant on a list (replacing its entry on the other list, if any)."""
    entry = _call("PUT", _path(kind, entity_id), {"list": list_name, "reason": reason})
    click.echo(f"{entry['kind']} {entry['id']} is on the {entry['list']} list "
               f"(by {entry['by']})")


@lists.command("remove")
@click.argument("kind", type=_KIND)
@click.argument("entity_id")
def remove(kind: str, entity_id: str) -> None:
    """Take a card or merchant off the lists (nothing to do if it is on none)."""
    _call("DELETE", _path(kind, entity_id))
    click.echo(f"{kind} {entity_id} is on no list")


@lists.command("show")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON entry a line (the file `backtest --lists` reads).")
def show(as_json: bool) -> None:
    """Every entry: list, kind, id, who, why."""
    entries = _call("GET", "/v1/lists")["entries"]
    for e in entries:
        if as_json:
            click.echo(json.dumps(e, separators=(",", ":")))
        else:
            click.echo(f"{e['list']:<5}  {e['kind']:<8}  {e['id']}  by {e['by']}: {e['reason']}")
    if not as_json:
        click.echo(f"{len(entries)} entries", err=True)
