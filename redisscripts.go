// Package tollgate holds the assets shared by the Go programs of the repository: the Redis
// scripts of redis-scripts/, the single source of every L1/L2 state transition.
package tollgate

import "embed"

//go:embed redis-scripts/*.lua
var redisScripts embed.FS

// RedisScripts returns the embedded redis-scripts/*.lua files (paths "redis-scripts/<name>.lua").
func RedisScripts() embed.FS {
	return redisScripts
}
