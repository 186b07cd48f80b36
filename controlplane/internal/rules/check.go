package rules

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"unicode/utf8"

	"tollgate/controlplane/internal/validate"
	"tollgate/internal/keys"
)

// checker collects violations; its methods report whether the value passed.
type checker struct{ vs []validate.Violation }

func (c *checker) add(field, code, format string, args ...any) {
	c.vs = append(c.vs, validate.Violation{Field: field, Code: code, Message: fmt.Sprintf(format, args...)})
}

func (c *checker) out() []validate.Violation {
	if c.vs == nil {
		return []validate.Violation{}
	}
	return c.vs
}

func (c *checker) required(present bool, field string) bool {
	if !present {
		c.add(field, "required", "%s is required", field)
	}
	return present
}

func (c *checker) enum(field, v string, allowed []string, code string) bool {
	if slices.Contains(allowed, v) {
		return true
	}
	c.add(field, code, "%s must be one of %s", field, strings.Join(allowed, ", "))
	return false
}

func (c *checker) rangeInt(field string, v, lo, hi int64, code string) bool {
	if v >= lo && v <= hi {
		return true
	}
	c.add(field, code, "%s must be an integer from %d to %d, got %d", field, lo, hi, v)
	return false
}

// text: valid UTF-8 without control characters, at most max bytes.
func (c *checker) text(field, v string, max int, code string) bool {
	if printable(v) && len(v) <= max {
		return true
	}
	c.add(field, code, "%s must be printable UTF-8 of at most %d bytes", field, max)
	return false
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}

// ruleID: the id of the body must match the path (PUT) and ^[A-Za-z0-9_-]{1,128}$.
func (c *checker) ruleID(body *string, path string) string {
	switch {
	case path != "" && body != nil && *body != path:
		c.add("id", "id_mismatch", "id in the body must match the path (a rule cannot be renamed)")
		return path
	case path != "":
		return path
	case body == nil:
		c.add("id", "required", "id is required")
		return ""
	case !keys.ValidID(*body):
		c.add("id", "invalid_id", "id must match ^[A-Za-z0-9_-]{1,128}$")
	}
	return *body
}

// match checks every present field of the rule's match, and that scope endpoint has one (the
// contract: "the match fields select the endpoint").
func (c *checker) match(r Rule, appKnown AppExists, oldApps []string) {
	m := r.Match
	c.appIDs(m.AppIDs, appKnown, oldApps)
	if c.list("match.methods", m.Methods) {
		for i, v := range m.Methods {
			c.enumAt(fmt.Sprintf("match.methods[%d]", i), v, Methods, "invalid_method")
		}
		c.unique("match.methods", m.Methods)
	}
	if m.Bucket != nil && !bucketName(*m.Bucket) {
		c.add("match.bucket", "invalid_bucket", "bucket must be 1-255 characters of A-Z a-z 0-9 . _ -")
	}
	if m.KeyPrefix != nil && *m.KeyPrefix == "" {
		c.add("match.key_prefix", "invalid_key_prefix", "key_prefix must not be empty (leave it out to match any key)")
	} else if m.KeyPrefix != nil {
		c.text("match.key_prefix", *m.KeyPrefix, MaxKeyPrefix, "invalid_key_prefix")
	}
	if m.Path != nil {
		if reason := globProblem(*m.Path); reason != "" {
			c.add("match.path", "invalid_path", "path %s", reason)
		}
	}
	if c.list("match.cidrs", m.CIDRs) {
		for i, v := range m.CIDRs {
			c.cidr(fmt.Sprintf("match.cidrs[%d]", i), v)
		}
		c.unique("match.cidrs", m.CIDRs)
	}
	c.headers(m.Headers)
	if r.Scope == "endpoint" && m.AppIDs == nil && m.Methods == nil && m.Bucket == nil && m.KeyPrefix == nil &&
		m.Path == nil && m.CIDRs == nil && m.Headers == nil {
		c.add("match", "endpoint_needs_match", "scope endpoint needs a match field to select the endpoint")
	}
}

