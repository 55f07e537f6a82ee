-- Atomic, idempotent claim of one (app, batch, shard): check candidates,
-- add the new IDs, record the decision, bump the shard version.
--
-- IDs travel and are stored as 16-byte digests (catalog format 3, see
-- idstore.lua): every ID argument is a concatenation of digests, no separators.
--
-- KEYS[1] state hash (f, epoch, version, tok, n, owner, fence)
-- KEYS[2] decisions hash ("<qid>:<batch>" -> "<version>|\n<digest>\n<kept digests>")
-- KEYS[3] journal hash (version -> digests claimed at that version; "t<version>" ->
--         the token of that version)
-- KEYS[4] index of the current time bucket; KEYS[5] the next one (a batch clock
--         that went back across a bucket boundary); KEYS[6..] older live buckets
-- ARGV[1] decision field       ARGV[2] client filter epoch ("" = no filter)
-- ARGV[3] client version (-1)  ARGV[4] batch time (unix seconds; not used here)
-- ARGV[5] expire-at of the current bucket
-- ARGV[6] num shards           ARGV[7] lease owner query id ("" = exempt)
-- ARGV[8] the owner's fence number from lease.lua (the app id's lease)
-- ARGV[9] journal versions kept
-- ARGV[10] a fresh random token: the epoch if the shard is new, and the token
--          of the version this claim creates
-- ARGV[11] Bloom negatives (digests in spread order: dedup.catalog.spread_order),
-- ARGV[12] Bloom positives (digests)
-- ARGV[13] client filter token ("" = none)
-- ARGV[14] digest of the candidate IDs (order-free), kept in the decision so a
--          replay for other IDs is told apart from a retry
-- ARGV[15] "1": catch up first (a filter the journal can catch up gets the
--          catch-up alone and nothing is claimed; the caller claims again, current)
-- ARGV[16] retention horizon (seconds)   ARGV[17] bucket width (seconds)
-- Returns {status, ...}; "OK": {epoch, version, dropped, catch-up, mode, lookups,
-- token}; "CATCHUP": {epoch, version, catch-up, token}
-- where dropped lists the 0-based positions (comma-joined) of the duplicates
-- among the candidates, negatives first, then positives; catch-up concatenates
-- the digests the caller's filter missed; "REPLAY": {"<version>|\n<digest>\n<kept>"};
-- "FORMAT": the shard was written by a release with a catalog format this one does
-- not read (idstore.lua's READABLE).
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

local st = redis.call('HMGET', state, 'epoch', 'version', 'n', 'owner', 'fence', 'tok', 'f',
                      'jn', 'jlo', 'hz')
local epoch = st[1]
local version = tonumber(st[2] or '0')
local tok = st[6] or ''
if epoch and not READABLE[st[7] or '1'] then
  return {'FORMAT', st[7] or '1'}
end
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
  redis.call('HSET', state, 'epoch', epoch, 'version', 0, 'n', ARGV[6], 'f', FORMAT)
end
if qid ~= '' and tonumber(st[5] or '0') < fence then
  redis.call('HSET', state, 'owner', qid, 'fence', fence)
end
-- The shard remembers the horizon its buckets' expiries were last set for ('hz').
-- Under another one (a restart with a changed retention.horizon_seconds), every live
-- bucket is made to live for the new horizon (index_extend; a shorter one changes
-- nothing there, its buckets just expire sooner from now on). Once per change and
-- shard; a shard from before 'hz' was kept is brought up once the same way.
if st[10] ~= ARGV[16] then
  local current, width = tonumber(ARGV[5]), tonumber(ARGV[17])
  for k = 4, #KEYS do
    -- KEYS[4] the current bucket, KEYS[5] the next one, KEYS[6..] one older each
    local shift = (k == 4 and 0) or (k == 5 and width) or -(k - 5) * width
    index_extend(KEYS[k], current + shift)
  end
  redis.call('HSET', state, 'hz', ARGV[16])
end

local keep = tonumber(ARGV[9])
local JOURNAL_SHARE = 8
local JOURNAL_RECENT = 4
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
  if complete and ARGV[15] == '1' then
    -- Nothing judged, nothing written but the fence above: the caller brings its
    -- filter to this version and claims again on the trust path, which appends its
    -- new IDs whole where the journal path below works per ID (about 2.8x the Redis
    -- time for a claim of 25k IDs one version behind).
    return {'CATCHUP', epoch, tostring(version), table.concat(entries), tok}
  end
  if complete then
    mode = 'journal'
    journal = {}
    for i = 1, #entries do
      catch[#catch + 1] = entries[i]
      local e = entries[i]
      for s = 1, #e, DIGEST do journal[string.sub(e, s, s + DIGEST - 1)] = true end
    end
  end
end

-- need/at: IDs the catalog must judge and their candidate positions; kept: the
-- new IDs one by one, sorted: the new IDs as one blob in spread order
local kept, dropped, need, at = {}, {}, {}, {}
local sorted = nil
local pos = 0
local negatives, positives = ARGV[11], ARGV[12]
if mode == 'trust' then
  -- a current filter's negatives are new: no lookup, and no work per ID (they
  -- arrive in spread order and go to the index run by run, see append_sorted)
  sorted = negatives
  pos = #negatives / DIGEST
else
  for s = 1, #negatives, DIGEST do
    local id = string.sub(negatives, s, s + DIGEST - 1)
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
for s = 1, #positives, DIGEST do
  need[#need + 1] = string.sub(positives, s, s + DIGEST - 1)
  at[#need] = pos
  pos = pos + 1
end

-- Full catalog check of the rest over the live buckets.
local found = {}
for k = 4, #KEYS do
  if #need == 0 then break end
  index_lookup(KEYS[k], need, found)
end
for i = 1, #need do
  if found[need[i]] then
    dropped[#dropped + 1] = at[i]
  else
    kept[#kept + 1] = need[i]
  end
end

local blob = (sorted or '') .. table.concat(kept)
local added = #blob / DIGEST
if added > 0 then
  if st[7] and st[7] ~= FORMAT then
    -- from now on a release of the shard's older format must refuse it: it would not
    -- read the tails this claim may write (a new shard got FORMAT above)
    redis.call('HSET', state, 'f', FORMAT)
  end
  index_add(KEYS[4], kept, ARGV[5], sorted)
  version = version + 1
  tok = ARGV[10]
  redis.call('HSET', jr, tostring(version), blob, 't' .. version, tok)
  -- The journal keeps versions jlo..version (and the tokens of jlo-1..version): at
  -- most `keep` of them. The last JOURNAL_RECENT versions stay whatever their size
  -- (Spark runs a shard's claims on whichever Python worker is free, so filters a
  -- few versions behind are the common case, and catching one up costs what those
  -- versions claimed where a rebuild costs the whole shard); older ones only while
  -- the journal holds no more digests (jn) than a JOURNAL_SHARE-th of the shard's
  -- live IDs, beyond which a rebuild costs at most that many times a catch-up.
  local jn = tonumber(st[8] or '0') + added
  local jlo = tonumber(st[9] or '1')
  local live = 0
  for k = 4, #KEYS do live = live + tonumber(redis.call('HGET', KEYS[k], 'n') or '0') end
  local cap = math.floor(live / JOURNAL_SHARE)
  while jlo < version and (jlo <= version - keep
                           or (jn > cap and jlo <= version - JOURNAL_RECENT)) do
    jn = jn - redis.call('HSTRLEN', jr, tostring(jlo)) / DIGEST
    redis.call('HDEL', jr, tostring(jlo), 't' .. (jlo - 1))
    jlo = jlo + 1
  end
  redis.call('HSET', state, 'version', version, 'tok', tok, 'jn', jn, 'jlo', jlo)
end
redis.call('HSET', dec, field, tostring(version) .. '|\n' .. ARGV[14] .. '\n' .. blob)
-- The reply names the (few) dropped positions, not the (many) kept IDs.
return {'OK', epoch, tostring(version), table.concat(dropped, ','),
        table.concat(catch), mode, tostring(#need), tok}
