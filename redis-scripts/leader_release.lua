-- leader_release: give up the leader lock if this replica holds it.
-- KEYS[1] lock key  ARGV[1] this replica's token
-- Returns 1 when released, 0 when another replica (or nobody) held it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('DEL', KEYS[1])
    return 1
end
return 0
