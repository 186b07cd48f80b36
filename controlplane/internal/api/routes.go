package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"tollgate/controlplane/internal/auth"
)

// access of a route: public, or the least role that may call it.
type access int

const (
	public      access = iota // no token: health, login, refresh, logout, the OpenAPI document
	viewer                    // any signed-in user
	operator                  // changes of the limiter's config and emergency mode
	admin                     // users
	scrape                    // viewer, or the static metrics token (Prometheus)
	viewerWrite               // a write any signed-in user may make for themselves
)

// role is the least role of an access level (public has none).
func (a access) role() auth.Role {
	switch a {
	case operator:
		return auth.Operator
	case admin:
		return auth.Admin
	case public:
		return ""
	}
	return auth.Viewer
}

type route struct {
	method  string
	path    string
	access  access
	handler gin.HandlerFunc
}

// table is the one route table of the control plane; the OpenAPI document (openapi/) lists
// exactly these routes, which a test checks.
func (s *server) table() []route {
	const v1 = "/api/v1"
	get, post, put, del := http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete
	return []route{
		{get, "/health", public, s.health},
		{get, "/metrics", scrape, s.prometheus},
		{get, v1 + "/openapi.json", public, s.openapi},

		{post, v1 + "/auth/login", public, s.login},
		{post, v1 + "/auth/refresh", public, s.refresh},
		{post, v1 + "/auth/logout", public, s.logout},
		{get, v1 + "/auth/me", viewer, s.me},
		{put, v1 + "/auth/password", viewerWrite, s.changePassword},

		{get, v1 + "/users", admin, s.listUsers},
		{post, v1 + "/users", admin, s.createUser},
		{get, v1 + "/users/:username", admin, s.getUser},
		{put, v1 + "/users/:username", admin, s.updateUser},
		{del, v1 + "/users/:username", admin, s.deleteUser},

		{get, v1 + "/apps", viewer, s.listApps},
		{post, v1 + "/apps", operator, s.createApp},
		{get, v1 + "/apps/:id", viewer, s.getApp},
		{put, v1 + "/apps/:id", operator, s.updateApp},
		{del, v1 + "/apps/:id", operator, s.deleteApp},
		{get, v1 + "/apps/:id/access-keys", viewer, s.listAccessKeys},
		{post, v1 + "/apps/:id/access-keys", operator, s.addAccessKey},
		{del, v1 + "/apps/:id/access-keys/:key", operator, s.removeAccessKey},
		{put, v1 + "/apps/:id/access-keys/:key/secret", operator, s.putAccessKeySecret},
		{del, v1 + "/apps/:id/access-keys/:key/secret", operator, s.deleteAccessKeySecret},
		{get, v1 + "/apps/:id/buckets", viewer, s.listAppBuckets},

		{get, v1 + "/buckets", viewer, s.listBuckets},
		{get, v1 + "/buckets/:bucket", viewer, s.getBucket},
		{put, v1 + "/buckets/:bucket", operator, s.putBucket},
		{del, v1 + "/buckets/:bucket", operator, s.deleteBucket},

		{get, v1 + "/rules", viewer, s.listRules},
		{post, v1 + "/rules", operator, s.createRule},
		{get, v1 + "/rules/:id", viewer, s.getRule},
		{put, v1 + "/rules/:id", operator, s.updateRule},
		{del, v1 + "/rules/:id", operator, s.deleteRule},

		{get, v1 + "/breakers", viewer, s.listBreakers},
		{put, v1 + "/breakers/:name", operator, s.putBreaker},
		{del, v1 + "/breakers/:name", operator, s.deleteBreaker},
		{get, v1 + "/events", viewer, s.queryEvents},

		{get, v1 + "/clusters", viewer, s.listClusters},
		{get, v1 + "/clusters/:id", viewer, s.getCluster},
		{put, v1 + "/clusters/:id", operator, s.putCluster},
		{put, v1 + "/clusters/:id/connections", operator, s.putClusterConnections},

		{get, v1 + "/connections", viewer, s.listConnections},
		{get, v1 + "/connections/:app_id", viewer, s.getConnections},
		{put, v1 + "/connections/:app_id", operator, s.putConnections},

		{get, v1 + "/emergency", viewer, s.emergencyStatus},
		{post, v1 + "/emergency/activate", operator, s.activateEmergency},
		{post, v1 + "/emergency/deactivate", operator, s.deactivateEmergency},
		{get, v1 + "/emergency/history", viewer, s.emergencyHistory},

		{get, v1 + "/metrics", viewer, s.metricsOverview},
		{get, v1 + "/metrics/apps/:id", viewer, s.metricsApp},
		{get, v1 + "/metrics/connections", viewer, s.metricsConnections},
		{get, v1 + "/metrics/history", viewer, s.metricsHistory},

		{get, v1 + "/nodes", viewer, s.listNodes},
		{get, v1 + "/alerts", viewer, s.listAlerts},
		{post, v1 + "/alerts/:id/ack", operator, s.ackAlert},
		{get, v1 + "/audit", operator, s.queryAudit},

		{get, v1 + "/config/store", viewer, s.configStore},
		{get, v1 + "/config/export", operator, s.exportConfig},
		{get, v1 + "/config/violations", viewer, s.configViolations},
		{post, v1 + "/config/import", admin, s.importConfig},
		{get, v1 + "/config/backups", admin, s.listBackups},
		{post, v1 + "/config/restore", admin, s.restoreConfig},
		{get, wsPath, viewer, s.websocket},
	}
}

// chain puts authentication, the role check and the per-user rate limit in front of a handler.
func (s *server) chain(rt route) []gin.HandlerFunc {
	switch rt.access {
	case public:
		return []gin.HandlerFunc{rt.handler}
	case scrape:
		return []gin.HandlerFunc{s.authenticateScrape, rt.handler}
	}
	if rt.method != http.MethodGet {
		return []gin.HandlerFunc{s.authenticate, s.require(rt.access.role()), s.rateLimit, s.replication, rt.handler}
	}
	return []gin.HandlerFunc{s.authenticate, s.require(rt.access.role()), s.rateLimit, rt.handler}
}
