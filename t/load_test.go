package t

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"tollgate/t/harness"
)

func newRequest(ctx context.Context, method, url, body string) (*http.Request, error) {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	return http.NewRequestWithContext(ctx, method, url, r)
}

type loadResult struct {
	admitted, rejected, other atomic.Int64
	cost                      atomic.Int64 // sum of X-RateLimit-Cost of admitted requests
}

// load sends GETs of path for app from conc connections until stop is closed.
func load(g *harness.Gateway, app, path string, conc int, stop <-chan struct{}) *loadResult {
	return loadMethod(g, "GET", app, path, conc, stop)
}

// loadMethod sends requests of method to path for app from conc connections until stop closes.
func loadMethod(g *harness.Gateway, method, app, path string, conc int, stop <-chan struct{}) *loadResult {
	res := &loadResult{}
	var wg sync.WaitGroup
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest(method, g.URL+path, nil)
				req.Header.Set("X-App-Id", app)
				resp, err := g.Client.Do(req)
				if err != nil {
					res.other.Add(1)
					time.Sleep(time.Millisecond)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == 200:
					res.admitted.Add(1)
					c, _ := strconv.ParseInt(resp.Header.Get("X-RateLimit-Cost"), 10, 64)
					res.cost.Add(c)
				case resp.StatusCode == 429:
					res.rejected.Add(1)
				default:
					res.other.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return res
}