// list: a present list holds 1 to MaxListEntries entries (an empty one would match nothing).
func (c *checker) list(field string, l []string) bool {
	switch {
	case l == nil:
		return false
	case len(l) == 0:
		c.add(field, "empty_list", "%s must not be empty (leave it out to match any)", field)
		return false
	case len(l) > MaxListEntries:
		c.add(field, "too_many", "%s holds at most %d entries", field, MaxListEntries)
		return false
	}
	return true
}

func (c *checker) enumAt(field, v string, allowed []string, code string) {
	if !slices.Contains(allowed, v) {
		c.add(field, code, "%s must be one of %s", field, strings.Join(allowed, ", "))
	}
}

func (c *checker) unique(field string, l []string) {
	seen := map[string]bool{}
	for _, v := range l {
		k := strings.ToLower(v)
		if seen[k] {
			c.add(field, "duplicate", "%s lists %q twice", field, v)
			return
		}
		seen[k] = true
	}
}

// appIDs: valid ids, listed once; an id the change adds must name an existing app (ids kept
// from the current rule are not checked again: the app may have been deleted since).
func (c *checker) appIDs(ids []string, appKnown AppExists, oldApps []string) {
	if !c.list("match.app_ids", ids) {
		return
	}
	for i, id := range ids {
		field := fmt.Sprintf("match.app_ids[%d]", i)
		switch {
		case !keys.ValidID(id):
			c.add(field, "invalid_app_id", "app ids match ^[A-Za-z0-9_-]{1,128}$")
		case !slices.Contains(oldApps, id) && appKnown != nil && !appKnown(id):
			c.add(field, "unknown_app", "no app %q", id)
		}
	}
	c.unique("match.app_ids", ids)
}

func (c *checker) cidr(field, v string) {
	p, err := netip.ParsePrefix(v)
	switch {
	case err != nil || len(v) > 64:
		c.add(field, "invalid_cidr", "%s must be a CIDR like 10.0.0.0/8 or 2001:db8::/32", field)
	case p.Masked() != p:
		c.add(field, "invalid_cidr", "%s has host bits set; did you mean %s?", field, p.Masked())
	}
}

func (c *checker) headers(h map[string]string) {
	switch {
	case h == nil:
		return
	case len(h) == 0:
		c.add("match.headers", "empty_list", "match.headers must not be empty (leave it out to match any)")
		return
	case len(h) > MaxHeaders:
		c.add("match.headers", "too_many", "match.headers holds at most %d entries", MaxHeaders)
		return
	}
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	seen := map[string]bool{}
	for _, name := range names {
		field := "match.headers." + name
		if !headerName(name) {
			c.add("match.headers", "invalid_header", "header names are 1-128 characters of A-Z a-z 0-9 - _")
			continue
		}
		if seen[strings.ToLower(name)] {
			c.add("match.headers", "duplicate", "header %q is listed twice (names are case-insensitive)", name)
		}
		seen[strings.ToLower(name)] = true
		c.text(field, h[name], MaxHeaderValue, "invalid_header")
	}
}

// headerName: 1-128 bytes of A-Z a-z 0-9 - _ (the header names the gateway's rule parser
// accepts; a narrower set than RFC 9110's tokens, which no real user-id header needs).
func headerName(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_') {
			return false
		}
	}
	return true
}

func bucketName(s string) bool {
	if len(s) == 0 || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '.' || ch == '_' || ch == '-') {
			return false
		}
	}
	return true
}

// globProblem explains what is wrong with a path glob, or returns "": it starts with '/', is
// printable ASCII without spaces, '?' or '#', at most MaxPath bytes, and its wildcards are runs
// of one ('*', within a segment) or two ('**', anything) asterisks.
func globProblem(p string) string {
	switch {
	case len(p) == 0 || p[0] != '/':
		return "must start with /"
	case len(p) > MaxPath:
		return fmt.Sprintf("must be at most %d bytes", MaxPath)
	}
	run := 0
	for i := 0; i < len(p); i++ {
		ch := p[i]
		if ch <= 0x20 || ch >= 0x7f || ch == '?' || ch == '#' {
			return "must be printable ASCII without spaces, ? or #"
		}
		if ch == '*' {
			if run++; run > 2 {
				return "allows * and ** only, never three asterisks in a row"
			}
		} else {
			run = 0
		}
	}
	return ""
}
