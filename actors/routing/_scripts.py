"""The Lua scripts that keep routing state in Redis, atomically, one round trip each. No I/O.

`ACQUIRE` runs on the path to dispatch: given a group's untried deployments
in the order the strategy ranked them (tier by tier), it takes the first one
that is not cooling and has room in its in-flight, rpm and tpm budgets, and
charges it, all inside Redis (no read-modify-write across round trips); it
answers every candidate's state so the process can mirror it. `RELEASE`
runs at an attempt's end: it frees the in-flight lease, settles the tpm
estimate with the usage, counts a failure and cools the deployment (the
longer of its back-off and the provider's delay; never shortened). Time is
Redis's own (``TIME``), so processes on machines with different clocks agree.

Keys of one group share a cluster hash slot (``{prefix:group}``). Counters
are buckets of a hash as in `_window.py`: a bucket counts while any of it
lies within the window (the current one and the ten before it). In-flight
counts are a sorted set of leases, so a process that dies without releasing
costs its calls' leases until they expire, not forever.
"""

from __future__ import annotations

from ._window import BUCKETS

__all__ = ["ACQUIRE", "RELEASE", "KEYS_PER_DEPLOYMENT", "deployment_keys"]

#: Keys `ACQUIRE` and `RELEASE` take per deployment: cool, fail, rpm, tpm, in-flight.
KEYS_PER_DEPLOYMENT = 5


def deployment_keys(prefix: str, group: str, deployment: str) -> tuple[str, ...]:
    """The five keys of one deployment (see `KEYS_PER_DEPLOYMENT`), in one hash slot per group."""
    base = f"{prefix}:{{{prefix}:{group}}}:{deployment}"
    return (f"{base}:cool", f"{base}:fail", f"{base}:rpm", f"{base}:tpm", f"{base}:inflight")


_COMMON = f"""
local NB = {BUCKETS}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- The count of a bucketed window (expired buckets deleted) and, when ``need``
-- more would pass ``limit``, the time (ms) at which enough buckets expire.
local function window(key, width, need, limit)
  local cur = math.floor(now / width)
  local h = redis.call('HGETALL', key)
  local used = 0
  local kept = {{}}
  for j = 1, #h, 2 do
    local b = tonumber(h[j])
    if b < cur - NB then
      redis.call('HDEL', key, h[j])
    else
      local c = tonumber(h[j + 1])
      used = used + c
      kept[#kept + 1] = {{b, c}}
    end
  end
  local relief = now
  if limit > 0 and used + need > limit then
    relief = -2
    if need <= limit then
      table.sort(kept, function(x, y) return x[1] < y[1] end)
      local excess = used + need - limit
      for _, bc in ipairs(kept) do
        excess = excess - bc[2]
        if excess <= 0 then
          relief = math.ceil((bc[1] + NB + 1) * width)
          break
        end
      end
    end
  end
  return used, relief, cur
end
"""

