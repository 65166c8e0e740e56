"""Where watch reads from: the workers' and action service's /metrics, and Kafka's offsets."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from app.kafka.inspect import admin_client, start_or_close
from app.settings import Settings
from app.watch.frame import PartitionOffsets, Reading
from app.watch.samples import parse


class Sources:
    """Open HTTP and Kafka clients for the lifetime of one `watch`."""

    def __init__(self, settings: Settings, workers: Sequence[str], service: str | None,
                 *, timeout_s: float = 2.0, quality: str | None = None) -> None:
        self.settings = settings
        self.quality = quality
        self.workers = list(workers)
        self.service = service
        self.timeout_s = timeout_s
        self.topic = settings.topic("transactions")
        self._http: Any = None
        self._admin: Any = None
        self._consumer: Any = None

    async def _page(self, base: str) -> str | None:
        import aiohttp

        try:
            async with self._http.get(f"{base.rstrip('/')}/metrics") as resp:
                if resp.status != 200:
                    return None
                return await resp.text()
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None

    async def offsets(self) -> dict[int, PartitionOffsets]:
        """End and committed offset of every partition of the transactions topic."""
        from aiokafka import TopicPartition

        await self._consumer._client.force_metadata_update()  # noqa: SLF001 - no public way
        parts = self._consumer.partitions_for_topic(self.topic) or set()
        tps = [TopicPartition(self.topic, p) for p in sorted(parts)]
        if not tps:
            return {}
        ends = await self._consumer.end_offsets(tps)
        committed = await self._admin.list_consumer_group_offsets(self.settings.app_id)
        out = {}
        for tp in tps:
            meta = committed.get(tp)
            done = meta.offset if meta is not None and meta.offset >= 0 else None
            out[tp.partition] = PartitionOffsets(ends[tp], done)
        return out

    async def read(self) -> Reading:
        """One reading of everything, taken concurrently."""
        at = time.monotonic()
        pages = await asyncio.gather(*(self._page(w) for w in self.workers))
        service_page = await self._page(self.service) if self.service else None
        quality_page = await self._page(self.quality) if self.quality else None
        kafka_error = None
        try:
            offsets = await asyncio.wait_for(self.offsets(), self.timeout_s * 2)
        except Exception as exc:  # noqa: BLE001 - shown on screen; watch keeps going
            offsets, kafka_error = {}, f"{type(exc).__name__}: {exc}".splitlines()[0]
        texts = [p for p in pages if p is not None]
        return Reading(at_s=at, workers=parse(texts), workers_up=len(texts),
                       workers_total=len(self.workers),
                       service=parse([service_page] if service_page else []),
                       service_up=service_page is not None, offsets=offsets,
                       kafka_error=kafka_error,
                       quality=parse([quality_page] if quality_page else []),
                       quality_up=quality_page is not None)


@asynccontextmanager
async def open_sources(settings: Settings, workers: Sequence[str],
                       service: str | None, quality: str | None = None) -> AsyncIterator[Sources]:
    """Sources with their clients started; everything closed on exit."""
    import aiohttp
    from aiokafka import AIOKafkaConsumer

    sources = Sources(settings, workers, service, quality=quality)
    async with AsyncExitStack() as stack:
        sources._http = await stack.enter_async_context(aiohttp.ClientSession(  # noqa: SLF001
            timeout=aiohttp.ClientTimeout(total=sources.timeout_s)))
        sources._admin = await stack.enter_async_context(admin_client(settings))  # noqa: SLF001
        consumer = AIOKafkaConsumer(bootstrap_servers=settings.effective_kafka_bootstrap,
                                    isolation_level=settings.isolation_level,
                                    enable_auto_commit=False)
        await start_or_close(consumer)
        stack.push_async_callback(consumer.stop)
        sources._consumer = consumer  # noqa: SLF001
        yield sources
