// The gateways' Redis user (deploy/redis/gateway.acl) can write the keys its scripts and
// reports write and read the config, and nothing else: every command the gateway sends during a
// representative run (recorded with MONITOR, the commands its scripts run included) passes
// ACL DRYRUN, and every write of the config (app configs, key and bucket maps, rules, breakers,
// clusters, connection limits, the version, the epoch, the change log, config notices) is
// refused.
package t

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tollgate/internal/keys"
	"tollgate/internal/store"
)

// monitorLine is one command of MONITOR's output: the client's address ("lua" inside a script)
// and the command's arguments.
type monitorLine struct {
	addr string
	args []string
}

// parseMonitor reads `1700000000.1 [0 127.0.0.1:5000] "cmd" "arg\x00"`; ok false for other lines.
func parseMonitor(s string) (monitorLine, bool) {
	open := strings.IndexByte(s, '[')
	closeAt := strings.IndexByte(s, ']')
	if open < 0 || closeAt < open {
		return monitorLine{}, false
	}
	f := strings.Fields(s[open+1 : closeAt])
	if len(f) != 2 {
		return monitorLine{}, false
	}
	l := monitorLine{addr: f[1]}
	rest := s[closeAt+1:]
	for i := 0; i < len(rest); i++ {
		if rest[i] != '"' {
			continue
		}
		var b strings.Builder
		for i++; i < len(rest) && rest[i] != '"'; i++ {
			c := rest[i]
			if c != '\\' || i+1 >= len(rest) {
				b.WriteByte(c)
				continue
			}
			i++
			switch rest[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				if v, err := strconv.ParseUint(rest[i+1:i+3], 16, 8); err == nil {
					b.WriteByte(byte(v))
					i += 2
				}
			default:
				b.WriteByte(rest[i])
			}
		}
		l.args = append(l.args, b.String())
	}
	return l, len(l.args) > 0
}

// recorder records MONITOR and the addresses of the gateways' connections (CLIENT LIST).
type recorder struct {
	mu    sync.Mutex
	lines []monitorLine
	gw    map[string]bool
	stop  chan struct{}
	done  sync.WaitGroup
}

func record(t *testing.T, s *stack) *recorder {
	t.Helper()
	conn, err := net.Dial("tcp", s.redis.Addr())
	if err != nil {
		t.Fatal(err)
	}
	rc := &recorder{gw: map[string]bool{}, stop: make(chan struct{})}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	if l, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		t.Fatalf("MONITOR: %q %v", l, err)
	}
	rc.done.Add(2)
	go func() {
		defer rc.done.Done()
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			if m, ok := parseMonitor(strings.TrimRight(l, "\r\n")); ok {
				rc.mu.Lock()
				rc.lines = append(rc.lines, m)
				rc.mu.Unlock()
			}
		}
	}()
	go func() {
		defer rc.done.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			rc.clients(s)
			select {
			case <-rc.stop:
				_ = conn.Close()
				return
			case <-tick.C:
			}
		}
	}()
	return rc
}

func (rc *recorder) clients(s *stack) {
	list, err := s.rdb.ClientList(context.Background()).Result()
	if err != nil {
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, line := range strings.Split(list, "\n") {
		var addr, user string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "addr="); ok {
				addr = v
			} else if v, ok := strings.CutPrefix(f, "user="); ok {
				user = v
			}
		}
		if user == "tollgate-gateway" {
			rc.gw[addr] = true
		}
	}
}

// commands stops recording and returns the gateways' commands, each script's commands after the
// EVALSHA/EVAL that ran it (MONITOR shows a script's call first, then its commands).
func (rc *recorder) commands(s *stack) [][]string {
	rc.clients(s)
	close(rc.stop)
	rc.done.Wait()
	var out [][]string
	gwScript := false
	for _, l := range rc.lines {
		if l.addr == "lua" {
			if gwScript {
				out = append(out, l.args)
			}
			continue
		}
		gwScript = false
		if !rc.gw[l.addr] {
			continue
		}
		cmd := strings.ToLower(l.args[0])
		gwScript = cmd == "evalsha" || cmd == "eval"
		if cmd == "auth" || cmd == "hello" { // MONITOR redacts their arguments
			continue
		}
		out = append(out, l.args)
	}
	return out
}

func (s *stack) dryRun(args []string) error {
	a := []any{"ACL", "DRYRUN", "tollgate-gateway"}
	for _, x := range args {
		a = append(a, x)
	}
	res, err := s.rdb.Do(context.Background(), a...).Text()
	if err != nil {
		return err
	}
	if res != "OK" {
		return fmt.Errorf("%s", res)
	}
	return nil
}

