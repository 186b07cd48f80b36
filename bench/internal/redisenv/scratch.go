package redisenv

import (
	"context"
	"os"
	"path/filepath"
)

// Scratch is a benchmark's working directory (0755: nginx's workers read what the benchmark puts
// there) with a seeded redis-server under Dir/redis.
type Scratch struct {
	Dir   string
	Redis *Server
}

// StartScratch creates the directory (named after `name`), starts Redis in it and seeds the
// benchmark's cluster and app. Close stops Redis and removes the directory.
func StartScratch(ctx context.Context, name string) (*Scratch, error) {
	dir, err := os.MkdirTemp("", name+"-")
	if err != nil {
		return nil, err
	}
	s := &Scratch{Dir: dir}
	if err := s.start(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Scratch) start(ctx context.Context) error {
	if err := os.Chmod(s.Dir, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(s.Dir, "redis"), 0o700); err != nil {
		return err
	}
	red, err := Start(ctx, filepath.Join(s.Dir, "redis"))
	if err != nil {
		return err
	}
	s.Redis = red
	return Seed(ctx, red.Client())
}

// Close stops Redis (if it started) and removes the directory.
func (s *Scratch) Close() {
	if s.Redis != nil {
		s.Redis.Stop()
	}
	_ = os.RemoveAll(s.Dir)
}
