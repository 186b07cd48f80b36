package redisenv

import "testing"

func TestParseCallsSkipsInfoAndCountsScripts(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=120,usec=900,usec_per_call=7.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=7,usec=70,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hget:calls=480,usec=480,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_eval:calls=2,usec=3,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n"
	got, err := ParseCalls(info)
	want := Calls{All: 602, Scripts: 122}
	if err != nil || got != want {
		t.Fatalf("ParseCalls = %+v, %v; want %+v (info excluded)", got, err, want)
	}
}

func TestParseCallsRejectsGarbage(t *testing.T) {
	if _, err := ParseCalls("cmdstat_get:calls=x,usec=1\r\n"); err == nil {
		t.Fatal("ParseCalls accepted a non-numeric calls= field")
	}
}
