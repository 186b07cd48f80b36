package api

import (
	"fmt"

	"github.com/gin-gonic/gin"

	"tollgate/internal/store"
)

// ReplicationHeader tells a client what its config write got from WAIT: "n/m" replicas
// acknowledged it, "none" (no replica to wait for), or "unconfirmed n/m: <reason>" when fewer
// than asked did within the wait (the write itself is done).
const ReplicationHeader = "Tollgate-Replication"

// replication records the WAITs of a write request's config writes and puts the result in the
// answer's header (before the status is written).
func (s *server) replication(c *gin.Context) {
	ctx, ack := store.WithAck(c.Request.Context())
	c.Request = c.Request.WithContext(ctx)
	c.Writer = &ackWriter{ResponseWriter: c.Writer, ack: ack}
	c.Next()
}

type ackWriter struct {
	gin.ResponseWriter
	ack  *store.Ack
	done bool
}

func (w *ackWriter) header() {
	if w.done {
		return
	}
	w.done = true
	writes, wanted, acked, failure := w.ack.Result()
	switch {
	case writes == 0:
	case wanted == 0:
		w.Header().Set(ReplicationHeader, "none")
	case failure != "":
		w.Header().Set(ReplicationHeader, fmt.Sprintf("unconfirmed %d/%d: %s", acked, wanted, failure))
	default:
		w.Header().Set(ReplicationHeader, fmt.Sprintf("%d/%d", acked, wanted))
	}
}

func (w *ackWriter) WriteHeader(code int) { w.header(); w.ResponseWriter.WriteHeader(code) }
func (w *ackWriter) WriteHeaderNow()      { w.header(); w.ResponseWriter.WriteHeaderNow() }
func (w *ackWriter) Write(b []byte) (int, error) {
	w.header()
	return w.ResponseWriter.Write(b)
}
func (w *ackWriter) WriteString(s string) (int, error) {
	w.header()
	return w.ResponseWriter.WriteString(s)
}
