-- owner_set: set the owner of a field of an owner map (bucket -> app) and return the owner it
-- had, in one step, so that the caller can move the field out of the old owner's set.
-- KEYS[1] the map hash  ARGV[1] field  ARGV[2] new owner (app id)
-- Returns the previous owner, or false when the field was absent.
local old = redis.call('HGET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return old
