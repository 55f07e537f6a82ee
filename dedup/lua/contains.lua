-- Whether any of the indexes KEYS[1..] holds the digest ARGV[1] (1 or 0); a read.
local found = {}
for k = 1, #KEYS do
  index_lookup(KEYS[k], {ARGV[1]}, found)
end
if found[ARGV[1]] then return 1 end
return 0
