"""Typed aiohttp application keys shared by the app factory and the route handlers."""

from __future__ import annotations

from aiohttp import web
from redis.asyncio import Redis

from app.action_service.metrics import ServiceMetrics
from app.action_service.store import ActionStore
from app.security.tokens import TokenSet
from app.settings import Settings

SETTINGS = web.AppKey("settings", Settings)
METRICS = web.AppKey("metrics", ServiceMetrics)
REDIS = web.AppKey("redis", Redis)
STORE = web.AppKey("store", ActionStore)
#: Idempotency keys whose POST this process is handling right now (answered 409 if repeated).
IN_FLIGHT = web.AppKey("in_flight", set[str])
#: The bearer tokens this service accepts (full-access and read-only).
TOKENS = web.AppKey("tokens", TokenSet)
