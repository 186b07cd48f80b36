package sim

import (
	"math"
	"sort"
	"time"
)

// appMetrics are one app's counters.
type appMetrics struct {
	demand, admitted, ideal int64            // cost
	rejected                map[string]int64 // requests by reason
	lateRejected            int64            // requests refused after the warm-up
	lateDemand              int64            // cost demanded after the warm-up
	wait                    []int64          // per lease: requests waiting for the slow path this step

	// first phase [0, ShiftAt)
	wAdmitted, wIdeal int64
	// this step
	stepAdmitted, stepIdeal, stepDemand int64
	// per step (Custom workloads): offered and admitted cost
	offered, admittedSteps []int64
	// per step after the shift (shifted apps)
	after [][2]int64
	// emergency window
	emAdmitted, emIdeal int64
}

type runMetrics struct {
	now           int64 // virtual µs of the current step
	calls, errors int64
	drifts        []float64 // per app and reconciliation window with grants
	corrections   int64
	l1Corrections int64
	reaped        int64
	reapedTokens  int64
	usage         []float64
	steps         int64

	winFrom, winTo, shiftFrom, shiftTo, emFrom, emTo int64
}

func (m *runMetrics) init(s *Sim) {
	c := s.cfg
	m.winFrom, m.winTo = s.at(c.Warmup), s.at(c.ShiftAt)
	if c.ShiftAt == 0 {
		m.winTo = s.at(c.Duration)
	}
	m.shiftFrom, m.shiftTo = s.at(c.ShiftAt), s.at(c.ShiftAt+5*time.Second)
	m.emFrom, m.emTo = s.at(c.EmergencyAt), s.at(c.EmergencyAt+time.Second)
	for _, a := range s.live {
		a.m.rejected = map[string]int64{}
		a.m.wait = make([]int64, len(a.nodes))
	}
}

func (m *runMetrics) admit(a *app, cost int64) {
	a.m.admitted += cost
	a.m.stepAdmitted += cost
}

func (m *runMetrics) reject(a *app, reason string, n int64) {
	if n > 0 {
		a.m.rejected[reason] += n
		if m.now >= m.winFrom {
			a.m.lateRejected += n
		}
	}
}

func (m *runMetrics) demand(a *app, n int64) {
	a.m.demand += n * a.cost
	a.m.stepDemand += n * a.cost
	if m.now >= m.winFrom {
		a.m.lateDemand += n * a.cost
	}
}

func (m *runMetrics) ideal(a *app, cost int64) {
	a.m.ideal += cost
	a.m.stepIdeal += cost
}

func (m *runMetrics) reconciled(res []any) {
	v := make([]int64, 7)
	for i := range v {
		v[i], _ = res[i].(int64)
	}
	if v[4] > 0 {
		m.drifts = append(m.drifts, float64(v[0])/1e6)
	}
	if v[1] == 1 {
		m.corrections++
	}
	m.reaped += v[2]
	m.reapedTokens += v[3]
}

// step closes the virtual step: windows and per-step series.
func (m *runMetrics) step(s *Sim) {
	m.steps++
	now := s.now
	for _, a := range s.live {
		if now < m.winTo { // from the start, when the bucket and L2 are both full and no lease is out

			a.m.wAdmitted += a.m.stepAdmitted
			a.m.wIdeal += a.m.stepIdeal
		}
		if (a.shifted || a.control) && now >= m.shiftFrom && now < m.shiftTo {
			a.m.after = append(a.m.after, [2]int64{a.m.stepAdmitted, a.m.stepIdeal})
		}
		if now >= m.emFrom && now < m.emTo {
			a.m.emAdmitted += a.m.stepAdmitted
			a.m.emIdeal += a.m.stepIdeal
		}
		if s.cfg.Custom != nil {
			a.m.offered = append(a.m.offered, a.m.stepDemand)
			a.m.admittedSteps = append(a.m.admittedSteps, a.m.stepAdmitted)
		}
		a.m.stepAdmitted, a.m.stepIdeal, a.m.stepDemand = 0, 0, 0
	}
}

