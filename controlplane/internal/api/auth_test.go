package api

import (
	"context"
	"encoding/base64"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"

	"tollgate/controlplane/internal/auth"
	"tollgate/controlplane/internal/users"
)

// publicRoutes are the only routes answered without a token (docs/design.md §9).
var publicRoutes = []string{
	"GET /health",
	"GET /api/v1/openapi.json",
	"POST /api/v1/auth/login",
	"POST /api/v1/auth/logout",
	"POST /api/v1/auth/refresh",
}

// selfService are the writes any signed-in user may make (for themselves).
var selfService = map[string]bool{"PUT /api/v1/auth/password": true}

func registered(t *testing.T, f *fixture) gin.RoutesInfo {
	t.Helper()
	routes := f.handler.(*gin.Engine).Routes()
	if len(routes) < 30 {
		t.Fatalf("only %d routes registered", len(routes))
	}
	return routes
}

// concrete fills the path parameters of a route template with valid ids.
func concrete(path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, ":") {
			parts[i] = "x1"
		}
	}
	return strings.Join(parts, "/")
}

func TestEveryRouteButThePublicOnesNeedsAToken(t *testing.T) {
	f := newFixture(t)
	var public []string
	for _, rt := range registered(t, f) {
		key := rt.Method + " " + rt.Path
		res := f.call(t, rt.Method, concrete(rt.Path), "", nil)
		if res.code == http.StatusUnauthorized {
			if res.errCode() != "missing_token" || res.hdr.Get("WWW-Authenticate") == "" {
				t.Errorf("%s: 401 %s without WWW-Authenticate or reason", key, res.raw)
			}
			continue
		}
		public = append(public, key)
	}
	sort.Strings(public)
	want := append([]string(nil), publicRoutes...)
	sort.Strings(want)
	if strings.Join(public, "\n") != strings.Join(want, "\n") {
		t.Fatalf("routes answered without a token:\n%s\nwant exactly:\n%s", strings.Join(public, "\n"), strings.Join(want, "\n"))
	}
}

func TestRolesAreEnforced(t *testing.T) {
	f := newFixture(t)
	viewer := f.user(t, "vera", auth.Viewer)
	operator := f.user(t, "otto", auth.Operator)
	isPublic := map[string]bool{}
	for _, p := range publicRoutes {
		isPublic[p] = true
	}
	checked := 0
	for _, rt := range registered(t, f) {
		key := rt.Method + " " + rt.Path
		if isPublic[key] || selfService[key] {
			continue
		}
		write := rt.Method != http.MethodGet
		usersRoute := strings.HasPrefix(rt.Path, "/api/v1/users")
		adminOnly := usersRoute || rt.Path == "/api/v1/config/import" || rt.Path == "/api/v1/config/restore" ||
			rt.Path == "/api/v1/config/backups"
		operatorRead := rt.Path == "/api/v1/audit" || rt.Path == "/api/v1/config/export"
		cases := []struct {
			who    string
			token  string
			denied bool
		}{
			{"viewer", viewer, write || adminOnly || operatorRead},
			{"operator", operator, adminOnly},
		}
		for _, c := range cases {
			res := f.call(t, rt.Method, concrete(rt.Path), c.token, nil)
			if c.denied && (res.code != http.StatusForbidden || res.errCode() != "forbidden") {
				t.Errorf("%s by %s = %d %s, want 403 forbidden", key, c.who, res.code, res.raw)
			}
			if !c.denied && (res.code == http.StatusForbidden || res.code == http.StatusUnauthorized) {
				t.Errorf("%s by %s = %d %s, want it allowed", key, c.who, res.code, res.raw)
			}
			checked++
		}
	}
	if checked < 60 {
		t.Fatalf("only %d route/role pairs checked", checked)
	}
}

