"""The action service: applies actions exactly once per idempotency key (aiohttp + Redis Lua)."""
