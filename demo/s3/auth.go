package s3

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Signature checks of the demo backend. tollgate itself never verifies signatures (the storage
// does); this is what makes a forged request to the demo fail as it would at S3, so that the
// gateway's refund of such requests can be tested with real clients.

const (
	v4Algorithm = "AWS4-HMAC-SHA256"
	v4Time      = "20060102T150405Z"
	maxPresign  = 7 * 24 * time.Hour
)

func errAccessKey() *apiError {
	return newError(http.StatusForbidden, "InvalidAccessKeyId",
		"The AWS Access Key Id you provided does not exist in our records.")
}

func errSignature() *apiError {
	return newError(http.StatusForbidden, "SignatureDoesNotMatch",
		"The request signature we calculated does not match the signature you provided.")
}

func errMalformed(what string) *apiError {
	return newError(http.StatusBadRequest, "AuthorizationHeaderMalformed", "%s", what)
}

// authenticate checks the credentials a request carries, if any: SigV4 or SigV2, in the
// Authorization header or a presigned URL. A request without any is anonymous and allowed.
func (s *Server) authenticate(r *http.Request) *apiError {
	auth := r.Header.Get("Authorization")
	q := r.URL.Query()
	switch {
	case strings.HasPrefix(auth, v4Algorithm+" "):
		return s.checkV4Header(r, strings.TrimPrefix(auth, v4Algorithm+" "))
	case strings.HasPrefix(auth, "AWS "):
		return s.checkV2Header(r, strings.TrimPrefix(auth, "AWS "))
	case auth != "":
		return errMalformed("Unsupported Authorization type.")
	case q.Get("X-Amz-Algorithm") != "":
		return s.checkV4Query(r, q)
	case q.Has("AWSAccessKeyId") || q.Has("Signature"):
		return s.checkV2Query(r, q)
	}
	return nil
}

func (s *Server) secret(key string) (string, *apiError) {
	secret, ok := s.o.Credentials[key]
	if !ok || key == "" {
		return "", errAccessKey()
	}
	return secret, nil
}

// --- SigV4 ---

type v4Params struct {
	key, date, region, service string
	signedHeaders              []string
	signature                  string
}

// parseCredential reads AKID/yyyymmdd/region/service/aws4_request.
func parseCredential(c string) (v4Params, bool) {
	f := strings.Split(c, "/")
	if len(f) != 5 || f[4] != "aws4_request" {
		return v4Params{}, false
	}
	return v4Params{key: f[0], date: f[1], region: f[2], service: f[3]}, true
}

func (s *Server) checkV4Header(r *http.Request, rest string) *apiError {
	var p v4Params
	var ok bool
	fields := map[string]string{}
	for _, part := range strings.Split(rest, ",") {
		k, v, found := strings.Cut(strings.TrimSpace(part), "=")
		if !found {
			return errMalformed("The authorization header is malformed.")
		}
		fields[k] = v
	}
	if p, ok = parseCredential(fields["Credential"]); !ok || fields["SignedHeaders"] == "" || fields["Signature"] == "" {
		return errMalformed("The authorization header is malformed.")
	}
	p.signedHeaders = strings.Split(fields["SignedHeaders"], ";")
	p.signature = fields["Signature"]
	secret, err := s.secret(p.key)
	if err != nil {
		return err
	}
	amzDate := r.Header.Get("X-Amz-Date")
	if amzDate == "" {
		if d, perr := http.ParseTime(r.Header.Get("Date")); perr == nil {
			amzDate = d.UTC().Format(v4Time)
		}
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		payload = "UNSIGNED-PAYLOAD"
	}
	return verifyV4(r, p, secret, amzDate, payload, r.URL.Query())
}

func (s *Server) checkV4Query(r *http.Request, q url.Values) *apiError {
	if q.Get("X-Amz-Algorithm") != v4Algorithm {
		return errMalformed("X-Amz-Algorithm must be " + v4Algorithm + ".")
	}
	p, ok := parseCredential(q.Get("X-Amz-Credential"))
	if !ok || q.Get("X-Amz-SignedHeaders") == "" || q.Get("X-Amz-Signature") == "" {
		return newError(http.StatusBadRequest, "AuthorizationQueryParametersError", "Presigned URL parameters are missing.")
	}
	p.signedHeaders = strings.Split(q.Get("X-Amz-SignedHeaders"), ";")
	p.signature = q.Get("X-Amz-Signature")
	secret, err := s.secret(p.key)
	if err != nil {
		return err
	}
	t, perr := time.Parse(v4Time, q.Get("X-Amz-Date"))
	exp, eerr := strconv.Atoi(q.Get("X-Amz-Expires"))
	if perr != nil || eerr != nil || exp < 1 || time.Duration(exp)*time.Second > maxPresign {
		return newError(http.StatusBadRequest, "AuthorizationQueryParametersError", "X-Amz-Date or X-Amz-Expires is invalid.")
	}
	if time.Now().After(t.Add(time.Duration(exp) * time.Second)) {
		return newError(http.StatusForbidden, "AccessDenied", "Request has expired")
	}
	rest := url.Values{}
	for k, v := range q {
		if k != "X-Amz-Signature" {
			rest[k] = v
		}
	}
	payload := "UNSIGNED-PAYLOAD"
	if v := r.Header.Get("X-Amz-Content-Sha256"); v != "" && contains(p.signedHeaders, "x-amz-content-sha256") {
		payload = v
	}
	return verifyV4(r, p, secret, q.Get("X-Amz-Date"), payload, rest)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func verifyV4(r *http.Request, p v4Params, secret, amzDate, payload string, query url.Values) *apiError {
	if len(amzDate) < 8 || amzDate[:8] != p.date {
		return errSignature()
	}
	var canon strings.Builder
	canon.WriteString(r.Method + "\n")
	canon.WriteString(uriEncode(r.URL.Path, false) + "\n")
	canon.WriteString(canonicalQuery(query) + "\n")
	for _, h := range p.signedHeaders {
		canon.WriteString(h + ":" + headerValue(r, h) + "\n")
	}
	canon.WriteString("\n" + strings.Join(p.signedHeaders, ";") + "\n" + payload)
	sum := sha256.Sum256([]byte(canon.String()))
	scope := p.date + "/" + p.region + "/" + p.service + "/aws4_request"
	toSign := v4Algorithm + "\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
	k := hmacSHA256([]byte("AWS4"+secret), p.date)
	for _, part := range []string{p.region, p.service, "aws4_request"} {
		k = hmacSHA256(k, part)
	}
	want := hex.EncodeToString(hmacSHA256(k, toSign))
	if !hmac.Equal([]byte(want), []byte(strings.ToLower(p.signature))) {
		return errSignature()
	}
	return nil
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// headerValue is a signed header's canonical value: the values joined by ",", each trimmed with
// inner runs of spaces collapsed; "host" is the request's Host.
func headerValue(r *http.Request, name string) string {
	var vals []string
	switch name {
	case "host":
		vals = []string{r.Host}
	case "content-length":
		vals = r.Header.Values("Content-Length")
		if len(vals) == 0 && r.ContentLength >= 0 {
			vals = []string{strconv.FormatInt(r.ContentLength, 10)}
		}
	default:
		vals = r.Header.Values(name)
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = strings.Join(strings.Fields(v), " ")
	}
	return strings.Join(out, ",")
}

// uriEncode is SigV4's encoding: every byte but A-Z a-z 0-9 - . _ ~ as %XX (and '/' kept in
// paths).
func uriEncode(s string, encodeSlash bool) string {
	const hexd = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~' || (c == '/' && !encodeSlash) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexd[c>>4])
		b.WriteByte(hexd[c&15])
	}
	return b.String()
}

func canonicalQuery(q url.Values) string {
	var pairs []string
	for k, vs := range q {
		for _, v := range vs {
			pairs = append(pairs, uriEncode(k, true)+"="+uriEncode(v, true))
		}
	}
	sort.Strings(pairs)
	return strings.Join(pairs, "&")
}

// --- SigV2 ---

// v2SubResources are the query parameters that are part of SigV2's canonical resource.
var v2SubResources = map[string]bool{
	"acl": true, "cors": true, "delete": true, "lifecycle": true, "location": true, "logging": true,
	"notification": true, "partNumber": true, "policy": true, "requestPayment": true, "restore": true,
	"tagging": true, "torrent": true, "uploadId": true, "uploads": true, "versionId": true,
	"versioning": true, "versions": true, "website": true, "select": true, "select-type": true,
	"response-cache-control": true, "response-content-disposition": true, "response-content-encoding": true,
	"response-content-language": true, "response-content-type": true, "response-expires": true,
}

func (s *Server) checkV2Header(r *http.Request, rest string) *apiError {
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return errMalformed("The authorization header is malformed.")
	}
	key, sig := rest[:i], rest[i+1:]
	secret, err := s.secret(key)
	if err != nil {
		return err
	}
	date := r.Header.Get("Date")
	if r.Header.Get("X-Amz-Date") != "" {
		date = ""
	}
	return s.verifyV2(r, secret, date, sig)
}

func (s *Server) checkV2Query(r *http.Request, q url.Values) *apiError {
	secret, err := s.secret(q.Get("AWSAccessKeyId"))
	if err != nil {
		return err
	}
	exp, perr := strconv.ParseInt(q.Get("Expires"), 10, 64)
	if perr != nil {
		return newError(http.StatusForbidden, "AccessDenied", "Query-string authentication requires Expires.")
	}
	if time.Now().Unix() > exp {
		return newError(http.StatusForbidden, "AccessDenied", "Request has expired")
	}
	return s.verifyV2(r, secret, q.Get("Expires"), q.Get("Signature"))
}

func (s *Server) verifyV2(r *http.Request, secret, date, sig string) *apiError {
	var b strings.Builder
	b.WriteString(r.Method + "\n" + r.Header.Get("Content-MD5") + "\n" + r.Header.Get("Content-Type") + "\n" + date + "\n")
	var amz []string
	for k := range r.Header {
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "x-amz-") {
			amz = append(amz, lk)
		}
	}
	sort.Strings(amz)
	for _, k := range amz {
		b.WriteString(k + ":" + headerValue(r, k) + "\n")
	}
	if bucket, ok := s.hostBucket(r); ok {
		b.WriteString("/" + bucket)
	}
	path := r.URL.EscapedPath()
	if raw, _, ok := strings.Cut(r.RequestURI, "?"); ok || raw != "" {
		if strings.HasPrefix(raw, "/") {
			path = raw
		}
	}
	b.WriteString(path)
	var subs []string
	for k, vs := range r.URL.Query() {
		if !v2SubResources[k] {
			continue
		}
		for _, v := range vs {
			if v == "" {
				subs = append(subs, k)
			} else {
				subs = append(subs, k+"="+v)
			}
		}
	}
	sort.Strings(subs)
	if len(subs) > 0 {
		b.WriteString("?" + strings.Join(subs, "&"))
	}
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(b.String()))
	want := base64.StdEncoding.EncodeToString(m.Sum(nil))
	if !hmac.Equal([]byte(want), []byte(sig)) {
		return errSignature()
	}
	return nil
}
