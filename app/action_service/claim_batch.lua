#!lua
-- Claim a batch of idempotency keys for their cards (Redis Cluster only; see cluster_batcher.py).
-- A key's claim lives in the key's own shard and says which fingerprint (so which card) owns the
-- key: the same key sent with another card is refused here, although its record would be in
-- another card shard. A single Redis checks and writes claims inside apply_batch.lua instead.
--
-- KEYS: one claim per action (string "<fingerprint> <card_id>"), all in one key shard (a slot).
-- ARGV: 1 claim ttl_ms  2 max_age_ms (ttl - margin)  3 max_skew_ms (margin), then three per
--       action i: 4+3i fingerprint, card_id, decided_at_ms
-- Returns {now_ms, then one verdict per action}: held (this fingerprint owns the key already:
-- apply, it may be a replay), claimed (new: written now, apply), mismatch, gone, future (nothing
-- written; the same rules as apply_batch.lua, so an unknown key is refused here as it would be
-- there).

local claim_ttl, max_age, max_skew = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local reply = {string.format('%d', now)}

for i = 1, #KEYS do
  local claim, fingerprint, card_id = KEYS[i], ARGV[1 + 3 * i], ARGV[2 + 3 * i]
  local decided = tonumber(ARGV[3 + 3 * i])
  local verdict
  local owner_is = fingerprint .. ' ' .. card_id
  local ok, owner = pcall(redis.call, 'GET', claim)
  if not ok then
    verdict = 'error'
  elseif owner then
    if owner == owner_is then verdict = 'held' else verdict = 'mismatch' end
  elseif now - decided >= max_age then
    verdict = 'gone'
  elseif decided - now > max_skew then
    verdict = 'future'
  else
    redis.call('SET', claim, owner_is, 'PX', claim_ttl)
    verdict = 'claimed'
  end
  reply[#reply + 1] = verdict
end
return reply
