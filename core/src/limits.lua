-- chatgate's rate limiter as one atomic Redis script: the same integer
-- token buckets as chatgate_core::limits (see limits.rs), for limits shared
-- by several gateway instances. Lua numbers are doubles: exact for the
-- integers used here while every limit is at most 75059993789 per minute
-- (2^53 / 120000: levels span twice a bucket's capacity in 1/60000 units;
-- SHARED_MAX_PER_MINUTE in limits.rs). `serve --redis` refuses larger ones.
--
-- KEYS[1]  the key's hash (fields rl, ru: requests level and update time;
--          tl, tu: tokens level and update time)
-- ARGV[1]  "admit", "settle" or "status"
-- ARGV[2]  requests per minute      ARGV[3]  tokens per minute
-- ARGV[4]  admit: tokens to reserve; settle: tokens reserved
-- ARGV[5]  settle: tokens used
-- ARGV[6]  optional: now in milliseconds (tests); otherwise the server's TIME
--
-- Returns {verdict, a, b, limit_r, remaining_r, reset_r_ms, limit_t,
-- remaining_t, reset_t_ms}: verdict 1 = admitted (a = tokens reserved),
-- 0 = refused (a = 1 requests / 2 tokens, b = Retry-After seconds),
-- 2 = settled or status.
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
local r = load('rl', 'ru', rpm, now)
local t = load('tl', 'tu', tpm, now)
local verdict, a, b = 2, 0, 0

if op == 'admit' then
  local tokens = tonumber(ARGV[4])
  local wr, wt = wait_ms(r, 1), wait_ms(t, tokens)
  if wr > 0 or wt > 0 then
    local kind, wait = 1, wr
    if wr < wt then kind, wait = 2, wt end
    verdict, a, b = 0, kind, math.max(1, ceil_div(wait, 1000))
  else
    r.level = r.level - UNITS
    local reserved = math.min(tokens, t.pm)
    t.level = t.level - reserved * UNITS
    verdict, a = 1, reserved
  end
elseif op == 'settle' then
  local delta = (tonumber(ARGV[4]) - tonumber(ARGV[5])) * UNITS
  local cap = t.pm * UNITS
  t.level = math.max(-cap, math.min(cap, t.level + delta))
elseif op ~= 'status' then
  return redis.error_reply('unknown operation ' .. tostring(op))
end

redis.call('HSET', KEYS[1], 'rl', string.format('%.0f', r.level), 'ru', string.format('%.0f', r.updated),
  'tl', string.format('%.0f', t.level), 'tu', string.format('%.0f', t.updated))
-- Idle keys expire once both buckets would be full again (plus a minute).
redis.call('PEXPIRE', KEYS[1], math.max(until_full(r), until_full(t)) + 60000)
return {verdict, a, b, r.pm, available(r), until_full(r), t.pm, available(t), until_full(t)}
