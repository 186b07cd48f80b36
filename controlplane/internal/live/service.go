package live

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/clock"
	"tollgate/internal/store"
)

// ErrAppNotFound: no app with that id in the latest snapshot.
var ErrAppNotFound = errors.New("app not found")

const (
	pingSamples    = 120
	collectTimeout = 4 * time.Second
)

// Options of the service.
type Options struct {
	Redis    redis.UniversalClient
	Catalog  Catalog
	L1       L1Reader
	Interval time.Duration // collection and push period (default 5 s, Req 23.8)
	PoolSize int           // of the Redis client, for the pool usage (default go-redis' default)
	Clock    clock.Clock
	Logger   *slog.Logger
	Alerts   AlertSettings // thresholds a deployment may change (zero fields: the defaults)
	// OnCollect, if set, sees every snapshot (e.g. metrics) and every collection error.
	OnCollect func(s *Snapshot, err error)
	// StoreLost, if set, tells whether the config store is lost and why (config_store_lost).
	StoreLost func() (lost bool, message string)
}

// Service collects snapshots, keeps history and alerts, and feeds subscribers.
type Service struct {
	o      Options
	col    *collector
	alerts alertStore
	hub    *hub

	mu    sync.RWMutex
	snap  *Snapshot
	hist  *history
	tr    *traffic
	bw    *bandwidth
	pings []time.Duration
	down  bool
}

// New returns the service; Run starts its loop.
func New(o Options) *Service {
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Alerts = o.Alerts.withDefaults()
	return &Service{o: o, col: newCollector(o.Redis, o.Catalog, o.L1, o.PoolSize),
		alerts: alertStore{rdb: o.Redis}, hub: newHub(), hist: newHistory(), tr: newTraffic(o.Alerts.keep()),
		bw: newBandwidth()}
}

// Interval is the collection period.
func (s *Service) Interval() time.Duration { return s.o.Interval }

// Run collects every interval and relays the config and emergency channels until ctx ends.
func (s *Service) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.relay(ctx) }()
	t := time.NewTicker(s.o.Interval)
	defer t.Stop()
	for {
		if err := s.Refresh(ctx); err != nil && ctx.Err() == nil {
			s.o.Logger.Warn("live: collection failed", "err", err)
		}
		select {
		case <-ctx.Done():
			s.hub.closeAll()
			wg.Wait()
			return
		case <-t.C:
		}
	}
}

// Refresh collects one snapshot, updates history and alerts, and pushes a metrics message (and
// the alerts that changed) to subscribers.
func (s *Service) Refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, collectTimeout)
	defer cancel()
	now := s.o.Clock.Now()
	snap, err := s.col.collect(ctx, now)
	if s.o.OnCollect != nil {
		s.o.OnCollect(snap, err)
	}
	if err != nil {
		s.mu.Lock()
		s.down = true
		s.mu.Unlock()
		return err
	}
	s.mu.Lock()
	prev := s.hist.prev
	s.bw.observe(snap) // before the history, which keeps its byte totals
	s.hist.observe(snap)
	s.tr.observe(snap)
	conds := evaluate(snap, prev, s.tr, s.o.Alerts)
	if s.o.StoreLost != nil {
		if lost, msg := s.o.StoreLost(); lost {
			conds = append(conds, cond("config_store_lost", "config", "critical", "%s", msg))
		}
	}
	s.snap, s.down = snap, false
	s.pings = append(s.pings, snap.RedisLatency)
	if len(s.pings) > pingSamples {
		s.pings = s.pings[len(s.pings)-pingSamples:]
	}
	s.mu.Unlock()
	changed, err := s.alerts.sync(ctx, now, conds)
	if err != nil {
		return err
	}
	for _, a := range changed {
		s.hub.broadcast("alert", a, now)
	}
	if s.hub.count() > 0 {
		if d, err := s.Dashboard(ctx, "1h"); err == nil {
			s.hub.broadcast("metrics", d, now)
		}
	}
	return nil
}

// Latest returns the newest snapshot, collecting one if there is none yet.
func (s *Service) Latest(ctx context.Context) (*Snapshot, error) {
	s.mu.RLock()
	snap := s.snap
	s.mu.RUnlock()
	if snap != nil {
		return snap, nil
	}
	if err := s.Refresh(ctx); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.snap, nil
}

