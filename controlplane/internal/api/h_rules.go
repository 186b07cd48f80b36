package api

import (
	"net/http"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"

	"tollgate/controlplane/internal/rules"
)

// listRules: GET /rules, in priority order, each with its counters.
func (s *server) listRules(c *gin.Context) {
	list, err := s.opts.Rules.ListRules(c.Request.Context())
	if err != nil {
		s.fail(c, err)
		return
	}
	okMeta(c, list, gin.H{"total": len(list)})
}

func (s *server) getRule(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		s.fail(c, err)
		return
	}
	r, err := s.opts.Rules.GetRule(c.Request.Context(), id)
	if err != nil {
		s.fail(c, err)
		return
	}
	ok(c, http.StatusOK, r)
}

func (s *server) ruleResource(c *gin.Context, id string) func() (any, error) {
	return func() (any, error) { return s.opts.Rules.GetRule(c.Request.Context(), id) }
}

// createRule: POST /rules[?dry_run=true]; 201 when written, 409 rule_exists.
func (s *server) createRule(c *gin.Context) {
	var in rules.RuleFields
	w, read := s.readWrite(c, "", &in)
	if !read {
		return
	}
	out, err := s.opts.Rules.CreateRule(c.Request.Context(), w.actor, in, w.dry)
	id := ""
	if in.ID != nil {
		id = *in.ID
	}
	s.answerChange(c, out, err, true, s.ruleResource(c, id))
}

// updateRule: PUT /rules/:id[?dry_run=true] replaces the rule.
func (s *server) updateRule(c *gin.Context) {
	var in rules.RuleFields
	w, read := s.readWrite(c, "id", &in)
	if !read {
		return
	}
	out, err := s.opts.Rules.UpdateRule(c.Request.Context(), w.actor, w.id, in, w.dry)
	s.answerChange(c, out, err, false, s.ruleResource(c, w.id))
}

// deleteRule: DELETE /rules/:id[?dry_run=true], with the rule's counters.
func (s *server) deleteRule(c *gin.Context) {
	w, read := s.readWrite(c, "id", nil)
	if !read {
		return
	}
	out, err := s.opts.Rules.DeleteRule(c.Request.Context(), w.actor, w.id, w.dry)
	s.answerChange(c, out, err, false, nil)
}

// listBreakers: GET /breakers, by name, each with the states of the live nodes.
func (s *server) listBreakers(c *gin.Context) {
	list, err := s.opts.Rules.ListBreakers(c.Request.Context())
	if err != nil {
		s.fail(c, err)
		return
	}
	okMeta(c, list, gin.H{"total": len(list)})
}

// putBreaker: PUT /breakers/:name[?dry_run=true] creates (201) or replaces (200).
func (s *server) putBreaker(c *gin.Context) {
	var in rules.BreakerFields
	w, read := s.readWrite(c, "name", &in)
	if !read {
		return
	}
	out, created, err := s.opts.Rules.PutBreaker(c.Request.Context(), w.actor, w.id, in, w.dry)
	s.answerChange(c, out, err, created, func() (any, error) {
		return s.opts.Rules.GetBreaker(c.Request.Context(), w.id)
	})
}

func (s *server) deleteBreaker(c *gin.Context) {
	w, read := s.readWrite(c, "name", nil)
	if !read {
		return
	}
	out, err := s.opts.Rules.DeleteBreaker(c.Request.Context(), w.actor, w.id, w.dry)
	s.answerChange(c, out, err, false, nil)
}

// queryEvents: GET /events?event_type=&app_id=&rule_id=&since=&until=&limit=&cursor=, newest
// first; meta.next_cursor continues with older entries.
func (s *server) queryEvents(c *gin.Context) {
	f, err := eventFilter(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	page, err := s.opts.Rules.Events(c.Request.Context(), f)
	if err != nil {
		s.fail(c, err)
		return
	}
	okMeta(c, page.Events, gin.H{"next_cursor": page.NextCursor, "count": len(page.Events)})
}

func eventFilter(c *gin.Context) (rules.EventFilter, error) {
	var f rules.EventFilter
	var err error
	if t, present := c.GetQuery("event_type"); present {
		if !slices.Contains(rules.EventTypes, t) {
			return f, errBadRequest("invalid_query", "event_type must be one of "+strings.Join(rules.EventTypes, ", "))
		}
		f.EventType = t
	}
	if f.AppID, err = queryID(c, "app_id"); err != nil {
		return f, err
	}
	if f.RuleID, err = queryID(c, "rule_id"); err != nil {
		return f, err
	}
	if f.Since, f.Until, err = queryTimeRange(c); err != nil {
		return f, err
	}
	if v, present := c.GetQuery("cursor"); present {
		if len(v) > 64 {
			return f, errBadRequest("invalid_query", "cursor must be a stream id like 1700000000000-0")
		}
		f.Cursor = v
	}
	f.Limit, err = queryInt(c, "limit", rules.DefaultEventLimit, 1, rules.MaxEventLimit)
	return f, err
}
