package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gorilla/websocket"

	"tollgate/controlplane/internal/live"
)

// WebSocket limits.
const (
	wsReadLimit  = 1024 // clients only send control frames; anything bigger closes the socket
	wsWriteWait  = 10 * time.Second
	wsPongWait   = 60 * time.Second
	wsPingPeriod = 25 * time.Second
)

// originAllowed: no Origin (not a browser), the API's own origin, or one of the allowlist.
func (s *server) originAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	if s.origins[origin] {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// websocket upgrades an authenticated request (token in Authorization or in the subprotocol
// "tollgate.bearer.<token>", next to "tollgate.v1") and pushes the live messages: metrics every
// collection period (one at once), alerts, config changes and emergency notices. The socket
// closes (code 4001) when the access token expires or its session ends; the client reconnects
// with a fresh token.
func (s *server) websocket(c *gin.Context) {
	if !websocket.IsWebSocketUpgrade(c.Request) {
		s.fail(c, errBadRequest("websocket_required", "this endpoint speaks WebSocket only"))
		return
	}
	if !s.originAllowed(c.Request) {
		s.fail(c, apiErr(http.StatusForbidden, "origin_not_allowed", "this origin is not in TOLLGATE_CORS_ORIGINS"))
		return
	}
	p, _ := principalOf(c)
	tok, _ := bearer(c) // authenticate has read it
	up := websocket.Upgrader{Subprotocols: []string{wsProtocol}, HandshakeTimeout: 5 * time.Second,
		CheckOrigin: s.originAllowed}
	conn, err := up.Upgrade(c.Writer, c.Request, nil)
	if err != nil {
		return // the upgrader has answered
	}
	defer conn.Close()
	ch, cancel := s.opts.Live.Subscribe()
	defer cancel()
	done := make(chan struct{})
	go readPump(conn, done)
	if d, err := s.opts.Live.Dashboard(c.Request.Context(), "1h"); err == nil {
		b, _ := json.Marshal(live.Message{Type: "metrics", Data: d, Timestamp: time.Now().Unix()})
		if write(conn, websocket.TextMessage, b) != nil {
			return
		}
	}
	ctx := context.WithoutCancel(c.Request.Context())
	s.pump(conn, ch, done, time.Until(p.Expires), func() bool { return s.sessionAlive(ctx, tok) })
}

// sessionAlive re-checks a socket's token as every request is checked (session, user, state,
// TokensAfter). Only a refusal ends the socket: while Redis does not answer it stays open.
func (s *server) sessionAlive(ctx context.Context, tok string) bool {
	ctx, cancel := context.WithTimeout(ctx, wsWriteWait)
	defer cancel()
	_, err := s.principal(ctx, tok)
	return err == nil || classify(err).Status != http.StatusUnauthorized
}

// pump writes the live messages until the socket fails, the token expires or the session
// ends (re-checked every WSRecheck: logout, disable, delete, role or password change).
func (s *server) pump(conn *websocket.Conn, ch <-chan []byte, done <-chan struct{}, ttl time.Duration, alive func() bool) {
	ping := time.NewTicker(wsPingPeriod)
	defer ping.Stop()
	expire := time.NewTimer(max(ttl, time.Second))
	defer expire.Stop()
	recheck := time.NewTicker(s.opts.WSRecheck)
	defer recheck.Stop()
	for {
		select {
		case <-recheck.C:
			if !alive() {
				closeWith(conn, 4001, "session ended")
				return
			}
		case msg, open := <-ch:
			if !open {
				closeWith(conn, websocket.CloseTryAgainLater, "too slow or shutting down")
				return
			}
			if write(conn, websocket.TextMessage, msg) != nil {
				return
			}
		case <-ping.C:
			if write(conn, websocket.PingMessage, nil) != nil {
				return
			}
		case <-expire.C:
			closeWith(conn, 4001, "token expired")
			return
		case <-done:
			return
		}
	}
}

func write(conn *websocket.Conn, typ int, b []byte) error {
	_ = conn.SetWriteDeadline(time.Now().Add(wsWriteWait))
	return conn.WriteMessage(typ, b)
}

func closeWith(conn *websocket.Conn, code int, text string) {
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text),
		time.Now().Add(wsWriteWait))
}

// readPump reads (and drops) what the client sends, answering pings, until it fails: a closed
// socket, a missed pong, or a message over the read limit.
func readPump(conn *websocket.Conn, done chan<- struct{}) {
	defer close(done)
	conn.SetReadLimit(wsReadLimit)
	_ = conn.SetReadDeadline(time.Now().Add(wsPongWait))
	conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(wsPongWait)) })
	for {
		if _, _, err := conn.ReadMessage(); err != nil {
			return
		}
	}
}
