-- Import digests into a time bucket's index (catalog migration, dedup/migrate.py):
-- those the index does not hold yet are added, so a repeat adds nothing.
-- KEYS[1] the bucket's index; ARGV[1] its expire-at; ARGV[2] concatenated digests.
-- Returns the number of digests added.
local ids = {}
for s = 1, #ARGV[2], DIGEST do ids[#ids + 1] = string.sub(ARGV[2], s, s + DIGEST - 1) end
local found = {}
index_lookup(KEYS[1], ids, found)
local new = {}
for i = 1, #ids do
  if not found[ids[i]] then
    new[#new + 1] = ids[i]
    found[ids[i]] = true  -- a digest twice in one call is added once
  end
end
if #new > 0 then index_add(KEYS[1], new, ARGV[1]) end
return #new
