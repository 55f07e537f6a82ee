-- Delete the decisions of query ARGV[1] for batches < ARGV[2] (Spark committed them),
-- or, with ARGV[3] = "all", every decision of it: also a batch job's, keyed by a
-- token rather than a batch number (dedup forget-query).
-- KEYS[1] decisions hash. Returns the number deleted.
local prefix = ARGV[1] .. ':'
local limit = tonumber(ARGV[2])
local all = ARGV[3] == 'all'
local gone = 0
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(f, 1, #prefix) == prefix then
    local b = tonumber(string.sub(f, #prefix + 1))
    if all or (b and b < limit) then
      redis.call('HDEL', KEYS[1], f)
      gone = gone + 1
    end
  end
end
return gone