func TestLoginNeverTellsWhichAccountsExist(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.users.Create(ctx, "dora", "dora-password-123", auth.Viewer); err != nil {
		t.Fatal(err)
	}
	disabled := true
	if _, err := f.users.Update(ctx, "dora", users.Patch{Disabled: &disabled}); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, user, password string }{
		{"wrong password", "admin", "not-the-password"},
		{"unknown user", "nobody", "whatever-password"},
		{"disabled user", "dora", "dora-password-123"},
		{"odd user name", "a b\x00c", "whatever-password"},
		{"password over 72 bytes", "admin", adminPassword + strings.Repeat("x", 80)},
		{"empty", "", ""},
	}
	var first string
	for _, c := range cases {
		res := f.call(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": c.user, "password": c.password})
		msg := res.errCode() + "|" + res.str("error", "message")
		if res.code != 401 || res.errCode() != "invalid_credentials" {
			t.Errorf("%s: %d %s, want 401 invalid_credentials", c.name, res.code, res.raw)
		}
		if first == "" {
			first = msg
		} else if msg != first {
			t.Errorf("%s: answer %q differs from %q", c.name, msg, first)
		}
	}
	if res := f.call(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": "admin", "password": adminPassword}); res.code != 200 || res.str("data", "token_type") != "Bearer" {
		t.Fatalf("good login = %d %s", res.code, res.raw)
	}
}

