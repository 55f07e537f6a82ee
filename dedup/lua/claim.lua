-- Atomic, idempotent claim of one (app, batch, shard): check candidates,
-- add the new IDs, record the decision, bump the shard version.
--
-- KEYS[1] state hash (epoch, version, tok, n, owner, fence)
-- KEYS[2] decisions hash ("<qid>:<batch>" -> "<version>|<kept ids>")
-- KEYS[3] journal hash (version -> ids claimed at that version; "t<version>" ->
--         the token of that version)
-- KEYS[4] current time bucket SET; KEYS[5] the next one (a batch clock that
--         went back across a bucket boundary); KEYS[6..] older live bucket SETs
-- ARGV[1] decision field       ARGV[2] client filter epoch ("" = no filter)
-- ARGV[3] client version (-1)  ARGV[4] batch time (unix seconds; not used here)
-- ARGV[5] expire-at of the current bucket
-- ARGV[6] num shards           ARGV[7] lease owner query id ("" = exempt)
-- ARGV[8] the owner's fence number from lease.lua (the app id's lease)
-- ARGV[9] journal versions kept
-- ARGV[10] a fresh random token: the epoch if the shard is new, and the token
--          of the version this claim creates
-- ARGV[13] client filter token ("" = none)
-- ARGV[14] digest of the candidate IDs (order-free), kept in the decision so a
--          replay for other IDs is told apart from a retry
-- ARGV[11] Bloom negatives, ARGV[12] Bloom positives: newline-joined IDs (one
-- argument each: packing thousands of arguments cost more than the script)
-- Returns {status, ...}; "OK": {epoch, version, dropped, catch-up, mode, lookups,
-- token}
-- where dropped lists the 0-based positions (comma-joined) of the duplicates
-- among the candidates, negatives first, then positives; "REPLAY":
-- {"<version>|\n<digest>\n<kept ids>"}
--
-- A filter is tagged (epoch, version, token). Version numbers can come back
-- after Redis rolls back (AOF everysec and a crash, failover to a lagging
-- replica) and moves forward again with other IDs; the random token of each
-- version cannot, so a tag from before a rollback never matches again.

local state, dec, jr = KEYS[1], KEYS[2], KEYS[3]
local field = ARGV[1]

local prev = redis.call('HGET', dec, field)
if prev then
  return {'REPLAY', prev}
end

local st = redis.call('HMGET', state, 'epoch', 'version', 'n', 'owner', 'fence', 'tok')
local epoch = st[1]
local version = tonumber(st[2] or '0')
local tok = st[6] or ''
if st[3] and st[3] ~= ARGV[6] then
  return {'SHARDS', st[3]}
end
local qid = ARGV[7]
local fence = tonumber(ARGV[8])
-- The shard remembers the highest fence that claimed it: a query that lost the
-- app id's lease to a newer one (higher fence) can claim nothing more.
if qid ~= '' and tonumber(st[5] or '0') > fence then
  return {'INUSE', st[4] or ''}
end
if not epoch then
  epoch = ARGV[10]
  redis.call('HSET', state, 'epoch', epoch, 'version', 0, 'n', ARGV[6])
end
if qid ~= '' and tonumber(st[5] or '0') < fence then
  redis.call('HSET', state, 'owner', qid, 'fence', fence)
end

local keep = tonumber(ARGV[9])
local cver = tonumber(ARGV[3])
local mode = 'full'
local catch = {}
local journal = nil
local ctok = ARGV[13]
if ARGV[2] == epoch and cver == version and ctok == tok then
  mode = 'trust'
elseif ARGV[2] == epoch and cver >= 0 and cver < version and version - cver <= keep
    and (cver == 0 and ctok == '' or redis.call('HGET', jr, 't' .. cver) == ctok) then
  local fields = {}
  for v = cver + 1, version do fields[#fields + 1] = tostring(v) end
  local entries = redis.call('HMGET', jr, unpack(fields))
  local complete = true
  for i = 1, #entries do
    if not entries[i] then complete = false; break end
  end
  if complete then
    mode = 'journal'
    journal = {}
    for i = 1, #entries do
      catch[#catch + 1] = entries[i]
      for id in string.gmatch(entries[i], '[^\n]+') do journal[id] = true end
    end
  end
end

-- need/at: IDs the catalog must judge and their candidate positions
local kept, dropped, need, at = {}, {}, {}, {}
local pos = 0
if mode == 'trust' then
  -- a current filter's negatives are new: no lookup, no per-ID table work
  for id in string.gmatch(ARGV[11], '[^\n]+') do kept[#kept + 1] = id end
  pos = #kept
else
  for id in string.gmatch(ARGV[11], '[^\n]+') do
    if mode ~= 'journal' then
      need[#need + 1] = id
      at[#need] = pos
    elseif journal[id] then
      dropped[#dropped + 1] = pos
    else
      kept[#kept + 1] = id
    end
    pos = pos + 1
  end
end
for id in string.gmatch(ARGV[12], '[^\n]+') do
  need[#need + 1] = id
  at[#need] = pos
  pos = pos + 1
end

-- Full catalog check of the rest, SMISMEMBER in chunks over the live buckets.
local CHUNK = 5000
local found = {}
for k = 4, #KEYS do
  for s = 1, #need, CHUNK do
    local e = math.min(s + CHUNK - 1, #need)
    local r = redis.call('SMISMEMBER', KEYS[k], unpack(need, s, e))
    for j = 1, #r do
      if r[j] == 1 then found[need[s + j - 1]] = true end
    end
  end
end
for i = 1, #need do
  if found[need[i]] then
    dropped[#dropped + 1] = at[i]
  else
    kept[#kept + 1] = need[i]
  end
end

local blob = table.concat(kept, '\n')
if #kept > 0 then
  for s = 1, #kept, CHUNK do
    redis.call('SADD', KEYS[4], unpack(kept, s, math.min(s + CHUNK - 1, #kept)))
  end
  redis.call('EXPIREAT', KEYS[4], ARGV[5])
  version = version + 1
  tok = ARGV[10]
  redis.call('HSET', jr, tostring(version), blob, 't' .. version, tok)
  redis.call('HDEL', jr, tostring(version - keep), 't' .. (version - keep))
  redis.call('HSET', state, 'version', version, 'tok', tok)
end
redis.call('HSET', dec, field, tostring(version) .. '|\n' .. ARGV[14] .. '\n' .. blob)
-- The reply names the (few) dropped positions, not the (many) kept IDs.
return {'OK', epoch, tostring(version), table.concat(dropped, ','),
        table.concat(catch, '\n'), mode, tostring(#need), tok}
