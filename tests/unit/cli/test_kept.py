"""What a kept demo run tells the user: where things are and the next commands."""

from __future__ import annotations

from app.cli.kept import KeptRun

P = "demo-1."


def _run() -> KeptRun:
    return KeptRun(workdir="/s/demo/demo-1", topic_prefix=P, app_id="fraudstream-demo-1",
                   service_url="http://127.0.0.1:1", worker_url="http://127.0.0.1:2",
                   pids={"action service": 11, "worker": 12})


def test_look_around_names_urls_token_and_next_commands() -> None:
    lines = _run().look_around("tok", "c0000001")
    text = "\n".join(lines)
    assert "http://127.0.0.1:1" in text and "token: tok" in text and "/metrics" in text
    assert "fraudstream watch --demo" in text and "fraudstream demo --stop" in text
    assert "Bearer tok' http://127.0.0.1:1/v1/cards/c0000001" in text
    # the demo's whole output fits one 80x40 screen: its closing block stays this short, and
    # its last lines are the two that stop everything
    assert len(lines) <= 10
    assert lines[-2].strip().startswith("fraudstream demo --stop")
    assert lines[-1].strip().startswith("fraudstream stack down")


def test_look_around_says_how_lists_reach_the_demo_action_service() -> None:
    lines = _run().look_around("tok", None)
    assert ("  export FRAUDSTREAM_ACTION_SERVICE_URL=http://127.0.0.1:1; fraudstream lists show"
            in lines)
    assert "Look around:" in lines[-8:]  # where test_demo looks for it
