-- Redis key and channel names, one builder per key (contract: testdata/keys.golden).
-- Per-cluster keys carry the hash tag {<cluster_id>} so every script stays in one slot.
-- Callers validate ids with valid_id() before building any key.
local find = string.find

local _M = {}

function _M.valid_id(s)
    return type(s) == "string" and #s >= 1 and #s <= 128 and not find(s, "[^%w_%-]")
end

function _M.l1(c) return "ratelimit:{" .. c .. "}:l1" end
function _M.l1_apps(c) return "ratelimit:{" .. c .. "}:l1:apps" end
function _M.l2(c, a) return "ratelimit:{" .. c .. "}:l2:" .. a end
function _M.leases(c, a) return "ratelimit:{" .. c .. "}:leases:" .. a end
function _M.stats(c, a) return "ratelimit:{" .. c .. "}:stats:" .. a end
function _M.nodes(c, a) return "ratelimit:{" .. c .. "}:nodes:" .. a end
function _M.active(c) return "ratelimit:{" .. c .. "}:active" end
function _M.debtors(c) return "ratelimit:{" .. c .. "}:debtors" end
function _M.totals(c) return "ratelimit:{" .. c .. "}:totals" end
function _M.conn_config(c, a) return "connlimit:{" .. c .. "}:config:" .. a end
function _M.conn_cluster(c) return "connlimit:{" .. c .. "}:cluster" end
function _M.conn_limited(c) return "connlimit:{" .. c .. "}:limited" end
function _M.conn_indexed() return "connlimit:indexed" end
function _M.conn_node_stats(c, a, node)
    return "connlimit:{" .. c .. "}:stats:" .. a .. ":node:" .. node
end
function _M.apps_index() return "ratelimit:apps" end
function _M.clusters_index() return "ratelimit:clusters" end
function _M.config_version() return "ratelimit:config:version" end
function _M.config_epoch() return "ratelimit:config:epoch" end
function _M.config_changes() return "ratelimit:config:changes" end
function _M.config_channel() return "ratelimit:config:update" end
function _M.emergency_channel() return "ratelimit:emergency" end
function _M.gateways() return "ratelimit:gateways" end
function _M.emergency_history(c) return "ratelimit:{" .. c .. "}:emergency:history" end
function _M.leader_lock() return "ratelimit:controlplane:leader" end
function _M.rules_index() return "ratelimit:rules" end
function _M.rule_stats() return "ratelimit:rules:stats" end
-- prefix of a global rule's state keys; one hash tag per rule keeps them in one slot
function _M.rule_counter(r) return "ratelimit:rule:{" .. r .. "}:" end
function _M.breakers_index() return "ratelimit:breakers" end
function _M.events_stream() return "ratelimit:events" end
-- S3 identity (no hash tag): access key id -> app, an app's key ids, bucket -> app
function _M.access_keys() return "ratelimit:access_keys" end
function _M.app_access_keys(a) return "ratelimit:app_access_keys:" .. a end
function _M.buckets() return "ratelimit:buckets" end
-- access key id -> its secret, sealed (tollgate.s3.sigsecrets): keys whose signatures are checked
function _M.access_key_secrets() return "ratelimit:access_key_secrets" end

return _M
