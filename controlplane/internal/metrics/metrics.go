// Package metrics is the control plane's Prometheus endpoint (client_golang, on its own
// registry): its own metrics (HTTP, audit, WebSocket, collections, Redis latency) and the
// cluster view aggregated from the gateways' reports (cluster.go).
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"tollgate/controlplane/internal/durable"
	"tollgate/controlplane/internal/live"
	"tollgate/internal/version"
)

// Options are the read-outs the metrics need.
type Options struct {
	AuditDropped func() int64
	WSClients    func() int
	Snapshot     func() *live.Snapshot // newest cluster view (nil before the first)
	Store        func() durable.Status // the config store's state (nil: not watched)
}

// Metrics are the collectors, registered on their own registry.
type Metrics struct {
	reg          *prometheus.Registry
	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec
	auditEntries *prometheus.CounterVec
	collections  *prometheus.CounterVec
	redisLatency prometheus.Histogram
	violations   prometheus.Gauge
}

// New registers every collector on a new registry.
func New(o Options) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_cp_http_requests_total",
		Help: "HTTP requests served by the control plane, by route template, method and status."},
		[]string{"route", "method", "code"})
	m.httpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "tollgate_cp_http_request_duration_seconds", Help: "Time to serve a request, by route template.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}},
		[]string{"route", "method"})
	m.auditEntries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_cp_audit_entries_total",
		Help: "Audit entries written, by action and outcome."}, []string{"action", "outcome"})
	m.collections = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_cp_collections_total",
		Help: "Cluster view collections from Redis, by result."}, []string{"result"})
	m.redisLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tollgate_cp_redis_latency_seconds",
		Help:    "Round trip of the control plane's PING to Redis, once per collection.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}})
	m.violations = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tollgate_cp_config_violations",
		Help: "Stored config values the config contract refuses (docs/config-contract.md), counted at start and by GET /api/v1/config/violations."})
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tollgate_build_info",
		Help: "Always 1: the version of this build (internal/version), by component."},
		[]string{"version", "component"})
	buildInfo.WithLabelValues(version.Version, "controlplane").Set(1)
	m.reg.MustRegister(m.httpRequests, m.httpDuration, m.auditEntries, m.collections, m.redisLatency,
		m.violations, buildInfo, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if o.AuditDropped != nil {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollgate_cp_audit_dropped_total",
			Help: "Access audit entries dropped because the writer fell behind or Redis failed."},
			func() float64 { return float64(o.AuditDropped()) }))
	}
	if o.WSClients != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_cp_websocket_clients",
			Help: "Open WebSocket connections."}, func() float64 { return float64(o.WSClients()) }))
	}
	if o.Snapshot != nil {
		m.reg.MustRegister(newClusterCollector(o.Snapshot))
	}
	if o.Store != nil {
		registerStore(m.reg, o.Store)
	}
	return m
}

// ConfigViolations sets how many stored config values the config contract refuses.
func (m *Metrics) ConfigViolations(n int) { m.violations.Set(float64(n)) }

// Registry is the registry (tests gather from it).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ObserveHTTP counts and times one request.
func (m *Metrics) ObserveHTTP(route, method string, status int, d time.Duration) {
	m.httpRequests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	m.httpDuration.WithLabelValues(route, method).Observe(d.Seconds())
}

// AuditWrite counts a written audit entry.
func (m *Metrics) AuditWrite(action, outcome string) {
	m.auditEntries.WithLabelValues(action, outcome).Inc()
}

// Collected records a cluster view collection.
func (m *Metrics) Collected(s *live.Snapshot, err error) {
	if err != nil {
		m.collections.WithLabelValues("error").Inc()
		return
	}
	m.collections.WithLabelValues("ok").Inc()
	m.redisLatency.Observe(s.RedisLatency.Seconds())
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// registerStore adds the config store's metrics: lost or not, how often, the persistence that
// CONFIG GET reported at start (persists="unknown" where CONFIG is forbidden), snapshots.
func registerStore(reg *prometheus.Registry, st func() durable.Status) {
	p := st().Persistence
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_cp_config_store_lost",
			Help: "1 while the config store is lost (its epoch vanished or changed, or its version went back)."},
			func() float64 {
				if st().State == "lost" {
					return 1
				}
				return 0
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollgate_cp_config_store_lost_total",
			Help: "Times the config store was found lost."}, func() float64 { return float64(st().LostTotal) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_cp_redis_persistence",
			Help:        "Always 1; the labels say whether the control plane's Redis persists (CONFIG GET at start).",
			ConstLabels: prometheus.Labels{"persists": p.Persists, "appendonly": p.AppendOnly, "appendfsync": p.AppendFsync}},
			func() float64 { return 1 }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollgate_cp_config_backup_errors_total",
			Help: "Config snapshots that could not be written."}, func() float64 { return float64(st().BackupErrors) }),
	)
}
