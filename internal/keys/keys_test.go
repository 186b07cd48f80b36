package keys

import (
	"bufio"
	"os"
	"regexp"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

const goldenPath = "../../testdata/keys.golden"

type builder struct {
	arity int
	build func(args []string) string
}

func builders() map[string]builder {
	return map[string]builder{
		"l1":                 {1, func(a []string) string { return L1(a[0]) }},
		"l1_apps":            {1, func(a []string) string { return L1Apps(a[0]) }},
		"active":             {1, func(a []string) string { return Active(a[0]) }},
		"debtors":            {1, func(a []string) string { return Debtors(a[0]) }},
		"totals":             {1, func(a []string) string { return Totals(a[0]) }},
		"l2":                 {2, func(a []string) string { return L2(a[0], a[1]) }},
		"leases":             {2, func(a []string) string { return Leases(a[0], a[1]) }},
		"stats":              {2, func(a []string) string { return Stats(a[0], a[1]) }},
		"nodes":              {2, func(a []string) string { return Nodes(a[0], a[1]) }},
		"conn_config":        {2, func(a []string) string { return ConnConfig(a[0], a[1]) }},
		"conn_cluster":       {1, func(a []string) string { return ConnCluster(a[0]) }},
		"conn_limited":       {1, func(a []string) string { return ConnLimited(a[0]) }},
		"conn_indexed":       {0, func(a []string) string { return ConnIndexed() }},
		"apps_index":         {0, func([]string) string { return AppsIndex() }},
		"clusters_index":     {0, func([]string) string { return ClustersIndex() }},
		"config_version":     {0, func([]string) string { return ConfigVersion() }},
		"config_epoch":       {0, func([]string) string { return ConfigEpoch() }},
		"config_changes":     {0, func([]string) string { return ConfigChanges() }},
		"config_channel":     {0, func([]string) string { return ConfigChannel() }},
		"emergency_channel":  {0, func([]string) string { return EmergencyChannel() }},
		"gateways":           {0, func([]string) string { return Gateways() }},
		"conn_node_stats":    {3, func(a []string) string { return ConnNodeStats(a[0], a[1], a[2]) }},
		"emergency_history":  {1, func(a []string) string { return EmergencyHistory(a[0]) }},
		"leader_lock":        {0, func([]string) string { return LeaderLock() }},
		"rules_index":        {0, func([]string) string { return RulesIndex() }},
		"rule_stats":         {0, func([]string) string { return RuleStats() }},
		"rule_counter":       {1, func(a []string) string { return RuleCounter(a[0]) }},
		"breakers_index":     {0, func([]string) string { return BreakersIndex() }},
		"events_stream":      {0, func([]string) string { return EventsStream() }},
		"access_keys":        {0, func([]string) string { return AccessKeys() }},
		"app_access_keys":    {1, func(a []string) string { return AppAccessKeys(a[0]) }},
		"buckets":            {0, func([]string) string { return Buckets() }},
		"access_key_secrets": {0, func([]string) string { return AccessKeySecrets() }},
	}
}

type goldenLine struct {
	num     int
	name    string
	args    []string
	want    string
	rawLine string
}

func readGolden(t *testing.T) []goldenLine {
	t.Helper()
	f, err := os.Open(goldenPath)
	if err != nil {
		t.Fatalf("open golden file: %v", err)
	}
	defer f.Close()
	var lines []goldenLine
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		raw := strings.TrimSpace(sc.Text())
		if raw == "" || strings.HasPrefix(raw, "#") {
			continue
		}
		left, want, ok := strings.Cut(raw, "=>")
		fields := strings.Fields(left)
		if !ok || len(fields) == 0 || strings.TrimSpace(want) == "" {
			t.Fatalf("line %d: malformed golden line %q", n, raw)
		}
		lines = append(lines, goldenLine{n, fields[0], fields[1:], strings.TrimSpace(want), raw})
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read golden file: %v", err)
	}
	return lines
}

func TestGoldenKeys(t *testing.T) {
	all := builders()
	seen := map[string]bool{}
	lines := readGolden(t)
	if len(lines) == 0 {
		t.Fatal("golden file has no key lines")
	}
	for _, l := range lines {
		b, ok := all[l.name]
		if !ok {
			t.Errorf("line %d: unknown builder %q in %q", l.num, l.name, l.rawLine)
			continue
		}
		if len(l.args) != b.arity {
			t.Errorf("line %d: builder %s takes %d args, golden gives %d", l.num, l.name, b.arity, len(l.args))
			continue
		}
		for _, a := range l.args {
			if !ValidID(a) {
				t.Errorf("line %d: golden id %q is not a valid id", l.num, a)
			}
		}
		if got := b.build(l.args); got != l.want {
			t.Errorf("line %d: %s%q = %q, golden says %q", l.num, l.name, l.args, got, l.want)
		}
		seen[l.name] = true
	}
	for name := range all {
		if !seen[name] {
			t.Errorf("builder %s has no line in the golden file", name)
		}
	}
}

func TestClusterKeysShareHashTag(t *testing.T) {
	perCluster := []string{
		L1("c1"), L1Apps("c1"), L2("c1", "a"), Leases("c1", "a"), Stats("c1", "a"),
		Nodes("c1", "a"), ConnConfig("c1", "a"), ConnCluster("c1"),
		ConnNodeStats("c1", "a", "n1"), EmergencyHistory("c1"),
	}
	if k := RuleCounter("r1"); !strings.Contains(k, "{r1}") {
		t.Errorf("key %q lacks hash tag {r1}", k)
	}
	for _, k := range perCluster {
		if !strings.Contains(k, "{c1}") {
			t.Errorf("key %q lacks hash tag {c1}", k)
		}
	}
}

func TestValidIDTable(t *testing.T) {
	cases := []struct {
		in   string
		want bool
	}{
		{"demo-p0", true}, {"A_z-09", true}, {"x", true}, {strings.Repeat("a", 128), true},
		{"", false}, {strings.Repeat("a", 129), false}, {"a b", false}, {"a:b", false},
		{"a{b}", false}, {"a/b", false}, {"é", false}, {"a\n", false}, {"a*", false},
	}
	for _, c := range cases {
		if got := ValidID(c.in); got != c.want {
			t.Errorf("ValidID(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestValidIDMatchesRegexp(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.OneOf(
			rapid.String(),
			rapid.StringMatching(`[A-Za-z0-9_-]{0,130}`),
			rapid.StringMatching(`[A-Za-z0-9_:{}\-. ]{1,20}`),
		).Draw(t, "s")
		if got, want := ValidID(s), re.MatchString(s); got != want {
			t.Fatalf("ValidID(%q) = %v, regexp says %v", s, got, want)
		}
	})
}
