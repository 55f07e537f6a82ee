-- The ID index of one shard's time bucket (catalog format 2), shared by
-- claim.lua and snapshot.lua (prepended to each; Redis forbids globals, so
-- everything here is a chunk-local).
--
-- IDs are stored as their 16-byte digests (dedup.catalog.id_digests) in small
-- hashes that Redis keeps in its compact listpack encoding (<= 128 fields by
-- default): "<index>:<a>" holds the digests of sub-bucket a, each field with an
-- empty value, plus an empty field "" so a sub-bucket never empties (its TTL
-- is set once, when it is created). The index hash "<index>" holds L, p and n:
-- linear hashing (Litwin) over the first four digest bytes h. A digest lives
-- in sub-bucket h mod 2^L, or h mod 2^(L+1) when that is below the split
-- pointer p; there are 2^L + p sub-buckets, and one more (bucket p split in
-- two) whenever the n digests exceed FILL per sub-bucket. So the index grows
-- one small hash at a time and every hash stays compact at any size.
-- Every key of a bucket expires at the same instant, set when it is created.

local DIGEST = 16
local FORMAT = '2'
local FILL = 32
local CHUNK = 3000

local function head(d)
  local b1, b2, b3, b4 = string.byte(d, 1, 4)
  return ((b1 * 256 + b2) * 256 + b3) * 256 + b4
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

-- Mark found[id] = true for each of ids the index holds.
local function index_lookup(index, ids, found)
  local level, split = index_shape(index)
  if not level then return end
  for a, g in pairs(group_by_addr(ids, level, split, found)) do
    local key = index .. ':' .. a
    for s = 1, #g, CHUNK do
      local e = math.min(s + CHUNK - 1, #g)
      local r = redis.call('HMGET', key, unpack(g, s, e))
      for j = 1, #r do
        if r[j] then found[g[s + j - 1]] = true end
      end
    end
  end
end

-- HSET key f '' for every f of fields (or HDEL them), in chunks.
local function write_fields(cmd, key, fields)
  for s = 1, #fields, CHUNK do
    local e = math.min(s + CHUNK - 1, #fields)
    local args = {}
    for i = s, e do
      args[#args + 1] = fields[i]
      if cmd == 'HSET' then args[#args + 1] = '' end
    end
    redis.call(cmd, key, unpack(args))
  end
end

-- Add ids (new to the index): first split sub-buckets until the index has room
-- for them (moving only digests already there), then write each to its final
-- sub-bucket, so no sub-bucket ever overfills its compact encoding. Keys created
-- here expire at expire_at (a time already past deletes the bucket: it is gone).
local function index_add(index, ids, expire_at)
  local level, split, n = index_shape(index)
  local created = {}
  if not level then
    level, split, n = 0, 0, 0
    created[1] = index
    created[2] = index .. ':0'
    redis.call('HSET', created[2], '', '')
  end
  n = n + #ids
  local buckets = 2 ^ level + split
  while n > FILL * buckets do
    local from = index .. ':' .. split
    local to = index .. ':' .. (split + 2 ^ level)
    local wide = 2 ^ (level + 1)
    local move = {}
    for _, f in ipairs(redis.call('HKEYS', from)) do
      if f ~= '' and head(f) % wide ~= split then move[#move + 1] = f end
    end
    redis.call('HSET', to, '', '')
    created[#created + 1] = to
    write_fields('HSET', to, move)
    write_fields('HDEL', from, move)
    split = split + 1
    if split == 2 ^ level then
      level, split = level + 1, 0
    end
    buckets = buckets + 1
  end
  for a, g in pairs(group_by_addr(ids, level, split, nil)) do
    write_fields('HSET', index .. ':' .. a, g)
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
    local blob = table.concat(redis.call('HKEYS', index .. ':' .. a))
    if #blob > 0 then out[#out + 1] = blob end
  end
end