func TestGatewayRedisUserWritesOnlyWhatItsScriptsWrite(t *testing.T) {
	s := newStack(t, stackOptions{apps: appsOf(app("acl-a", 50, 100), app("acl-b", 5, 5)),
		env: map[string]string{"TOLLGATE_CONFIG_POLL": "0.2", "TOLLGATE_REPORT_INTERVAL": "0.2",
			"TOLLGATE_CONN_STATS_INTERVAL": "0.2"}})
	g := s.gw()
	ctx := context.Background()
	rc := record(t, s)
	// new workers: their subscription and first load are recorded too
	old := workers(t, g)
	g.Signal(syscall.SIGHUP)
	eventually(t, "new nginx workers", func() bool {
		now := workers(t, g)
		return len(now) == len(old) && !slices.ContainsFunc(now, func(p int) bool { return slices.Contains(old, p) })
	})

	// a representative run: credentials, a bucket owner, the app header, a node and a global rule,
	// a breaker, connection limits, refusals (events), config changes and a full load
	const akid = "AKIAACLTEST000000001"
	_, v, err := s.store.AddAccessKey(ctx, "acl-a", akid)
	if err != nil {
		t.Fatal(err)
	}
	s.waitVersion(v)
	if _, v, err = s.store.PutBucket(ctx, "aclbucket", "acl-a"); err != nil {
		t.Fatal(err)
	}
	s.waitVersion(v)
	s.putRules(nil, base("acl-node", 3, 60, rule{"match": rule{"app_ids": []string{"acl-b"}}}),
		base("acl-global", 1000, 60, rule{"distribution": "global", "match": rule{"app_ids": []string{"acl-a"}}}))
	b, _ := json.Marshal(breakerCfg(map[string]any{"name": "acl-brk"}))
	s.putHash(store.ChangeBreaker, "acl-brk", keys.BreakersIndex(), "acl-brk", string(b))
	s.putHash(store.ChangeConnApp, "acl-a", keys.ConnConfig("default", "acl-a"), "max_connections", "50")
	for i := 0; i < 20; i++ {
		g.Do("GET", "/aclbucket/o", "", nil, map[string]string{"Authorization": sigV4(akid)})
		g.Do("PUT", "/aclbucket/o", "", strings.NewReader("x"), nil)
		g.Do("GET", "/b/o", "acl-a", nil, nil)
		g.Do("GET", "/b/o", "acl-b", nil, nil) // refused by the rule and the tiny bucket: events
		g.Do("GET", "/b/o", "no-such-app", nil, nil)
	}
	waitCharged(t, g, "acl-a", "GET", 20)
	if _, err := s.store.Bump(ctx, func(ctx context.Context) error { return nil }); err != nil {
		t.Fatal(err) // a version without a change logged: a full load
	}
	v, _ = s.store.ConfigVersion(ctx)
	s.waitVersion(v)
	eventually(t, "the node's report in ratelimit:gateways", func() bool {
		return s.rdb.HExists(ctx, keys.Gateways(), g.NodeID).Val()
	})
	eventually(t, "a blocked event in the stream", func() bool {
		return s.rdb.XLen(ctx, keys.EventsStream()).Val() > 0
	})
	eventually(t, "connection statistics of acl-a", func() bool {
		return s.rdb.Exists(ctx, keys.ConnNodeStats("default", "acl-a", g.NodeID)).Val() == 1
	})

	cmds := rc.commands(s)
	seen := map[string]int{}
	checked := map[string]bool{}
	for _, c := range cmds {
		name := strings.ToLower(c[0])
		seen[name]++
		k := strings.Join(c, "\x00")
		if checked[k] {
			continue
		}
		checked[k] = true
		if err := s.dryRun(c); err != nil {
			t.Errorf("the gateway sent %q, which its user may not: %v", c, err)
		}
	}
	var names []string
	for n, c := range seen {
		names = append(names, fmt.Sprintf("%s×%d", n, c))
	}
	sort.Strings(names)
	t.Logf("%d commands of the gateway checked (%d distinct): %s", len(cmds), len(checked), strings.Join(names, " "))
	// the run is representative: the scripts, their writes and the config reads all appear
	for _, want := range []string{"evalsha", "hincrby", "hmget", "hscan", "get", "xadd", "hset",
		"subscribe", "zadd"} {
		if seen[want] == 0 {
			t.Errorf("the run never saw the gateway send %s: not representative", want)
		}
	}

	// writes of the config are refused
	refused := [][]string{
		{"hset", keys.AppsIndex(), "acl-a", `{"guaranteed_quota":1000000}`},
		{"hdel", keys.AppsIndex(), "acl-b"},
		{"del", keys.AppsIndex()},
		{"hset", keys.AccessKeys(), "AKIAVICTIM", "acl-a"},
		{"hdel", keys.AccessKeys(), akid},
		{"hset", keys.Buckets(), "victim-bucket", "acl-a"},
		{"sadd", keys.AppAccessKeys("acl-a"), "AKIAVICTIM"},
		{"hset", keys.RulesIndex(), "acl-node", "{}"},
		{"hdel", keys.RulesIndex(), "acl-node"},
		{"hset", keys.BreakersIndex(), "acl-brk", "{}"},
		{"hset", keys.ClustersIndex(), "default", "{}"},
		{"set", keys.ConfigVersion(), "999"},
		{"del", keys.ConfigVersion()},
		{"set", keys.ConfigEpoch(), "forged"},
		{"del", keys.ConfigChanges()},
		{"hset", keys.ConnConfig("default", "acl-a"), "max_connections", "1"},
		{"hset", keys.ConnCluster("default"), "max_connections", "1"},
		{"sadd", keys.ConnLimited("default"), "acl-b"},
		{"set", keys.ConnIndexed(), "0"},
		{"zadd", keys.L1Apps("default"), "1", "acl-a"},
		{"publish", keys.ConfigChannel(), "999"},
		{"publish", keys.EmergencyChannel(), `{"cluster_id":"default","active":true}`},
		{"hget", "ratelimit:admin:users", "admin"},
		{"eval", "return 1", "1", keys.AppsIndex()},
	}
	for _, c := range refused {
		if err := s.dryRun(c); err == nil {
			t.Errorf("the gateways' user may %q", c)
		}
	}
}
