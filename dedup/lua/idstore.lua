-- The ID index of one shard's time bucket (catalog format 3), shared by
-- claim.lua, snapshot.lua and contains.lua (prepended to each; Redis forbids
-- globals, so everything here is a chunk-local).
--
-- IDs are stored as their 16-byte digests (dedup.catalog.id_digests),
-- concatenated without separators in strings: "<index>:<a>" holds sub-bucket a.
-- The index hash "<index>" holds L, p and n: linear hashing (Litwin) over the
-- first four digest bytes h. A digest lives in sub-bucket h mod 2^L, or
-- h mod 2^(L+1) when that is below the split pointer p; there are 2^L + p
-- sub-buckets, and one more (sub-bucket p split in two) whenever the n digests
-- exceed FILL per sub-bucket. A claim appends to each sub-bucket it touches
-- once (APPEND: a few hundred commands per claim, not one per ID; its new IDs
-- arrive sorted so that each sub-bucket's share is one run), and a lookup
-- searches one sub-bucket of ~32 KB (an aligned plain find).
--
-- Memory is the 16 bytes of a digest and little more: a claim appends to the
-- sub-bucket's tail "<index>:<a>:t", not to the sub-bucket itself, and a tail
-- that reaches a TAIL_SHARE-th of an average sub-bucket is merged into it with
-- one exact SET (half: an eighth kept 1 byte per ID less and cost Redis ~30%
-- more CPU per claim in bench_growth, every merge copying the whole sub-bucket).
-- Redis doubles a string's room when APPEND outgrows it, so a sub-bucket
-- appended in place carried ~60% spare room (25.3 bytes per ID at 10M IDs); now
-- only the tails do. A sub-bucket's digests are those of the string and its
-- tail (a missing tail is an empty one: format 2, which had none, reads as
-- format 3).
-- Every key of a bucket expires at the same instant, set when it is created
-- (APPEND and SET ... KEEPTTL keep it), and moved later only by index_extend
-- (a longer retention horizon).

local DIGEST = 16
local FORMAT = '3'
-- a shard of these formats is read as it is (format 2: no tails); a claim records
-- FORMAT in it before it writes, so the release of that format refuses it from then on
local READABLE = {['2'] = true, ['3'] = true}
local FILL = 2048
local TAIL_SHARE = 2
local TAIL_MIN = 64 * DIGEST

local function tail_of(sub)
  return sub .. ':t'
end

-- The head of the digest starting at byte s of blob (read in place, no substring).
local function head_at(blob, s)
  local b1, b2, b3, b4 = string.byte(blob, s, s + 3)
  return ((b1 * 256 + b2) * 256 + b3) * 256 + b4
end

local function head(d)
  return head_at(d, 1)
end

local function addr_of(d, level, split)
  local h = head(d)
  local a = h % (2 ^ level)
  if a < split then a = h % (2 ^ (level + 1)) end
  return a
end

-- L, p, n of an index, or nil when the bucket holds nothing (or expired)
local function index_shape(index)
  local m = redis.call('HMGET', index, 'L', 'p', 'n')
  if not m[1] then return nil end
  return tonumber(m[1]), tonumber(m[2]), tonumber(m[3])
end

local function group_by_addr(ids, level, split, skip)
  local groups = {}
  for i = 1, #ids do
    local id = ids[i]
    if not (skip and skip[id]) then
      local a = addr_of(id, level, split)
      local g = groups[a]
      if not g then g = {}; groups[a] = g end
      g[#g + 1] = id
    end
  end
  return groups
end

-- Whether blob (concatenated digests) holds digest d at a digest boundary.
local function holds(blob, d)
  local start = 1
  while true do
    local i = string.find(blob, d, start, true)
    if not i then return false end
    if (i - 1) % DIGEST == 0 then return true end
    start = i + 1
  end
end

-- Mark found[id] = true for each of ids the index holds.
local function index_lookup(index, ids, found)
  local level, split = index_shape(index)
  if not level then return end
  for a, g in pairs(group_by_addr(ids, level, split, found)) do
    local sub = index .. ':' .. a
    local blob = redis.call('GET', sub)
    local tail = redis.call('GET', tail_of(sub))
    for j = 1, #g do
      if (blob and holds(blob, g[j])) or (tail and holds(tail, g[j])) then
        found[g[j]] = true
      end
    end
  end
end

-- The sub-bucket of the digest at 0-based position i of blob (addr_of, read in place).
local function addr_at(blob, i, level, split)
  local h = head_at(blob, i * DIGEST + 1)
  local a = h % (2 ^ level)
  if a < split then a = h % (2 ^ (level + 1)) end
  return a
end

-- Append digests to sub-bucket sub through its tail; merge the tail into it once
-- the tail holds merge_at bytes or more. A tail created here is listed in created
-- (it must expire with its bucket).
local function append_to(sub, digests, merge_at, created)
  local tail = tail_of(sub)
  local len = redis.call('APPEND', tail, digests)
  if len == #digests then created[#created + 1] = tail end
  if len >= merge_at then
    redis.call('SET', sub, (redis.call('GET', sub) or '') .. redis.call('GET', tail), 'KEEPTTL')
    redis.call('DEL', tail)
  end
end

-- Append a blob of digests sorted by their bit-reversed head (the caller's
-- dedup.catalog.spread_order). A sub-bucket is chosen by the low bits of the head,
-- which that order puts first, so at every level the digests of one sub-bucket are
-- one run: each run is found by a binary search and appended whole, with no work
-- per digest (a claim's new IDs, the bulk of what it writes).
local function append_sorted(index, blob, level, split, merge_at, created)
  local count = #blob / DIGEST
  local i = 0
  while i < count do
    local a = addr_at(blob, i, level, split)
    local lo, hi = i, count - 1
    while lo < hi do
      local mid = math.floor((lo + hi + 1) / 2)
      if addr_at(blob, mid, level, split) == a then lo = mid else hi = mid - 1 end
    end
    append_to(index .. ':' .. a, string.sub(blob, i * DIGEST + 1, (lo + 1) * DIGEST),
              merge_at, created)
    i = lo + 1
  end
end

-- Add digests new to the index: ids (a table, any order) and sorted (nil, or a blob
-- in spread order, see append_sorted). First split sub-buckets until the index has
-- room for them (moving only digests already there), then append each to its final
-- sub-bucket. Keys created here expire at expire_at (a time already past deletes
-- the bucket: it is gone).
local function index_add(index, ids, expire_at, sorted)
  local level, split, n = index_shape(index)
  local created = {}
  if not level then
    level, split, n = 0, 0, 0
    created[1] = index
    created[2] = index .. ':0'
    redis.call('SET', created[2], '')
  end
  n = n + #ids + (sorted and #sorted / DIGEST or 0)
  local buckets = 2 ^ level + split
  while n > FILL * buckets do
    local from = index .. ':' .. split
    local to = index .. ':' .. (split + 2 ^ level)
    local wide = 2 ^ (level + 1)
    local blob = (redis.call('GET', from) or '') .. (redis.call('GET', tail_of(from)) or '')
    redis.call('DEL', tail_of(from))
    -- Each digest's head is read in place and the digests go on in runs: one
    -- substring per run of digests that stay (or move) together, none per digest (a
    -- substring per digest made splits about two thirds of a claim's Redis time).
    -- Both halves keep the digests' order; the step past the end closes the last run.
    local stay, move = {}, {}
    local from_at, staying = 1, nil
    for s = 1, #blob + DIGEST, DIGEST do
      local stays = nil
      if s <= #blob then
        -- head_at(blob, s) written out: a call per digest cost the split ~15% more
        local b1, b2, b3, b4 = string.byte(blob, s, s + 3)
        stays = (((b1 * 256 + b2) * 256 + b3) * 256 + b4) % wide == split
      end
      if stays ~= staying then
        if staying ~= nil then
          local run = string.sub(blob, from_at, s - 1)
          if staying then stay[#stay + 1] = run else move[#move + 1] = run end
        end
        from_at, staying = s, stays
      end
    end
    redis.call('SET', from, table.concat(stay), 'KEEPTTL')
    redis.call('SET', to, table.concat(move))
    created[#created + 1] = to
    split = split + 1
    if split == 2 ^ level then
      level, split = level + 1, 0
    end
    buckets = buckets + 1
  end
  local merge_at = math.max(TAIL_MIN, math.floor(n / buckets / TAIL_SHARE) * DIGEST)
  if sorted then append_sorted(index, sorted, level, split, merge_at, created) end
  for a, g in pairs(group_by_addr(ids, level, split, nil)) do
    append_to(index .. ':' .. a, table.concat(g), merge_at, created)
  end
  redis.call('HSET', index, 'L', level, 'p', split, 'n', n)
  for i = 1, #created do
    redis.call('EXPIREAT', created[i], expire_at)
  end
end

-- Every digest of the index as blobs (one per sub-bucket, digests concatenated).
local function index_dump(index, out)
  local level, split = index_shape(index)
  if not level then return end
  for a = 0, 2 ^ level + split - 1 do
    local sub = index .. ':' .. a
    local blob = redis.call('GET', sub)
    if blob and #blob > 0 then out[#out + 1] = blob end
    local tail = redis.call('GET', tail_of(sub))
    if tail and #tail > 0 then out[#out + 1] = tail end
  end
end


-- Make every key of an existing index live until at least expire_at (EXPIREAT GT:
-- never earlier than it already does). A bucket's keys get their expiry when it is
-- created, so a longer retention horizon must reach the buckets that exist: without
-- this their IDs would be forgotten on the old horizon's schedule.
local function index_extend(index, expire_at)
  local level, split = index_shape(index)
  if not level then return end
  redis.call('EXPIREAT', index, expire_at, 'GT')
  for a = 0, 2 ^ level + split - 1 do
    redis.call('EXPIREAT', index .. ':' .. a, expire_at, 'GT')
    redis.call('EXPIREAT', tail_of(index .. ':' .. a), expire_at, 'GT')
  end
end
