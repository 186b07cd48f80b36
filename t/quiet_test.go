// An idle gateway is quiet: no error-level line in nginx's error.log (a config subscription
// that receives nothing is normal, not a read timeout to report).
package t

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"tollgate/internal/keys"
)

func TestIdleGatewayLogsNoError(t *testing.T) {
	s := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_REPORT_INTERVAL": "1"}})
	g := s.gw()
	// idle for longer than the subscriber's old read timeout (5 s) and its new one (6 s): the
	// node's reports (every second) tell how long
	lastSeen := func() int64 {
		v, err := s.rdb.HGet(context.Background(), keys.Gateways(), g.NodeID).Result()
		if err != nil {
			return 0
		}
		var r struct {
			LastSeen int64 `json:"last_seen"`
		}
		_ = json.Unmarshal([]byte(v), &r)
		return r.LastSeen
	}
	var first int64
	slowly(t, 20*time.Second, "the node's first report", func() bool { first = lastSeen(); return first > 0 })
	slowly(t, 30*time.Second, "13 s of idle reports", func() bool { return lastSeen() >= first+13 })
	bad := regexp.MustCompile(`(?m)^.*\[(error|crit|alert|emerg)\].*$`).FindAllString(g.ErrorLog(), 10)
	if len(bad) > 0 {
		t.Fatalf("an idle gateway logged %d error-level lines:\n%s", len(bad), bad)
	}
}
