#!lua
-- Record a batch of idempotency keys and apply their effects, action by action, in one atomic
-- script call (see docs/action-service.md). The service's apply batcher sends everything pending
-- as one call; a batch of one is the low-load case.
--
-- KEYS: w per action i (i = 0..n-1; w = 8 with claims, else 7), see redis_keys.py:
--       1+wi idem (hash)  2+wi card (hash)  3+wi card alerts (list)  4+wi the card's shard's
--       effects (stream)  5+wi its alerts (stream)  6+wi its stats (hash of counters)
--       7+wi the card's history (list), all in the card's shard; with claims, 8+wi the key's
--       claim (string "<fingerprint> <card_id>", in the KEY's shard).
--       On a single Redis one call carries any mix of shards, claims included. On a cluster a
--       call carries one card shard (one slot) and no claims: claim_batch.lua took them first.
-- ARGV: 1 ttl_ms  2 max_age_ms (ttl - margin)  3 max_skew_ms (margin)  4 alerts kept per card
--       5 claim ttl_ms ('' : no claim keys), then thirteen per action i: 6+13i idempotency_key,
--       fingerprint, type, card_id, txn_id, ts_ms, score, model_version, decided_at_ms, reason,
--       explanation (a JSON array of {name, value, contribution}, '' when absent), decided_by
--       (model | allow_list | block_list), rule (the list entry that decided, '' for the model)
-- Returns {now_ms, then four per action: verdict, outcome, applied_at_ms, effect_id}. verdict is
-- created | replay | mismatch | gone | future | error; outcome, applied_at_ms and effect_id are
-- the key's record for created and replay, '' otherwise; for error, outcome is the message.
--
-- `apply_one` is the only per-action logic. Every check in it comes before its first write, so
-- a refused action writes nothing, and a created one writes the effect, its `effects` entry and
-- the key record together. Actions of one batch run one after the other, in the order sent.

local ttl_ms, max_age, max_skew, alerts_kept = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]),
  tonumber(ARGV[4])
local claim_ttl = ARGV[5]
local width = 7
if claim_ttl ~= '' then width = 8 end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_ms = string.format('%d', now)

local function wrong_type(name, wanted)
  local found = redis.call('TYPE', name)['ok']
  if found ~= 'none' and found ~= wanted then
    return 'WRONGTYPE ' .. name .. ' is a ' .. found .. ', expected ' .. wanted
  end
  return nil
end

-- A shard's alerts stream is only ever appended to below, so one type check per stream and
-- batch holds for every alert of it (a wrong one refuses each alert, before its writes). The
-- effects stream needs none: its XADD is an action's first write, so a wrong type refuses the
-- action before anything is written.
local alerts_checked = {}
local function alerts_bad(alerts)
  local bad = alerts_checked[alerts]
  if bad == nil then
    bad = wrong_type(alerts, 'stream') or false
    alerts_checked[alerts] = bad
  end
  return bad
end

