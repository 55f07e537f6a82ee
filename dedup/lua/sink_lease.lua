-- A sink output's lease (sinks/checkpoint.py, CheckpointStore.take_lease): one
-- streaming query writes an output at a time. Take (or renew) or release it,
-- atomically, on Redis's clock.
--
-- Not lease.lua (the app id's lease): that one keeps a fence number that grows at
-- every change of owner, which claims carry, and on release keeps the hash with
-- until = 0; this one has no fence, deletes the hash on release and replies
-- otherwise. One script for both would change what either stores or replies.
--
-- KEYS[1] the output's lease hash (owner: query id, until: ms, Redis's clock)
-- ARGV[1] query id asking
-- ARGV[2] lease milliseconds
-- ARGV[3] "take" | "release"
-- Returns {1, "", 0} when held by the caller (or released), {0, owner, ms left}
-- when another query holds it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owner = redis.call('HGET', KEYS[1], 'owner')
if ARGV[3] == 'release' then
  if owner == ARGV[1] then redis.call('DEL', KEYS[1]) end
  return {1, '', 0}
end
local until_ms = tonumber(redis.call('HGET', KEYS[1], 'until') or '0')
if owner and owner ~= ARGV[1] and until_ms > now then
  return {0, owner, until_ms - now}
end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'until', now + tonumber(ARGV[2]))
return {1, '', 0}
