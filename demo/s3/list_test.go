package s3

import (
	"net/url"
	"reflect"
	"testing"
)

func keysOf(res listResult) []string {
	var out []string
	for _, c := range res.Contents {
		out = append(out, c.Key)
	}
	return out
}

func prefixesOf(res listResult) []string {
	var out []string
	for _, p := range res.CommonPrefixes {
		out = append(out, p.Prefix)
	}
	return out
}

func seedKeys(b *backend, keys ...string) {
	for _, k := range keys {
		b.must(200, "PUT", "/bkt/"+k, "data-"+k)
	}
}

func TestListObjects(t *testing.T) {
	b := start(t, Options{})
	seedKeys(b, "b", "a/2", "a/1", "c/x/y", "ab")
	cases := []struct {
		query    string
		keys     []string
		prefixes []string
	}{
		{"", []string{"a/1", "a/2", "ab", "b", "c/x/y"}, nil},
		{"?list-type=2", []string{"a/1", "a/2", "ab", "b", "c/x/y"}, nil},
		{"?prefix=a/", []string{"a/1", "a/2"}, nil},
		{"?list-type=2&prefix=a", []string{"a/1", "a/2", "ab"}, nil},
		{"?list-type=2&delimiter=/", []string{"ab", "b"}, []string{"a/", "c/"}},
		{"?delimiter=/&prefix=c/", nil, []string{"c/x/"}},
		{"?prefix=zzz", nil, nil},
		{"?marker=ab", []string{"b", "c/x/y"}, nil},
		{"?list-type=2&start-after=b", []string{"c/x/y"}, nil},
	}
	for _, c := range cases {
		res := decode[listResult](t, b.must(200, "GET", "/bkt"+c.query, nil))
		if !reflect.DeepEqual(keysOf(res), c.keys) || !reflect.DeepEqual(prefixesOf(res), c.prefixes) {
			t.Errorf("GET /bkt%s = keys %v prefixes %v, want %v %v", c.query, keysOf(res),
				prefixesOf(res), c.keys, c.prefixes)
		}
		if res.Name != "bkt" || res.IsTruncated {
			t.Errorf("GET /bkt%s: Name %q truncated %v", c.query, res.Name, res.IsTruncated)
		}
	}
	res := decode[listResult](t, b.must(200, "GET", "/bkt?prefix=b", nil))
	if res.Contents[0].Size != len("data-b") || res.Contents[0].ETag != etagOf("data-b") ||
		res.Contents[0].LastModified == "" {
		t.Errorf("listing entry = %+v", res.Contents[0])
	}
	b.wantError(b.do("GET", "/bkt?max-keys=x", nil), 400, "InvalidArgument")
	b.wantError(b.do("GET", "/bkt?list-type=2&continuation-token=%21%21", nil), 400, "InvalidArgument")
}

// Pages of max-keys entries, followed by continuation token (v2) or marker (v1), list every key
// and prefix exactly once.
func TestListPagination(t *testing.T) {
	b := start(t, Options{})
	seedKeys(b, "a/1", "a/2", "a/3", "b", "c", "d/1", "e")
	want := []string{"a/", "b", "c", "d/", "e"}
	for _, v2 := range []bool{true, false} {
		var got []string
		next := ""
		for page := 0; page < 10; page++ {
			q := url.Values{"delimiter": {"/"}, "max-keys": {"2"}}
			if v2 {
				q.Set("list-type", "2")
				if next != "" {
					q.Set("continuation-token", next)
				}
			} else if next != "" {
				q.Set("marker", next)
			}
			res := decode[listResult](t, b.must(200, "GET", "/bkt?"+q.Encode(), nil))
			got = append(got, prefixesAndKeys(res)...)
			if !res.IsTruncated {
				break
			}
			next = res.NextMarker
			if v2 {
				next = res.NextContinuationToken
				if *res.KeyCount != 2 {
					t.Errorf("KeyCount = %d, want 2", *res.KeyCount)
				}
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("v2=%v: paged listing = %v, want %v", v2, got, want)
		}
	}
}

// prefixesAndKeys merges a page's prefixes and keys in key order.
func prefixesAndKeys(res listResult) []string {
	all := append(prefixesOf(res), keysOf(res)...)
	for i := 1; i < len(all); i++ {
		for j := i; j > 0 && all[j] < all[j-1]; j-- {
			all[j], all[j-1] = all[j-1], all[j]
		}
	}
	return all
}