-- One action: k = 7 key names (idem, card, card alerts, effects, alerts, stats, history) and
-- the claim (or nil), a = 13 arguments (see ARGV above). Returns verdict, outcome, applied_at_ms,
-- effect_id.
local function apply_one(k, a)
  local idem, card, card_alerts, effects, alerts, stats = k[1], k[2], k[3], k[4], k[5], k[6]
  local history, claim = k[7], k[8]
  local key, fingerprint, action_type, card_id, txn_id = a[1], a[2], a[3], a[4], a[5]
  local ts_ms, score, model_version, decided_at_ms, reason = a[6], a[7], a[8], a[9], a[10]
  local explanation, decided_by, rule = a[11], a[12], a[13]
  local decider = 'model ' .. model_version
  if rule ~= '' then decider = decided_by .. ' ' .. rule end

  -- The claim catches the key reused with another card, whose record would be in another
  -- card shard (the key is derived from type and txn_id only, the fingerprint covers the card).
  -- (GET refuses a claim of the wrong type with an error, before any write)
  local owner_is = fingerprint .. ' ' .. card_id
  if claim then
    local owner = redis.call('GET', claim)
    if owner and owner ~= owner_is then
      return 'mismatch', '', '', ''
    end
  end

  -- (HMGET refuses an idem key of the wrong type with an error, before any write)
  -- A known key answers from its record, whatever the action's age: a replay is harmless.
  -- (Every record has a fingerprint, so a missing one means a missing key.)
  local known = redis.call('HMGET', idem, 'fingerprint', 'outcome', 'applied_at_ms', 'effect_id')
  if known[1] then
    if known[1] ~= fingerprint then
      return 'mismatch', '', '', ''
    end
    -- counted in Redis, not only in the process, so it survives service restarts
    redis.call('HINCRBY', stats, 'replays', 1)
    return 'replay', known[2], known[3], known[4]
  end

  -- Unknown key: refuse actions old enough that their key may already have expired (they
  -- could fire a second time), and actions from too far in the future (they would stretch
  -- that window). Both use this server's clock, so the rule cannot disagree with the TTL.
  local decided = tonumber(decided_at_ms)
  if now - decided >= max_age then
    return 'gone', '', '', ''
  end
  if decided - now > max_skew then
    return 'future', '', '', ''
  end

  if action_type ~= 'freeze_card' and action_type ~= 'alert_customer'
      and action_type ~= 'review' then
    return 'error', 'ERR unknown action type', '', ''
  end
  -- a review goes to the shard's review queue: its stream and its set of open reviews carry
  -- the alerts stream's shard tag (one slot), so they are named from it here
  local reviews = (string.gsub(alerts, '^alerts:', 'reviews:', 1))
  local reviews_open = (string.gsub(alerts, '^alerts:', 'reviews_open:', 1))
  if action_type == 'review' then
    for _, pair in ipairs({{reviews, 'stream'}, {reviews_open, 'zset'}}) do
      local bad = wrong_type(pair[1], pair[2])
      if bad then return 'error', bad, '', '' end
    end
  end
  if action_type == 'alert_customer' then
    -- an alert writes the alerts stream, the card's list and hash: check all three (a
    -- freeze's first command on its card is HGET, which refuses a wrong type itself)
    local bad = alerts_bad(alerts)
    if bad then return 'error', bad, '', '' end
    for _, pair in ipairs({{card, 'hash'}, {card_alerts, 'list'}}) do
      bad = wrong_type(pair[1], pair[2])
      if bad then return 'error', bad, '', '' end
    end
  end

  local outcome = 'alert_queued'
  if action_type == 'review' then
    outcome = 'review_queued'
  elseif action_type == 'freeze_card' then
    local bad = wrong_type(history, 'list')
    if bad then return 'error', bad, '', '' end
    -- (HMGET refuses a card of the wrong type with an error, before any write)
    local card_now = redis.call('HMGET', card, 'status', 'released_at_ms')
    if card_now[1] == 'frozen' then
      outcome = 'already_frozen' -- the card stays as it is; the key still counts as applied
    elseif card_now[2] and decided <= tonumber(card_now[2]) then
      -- decided before an analyst released the card: the release overrules it (a freeze
      -- decided after the release freezes the card again)
      outcome = 'superseded_by_release'
    else
      outcome = 'frozen'
    end
  end
  -- the first write (see alerts_bad)
  local effect_id = redis.call('XADD', effects, '*', 'type', action_type, 'idempotency_key', key,
    'card_id', card_id, 'txn_id', txn_id, 'applied_at_ms', now_ms, 'outcome', outcome)
  if outcome == 'frozen' then
    redis.call('HSET', card, 'status', 'frozen', 'frozen_at_ms', now_ms, 'reason', reason,
      'txn_id', txn_id, 'idempotency_key', key, 'score', score, 'model_version', model_version,
      'explanation', explanation, 'decided_by', decided_by, 'rule', rule)
    redis.call('RPUSH', history, cjson.encode({event = 'frozen', at_ms = now_ms,
      by = decider, reason = reason, txn_id = txn_id, idempotency_key = key,
      effect_id = effect_id}))
    redis.call('LTRIM', history, -alerts_kept, -1)
  elseif outcome == 'alert_queued' then
    local alert_id = redis.call('XADD', alerts, '*', 'idempotency_key', key, 'card_id', card_id,
      'txn_id', txn_id, 'ts_ms', ts_ms, 'score', score, 'model_version', model_version,
      'queued_at_ms', now_ms, 'explanation', explanation, 'decided_by', decided_by, 'rule', rule)
    redis.call('RPUSH', card_alerts, cjson.encode({alert_id = alert_id, txn_id = txn_id,
      idempotency_key = key, ts_ms = ts_ms, score = score, model_version = model_version,
      queued_at_ms = now_ms, explanation = explanation, decided_by = decided_by, rule = rule}))
    redis.call('LTRIM', card_alerts, -alerts_kept, -1)
    redis.call('HINCRBY', card, 'alerts_total', 1)
  elseif outcome == 'review_queued' then
    local review_id = redis.call('XADD', reviews, '*', 'idempotency_key', key, 'card_id',
      card_id, 'txn_id', txn_id, 'ts_ms', ts_ms, 'score', score, 'model_version', model_version,
      'queued_at_ms', now_ms, 'explanation', explanation, 'decided_by', decided_by, 'rule', rule)
    redis.call('ZADD', reviews_open, now_ms, review_id)
  end
  redis.call('HSET', idem, 'idempotency_key', key, 'fingerprint', fingerprint,
    'type', action_type, 'card_id', card_id, 'txn_id', txn_id, 'ts_ms', ts_ms, 'score', score,
    'model_version', model_version, 'decided_at_ms', decided_at_ms, 'outcome', outcome,
    'applied_at_ms', now_ms, 'effect_id', effect_id, 'explanation', explanation,
    'decided_by', decided_by, 'rule', rule)
  redis.call('PEXPIRE', idem, ttl_ms)
  if claim then
    redis.call('SET', claim, owner_is, 'PX', claim_ttl)
  end
  return 'created', outcome, now_ms, effect_id
end

local reply = {now_ms}
local n = #KEYS / width
for i = 0, n - 1 do
  local ki, ai = width * i, 5 + 13 * i
  -- pcall: an unexpected error in one action answers that action, never its neighbours
  local ok, verdict, outcome, applied_at, effect_id = pcall(apply_one,
    {KEYS[ki + 1], KEYS[ki + 2], KEYS[ki + 3], KEYS[ki + 4], KEYS[ki + 5], KEYS[ki + 6],
     KEYS[ki + 7], width == 8 and KEYS[ki + 8] or nil},
    {ARGV[ai + 1], ARGV[ai + 2], ARGV[ai + 3], ARGV[ai + 4], ARGV[ai + 5], ARGV[ai + 6],
     ARGV[ai + 7], ARGV[ai + 8], ARGV[ai + 9], ARGV[ai + 10], ARGV[ai + 11], ARGV[ai + 12],
     ARGV[ai + 13]})
  if not ok then
    local message = verdict
    if type(message) == 'table' then message = message['err'] end
    verdict, outcome, applied_at, effect_id = 'error', tostring(message), '', ''
  end
  reply[#reply + 1] = verdict
  reply[#reply + 1] = outcome
  reply[#reply + 1] = applied_at
  reply[#reply + 1] = effect_id
end
return reply