// Dashboard is the dashboard data over range rng (1h, 6h, 24h, 7d).
func (s *Service) Dashboard(ctx context.Context, rng string) (Dashboard, error) {
	if _, err := s.Latest(ctx); err != nil {
		return Dashboard{}, err
	}
	alerts, err := s.alerts.list(ctx, true)
	if err != nil {
		return Dashboard{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return buildDashboard(s.snap, s.hist, rng, alerts, s.pings, s.down), nil
}

// AppDetail is one app's metrics over a range.
type AppDetail struct {
	App         AppState    `json:"app"`
	Requests1h  int64       `json:"requests_1h"`
	Cost1h      int64       `json:"cost_1h"`
	Rejected1h  int64       `json:"connections_rejected_1h"`
	BytesIn1h   int64       `json:"bytes_in_1h"`
	BytesOut1h  int64       `json:"bytes_out_1h"`
	RequestRate []TimePoint `json:"request_rate"`
	CostRate    []TimePoint `json:"cost_rate"`
	// bytes/s through the gateways over the range (in: uploads, out: downloads)
	BytesInRate  []TimePoint `json:"bytes_in_rate"`
	BytesOutRate []TimePoint `json:"bytes_out_rate"`
	Range        string      `json:"range"`
	Timestamp    int64       `json:"timestamp"`
}

// App returns an app's metrics (drill-down, Req 23.10): from the snapshot for an active app,
// else read now.
func (s *Service) App(ctx context.Context, id, rng string) (AppDetail, error) {
	if _, err := s.Latest(ctx); err != nil {
		return AppDetail{}, err
	}
	d, snap, ok := s.activeApp(id, rng)
	if ok {
		return d, nil
	}
	return s.idleApp(ctx, id, rng, snap)
}

// activeApp is the detail of an app of the latest snapshot; false (and the snapshot) when it
// is not in it.
func (s *Service) activeApp(id, rng string) (AppDetail, *Snapshot, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, a := range s.snap.Apps {
		if a.ID != id {
			continue
		}
		d := AppDetail{App: a, Range: rng, Timestamp: s.snap.At.Unix()}
		if sr := s.hist.apps[id]; sr != nil {
			w := sr.within("1h")
			d.Requests1h, d.Cost1h, d.Rejected1h = w.req, w.cost, w.rej
			d.BytesIn1h, d.BytesOut1h = w.bin, w.bout
			d.RequestRate, d.CostRate = sr.rates(rng)
			d.BytesInRate, d.BytesOutRate = sr.byteRates(rng)
		}
		return d, nil, true
	}
	return AppDetail{}, s.snap, false
}

// idleApp is the detail of an app outside the snapshot (not in its cluster's active set): its
// state read now, and no history (it had no traffic lately).
func (s *Service) idleApp(ctx context.Context, id, rng string, snap *Snapshot) (AppDetail, error) {
	conf, err := s.col.cat.GetApps(ctx, []string{id})
	if err != nil {
		return AppDetail{}, err
	}
	a, ok := conf[id]
	if !ok {
		return AppDetail{}, ErrAppNotFound
	}
	st, err := s.col.apps(ctx, snap.At, []store.App{a}, snap.Nodes)
	if err != nil {
		return AppDetail{}, err
	}
	return AppDetail{App: st[0], Range: rng, Timestamp: snap.At.Unix()}, nil
}

// ConnectionsView is the connection usage per app and per cluster, summed over nodes.
type ConnectionsView struct {
	Apps      []AppConnections `json:"apps"`
	Clusters  []ClusterState   `json:"clusters"`
	Timestamp int64            `json:"timestamp"`
}

// AppConnections is one app's connection usage.
type AppConnections struct {
	AppID    string `json:"app_id"`
	Cluster  string `json:"cluster_id"`
	Active   int64  `json:"active"`
	Peak     int64  `json:"peak"` // sum of the nodes' peaks: an upper bound of the app's peak
	Rejected int64  `json:"rejected"`
}

// Connections returns the connection usage of the newest snapshot.
func (s *Service) Connections(ctx context.Context) (ConnectionsView, error) {
	snap, err := s.Latest(ctx)
	if err != nil {
		return ConnectionsView{}, err
	}
	v := ConnectionsView{Apps: make([]AppConnections, 0, len(snap.Apps)), Clusters: snap.Clusters,
		Timestamp: snap.At.Unix()}
	for _, a := range snap.Apps {
		v.Apps = append(v.Apps, AppConnections{AppID: a.ID, Cluster: a.Cluster, Active: a.ConnCurrent,
			Peak: a.ConnPeak, Rejected: a.ConnRejected})
	}
	return v, nil
}

// Nodes lists the gateways of the newest snapshot.
func (s *Service) Nodes(ctx context.Context) ([]Node, error) {
	snap, err := s.Latest(ctx)
	if err != nil {
		return nil, err
	}
	return snap.Nodes, nil
}

// Alerts lists alerts, newest first.
func (s *Service) Alerts(ctx context.Context, activeOnly bool) ([]Alert, error) {
	return s.alerts.list(ctx, activeOnly)
}

// Ack acknowledges an alert on behalf of actor.
func (s *Service) Ack(ctx context.Context, id, actor string) (Alert, error) {
	return s.alerts.ack(ctx, id, actor)
}

// Subscribe returns a channel of JSON messages {type, data, timestamp} and its cancel func.
// The channel is closed when the subscriber falls behind, on cancel, or when Run stops.
func (s *Service) Subscribe() (<-chan []byte, func()) { return s.hub.subscribe() }

// Subscribers is the number of current subscribers.
func (s *Service) Subscribers() int { return s.hub.count() }

// Current is the newest snapshot without collecting (nil before the first); for scrapes.
func (s *Service) Current() *Snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.snap
}
