-- The app id's lease: one owner (a streaming query id) at a time, with a
-- fence number that grows at every change of owner.
--
-- KEYS[1] lease hash (owner, until (ms, Redis clock), fence, checked: the fence
--         whose owner found no batch left unfinished by an earlier query; spark:
--         Spark's id of the owner's streaming query when the owner is another name,
--         which the driver's listener resolves the name by)
-- ARGV[1] query id asking ("" with ARGV[3] = "release": give it up)
-- ARGV[2] lease milliseconds
-- ARGV[3] "take" | "release" | "checked" (record that ARGV[4], a fence, passed the check)
-- ARGV[5] with "take": Spark's id of the owner's query ("" or absent: not known here)
-- Returns {"OK", fence, checked fence} or {"INUSE", owner, ms left}.
--
-- Time is Redis's own clock (TIME), so executors and drivers whose clocks
-- disagree still agree on when a lease lapses.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local st = redis.call('HMGET', KEYS[1], 'owner', 'until', 'fence', 'checked')
local owner = st[1] or ''
local untl = tonumber(st[2] or '0')
local fence = tonumber(st[3] or '0')
local checked = st[4] or '-1'
if ARGV[3] == 'release' then
  if owner == ARGV[1] then
    redis.call('HSET', KEYS[1], 'until', 0)
  end
  return {'OK', tostring(fence), checked}
end
if ARGV[3] == 'checked' then
  if tostring(fence) == ARGV[4] then
    redis.call('HSET', KEYS[1], 'checked', ARGV[4])
  end
  return {'OK', tostring(fence), ARGV[4]}
end
if owner ~= '' and owner ~= ARGV[1] and now < untl then
  return {'INUSE', owner, tostring(untl - now)}
end
if owner ~= ARGV[1] then
  fence = fence + 1
end
if ARGV[5] and ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'spark', ARGV[5])
elseif owner ~= ARGV[1] then
  redis.call('HDEL', KEYS[1], 'spark')
end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'until', now + tonumber(ARGV[2]), 'fence', fence)
return {'OK', tostring(fence), checked}
