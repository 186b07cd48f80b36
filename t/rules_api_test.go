package t

import (
	"testing"
	"time"

	"tollgate/t/harness"
)

// A rule created through the admin API is enforced by a real gateway, its counters and events
// come back through the API, and deleting it lifts the limit.
func TestRuleCreatedThroughTheAPIIsEnforcedByTheGateway(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	cp := harness.StartControlPlane(t, s.redis.URL(), map[string]string{
		"TOLLGATE_ADMIN_PASSWORD": adminPassword, "TOLLGATE_CP_JOBS": "false", "TOLLGATE_LIVE_INTERVAL": "1s",
		"TOLLGATE_API_RATE": "1000", "TOLLGATE_API_BURST": "1000"}) // the test polls the API
	api := loginAdmin(t, cp)
	alice := map[string]string{"X-User-Id": "alice"}
	bob := map[string]string{"X-User-Id": "bob"}
	if got := admitted(t, g, 4, "PUT", "/photos/a", "demo-p1", "", alice); got != 4 {
		t.Fatalf("before the rule: %d of 4 admitted", got)
	}
	v := api.change("POST", "/api/v1/rules", map[string]any{
		"id": "api-per-user", "scope": "user", "user_key": "header:X-User-Id",
		"match":     map[string]any{"app_ids": []string{"demo-p1"}, "methods": []string{"PUT"}},
		"algorithm": "fixed_window", "limit": 2, "window_seconds": 3600})
	s.waitVersion(v)
	if got := admitted(t, g, 5, "PUT", "/photos/a", "demo-p1", "api-per-user", alice); got != 2 {
		t.Fatalf("alice: %d of 5 admitted, want the rule's 2", got)
	}
	if got := admitted(t, g, 3, "PUT", "/photos/a", "demo-p1", "api-per-user", bob); got != 2 {
		t.Fatalf("bob: %d of 3 admitted, want 2 (his own counter)", got)
	}
	if got := admitted(t, g, 3, "GET", "/photos/a", "demo-p1", "", alice); got != 3 {
		t.Fatalf("GET is not matched by the rule: %d of 3 admitted", got)
	}

	var list struct {
		Data []struct {
			ID    string `json:"id"`
			Stats struct {
				Hits    int64 `json:"hits"`
				Blocked int64 `json:"blocked"`
			} `json:"stats"`
		} `json:"data"`
	}
	harness.Eventually(t, 10*time.Second, "the gateway's counters in GET /api/v1/rules", func() bool {
		api.do("GET", "/api/v1/rules", nil, &list)
		return len(list.Data) == 1 && list.Data[0].Stats.Hits == 8 && list.Data[0].Stats.Blocked == 4
	})
	var ev struct {
		Data []struct {
			EventType string `json:"event_type"`
			RuleID    string `json:"rule_id"`
			Action    string `json:"action_taken"`
			Code      int    `json:"response_code"`
		} `json:"data"`
	}
	harness.Eventually(t, 10*time.Second, "rule_triggered events in GET /api/v1/events", func() bool {
		api.do("GET", "/api/v1/events?rule_id=api-per-user&event_type=rule_triggered", nil, &ev)
		return len(ev.Data) > 0
	})
	for _, e := range ev.Data {
		if e.RuleID != "api-per-user" || e.EventType != "rule_triggered" || e.Action != "blocked" || e.Code != 429 {
			t.Fatalf("event %+v", e)
		}
	}

	v = api.change("DELETE", "/api/v1/rules/api-per-user", nil)
	s.waitVersion(v)
	if got := admitted(t, g, 3, "PUT", "/photos/a", "demo-p1", "", alice); got != 3 {
		t.Fatalf("after the delete: %d of 3 admitted", got)
	}
}