func TestLoginThrottledPerAccountAndPerAddress(t *testing.T) {
	f := newFixtureWith(t, fixtureOptions{loginMaxUser: 3, loginMaxIP: 5})
	bad := map[string]string{"username": "admin", "password": "wrong-password-1"}
	for i := 0; i < 3; i++ {
		if res := f.call(t, "POST", "/api/v1/auth/login", "", bad); res.code != 401 {
			t.Fatalf("attempt %d: %d %s", i+1, res.code, res.raw)
		}
	}
	res := f.call(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": "admin", "password": adminPassword})
	if res.code != 429 || res.errCode() != "login_throttled" || res.hdr.Get("Retry-After") == "" {
		t.Fatalf("4th attempt on the account = %d %s %v, want 429 login_throttled with Retry-After", res.code, res.raw, res.hdr)
	}
	// the address: two more failures on other accounts reach its limit of 5
	for _, u := range []string{"ghost1", "ghost2"} {
		f.call(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": u, "password": "wrong-password-1"})
	}
	if res := f.call(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": "ghost3", "password": "x"}); res.code != 429 {
		t.Fatalf("6th attempt from the address = %d %s, want 429", res.code, res.raw)
	}
}

func TestRefreshRotatesAndReuseRevokesTheSession(t *testing.T) {
	f := newFixture(t)
	s1 := f.login(t, "admin", adminPassword)
	r2 := f.call(t, "POST", "/api/v1/auth/refresh", "", map[string]string{"refresh_token": s1.refresh})
	if r2.code != 200 || r2.str("data", "refresh_token") == s1.refresh {
		t.Fatalf("refresh = %d %s, want a new refresh token", r2.code, r2.raw)
	}
	s2 := session{access: r2.str("data", "access_token"), refresh: r2.str("data", "refresh_token")}
	if res := f.call(t, "GET", "/api/v1/auth/me", s2.access, nil); res.code != 200 || res.str("data", "user", "username") != "admin" {
		t.Fatalf("me with the refreshed token = %d %s", res.code, res.raw)
	}
	reuse := f.call(t, "POST", "/api/v1/auth/refresh", "", map[string]string{"refresh_token": s1.refresh})
	if reuse.code != 401 || reuse.errCode() != "refresh_token_reused" {
		t.Fatalf("reuse = %d %s, want 401 refresh_token_reused", reuse.code, reuse.raw)
	}
	for _, c := range []struct {
		name string
		res  result
	}{
		{"access token of the session", f.call(t, "GET", "/api/v1/auth/me", s2.access, nil)},
		{"latest refresh token", f.call(t, "POST", "/api/v1/auth/refresh", "", map[string]string{"refresh_token": s2.refresh})},
	} {
		if c.res.code != 401 {
			t.Errorf("%s after reuse = %d %s, want 401", c.name, c.res.code, c.res.raw)
		}
	}
	if res := f.call(t, "POST", "/api/v1/auth/refresh", "", map[string]string{"refresh_token": "abc.def"}); res.code != 401 || res.errCode() != "invalid_refresh_token" {
		t.Fatalf("garbage refresh token = %d %s", res.code, res.raw)
	}
}

func TestLogoutEndsTheSession(t *testing.T) {
	f := newFixture(t)
	s := f.login(t, "admin", adminPassword)
	if res := f.call(t, "POST", "/api/v1/auth/logout", "", map[string]string{"refresh_token": s.refresh}); res.code != 200 {
		t.Fatalf("logout = %d %s", res.code, res.raw)
	}
	if res := f.call(t, "GET", "/api/v1/apps", s.access, nil); res.code != 401 || res.errCode() != "session_ended" {
		t.Fatalf("access token after logout = %d %s, want 401 session_ended", res.code, res.raw)
	}
	if res := f.call(t, "POST", "/api/v1/auth/refresh", "", map[string]string{"refresh_token": s.refresh}); res.code != 401 {
		t.Fatalf("refresh after logout = %d %s", res.code, res.raw)
	}
}

// forge signs claims with a method and key of the test's choosing.
func forge(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestBadTokensAre401(t *testing.T) {
	f := newFixture(t)
	good := f.login(t, "admin", adminPassword)
	cl, err := f.tokens.Verify(good.access)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claims := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		m := jwt.MapClaims{"iss": auth.Issuer, "aud": auth.Audience, "sub": "admin", "role": "admin",
			"sid": cl.SID, "iat": now.Unix(), "exp": now.Add(time.Minute).Unix(), "jti": "x"}
		edit(m)
		return m
	}
	hs := func(edit func(jwt.MapClaims)) string {
		return forge(t, jwt.SigningMethodHS256, testSecret, claims(edit))
	}
	none := forge(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims(func(jwt.MapClaims) {}))
	cases := []struct{ name, header, code string }{
		{"control: a forged but well-formed token is accepted", "Bearer " + hs(func(jwt.MapClaims) {}), ""},
		{"alg none", "Bearer " + none, "invalid_token"},
		{"HS512", "Bearer " + forge(t, jwt.SigningMethodHS512, testSecret, claims(func(jwt.MapClaims) {})), "invalid_token"},
		{"other secret", "Bearer " + forge(t, jwt.SigningMethodHS256, []byte(strings.Repeat("k", 40)), claims(func(jwt.MapClaims) {})), "invalid_token"},
		{"expired", "Bearer " + hs(func(m jwt.MapClaims) { m["exp"] = now.Add(-time.Minute).Unix() }), "token_expired"},
		{"no exp", "Bearer " + hs(func(m jwt.MapClaims) { delete(m, "exp") }), "invalid_token"},
		{"no iat", "Bearer " + hs(func(m jwt.MapClaims) { delete(m, "iat") }), "invalid_token"},
		{"iat in the future", "Bearer " + hs(func(m jwt.MapClaims) { m["iat"] = now.Add(time.Hour).Unix() }), "invalid_token"},
		{"wrong audience", "Bearer " + hs(func(m jwt.MapClaims) { m["aud"] = "someone-else" }), "invalid_token"},
		{"no audience", "Bearer " + hs(func(m jwt.MapClaims) { delete(m, "aud") }), "invalid_token"},
		{"wrong issuer", "Bearer " + hs(func(m jwt.MapClaims) { m["iss"] = "evil" }), "invalid_token"},
		{"odd subject", "Bearer " + hs(func(m jwt.MapClaims) { m["sub"] = "../admin" }), "invalid_token"},
		{"unknown role", "Bearer " + hs(func(m jwt.MapClaims) { m["role"] = "root" }), "invalid_token"},
		{"unknown session", "Bearer " + hs(func(m jwt.MapClaims) { m["sid"] = strings.Repeat("a", 32) }), "session_ended"},
		{"unknown user", "Bearer " + hs(func(m jwt.MapClaims) { m["sub"] = "ghost" }), "session_ended"},
		{"oversized", "Bearer " + strings.Repeat("a", 9000), "invalid_token"},
		{"garbage", "Bearer not.a.token", "invalid_token"},
		{"basic scheme", "Basic YWRtaW46YWRtaW4=", "invalid_token"},
		{"bearer without token", "Bearer ", "invalid_token"},
		{"tampered payload", "Bearer " + tamper(good.access), "invalid_token"},
	}
	for _, c := range cases {
		res := f.send(t, "GET", "/api/v1/apps", nil, map[string]string{"Authorization": c.header})
		if c.code == "" {
			if res.code != 200 {
				t.Errorf("%s: %d %s", c.name, res.code, res.raw)
			}
			continue
		}
		if res.code != 401 || res.errCode() != c.code {
			t.Errorf("%s: %d %s, want 401 %s", c.name, res.code, res.raw, c.code)
		}
	}
}

// tamper swaps the payload of a token for one claiming another role, keeping the signature.
func tamper(tok string) string {
	parts := strings.Split(tok, ".")
	return parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"role":"admin","sub":"root"}`)) + "." + parts[2]
}

func TestChangesToAUserApplyAtOnce(t *testing.T) {
	f := newFixture(t)
	adm := f.admin(t)
	op := f.user(t, "otto", auth.Operator)
	if res := f.call(t, "GET", "/api/v1/audit", op, nil); res.code != 200 {
		t.Fatalf("operator reads the audit: %d %s", res.code, res.raw)
	}
	res := f.call(t, "PUT", "/api/v1/users/otto", adm, map[string]any{"role": "viewer"})
	if res.code != 200 || res.str("data", "role") != "viewer" {
		t.Fatalf("demote = %d %s", res.code, res.raw)
	}
	if res := f.call(t, "GET", "/api/v1/audit", op, nil); res.code != 401 || res.errCode() != "session_ended" {
		t.Fatalf("token of the demoted user = %d %s, want 401 session_ended", res.code, res.raw)
	}
	viewer := f.login(t, "otto", "otto-password-123").access
	if res := f.call(t, "GET", "/api/v1/audit", viewer, nil); res.code != 403 {
		t.Fatalf("demoted user after a new login = %d %s, want 403", res.code, res.raw)
	}
}

func TestUsersAndTheLastAdmin(t *testing.T) {
	f := newFixture(t)
	adm := f.admin(t)
	cases := []struct {
		name, method, path string
		body               any
		code               int
		errCode            string
	}{
		{"create", "POST", "/api/v1/users", map[string]any{"username": "ann", "password": "ann-password-123", "role": "operator"}, 201, ""},
		{"duplicate", "POST", "/api/v1/users", map[string]any{"username": "ann", "password": "ann-password-123", "role": "operator"}, 409, "already_exists"},
		{"weak password", "POST", "/api/v1/users", map[string]any{"username": "bob", "password": "short", "role": "viewer"}, 400, "weak_password"},
		{"unknown role", "POST", "/api/v1/users", map[string]any{"username": "bob", "password": "bob-password-123", "role": "root"}, 400, "invalid_role"},
		{"odd name", "POST", "/api/v1/users", map[string]any{"username": "b/b", "password": "bob-password-123", "role": "viewer"}, 400, "invalid_id"},
		{"demote the last admin", "PUT", "/api/v1/users/admin", map[string]any{"role": "operator"}, 409, "last_admin"},
		{"disable the last admin", "PUT", "/api/v1/users/admin", map[string]any{"disabled": true}, 409, "last_admin"},
		{"delete the last admin", "DELETE", "/api/v1/users/admin", nil, 409, "last_admin"},
		{"get", "GET", "/api/v1/users/ann", nil, 200, ""},
		{"get unknown", "GET", "/api/v1/users/zed", nil, 404, "not_found"},
		{"delete", "DELETE", "/api/v1/users/ann", nil, 200, ""},
		{"list", "GET", "/api/v1/users", nil, 200, ""},
	}
	for _, c := range cases {
		res := f.call(t, c.method, c.path, adm, c.body)
		if res.code != c.code || res.errCode() != c.errCode {
			t.Errorf("%s: %d %s, want %d %q", c.name, res.code, res.raw, c.code, c.errCode)
		}
		if strings.Contains(res.raw, "password_hash") || strings.Contains(res.raw, "$2a$") {
			t.Errorf("%s: the answer shows a password hash: %s", c.name, res.raw)
		}
	}
}

func TestPasswordChange(t *testing.T) {
	f := newFixture(t)
	tok := f.user(t, "pat", auth.Viewer)
	if res := f.call(t, "PUT", "/api/v1/auth/password", tok, map[string]string{"current_password": "wrong-one-123", "new_password": "pat-new-password-1"}); res.code != 400 || res.errCode() != "invalid_current_password" {
		t.Fatalf("wrong current password = %d %s", res.code, res.raw)
	}
	if res := f.call(t, "PUT", "/api/v1/auth/password", tok, map[string]string{"current_password": "pat-password-123", "new_password": "pat-new-password-1"}); res.code != 200 {
		t.Fatalf("change = %d %s", res.code, res.raw)
	}
	if res := f.call(t, "GET", "/api/v1/apps", tok, nil); res.code != 401 {
		t.Fatalf("old token after a password change = %d, want 401", res.code)
	}
	f.login(t, "pat", "pat-new-password-1")
}

func TestPerUserRateLimit(t *testing.T) {
	f := newFixtureWith(t, fixtureOptions{rate: 1, burst: 3})
	tok := f.admin(t)
	other := f.user(t, "val", auth.Viewer)
	for i := 0; i < 3; i++ {
		if res := f.call(t, "GET", "/api/v1/auth/me", tok, nil); res.code != 200 {
			t.Fatalf("request %d: %d %s", i+1, res.code, res.raw)
		}
	}
	res := f.call(t, "GET", "/api/v1/auth/me", tok, nil)
	if res.code != 429 || res.errCode() != "rate_limited" || res.hdr.Get("Retry-After") != "1" {
		t.Fatalf("4th request = %d %s %v, want 429 rate_limited, Retry-After 1", res.code, res.raw, res.hdr.Get("Retry-After"))
	}
	if res := f.call(t, "GET", "/api/v1/auth/me", other, nil); res.code != 200 {
		t.Fatalf("another user is limited too: %d", res.code)
	}
}

func TestCORSAllowlist(t *testing.T) {
	f := newFixtureWith(t, fixtureOptions{origins: []string{"https://console.example.com"}})
	tok := f.admin(t)
	cases := []struct {
		name, method, origin string
		code                 int
		acao                 string
	}{
		{"allowed origin", "GET", "https://console.example.com", 200, "https://console.example.com"},
		{"other origin: no CORS headers", "GET", "https://evil.example.com", 200, ""},
		{"allowed preflight", "OPTIONS", "https://console.example.com", 204, "https://console.example.com"},
		{"refused preflight", "OPTIONS", "https://evil.example.com", 403, ""},
		{"null origin", "OPTIONS", "null", 403, ""},
	}
	for _, c := range cases {
		hdr := map[string]string{"Origin": c.origin, "Authorization": "Bearer " + tok}
		if c.method == "OPTIONS" {
			hdr["Access-Control-Request-Method"] = "PUT"
			hdr["Authorization"] = ""
		}
		res := f.send(t, c.method, "/api/v1/apps", nil, hdr)
		if res.code != c.code || res.hdr.Get("Access-Control-Allow-Origin") != c.acao {
			t.Errorf("%s: %d ACAO %q, want %d %q", c.name, res.code, res.hdr.Get("Access-Control-Allow-Origin"), c.code, c.acao)
		}
		if res.hdr.Get("Access-Control-Allow-Credentials") != "" {
			t.Errorf("%s: Access-Control-Allow-Credentials set", c.name)
		}
	}
}
