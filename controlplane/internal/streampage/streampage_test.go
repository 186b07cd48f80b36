package streampage

import "testing"

func TestValidID(t *testing.T) {
	valid := []string{"1700000000000-0", "0-0", "18446744073709551615-18446744073709551615"}
	invalid := []string{
		"18446744073709551616-0", // above uint64: Redis would refuse it
		"", "-", "1-", "-1", "1700000000000", "1-2-3", "+", "(1-0", "1 -0", "0x1-0",
		"123456789012345678901-0",
	}
	for _, s := range valid {
		if !ValidID(s) {
			t.Errorf("ValidID(%q) = false, want true", s)
		}
	}
	for _, s := range invalid {
		if ValidID(s) {
			t.Errorf("ValidID(%q) = true, want false", s)
		}
	}
}
