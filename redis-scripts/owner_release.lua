-- owner_release: remove a field of an owner map (access key or bucket -> app) only while the
-- owner is the one given, so that a release never takes a key another app holds.
-- KEYS[1] the map hash  ARGV[1] field  ARGV[2] owner (app id)
-- Returns 1 when removed, 0 when the field is absent or held by another owner.
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
    redis.call('HDEL', KEYS[1], ARGV[1])
    return 1
end
return 0