// Result is what a run measured.
type Result struct {
	Config Config
	Wall   time.Duration
	// SetupWall is the time to create the apps through the store; LoopWall the simulation.
	SetupWall, LoopWall time.Duration
	// RedisCommands is every command Redis ran during the simulation (INFO commandstats, those
	// inside scripts included); RedisScripts the script calls among them.
	RedisCommands, RedisScripts int64
	RedisUsedMemory             int64         // used_memory at the end
	RedisCPU                    time.Duration // CPU time redis-server used during the simulation
	ActiveApps                  int
	Calls                       int64
	Errors                      int64

	OvershootAll   float64 // (sum admitted - sum ideal) / sum ideal, all apps, whole run
	OvershootWorst float64 // worst app, whole run (apps with ideal >= 1000)
	OverQuotaApps  int
	Utilisation    float64 // first phase, apps whose demand exceeded quota: admitted / ideal
	UtilWorst      float64
	UtilP5         float64
	FalseReject    float64 // apps whose ideal bucket refused nothing: refused / demand after warm-up
	StartRejected  int64   // cost of theirs refused during the warm-up
	DriftMax       float64
	DriftMean      float64
	Corrections    int64
	L1Corrections  int64
	Reaped         int64
	ReapedTokens   int64
	UsageMax       float64

	ShiftedApps   int
	ConvergeP50   time.Duration
	ConvergeP95   time.Duration
	ConvergeMax   time.Duration
	NotConverged  int
	ControlApps   int           // apps like the shifted ones whose traffic did not move
	ControlP50    time.Duration // the same measure on them: the noise floor of the metric
	ControlP95    time.Duration
	EmergencyAll  time.Duration // until every live node enforced the emergency
	EmergencyP3   int64         // P3 cost admitted in the first second of the emergency
	EmergencyP12  float64       // P1/P2 admitted / ideal in the first second of the emergency
	EmergencyP0   float64       // P0 admitted / ideal in the first second
	Rejected      map[string]int64
	RoundLimit    int64
	VirtualPerSec float64 // virtual seconds simulated per wall second
	// Series are, for a Custom workload, each app's offered and admitted cost per step.
	Series []Series
}

// Series is one app's offered and admitted cost per step.
type Series struct {
	ID                string
	Offered, Admitted []int64
}

