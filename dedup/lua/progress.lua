-- Record the last batch Spark committed for one streaming query, only in a catalog
-- that is set up. Spark delivers a stopped query's last progress events after
-- query.stop() returned; reaching a flushed (or replaced) Redis, an unconditional
-- HSET would make it know the query again, and the kept checkpoint's restart would
-- not be refused (tests/integration/dedup/test_lost_catalog_late_events.py).
--
-- KEYS[1] the app id's queries hash (query id -> last committed batch)
-- KEYS[2] the app id's meta hash (same slot; written by the start-up check)
-- ARGV[1] query id
-- ARGV[2] committed batch
-- Returns 1 (recorded) or 0 (no catalog here: nothing written).
if redis.call('EXISTS', KEYS[2]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
