package keys

// Keys of the admin API. Only the control plane reads and writes them (the gateways never do),
// so they are not part of keys.golden, the contract shared with the Lua side. None has a hash
// tag and no command ever touches two of them at once (they may live in different slots).

const adminPrefix = rlPrefix + "admin:"

// AdminUsers is the hash username -> JSON user record (role, bcrypt hash, state).
func AdminUsers() string { return adminPrefix + "users" }

// AdminAudit is the audit stream (bounded by XADD MAXLEN ~).
func AdminAudit() string { return adminPrefix + "audit" }

// AdminSecret is the generated JWT signing secret shared by the control-plane replicas.
func AdminSecret() string { return adminPrefix + "jwt_secret" }

// AdminSession is a login session (refresh-token family) by its id; deleting it revokes the
// session's access and refresh tokens.
func AdminSession(sid string) string { return adminPrefix + "session:" + sid }

// AdminRefresh is one refresh token by the hex SHA-256 of the token (never the token itself).
func AdminRefresh(tokenHash string) string { return adminPrefix + "refresh:" + tokenHash }

// AdminLoginFailures counts recent login attempts of one account from one client ("user",
// "<user>:<client>") or failures of one client ("ip"); a client is the hex of an IPv4 address
// or of an IPv6 /64 (auth.ClientID).
func AdminLoginFailures(kind, id string) string {
	return adminPrefix + "login:" + kind + ":" + id
}

// AdminAlerts is the hash alert id -> JSON alert.
func AdminAlerts() string { return adminPrefix + "alerts" }

// AdminAuditAnonymous is the audit stream of requests refused before authentication, trimmed
// on its own so that they can never push authenticated entries out of AdminAudit.
func AdminAuditAnonymous() string { return adminPrefix + "audit:anonymous" }

// AdminUserSessions is the set of a user's session ids, so that deleting, disabling or
// changing the user can end every session at once.
func AdminUserSessions(user string) string { return adminPrefix + "user_sessions:" + user }

// AppBuckets is the set of the buckets an app owns in Buckets: read by the control plane only
// (to list them and to remove them with their app), so not part of keys.golden.
func AppBuckets(app string) string { return rlPrefix + "app_buckets:" + app }

// ConfigWriteLock is the lock every config write of the control plane holds (a random token
// with a TTL, taken and renewed by leader_claim, released by leader_release): the checks of a
// change, its scripts, its indexes and its version bump run as one, whichever replica writes.
func ConfigWriteLock() string { return rlPrefix + "config:write_lock" }
