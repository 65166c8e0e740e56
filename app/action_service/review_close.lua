#!lua
-- Close one review (fraud | legitimate) and apply what follows in one atomic call, as
-- decide.lua does for release and confirm (see docs/action-service.md, "Review queue").
--
-- KEYS (one slot, see redis_keys.review_close_keys): 1 the close record (hash) 2 the shard's
--       review stream 3 its open set (zset) 4 card (hash) 5 card history (list) 6 the shard's
--       effects (stream) 7 its labels outbox (stream)
-- ARGV: 1 the review's entry id  2 idempotency key  3 fingerprint  4 outcome (fraud |
--       legitimate)  5 reason  6 by (the token's name)  7 history kept  8 card_id (as read)
-- Returns {verdict, outcome, card_outcome, closed_at_ms, effect_id, by, reason, key}: verdict
-- is created | replay (same key and body) | closed (closed before under another key or body:
-- the stored close) | missing (no such review).
--
-- fraud: the transaction's label is 1 and the card is frozen (if it is not already);
-- legitimate: its label is 0, and a card frozen for this very transaction is released.
-- Every check comes before the first write; exactly one label per closed review.

local record, reviews, open, card, history, effects, labels =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local entry_id, key, fingerprint, outcome, reason, by, kept, card_arg =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8]

local known = redis.call('HMGET', record, 'idempotency_key', 'fingerprint', 'outcome',
  'card_outcome', 'closed_at_ms', 'effect_id', 'by', 'reason')
if known[1] then
  local verdict = 'closed'
  if known[1] == key and known[2] == fingerprint then verdict = 'replay' end
  return {verdict, known[3], known[4], known[5], known[6], known[7], known[8], known[1]}
end
if outcome ~= 'fraud' and outcome ~= 'legitimate' then
  return redis.error_reply('ERR unknown review outcome ' .. outcome)
end
local found = redis.call('XRANGE', reviews, entry_id, entry_id)
if #found == 0 then
  return {'missing', '', '', '', '', '', '', ''}
end
local fields = {}
local flat = found[1][2]
for i = 1, #flat, 2 do fields[flat[i]] = flat[i + 1] end
if fields['card_id'] ~= card_arg then
  return redis.error_reply('ERR review ' .. entry_id .. ' is not of card ' .. card_arg)
end
for _, pair in ipairs({{card, 'hash'}, {history, 'list'}, {labels, 'stream'}}) do
  local t = redis.call('TYPE', pair[1])['ok']
  if t ~= 'none' and t ~= pair[2] then
    return redis.error_reply('WRONGTYPE ' .. pair[1] .. ' is a ' .. t .. ', expected ' .. pair[2])
  end
end

local t = redis.call('TIME')
local now_ms = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local txn_id, card_id = fields['txn_id'], fields['card_id']
local state = redis.call('HMGET', card, 'status', 'txn_id')
local card_outcome, label = 'unchanged', '0'
if outcome == 'fraud' then
  label = '1'
  if state[1] == 'frozen' then
    card_outcome = 'already_frozen'
  else
    card_outcome = 'frozen'
  end
elseif state[1] == 'frozen' and state[2] == txn_id then
  card_outcome = 'released'
end

-- the first write
local effect_id = redis.call('XADD', effects, '*', 'type', 'review_' .. outcome,
  'idempotency_key', key, 'card_id', card_id, 'txn_id', txn_id, 'applied_at_ms', now_ms,
  'outcome', card_outcome, 'by', by, 'review_id', entry_id)
if card_outcome == 'frozen' then
  redis.call('HSET', card, 'status', 'frozen', 'frozen_at_ms', now_ms, 'reason',
    'review ' .. entry_id .. ' closed as fraud by ' .. by .. ': ' .. reason, 'txn_id', txn_id,
    'idempotency_key', key, 'score', fields['score'] or '', 'model_version',
    fields['model_version'] or '', 'explanation', fields['explanation'] or '', 'decided_by',
    fields['decided_by'] or '', 'rule', fields['rule'] or '')
elseif card_outcome == 'released' then
  redis.call('HSET', card, 'status', 'active', 'released_at_ms', now_ms, 'released_by', by,
    'release_reason', reason)
end
if outcome == 'fraud' then
  redis.call('HSET', card, 'confirmed_at_ms', now_ms, 'confirmed_by', by, 'confirmed_txn_id',
    txn_id)
  redis.call('HINCRBY', card, 'confirmed_total', 1)
end
redis.call('RPUSH', history, cjson.encode({event = 'review_' .. outcome, at_ms = now_ms,
  by = by, reason = reason, txn_id = txn_id, idempotency_key = key, effect_id = effect_id,
  review_id = entry_id, card = card_outcome}))
redis.call('LTRIM', history, -kept, -1)
redis.call('XADD', labels, '*', 'label_id', effects .. '/' .. effect_id, 'card_id', card_id,
  'txn_id', txn_id, 'label', label, 'reported_at_ms', now_ms, 'source', 'analyst_review',
  'by', by)
redis.call('ZREM', open, entry_id)
redis.call('HSET', record, 'idempotency_key', key, 'fingerprint', fingerprint, 'outcome',
  outcome, 'card_outcome', card_outcome, 'closed_at_ms', now_ms, 'effect_id', effect_id, 'by',
  by, 'reason', reason, 'card_id', card_id, 'txn_id', txn_id)
return {'created', outcome, card_outcome, now_ms, effect_id, by, reason, key}
