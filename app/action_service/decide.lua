#!lua
-- Record an analyst decision (release or confirm) and apply it in one atomic script call, like
-- apply_batch.lua does for actions (see docs/action-service.md, "Analyst decisions").
--
-- KEYS (all in the card's slot, see redis_keys.decision_keys): 1 the decision's record (hash,
--       key scoped to the card)  2 card (hash)  3 card history (list)  4 the shard's effects
--       (stream)  5 the shard's labels outbox (stream)
-- ARGV: 1 ttl_ms  2 history kept  3 idempotency key  4 fingerprint  5 decision (release |
--       confirm)  6 card_id  7 reason  8 txn_id ('' : none given)  9 by (the token's name)
-- Returns {verdict, outcome, applied_at_ms, effect_id, txn_id, by, reason}: verdict is created |
-- replay | mismatch; for created and replay the rest is the decision's record.
--
-- Every check comes before the first write (the XADD to effects), so a refused decision writes
-- nothing; a created one writes the effect, its ledger entry, its label (when it makes one) and
-- its record together.

local record, card, history, effects, labels = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local ttl_ms, kept, key, fingerprint = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local decision, card_id, reason, txn_id, by = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]

local known = redis.call('HMGET', record, 'fingerprint', 'outcome', 'applied_at_ms',
  'effect_id', 'txn_id', 'by', 'reason')
if known[1] then
  if known[1] ~= fingerprint then
    return {'mismatch', '', '', '', '', '', ''}
  end
  return {'replay', known[2], known[3], known[4], known[5], known[6], known[7]}
end

if decision ~= 'release' and decision ~= 'confirm' then
  return redis.error_reply('ERR unknown decision ' .. decision)
end
for _, pair in ipairs({{card, 'hash'}, {history, 'list'}, {labels, 'stream'}}) do
  local found = redis.call('TYPE', pair[1])['ok']
  if found ~= 'none' and found ~= pair[2] then
    return redis.error_reply('WRONGTYPE ' .. pair[1] .. ' is a ' .. found .. ', expected ' ..
      pair[2])
  end
end

local t = redis.call('TIME')
local now_ms = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local state = redis.call('HMGET', card, 'status', 'txn_id')
local outcome, label = 'confirmed', '1'
if decision == 'release' then
  if state[1] == 'frozen' then
    outcome, label = 'released', '0' -- the freeze was wrong: its transaction was legitimate
    txn_id = state[2] or ''
  else
    outcome, label = 'not_frozen', nil -- nothing to release; the key is recorded all the same
  end
elseif txn_id == '' then
  txn_id = state[2] or '' -- confirm without txn_id: the transaction of the card's last freeze
end

-- the first write
local effect_id = redis.call('XADD', effects, '*', 'type', decision .. '_card', 'idempotency_key',
  key, 'card_id', card_id, 'txn_id', txn_id, 'applied_at_ms', now_ms, 'outcome', outcome,
  'by', by)
if outcome == 'released' then
  redis.call('HSET', card, 'status', 'active', 'released_at_ms', now_ms, 'released_by', by,
    'release_reason', reason)
elseif outcome == 'confirmed' then
  redis.call('HSET', card, 'confirmed_at_ms', now_ms, 'confirmed_by', by, 'confirmed_txn_id',
    txn_id)
  redis.call('HINCRBY', card, 'confirmed_total', 1)
end
if outcome ~= 'not_frozen' then
  redis.call('RPUSH', history, cjson.encode({event = outcome, at_ms = now_ms, by = by,
    reason = reason, txn_id = txn_id, idempotency_key = key, effect_id = effect_id}))
  redis.call('LTRIM', history, -kept, -1)
end
if label then
  -- the outbox entry: forwarded to the Kafka topic `labels` (label_outbox.py); its label_id
  -- names the ledger entry, stream and id (redis_keys.analyst_label_id): an entry id alone
  -- repeats across shards when two streams add in the same millisecond
  redis.call('XADD', labels, '*', 'label_id', effects .. '/' .. effect_id, 'card_id', card_id,
    'txn_id', txn_id,
    'label', label, 'reported_at_ms', now_ms, 'source', 'analyst_' .. decision, 'by', by)
end
redis.call('HSET', record, 'idempotency_key', key, 'fingerprint', fingerprint, 'decision',
  decision, 'card_id', card_id, 'txn_id', txn_id, 'reason', reason, 'by', by, 'outcome', outcome,
  'applied_at_ms', now_ms, 'effect_id', effect_id)
redis.call('PEXPIRE', record, ttl_ms)
return {'created', outcome, now_ms, effect_id, txn_id, by, reason}
