-- The app ids that deduplicate one streaming query, each with the first batch
-- it claimed in: an app id that joins a query later than another did is a
-- renamed app id (the checkpoint kept, the catalog new and empty), refused.
--
-- KEYS[1] hash of the query: app id -> first batch it claimed in
-- ARGV[1] app id asking
-- ARGV[2] batch it claims in
-- Returns {1, first batch of ARGV[1]} (known, or recorded now) or
-- {0, app id, first batch} of the earliest other app id (refused).
local mine = redis.call('HGET', KEYS[1], ARGV[1])
if mine then
  return {1, mine}
end
local batch = tonumber(ARGV[2])
local all = redis.call('HGETALL', KEYS[1])
local earliest, other = nil, nil
for i = 1, #all, 2 do
  local first = tonumber(all[i + 1])
  if earliest == nil or first < earliest then
    earliest, other = first, all[i]
  end
end
if earliest ~= nil and earliest < batch then
  return {0, other, tostring(earliest)}
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return {1, ARGV[2]}
