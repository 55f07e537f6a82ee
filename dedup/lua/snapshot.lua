-- Consistent snapshot of one shard, to build a Bloom filter from.
-- KEYS[1] state hash; KEYS[2..] live bucket SETs
-- ARGV[1] epoch to use if the shard is new; ARGV[2] num shards
-- Returns {status, epoch, version, token, ids...}
local st = redis.call('HMGET', KEYS[1], 'epoch', 'version', 'n', 'tok')
if st[3] and st[3] ~= ARGV[2] then
  return {'SHARDS', st[3]}
end
local epoch = st[1]
if not epoch then
  epoch = ARGV[1]
  redis.call('HSET', KEYS[1], 'epoch', epoch, 'version', 0, 'n', ARGV[2])
end
local out = {'OK', epoch, st[2] or '0', st[4] or ''}
for k = 2, #KEYS do
  local ids = redis.call('SMEMBERS', KEYS[k])
  for i = 1, #ids do out[#out + 1] = ids[i] end
end
return out
