package live

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"tollgate/internal/keys"
)

// Message is a WebSocket message (docs/api.md: GET /api/v1/ws).
type Message struct {
	Type      string `json:"type"` // metrics, alert, config_change, emergency
	Data      any    `json:"data"`
	Timestamp int64  `json:"timestamp"`
}

const subscriberBuffer = 32

// hub fans messages out to subscribers; a subscriber that cannot keep up is dropped (its
// channel closed) rather than slowing the others.
type hub struct {
	mu   sync.Mutex
	subs map[chan []byte]struct{}
}

func newHub() *hub { return &hub{subs: map[chan []byte]struct{}{}} }

func (h *hub) subscribe() (<-chan []byte, func()) {
	ch := make(chan []byte, subscriberBuffer)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() { h.drop(ch) }
}

func (h *hub) drop(ch chan []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[ch]; ok {
		delete(h.subs, ch)
		close(ch)
	}
}

func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

func (h *hub) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		delete(h.subs, ch)
		close(ch)
	}
}

func (h *hub) broadcast(typ string, data any, now time.Time) {
	b, err := json.Marshal(Message{Type: typ, Data: data, Timestamp: now.Unix()})
	if err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- b:
		default:
			delete(h.subs, ch)
			close(ch)
		}
	}
}

// relay pushes config_change and emergency messages from the pub/sub channels the gateways
// listen to (so changes made through any replica, or by the emergency job, reach every
// dashboard). go-redis resubscribes after a lost connection.
func (s *Service) relay(ctx context.Context) {
	ps := s.o.Redis.Subscribe(ctx, keys.ConfigChannel(), keys.EmergencyChannel())
	defer ps.Close()
	ch := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			now := s.o.Clock.Now()
			switch m.Channel {
			case keys.ConfigChannel():
				if v, err := strconv.ParseInt(m.Payload, 10, 64); err == nil {
					s.hub.broadcast("config_change", map[string]int64{"config_version": v}, now)
				}
			case keys.EmergencyChannel():
				var notice map[string]any
				if json.Unmarshal([]byte(m.Payload), &notice) == nil {
					s.hub.broadcast("emergency", notice, now)
				}
			}
		}
	}
}
