-- The app ids that deduplicate one streaming query, each with the first batch
-- it claimed in: an app id that joins a query later than another did is a
-- renamed app id (the checkpoint kept, the catalog new and empty), refused.
--
-- KEYS[1] hash of the query: app id -> first batch it claimed in
-- ARGV[1] app id asking
-- ARGV[2] batch it claims in
-- ARGV[3] "1" when a query past its first batch must already be known here (the
--         streaming forms, whose every batch leaves a record): a query this Redis
--         has never seen at batch > 0 was run against another Redis
-- ARGV[4..] field/value pairs of the record an earlier release kept for the query
--         (dedup:query:{<query id>}:apps), taken over when KEYS[1] does not exist
-- Returns {1, first batch of ARGV[1]} (known, or recorded now),
-- {0, app id, first batch} of the earliest other app id (refused), or
-- {2} when ARGV[3] is "1", the batch is past 0 and no app id ever joined the
-- query here (nothing recorded: the caller looks for the query's committed
-- batches, another key, before it refuses or joins without ARGV[3]).
if #ARGV > 3 and redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 4))
end
local mine = redis.call('HGET', KEYS[1], ARGV[1])
if mine then
  return {1, mine}
end
local batch = tonumber(ARGV[2])
local all = redis.call('HGETALL', KEYS[1])
if ARGV[3] == '1' and batch > 0 and #all == 0 then
  return {2}
end
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
