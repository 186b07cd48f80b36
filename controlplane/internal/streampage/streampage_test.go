package streampage

import "testing"

func TestValidID(t *testing.T) {
	for s, want := range map[string]bool{
		"1700000000000-0": true, "0-0": true, "18446744073709551615-18446744073709551615": true,
		"18446744073709551616-0": false, // above uint64: Redis would refuse it
		"":                       false, "-": false, "1-": false, "-1": false, "1700000000000": false, "1-2-3": false,
		"+": false, "(1-0": false, "1 -0": false, "0x1-0": false, "123456789012345678901-0": false,
	} {
		if got := ValidID(s); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", s, got, want)
		}
	}
}
