-- chatgate's rate limiter as one atomic Redis script: the same integer
-- token buckets as chatgate_core::limits (see limits.rs), for limits shared
-- by several gateway instances. Lua numbers are doubles: exact for the
-- integers used here while every limit is at most 75059993789 per minute
-- (2^53 / 120000: levels span twice a bucket's capacity in 1/60000 units;
-- SHARED_MAX_PER_MINUTE in limits.rs). `serve --redis` refuses larger ones.
--
-- KEYS[1]  the key's buckets (fields rl, ru: requests level and update
--          time; tl, tu: tokens level and update time)
-- KEYS[2]  the key's spend (fields d, w, m, t: spent in the current day,
--          ISO week, month and in total, nano-dollars; dp, wp, mp: the
--          starts of the periods they count; r: reserved by requests in
--          flight; z: present once seeded from the ledger; h: the
--          replication history it was kept under; c: set while a rebuild
--          from the ledger is due, its cut-off; nd, nw, nm, nt: settled
--          since c, by lines of c or later)
-- KEYS[3]  the key's leases (sorted set: lease name -> expiry, ms)
-- KEYS[4]  the leases' budget reservations (hash: lease name -> nano-USD)
-- ARGV[1]  "admit", "settle", "status", "seed" or "renew"
-- ARGV[2]  requests per minute      ARGV[3]  tokens per minute
-- ARGV[4]  admit: tokens to reserve; settle: tokens reserved
-- ARGV[5]  settle: tokens used
-- ARGV[6]  optional: now in milliseconds (tests); otherwise the server's TIME
-- ARGV[7]  the budget in nano-dollars, or "" (none)
-- ARGV[8]  the budget's period: 1 day, 2 week, 3 month, 4 total
-- ARGV[9..11]  the starts (Unix ms) of the current day, week and month
-- ARGV[12] admit: the worst-case cost to reserve; seed: spent in the day
-- ARGV[13] settle: the metered cost; seed: spent in the week
-- ARGV[14] the in-flight cap, or "" (none); seed: spent in the month
-- ARGV[15] the lease's name, or "" (no lease); renew: names, space
--          separated; seed: spent in total
-- ARGV[16] the lease's length, milliseconds
-- ARGV[17] the server's replication history (master_replid), or "" (unknown)
-- ARGV[18] settle: the ledger line's time, Unix ms; seed: the rebuild's
--          cut-off, or "" for a first seed
-- ARGV[19] admit: how long after a history change the spend is rebuilt,
--          ms, or "" (not now)
--
-- Returns {verdict, a, b, limit_r, remaining_r, reset_r_ms, limit_t,
-- remaining_t, reset_t_ms, spent, reserved, in_flight}: verdict 1 =
-- admitted (a = tokens reserved), 0 = refused (a = 1 requests, 2 tokens,
-- 3 budget, 4 in-flight cap; b = Retry-After seconds), 2 = settled,
-- status, seeded or renewed, 3 = the spend is not seeded (a budget cannot
-- be decided: seed it from the ledger, then admit again; a > 0: rebuild
-- it from the ledger's lines before a, Unix ms). spent is the
-- budget period's, reserved what the key's leases hold, in_flight how
-- many leases it has.
local UNITS = 60000
local MAXPM = 76861433640456  -- i64::MAX / 60000 / 2, as in limits.rs

local function clamp_pm(n)
  if n < 1 then return 1 end
  if n > MAXPM then return MAXPM end
  return n
end

local function now_ms()
  if ARGV[6] and ARGV[6] ~= "" then return tonumber(ARGV[6]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function ceil_div(a, b)
  return math.floor((a + b - 1) / b)
end

-- A bucket: {pm, level, updated}.
local function load(field_level, field_time, pm, now)
  local level = tonumber(redis.call('HGET', KEYS[1], field_level))
  local updated = tonumber(redis.call('HGET', KEYS[1], field_time))
  local cap = pm * UNITS
  if level == nil or updated == nil then
    return {pm = pm, level = cap, updated = now}
  end
  -- Limits edited: keep the level within the new capacity.
  if level > cap then level = cap end
  local b = {pm = pm, level = level, updated = updated}
  local elapsed = now - b.updated
  if elapsed > 0 then
    b.level = math.min(b.level + elapsed * pm, cap)
    b.updated = now
  end
  return b
end

local function wait_ms(b, n)
  local need = math.min(n, b.pm) * UNITS - b.level
  if need <= 0 then return 0 end
  return ceil_div(need, b.pm)
end

local function available(b)
  if b.level <= 0 then return 0 end
  return math.floor(b.level / UNITS)
end

local function until_full(b)
  local need = b.pm * UNITS - b.level
  if need <= 0 then return 0 end
  return ceil_div(need, b.pm)
end

local op = ARGV[1]
local rpm = clamp_pm(tonumber(ARGV[2]))
local tpm = clamp_pm(tonumber(ARGV[3]))
local now = now_ms()
local budget = tonumber(ARGV[7] or '')
local period = tonumber(ARGV[8] or '') or 4
local cap = tonumber(ARGV[14] or '')
local lease = ARGV[15] or ''
local history = ARGV[17] or ''
local caller_ms = tonumber(ARGV[18] or '')
local rebuild_after = tonumber(ARGV[19] or '')
local FIELDS = {'d', 'w', 'm', 't'}
local SINCE = {'nd', 'nw', 'nm', 'nt'}

local function num(v)
  return tonumber(v) or 0
end

-- The spend hash moved to the current periods (a rollover empties one;
-- a clock behind the stored one does not).
local function roll()
  for i = 1, 3 do
    local start = tonumber(ARGV[8 + i])
    local f = FIELDS[i]
    if start and start > num(redis.call('HGET', KEYS[2], f .. 'p')) then
      redis.call('HSET', KEYS[2], f, 0, f .. 'p', string.format('%.0f', start))
      if redis.call('HEXISTS', KEYS[2], 'c') == 1 then
        redis.call('HSET', KEYS[2], SINCE[i], 0)
      end
    end
  end
end

-- Whether the spend already counts a later period than the caller's
-- (another call rolled it over meanwhile).
local function rolled_past()
  for i = 1, 3 do
    local start = tonumber(ARGV[8 + i])
    if start and num(redis.call('HGET', KEYS[2], FIELDS[i] .. 'p')) > start then
      return true
    end
  end
  return false
end

-- A spend kept under another replication history (a replica promoted by
-- a failover, a server restarted from its files) may lack the old
-- primary's last writes and what instances settled on their own while
-- it was away. Admissions go on deciding on it, and from the caller's
-- time on, settlements are also counted apart, so that the spend can be
-- rebuilt as the ledger's lines before that time plus those. The moment
-- follows the server's clock at the first call under the new history:
-- every line that instances settled on their own while Redis was away
-- ended before it. Returns whether the spend is seeded, and the cut-off of the
-- rebuild that is due, if one is (one HMGET on the happy path).
local function follow_history()
  local seeded, h, c = unpack(redis.call('HMGET', KEYS[2], 'z', 'h', 'c'))
  if not seeded then return false, nil end
  if history == '' or h == history then return true, tonumber(c) end
  if not h then
    -- Seeded by a version that did not keep the history: this one.
    redis.call('HSET', KEYS[2], 'h', history)
    return true, tonumber(c)
  end
  -- A second ahead of Redis's clock, on a whole second: an instance's
  -- clock a little ahead of Redis's must not date a line settled before
  -- this call after the moment, and the ledger file is read to the second.
  local moment = math.ceil((now + 1000) / 1000) * 1000
  redis.call('HSET', KEYS[2], 'h', history, 'c', string.format('%.0f', moment),
    'nd', 0, 'nw', 0, 'nm', 0, 'nt', 0)
  return true, moment
end

-- Leases past their expiry (an instance that died) give back their slot
-- and their reservation.
local function reap()
  local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
  if #dead == 0 then return end
  local freed = 0
  for _, m in ipairs(dead) do
    freed = freed + num(redis.call('HGET', KEYS[4], m))
    redis.call('ZREM', KEYS[3], m)
    redis.call('HDEL', KEYS[4], m)
  end
  if freed > 0 then
    local r = math.max(0, num(redis.call('HGET', KEYS[2], 'r')) - freed)
    redis.call('HSET', KEYS[2], 'r', string.format('%.0f', r))
  end
end

local function quota_figures()
  local spent = 0
  if budget then spent = num(redis.call('HGET', KEYS[2], FIELDS[period])) end
  return spent, num(redis.call('HGET', KEYS[2], 'r')), redis.call('ZCARD', KEYS[3])
end

if op == 'seed' then
  -- Only if still unseeded: another instance may have seeded it first.
  if redis.call('HEXISTS', KEYS[2], 'z') == 0 then
    if not caller_ms then
      redis.call('HSET', KEYS[2], 'z', 1,
        'd', ARGV[12], 'dp', ARGV[9], 'w', ARGV[13], 'wp', ARGV[10],
        'm', ARGV[14], 'mp', ARGV[11], 't', ARGV[15])
      if history ~= '' then redis.call('HSET', KEYS[2], 'h', history) end
    end
  elseif caller_ms and tonumber(redis.call('HGET', KEYS[2], 'c')) == caller_ms
      and not rolled_past() then
    -- The rebuild that is due, once: the ledger before the cut-off plus
    -- what was settled since. (Not when a period began since the tally
    -- was taken: it would put the old period's sum in the new one; the
    -- next admission asks again.)
    roll()
    local seeded = {ARGV[12], ARGV[13], ARGV[14], ARGV[15]}
    for i = 1, 4 do
      local v = num(seeded[i]) + num(redis.call('HGET', KEYS[2], SINCE[i]))
      redis.call('HSET', KEYS[2], FIELDS[i], string.format('%.0f', v))
    end
    redis.call('HDEL', KEYS[2], 'c', 'nd', 'nw', 'nm', 'nt')
  end
  roll()
  local spent, reserved, n = quota_figures()
  return {2, 0, 0, 0, 0, 0, 0, 0, 0, spent, reserved, n}
end

if op == 'renew' then
  local until_ms = now + num(ARGV[16])
  for m in string.gmatch(lease, '%S+') do
    redis.call('ZADD', KEYS[3], 'XX', until_ms, m)
  end
  return {2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
end

local r = load('rl', 'ru', rpm, now)
local t = load('tl', 'tu', tpm, now)
local verdict, a, b = 2, 0, 0
local quota = budget ~= nil or cap ~= nil

if op == 'admit' then
  local cost = num(ARGV[12])
  local tokens = tonumber(ARGV[4])
  if quota then reap() end
  if budget then
    if redis.call('HEXISTS', KEYS[2], 'z') == 0 then
      return {3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
    end
    local _, c = follow_history()
    roll()
    if c and rebuild_after and now >= c + rebuild_after then
      return {3, c, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
    end
  end
  local spent, reserved, n = quota_figures()
  local wr, wt = wait_ms(r, 1), wait_ms(t, tokens)
  if budget and spent + reserved + cost > budget then
    verdict, a, b = 0, 3, 0
  elseif cap and n >= cap then
    verdict, a, b = 0, 4, 1
  elseif wr > 0 or wt > 0 then
    local kind, wait = 1, wr
    if wr < wt then kind, wait = 2, wt end
    verdict, a, b = 0, kind, math.max(1, ceil_div(wait, 1000))
  else
    r.level = r.level - UNITS
    local reserved_tokens = math.min(tokens, t.pm)
    t.level = t.level - reserved_tokens * UNITS
    verdict, a = 1, reserved_tokens
    if quota and lease ~= '' then
      redis.call('ZADD', KEYS[3], now + num(ARGV[16]), lease)
      if budget and cost > 0 then
        redis.call('HSET', KEYS[4], lease, string.format('%.0f', cost))
        redis.call('HSET', KEYS[2], 'r', string.format('%.0f', reserved + cost))
      end
    end
  end
elseif op == 'settle' then
  local delta = (tonumber(ARGV[4]) - tonumber(ARGV[5])) * UNITS
  local cap_t = t.pm * UNITS
  t.level = math.max(-cap_t, math.min(cap_t, t.level + delta))
  if lease ~= '' and redis.call('ZREM', KEYS[3], lease) == 1 then
    local held = num(redis.call('HGET', KEYS[4], lease))
    if held > 0 then
      redis.call('HDEL', KEYS[4], lease)
      local left = math.max(0, num(redis.call('HGET', KEYS[2], 'r')) - held)
      redis.call('HSET', KEYS[2], 'r', string.format('%.0f', left))
    end
  end
  local cost = num(ARGV[13])
  -- Spend is kept once seeded (an unseeded key is rebuilt from the ledger,
  -- which has this request's line).
  if cost > 0 then
    local seeded, c = follow_history()
    if seeded then
      roll()
      local since = c and caller_ms and caller_ms >= c
      local add = string.format('%.0f', cost)
      for i, f in ipairs(FIELDS) do
        redis.call('HINCRBY', KEYS[2], f, add)
        if since then redis.call('HINCRBY', KEYS[2], SINCE[i], add) end
      end
    end
  end
elseif op ~= 'status' then
  return redis.error_reply('unknown operation ' .. tostring(op))
end

redis.call('HSET', KEYS[1], 'rl', string.format('%.0f', r.level), 'ru', string.format('%.0f', r.updated),
  'tl', string.format('%.0f', t.level), 'tu', string.format('%.0f', t.updated))
-- Idle keys expire once both buckets would be full again (plus a minute).
redis.call('PEXPIRE', KEYS[1], math.max(until_full(r), until_full(t)) + 60000)
local spent, reserved, n = quota_figures()
return {verdict, a, b, r.pm, available(r), until_full(r), t.pm, available(t), until_full(t), spent, reserved, n}
