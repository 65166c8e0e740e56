"""`fraudstream watch`: a live terminal view of the running pipeline."""

from __future__ import annotations

import asyncio
from collections import deque

import click
from rich.console import Console

from app.settings import Settings, load_settings
from app.watch.frame import Frame, Reading

#: The window of the latency budget's view (seconds of readings).
BUDGET_WINDOW_S = 60.0


@click.command(context_settings={"max_content_width": 120})
@click.option("--worker", "workers", multiple=True, metavar="URL",
              help="A worker's web address (repeat for each) [default: "
                   "http://127.0.0.1:FRAUDSTREAM_WEB_PORT].")
@click.option("--action-service", "service", default=None, metavar="URL",
              help="The action service [default: FRAUDSTREAM_ACTION_SERVICE_URL].")
@click.option("--quality", "quality", default=None, metavar="URL",
              help="`fraudstream quality` (precision, recall) [default: "
                   "http://127.0.0.1:FRAUDSTREAM_QUALITY_PORT].")
@click.option("--interval", type=click.FloatRange(0.2, 60), default=1.0, show_default=True,
              help="Seconds between refreshes.")
@click.option("--demo", "from_demo", is_flag=True,
              help="Watch the pipeline the newest `fraudstream demo --keep` left running.")
@click.option("--once", is_flag=True,
              help="Print one screen (after two readings, for rates) and exit.")
@click.option("--duration", type=click.FloatRange(min=0), default=None,
              help="Stop after this many seconds [default: until Ctrl-C].")
def watch(workers: tuple[str, ...], service: str | None, quality: str | None, interval: float,
          from_demo: bool, once: bool, duration: float | None) -> None:
    """Events/s in and out, lag per partition, p50/p99 per hop, DLQ, late, effects, model,
    and drift: PSI per feature and of the score over 1 h and 24 h against the model's training
    reference, marked against FRAUDSTREAM_DRIFT_PSI_WATCH / _ALERT.

    Lag is the consumer group FRAUDSTREAM_APP_ID on the transactions topic (with
    FRAUDSTREAM_TOPIC_PREFIX); `--demo` watches what `fraudstream demo --keep` left running.
    """
    settings = load_settings()
    if from_demo:
        from app.cli.kept import kept_runs

        runs = kept_runs(settings.state_dir)
        if not runs:
            raise click.ClickException("no demo run is kept: run `fraudstream demo --keep` first")
        run = runs[-1]
        settings = settings.replace(topic_prefix=run.topic_prefix, app_id=run.app_id)
        workers, service = (run.worker_url,), run.service_url
    urls = list(workers) or [f"http://127.0.0.1:{settings.web_port}"]
    asyncio.run(_watch(settings, urls, service or settings.action_service_url,
                       interval=interval, once=once, duration=duration,
                       quality=quality or f"http://127.0.0.1:{settings.quality_port}"))


async def _watch(settings: Settings, workers: list[str], service: str, *, interval: float,
                 once: bool, duration: float | None, quality: str | None = None) -> None:
    from rich.live import Live

    from app.watch.frame import build_frame
    from app.watch.render import render
    from app.watch.sources import open_sources

    console = Console()
    title = f"fraudstream watch · {settings.app_id} · {settings.topic('transactions')}"
    loop = asyncio.get_running_loop()
    stop_at = None if duration is None else loop.time() + duration
    budget_s = settings.latency_budget_ms / 1000
    thresholds = (settings.drift_psi_watch, settings.drift_psi_alert)
    async with open_sources(settings, workers, service, quality) as sources:
        before = await sources.read()
        # readings of the last minute: the latency budget is shown over that window
        minute: deque[Reading] = deque([before])

        def frame_of(now: Reading) -> Frame:
            while len(minute) > 1 and now.at_s - minute[1].at_s >= BUDGET_WINDOW_S:
                minute.popleft()
            return build_frame(now, before, group=settings.app_id, minute_ago=minute[0],
                               budget_s=budget_s, drift_min_events=settings.drift_min_events,
                               drift_thresholds=thresholds)

        if once:
            await asyncio.sleep(interval)  # a second reading, for rates
            now = await sources.read()
            console.print(render(frame_of(now), title=title))
            return
        if not console.is_terminal:  # a log, a pipe, CI: one plain snapshot per interval
            while stop_at is None or loop.time() < stop_at:
                await asyncio.sleep(interval)  # the refresh period
                now = await sources.read()
                console.print(render(frame_of(now), title=title))
                minute.append(now)
                before = now
            return
        frame = build_frame(before, None, group=settings.app_id, budget_s=budget_s,
                            drift_min_events=settings.drift_min_events,
                            drift_thresholds=thresholds)
        with Live(render(frame, title=title), console=console, auto_refresh=False,
                  screen=False) as live:
            while stop_at is None or loop.time() < stop_at:
                await asyncio.sleep(interval)  # the refresh period
                now = await sources.read()
                live.update(render(frame_of(now), title=title), refresh=True)
                minute.append(now)
                before = now