func (s *Sim) result(wall time.Duration) *Result {
	r := &Result{Config: s.cfg, Wall: wall, Calls: s.m.calls, Errors: s.m.errors, Rejected: map[string]int64{},
		Corrections: s.m.corrections, L1Corrections: s.m.l1Corrections, Reaped: s.m.reaped,
		ReapedTokens: s.m.reapedTokens}
	r.VirtualPerSec = s.cfg.Duration.Seconds() / wall.Seconds()
	r.ActiveApps = s.cfg.activeApps()
	var adm, idl, wA, wI, fRej, fDem int64
	var utils []float64
	r.UtilWorst = math.Inf(1)
	stepDur := time.Duration(s.dt) * time.Microsecond
	var conv, ctrl []time.Duration
	var p12a, p12i, p0a, p0i int64
	for _, a := range s.live {
		if s.cfg.Custom != nil {
			r.Series = append(r.Series, Series{ID: a.id, Offered: a.m.offered, Admitted: a.m.admittedSteps})
		}
		adm += a.m.admitted
		idl += a.m.ideal
		for k, v := range a.m.rejected {
			r.Rejected[k] += v
		}
		if a.m.ideal >= 1000 {
			if o := float64(a.m.admitted-a.m.ideal) / float64(a.m.ideal); o > r.OvershootWorst {
				r.OvershootWorst = o
			}
		}
		if a.load > 1 && a.m.wIdeal > 0 {
			r.OverQuotaApps++
			wA += a.m.wAdmitted
			wI += a.m.wIdeal
			u := float64(a.m.wAdmitted) / float64(a.m.wIdeal)
			utils = append(utils, u)
			r.UtilWorst = math.Min(r.UtilWorst, u)
		}
		if a.m.ideal == a.m.demand { // the ideal bucket refused nothing
			fDem += a.m.lateDemand
			fRej += a.m.lateRejected * a.cost
			var n int64
			for _, v := range a.m.rejected {
				n += v
			}
			r.StartRejected += (n - a.m.lateRejected) * a.cost
		}
		if a.shifted {
			r.ShiftedApps++
			if d, ok := converge(a.m.after, stepDur, a.cost, a.g); ok {
				conv = append(conv, d)
			} else {
				r.NotConverged++
			}
		}
		if a.control {
			r.ControlApps++
			d, ok := converge(a.m.after, stepDur, a.cost, a.g)
			if !ok {
				d = 5 * time.Second
			}
			ctrl = append(ctrl, d)
		}
		switch a.prio {
		case 0:
			p0a, p0i = p0a+a.m.emAdmitted, p0i+a.m.emIdeal
		case 1, 2:
			p12a, p12i = p12a+a.m.emAdmitted, p12i+a.m.emIdeal
		case 3:
			r.EmergencyP3 += a.m.emAdmitted
		}
	}
	r.RoundLimit = r.Rejected["sim_round_limit"]
	if idl > 0 {
		r.OvershootAll = float64(adm-idl) / float64(idl)
	}
	if wI > 0 {
		r.Utilisation = float64(wA) / float64(wI)
	}
	if len(utils) > 0 {
		sort.Float64s(utils)
		r.UtilP5 = utils[len(utils)*5/100]
	}
	if fDem > 0 {
		r.FalseReject = float64(fRej) / float64(fDem)
	}
	for _, d := range s.m.drifts {
		r.DriftMax = math.Max(r.DriftMax, d)
		r.DriftMean += d
	}
	if len(s.m.drifts) > 0 {
		r.DriftMean /= float64(len(s.m.drifts))
	}
	for _, u := range s.m.usage {
		r.UsageMax = math.Max(r.UsageMax, u)
	}
	if len(conv) > 0 {
		sort.Slice(conv, func(i, j int) bool { return conv[i] < conv[j] })
		r.ConvergeP50, r.ConvergeP95, r.ConvergeMax = conv[len(conv)/2], conv[len(conv)*95/100], conv[len(conv)-1]
	}
	if len(ctrl) > 0 {
		sort.Slice(ctrl, func(i, j int) bool { return ctrl[i] < ctrl[j] })
		r.ControlP50, r.ControlP95 = ctrl[len(ctrl)/2], ctrl[len(ctrl)*95/100]
	}
	if s.em.allAt > 0 {
		r.EmergencyAll = time.Duration(s.em.allAt-s.em.start) * time.Microsecond
	}
	if p12i > 0 {
		r.EmergencyP12 = float64(p12a) / float64(p12i)
	}
	if p0i > 0 {
		r.EmergencyP0 = float64(p0a) / float64(p0i)
	}
	return r
}

// converge is the time after the shift from which the app's admitted cost stops drifting away
// from its ideal bucket's: with gap(t) = Σ (ideal − admitted) since the shift, it is the first
// 100 ms boundary τ from which, until the end of the window, |gap(t) − gap(τ)| ≤ ε + 2 % ×
// guarantee × (t − τ), ε = 100 ms of the app's guarantee plus two requests: the admitted rate
// stays within 2 % of the ideal rate, give or take the granularity of leases and requests. An app whose admission tracks the ideal
// rate from the start reads 0, whatever offset it had at the shift (a constant offset is not a
// rate that differs); an app still drifting in the window's last second has not converged.
func converge(series [][2]int64, step time.Duration, cost, g int64) (time.Duration, bool) {
	bin := max(1, int(100*time.Millisecond/step))
	eps := 0.1*float64(g) + float64(2*cost)
	gap := []float64{0}
	var x float64
	for i, v := range series {
		x += float64(v[1] - v[0])
		if (i+1)%bin == 0 {
			gap = append(gap, x)
		}
	}
	tau := len(gap) - 1
	for t := len(gap) - 1; t >= 0; t-- {
		stable := true
		for u := t; u < len(gap) && stable; u++ {
			slack := 0.02 * float64(g) * float64((u-t)*bin) * step.Seconds()
			stable = math.Abs(gap[u]-gap[t]) <= eps+slack
		}
		if !stable {
			break
		}
		tau = t
	}
	d := time.Duration(tau*bin) * step
	return d, d <= time.Duration(len(series))*step-time.Second
}
