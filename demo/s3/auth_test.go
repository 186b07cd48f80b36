package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/minio/minio-go/v7"
	mcred "github.com/minio/minio-go/v7/pkg/credentials"
)

const (
	awsKey    = "AKIAIOSFODNN7EXAMPLE"
	awsSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
)

// The signature examples of AWS's documentation, checked by the backend's verifier (not by a
// signer of the same code): SigV4 "GET Object" and SigV2 "Object GET", both virtual-hosted.
func TestSignatureExamplesOfTheAWSDocumentation(t *testing.T) {
	s := New(Options{Credentials: map[string]string{awsKey: awsSecret}, Domains: []string{"s3.amazonaws.com"}})
	v4 := httptest.NewRequest("GET", "/test.txt", nil)
	v4.Host = "examplebucket.s3.amazonaws.com"
	v4.Header.Set("Range", "bytes=0-9")
	v4.Header.Set("x-amz-content-sha256", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
	v4.Header.Set("x-amz-date", "20130524T000000Z")
	v4.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"+
		"SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"+
		"Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
	if err := s.authenticate(v4); err != nil {
		t.Fatalf("SigV4 example refused: %v", err)
	}
	v4.Header.Set("Range", "bytes=0-10")
	if err := s.authenticate(v4); err == nil || err.Code != "SignatureDoesNotMatch" {
		t.Fatalf("SigV4 example with another range: %v", err)
	}

	v2 := httptest.NewRequest("GET", "/photos/puppy.jpg", nil)
	v2.Host = "johnsmith.s3.amazonaws.com"
	v2.Header.Set("Date", "Tue, 27 Mar 2007 19:36:42 +0000")
	v2.Header.Set("Authorization", "AWS AKIAIOSFODNN7EXAMPLE:bWq2s1WEIj+Ydj0vQ697zp+IXMU=")
	if err := s.authenticate(v2); err != nil {
		t.Fatalf("SigV2 example refused: %v", err)
	}
	v2.Header.Set("Authorization", "AWS AKIAIOSFODNN7EXAMPLF:bWq2s1WEIj+Ydj0vQ697zp+IXMU=")
	if err := s.authenticate(v2); err == nil || err.Code != "InvalidAccessKeyId" {
		t.Fatalf("SigV2 example with another key: %v", err)
	}
}

func sdkClient(url, key, secret string) *s3.Client {
	return s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(url), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(key, secret, ""),
		Retryer:     aws.NopRetryer{}})
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// Real SDKs: signed requests with a known key are served, a wrong secret and an unknown key are
// refused as S3 does, presigned URLs work until they expire or are changed, and anonymous
// requests are served.
func TestRealSDKsAgainstTheSignatureChecks(t *testing.T) {
	b := start(t, Options{Credentials: map[string]string{awsKey: awsSecret, "minio-user": "minio-secret-1"}})
	ctx := context.Background()
	good := sdkClient(b.url, awsKey, awsSecret)
	if _, err := good.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("sdk-bkt")}); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 6<<20+123)
	_, _ = rand.Read(body)
	if _, err := good.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("sdk-bkt"), Key: aws.String("a b+c~d"),
		Body: bytes.NewReader(body)}); err != nil {
		t.Fatalf("signed put: %v", err)
	}
	out, err := good.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("sdk-bkt"), Key: aws.String("a b+c~d"),
		Range: aws.String("bytes=5-14")})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(out.Body)
	if !bytes.Equal(got, body[5:15]) {
		t.Fatalf("ranged get: %x", got)
	}
	_, err = sdkClient(b.url, awsKey, "wrong-secret").ListBuckets(ctx, &s3.ListBucketsInput{})
	if apiCode(err) != "SignatureDoesNotMatch" {
		t.Fatalf("wrong secret: %v", err)
	}
	_, err = sdkClient(b.url, "AKIAUNKNOWNUNKNOWN00", awsSecret).ListBuckets(ctx, &s3.ListBucketsInput{})
	if apiCode(err) != "InvalidAccessKeyId" {
		t.Fatalf("unknown key: %v", err)
	}

	ps := s3.NewPresignClient(good)
	req, err := ps.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("sdk-bkt"), Key: aws.String("a b+c~d")},
		s3.WithPresignExpires(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if r := (&backend{t: t}).get(req.URL); r.code != 200 || r.body != string(body) {
		t.Fatalf("presigned get: %d", r.code)
	}
	if r := (&backend{t: t}).get(strings.Replace(req.URL, "X-Amz-Signature=", "X-Amz-Signature=0", 1)); r.code != 403 {
		t.Fatalf("changed presigned url: %d", r.code)
	}
	// presigned an hour ago for one second
	exp, _ := http.NewRequest("GET", b.url+"/sdk-bkt/streamed?X-Amz-Expires=1", nil)
	oldURL, _, err := v4.NewSigner().PresignHTTP(ctx, aws.Credentials{AccessKeyID: awsKey, SecretAccessKey: awsSecret},
		exp, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if r := (&backend{t: t}).get(oldURL); r.code != 403 || !strings.Contains(r.body, "AccessDenied") {
		t.Fatalf("expired presigned url: %d %s", r.code, r.body)
	}
	// anonymous: served as a public bucket would be
	b.must(200, "GET", "/sdk-bkt/a%20b+c~d", nil)

	// minio-go signs uploads over plain HTTP as aws-chunked streams (STREAMING-AWS4-HMAC-SHA256-PAYLOAD)
	mc, err := minio.New(strings.TrimPrefix(b.url, "http://"), &minio.Options{
		Creds: mcred.NewStaticV4("minio-user", "minio-secret-1", ""), Secure: false, Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mc.PutObject(ctx, "sdk-bkt", "streamed", bytes.NewReader(body), int64(len(body)),
		minio.PutObjectOptions{DisableMultipart: true}); err != nil {
		t.Fatalf("minio streaming put: %v", err)
	}
	o, err := mc.GetObject(ctx, "sdk-bkt", "streamed", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(o); !bytes.Equal(got, body) {
		t.Fatalf("streamed object differs (%d bytes)", len(got))
	}
	// UploadPartCopy through ComposeObject (two ranges of the object, each a copied part)
	src := []minio.CopySrcOptions{
		{Bucket: "sdk-bkt", Object: "streamed", MatchRange: true, Start: 0, End: 5<<20 - 1},
		{Bucket: "sdk-bkt", Object: "streamed", MatchRange: true, Start: 5 << 20, End: int64(len(body)) - 1},
	}
	_, err = mc.ComposeObject(ctx, minio.CopyDestOptions{Bucket: "sdk-bkt", Object: "composed"}, src...)
	if err != nil {
		t.Fatalf("compose (UploadPartCopy): %v", err)
	}
	o, _ = mc.GetObject(ctx, "sdk-bkt", "composed", minio.GetObjectOptions{})
	if got, _ := io.ReadAll(o); !bytes.Equal(got, body) {
		t.Fatalf("composed object differs (%d bytes)", len(got))
	}
	bad, _ := minio.New(strings.TrimPrefix(b.url, "http://"), &minio.Options{
		Creds: mcred.NewStaticV4("minio-user", "not-the-secret", ""), Secure: false, Region: "us-east-1"})
	_, err = bad.PutObject(ctx, "sdk-bkt", "forged", bytes.NewReader(body[:1000]), 1000, minio.PutObjectOptions{})
	if minio.ToErrorResponse(err).Code != "SignatureDoesNotMatch" {
		t.Fatalf("forged minio put: %v", err)
	}
}

func (b *backend) get(url string) reply {
	b.t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return reply{code: resp.StatusCode, header: resp.Header, body: string(data)}
}
