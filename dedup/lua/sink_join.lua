-- Record that a sink output begins a batch of a streaming query
-- (sinks/checkpoint.py, CheckpointStore.join_query).
--
-- Not join.lua (the app ids that deduplicate a query): this one records per
-- output the last batch it began with the run, topic and Kafka cluster it began
-- it in, and refuses a changed output on a replayed batch; its replies differ.
--
-- KEYS[1] the query's outputs hash: output -> <batch>:<run id>:<topic>:<cluster id>
-- ARGV[1] output (its identity), ARGV[2] batch, ARGV[3] run id, ARGV[4] topic
--         option, ARGV[5] Kafka cluster id, ARGV[6..] field/value pairs of the record
--         an earlier release kept (dedup:query:{<query id>}:outputs), taken over when
--         KEYS[1] does not exist
-- Returns {1} when recorded; refused: {0, other output, its batch} (a new output
-- on a batch another one began in an earlier run) or {2, old topic, batch, old
-- cluster} (this output began the batch in an earlier run, to another topic or
-- cluster).
if #ARGV > 5 and redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 6))
end
local batch = tonumber(ARGV[2])
local mine = redis.call('HGET', KEYS[1], ARGV[1])
if mine then
  local began, run, topic, cluster = string.match(mine, '^(%d+):([^:]*):?([^:]*):?(.*)$')
  if began and tonumber(began) >= batch and run ~= ARGV[3]
      and ((topic ~= '' and topic ~= ARGV[4]) or (cluster ~= '' and cluster ~= ARGV[5])) then
    return {2, topic, began, cluster}
  end
else
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    local began, run = string.match(all[i + 1], '^(%d+):([^:]*)')
    if began and tonumber(began) >= batch and run ~= ARGV[3] then
      return {0, all[i], began}
    end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. ARGV[3] .. ':' .. ARGV[4] .. ':' .. ARGV[5])
return {1}
