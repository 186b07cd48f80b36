-- l2_refill: refill an app's L2 bucket now, folding in returned tokens and paying debt with what
-- would overflow the burst (Property 13). Run by the control plane's debt job so an idle app
-- repays too; grants do the same on their own path.
-- KEYS[1] l2 hash  KEYS[2] l1 hash  KEYS[3] the cluster's debtors set (optional: the app leaves it
-- once its debt is repaid, or when it has no L2 state)
-- ARGV[1] optional now (Unix microseconds; simulator only, default Redis TIME)
-- Returns {tokens, debt, borrowed, paid, principal_paid}; {0, 0, 0, 0, 0, 'unknown_app'}
-- without L2 state.
local now = tg_now_us(ARGV[1])
local b = tg_load_l2(KEYS[1])
if not b then
    if KEYS[3] then
        redis.call('SREM', KEYS[3], tg_app_of(KEYS[1]))
    end
    return { 0, 0, 0, 0, 0, 'unknown_app' }
end
tg_settle(b, KEYS[2], now)
tg_save_l2(KEYS[1], b)
if KEYS[3] and b.debt <= 0 then
    redis.call('SREM', KEYS[3], tg_app_of(KEYS[1]))
end
return { math.floor(b.tokens), b.debt, b.borrowed, b.paid, b.principal_paid }
