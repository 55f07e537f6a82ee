-- Consistent snapshot of one shard, to build a Bloom filter from.
-- KEYS[1] state hash; KEYS[2..] indexes of the live buckets (idstore.lua)
-- ARGV[1] epoch to use if the shard is new; ARGV[2] num shards
-- Returns {status, epoch, version, token, blobs...}: each blob concatenates
-- 16-byte digests; "FORMAT" for a shard of another catalog format.
local st = redis.call('HMGET', KEYS[1], 'epoch', 'version', 'n', 'tok', 'f')
if st[1] and not READABLE[st[5] or '1'] then
  return {'FORMAT', st[5] or '1'}
end
if st[3] and st[3] ~= ARGV[2] then
  return {'SHARDS', st[3]}
end
local epoch = st[1]
if not epoch then
  epoch = ARGV[1]
  redis.call('HSET', KEYS[1], 'epoch', epoch, 'version', 0, 'n', ARGV[2], 'f', FORMAT)
end
local out = {'OK', epoch, st[2] or '0', st[4] or ''}
for k = 2, #KEYS do
  index_dump(KEYS[k], out)
end
return out
