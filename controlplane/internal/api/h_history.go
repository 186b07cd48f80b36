package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
)

// DefaultPrometheusTimeout bounds one range query to Prometheus.
const DefaultPrometheusTimeout = 5 * time.Second

// historyQueries is the fixed allowlist of range queries the console may ask for: a series name
// maps to a PromQL template with two holes, the label selector (empty, or app_id="<valid id>")
// and the rate window. Nothing of the request reaches PromQL except a validated app id. The
// bandwidth series read the gateways' own byte counters (summed over the nodes Prometheus
// scrapes; a trailing comma is valid PromQL when the selector is empty).
var historyQueries = map[string]string{
	"request_rate":   `sum by (app_id) (rate(tollgate_app_requests_total{%s}[%s]))`,
	"cost_rate":      `sum by (app_id) (rate(tollgate_app_cost_total{%s}[%s]))`,
	"rejected_rate":  `sum by (app_id) (rate(ratelimit_rejected_total{%s}[%s]))`,
	"bytes_in_rate":  `sum by (app_id) (rate(ratelimit_bytes_total{direction="in",%s}[%s]))`,
	"bytes_out_rate": `sum by (app_id) (rate(ratelimit_bytes_total{direction="out",%s}[%s]))`,
}

// historyRanges are the console's time ranges; each is cut into 240 steps.
var historyRanges = map[string]time.Duration{
	"1h": time.Hour, "6h": 6 * time.Hour, "24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour,
}

const historyPoints = 240

type historySeries struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	Points [][2]float64      `json:"points"`
}

type historyAnswer struct {
	Range  string          `json:"range"`
	Step   int64           `json:"step"`
	Series []historySeries `json:"series"`
}

func errPrometheusUnavailable(msg string) *Error {
	return apiErr(http.StatusServiceUnavailable, "prometheus_unavailable", msg)
}

// metricsHistory answers GET /api/v1/metrics/history?series=&range=&app_id= from Prometheus.
func (s *server) metricsHistory(c *gin.Context) {
	name := c.Query("series")
	tmpl, known := historyQueries[name]
	if !known {
		s.fail(c, errBadRequest("invalid_query",
			"series must be request_rate, cost_rate, rejected_rate, bytes_in_rate or bytes_out_rate"))
		return
	}
	rng, err := queryRange(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	appID, err := queryID(c, "app_id")
	if err != nil {
		s.fail(c, err)
		return
	}
	if s.opts.PrometheusURL == "" {
		s.fail(c, errPrometheusUnavailable("no Prometheus is configured (TOLLGATE_PROMETHEUS_URL); history is unavailable"))
		return
	}
	step := historyRanges[rng] / historyPoints
	window := max(step, time.Minute)
	sel := ""
	if appID != "" {
		sel = `app_id="` + appID + `"` // a valid id is [A-Za-z0-9_-] only
	}
	query := fmt.Sprintf(tmpl, sel, strconv.FormatInt(int64(window/time.Second), 10)+"s")
	end := time.Now()
	ans, err := s.queryRange(c.Request.Context(), query, end.Add(-historyRanges[rng]), end, step)
	if err != nil {
		s.fail(c, err)
		return
	}
	out := historyAnswer{Range: rng, Step: int64(step / time.Second), Series: []historySeries{}}
	for _, r := range ans {
		hs := historySeries{Name: name, Labels: r.Metric, Points: [][2]float64{}}
		for _, v := range r.Values {
			if p, ok := v.point(); ok {
				hs.Points = append(hs.Points, p)
			}
		}
		out.Series = append(out.Series, hs)
	}
	ok(c, http.StatusOK, out)
}

// promSample is one [unix seconds, "value"] pair of a Prometheus matrix.
type promSample [2]any

func (v promSample) point() ([2]float64, bool) {
	ts, tok := v[0].(float64)
	str, sok := v[1].(string)
	if !tok || !sok {
		return [2]float64{}, false
	}
	f, err := strconv.ParseFloat(str, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return [2]float64{}, false
	}
	return [2]float64{ts, f}, true
}

type promRangeResult struct {
	Metric map[string]string `json:"metric"`
	Values []promSample      `json:"values"`
}

// queryRange runs one query_range against Prometheus within the configured timeout.
func (s *server) queryRange(ctx context.Context, query string, start, end time.Time, step time.Duration) ([]promRangeResult, error) {
	timeout := s.opts.PrometheusTimeout
	if timeout <= 0 {
		timeout = DefaultPrometheusTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	q := url.Values{"query": {query}, "start": {unixString(start)}, "end": {unixString(end)},
		"step": {strconv.FormatInt(int64(step/time.Second), 10)}, "timeout": {timeout.String()}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.opts.PrometheusURL+"/api/v1/query_range?"+q.Encode(), nil)
	if err != nil {
		return nil, errPrometheusUnavailable("TOLLGATE_PROMETHEUS_URL is not a usable URL")
	}
	res, err := s.promClient().Do(req)
	if err != nil {
		s.opts.Logger.Warn("prometheus unreachable", "err", err)
		return nil, errPrometheusUnavailable("Prometheus did not answer; history is unavailable")
	}
	defer res.Body.Close()
	var body struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			ResultType string            `json:"resultType"`
			Result     []promRangeResult `json:"result"`
		} `json:"data"`
	}
	dec := json.NewDecoder(io.LimitReader(res.Body, 32<<20))
	if err := dec.Decode(&body); err != nil {
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return nil, errPrometheusUnavailable("Prometheus did not answer in time")
		}
		return nil, errPrometheusUnavailable(fmt.Sprintf("Prometheus answered %d without a query result", res.StatusCode))
	}
	if body.ErrorType == "timeout" || res.StatusCode == http.StatusServiceUnavailable {
		return nil, errPrometheusUnavailable("Prometheus could not answer in time: " + body.Error)
	}
	if body.Status != "success" || body.Data.ResultType != "matrix" {
		s.opts.Logger.Warn("prometheus query failed", "status", res.StatusCode, "type", body.ErrorType, "err", body.Error)
		return nil, apiErr(http.StatusBadGateway, "prometheus_error", "Prometheus refused the query: "+body.ErrorType)
	}
	return body.Data.Result, nil
}

func (s *server) promClient() *http.Client {
	if s.opts.PrometheusClient != nil {
		return s.opts.PrometheusClient
	}
	return http.DefaultClient
}

func unixString(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}
