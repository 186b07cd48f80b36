package audit

import "context"

// Request is who is asking, as the API middleware knows it; entries written under a context
// carrying it are completed with it.
type Request struct {
	Actor     string
	Role      string
	IP        string
	Method    string
	Route     string
	RequestID string
}

type ctxKey struct{}

// WithRequest returns ctx carrying r.
func WithRequest(ctx context.Context, r Request) context.Context {
	return context.WithValue(ctx, ctxKey{}, r)
}

// FromContext returns the request of ctx, if any.
func FromContext(ctx context.Context) (Request, bool) {
	r, ok := ctx.Value(ctxKey{}).(Request)
	return r, ok
}
