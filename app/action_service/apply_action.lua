#!lua
-- Record an idempotency key and apply its effect in one atomic step (see docs/action-service.md).
--
-- KEYS: 1 idem:<key> (hash)  2 card:<card_id> (hash)  3 card:<card_id>:alerts (list)
--       4 effects (stream)  5 alerts (stream)  6 stats (hash of durable counters)
-- ARGV: 1 idempotency_key  2 fingerprint  3 type  4 card_id  5 txn_id  6 ts_ms  7 score
--       8 model_version  9 decided_at_ms  10 ttl_ms  11 max_age_ms (ttl - margin)
--       12 max_skew_ms (margin)  13 alerts kept per card  14 freeze reason
-- Returns {verdict, now_ms[, outcome, applied_at_ms, effect_id]}: verdict is created | replay |
-- mismatch | gone | future; the last three (created and replay only) come from the key's
-- record. Replies are kept this small on purpose: parsing them is the client's main cost.
--
-- Every check comes before the first write, so a refused request writes nothing, and a
-- created one writes the effect, its `effects` entry and the key record together.

local idem, card, card_alerts, effects, alerts = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local key, fingerprint, action_type = ARGV[1], ARGV[2], ARGV[3]
local card_id, txn_id, ts_ms, score = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local model_version, decided_at_ms = ARGV[8], ARGV[9]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_ms = string.format('%d', now)

local function expect_type(name, wanted)
  local found = redis.call('TYPE', name)['ok']
  if found ~= 'none' and found ~= wanted then
    return redis.error_reply('WRONGTYPE ' .. name .. ' is a ' .. found .. ', expected ' .. wanted)
  end
  return nil
end

local bad = expect_type(idem, 'hash')
if bad then return bad end

-- A known key answers from its record, whatever the action's age: a replay is harmless.
-- (Every record has a fingerprint, so a missing one means a missing key.)
local known = redis.call('HMGET', idem, 'fingerprint', 'outcome', 'applied_at_ms', 'effect_id')
if known[1] then
  if known[1] ~= fingerprint then
    return {'mismatch', now_ms}
  end
  -- counted in Redis, not only in the process, so it survives service restarts
  redis.call('HINCRBY', KEYS[6], 'replays', 1)
  return {'replay', now_ms, known[2], known[3], known[4]}
end

-- Unknown key: refuse actions old enough that their key may already have expired (they
-- could fire a second time), and actions from too far in the future (they would stretch
-- that window). Both use this server's clock, so the rule cannot disagree with the TTL.
local decided = tonumber(decided_at_ms)
if now - decided >= tonumber(ARGV[11]) then
  return {'gone', now_ms}
end
if decided - now > tonumber(ARGV[12]) then
  return {'future', now_ms}
end

if action_type ~= 'freeze_card' and action_type ~= 'alert_customer' then
  return redis.error_reply('ERR unknown action type')
end
for _, pair in ipairs({{card, 'hash'}, {card_alerts, 'list'}, {effects, 'stream'}, {alerts, 'stream'}}) do
  bad = expect_type(pair[1], pair[2])
  if bad then return bad end
end

local outcome
if action_type == 'freeze_card' then
  if redis.call('HGET', card, 'status') == 'frozen' then
    outcome = 'already_frozen' -- the card stays as it is; the key still counts as applied
  else
    redis.call('HSET', card, 'status', 'frozen', 'frozen_at_ms', now_ms, 'reason', ARGV[14],
      'txn_id', txn_id, 'idempotency_key', key, 'score', score, 'model_version', model_version)
    outcome = 'frozen'
  end
else
  local alert_id = redis.call('XADD', alerts, '*', 'idempotency_key', key, 'card_id', card_id,
    'txn_id', txn_id, 'ts_ms', ts_ms, 'score', score, 'model_version', model_version,
    'queued_at_ms', now_ms)
  redis.call('RPUSH', card_alerts, cjson.encode({alert_id = alert_id, txn_id = txn_id,
    idempotency_key = key, ts_ms = ts_ms, score = score, model_version = model_version,
    queued_at_ms = now_ms}))
  redis.call('LTRIM', card_alerts, -tonumber(ARGV[13]), -1)
  redis.call('HINCRBY', card, 'alerts_total', 1)
  outcome = 'alert_queued'
end

local effect_id = redis.call('XADD', effects, '*', 'type', action_type, 'idempotency_key', key,
  'card_id', card_id, 'txn_id', txn_id, 'applied_at_ms', now_ms, 'outcome', outcome)
redis.call('HSET', idem, 'idempotency_key', key, 'fingerprint', fingerprint, 'type', action_type,
  'card_id', card_id, 'txn_id', txn_id, 'ts_ms', ts_ms, 'score', score,
  'model_version', model_version, 'decided_at_ms', decided_at_ms, 'outcome', outcome,
  'applied_at_ms', now_ms, 'effect_id', effect_id)
redis.call('PEXPIRE', idem, ARGV[10])
return {'created', now_ms, outcome, now_ms, effect_id}
