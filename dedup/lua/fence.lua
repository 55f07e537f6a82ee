-- A new owner of the app id's lease fences one shard before it claims anything.
-- A shard remembers the highest fence that claimed it (claim.lua refuses a lower
-- one), but a shard the new owner has not claimed yet would still take the fence of
-- an earlier owner's task that took it before the takeover and paused: that task
-- would claim IDs the new owner then drops as seen, in a transaction the new owner
-- fences. Raising every shard's fence at the takeover closes that window.
--
-- KEYS[1] the shard's state hash; ARGV[1] the new owner (query id); ARGV[2] its fence.
-- Returns the fence the shard remembered before.
local before = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if before < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'fence', ARGV[2])
end
return before
