// Package scripts loads the Redis scripts of redis-scripts/ and runs them by SHA. Each script's
// source is _common.lua + "\n" + <name>.lua, exactly as the Lua gateway builds it, so both sides
// compute the same SHA1 and share one script cache entry.
package scripts

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"

	"tollgate"
)

const (
	dir        = "redis-scripts"
	commonFile = "_common.lua"
)

// ErrUnknownScript is returned for a script name that is not in redis-scripts/.
var ErrUnknownScript = errors.New("unknown script")

// Set is the immutable set of scripts, by name without the .lua suffix.
type Set struct {
	byName map[string]*redis.Script
	names  []string
}

// New builds the set from the embedded redis-scripts/ directory.
func New() (*Set, error) {
	return FromFS(tollgate.RedisScripts(), dir)
}

// FromFS builds the set from the *.lua files of dir in fsys.
func FromFS(fsys fs.FS, dir string) (*Set, error) {
	common, err := fs.ReadFile(fsys, path.Join(dir, commonFile))
	if err != nil {
		return nil, fmt.Errorf("scripts: read %s: %w", commonFile, err)
	}
	files, err := fs.Glob(fsys, path.Join(dir, "*.lua"))
	if err != nil {
		return nil, fmt.Errorf("scripts: list %s: %w", dir, err)
	}
	s := &Set{byName: map[string]*redis.Script{}}
	for _, f := range files {
		base := path.Base(f)
		if base == commonFile {
			continue
		}
		body, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, fmt.Errorf("scripts: read %s: %w", base, err)
		}
		name := strings.TrimSuffix(base, ".lua")
		s.byName[name] = redis.NewScript(Source(common, body))
		s.names = append(s.names, name)
	}
	if len(s.names) == 0 {
		return nil, fmt.Errorf("scripts: no *.lua script in %s", dir)
	}
	sort.Strings(s.names)
	return s, nil
}

// Source is the exact text sent to Redis for a script: the common prelude, a newline, the script.
func Source(common, script []byte) string {
	return string(common) + "\n" + string(script)
}

// Names lists the script names in lexical order.
func (s *Set) Names() []string { return append([]string(nil), s.names...) }

// Len is the number of scripts.
func (s *Set) Len() int { return len(s.names) }

// SHA returns the SHA1 hex digest of a script's source.
func (s *Set) SHA(name string) (string, error) {
	sc, ok := s.byName[name]
	if !ok {
		return "", fmt.Errorf("scripts: %q: %w", name, ErrUnknownScript)
	}
	return sc.Hash(), nil
}

// LoadAll loads every script into the Redis script cache (SCRIPT LOAD) and checks that Redis
// computed the same SHA.
func (s *Set) LoadAll(ctx context.Context, rdb redis.Scripter) error {
	for _, name := range s.names {
		if err := s.load(ctx, rdb, name); err != nil {
			return err
		}
	}
	return nil
}

func (s *Set) load(ctx context.Context, rdb redis.Scripter, name string) error {
	sc := s.byName[name]
	sha, err := sc.Load(ctx, rdb).Result()
	if err != nil {
		return fmt.Errorf("scripts: load %s: %w", name, err)
	}
	if sha != sc.Hash() {
		return fmt.Errorf("scripts: load %s: redis returned sha %s, want %s", name, sha, sc.Hash())
	}
	return nil
}

// Ensure loads the scripts missing from the Redis script cache (after SCRIPT FLUSH or a restart)
// and returns how many of the set are loaded.
func (s *Set) Ensure(ctx context.Context, rdb redis.Scripter) (int, error) {
	shas := make([]string, len(s.names))
	for i, name := range s.names {
		shas[i] = s.byName[name].Hash()
	}
	exists, err := rdb.ScriptExists(ctx, shas...).Result()
	if err != nil {
		return 0, fmt.Errorf("scripts: script exists: %w", err)
	}
	for i, ok := range exists {
		if !ok {
			if err := s.load(ctx, rdb, s.names[i]); err != nil {
				return 0, err
			}
		}
	}
	return len(s.names), nil
}

// Run executes a script by EVALSHA, falling back to EVAL (which also caches it) on NOSCRIPT.
// An unknown name yields a Cmd whose error wraps ErrUnknownScript.
func (s *Set) Run(ctx context.Context, rdb redis.Scripter, name string, keys []string, args ...any) *redis.Cmd {
	sc, ok := s.byName[name]
	if !ok {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(fmt.Errorf("scripts: %q: %w", name, ErrUnknownScript))
		return cmd
	}
	return sc.Run(ctx, rdb, keys, args...)
}