#: KEYS: 5 per candidate (see `deployment_keys`), in the order to try them.
#: ARGV: width_ms, lease_ms, token, tokens, then per candidate max_in_flight, rpm, tpm (0: none).
#: Answer: now_ms, chosen (1-based; 0: none), tpm bucket, then per candidate
#: cool_until_ms, in_flight, rpm_used, tpm_used, available_at_ms (-1: when a
#: call ends; -2: never).
ACQUIRE = (
    _COMMON
    + """
local width = tonumber(ARGV[1])
local lease = tonumber(ARGV[2])
local token = ARGV[3]
local tokens = tonumber(ARGV[4])
local n = #KEYS / 5
local chosen = 0
local bucket = 0
local out = {now, 0, 0}
for i = 1, n do
  local k = (i - 1) * 5
  local a = 4 + (i - 1) * 3
  local max_in_flight = tonumber(ARGV[a + 1])
  local rpm = tonumber(ARGV[a + 2])
  local tpm = tonumber(ARGV[a + 3])
  local cool = tonumber(redis.call('HGET', KEYS[k + 1], 'until') or '0')
  redis.call('ZREMRANGEBYSCORE', KEYS[k + 5], '-inf', now)
  local in_flight = redis.call('ZCARD', KEYS[k + 5])
  local rpm_used, rpm_at, cur = window(KEYS[k + 3], width, 1, rpm)
  local tpm_used, tpm_at = window(KEYS[k + 4], width, tokens, tpm)
  local at = now
  if cool > at then at = cool end
  if rpm_at == -2 or tpm_at == -2 then
    at = -2
  else
    if rpm_at > at then at = rpm_at end
    if tpm_at > at then at = tpm_at end
    if max_in_flight > 0 and in_flight >= max_in_flight then at = -1 end
  end
  if chosen == 0 and at == now then
    chosen = i
    bucket = cur
    redis.call('ZADD', KEYS[k + 5], now + lease, token)
    redis.call('PEXPIRE', KEYS[k + 5], lease * 2)
    redis.call('HINCRBY', KEYS[k + 3], cur, 1)
    redis.call('PEXPIRE', KEYS[k + 3], math.ceil(width * NB * 2))
    if tokens > 0 then
      redis.call('HINCRBY', KEYS[k + 4], cur, tokens)
      redis.call('PEXPIRE', KEYS[k + 4], math.ceil(width * NB * 2))
    end
    in_flight = in_flight + 1
    rpm_used = rpm_used + 1
    tpm_used = tpm_used + tokens
  end
  out[#out + 1] = cool
  out[#out + 1] = in_flight
  out[#out + 1] = rpm_used
  out[#out + 1] = tpm_used
  out[#out + 1] = at
end
out[2] = chosen
out[3] = bucket
return out
"""
)

#: KEYS: the 5 keys of one deployment.
#: ARGV: token, tpm bucket, tpm correction, width_ms, outcome (0 success, 1 failure
#: that counts, 2 neither), delay_ms (the provider's; 0: none), cooldown_after,
#: fail_width_ms, cooldown_ms, max_cooldown_ms.
#: Answer: now_ms, cool_until_ms, cool_level.
RELEASE = (
    _COMMON
    + """
local token = ARGV[1]
local bucket = tonumber(ARGV[2])
local correction = tonumber(ARGV[3])
local width = tonumber(ARGV[4])
local outcome = tonumber(ARGV[5])
local delay = tonumber(ARGV[6])
local after = tonumber(ARGV[7])
local fail_width = tonumber(ARGV[8])
local cooldown = tonumber(ARGV[9])
local max_cooldown = tonumber(ARGV[10])
redis.call('ZREM', KEYS[5], token)
if correction ~= 0 and bucket >= math.floor(now / width) - NB then
  local v = redis.call('HINCRBY', KEYS[4], bucket, correction)
  if v < 0 then redis.call('HSET', KEYS[4], bucket, 0) end
end
local cool = tonumber(redis.call('HGET', KEYS[1], 'until') or '0')
local level = tonumber(redis.call('HGET', KEYS[1], 'level') or '0')
if outcome == 1 then
  local failures = 0
  if delay <= 0 then
    local fcur = math.floor(now / fail_width)
    redis.call('HINCRBY', KEYS[2], fcur, 1)
    redis.call('PEXPIRE', KEYS[2], math.ceil(fail_width * NB * 2))
    failures = window(KEYS[2], fail_width, 0, 0)
  end
  if delay > 0 or failures >= after then
    local duration = cooldown * math.pow(2, math.min(level, 64))
    if duration > max_cooldown then duration = max_cooldown end
    if delay > duration then duration = delay end
    local new_until = now + math.ceil(duration)
    if new_until > cool then cool = new_until end
    level = level + 1
    redis.call('HSET', KEYS[1], 'until', cool, 'level', level)
    redis.call('PEXPIRE', KEYS[1], (cool - now) + math.ceil(max_cooldown) * 2)
    redis.call('DEL', KEYS[2])
  end
elseif outcome == 0 and level > 0 then
  level = 0
  redis.call('HSET', KEYS[1], 'level', 0)
end
return {now, cool, level}
"""
)
