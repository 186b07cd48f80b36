package nginxenv

// Kind is what protects the gateway location of a variant.
type Kind int

// The variants of the benchmark.
const (
	Plain    Kind = iota // (a) no limiter
	Lease                // (b) tollgate, TOLLGATE_LIMITER_MODE=lease (local L3 hit path)
	Remote               // (c) tollgate, TOLLGATE_LIMITER_MODE=remote (one L2 call per request)
	LimitReq             // (d) nginx limit_req
	EmptyLua             // (e) empty access_by_lua and log_by_lua: the floor of any Lua limiter
)

// Variant is one gateway configuration under test.
type Variant struct {
	Key  string // "a".."e"
	Name string
	Kind Kind
}

// Tollgate reports whether the variant runs tollgate's Lua.
func (v Variant) Tollgate() bool { return v.Kind == Lease || v.Kind == Remote }

// Mode is TOLLGATE_LIMITER_MODE of a tollgate variant ("" otherwise).
func (v Variant) Mode() string {
	switch v.Kind {
	case Lease:
		return "lease"
	case Remote:
		return "remote"
	default:
		return ""
	}
}

// Label is "(b) tollgate".
func (v Variant) Label() string { return "(" + v.Key + ") " + v.Name }

// Variants are the variants in the order they run within a round.
func Variants() []Variant {
	return []Variant{
		{Key: "a", Name: "plain", Kind: Plain},
		{Key: "b", Name: "tollgate", Kind: Lease},
		{Key: "c", Name: "redis-per-request", Kind: Remote},
		{Key: "d", Name: "limit_req", Kind: LimitReq},
		{Key: "e", Name: "empty-lua-phases", Kind: EmptyLua},
	}
}
