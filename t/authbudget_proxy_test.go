package t

import (
	"net/http"
	"testing"
)

// Behind TOLLGATE_TRUSTED_PROXIES the auth-failure budget counts the client that
// X-Forwarded-For names, both when it counts a backend's refusal (log phase) and when it checks
// the budget (access phase): the forgeries of 10.0.0.1, sent through a trusted proxy, are
// refused at the gateway once that client's budget is spent, while a forgery of 10.0.0.2
// through the same proxy still reaches the backend.
func TestAuthFailureBudgetCountsTheForwardedClient(t *testing.T) {
	s := newAbuseStack(t, abuseOptions{env: map[string]string{"TOLLGATE_TRUSTED_PROXIES": "127.0.0.0/8, ::1/128",
		"TOLLGATE_AUTH_FAIL_BUDGET": "5", "TOLLGATE_AUTH_FAIL_KEY_BUDGET": "0"}})
	c := s.clientFrom("", 1)
	from := func(client string) (int, string) {
		r := forged(s.req("GET", "/"+victimTenant.bucket+"/steady", nil))
		r.Header.Set("X-Forwarded-For", client)
		resp, err := c.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("X-Tollgate-Reason")
	}
	hits := s.backendHits("attacker")
	got := map[string]int{}
	for i := 0; i < 10; i++ {
		code, reason := from("10.0.0.1")
		got[http.StatusText(code)+" "+reason]++
	}
	// a failure is counted in the log phase, after its answer is sent: the next forgery can be
	// in flight before it, so the budget of 5 may let a sixth through, never more
	if n := s.backendHits("attacker") - hits; n < 5 || n > 6 || got["Service Unavailable auth_failure_budget"] != 10-int(n) {
		t.Fatalf("10 forgeries of 10.0.0.1 through a trusted proxy: %v, %d at the backend; want 5 (or a sixth in "+
			"flight) refused by the backend, then the rest by the budget of that client", got, n)
	}
	hits = s.backendHits("attacker")
	if code, reason := from("10.0.0.2"); code != http.StatusForbidden || reason == "auth_failure_budget" ||
		s.backendHits("attacker")-hits != 1 {
		t.Fatalf("a forgery of 10.0.0.2: %d %q; want the backend's 403 (another client's budget)", code, reason)
	}
}
